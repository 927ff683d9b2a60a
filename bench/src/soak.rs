//! The soak: many mixed calls through one `aido mcp` on stdio and one `aido serve` over HTTP,
//! some with arguments of about 1 MiB, the server's resident memory read from
//! `/proc/PID/status` as it goes. What it shows is whether memory grows with the number of
//! calls served: nothing may be kept per call beyond the journal on disk.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::harness::{Http, Server, aido_command, status_bytes};
use crate::record::{Record, Section, Stats, Unit};

/// How the soak runs.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Calls per transport.
    pub calls: usize,
    /// Bytes of a large call's argument (about).
    pub large_bytes: usize,
    /// Every this many calls, one is large.
    pub large_every: usize,
}

/// RSS is read every this many calls (and at the marks).
pub const SAMPLE_EVERY: usize = 250;

/// One transport's run.
pub struct Side {
    /// (calls served, VmRSS bytes) every [`SAMPLE_EVERY`] calls, from the first.
    pub samples: Vec<(usize, u64)>,
    /// VmHWM at the end: the largest resident memory of the whole run.
    pub peak: u64,
    /// Wall time of all the calls.
    pub took: Duration,
    /// The journal and audit files on disk at the end.
    pub disk_bytes: u64,
}

/// The marks the report names, of `calls`: warmed up (a twentieth of the run), a quarter,
/// half, all.
fn marks(calls: usize) -> [usize; 4] {
    [(calls / 20).max(1), calls / 4, calls / 2, calls]
}

/// The judged rows, said not run when the section does not run.
pub const ROWS: [(&str, &str); 4] = [
    ("soak_stdio_rss_max", "see the soak section"),
    ("soak_stdio_rss_growth", "see the soak section"),
    ("soak_http_rss_max", "see the soak section"),
    ("soak_http_rss_growth", "see the soak section"),
];

impl Side {
    /// VmRSS at the sample taken at `calls` (the nearest one not before it).
    pub fn at(&self, calls: usize) -> u64 {
        self.samples
            .iter()
            .find(|(n, _)| *n >= calls)
            .or(self.samples.last())
            .map_or(0, |(_, rss)| *rss)
    }

    /// The largest VmRSS sampled from `calls` on.
    pub fn max_from(&self, calls: usize) -> u64 {
        self.samples
            .iter()
            .filter(|(n, _)| *n >= calls)
            .map(|(_, rss)| *rss)
            .max()
            .unwrap_or(0)
    }
}

/// Runs the section in fresh directories under `temp`: per transport, the largest resident
/// memory after warm-up and its growth over the last three quarters of the calls, judged
/// against the bound; a table of the marks.
pub async fn run(aido: &Path, temp: &Path, options: Options) -> Result<Vec<Record>> {
    let mut s = Section::new("soak");
    let [warm, quarter, half, all] = marks(options.calls);
    let thousands = |n: usize| crate::render::thousands(n as f64);
    let mut cells = Vec::new();
    for (over_http, transport, server, [max_id, growth_id]) in [
        (
            false,
            "stdio",
            "`aido mcp` on stdio",
            [ROWS[0].0, ROWS[1].0],
        ),
        (
            true,
            "HTTP",
            "`aido serve` over HTTP",
            [ROWS[2].0, ROWS[3].0],
        ),
    ] {
        eprintln!(
            "aido-bench: soak over {}: {} calls, one in {} of ~{} bytes",
            transport, options.calls, options.large_every, options.large_bytes
        );
        let side = soak(aido, temp, over_http, options)
            .await
            .context(transport)?;
        let after: Vec<f64> = side
            .samples
            .iter()
            .filter(|(n, _)| *n >= warm)
            .map(|(_, rss)| *rss as f64)
            .collect();
        let max = side.max_from(warm) as f64;
        let stats = Stats {
            median: max,
            max: Some(max),
            min: after.iter().copied().reduce(f64::min),
            n: Some(after.len() as u64),
            ..Stats::default()
        };
        s.lane(max_id, None, Unit::Bytes, stats, after).what(format!(
            "{server}: the largest resident memory (VmRSS) sampled from call {} to call {} of {} mixed calls",
            thousands(warm),
            thousands(all),
            thousands(all)
        ));
        let growth = side.at(all).saturating_sub(side.at(quarter));
        s.value(growth_id, None, Unit::Bytes, growth as f64)
            .what(format!(
                "{server}: resident memory at call {} less at call {}",
                thousands(all),
                thousands(quarter)
            ));
        let mb = |b: u64| format!("{:.1}", b as f64 / 1e6);
        cells.push(vec![
            transport.to_owned(),
            mb(side.at(0)),
            mb(side.at(warm)),
            mb(side.at(quarter)),
            mb(side.at(half)),
            mb(side.at(all)),
            mb(side.peak),
            format!("{:.0}", all as f64 / side.took.as_secs_f64().max(1e-9)),
            format!("{:.0}", side.disk_bytes as f64 / 1e6),
        ]);
    }
    let limit = |row| crate::render::limit(row).unwrap_or_default();
    s.numbers(&[
        ("calls", all as f64),
        ("every", options.large_every as f64),
        ("large_bytes", options.large_bytes as f64),
        ("sample_every", SAMPLE_EVERY as f64),
        ("warm", warm as f64),
        ("quarter", quarter as f64),
        ("bound", limit("soak_stdio_rss_max")),
        ("growth", limit("soak_stdio_rss_growth")),
    ]);
    let columns = [
        "transport".to_owned(),
        "RSS at start (MB)".to_owned(),
        format!("after {} calls", thousands(warm)),
        thousands(quarter),
        thousands(half),
        thousands(all),
        "peak, VmHWM (MB)".to_owned(),
        "calls/s".to_owned(),
        "journal and audit on disk (MB)".to_owned(),
    ];
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    s.table("soak", &columns, cells);
    Ok(s.finish())
}

