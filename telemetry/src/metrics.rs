//! The instruments, and the meter provider's readers: OTLP (periodic) and/or Prometheus
//! (collected at scrape time). Labels are low-cardinality only: primitive, class, verdict,
//! gate, outcome. Session ids go on spans and log records, never on metrics.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};

use crate::semconv::*;
use crate::{Settings, StartError};

/// Bucket bounds in seconds, from 50 µs (a read answered from the journal's tail) to a
/// minute (a VM boot).
const SECONDS_BOUNDS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0, 60.0,
];

pub(crate) fn meter_provider(
    settings: &Settings,
    resource: Resource,
    registry: Option<&prometheus::Registry>,
) -> Result<SdkMeterProvider, StartError> {
    let mut builder = SdkMeterProvider::builder().with_resource(resource);
    if let Some(otlp) = &settings.otlp {
        let reader = PeriodicReader::builder(otlp.metric_exporter()?)
            .with_interval(otlp.interval)
            .build();
        builder = builder.with_reader(reader);
    }
    if let Some(registry) = registry {
        let exporter = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .build()
            .map_err(|e| StartError::Prometheus(e.to_string()))?;
        builder = builder.with_reader(exporter);
    }
    Ok(builder.build())
}

/// The registry's metrics in the Prometheus text format.
pub(crate) fn render(registry: &prometheus::Registry) -> String {
    use prometheus::Encoder;
    let mut out = Vec::new();
    if let Err(e) = prometheus::TextEncoder::new().encode(&registry.gather(), &mut out) {
        tracing::warn!(error = %e, "cannot render the metrics");
    }
    String::from_utf8(out).unwrap_or_default()
}

/// The VM pool's observable instruments, read from `state` at each collection. They live as
/// long as the meter provider.
pub(crate) fn vm_pool(
    provider: &SdkMeterProvider,
    state: std::sync::Arc<std::sync::Mutex<Option<crate::VmPoolState>>>,
) {
    let meter: Meter = provider.meter("aido");
    let read = move |state: &std::sync::Mutex<Option<crate::VmPoolState>>| {
        *state.lock().unwrap_or_else(|p| p.into_inner())
    };
    let (a, b, c) = (state.clone(), state.clone(), state);
    let _warm = meter
        .u64_observable_gauge("aido.vm.pool.warm")
        .with_description("Paused VM clones ready to hand out")
        .with_callback(move |o| {
            if let Some(s) = read(&a) {
                o.observe(s.warm, &[]);
            }
        })
        .build();
    let _size = meter
        .u64_observable_gauge("aido.vm.pool.size")
        .with_description("VM clones the pool keeps warm")
        .with_callback(move |o| {
            if let Some(s) = read(&b) {
                o.observe(s.size, &[]);
            }
        })
        .build();
    let _acquired = meter
        .u64_observable_counter("aido.vm.pool.acquired")
        .with_description("VM clones handed out since the pool started")
        .with_callback(move |o| {
            if let Some(s) = read(&c) {
                o.observe(s.acquired, &[]);
            }
        })
        .build();
}

/// Every instrument aido records. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Instruments {
    /// `aido.actions`: finished actions by primitive, class, verdict and outcome.
    actions: Counter<u64>,
    /// `aido.action.duration`: from asked to answered, same labels.
    action_duration: Histogram<f64>,
    /// `mcp.server.operation.duration` (MCP semantic conventions).
    operation_duration: Histogram<f64>,
    /// `aido.policy.denials`: refusals by primitive and gate.
    denials: Counter<u64>,
    /// `aido.journal.commit.duration`: one session record's append, by durability.
    commit_duration: Histogram<f64>,
    /// `aido.telemetry.dropped`: reports dropped on a full queue.
    pub(crate) dropped: Counter<u64>,
}

impl Instruments {
    pub(crate) fn new(provider: &SdkMeterProvider) -> Self {
        let meter: Meter = provider.meter("aido");
        let seconds = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(SECONDS_BOUNDS.to_vec())
                .build()
        };
        Self {
            actions: meter
                .u64_counter("aido.actions")
                .with_description("Finished actions by primitive, class, verdict and outcome")
                .build(),
            action_duration: seconds(
                "aido.action.duration",
                "From an action being asked for to its answer",
            ),
            operation_duration: seconds(
                "mcp.server.operation.duration",
                "MCP request duration (tools/call) as the server saw it",
            ),
            denials: meter
                .u64_counter("aido.policy.denials")
                .with_description("Actions a policy gate refused, by primitive and gate")
                .build(),
            commit_duration: seconds(
                "aido.journal.commit.duration",
                "One session record appended to the journal until acknowledged",
            ),
            dropped: meter
                .u64_counter("aido.telemetry.dropped")
                .with_description("Telemetry reports dropped because their queue was full")
                .build(),
        }
    }

    pub(crate) fn action(&self, report: &aido_actors::ActionReport) {
        let outcome = if report.error.is_some() {
            "error"
        } else {
            "ok"
        };
        let labels = [
            KeyValue::new(AIDO_PRIMITIVE, report.primitive),
            KeyValue::new(AIDO_CLASS, report.class.name()),
            KeyValue::new(AIDO_VERDICT, report.judged.name()),
            KeyValue::new(AIDO_OUTCOME, outcome),
        ];
        let seconds = report.duration_us as f64 / 1e6;
        self.actions.add(1, &labels);
        self.action_duration.record(seconds, &labels);
        let mut operation = vec![
            KeyValue::new(MCP_METHOD_NAME, TOOLS_CALL),
            KeyValue::new(GEN_AI_TOOL_NAME, report.primitive),
        ];
        if report.error.is_some() {
            operation.push(KeyValue::new(ERROR_TYPE, "tool_error"));
        }
        self.operation_duration.record(seconds, &operation);
        if let aido_actors::Judged::Denied(gate) = report.judged {
            self.denials.add(
                1,
                &[
                    KeyValue::new(AIDO_PRIMITIVE, report.primitive),
                    KeyValue::new(AIDO_GATE, gate.name()),
                ],
            );
        }
    }

    pub(crate) fn commit(&self, report: &aido_actors::CommitReport) {
        self.commit_duration.record(
            report.duration_us as f64 / 1e6,
            &[KeyValue::new(AIDO_DURABLE, report.durable)],
        );
    }
}
