//! `@modelcontextprotocol/server-everything` as a downstream, in the sandbox (and once over
//! streamable HTTP).

use std::sync::Arc;
use std::time::Duration;

use aido_gateway::{Declining, Downstream, DownstreamConfig, RestartBudget, ToolClass};
use serde_json::json;

use crate::support::{Fixture, Recorder, everything_script, object, sandbox, text, wait_until};

fn config(fixture: &Fixture, script: &std::path::Path) -> DownstreamConfig {
    let mut config = DownstreamConfig::stdio(
        "everything",
        "node",
        [script.display().to_string(), "stdio".into()],
    );
    config.writable = vec![fixture.work.clone()];
    config
}

async fn start(fixture: &Fixture) -> Option<Downstream> {
    let script = everything_script()?;
    let downstream = Downstream::start(config(fixture, &script), sandbox(), None).await;
    Some(downstream.unwrap_or_else(|error| panic!("start ({}): {error}", error.code())))
}

pub async fn lists_tools() {
    let fixture = Fixture::new();
    let Some(everything) = start(&fixture).await else {
        return;
    };
    let tools = everything.tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
    for expected in [
        "everything__echo",
        "everything__get-sum",
        "everything__trigger-long-running-operation",
        "everything__trigger-elicitation-request",
    ] {
        assert!(names.contains(&expected), "{expected} not in {names:?}");
    }
    for tool in &tools {
        assert!(tool.name.len() <= aido_gateway::config::TOOL_NAME_LEN_MAX);
        assert_eq!(aido_gateway::server_of(&tool.name), Some("everything"));
        assert_eq!(tool.toolset, "everything");
    }
    let sum = tools
        .iter()
        .find(|tool| tool.name == "everything__get-sum")
        .unwrap();
    assert_eq!(sum.original(), "get-sum");
    assert_eq!(sum.class, ToolClass::Read);
    let annotations = sum.annotations().unwrap();
    assert_eq!(annotations.read_only_hint, Some(true));
    assert_eq!(annotations.idempotent_hint, Some(true));
    assert!(sum.tool.description.is_some());
    assert!(sum.tool.input_schema.contains_key("properties"));
    assert_eq!(sum.exposed().name, "everything__get-sum");
    let elicitation = tools
        .iter()
        .find(|tool| tool.original() == "trigger-elicitation-request")
        .unwrap();
    assert_eq!(elicitation.class, ToolClass::Write);
}

pub async fn echo_and_sum() {
    let fixture = Fixture::new();
    let Some(everything) = start(&fixture).await else {
        return;
    };
    let echoed = everything
        .call(
            "everything__echo",
            object(json!({"message": "hello from aido"})),
            Arc::new(Declining),
        )
        .await
        .unwrap();
    assert!(text(&echoed).contains("hello from aido"), "{echoed:?}");
    let sum = everything
        .call(
            "everything__get-sum",
            object(json!({"a": 2, "b": 40})),
            Arc::new(Declining),
        )
        .await
        .unwrap();
    assert!(text(&sum).contains("42"), "{sum:?}");
    // The result is the journal's input: it round-trips through JSON unchanged.
    let journaled = serde_json::to_value(&sum).unwrap();
    let replayed: aido_gateway::CallToolResult = serde_json::from_value(journaled).unwrap();
    assert_eq!(replayed, sum);
    // It runs confined: the sandbox's environment (its own HOME, none of the parent's
    // variables), not the test's.
    let env = everything
        .call("everything__get-env", None, Arc::new(Declining))
        .await
        .unwrap();
    let env = text(&env);
    assert!(env.contains("\"HOME\": \"/tmp\""), "{env}");
    assert!(!env.contains(crate::support::DOWNSTREAMS_VAR), "{env}");
    // No network hosts listed: no proxy, no network at all.
    assert!(!env.contains("HTTPS_PROXY"), "{env}");
}

/// With hosts listed the server gets an egress proxy of its own (its only way out).
pub async fn behind_its_proxy() {
    let fixture = Fixture::new();
    let Some(script) = everything_script() else {
        return;
    };
    let mut config = config(&fixture, &script);
    config.network = vec!["registry.npmjs.org:443".into()];
    let everything = Downstream::start(config, sandbox(), None).await;
    let everything = everything.unwrap_or_else(|error| panic!("{}: {error}", error.code()));
    let env = everything
        .call("everything__get-env", None, Arc::new(Declining))
        .await
        .unwrap();
    let env = text(&env);
    assert!(
        env.contains("\"HTTPS_PROXY\": \"http://127.0.0.1:"),
        "{env}"
    );
}

