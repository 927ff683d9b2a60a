//! docs/BENCHMARKS.md from the records alone: every row judged against its goal in
//! bench/targets.toml, the figures formatted, and bench/report.md.j2 (minijinja) lays out the
//! report and holds every section's prose.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::record::{RATIO, Record, Stats, Unit};

/// The results file.
pub const RESULTS_FILE: &str = "docs/benchmarks.json";

const TEMPLATE: &str = include_str!("../report.md.j2");
const TARGETS: &str = include_str!("../targets.toml");

/// Every goal, in summary order.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Targets {
    target: Vec<Goal>,
}

/// One row's goal.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Goal {
    row: String,
    of: Option<Of>,
    below: Option<f64>,
    above: Option<f64>,
    unit: Option<Unit>,
    reference: Option<String>,
    none: Option<String>,
}

/// Which statistic a goal judges.
#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Of {
    Median,
    Max,
    Ratio,
}

/// A detail table.
#[derive(Default, Serialize)]
struct Table {
    head: Vec<String>,
    lines: Vec<Vec<String>>,
}

/// One section's rows, facts and tables.
#[derive(Default, Serialize)]
struct Part {
    rows: Vec<[String; 5]>,
    facts: BTreeMap<String, minijinja::Value>,
    tables: BTreeMap<String, Table>,
}

/// The limit of `row`'s goal in bench/targets.toml, in the row's unit (for prose that
/// states it).
pub fn limit(row: &str) -> Option<f64> {
    let targets: Targets = toml::from_str(TARGETS).ok()?;
    let goal = targets.target.into_iter().find(|g| g.row == row)?;
    goal.below.or(goal.above)
}

/// What the template sees.
#[derive(Serialize)]
struct Page<'a> {
    run: BTreeMap<String, String>,
    machine: Vec<Vec<String>>,
    summary: Vec<&'a [String]>,
    sections: BTreeMap<String, Part>,
}

/// Renders the report.
pub fn render(records: &[Record]) -> Result<String> {
    let targets: Targets = toml::from_str(TARGETS).context("bench/targets.toml")?;
    let goal = |row: &str| targets.target.iter().find(|g| g.row == row);
    let mut parts: BTreeMap<String, Part> = BTreeMap::new();
    let mut lines: BTreeMap<String, [String; 5]> = BTreeMap::new();
    let (mut run, mut machine) = (BTreeMap::new(), Vec::new());
    for (k, record) in records.iter().enumerate() {
        let part = parts.entry(record.section.clone()).or_default();
        let note = record.note.clone().unwrap_or_default();
        if record.section == "run" {
            run.insert(record.row.clone(), note);
        } else if record.section == "machine" {
            machine.push(vec![record.row.clone(), note]);
        } else if let Some((table, _)) = record.row.split_once(':') {
            cell(part.tables.entry(table.into()).or_default(), records, k);
        } else if record.unit.is_none() && record.error.is_none() {
            part.facts
                .insert(record.row.clone(), fact(record.value, note));
        } else if !lines.contains_key(&record.row) {
            let line = row(records, k, goal(&record.row))?;
            lines.insert(record.row.clone(), line.clone());
            part.rows.push(line);
        }
    }
    let summary: Vec<&[String]> = targets
        .target
        .iter()
        .filter_map(|g| lines.get(&g.row))
        .map(|l| &l[1..])
        .collect();
    let mut env = minijinja::Environment::new();
    // Number formats for the raw numbers of facts: `{{ f.calls | thousands }}`, and
    // `{{ f.flood_ns | fixed(2, 1e6) }}` (in ms, two places). A section that did not run has
    // no facts: its prose shows nothing there.
    let number = |value: minijinja::Value| f64::try_from(value).ok();
    env.add_filter("thousands", move |value| {
        number(value).map(thousands).unwrap_or_default()
    });
    env.add_filter("bytes", move |value| {
        number(value).map_or_else(String::new, |v| format_bytes(v as u64))
    });
    env.add_filter("duration", move |value| {
        number(value).map_or_else(String::new, format_ns)
    });
    env.add_filter("fixed", move |value, places: usize, per: Option<f64>| {
        number(value)
            .map(|v| format!("{:.places$}", v / per.unwrap_or(1.0)))
            .unwrap_or_default()
    });
    env.add_template("report", TEMPLATE)?;
    let context = minijinja::value::Serde(Page {
        run,
        machine,
        summary,
        sections: parts,
    });
    let text = env.get_template("report")?.render(context)?;
    let mut text = text.trim_end().to_owned();
    while text.contains("\n\n\n") {
        text = text.replace("\n\n\n", "\n\n");
    }
    Ok(text + "\n")
}

