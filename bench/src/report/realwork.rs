//! The real-work section's rows and blocks: each workload through `run_command` beside the same
//! command bare (paired rounds, the ratio pair by pair), the journal's bytes per byte changed,
//! and aido's memory for a 2 GiB change set.

use std::time::Duration;

use super::schema::{Fact, Outcome, Peer, Row, Section, Unit, Value};
use super::{beside, format_bytes, format_duration, once, row, samples, table};
use crate::realwork::{BIG_BYTES, NOOP_FACTOR, NOOP_PLUS, RealworkRun, RealworkSection, Workload};

const S: &str = "realwork";

/// Row ids, in report order (the workloads', then the no-op's margin, then memory).
const IDS: [&str; 7] = [
    "realwork_venv",
    "realwork_wheels",
    "realwork_cargo_noop",
    "realwork_cargo_noop_margin",
    "realwork_loop",
    "realwork_big_file",
    "realwork_big_file_memory",
];

fn ratio_value(x: f64) -> Value {
    Value {
        unit: Unit::Ratio,
        median: (x * 100.0).round() / 100.0,
        ..Value::default()
    }
}

fn bytes(b: u64) -> Value {
    Value {
        unit: Unit::Bytes,
        median: b as f64,
        ..Value::default()
    }
}

/// A workload through aido beside bare, with the pair-by-pair ratio.
fn workload_row(w: &Workload) -> Row {
    let what = format!(
        "real work: {} through `run_command` over MCP / the same command bare, wall time per run",
        w.name
    );
    beside(
        row(
            S,
            format!("realwork_{}", w.id),
            what,
            Outcome::Measured(samples(&w.aido)),
        ),
        Peer {
            name: "bare".into(),
            value: samples(&w.bare),
        },
        Some((w.ratio() * 100.0).round() / 100.0),
    )
}

/// The section, its rows into `rows`; `extra` parameters for its notes.
pub(crate) fn section(
    realwork: &RealworkSection,
    rows: &mut Vec<Row>,
    extra: &[(&str, Fact)],
) -> Section {
    let run = match realwork {
        RealworkSection::Ran(run) => run,
        RealworkSection::Skipped(why) | RealworkSection::Failed(why) => {
            for id in IDS {
                let outcome = match realwork {
                    RealworkSection::Skipped(_) => Outcome::NotRun(why.clone()),
                    _ => Outcome::Failed(why.clone()),
                };
                rows.push(row(S, id, "see the real-work section", outcome));
            }
            return super::section(S, extra, Vec::new());
        }
    };
    for w in &run.workloads {
        rows.push(workload_row(w));
        if w.id == "cargo_noop" {
            rows.push(row(
                S,
                "realwork_cargo_noop_margin",
                format!(
                    "real work: the no-op `cargo build` through aido less {NOOP_FACTOR} × bare, median over the pairs (the goal: at most {NOOP_FACTOR}× bare plus {})",
                    format_duration(NOOP_PLUS)
                ),
                Outcome::Measured(Value {
                    unit: Unit::Ns,
                    median: w.margin_ns(NOOP_FACTOR),
                    n: Some(w.aido.len() as u64),
                    ..Value::default()
                }),
            ));
        }
    }
    let big = &run.big;
    rows.push(beside(
        row(
            S,
            "realwork_big_file",
            "real work: one command writing a 2 GiB change set (two 1 GiB files) through `run_command` / bare, wall time",
            Outcome::Measured(once(big.aido)),
        ),
        Peer {
            name: "bare".into(),
            value: once(big.bare),
        },
        Some((big.aido.as_secs_f64() / big.bare.as_secs_f64().max(1e-9) * 100.0).round() / 100.0),
    ));
    rows.push(row(
        S,
        "realwork_big_file_memory",
        "real work: aido's peak resident memory (VmHWM) after a command's 2 GiB change set (two 1 GiB files), less its resident memory before",
        Outcome::Measured(bytes(big.rss_peak.saturating_sub(big.rss_before))),
    ));
    for (id, name, per_byte) in run
        .workloads
        .iter()
        .filter_map(|w| w.journal_per_byte().map(|p| (w.id, w.name.as_str(), p)))
        .chain(std::iter::once((
            "big_file",
            "a 2 GiB change set (two 1 GiB files)",
            big.journal_bytes as f64 / big.changed_bytes.max(1) as f64,
        )))
    {
        rows.push(row(
            S,
            format!("realwork_journal_per_byte_{id}"),
            format!(
                "real work: journal bytes per byte changed, {name} (AIDO_HOME's allocated growth / the bytes of the files written)"
            ),
            Outcome::Measured(ratio_value(per_byte)),
        ));
    }
    super::section(S, &params(run, extra), vec![("workloads", details(run))])
}

fn params<'a>(run: &RealworkRun, extra: &[(&'a str, Fact)]) -> Vec<(&'a str, Fact)> {
    let big = &run.big;
    let rounds = |id: &str| {
        run.workloads
            .iter()
            .find(|w| w.id == id)
            .map_or(0, |w| w.aido.len())
    };
    let ns = |d: Duration| d.as_nanos() as f64;
    let owned: Vec<(&'a str, Fact)> = vec![
        ("rounds", rounds("venv").into()),
        ("noop_rounds", rounds("cargo_noop").into()),
        ("wheels", run.wheels.join(", ").into()),
        ("big", BIG_BYTES.into()),
        ("big_aido", ns(big.aido).into()),
        ("big_bare", ns(big.bare).into()),
        ("big_rewind", ns(big.rewind).into()),
        ("rss_before", big.rss_before.into()),
        ("rss_peak", big.rss_peak.into()),
        ("big_journal", big.journal_bytes.into()),
        ("big_journal_apparent", big.journal_apparent_bytes.into()),
        ("one_file", big.one_file.clone().into()),
    ];
    owned.into_iter().chain(extra.iter().cloned()).collect()
}

fn details(run: &RealworkRun) -> super::schema::Table {
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
    let cells = run
        .workloads
        .iter()
        .map(|w| {
            vec![
                w.name.clone(),
                format!("`{}`", w.command),
                ms(crate::snapshots::median(&w.aido)),
                ms(crate::snapshots::median(&w.bare)),
                w.aido.len().to_string(),
                format!("{:.2}", w.ratio()),
                format_bytes(w.journal_bytes),
                format_bytes(w.changed_bytes),
                w.journal_per_byte()
                    .map_or_else(|| "-".to_owned(), |p| format!("{p:.2}")),
                format!("{:.1}", w.rss_growth as f64 / 1e6),
            ]
        })
        .collect();
    table(
        &[
            "workload",
            "command",
            "aido ms (median)",
            "bare ms (median)",
            "pairs",
            "ratio (median of pairs)",
            "journal grew (allocated, all pairs)",
            "files written (bytes, all pairs)",
            "journal bytes per byte",
            "aido memory growth MB",
        ],
        cells,
    )
}