/// The `n`th call (from 1): its tool and arguments. One in `large_every` is large, a
/// `stat_files` of paths (kept inline in the record, so its records are large) and a
/// `write_file` of new contents (kept as a blob) in turn; the others read, write, stat, describe and checksum small files.
fn call(n: usize, options: &Options) -> (&'static str, Value) {
    if n.is_multiple_of(options.large_every) {
        if (n / options.large_every).is_multiple_of(2) {
            // About 1,000 bytes each, in components a file system takes (at most 255). The
            // answer names each path again, so the outcome's record is about twice the
            // arguments: 400 paths a MiB keep it under `record_bytes_max` (1 MiB).
            let part = "p".repeat(240);
            let path = |k: usize| format!("nope/{n}/{k}/{part}/{part}/{part}/{part}");
            let count = options.large_bytes / 2600;
            let paths: Vec<String> = (0..count).map(path).collect();
            return ("stat_files", json!({ "paths": paths }));
        }
        let content = format!("{n:012}").repeat(options.large_bytes / 12);
        return (
            "write_file",
            json!({"path": format!("large/{}.txt", n % 5), "content": content}),
        );
    }
    let file = format!("small/{}.txt", n % 10);
    match n % 5 {
        0 => (
            "write_file",
            json!({"path": file, "content": format!("{n}\n")}),
        ),
        1 => ("read_file", json!({"path": "fixture/a.txt"})),
        2 => (
            "stat_files",
            json!({"paths": ["fixture/a.txt", "fixture/b.txt", "nope"]}),
        ),
        3 => ("file_info", json!({"path": "fixture/b.txt"})),
        _ => ("checksum", json!({"path": "fixture/a.txt"})),
    }
}

/// One transport's soak: `aido mcp` on stdio, or `aido serve` over HTTP.
async fn soak(aido: &Path, temp: &Path, over_http: bool, options: Options) -> Result<Side> {
    let work = tempfile::tempdir_in(temp).context("a temp dir")?;
    let fixture = work.path().join("home/fixture");
    std::fs::create_dir_all(&fixture)?;
    std::fs::write(fixture.join("a.txt"), "a line of a small file\n".repeat(40))?;
    std::fs::write(fixture.join("b.txt"), "another small file\n".repeat(10))?;
    let (server, http) = if over_http {
        let http = Http::start(aido, work.path()).await?;
        (http.server("").await?, Some(http))
    } else {
        let command = aido_command(aido, work.path(), "mcp")?;
        let stderr = work.path().join("aido.stderr");
        (Server::start("aido mcp", command, stderr, &[]).await?, None)
    };
    let pid = server.pid;
    let started = Instant::now();
    let mut samples = vec![(0, status_bytes(pid, "VmRSS:")?)];
    for n in 1..=options.calls {
        let (tool, arguments) = call(n, &options);
        server
            .call(tool, arguments)
            .await
            .with_context(|| format!("call {n} ({tool})"))?;
        if n.is_multiple_of(SAMPLE_EVERY) || n == options.calls {
            samples.push((n, status_bytes(pid, "VmRSS:")?));
        }
    }
    let took = started.elapsed();
    let peak = status_bytes(pid, "VmHWM:")?;
    let _ = server.stop().await;
    if let Some(http) = http {
        http.stop().await;
    }
    Ok(Side {
        samples,
        peak,
        took,
        disk_bytes: crate::machine::usage(&work.path().join("aido_home"))?.apparent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_call_in_large_every_is_large_and_the_marks_are_a_twentieth_quarter_half_and_all() {
        let options = Options {
            calls: 20_000,
            large_bytes: 1 << 20,
            large_every: 10,
        };
        let size = |n| serde_json::to_vec(&call(n, &options).1).unwrap().len();
        assert!(size(10) > 1_000_000 && size(20) > 390_000, "{}", size(20));
        assert_eq!(call(10, &options).0, "write_file");
        assert_eq!(call(20, &options).0, "stat_files");
        assert!((1..10).all(|n| size(n) < 1_000));
        assert_eq!(marks(options.calls), [1_000, 5_000, 10_000, 20_000]);
        let side = Side {
            samples: vec![(0, 1), (250, 5), (500, 3), (750, 4)],
            peak: 9,
            took: Duration::ZERO,
            disk_bytes: 0,
        };
        assert_eq!((side.at(300), side.at(750), side.max_from(500)), (3, 4, 4));
    }
}
