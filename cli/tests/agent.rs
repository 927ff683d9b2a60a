//! `aido agent` against a scripted OpenAI-compatible endpoint on 127.0.0.1 (a real HTTP
//! server, reached by the binary's llm_call through the policy): the loop's mechanics without
//! a model. Each reply is scripted; each request the endpoint receives is kept, so a test reads
//! what the model would have been told.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::common::{self, AIDO, Home};

/// A chat completions endpoint that answers request N with `replies[N]` (the last one again
/// once they run out), each reporting `tokens` of usage; or with `status` when it is not 200.
struct Endpoint {
    port: u16,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl Endpoint {
    fn start(replies: Vec<String>, tokens: u64, status: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let kept = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let Some(body) = read_request(&mut stream) else {
                    continue;
                };
                let n = {
                    let mut kept = kept.lock().unwrap();
                    kept.push(body);
                    kept.len() - 1
                };
                let reply = replies[n.min(replies.len() - 1)].clone();
                let answer = json!({
                    "id": "chatcmpl-test", "object": "chat.completion", "model": "scripted",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": tokens - 1, "completion_tokens": 1, "total_tokens": tokens},
                })
                .to_string();
                let head = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    answer.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        Self { port, requests }
    }

    fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }

    /// The config that lets aido reach it.
    fn config(&self) -> String {
        format!(
            "[net]\nallow = [\"127.0.0.1:{port}\"]\n[llm]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"scripted\"\n",
            port = self.port
        )
    }
}

fn read_request(stream: &mut std::net::TcpStream) -> Option<Value> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

