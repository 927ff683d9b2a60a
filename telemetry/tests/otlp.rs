//! Telemetry against a real OTLP/gRPC receiver (fake-opentelemetry-collector: tonic serving
//! the OTLP collector services, started here on 127.0.0.1): spans with their semantic
//! convention attributes and the caller's parent, journal records as log records carrying
//! the hash chain, and metrics, both over OTLP and in the Prometheus text.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use std::sync::Arc;
use std::time::Duration;

use aido_actions::Action;
use aido_actors::{Hooks, Runtime, SystemClock};
use aido_journal::Journal;
use aido_telemetry::settings::Otlp;
use aido_telemetry::{Protocol, Settings, Telemetry};
use fake_opentelemetry_collector::FakeCollectorServer;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

struct World {
    _dir: tempfile::TempDir,
    home: std::path::PathBuf,
    journal: Journal,
    runtime: Runtime,
}

async fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let (home, aido_home) = (dir.path().join("home"), dir.path().join("aido"));
    std::fs::create_dir_all(&home).unwrap();
    let toml = format!("workdir = \"{}\"\n", home.display());
    let runtime = aido_testkit::runtime::start_with(
        &toml,
        &home,
        &aido_home,
        &aido_home.join("journal"),
        Arc::new(SystemClock::default()),
    )
    .await;
    let journal = runtime.journal().clone();
    World {
        _dir: dir,
        home,
        journal,
        runtime,
    }
}

/// The value in the collector's Debug form of an attribute
/// (`Some(AnyValue { value: Some(StringValue("x")) })` is `x`); empty when absent.
fn value(attributes: &std::collections::BTreeMap<String, String>, key: &str) -> String {
    let Some(debug) = attributes.get(key) else {
        return String::new();
    };
    let inner = debug
        .split_once("Value(")
        .map_or(debug.as_str(), |(_, rest)| rest);
    let inner = inner.split_once(')').map_or(inner, |(v, _)| v);
    inner.trim_matches('"').to_owned()
}

