//! Telemetry for `aido serve` and `aido mcp` (aido-telemetry, cargo feature `telemetry`):
//! started when `[telemetry]` or the standard OTEL_* environment asks for OTLP, or for
//! Prometheus on a surface that serves `/metrics`; off (no thread, no queue) otherwise.

use std::path::Path;

use aido_actors::Runtime;
use aido_journal::Journal;
use aido_policy::config::Telemetry as Config;

/// Telemetry while a surface runs.
#[cfg(feature = "telemetry")]
pub struct Running(aido_telemetry::Telemetry);

/// A build without the `telemetry` feature has none.
#[cfg(not(feature = "telemetry"))]
pub enum Running {}

/// Start what `config` asks for and hand its observer to `runtime`; `metrics`: this surface
/// serves `/metrics`. A failure is logged and aido runs on without telemetry.
#[cfg(feature = "telemetry")]
pub fn start(
    config: &Config,
    metrics: bool,
    home: &Path,
    journal: &Journal,
    runtime: &Runtime,
) -> Option<Running> {
    let clock = runtime.clock().clone();
    let instance = match aido_telemetry::instance::load_or_create(home, |b| clock.random(b)) {
        Ok(id) => id,
        Err(e) => {
            let e = aido_telemetry::StartError::InstanceId {
                path: aido_telemetry::instance::instance_path(home),
                source: e,
            };
            tracing::error!(code = e.code(), error = %e, "no telemetry");
            return None;
        }
    };
    let config = Config {
        prometheus: config.prometheus && metrics,
        ..config.clone()
    };
    let settings =
        aido_telemetry::Settings::from_config(&config, |k| std::env::var(k).ok(), instance);
    let settings = match settings {
        Ok(s) if s.otlp.is_none() && !s.prometheus => return None,
        Ok(s) => s,
        Err(e) => {
            tracing::error!(code = e.code(), error = %e, "no telemetry");
            return None;
        }
    };
    match aido_telemetry::Telemetry::start(&settings, journal) {
        Ok(telemetry) => {
            runtime.observe(telemetry.observer());
            Some(Running(telemetry))
        }
        Err(e) => {
            tracing::error!(code = e.code(), error = %e, "no telemetry");
            None
        }
    }
}

/// Keep the VM pool's metrics (`aido.vm.pool.*`) current: the runtime's pool is read every
/// 5 s while the runtime lives (before the pool's first use there is nothing to report).
#[cfg(all(feature = "telemetry", feature = "prim-vm"))]
pub fn watch_vm_pool(running: &Running, runtime: &std::sync::Arc<Runtime>) {
    let state = std::sync::Arc::new(std::sync::Mutex::new(None));
    running.0.watch_vm_pool(state.clone());
    let runtime = std::sync::Arc::downgrade(runtime);
    tokio::spawn(async move {
        loop {
            let Some(live) = runtime.upgrade() else {
                return;
            };
            let status = live.vm_pool_status().await;
            drop(live);
            *state.lock().unwrap_or_else(|p| p.into_inner()) =
                status.map(|s| aido_telemetry::VmPoolState {
                    warm: s.warm as u64,
                    size: s.size as u64,
                    acquired: s.acquired,
                });
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        }
    });
}

/// Without telemetry or without the VM body there is no pool to report.
#[cfg(not(all(feature = "telemetry", feature = "prim-vm")))]
pub fn watch_vm_pool(_running: &Running, _runtime: &std::sync::Arc<Runtime>) {}

/// A build without the feature: say so if the config asks for OTLP.
#[cfg(not(feature = "telemetry"))]
pub fn start(
    config: &Config,
    _metrics: bool,
    _home: &Path,
    _journal: &Journal,
    _runtime: &Runtime,
) -> Option<Running> {
    if !config.otlp_endpoint.is_empty() || std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
    {
        tracing::warn!("this aido was built without the telemetry feature: no OTLP export");
    }
    None
}

#[cfg(feature = "telemetry")]
impl Running {
    /// What `/metrics` answers, when Prometheus is on.
    pub fn metrics(&self) -> Option<aido_serve::Metrics> {
        self.0.prometheus().map(aido_serve::Metrics)
    }

    /// Export what is queued and stop (blocking work, off the async workers).
    pub async fn shutdown(self) {
        let telemetry = self.0;
        if let Err(e) = tokio::task::spawn_blocking(move || telemetry.shutdown()).await {
            tracing::warn!(error = %e, "telemetry did not shut down cleanly");
        }
    }
}

#[cfg(not(feature = "telemetry"))]
impl Running {
    /// Nothing: there is no telemetry in this build.
    pub fn metrics(&self) -> Option<aido_serve::Metrics> {
        match *self {}
    }

    /// Nothing: there is no telemetry in this build.
    pub async fn shutdown(self) {
        match self {}
    }
}

/// This runtime's `service.instance.id` (kept in AIDO_HOME, made on first use), which
/// Mission Control shows.
#[cfg(feature = "telemetry")]
pub fn instance_id(home: &Path, runtime: &Runtime) -> Option<String> {
    let clock = runtime.clock().clone();
    match aido_telemetry::instance::load_or_create(home, |b| clock.random(b)) {
        Ok(id) => Some(id),
        Err(e) => {
            tracing::warn!(error = %e, "no service.instance.id");
            None
        }
    }
}

/// A build without the feature has no instance id.
#[cfg(not(feature = "telemetry"))]
pub fn instance_id(_home: &Path, _runtime: &Runtime) -> Option<String> {
    None
}
