//! A 1 GiB output flood: the parent keeps the cap and its memory stays flat. Its own test
//! binary, so the peak resident set measured is this test's alone.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use common::*;

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn a_gigabyte_flood_is_capped_with_flat_parent_memory() {
    let fixture = Fixture::new();
    let before = peak_rss_kib();
    let mut request =
        fixture.request("head -c 1073741824 /dev/zero; head -c 5000000 /dev/zero >&2");
    request.timeout_ms = 60_000;
    request.stdout_bytes_max = 1 << 20;
    request.stderr_bytes_max = 1000;
    let outcome = fixture.sandbox().run(&fixture.profile(), &request).unwrap();
    assert_code(&outcome, 0);
    assert_eq!(outcome.stdout.len(), 1 << 20);
    assert_eq!(outcome.stdout_bytes_total, 1 << 30);
    assert!(outcome.stdout_truncated);
    assert_eq!(outcome.stderr.len(), 1000);
    assert_eq!(outcome.stderr_bytes_total, 5_000_000);
    let growth = peak_rss_kib().saturating_sub(before);
    eprintln!(
        "1 GiB flood in {} ms; parent peak RSS grew {growth} KiB",
        outcome.duration_ms
    );
    assert!(growth < 16 << 10, "the parent's peak RSS grew {growth} KiB");
}