/// A fact as the template sees it: a whole number as an integer (shown without a point), any
/// other number as it is, or the fact's text.
fn fact(value: Option<f64>, note: String) -> minijinja::Value {
    match value {
        Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => minijinja::Value::from(v as i64),
        Some(v) => minijinja::Value::from(v),
        None => minijinja::Value::from(note),
    }
}

/// Adds the cell at `records[k]` to its table: a new line when its row is new.
fn cell(table: &mut Table, records: &[Record], k: usize) {
    let record = &records[k];
    let column = record.lane.clone().unwrap_or_default();
    if !table.head.contains(&column) {
        table.head.push(column);
    }
    let first = records[..k].iter().all(|r| r.row != record.row);
    if first {
        table.lines.push(Vec::new());
    }
    let text = match (&record.note, record.value) {
        (Some(note), _) => note.clone(),
        (None, Some(value)) => value.to_string(),
        (None, None) => String::new(),
    };
    if let Some(line) = table.lines.last_mut() {
        line.push(text);
    }
}

/// The row whose first record is `records[k]`, judged.
fn row(records: &[Record], k: usize, goal: Option<&Goal>) -> Result<[String; 5]> {
    let id = &records[k].row;
    let lanes: Vec<&Record> = records[k..].iter().filter(|r| &r.row == id).collect();
    let main = lanes[0];
    let ratio = lanes
        .iter()
        .find(|r| r.lane.as_deref() == Some(RATIO))
        .and_then(|r| r.value);
    let (measured, result) = if let Some(error) = &main.error {
        (error.clone(), "not run".to_owned())
    } else {
        let mut cell = figure(main);
        for peer in lanes[1..]
            .iter()
            .filter(|r| r.lane.as_deref() != Some(RATIO))
        {
            cell.push_str(&format!(
                "; {}: {}",
                peer.lane.as_deref().unwrap_or("peer"),
                figure(peer)
            ));
        }
        if let Some(ratio) = ratio {
            cell.push_str(&format!("; ratio **{ratio:.2}×**"));
        }
        (cell, judge(main, ratio, goal)?.to_owned())
    };
    Ok([
        format!("`{id}`"),
        main.note.clone().unwrap_or_default(),
        measured,
        target(goal),
        result,
    ])
}

fn stats(record: &Record) -> Stats {
    match (&record.stats, record.value) {
        (Some(stats), _) => stats.clone(),
        (None, Some(value)) => Stats {
            median: value,
            ..Stats::default()
        },
        (None, None) => Stats::range(&record.samples),
    }
}

/// A lane's figure: "2.35 µs median (95% CI ...)", "6.93 s median of 3 (6.75 s – 7.27 s)".
fn figure(record: &Record) -> String {
    let unit = record.unit.unwrap_or(Unit::Count);
    let v = stats(record);
    let f = |x: f64| number(unit, x);
    let mut cell = f(v.median);
    if v.n.is_some_and(|n| n > 1) || v.ci95.is_some() {
        cell.push_str(" median");
    }
    if let Some(n) = v.n.filter(|n| *n > 1) {
        cell.push_str(&format!(" of {n}"));
    }
    let mut extra = Vec::new();
    if let Some(p99) = v.p99 {
        extra.push(format!("p99 {}", f(p99)));
    }
    match (v.min, v.max) {
        (Some(lo), Some(hi)) => extra.push(format!("{} – {}", f(lo), f(hi))),
        (None, Some(hi)) => extra.push(format!("max {}", f(hi))),
        (Some(lo), None) => extra.push(format!("min {}", f(lo))),
        (None, None) => {}
    }
    if let Some([lo, hi]) = v.ci95 {
        extra.push(format!("95% CI {} – {}", f(lo), f(hi)));
    }
    if !extra.is_empty() {
        cell.push_str(&format!(" ({})", extra.join(", ")));
    }
    cell
}