pub async fn errors() {
    let fixture = Fixture::new();
    let Some(everything) = start(&fixture).await else {
        return;
    };
    let error = everything
        .call(
            "everything__get-sum",
            object(json!({"a": "not a number"})),
            Arc::new(Declining),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            error.code(),
            "downstream_tool_failed" | "downstream_refused"
        ),
        "{error}"
    );
    let failure = aido_codes::Failure::from(error);
    assert!(!failure.message.is_empty());
    eprintln!("the downstream's own error: {}", failure.message);
    let error = everything
        .call("everything__no-such-tool", None, Arc::new(Declining))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "downstream_tool_unknown");
    let error = everything
        .call_within(
            "everything__trigger-long-running-operation",
            object(json!({"duration": 5, "steps": 5})),
            Arc::new(Declining),
            Duration::from_millis(300),
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), "downstream_timeout", "{error}");
    // A timeout is not a crash: the server still answers.
    let echoed = everything
        .call(
            "everything__echo",
            object(json!({"message": "still here"})),
            Arc::new(Declining),
        )
        .await
        .unwrap();
    assert!(text(&echoed).contains("still here"));
}

pub async fn progress() {
    let fixture = Fixture::new();
    let Some(everything) = start(&fixture).await else {
        return;
    };
    let recorder = Arc::new(Recorder::default());
    let result = everything
        .call(
            "everything__trigger-long-running-operation",
            object(json!({"duration": 1, "steps": 4})),
            recorder.clone(),
        )
        .await
        .unwrap();
    assert!(text(&result).contains("completed"), "{result:?}");
    // Four steps, a quarter of a second apart: forwarded in order. The last one is sent
    // just before the answer and may be overtaken by it (then it is dropped).
    let progress = recorder.progress.lock().unwrap().clone();
    let steps: Vec<f64> = progress.iter().map(|progress| progress.progress).collect();
    assert!(steps.starts_with(&[1.0, 2.0, 3.0]), "{progress:?}");
    assert!(steps.len() <= 4 && steps.is_sorted(), "{progress:?}");
    for progress in &progress {
        assert_eq!(progress.server, "everything");
        assert_eq!(progress.total, Some(4.0));
    }
}

pub async fn elicitation() {
    let fixture = Fixture::new();
    let Some(everything) = start(&fixture).await else {
        return;
    };
    let recorder = Recorder::answering(json!({"name": "Ada Lovelace", "check": true}));
    let result = everything
        .call(
            "everything__trigger-elicitation-request",
            None,
            recorder.clone(),
        )
        .await
        .unwrap();
    assert_eq!(recorder.elicitations.lock().unwrap().len(), 1);
    assert!(text(&result).contains("Ada Lovelace"), "{result:?}");
    // Declined: the server says so in its result.
    let result = everything
        .call(
            "everything__trigger-elicitation-request",
            None,
            Arc::new(Declining),
        )
        .await
        .unwrap();
    assert!(
        text(&result).to_lowercase().contains("decline"),
        "{result:?}"
    );
}

/// Kills the sandbox's init (the server's whole tree) from outside, as a crash would.
fn kill(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

pub async fn crash_and_restart() {
    let fixture = Fixture::new();
    let Some(script) = everything_script() else {
        return;
    };
    let mut config = config(&fixture, &script);
    config.restarts = RestartBudget {
        count: 1,
        window_secs: 600,
    };
    let everything = Arc::new(Downstream::start(config, sandbox(), None).await.unwrap());
    let first = everything.pid().await.unwrap();
    // A call in flight when the server dies is answered with the crash.
    let recorder = Arc::new(Recorder::default());
    let call = tokio::spawn({
        let (everything, recorder) = (everything.clone(), recorder.clone());
        async move {
            everything
                .call(
                    "everything__trigger-long-running-operation",
                    object(json!({"duration": 20, "steps": 40})),
                    recorder,
                )
                .await
        }
    });
    assert!(wait_until(|| recorder.progress_count() > 0, Duration::from_secs(10)).await);
    kill(first);
    let error = call.await.unwrap().unwrap_err();
    assert_eq!(error.code(), "downstream_crashed", "{error}");
    // The next call restarts it (one restart in the budget).
    let echoed = everything
        .call(
            "everything__echo",
            object(json!({"message": "back"})),
            Arc::new(Declining),
        )
        .await
        .unwrap();
    assert!(text(&echoed).contains("back"));
    let second = everything.pid().await.unwrap();
    assert_ne!(first, second);
    // A crash between calls is found by the next call, and the budget is spent.
    kill(second);
    let mut running = true;
    for _ in 0..500 {
        running = everything.running().await;
        if !running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!running, "the killed server still shows as running");
    let error = everything
        .call(
            "everything__echo",
            object(json!({"message": "again"})),
            Arc::new(Declining),
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), "downstream_unavailable", "{error}");
    let error = everything.tools().await.unwrap_err();
    assert_eq!(error.code(), "downstream_unavailable", "{error}");
}

