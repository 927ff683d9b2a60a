//! `aido serve`: read_file round trips over MCP's streamable HTTP, beside the same calls over
//! aido's own stdio path (`@modelcontextprotocol/server-filesystem` serves stdio only, so the
//! stdio section is where it stands), both from one rmcp client in alternating rounds; how
//! many MCP sessions one `aido serve` holds on this machine, with its memory; and
//! telemetry's price per action, on vs off.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rmcp::model::JsonObject;
use serde_json::Value;

use crate::harness::{Http, Server, aido_command, percentile, status_bytes};
use crate::record::{Record, Section, Stats, Unit};

/// How the section ran, or why it did not.
pub type ServeSection = crate::harness::Run<ServeRun>;

/// What the section measured.
pub struct ServeRun {
    /// Every HTTP round trip, in call order.
    pub http: Vec<Duration>,
    /// Every stdio round trip, in call order.
    pub stdio: Vec<Duration>,
    /// Rounds of each.
    pub rounds: usize,
    /// MCP sessions opened and held at once.
    pub held: usize,
    /// The server's resident memory before the sessions were opened, and with all held (bytes).
    pub rss_before: u64,
    pub rss_held: u64,
    /// Round trips on one more session while all are held.
    pub while_held: Vec<Duration>,
    /// read_file in process with telemetry off and on (exporting to a real OTLP receiver).
    pub telemetry: Result<crate::telemetry::Figures, String>,
}

/// Runs the section.
pub async fn run(
    aido: &Path,
    temp: &Path,
    calls: usize,
    rounds: usize,
    hold: usize,
) -> ServeSection {
    measure(aido, temp, calls, rounds, hold).await.into()
}

/// Sessions one source address opens: the server holds at most 256 connections per peer
/// address, and each held session has its standing stream and a pooled connection.
const SESSIONS_PER_ADDRESS: usize = 100;

/// One read_file over HTTP, checked against `want`; its round trip.
async fn read(http: &Server, path: &str, want: &str) -> Result<Duration> {
    let mut arguments = JsonObject::new();
    arguments.insert("path".into(), Value::String(path.to_owned()));
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

async fn measure(
    aido: &Path,
    temp: &Path,
    calls: usize,
    rounds: usize,
    hold: usize,
) -> Result<ServeRun> {
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
    let (mut over_http, mut over_stdio) = (Vec::new(), Vec::new());
    for round in 0..rounds.max(1) {
        for side in crate::harness::alternate(round, 2) {
            for _ in 0..calls {
                if side == 0 {
                    over_http.push(read(&http, &path, &content).await?);
                } else {
                    let started = Instant::now();
                    let got = stdio.read(&file).await?;
                    over_stdio.push(started.elapsed());
                    if got.is_empty() {
                        bail!("read_file over stdio answered nothing");
                    }
                }
            }
        }
    }
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
    Ok(ServeRun {
        http: over_http,
        stdio: over_stdio,
        rounds,
        held: count,
        rss_before,
        rss_held,
        while_held,
        telemetry,
    })
}

/// The section's records: read_file over HTTP beside stdio (p50 and p99, round trips per
/// second), MCP sessions held with the server's memory, and telemetry's price per action.
pub fn records(serve: &ServeSection) -> Vec<Record> {
    let mut s = Section::new("serve");
    let ids = [
        "serve_http_read_file_vs_stdio",
        "serve_http_read_file_p99",
        "serve_http_round_trips_per_second",
        "serve_sessions_held_memory",
        "serve_telemetry_on_vs_off",
    ];
    let Some(run) = s.ran(serve, &ids.map(|id| (id, "see the serve section"))) else {
        return s.finish();
    };
    s.versus(
        ids[0],
        "read_file round trip over streamable HTTP (`aido serve`, one session, rmcp client), median",
        &run.http,
        "the same over aido's stdio (`aido mcp`)",
        &run.stdio,
    );
    let p99 = |d: &[Duration]| percentile(d, 99.0).as_nanos() as f64;
    s.value(ids[1], None, Unit::Ns, p99(&run.http))
        .what("read_file round trip over HTTP, p99");
    s.value(ids[1], Some("stdio, p99"), Unit::Ns, p99(&run.stdio));
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
    s.lane(ids[2], None, unit, per_second(&run.http), Vec::new())
        .what("read_file round trips per second over HTTP, one client in sequence");
    s.lane(
        ids[2],
        Some("stdio"),
        unit,
        per_second(&run.stdio),
        Vec::new(),
    );
    let grown = run.rss_held.saturating_sub(run.rss_before);
    s.value(ids[3], None, Unit::Bytes, run.rss_held as f64)
        .what(format!(
            "resident memory of `aido serve` holding {} initialized MCP sessions (grown from {:.1} MB)",
            run.held,
            run.rss_before as f64 / 1e6
        ));
    match &run.telemetry {
        Ok(t) => s.versus(
            ids[4],
            "read_file in process with telemetry on (spans, metrics and log records to a real OTLP receiver, Prometheus registry), median",
            &t.on,
            "telemetry off",
            &t.off,
        ),
        Err(why) => s.failed(ids[4], "read_file with telemetry on vs off", why),
    }
    s.numbers(&[
        ("calls", run.http.len() as f64),
        ("rounds", run.rounds as f64),
        ("held", run.held as f64),
        ("per_session_bytes", grown as f64 / run.held.max(1) as f64),
        (
            "held_p50_ns",
            percentile(&run.while_held, 50.0).as_nanos() as f64,
        ),
    ]);
    match &run.telemetry {
        Ok(t) => s.numbers(&[
            ("telemetry_calls", t.on.len() as f64),
            ("dropped", t.dropped as f64),
        ]),
        Err(_) => {
            s.number("telemetry_calls", 0.0);
            s.fact("dropped", "-");
        }
    }
    s.finish()
}
