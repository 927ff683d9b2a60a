//! Confined commands through the real binary: `run_command` over MCP and `aido exec`, each
//! journaled in its session and played back without spawning anything (issue 9).

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::process::Command;

use common::{AIDO, Mcp, home, session_of, stdout};
use serde_json::json;

fn played_back(h: &common::Home, id: &str) {
    let played = h.cmd(&["replay", "playback", id]);
    let text = stdout(&played);
    assert!(played.status.success(), "{text}");
    assert!(text.contains(" 0 mismatch(es)"), "{text}");
}

#[test]
fn run_command_runs_confined_is_journaled_and_plays_back() {
    let h = home();
    std::fs::create_dir_all(h.home.join(".ssh")).unwrap();
    std::fs::write(h.home.join(".ssh/id_x"), "PRIVATE").unwrap();
    let mut mcp = Mcp::start(&h, "process");
    let echo = mcp.call("run_command", json!({"argv": ["echo", "hi"]}));
    let out = &echo["result"]["structuredContent"];
    assert_eq!(echo["result"]["isError"], false, "{echo}");
    assert_eq!(out["exit_code"], 0, "{echo}");
    assert_eq!(out["stdout"], "hi\n");
    let secret = mcp.call(
        "run_command",
        json!({"shell": format!("cat {}", h.home.join(".ssh/id_x").display()), "env": {"GH_TOKEN": "s3cr3t-value"}}),
    );
    let out = &secret["result"]["structuredContent"];
    assert_eq!(secret["result"]["isError"], false, "{secret}");
    assert!(
        !out["stdout"].as_str().unwrap().contains("PRIVATE"),
        "{secret}"
    );
    let slow = mcp.call(
        "run_command",
        json!({"shell": "sleep 20", "timeout_ms": 300}),
    );
    assert_eq!(
        slow["result"]["structuredContent"]["timed_out"], true,
        "{slow}"
    );
    let id = session_of(&h, "process");
    mcp.close();
    let shown = stdout(&h.cmd(&["replay", "show", &id, "--json"]));
    assert!(shown.contains("GH_TOKEN"), "{shown}");
    assert!(
        !shown.contains("s3cr3t-value"),
        "secret values are kept as hashes"
    );
    played_back(&h, &id);
}

#[test]
fn aido_exec_passes_the_exit_status_through_in_a_journaled_session() {
    let h = home();
    let out = Command::new(AIDO)
        .args(["exec", "--", "sh", "-c", "echo out; exit 3"])
        .current_dir(&h.home)
        .env("HOME", &h.home)
        .env("AIDO_HOME", &h.aido_home)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout(&out), "out\n");
    let id = session_of(&h, "aido exec");
    played_back(&h, &id);
}