pub async fn filtered() {
    let fixture = Fixture::new();
    let Some(script) = everything_script() else {
        return;
    };
    let mut config = config(&fixture, &script);
    config.tools = Some(vec!["echo".into(), "get-s*".into()]);
    config.toolset = Some("demo".into());
    let everything = Downstream::start(config, sandbox(), None).await.unwrap();
    let tools = everything.tools().await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        vec![
            "everything__echo",
            "everything__get-structured-content",
            "everything__get-sum"
        ]
    );
    assert!(tools.iter().all(|tool| tool.toolset == "demo"));
    let error = everything
        .call("everything__get-env", None, Arc::new(Declining))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "downstream_tool_unknown");
    // Dropped, the server is shut down: its input closed, its tree gone.
    let pid = everything.pid().await.unwrap();
    drop(everything);
    let gone = wait_until(
        || std::fs::metadata(format!("/proc/{pid}")).is_err(),
        Duration::from_secs(10),
    )
    .await;
    assert!(gone, "the sandbox init {pid} outlived its downstream");
}

/// server-everything's streamable HTTP transport: a plain fixture process (not the
/// gateway's to confine), killed when the test ends however it ends.
struct HttpServer {
    child: std::process::Child,
    port: u16,
}

impl HttpServer {
    async fn start(script: &std::path::Path, port: u16) -> HttpServer {
        let child = std::process::Command::new("node")
            .arg(script)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let listening = wait_until(
            || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
            Duration::from_secs(20),
        )
        .await;
        assert!(listening, "server-everything did not listen on {port}");
        HttpServer { child, port }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP downstream reached with a bearer token from a file; when its server goes away the
/// call says so, and the next call connects again.
pub async fn http() {
    let fixture = Fixture::new();
    let Some(script) = everything_script() else {
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = HttpServer::start(&script, port).await;
    let token = fixture.work.join("token");
    std::fs::write(&token, "a-test-token\n").unwrap();
    let url = format!("http://127.0.0.1:{}/mcp", server.port);
    let config = DownstreamConfig::http("remote", &url, Some(token));
    let remote = Downstream::start(config, sandbox(), None).await;
    let remote = remote.unwrap_or_else(|error| panic!("{}: {error}", error.code()));
    assert_eq!(remote.pid().await, None);
    let sum = remote
        .call(
            "remote__get-sum",
            object(json!({"a": 1, "b": 2})),
            Arc::new(Declining),
        )
        .await
        .unwrap();
    assert!(text(&sum).contains('3'), "{sum:?}");
    drop(server);
    let error = remote
        .call(
            "remote__get-sum",
            object(json!({"a": 1, "b": 2})),
            Arc::new(Declining),
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), "downstream_crashed", "{error}");
    let _server = HttpServer::start(&script, port).await;
    let sum = remote
        .call(
            "remote__get-sum",
            object(json!({"a": 2, "b": 2})),
            Arc::new(Declining),
        )
        .await
        .unwrap();
    assert!(text(&sum).contains('4'), "{sum:?}");
}

/// Several entries behind one gateway: a tool routed by its namespaced name; an entry that
/// cannot start is reported and left out, the others run.
pub async fn routed() {
    let fixture = Fixture::new();
    let Some(script) = everything_script() else {
        return;
    };
    let mut ghost = DownstreamConfig::stdio("ghost", "aido-no-such-mcp-server", ["--stdio"]);
    ghost.writable = vec![fixture.work.clone()];
    let entries = vec![config(&fixture, &script), ghost];
    let (gateway, failed) = aido_gateway::Gateway::start(entries, &sandbox())
        .await
        .unwrap();
    assert_eq!(gateway.names().collect::<Vec<_>>(), vec!["everything"]);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].code(), "downstream_command_missing");
    assert_eq!(failed[0].server(), Some("ghost"));
    let tools = gateway.tools().await;
    assert_eq!(tools.len(), 1);
    assert!(tools[0].1.as_ref().unwrap().len() > 5);
    let sum = gateway
        .call(
            "everything__get-sum",
            object(json!({"a": 20, "b": 22})),
            Arc::new(Declining),
        )
        .await
        .unwrap();
    assert!(text(&sum).contains("42"));
    for name in ["ghost__echo", "echo", "__echo"] {
        let error = gateway
            .call(name, None, Arc::new(Declining))
            .await
            .unwrap_err();
        assert_eq!(error.code(), "downstream_tool_unknown", "{name}");
    }
    // Entries are checked together before anything starts.
    let twice = vec![config(&fixture, &script), config(&fixture, &script)];
    let error = aido_gateway::Gateway::start(twice, &sandbox())
        .await
        .err()
        .unwrap();
    assert_eq!(error.code(), "downstream_name_duplicate");
}

