//! The runtime's observer: each report is only tried on a bounded channel (a full one drops it
//! and counts it), and one thread turns reports into spans and metric points.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::{Duration, UNIX_EPOCH};

use aido_actors::{ActionReport, CommitReport, Observer};
use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::StartError;
use crate::metrics::Instruments;
use crate::semconv::*;

pub(crate) enum Report {
    Action(Box<ActionReport>),
    Commit(CommitReport),
    /// Shutdown: everything before it is handled.
    Stop,
}

/// The sending side, shared with the runtime.
pub(crate) struct Queue {
    tx: SyncSender<Report>,
    closed: AtomicBool,
    dropped: AtomicU64,
    instruments: Instruments,
}

impl Queue {
    pub(crate) fn new(capacity: usize, instruments: Instruments) -> (Self, Receiver<Report>) {
        let (tx, rx) = std::sync::mpsc::sync_channel(capacity);
        let queue = Self {
            tx,
            closed: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            instruments,
        };
        (queue, rx)
    }

    fn offer(&self, report: Report) {
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        match self.tx.try_send(report) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                self.instruments.dropped.add(1, &[]);
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// No more reports; the thread stops once it handled what was queued (this waits for
    /// room in the queue, which the thread is draining).
    pub(crate) fn close(&self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            let _ = self.tx.send(Report::Stop);
        }
    }
}

impl Observer for Queue {
    fn action(&self, report: ActionReport) {
        self.offer(Report::Action(Box::new(report)));
    }

    fn commit(&self, report: CommitReport) {
        self.offer(Report::Commit(report));
    }
}

pub(crate) fn spawn(
    reports: Receiver<Report>,
    tracer: Option<SdkTracerProvider>,
    instruments: Instruments,
) -> Result<std::thread::JoinHandle<()>, StartError> {
    std::thread::Builder::new()
        .name("aido-telemetry".into())
        .spawn(move || run(&reports, tracer.as_ref(), &instruments))
        .map_err(|source| StartError::Spawn {
            what: "report thread",
            source,
        })
}

fn run(reports: &Receiver<Report>, tracer: Option<&SdkTracerProvider>, instruments: &Instruments) {
    let tracer = tracer.map(|provider| {
        let scope = opentelemetry::InstrumentationScope::builder("aido")
            .with_version(aido_actors::runtime::VERSION)
            .build();
        provider.tracer_with_scope(scope)
    });
    let propagator = TraceContextPropagator::new();
    while let Ok(report) = reports.recv() {
        match report {
            Report::Stop => return,
            Report::Commit(commit) => instruments.commit(&commit),
            Report::Action(action) => {
                instruments.action(&action);
                if let Some(tracer) = &tracer {
                    span(tracer, &propagator, &action);
                }
            }
        }
    }
}

/// The action's span, with the times it ran at (it is made after the fact, on this thread).
fn span(
    tracer: &opentelemetry_sdk::trace::SdkTracer,
    propagator: &TraceContextPropagator,
    report: &ActionReport,
) {
    use opentelemetry::propagation::TextMapPropagator as _;
    let parent = match &report.trace_parent {
        Some(traceparent) => {
            let carrier = HashMap::from([("traceparent".to_owned(), traceparent.clone())]);
            propagator.extract(&carrier)
        }
        None => Context::new(),
    };
    let start = UNIX_EPOCH + Duration::from_millis(report.started_unix_ms);
    let end = start + Duration::from_micros(report.duration_us);
    // A downstream call is named by its tool (`tools/call git__git_status`) and its server.
    let tool = report
        .downstream
        .as_ref()
        .map_or_else(|| report.primitive.to_owned(), |(_, tool)| tool.clone());
    let mut attributes = vec![
        KeyValue::new(MCP_METHOD_NAME, TOOLS_CALL),
        KeyValue::new(GEN_AI_TOOL_NAME, tool.clone()),
        KeyValue::new(GEN_AI_OPERATION_NAME, EXECUTE_TOOL),
        KeyValue::new(MCP_SESSION_ID, report.session.to_string()),
        KeyValue::new(AIDO_CLASS, report.class.name()),
        KeyValue::new(AIDO_VERDICT, report.judged.name()),
    ];
    if let Some(seq) = report.seq {
        attributes.push(KeyValue::new(
            AIDO_JOURNAL_SEQ,
            i64::try_from(seq).unwrap_or(i64::MAX),
        ));
    }
    if let Some(hash) = &report.hash {
        attributes.push(KeyValue::new(AIDO_JOURNAL_HASH, hash.clone()));
    }
    if let Some(transport) = report.transport {
        attributes.push(KeyValue::new(NETWORK_TRANSPORT, transport));
    }
    if let Some((server, _)) = &report.downstream {
        attributes.push(KeyValue::new(AIDO_DOWNSTREAM_SERVER, server.clone()));
    }
    if let aido_actors::Judged::Denied(gate) = report.judged {
        attributes.push(KeyValue::new(AIDO_GATE, gate.name()));
    }
    if let Some(code) = &report.error {
        attributes.push(KeyValue::new(ERROR_TYPE, "tool_error"));
        attributes.push(KeyValue::new(AIDO_ERROR_CODE, code.clone()));
    }
    let mut span = tracer
        .span_builder(format!("{TOOLS_CALL} {tool}"))
        .with_kind(SpanKind::Server)
        .with_start_time(start)
        .with_attributes(attributes)
        .start_with_context(tracer, &parent);
    if let Some(code) = &report.error {
        span.set_status(Status::error(code.clone()));
    }
    span.end_with_timestamp(end);
}