fn agent(h: &Home, args: &[&str]) -> Output {
    Command::new(AIDO)
        .arg("agent")
        .args(args)
        .env("HOME", &h.home)
        .env("AIDO_HOME", &h.aido_home)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// The last message of a request: what the model was told of its previous step.
fn last_message(request: &Value) -> String {
    let messages = request["messages"].as_array().unwrap();
    messages.last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The agent's session's records.
fn records(h: &Home) -> Vec<Value> {
    let session = common::session_of(h, "aido agent");
    let out = h.cmd(&["replay", "export", &session, "--jsonl"]);
    assert!(out.status.success());
    common::stdout(&out)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The primitives proposed in the session, in order.
fn proposed(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .filter(|r| r["event"] == "action_proposed")
        .map(|r| r["action"]["type"].as_str().unwrap().to_owned())
        .collect()
}

fn call(tool: &str, arguments: Value) -> String {
    json!({"thought": format!("use {tool}"), "tool": tool, "arguments": arguments}).to_string()
}

#[test]
fn tool_calls_are_actions_of_the_agents_session_and_refusals_go_back_to_the_model() {
    let h = common::home();
    let endpoint = Endpoint::start(
        vec![
            call("read_file", json!({"path": "notes.txt"})),
            call("read_file", json!({"path": "/etc/shadow"})),
            call("write_file", json!({"path": "x.txt", "content": "y"})),
            "The notes say hello.".into(),
            json!({"answer": "the notes say hello"}).to_string(),
        ],
        100,
        200,
    );
    let ws = h.workspace("ws", &endpoint.config());
    std::fs::write(ws.join("notes.txt"), "hello from the notes\n").unwrap();
    let out = agent(&h, &["--toolset", "read_file,stat_files", "Read notes.txt"]);
    let stdout = common::stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let session = common::session_of(&h, "aido agent");
    assert!(
        stdout.starts_with(&format!("session {session}")),
        "{stdout}"
    );
    assert!(
        stdout.contains("call    read_file {\"path\":\"notes.txt\"}"),
        "{stdout}"
    );
    assert!(stdout.contains("the notes say hello"), "{stdout}");
    assert!(!stdout.contains("\x1b["), "NO_COLOR: {stdout}");

    // Each request carries the conversation: the goal, then each reply with its result.
    let requests = endpoint.requests();
    assert_eq!(requests.len(), 5);
    let first = &requests[0]["messages"];
    assert_eq!(first[0]["role"], "system");
    let system = first[0]["content"].as_str().unwrap();
    assert!(system.contains("## read_file\n") && system.contains("## stat_files\n"));
    assert!(
        !system.contains("## write_file"),
        "only the toolset's tools are offered"
    );
    assert_eq!(first[1]["content"], "Goal: Read notes.txt");
    assert!(last_message(&requests[1]).contains("hello from the notes"));
    // The refusal, with its code, is the next thing the model reads.
    let refused = last_message(&requests[2]);
    assert!(refused.contains("refused by the policy"), "{refused}");
    assert!(last_message(&requests[3]).contains("[tool_not_enabled]"));
    assert!(last_message(&requests[4]).contains("[agent_reply_unparsed]"));

    // The whole loop is the session's journal: each turn an llm_call, each call an action,
    // the call outside the toolset a rejected call.
    let records = records(&h);
    assert_eq!(
        proposed(&records),
        [
            "llm_call",
            "read_file",
            "llm_call",
            "read_file",
            "llm_call",
            "llm_call",
            "llm_call"
        ]
    );
    let denied = records
        .iter()
        .find(|r| r["event"] == "action_proposed" && r["action"]["path"] == "/etc/shadow")
        .unwrap();
    assert_eq!(denied["verdict"]["verdict"], "deny");
    let code = denied["verdict"]["code"].as_str().unwrap();
    assert!(refused.contains(&format!("[{code}]")), "{refused}");
    assert!(
        records
            .iter()
            .any(|r| r["event"] == "call_rejected" && r["tool"] == "write_file")
    );
    assert!(!ws.join("x.txt").exists());
    assert_eq!(records.last().unwrap()["event"], "session_ended");
}

#[test]
fn the_step_budget_stops_the_loop_with_its_code() {
    let h = common::home();
    let endpoint = Endpoint::start(vec![call("stat_files", json!({"paths": ["."]}))], 10, 200);
    h.workspace("ws", &endpoint.config());
    let out = agent(&h, &["--toolset", "files", "--steps", "2", "Look around"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("[agent_steps_spent]"), "{stderr}");
    assert_eq!(endpoint.requests().len(), 2);
    assert_eq!(
        proposed(&records(&h)),
        ["llm_call", "stat_files", "llm_call", "stat_files"]
    );
}

#[test]
fn the_token_budget_stops_the_loop_before_the_call_it_cannot_pay_for() {
    let h = common::home();
    let endpoint = Endpoint::start(vec![call("stat_files", json!({"paths": ["."]}))], 1000, 200);
    h.workspace("ws", &endpoint.config());
    let out = agent(
        &h,
        &["--toolset", "files", "--tokens", "1500", "Look around"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("[agent_tokens_spent]"), "{stderr}");
    // The second turn spent the budget: its call did not run.
    assert_eq!(
        proposed(&records(&h)),
        ["llm_call", "stat_files", "llm_call"]
    );
    // Each turn asks for no more tokens than are left.
    assert_eq!(endpoint.requests()[1]["max_tokens"], 500);
}

#[test]
fn a_failing_endpoint_and_bad_input_exit_with_their_codes() {
    let h = common::home();
    let endpoint = Endpoint::start(vec!["overloaded".into()], 1, 503);
    h.workspace("ws", &endpoint.config());
    let out = agent(&h, &["Anything"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(
        stderr.contains("[agent_model_failed]") && stderr.contains("[llm_http_error]"),
        "{stderr}"
    );
    for (args, code) in [
        (vec!["--toolset", "nope", "x"], "[agent_toolset_unknown]"),
        (vec!["--steps", "0", "x"], "[agent_budget_invalid]"),
        (vec!["   "], "[agent_goal_invalid]"),
    ] {
        let out = agent(&h, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(code), "{args:?}: {stderr}");
    }
    let bare = common::home();
    bare.workspace("ws", "");
    let out = agent(&bare, &["x"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("[llm_not_configured]"), "{stderr}");
}
