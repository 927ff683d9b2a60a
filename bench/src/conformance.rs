//! The MCP conformance suite's result (`tests/conformance/run`: `@modelcontextprotocol/
//! conformance` on Node 22 against `aido serve`), as rows of the report. `aido-bench
//! conformance` runs the suite and puts its section into an existing results file (replacing
//! the one there), so the count in docs/BENCHMARKS.md is the suite's own last line.

use std::path::Path;

use anyhow::{Context, Result};

use crate::record::{self, Record, Unit};

/// What the suite said.
pub struct ConformanceRun {
    /// The summary line, as printed.
    pub line: String,
    /// Scenarios passed.
    pub passed: u64,
    /// Scenarios failed.
    pub failed: u64,
}

/// Runs `script` and reads its `conformance (...): Total: N passed, M failed` line.
pub fn run(script: &Path) -> Result<ConformanceRun> {
    eprintln!("aido-bench: conformance: {}", script.display());
    let out = std::process::Command::new(script)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse(&text).with_context(|| {
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        format!(
            "{} printed no summary line ({}); its last lines:\n{}",
            script.display(),
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    })
}

fn parse(text: &str) -> Result<ConformanceRun> {
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with("conformance (") && l.contains("Total: "))
        .context("no `conformance (...): Total: ...` line")?;
    let total = line.split("Total: ").nth(1).unwrap_or_default();
    let number = |word: &str| -> Result<u64> {
        total
            .split(',')
            .find(|part| part.trim().ends_with(word))
            .and_then(|part| part.trim().split(' ').next())
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("no `N {word}` in {line:?}"))
    };
    Ok(ConformanceRun {
        line: line.to_owned(),
        passed: number("passed")?,
        failed: number("failed")?,
    })
}

/// The section's records.
pub fn section(run: &ConformanceRun, commit: &str, date: &str) -> Vec<Record> {
    let mut s = record::Section::new("conformance");
    s.fact("line", run.line.clone());
    s.fact("commit", commit);
    s.fact("date", date);
    s.value("conformance_passed", None, Unit::Count, run.passed as f64)
        .what(
            "required server scenarios of `@modelcontextprotocol/conformance` passed against \
         `aido serve` (streamable HTTP), 2025-11-25 and 2026-07-28 together",
        );
    s.value("conformance_failed", None, Unit::Count, run.failed as f64)
        .what("required server scenarios failed");
    s.records
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_summary_line_is_read() {
        let run = super::parse(
            "conformance (@modelcontextprotocol/conformance 0.2.0-alpha.12, --requirements 2026-07-28): Total: 37 passed, 0 failed\n\
             conformance (@modelcontextprotocol/conformance 0.2.0-alpha.12, --requirements 2025-11-25,2026-07-28): Total: 67 passed, 1 failed\n",
        )
        .unwrap();
        assert_eq!((run.passed, run.failed), (67, 1));
        assert!(super::parse("Total: 1 passed").is_err());
    }
}
