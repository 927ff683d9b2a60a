//! One schema for every figure the bench produces: a [`Record`] is one lane of one row of one
//! section. System benches print them as JSON lines; docs/benchmarks.json is the list of them
//! (one record a line) and docs/BENCHMARKS.md is rendered from that list alone.
//!
//! What a record is follows from its fields:
//! - a measured lane has a `unit` and `samples`, `value` or `stats` (the summary, when the
//!   samples were too many to keep or came from criterion); the row's first record carries the
//!   row's description in `note`, a peer's lane is named by `lane`, and lane `ratio` is aido
//!   over the peer as the section paired them;
//! - a row that did not run has `error` ("not run: ...", "failed: ...");
//! - a fact the section's prose names has neither unit nor error (`note`, or a plain `value`);
//! - a detail table's cell has `row` = `TABLE:LINE` and `lane` = its column.
//!
//! ```text
//! {"section":"script","row":"script_host_call_vs_direct_call","unit":"ns","samples":[...],"note":"..."}
//! {"section":"script","row":"script_host_call_vs_direct_call","lane":"`file_info` over MCP","unit":"ns","samples":[...]}
//! {"section":"script","row":"host_calls","value":100}
//! ```

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::harness::Run;

/// The lane that holds a row's ratio (aido over the peer).
pub const RATIO: &str = "ratio";

/// One lane of one row of one section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// The section (`stdio`, `process`, `run`, `machine`).
    pub section: String,
    /// The row id, a fact's name, or `TABLE:LINE` for a detail table's cell.
    pub row: String,
    /// Whose figure: none for the row's own (aido's), a peer's name, [`RATIO`], or a column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane: Option<String>,
    /// The unit of `samples`, `value` and `stats`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<Unit>,
    /// Every sample, in the order taken.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<f64>,
    /// The one value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// The summary of samples not kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Stats>,
    /// The row's description, a fact's text, or a cell's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Why the row has no figure ("not run: ...", "failed: ...").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The unit of a record's numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Nanoseconds.
    #[default]
    Ns,
    /// Bytes (shown in decimal megabytes, as the issue states its figures).
    Bytes,
    /// Operations per second.
    PerSecond,
    /// A plain ratio.
    Ratio,
    /// A count.
    Count,
}

/// The summary of a lane's samples.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stats {
    /// The median.
    pub median: f64,
    /// The smallest sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// The largest sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// The 99th percentile (nearest rank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99: Option<f64>,
    /// How many samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    /// The median's 95% confidence interval (criterion's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci95: Option<[f64; 2]>,
}

impl Stats {
    /// Median, smallest and largest of `samples`.
    pub fn range(samples: &[f64]) -> Self {
        let sorted = sorted(samples);
        Self {
            median: median_of_sorted(&sorted),
            min: sorted.first().copied(),
            max: sorted.last().copied(),
            n: Some(sorted.len() as u64),
            ..Self::default()
        }
    }

    /// Latencies: the nearest-rank median and p99, the largest, and how many.
    pub fn latency(times: &[Duration]) -> Self {
        let at = |p| crate::harness::percentile(times, p).as_nanos() as f64;
        Self {
            median: at(50.0),
            p99: Some(at(99.0)),
            max: times.iter().max().map(|d| d.as_nanos() as f64),
            n: Some(times.len() as u64),
            ..Self::default()
        }
    }
}

fn sorted(samples: &[f64]) -> Vec<f64> {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
}

/// The lower median (the sample at `(n - 1) / 2`), as every section has reported it.
fn median_of_sorted(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n => sorted[(n - 1) / 2],
    }
}

/// Nanoseconds of each duration.
pub fn ns(values: &[Duration]) -> Vec<f64> {
    values.iter().map(|d| d.as_nanos() as f64).collect()
}

/// The records of one section, built in report order.
pub struct Section {
    /// Its id.
    pub id: String,
    /// What it recorded so far.
    pub records: Vec<Record>,
}

impl Section {
    /// An empty section.
    pub fn new(id: &str) -> Self {
        Self {
            id: id.into(),
            records: Vec::new(),
        }
    }

    fn push(&mut self, row: &str, lane: Option<&str>) -> &mut Record {
        self.records.push(Record {
            section: self.id.clone(),
            row: row.into(),
            lane: lane.map(str::to_owned),
            ..Record::default()
        });
        let last = self.records.len() - 1;
        &mut self.records[last]
    }

    /// A fact the prose names, as text.
    pub fn fact(&mut self, name: &str, text: impl Into<String>) {
        self.push(name, None).note = Some(text.into());
    }

    /// A fact the prose names, as a raw number the template formats.
    pub fn number(&mut self, name: &str, value: f64) {
        self.push(name, None).value = Some(value);
    }

    /// Facts the prose names, as raw numbers the template formats.
    pub fn numbers(&mut self, facts: &[(&str, f64)]) {
        for (name, value) in facts {
            self.number(name, *value);
        }
    }

