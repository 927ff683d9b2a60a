//! Every journal record as an OTLP log record: the body is the record's JSON (as the audit
//! files and `/events` give it, hash included), the attributes its session, seq, hash and
//! previous hash, so a central store can search the records and re-verify each chain. The
//! local journal stays the truth; this is a copy that may lag or, on a full export queue,
//! lose records (the SDK's batch processor counts those).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use aido_journal::{Journal, Record, SessionId};
use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};

use crate::StartError;
use crate::semconv::*;

/// The following thread.
pub(crate) struct Follower {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Follower {
    pub(crate) fn start(
        journal: Journal,
        provider: &SdkLoggerProvider,
    ) -> Result<Self, StartError> {
        let scope = opentelemetry::InstrumentationScope::builder("aido.journal")
            .with_version(aido_actors::runtime::VERSION)
            .build();
        let logger = provider.logger_with_scope(scope);
        let subscriber = journal.watch_records();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("aido-otlp-journal".into())
            .spawn(move || follow(&journal, subscriber, &logger, &stopping))
            .map_err(|source| StartError::Spawn {
                what: "journal follower",
                source,
            })?;
        Ok(Self { stop, thread })
    }

    /// Stop once what was inserted so far is handed over.
    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.thread.join();
    }
}

fn follow(
    journal: &Journal,
    mut subscriber: sled::Subscriber,
    logger: &SdkLogger,
    stop: &AtomicBool,
) {
    loop {
        let event = match subscriber.next_timeout(Duration::from_millis(100)) {
            Ok(event) => event,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let sled::Event::Insert { key, .. } = event else {
            continue;
        };
        let (Some(session), Some(seq)) = (
            key.get(..16)
                .and_then(|b| <[u8; 16]>::try_from(b).ok())
                .map(SessionId::from_bytes),
            key.get(16..)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_be_bytes),
        ) else {
            continue;
        };
        // Read back checked (its hash verified), as the audit files are.
        match journal.records(session, seq, Some(seq + 1), 1, false) {
            Ok(records) => {
                if let Some(record) = records.first() {
                    emit(logger, record);
                }
            }
            Err(e) => {
                tracing::warn!(code = e.code(), %session, seq, "telemetry cannot read a record back")
            }
        }
    }
}

fn emit(logger: &SdkLogger, record: &Record) {
    let mut json = serde_json::to_value(record).unwrap_or(serde_json::Value::Null);
    if let serde_json::Value::Object(map) = &mut json {
        map.insert(
            "hash".into(),
            serde_json::Value::String(record.hash.clone()),
        );
    }
    let mut log = logger.create_log_record();
    log.set_event_name(JOURNAL_RECORD_EVENT);
    log.set_timestamp(UNIX_EPOCH + Duration::from_millis(record.time_ms));
    log.set_severity_number(Severity::Info);
    log.set_severity_text("INFO");
    log.set_body(AnyValue::String(json.to_string().into()));
    log.add_attribute(AIDO_JOURNAL_SESSION, record.session.to_string());
    log.add_attribute(
        AIDO_JOURNAL_SEQ,
        i64::try_from(record.seq).unwrap_or(i64::MAX),
    );
    log.add_attribute(AIDO_JOURNAL_HASH, record.hash.clone());
    log.add_attribute(AIDO_JOURNAL_PREV_HASH, record.prev.clone());
    log.add_attribute(AIDO_JOURNAL_KIND, record.event.kind());
    logger.emit(log);
}