/// `stop` ends the server and the calls in flight; the next call starts it again, which a
/// budget of no restarts at all still allows (a stop is not a crash).
pub async fn stopped() {
    let fixture = Fixture::new();
    let Some(script) = everything_script() else {
        return;
    };
    let mut config = config(&fixture, &script);
    config.restarts = RestartBudget {
        count: 0,
        window_secs: 600,
    };
    let everything = Arc::new(Downstream::start(config, sandbox(), None).await.unwrap());
    let first = everything.pid().await.unwrap();
    let recorder = Arc::new(Recorder::default());
    let call = tokio::spawn({
        let (everything, recorder) = (everything.clone(), recorder.clone());
        async move {
            everything
                .call(
                    "everything__trigger-long-running-operation",
                    object(json!({"duration": 20, "steps": 40})),
                    recorder,
                )
                .await
        }
    });
    assert!(wait_until(|| recorder.progress_count() > 0, Duration::from_secs(10)).await);
    everything.stop().await;
    let error = call.await.unwrap().unwrap_err();
    assert_eq!(error.code(), "downstream_crashed", "{error}");
    let gone = wait_until(
        || std::fs::metadata(format!("/proc/{first}")).is_err(),
        Duration::from_secs(10),
    )
    .await;
    assert!(gone, "the stopped server's init {first} is still there");
    let echoed = everything
        .call(
            "everything__echo",
            object(json!({"message": "started again"})),
            Arc::new(Declining),
        )
        .await
        .unwrap();
    assert!(text(&echoed).contains("started again"));
    assert_ne!(everything.pid().await, Some(first));
}

/// Calls run side by side on one server, and each call's progress goes to its own upstream.
pub async fn concurrent() {
    let fixture = Fixture::new();
    let Some(everything) = start(&fixture).await else {
        return;
    };
    let everything = Arc::new(everything);
    let (fast, slow) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
    let long = |recorder: Arc<Recorder>, steps: u32| {
        let everything = everything.clone();
        async move {
            everything
                .call(
                    "everything__trigger-long-running-operation",
                    object(json!({"duration": 1, "steps": steps})),
                    recorder,
                )
                .await
        }
    };
    let sums = (0..5).map(|i| {
        let everything = everything.clone();
        async move {
            let sum = everything
                .call(
                    "everything__get-sum",
                    object(json!({"a": i, "b": 1000})),
                    Arc::new(Declining),
                )
                .await
                .unwrap();
            assert!(text(&sum).contains(&(i + 1000).to_string()), "{sum:?}");
        }
    });
    let (first, second, ()) = tokio::join!(long(fast.clone(), 2), long(slow.clone(), 5), async {
        for sum in sums {
            sum.await;
        }
    });
    first.unwrap();
    second.unwrap();
    let totals = |recorder: &Recorder| -> Vec<Option<f64>> {
        recorder
            .progress
            .lock()
            .unwrap()
            .iter()
            .map(|p| p.total)
            .collect()
    };
    // Each call's progress only (the last step of each may be overtaken by its answer).
    let (fast, slow) = (totals(&fast), totals(&slow));
    assert!(
        matches!(fast.len(), 1..=2) && fast.iter().all(|t| *t == Some(2.0)),
        "{fast:?}"
    );
    assert!(
        matches!(slow.len(), 4..=5) && slow.iter().all(|t| *t == Some(5.0)),
        "{slow:?}"
    );
}
