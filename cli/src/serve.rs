//! `aido serve`: the runtime on HTTP (MCP at `/mcp`, `/actions`, `/events`), see aido-serve.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use aido_actors::{Runtime, RuntimeOptions, SystemClock};
use aido_journal::CommitMode;
use aido_policy::Layered;
use anyhow::{Context, Result};

/// What `aido serve` was asked for.
pub struct ServeArgs {
    pub listen: SocketAddr,
    pub allow_host: Vec<String>,
    pub allow_origin: Vec<String>,
    pub no_auth: bool,
    pub session_idle_secs: u64,
    pub body_bytes_max: Option<usize>,
    pub drain_ms: u64,
}

pub async fn serve(layered: Layered, home: &Path, args: ServeArgs) -> Result<()> {
    std::fs::create_dir_all(home).with_context(|| format!("creating {}", home.display()))?;
    let limits = &layered.config.limits;
    let journal_limits = aido_journal::Limits {
        record_bytes_max: limits.record_bytes_max,
        blob_bytes_max: limits.blob_bytes_max,
        records_per_session_max: limits.records_per_session_max,
    };
    let journal =
        aido_journal::dir::open_writer(&home.join("journal"), journal_limits, CommitMode::Group)
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    // Before the runtime stores anything, so all it stores is pinned while retention runs.
    super::retention::at_start(home, &layered.config.retention, &journal, "aido serve");
    let feed = aido_serve::Feed::start(
        journal.clone(),
        Some(aido_serve::feed::audit_dir(home)),
        aido_serve::feed::RingLimits::SERVE,
    )
    .context("following the journal")?;
    let telemetry_config = layered.config.telemetry.clone();
    let fleet = fleet_of(&layered.config.fleet);
    super::expect_commands(&layered.config);
    let runtime = Runtime::start(RuntimeOptions {
        config: layered.config,
        env: super::environment(home),
        journal: journal.clone(),
        clock: Arc::new(SystemClock::default()),
    })
    .await
    .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    let telemetry = super::telemetry::start(&telemetry_config, true, home, &journal, &runtime);
    drop(journal);
    let runtime = Arc::new(runtime);
    if let Some(running) = &telemetry {
        super::telemetry::watch_vm_pool(running, &runtime);
    }
    let auth = if args.no_auth {
        aido_serve::Auth::Off
    } else {
        let clock = runtime.clock().clone();
        let (token, _made) = aido_serve::token::load_or_create(home, |buf| clock.random(buf))
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
        aido_serve::Auth::Token(token)
    };
    let mut options = aido_serve::Options::new(&runtime, auth);
    options.listen = args.listen;
    options.allowed_hosts = args.allow_host;
    options.allowed_origins = args.allow_origin;
    options.session_idle = Duration::from_secs(args.session_idle_secs.max(1));
    if let Some(max) = args.body_bytes_max {
        options.body_bytes_max = max;
    }
    options.drain = Duration::from_millis(args.drain_ms);
    options.metrics = telemetry.as_ref().and_then(|t| t.metrics());
    options.instance = super::telemetry::instance_id(home, &runtime);
    options.fleet = fleet;
    let serving = aido_serve::start(runtime.clone(), feed.clone(), options)
        .await
        .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    // Where it listens, for `aido watch` on this host (a port 0 listener's port is known only
    // now), written before the lines that say it is serving; taken away again at shutdown when
    // it still names this server.
    let url_file = home.join(aido_watch::discover::URL_FILE);
    let written = url_file
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&url_file, format!("{}\n", serving.base)));
    if let Err(e) = written {
        tracing::warn!(file = %url_file.display(), error = %e, "aido watch will not find this server by itself");
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "aido serve: MCP at {}", serving.mcp_url())?;
        if args.no_auth {
            writeln!(out, "aido serve: no authentication (--no-auth)")?;
        } else {
            writeln!(
                out,
                "aido serve: bearer token in {}",
                aido_serve::token::token_path(home).display()
            )?;
        }
        writeln!(out, "aido serve: Mission Control at {}/mc/", serving.base)?;
        out.flush()?;
    }
    let signal = aido_mcp::shutdown_signal().await;
    if std::fs::read_to_string(&url_file).is_ok_and(|text| text.trim() == serving.base) {
        let _ = std::fs::remove_file(&url_file);
    }
    serving.shutdown(&format!("aido received {signal}")).await;
    feed.stop();
    drop(feed);
    if let Ok(runtime) = Arc::try_unwrap(runtime) {
        runtime.shutdown().await;
    }
    if let Some(telemetry) = telemetry {
        telemetry.shutdown().await;
    }
    Ok(())
}

/// `[fleet]` as Mission Control takes it (`~` in paths is HOME).
fn fleet_of(config: &aido_policy::config::Fleet) -> aido_serve::mc::Fleet {
    let path = |p: &str| -> std::path::PathBuf {
        match (p.strip_prefix("~/"), std::env::var_os("HOME")) {
            (Some(rest), Some(home)) => Path::new(&home).join(rest),
            _ => std::path::PathBuf::from(p),
        }
    };
    aido_serve::mc::Fleet {
        peers: config
            .peers
            .iter()
            .map(|p| aido_serve::mc::Peer {
                url: p.url.trim_end_matches('/').to_owned(),
                token_file: path(&p.token_file),
            })
            .collect(),
        discovery: (!config.discovery.is_empty()).then(|| path(&config.discovery)),
    }
}