/// Poll `probe` until it gives a value or `timeout` passes.
async fn wait_until<T>(timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return Some(value);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn action(primitive: &str, arguments: serde_json::Value) -> Action {
    Action::from_tool_call(primitive, arguments).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
async fn spans_logs_and_metrics_reach_a_real_otlp_receiver() {
    let mut collector = FakeCollectorServer::start().await.unwrap();
    let w = world().await;
    let settings = Settings {
        otlp: Some(Otlp {
            endpoint: collector.endpoint(),
            protocol: Protocol::Grpc,
            interval: Duration::from_millis(100),
        }),
        prometheus: true,
        instance: "0123456789abcdef0123456789abcdef".into(),
    };
    let telemetry = Telemetry::start(&settings, &w.journal).unwrap();
    assert!(w.runtime.observe(telemetry.observer()));
    let session = w
        .runtime
        .open_session(Some("otel-test".into()))
        .await
        .unwrap();

    let traced = Hooks {
        trace_parent: Some(format!("00-{TRACE_ID}-{PARENT_SPAN}-01")),
        transport: Some("pipe"),
        ..Hooks::default()
    };
    let write = action(
        "write_file",
        serde_json::json!({"path": "a.txt", "content": "hi\n"}),
    );
    let wrote = session.run(write, traced).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(w.home.join("a.txt")).unwrap(),
        "hi\n"
    );
    let outside = action("read_file", serde_json::json!({"path": "/etc/shadow"}));
    let denied = session.run(outside, Hooks::default()).await.unwrap_err();
    assert!(denied.gate.is_some());

    // Prometheus: rendered from the same instruments, once the report thread took both.
    let render = telemetry.prometheus().unwrap();
    // Every instrument is reported on its own: wait until each one asserted below has its
    // first value (the denial's counter can come a report after the action's).
    let text = wait_until(Duration::from_secs(5), || {
        let text = render();
        [
            "aido_verdict=\"deny\"",
            "aido_actions_total{",
            "aido_policy_denials_total{",
            "aido_journal_commit_duration_seconds_bucket",
        ]
        .iter()
        .all(|want| text.contains(want))
        .then_some(text)
    })
    .await
    .unwrap_or_else(|| render());
    assert!(
        text.contains("aido_actions_total{")
            && text.contains("aido_primitive=\"write_file\"")
            && text.contains("aido_verdict=\"deny\""),
        "{text}"
    );
    assert!(text.contains("aido_policy_denials_total{"), "{text}");
    assert!(
        text.contains("aido_journal_commit_duration_seconds_bucket"),
        "{text}"
    );
    // The resource, with the runtime's identity (the receiver's span type drops resources).
    assert!(
        text.contains("service_instance_id=\"0123456789abcdef0123456789abcdef\""),
        "{text}"
    );

    let spans = collector.exported_spans(2, Duration::from_secs(10)).await;
    let written = spans
        .iter()
        .find(|s| s.name == "tools/call write_file")
        .unwrap_or_else(|| panic!("no write_file span in {spans:#?}"));
    assert_eq!(written.kind, "SPAN_KIND_SERVER");
    assert_eq!(written.trace_id, TRACE_ID, "the parent's trace");
    assert_eq!(written.parent_span_id, PARENT_SPAN, "the parent span");
    let a = &written.attributes;
    assert_eq!(value(a, "mcp.method.name"), "tools/call");
    assert_eq!(value(a, "gen_ai.tool.name"), "write_file");
    assert_eq!(value(a, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(value(a, "mcp.session.id"), session.id().to_string());
    assert_eq!(value(a, "network.transport"), "pipe");
    assert_eq!(value(a, "aido.journal.seq"), wrote.seq.to_string());
    let records = w.journal.all_records(session.id()).unwrap();
    let outcome = records
        .iter()
        .find(|r| r.seq == wrote.seq + 1)
        .expect("the outcome record follows the proposal");
    assert_eq!(value(a, "aido.journal.hash"), outcome.hash);
    assert!(written.end_time_unix_nano >= written.start_time_unix_nano);

    let refused = spans
        .iter()
        .find(|s| s.name == "tools/call read_file")
        .unwrap_or_else(|| panic!("no read_file span in {spans:#?}"));
    assert_eq!(value(&refused.attributes, "aido.verdict"), "deny");
    assert_eq!(value(&refused.attributes, "error.type"), "tool_error");
    assert_eq!(
        value(&refused.attributes, "aido.error.code"),
        denied.failure.code
    );
    assert_eq!(refused.parent_span_id, "", "no traceparent: a root span");

    // Every record of the session so far, as a log record carrying its chain.
    let logs = collector
        .exported_logs(records.len(), Duration::from_secs(10))
        .await;
    for record in &records {
        let log = logs
            .iter()
            .find(|l| {
                value(&l.attributes, "aido.journal.session") == session.id().to_string()
                    && value(&l.attributes, "aido.journal.seq") == record.seq.to_string()
            })
            .unwrap_or_else(|| panic!("no log record for seq {} in {logs:#?}", record.seq));
        assert_eq!(value(&log.attributes, "aido.journal.hash"), record.hash);
        assert_eq!(
            value(&log.attributes, "aido.journal.prev_hash"),
            record.prev
        );
        assert_eq!(
            value(&log.attributes, "aido.journal.kind"),
            record.event.kind()
        );
        assert!(log.body.as_deref().unwrap_or("").contains(&record.hash));
    }

    let metrics = collector.exported_metrics(1, Duration::from_secs(10)).await;
    let dump = format!("{metrics:?}");
    assert!(dump.contains("aido.actions"), "{dump}");
    assert!(dump.contains("aido.action.duration"), "{dump}");
    assert!(dump.contains("aido.policy.denials"), "{dump}");
    assert!(dump.contains("aido.journal.commit.duration"), "{dump}");

    assert_eq!(telemetry.dropped(), 0);
    session.close("done").await;
    // Shutdown flushes with blocking calls: off the async workers.
    tokio::task::spawn_blocking(move || telemetry.shutdown())
        .await
        .unwrap();
    w.runtime.shutdown().await;
}
