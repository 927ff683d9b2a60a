//! The criterion results, read from the JSON criterion leaves in
//! `target/criterion/<group>/<function>/new/` (a lone `bench_function` is its own group).

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::record::{Record, Section, Stats, Unit};
use crate::render::format_ns;

/// One criterion benchmark's median time per iteration.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// Median time per iteration, nanoseconds.
    pub median_ns: f64,
    /// The median's confidence interval, nanoseconds.
    pub low_ns: f64,
    /// The median's confidence interval, nanoseconds.
    pub high_ns: f64,
    /// Elements per iteration, when the bench declared a throughput in elements.
    pub elements: Option<u64>,
}

impl Estimate {
    /// Elements per second at the median, when the bench counts elements.
    pub fn per_second(&self) -> Option<f64> {
        let elements = self.elements?;
        (self.median_ns > 0.0).then(|| elements as f64 * 1e9 / self.median_ns)
    }
}

/// Reads `dir/<id>/new/estimates.json` (and `benchmark.json` beside it for the throughput);
/// `None` when the bench has not been run.
pub fn read(dir: &Path, id: &str) -> Result<Option<Estimate>> {
    let new = dir.join(id).join("new");
    let file = new.join("estimates.json");
    if !file.exists() {
        return Ok(None);
    }
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let estimates: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
    let median = &estimates["median"];
    let number = |v: &Value| {
        v.as_f64()
            .with_context(|| format!("{}: no median in {}", id, file.display()))
    };
    let benchmark = std::fs::read_to_string(new.join("benchmark.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok());
    let elements = benchmark
        .as_ref()
        .and_then(|b| b["throughput"]["Elements"].as_u64());
    Ok(Some(Estimate {
        median_ns: number(&median["point_estimate"])?,
        low_ns: number(&median["confidence_interval"]["lower_bound"])?,
        high_ns: number(&median["confidence_interval"]["upper_bound"])?,
        elements,
    }))
}

/// Criterion ids the report reads: the full evaluation, path resolution included.
pub const POLICY_ID: &str = "policy_evaluate_write_file_10_deny_globs";
/// The same evaluation with a resolver that makes no system call: the gates and globs alone.
pub const GATES_ID: &str = "policy_gates_write_file_10_deny_globs";
/// See [`POLICY_ID`].
pub const SIMULATE_ID: &str = "simulate_pipeline_20_leaves";
/// See [`POLICY_ID`].
pub const GROUP_COMMIT_ID: &str = "journal_append_8_writers/group_commit";
/// See [`POLICY_ID`].
pub const PER_RECORD_ID: &str = "journal_append_8_writers/flush_per_record";
/// See [`POLICY_ID`]: one `symlink_metadata` call, the price of a system call of the full
/// evaluation.
pub const METADATA_ID: &str = "metadata_call";

/// Metadata calls one full evaluation in the policy bench makes: its `write_file` of
/// `src/main.rs`, from a session in `~/project`, is resolved from the nearest anchor (`~`, the
/// write root and the policy's workdir) with one `openat2` of the whole path with
/// `RESOLVE_NO_SYMLINKS`: `project/src/main.rs` is missing (the file is about to be written),
/// and `ENOENT` with no symlink met says the path is its own resolution. (Before, one probe per
/// component below the anchor: three calls.)
pub const METADATA_CALLS_PER_EVALUATION: u32 = 1;

/// A criterion row: the median and its confidence interval, or why there is none.
fn criterion(s: &mut Section, row: &str, what: impl Into<String>, estimate: Option<&Estimate>) {
    let Some(e) = estimate else {
        let why = "criterion has no estimate (run the bench first)";
        return s.not_run(row, what, why);
    };
    let stats = Stats {
        median: e.median_ns,
        ci95: Some([e.low_ns, e.high_ns]),
        ..Stats::default()
    };
    s.lane(row, None, Unit::Ns, stats, Vec::new()).what(what);
}

/// The policy and journal sections, from the criterion results in `dir`; `temp_fs` is the
/// file system the metadata call was timed on.
pub fn records(dir: &Path, temp_fs: &str) -> Result<Vec<Record>> {
    let [policy, gates, simulate, group, single, metadata] = [
        POLICY_ID,
        GATES_ID,
        SIMULATE_ID,
        GROUP_COMMIT_ID,
        PER_RECORD_ID,
        METADATA_ID,
    ]
    .map(|id| read(dir, id));
    let (policy, gates, metadata) = (policy?, gates?, metadata?);
    let mut s = Section::new("policy");
    let evaluate = "policy: evaluate a write_file, 10 deny globs";
    let full = format!("{evaluate} (full: gates, globs and real path resolution)");
    criterion(&mut s, POLICY_ID, full, policy.as_ref());
    let alone = format!("{evaluate} (gates and globs alone, no system calls)");
    criterion(&mut s, GATES_ID, alone, gates.as_ref());
    let what = "policy: simulate a 20-leaf pipeline";
    criterion(&mut s, SIMULATE_ID, what, simulate?.as_ref());
    let what =
        format!("one `std::fs::symlink_metadata` call on a file in the temp dir ({temp_fs})");
    criterion(&mut s, METADATA_ID, what, metadata.as_ref());
    let n = METADATA_CALLS_PER_EVALUATION;
    s.number("calls", f64::from(n));
    if let (Some(full), Some(gates), Some(m)) = (&policy, &gates, &metadata) {
        let calls = f64::from(n) * m.median_ns;
        let parts = [
            (
                format!("gates and 10 deny globs (`{GATES_ID}`, median)"),
                gates.median_ns,
            ),
            (
                format!(
                    "{n} system call{} × {} (each priced as one metadata call)",
                    if n == 1 { "" } else { "s" },
                    format_ns(m.median_ns)
                ),
                calls,
            ),
            ("sum".into(), gates.median_ns + calls),
            (
                format!("measured full evaluation (`{POLICY_ID}`, median)"),
                full.median_ns,
            ),
        ];
        let lines = parts.map(|(part, ns)| vec![part, format_ns(ns)]).into();
        s.table("parts", &["part of the full evaluation", "time"], lines);
    }
    let mut out = s.finish();
    let mut s = Section::new("journal");
    let (group, single) = (group?, single?);
    let what = "records an iteration, time per iteration";
    let what = |how| format!("{how}, 400 {what}");
    criterion(
        &mut s,
        GROUP_COMMIT_ID,
        what("group commit"),
        group.as_ref(),
    );
    criterion(
        &mut s,
        PER_RECORD_ID,
        what("flush-per-record"),
        single.as_ref(),
    );
    let row = "journal_append_8_writers";
    let what = "journal: group commit over flush-per-record, 8 writers, records/s at the median";
    let rate = |e: &Option<Estimate>| e.as_ref().and_then(Estimate::per_second);
    match (rate(&group), rate(&single)) {
        (Some(group), Some(single)) => {
            s.value(row, None, Unit::PerSecond, group).what(what);
            s.value(row, Some("flush-per-record"), Unit::PerSecond, single);
            s.ratio(row, (single > 0.0).then(|| group / single));
        }
        _ => s.not_run(row, what, "a journal bench has no estimate"),
    }
    out.extend(s.finish());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_median_and_throughput() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("group/function/new");
        std::fs::create_dir_all(&new).unwrap();
        let ci = |lo: f64, hi: f64| serde_json::json!({"confidence_level": 0.95, "lower_bound": lo, "upper_bound": hi});
        let estimate = |p: f64| serde_json::json!({"confidence_interval": ci(p - 1.0, p + 1.0), "point_estimate": p, "standard_error": 0.5});
        let estimates = serde_json::json!({
            "mean": estimate(2100.0), "median": estimate(2000.0), "median_abs_dev": estimate(10.0),
            "slope": null, "std_dev": estimate(30.0)
        });
        std::fs::write(new.join("estimates.json"), estimates.to_string()).unwrap();
        std::fs::write(
            new.join("benchmark.json"),
            r#"{"group_id":"group","function_id":"function","value_str":null,"throughput":{"Elements":400},"full_id":"group/function","directory_name":"group/function","title":"group/function"}"#,
        )
        .unwrap();
        let e = read(dir.path(), "group/function").unwrap().unwrap();
        assert_eq!(e.median_ns, 2000.0);
        assert_eq!((e.low_ns, e.high_ns), (1999.0, 2001.0));
        assert_eq!(e.elements, Some(400));
        assert!((e.per_second().unwrap() - 200_000_000.0).abs() < 1e-3);
        assert!(read(dir.path(), "missing").unwrap().is_none());
    }
}
