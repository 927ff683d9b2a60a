//! The criterion results, read from the JSON criterion leaves in
//! `target/criterion/<group>/<function>/new/` (a lone `bench_function` is its own group).

use std::path::Path;
use std::time::SystemTime;

use anyhow::{Context, Result};
use serde_json::Value;

/// One criterion benchmark's median time per iteration.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// The id, `group` or `group/function`.
    pub id: String,
    /// Median time per iteration, nanoseconds.
    pub median_ns: f64,
    /// The median's confidence interval, nanoseconds.
    pub low_ns: f64,
    /// The median's confidence interval, nanoseconds.
    pub high_ns: f64,
    /// Elements per iteration, when the bench declared a throughput in elements.
    pub elements: Option<u64>,
    /// When criterion wrote the estimate.
    pub written: Option<SystemTime>,
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
        id: id.to_owned(),
        median_ns: number(&median["point_estimate"])?,
        low_ns: number(&median["confidence_interval"]["lower_bound"])?,
        high_ns: number(&median["confidence_interval"]["upper_bound"])?,
        elements,
        written: std::fs::metadata(&file).and_then(|m| m.modified()).ok(),
    }))
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