    /// A row's lane with one value.
    pub fn value(&mut self, row: &str, lane: Option<&str>, unit: Unit, value: f64) -> &mut Record {
        let record = self.push(row, lane);
        record.unit = Some(unit);
        record.value = Some(value);
        record
    }

    /// A row's lane summarized by `stats` (its median alone is a plain `value`), with the
    /// samples it summarizes when they are kept.
    pub fn lane(
        &mut self,
        row: &str,
        lane: Option<&str>,
        unit: Unit,
        stats: Stats,
        samples: Vec<f64>,
    ) -> &mut Record {
        let record = self.push(row, lane);
        record.unit = Some(unit);
        record.samples = samples;
        let alone = Stats {
            median: stats.median,
            ..Stats::default()
        };
        if stats == alone {
            record.value = Some(stats.median);
        } else {
            record.stats = Some(stats);
        }
        record
    }

    /// A row's lane of timed samples, in the order taken: median, range and count, and every
    /// sample.
    pub fn times(&mut self, row: &str, lane: Option<&str>, times: &[Duration]) -> &mut Record {
        let samples = ns(times);
        self.lane(row, lane, Unit::Ns, Stats::range(&samples), samples)
    }

    /// A row's lane of one timed value.
    pub fn once(&mut self, row: &str, lane: Option<&str>, time: Duration) -> &mut Record {
        self.value(row, lane, Unit::Ns, time.as_nanos() as f64)
    }

    /// A row's ratio lane (aido over the peer), when there is one.
    pub fn ratio(&mut self, row: &str, ratio: Option<f64>) {
        if let Some(ratio) = ratio {
            self.value(row, Some(RATIO), Unit::Ratio, ratio);
        }
    }

    /// aido's timed samples beside a peer's, and the ratio of their medians.
    pub fn versus(
        &mut self,
        row: &str,
        what: impl Into<String>,
        ours: &[Duration],
        peer: &str,
        theirs: &[Duration],
    ) {
        let (a, b) = (median(&ns(ours)), median(&ns(theirs)));
        self.times(row, None, ours).what(what);
        self.times(row, Some(peer), theirs);
        self.ratio(row, (b > 0.0).then(|| a / b));
    }

    /// A row that did not run, and why.
    pub fn not_run(&mut self, row: &str, what: impl Into<String>, why: &str) {
        self.push(row, None).error = Some(format!("not run: {why}"));
        self.what(what);
    }

    /// A row that started and failed, and how.
    pub fn failed(&mut self, row: &str, what: impl Into<String>, why: &str) {
        self.push(row, None).error = Some(format!("failed: {why}"));
        self.what(what);
    }

    /// Sets the description of the last row.
    fn what(&mut self, what: impl Into<String>) {
        if let Some(last) = self.records.last_mut() {
            last.note = Some(what.into());
        }
    }

    /// A detail table: its columns, and its lines of cells.
    pub fn table(&mut self, name: &str, columns: &[&str], lines: Vec<Vec<String>>) {
        for (k, cells) in lines.into_iter().enumerate() {
            let cells: Vec<(&str, String)> = columns.iter().copied().zip(cells).collect();
            self.line(name, k + 1, &cells);
        }
    }

    /// The records in report order: facts, then table cells, then rows.
    pub fn finish(self) -> Vec<Record> {
        ordered(self.records)
    }

    /// The number of `table`'s next line.
    pub fn next_line(&self, table: &str) -> usize {
        let prefix = format!("{table}:");
        let mut lines: Vec<&str> = self.records.iter().map(|r| r.row.as_str()).collect();
        lines.retain(|row| row.starts_with(&prefix));
        lines.dedup();
        lines.len() + 1
    }

    /// A detail table's line: one cell per column, in order.
    pub fn line(&mut self, table: &str, line: usize, cells: &[(&str, String)]) {
        for (column, text) in cells {
            self.push(&format!("{table}:{line}"), Some(column)).note = Some(text.clone());
        }
    }
}

impl Record {
    /// Sets the row's description.
    pub fn what(&mut self, what: impl Into<String>) -> &mut Self {
        self.note = Some(what.into());
        self
    }
}

/// A section's records: those it made when it ran, or each of its judged `rows` (id,
/// description) saying why it did not run or how it failed.
pub fn section(id: &str, rows: &[(&str, &str)], run: Run<Vec<Record>>) -> Vec<Record> {
    let mut s = Section::new(id);
    for (row, what) in rows {
        match &run {
            Run::Ran(_) => {}
            Run::Skipped(why) => s.not_run(row, *what, why),
            Run::Failed(why) => s.failed(row, *what, why),
        }
    }
    match run {
        Run::Ran(records) => records,
        _ => s.finish(),
    }
}

/// Records of one section in report order: its facts, then its tables' cells, then its rows.
pub fn ordered(records: Vec<Record>) -> Vec<Record> {
    let rank = |r: &Record| match (r.unit.is_some() || r.error.is_some(), r.row.contains(':')) {
        (true, _) => 2,
        (false, true) => 1,
        (false, false) => 0,
    };
    let mut records = records;
    records.sort_by_key(rank);
    records
}

