//! `aido serve`: read_file round trips over MCP's streamable HTTP, beside the same calls over
//! aido's own stdio path (`@modelcontextprotocol/server-filesystem` serves stdio only, so the
//! stdio section is where it stands), both from one rmcp client in alternating rounds; how
//! many MCP sessions one `aido serve` holds on this machine, with its memory; and
//! telemetry's price per action, on vs off.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::harness::{Http, Server, aido_command, percentile, status_bytes};
use crate::record::{Record, Section, Stats, Unit};

/// The judged rows, said not run when the section does not run.
pub const ROWS: [(&str, &str); 5] = [
    ("serve_http_read_file_vs_stdio", "see the serve section"),
    ("serve_http_read_file_p99", "see the serve section"),
    ("serve_http_round_trips_per_second", "see the serve section"),
    ("serve_sessions_held_memory", "see the serve section"),
    ("serve_telemetry_on_vs_off", "see the serve section"),
];

/// Sessions one source address opens: the server holds at most 256 connections per peer
/// address, and each held session has its standing stream and a pooled connection.
const SESSIONS_PER_ADDRESS: usize = 100;

/// One read_file over HTTP, checked against `want`; its round trip.
async fn read(http: &Server, path: &str, want: &str) -> Result<Duration> {
    let arguments = serde_json::json!({"path": path});
    let started = Instant::now();
    let result = http.call("read_file", arguments).await?;
    let took = started.elapsed();
    let got = result
        .structured_content
        .as_ref()
        .and_then(|v| v["content"].as_str())
        .unwrap_or_default();
    if result.is_error == Some(true) || got != want {
        bail!(
            "read_file over HTTP answered {:?}",
            result.structured_content
        );
    }
    Ok(took)
}

/// Runs the section: read_file over HTTP beside stdio (p50 and p99, round trips per second),
/// MCP sessions held with the server's memory, and telemetry's price per action.
pub async fn run(
    aido: &Path,
    temp: &Path,
    calls: usize,
    rounds: usize,
    hold: usize,
) -> Result<Vec<Record>> {
    let work = tempfile::tempdir_in(temp).context("a temp dir")?;
    let serve = Http::start(aido, work.path()).await?;
    let content = "a line of the file read over HTTP and over stdio\n".repeat(20);
    let file = work.path().join("home/f.txt");
    std::fs::write(&file, &content)?;
    let path = file.to_string_lossy().into_owned();

    let http = serve.server("read_file").await?;
    let stdio = Server::start(
        "aido",
        aido_command(aido, work.path(), "mcp")?,
        work.path().join("mcp.stderr"),
        &["read_file"],
    )
    .await?;
    // Warm both.
    for _ in 0..(calls / 10).max(5) {
        read(&http, &path, &content).await?;
        stdio.read(&file).await?;
    }
    let times = crate::harness::rounds(rounds.max(1), 2, calls, async |side, _| {
        if side == 0 {
            return read(&http, &path, &content).await;
        }
        let started = Instant::now();
        let got = stdio.read(&file).await?;
        let took = started.elapsed();
        if got.is_empty() {
            bail!("read_file over stdio answered nothing");
        }
        Ok(took)
    })
    .await?;
    let [over_http, over_stdio]: [Vec<Duration>; 2] = times.try_into().unwrap_or_default();
    stdio.stop().await?;

    // Sessions held at once: each an initialized MCP session with its client.
    let rss_before = status_bytes(serve.pid, "VmRSS:")?;
    let mut held = Vec::with_capacity(hold);
    for i in 0..hold {
        let from = std::net::Ipv4Addr::new(127, 0, 1, (1 + i / SESSIONS_PER_ADDRESS) as u8);
        held.push(serve.session(Some(from.into())).await?);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_held = status_bytes(serve.pid, "VmRSS:")?;
    let mut while_held = Vec::with_capacity(calls);
    for _ in 0..calls {
        while_held.push(read(&http, &path, &content).await?);
    }
    let count = held.len();
    for client in held {
        let _ = client.cancel().await;
    }
    let _ = http.stop().await;
    serve.stop().await;

    let telemetry = crate::telemetry::measure(calls.max(200), rounds.max(2))
        .await
        .map_err(|e| format!("{e:#}"));
    let mut s = Section::new("serve");
    http_rows(&mut s, &over_http, &over_stdio);
    let grown = rss_held.saturating_sub(rss_before);
    s.value(ROWS[3].0, None, Unit::Bytes, rss_held as f64)
        .what(format!(
            "resident memory of `aido serve` holding {} initialized MCP sessions (grown from {:.1} MB)",
            count,
            rss_before as f64 / 1e6
        ));
    telemetry_rows(&mut s, &telemetry);
    s.numbers(&[
        ("calls", over_http.len() as f64),
        ("rounds", rounds as f64),
        ("held", count as f64),
        ("per_session_bytes", grown as f64 / count.max(1) as f64),
        (
            "held_p50_ns",
            percentile(&while_held, 50.0).as_nanos() as f64,
        ),
    ]);
    Ok(s.finish())
}

/// Telemetry's price per action, on vs off.
fn telemetry_rows(s: &mut Section, telemetry: &Result<crate::telemetry::Figures, String>) {
    match telemetry {
        Ok(t) => s.versus(
            ROWS[4].0,
            "read_file in process with telemetry on (spans, metrics and log records to a real OTLP receiver, Prometheus registry), median",
            &t.on,
            "telemetry off",
            &t.off,
        ),
        Err(why) => s.failed(ROWS[4].0, "read_file with telemetry on vs off", why),
    }
    match telemetry {
        Ok(t) => s.numbers(&[
            ("telemetry_calls", t.on.len() as f64),
            ("dropped", t.dropped as f64),
        ]),
        Err(_) => {
            s.number("telemetry_calls", 0.0);
            s.fact("dropped", "-");
        }
    }
}

/// read_file over HTTP beside stdio: the median, p99 and round trips per second.
fn http_rows(s: &mut Section, over_http: &[Duration], over_stdio: &[Duration]) {
    s.versus(
        ROWS[0].0,
        "read_file round trip over streamable HTTP (`aido serve`, one session, rmcp client), median",
        over_http,
        "the same over aido's stdio (`aido mcp`)",
        over_stdio,
    );
    let p99 = |d: &[Duration]| percentile(d, 99.0).as_nanos() as f64;
    s.value(ROWS[1].0, None, Unit::Ns, p99(over_http))
        .what("read_file round trip over HTTP, p99");
    s.value(ROWS[1].0, Some("stdio, p99"), Unit::Ns, p99(over_stdio));
    let per_second = |d: &[Duration]| {
        let busy: Duration = d.iter().sum();
        Stats {
            median: if busy.is_zero() {
                0.0
            } else {
                d.len() as f64 / busy.as_secs_f64()
            },
            n: Some(d.len() as u64),
            ..Stats::default()
        }
    };
    let unit = Unit::PerSecond;
    s.lane(ROWS[2].0, None, unit, per_second(over_http), Vec::new())
        .what("read_file round trips per second over HTTP, one client in sequence");
    s.lane(
        ROWS[2].0,
        Some("stdio"),
        unit,
        per_second(over_stdio),
        Vec::new(),
    );
}
