//! OpenTelemetry for aido: what every action did, in the shapes operators' tools read.
//!
//! - **Traces:** one span per action, named `tools/call <primitive>` (kind SERVER), with the
//!   MCP and GenAI semantic conventions' attributes (`mcp.method.name`, `gen_ai.tool.name`,
//!   `gen_ai.operation.name = execute_tool`, `mcp.session.id`, `network.transport`,
//!   `error.type`) and aido's own (`aido.journal.seq`, `aido.journal.hash`, `aido.verdict`,
//!   `aido.class`). Its parent is the caller's W3C `traceparent` (MCP `_meta.traceparent`, or
//!   the HTTP header on `/actions`).
//! - **Metrics:** action duration and counts by primitive, class and verdict, policy denials
//!   by gate, journal commit latency, the reports this crate had to drop; over OTLP and/or in
//!   the Prometheus text format (`aido serve`'s `/metrics`).
//! - **Logs:** every journal record as one OTLP log record, its canonical JSON as the body and
//!   `aido.journal.session`/`.seq`/`.hash`/`.prev_hash` as attributes, so a central store can
//!   search the records and re-verify each session's hash chain.
//!
//! # Never blocking an action
//! The runtime hands each finished action to [`Telemetry`]'s observer, which only tries to
//! queue it on a bounded channel ([`REPORTS_QUEUED_MAX`]); a full queue drops the report and
//! counts it (`aido.telemetry.dropped`). One thread turns reports into spans and metric
//! points; the SDK's batch processors (bounded queues of their own) export on their threads;
//! the journal is followed by a thread of its own. The gRPC exporter's channel lives on a
//! small tokio runtime owned here, so no exporter ever runs on the runtime actions run on.
//!
//! # Identity
//! Every signal carries `service.name = aido`, `service.version` and `service.instance.id`:
//! a random id made once per AIDO_HOME ([`instance::load_or_create`]), so a runtime keeps its
//! identity across restarts and N runtimes exporting to one collector stay apart.

/// `service.instance.id`: made once per AIDO_HOME.
pub mod instance;
/// Journal records as OTLP log records.
mod journal;
/// The instruments and the Prometheus registry.
mod metrics;
/// The observer: the bounded queue and the thread that makes spans and metric points.
mod observer;
/// Attribute names of the semantic conventions and aido's own.
pub mod semconv;
/// Where and how to export, from the config and the standard environment.
pub mod settings;

use std::sync::Arc;

pub use settings::{Protocol, Settings};

/// How many finished actions may wait for the telemetry thread before new ones are dropped
/// (and counted).
pub const REPORTS_QUEUED_MAX: usize = 4096;