/// "pass", "**FAIL**" or "—" (no goal).
fn judge(main: &Record, ratio: Option<f64>, goal: Option<&Goal>) -> Result<&'static str> {
    let Some(goal) = goal.filter(|g| g.none.is_none()) else {
        return Ok("—");
    };
    let v = stats(main);
    let judged = match goal.of {
        Some(Of::Median) => Some(v.median),
        Some(Of::Max) => v.max,
        Some(Of::Ratio) => ratio,
        None => bail!("the goal of {} names no statistic (`of`)", goal.row),
    };
    let pass = match (judged, goal.below, goal.above) {
        (Some(x), Some(limit), None) => x < limit,
        (Some(x), None, Some(limit)) => x > limit,
        (None, ..) => return Ok("not run"),
        _ => bail!("the goal of {} needs one of `below`, `above`", goal.row),
    };
    Ok(if pass { "pass" } else { "**FAIL**" })
}

/// The goal as the report states it: "< 2.00 µs median", "> 1× ratio".
fn target(goal: Option<&Goal>) -> String {
    let Some(goal) = goal else {
        return "none (informational)".into();
    };
    if let Some(reason) = &goal.none {
        return format!("none ({reason})");
    }
    let (sign, limit) = match (goal.below, goal.above) {
        (Some(limit), _) => ("<", limit),
        (None, Some(limit)) => (">", limit),
        (None, None) => return "none".into(),
    };
    let of = match goal.of {
        Some(Of::Max) => "max (every sample)",
        Some(Of::Ratio) => "ratio",
        Some(Of::Median) | None => "median",
    };
    let unit = goal.unit.unwrap_or(Unit::Count);
    let mut cell = format!("{sign} {} {of}", number(unit, limit));
    if let Some(reference) = &goal.reference {
        cell.push_str(&format!(" (reference system: {reference})"));
    }
    cell
}

fn number(unit: Unit, x: f64) -> String {
    match unit {
        Unit::Ns => format_ns(x),
        Unit::Bytes => format!("{:.1} MB", x / 1e6),
        Unit::PerSecond => format!("{}/s", thousands(x)),
        Unit::Ratio => format!("{x}×"),
        Unit::Count => thousands(x),
    }
}

/// Nanoseconds with three significant digits and a unit: "950 ns", "12.3 µs", "2.50 ms".
pub fn format_ns(ns: f64) -> String {
    let sign = if ns < 0.0 { "-" } else { "" };
    let ns = ns.abs();
    let (value, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    format!("{sign}{} {unit}", three_digits(value))
}

/// A duration as [`format_ns`] writes it.
pub fn format_duration(d: std::time::Duration) -> String {
    format_ns(d.as_nanos() as f64)
}

/// Bytes in binary units: "512 B", "20.5 KiB", "2.00 GiB".
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        return format!("{bytes} B");
    }
    format!("{} {}", three_digits(value), UNITS[unit])
}

fn three_digits(value: f64) -> String {
    let decimals = if value < 10.0 {
        2
    } else if value < 100.0 {
        1
    } else {
        0
    };
    format!("{value:.decimals$}")
}

/// A whole number with thousands separators: "1,234,567".
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_separators() {
        assert_eq!(format_ns(950.0), "950 ns");
        assert_eq!(format_ns(12_340.0), "12.3 µs");
        assert_eq!(format_ns(2_500_000.0), "2.50 ms");
        assert_eq!(thousands(1_234_567.4), "1,234,567");
        assert_eq!(format_bytes(2 << 30), "2.00 GiB");
        assert_eq!(format_bytes(512), "512 B");
    }

    #[test]
    fn every_goal_parses_and_names_a_statistic() {
        let targets: Targets = toml::from_str(TARGETS).unwrap();
        for goal in &targets.target {
            assert!(goal.none.is_some() || goal.of.is_some(), "{}", goal.row);
        }
    }

    /// The committed report is what the committed results render to, so the two never drift.
    #[test]
    fn the_committed_report_is_rendered_from_the_committed_results() {
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
        let records = crate::record::read(&docs.join("benchmarks.json")).unwrap();
        let report = std::fs::read_to_string(docs.join("BENCHMARKS.md")).unwrap();
        assert_eq!(render(&records).unwrap(), report);
    }
}
