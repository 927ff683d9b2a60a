//! Telemetry's price per action: `read_file` through two real runtimes in alternating rounds,
//! one with aido-telemetry exporting over OTLP to a receiver in this process, one without.

use std::time::{Duration, Instant};

use aido_actions::Action;
use aido_actors::{Hooks, Runtime, Session};
use aido_journal::Journal;
use aido_telemetry::settings::Otlp;
use aido_telemetry::{Protocol, Settings, Telemetry};
use anyhow::{Context, Result, anyhow};
use serde_json::json;

/// One side: a runtime on its own temp home and journal.
struct Side {
    _dir: tempfile::TempDir,
    journal: Journal,
    runtime: Runtime,
    session: Session,
}

async fn side() -> Result<Side> {
    let dir = tempfile::tempdir().context("temp dir")?;
    let (home, aido_home) = (dir.path().join("home"), dir.path().join("aido"));
    std::fs::create_dir_all(&home)?;
    std::fs::write(home.join("f.txt"), "telemetry bench\n".repeat(64))?;
    let toml = format!("workdir = \"{}\"\n", home.display());
    let (journal, runtime, session) = crate::fixture::runtime(&toml, home, aido_home).await?;
    Ok(Side {
        _dir: dir,
        journal,
        runtime,
        session,
    })
}

/// `calls` reads; each one's time from asked to answered.
async fn reads(session: &Session, calls: usize, into: &mut Vec<Duration>) -> Result<()> {
    for _ in 0..calls {
        let action = Action::from_tool_call("read_file", json!({"path": "f.txt"}))?;
        let started = Instant::now();
        session
            .run(action, Hooks::default())
            .await
            .map_err(|e| anyhow!("read_file failed: {}", e.failure.code))?;
        into.push(started.elapsed());
    }
    Ok(())
}

/// What one run measured: every read's time with telemetry off and on.
#[derive(Clone, Debug)]
pub struct Figures {
    pub off: Vec<Duration>,
    pub on: Vec<Duration>,
    /// Reports the observer dropped (its queue full) instead of blocking an action.
    pub dropped: u64,
}

/// Measure, print the figures as records (JSON lines).
pub(crate) fn run(calls: usize, rounds: usize) -> Result<()> {
    use crate::record::{Section, Stats, Unit, ns};
    let f = figures(calls, rounds)?;
    let (on, off) = (Stats::range(&ns(&f.on)), Stats::range(&ns(&f.off)));
    let ratio = on.median / off.median.max(1.0);
    let row = "serve_telemetry_on_vs_off";
    let mut s = Section::new("telemetry");
    s.lane(row, None, Unit::Ns, on, Vec::new()).what(
        "read_file in process with telemetry on (spans, metrics and log records to a real OTLP \
         receiver, Prometheus registry)",
    );
    s.lane(row, Some("telemetry off"), Unit::Ns, off, Vec::new());
    s.value(row, Some(crate::record::RATIO), Unit::Ratio, ratio);
    s.fact("dropped", f.dropped.to_string());
    crate::record::print(&s.records);
    Ok(())
}

/// The same measurement from inside an async caller: on a thread of its own, with its own
/// multi-threaded runtime (the exporters' tasks need one).
pub(crate) async fn measure(calls: usize, rounds: usize) -> Result<Figures> {
    tokio::task::spawn_blocking(move || figures(calls, rounds))
        .await
        .context("the telemetry thread")?
}

/// `calls` reads per side per round, `rounds` rounds, sides alternating.
pub(crate) fn figures(calls: usize, rounds: usize) -> Result<Figures> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let figures = tokio.block_on(async {
        let mut collector = fake_opentelemetry_collector::FakeCollectorServer::start()
            .await
            .map_err(|e| anyhow!("the OTLP receiver: {e}"))?;
        let endpoint = collector.endpoint();
        // The receiver's channels hold 64 items: drain them as the exporters send.
        let drain = tokio::spawn(async move {
            let mut received = 0usize;
            loop {
                let tick = Duration::from_millis(50);
                received += collector.exported_spans(usize::MAX, tick).await.len();
                received += collector.exported_logs(usize::MAX, tick).await.len();
                received += collector.exported_metrics(usize::MAX, tick).await.len();
                if received == usize::MAX {
                    return received;
                }
            }
        });
        let off = side().await?;
        let on = side().await?;
        let telemetry = Telemetry::start(
            &Settings {
                otlp: Some(Otlp {
                    endpoint,
                    protocol: Protocol::Grpc,
                    interval: Duration::from_millis(aido_telemetry::settings::EXPORT_INTERVAL_MS),
                }),
                prometheus: true,
                instance: "bench".into(),
            },
            &on.journal,
        )?;
        on.runtime.observe(telemetry.observer());
        // Warm both (page cache, allocator, the exporters' connections).
        reads(&off.session, calls / 10 + 1, &mut Vec::new()).await?;
        reads(&on.session, calls / 10 + 1, &mut Vec::new()).await?;
        let times = crate::harness::rounds(rounds, 2, calls, async |side, _| {
            let session = if side == 0 { &off.session } else { &on.session };
            let mut one = Vec::with_capacity(1);
            reads(session, 1, &mut one).await?;
            Ok(one.pop().unwrap_or_default())
        })
        .await?;
        let [times_off, times_on]: [Vec<Duration>; 2] = times.try_into().unwrap_or_default();
        let figures = Figures {
            off: times_off,
            on: times_on,
            dropped: telemetry.dropped(),
        };
        tokio::task::spawn_blocking(move || telemetry.shutdown()).await?;
        on.runtime.shutdown().await;
        off.runtime.shutdown().await;
        drain.abort();
        Ok::<_, anyhow::Error>(figures)
    })?;
    Ok(figures)
}