/// The lower median of unsorted samples; zero when there are none.
pub fn median(samples: &[f64]) -> f64 {
    median_of_sorted(&sorted(samples))
}

/// Prints records as JSON lines (what a section run alone shows).
pub fn print(records: &[Record]) {
    for record in records {
        if let Ok(line) = serde_json::to_string(record) {
            println!("{line}");
        }
    }
}

/// Reads a results file (a JSON list of records).
pub fn read(path: &Path) -> Result<Vec<Record>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("the records in {}", path.display()))
}

/// Writes a results file: a JSON list, one record a line, so a diff shows what changed.
pub fn write(path: &Path, records: &[Record]) -> Result<()> {
    let mut text = String::from("[\n");
    for (k, record) in records.iter().enumerate() {
        text.push_str(&serde_json::to_string(record)?);
        text.push_str(if k + 1 < records.len() { ",\n" } else { "\n" });
    }
    text.push_str("]\n");
    std::fs::write(path, text).with_context(|| format!("{}", path.display()))
}

/// `records` with every record of `section` replaced by `fresh` (where the old ones were, or
/// before the closing section when there were none).
pub fn merge(records: Vec<Record>, fresh: Vec<Record>) -> Vec<Record> {
    let Some(section) = fresh.first().map(|r| r.section.clone()) else {
        return records;
    };
    let at = records
        .iter()
        .position(|r| r.section == section)
        .or_else(|| records.iter().position(|r| r.section == "reproduce"))
        .unwrap_or(records.len());
    let mut out: Vec<Record> = Vec::with_capacity(records.len() + fresh.len());
    let mut fresh = Some(fresh);
    for (k, record) in records.into_iter().enumerate() {
        if k == at {
            out.extend(fresh.take().unwrap_or_default());
        }
        if record.section != section {
            out.push(record);
        }
    }
    out.extend(fresh.unwrap_or_default());
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|v| Duration::from_millis(*v)).collect()
    }

    #[test]
    fn a_row_beside_its_peer_has_three_lanes_and_the_ratio_of_the_medians() {
        let mut s = Section::new("x");
        s.versus("r", "what", &ms(&[3, 1, 2, 4]), "peer", &ms(&[4, 8]));
        let records = s.finish();
        assert_eq!(records.len(), 3);
        let [own, peer, ratio] = &records[..] else {
            unreachable!()
        };
        assert_eq!(
            (own.lane.as_deref(), own.note.as_deref()),
            (None, Some("what"))
        );
        assert_eq!(own.samples, [3e6, 1e6, 2e6, 4e6]);
        let stats = own.stats.clone().unwrap();
        // The lower median, the range and the count.
        assert_eq!(
            (stats.median, stats.min, stats.max),
            (2e6, Some(1e6), Some(4e6))
        );
        assert_eq!(stats.n, Some(4));
        assert_eq!(peer.lane.as_deref(), Some("peer"));
        assert_eq!(ratio.lane.as_deref(), Some(RATIO));
        assert_eq!(ratio.value, Some(0.5));
    }

    #[test]
    fn a_median_alone_is_a_plain_value() {
        let mut s = Section::new("x");
        let median = Stats {
            median: 7.0,
            ..Stats::default()
        };
        s.lane("a", None, Unit::Bytes, median, Vec::new());
        s.lane(
            "b",
            None,
            Unit::Bytes,
            Stats::latency(&ms(&[1, 2])),
            Vec::new(),
        );
        assert_eq!(
            (s.records[0].value, s.records[0].stats.is_none()),
            (Some(7.0), true)
        );
        let latency = s.records[1].stats.clone().unwrap();
        assert_eq!((latency.median, latency.p99), (1e6, Some(2e6)));
    }

    #[test]
    fn a_section_that_did_not_run_says_why_on_every_row() {
        let rows = [("a", "row a"), ("b", "row b")];
        let skipped = section("x", &rows, Run::Skipped("`--skip-x`".into()));
        let failed = Run::from(Err(anyhow::anyhow!("inner").context("outer")));
        let failed = section("x", &rows[..1], failed);
        let errors: Vec<_> = skipped
            .iter()
            .chain(&failed)
            .map(|r| r.error.as_deref())
            .collect();
        assert_eq!(
            errors,
            [
                Some("not run: `--skip-x`"),
                Some("not run: `--skip-x`"),
                Some("failed: outer: inner")
            ]
        );
        assert_eq!(skipped[1].note.as_deref(), Some("row b"));
        let measured = vec![Record::default()];
        assert_eq!(section("x", &rows, Run::Ran(measured.clone())), measured);
    }

    #[test]
    fn facts_come_before_table_cells_and_cells_before_rows() {
        let mut s = Section::new("x");
        s.value("row", None, Unit::Count, 1.0);
        s.table("t", &["c"], vec![vec!["cell".into()]]);
        s.fact("f", "text");
        s.number("n", 2.0);
        let rows: Vec<_> = s.finish().into_iter().map(|r| r.row).collect();
        assert_eq!(rows, ["f", "n", "t:1", "row"]);
    }
}