/// Why telemetry could not start. aido runs on without it (the caller logs this).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// `otlp_protocol` / `OTEL_EXPORTER_OTLP_PROTOCOL` is not one aido speaks.
    #[error("OTLP protocol {0:?} is not served (use \"http/protobuf\" or \"grpc\")")]
    Protocol(String),
    /// The OTLP exporter could not be built (a malformed endpoint, ...).
    #[error("cannot build the OTLP {signal} exporter: {why}")]
    Exporter { signal: &'static str, why: String },
    /// The Prometheus exporter could not be built.
    #[error("cannot build the Prometheus exporter: {0}")]
    Prometheus(String),
    /// A thread or the exporter runtime could not be started.
    #[error("cannot start telemetry's {what}: {source}")]
    Spawn {
        what: &'static str,
        source: std::io::Error,
    },
    /// The instance id file could not be read or made.
    #[error("cannot read or make the instance id {path}: {source}")]
    InstanceId {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

aido_actions::coded!(StartError {
    Protocol => "telemetry_protocol_unknown",
    Exporter => "telemetry_exporter_failed",
    Prometheus => "telemetry_prometheus_failed",
    Spawn => "telemetry_spawn_failed",
    InstanceId => "telemetry_instance_id_failed",
});

/// The VM pool as the metrics report it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmPoolState {
    /// Paused clones ready to hand out.
    pub warm: u64,
    /// How many the pool keeps warm.
    pub size: u64,
    /// Clones handed out since the pool started.
    pub acquired: u64,
}

/// Running telemetry: hand [`Telemetry::observer`] to the runtime, and call
/// [`Telemetry::shutdown`] (off any async runtime's worker: it flushes with blocking calls)
/// when the runtime is done.
pub struct Telemetry {
    observer: Arc<observer::Queue>,
    worker: Option<std::thread::JoinHandle<()>>,
    follower: Option<journal::Follower>,
    providers: Providers,
    registry: Option<prometheus::Registry>,
    instance: String,
    /// Keeps the gRPC channels' runtime alive until shutdown.
    exporter_runtime: Option<tokio::runtime::Runtime>,
}

/// The SDK providers (all of them, even without OTLP: metrics may go to Prometheus only).
struct Providers {
    tracer: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
    meter: opentelemetry_sdk::metrics::SdkMeterProvider,
    logger: Option<opentelemetry_sdk::logs::SdkLoggerProvider>,
}

impl Telemetry {
    /// Start what `settings` asks for. `journal`'s records become log records when OTLP is on.
    pub fn start(
        settings: &Settings,
        journal: &aido_journal::Journal,
    ) -> Result<Telemetry, StartError> {
        let resource = settings.resource();
        // The gRPC exporter's channel spawns its connection tasks on the runtime it is built
        // in; a runtime of its own keeps them off the actions' runtime and alive at shutdown.
        let exporter_runtime = match &settings.otlp {
            Some(otlp) if otlp.protocol == Protocol::Grpc => Some(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("aido-otlp")
                    .enable_all()
                    .build()
                    .map_err(|source| StartError::Spawn {
                        what: "exporter runtime",
                        source,
                    })?,
            ),
            _ => None,
        };
        let _entered = exporter_runtime.as_ref().map(|rt| rt.enter());
        let tracer = settings
            .otlp
            .as_ref()
            .map(|otlp| otlp.tracer_provider(resource.clone()))
            .transpose()?;
        let logger = settings
            .otlp
            .as_ref()
            .map(|otlp| otlp.logger_provider(resource.clone()))
            .transpose()?;
        let registry = settings.prometheus.then(prometheus::Registry::new);
        let meter = metrics::meter_provider(settings, resource, registry.as_ref())?;
        drop(_entered);
        let instruments = metrics::Instruments::new(&meter);
        let (queue, reports) = observer::Queue::new(REPORTS_QUEUED_MAX, instruments.clone());
        let queue = Arc::new(queue);
        let worker = observer::spawn(reports, tracer.clone(), instruments)?;
        let follower = logger
            .as_ref()
            .map(|logger| journal::Follower::start(journal.clone(), logger))
            .transpose()?;
        tracing::info!(
            otlp = settings.otlp.as_ref().map(|o| o.endpoint.as_str()),
            prometheus = settings.prometheus,
            instance = %settings.instance,
            "telemetry started"
        );
        Ok(Telemetry {
            observer: queue,
            worker: Some(worker),
            follower,
            providers: Providers {
                tracer,
                meter,
                logger,
            },
            registry,
            instance: settings.instance.clone(),
            exporter_runtime,
        })
    }

    /// What the runtime reports finished actions and journal writes to.
    pub fn observer(&self) -> Arc<dyn aido_actors::Observer> {
        self.observer.clone()
    }

    /// This runtime's `service.instance.id`.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The metrics in the Prometheus text format, when Prometheus is on.
    pub fn prometheus(&self) -> Option<Arc<dyn Fn() -> String + Send + Sync>> {
        let registry = self.registry.clone()?;
        Some(Arc::new(move || metrics::render(&registry)))
    }

    /// Report the VM pool's state as metrics: `aido.vm.pool.warm` and `aido.vm.pool.size`
    /// (gauges: paused clones ready, clones kept warm) and `aido.vm.pool.acquired` (clones
    /// handed out so far), read from `state` at every export or scrape. The caller keeps
    /// `state` current (the CLI polls the runtime's pool); `None` in it reports nothing.
    pub fn watch_vm_pool(&self, state: Arc<std::sync::Mutex<Option<VmPoolState>>>) {
        metrics::vm_pool(&self.providers.meter, state);
    }

    /// How many reports were dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.observer.dropped()
    }

    /// Export what is queued and stop: the report thread drains its queue, the journal
    /// follower hands over what was written, then every provider flushes. Blocking: call it
    /// from a plain thread or `spawn_blocking`.
    pub fn shutdown(mut self) {
        self.observer.close();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
        if let Some(follower) = self.follower.take() {
            follower.stop();
        }
        if let Some(tracer) = &self.providers.tracer
            && let Err(e) = tracer.shutdown()
        {
            tracing::warn!(error = %e, "the span exporter did not shut down cleanly");
        }
        if let Some(logger) = &self.providers.logger
            && let Err(e) = logger.shutdown()
        {
            tracing::warn!(error = %e, "the log exporter did not shut down cleanly");
        }
        if let Err(e) = self.providers.meter.shutdown() {
            tracing::debug!(error = %e, "the meter provider did not shut down cleanly");
        }
        if let Some(rt) = self.exporter_runtime.take() {
            rt.shutdown_timeout(std::time::Duration::from_secs(1));
        }
    }
}

#[cfg(test)]
mod vm_pool_tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::{Arc, Mutex};

    use super::*;

    /// The pool's state reaches `/metrics` as it changes; before the pool's first use there
    /// is no sample at all (not a zero that would read as an empty pool).
    #[test]
    fn the_vm_pool_state_is_scraped_as_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let journal = aido_journal::Journal::open(
            &dir.path().join("journal"),
            aido_journal::Limits::default(),
            aido_journal::CommitMode::Group,
        )
        .unwrap();
        let settings = Settings {
            otlp: None,
            prometheus: true,
            instance: "pool-test".into(),
        };
        let telemetry = Telemetry::start(&settings, &journal).unwrap();
        let state = Arc::new(Mutex::new(None));
        telemetry.watch_vm_pool(state.clone());
        let scrape = telemetry.prometheus().unwrap();
        let text = scrape();
        assert!(!text.contains("aido_vm_pool_warm"), "{text}");
        *state.lock().unwrap() = Some(VmPoolState {
            warm: 2,
            size: 3,
            acquired: 5,
        });
        let text = scrape();
        let sample = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name) && !l.starts_with('#'))
                .and_then(|l| l.rsplit(' ').next())
                .map(str::to_owned)
        };
        assert_eq!(sample("aido_vm_pool_warm").as_deref(), Some("2"), "{text}");
        assert_eq!(sample("aido_vm_pool_size").as_deref(), Some("3"), "{text}");
        assert_eq!(
            sample("aido_vm_pool_acquired").as_deref(),
            Some("5"),
            "{text}"
        );
        *state.lock().unwrap() = Some(VmPoolState {
            warm: 0,
            size: 3,
            acquired: 6,
        });
        let text = scrape();
        let sample = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name) && !l.starts_with('#'))
                .and_then(|l| l.rsplit(' ').next())
                .map(str::to_owned)
        };
        assert_eq!(sample("aido_vm_pool_warm").as_deref(), Some("0"), "{text}");
        assert_eq!(
            sample("aido_vm_pool_acquired").as_deref(),
            Some("6"),
            "{text}"
        );
        telemetry.shutdown();
    }
}
