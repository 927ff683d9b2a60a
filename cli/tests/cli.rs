//! The `aido` binary end to end: an MCP session over raw JSON-RPC on stdio, then the forensic
//! commands on the journal it left — timeline, export, verify (and a tamper it must catch),
//! config provenance, policy check, reading a journal a live process holds.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::path::Path;

use common::{Mcp, home, session_of, stdout};
use serde_json::{Value, json};

#[test]
fn a_session_can_be_shown_exported_verified_and_its_tampering_found() {
    let h = home();
    let mut mcp = Mcp::start(&h, "forensics");
    let ok = mcp.call(
        "write_file",
        json!({"path": "notes.txt", "content": "hello"}),
    );
    assert_eq!(ok["result"]["isError"], false);
    let denied = mcp.call("read_file", json!({"path": "~/.ssh/id_ed25519"}));
    assert_eq!(denied["result"]["isError"], true);
    assert_eq!(
        denied["result"]["structuredContent"]["gate"],
        "deny_patterns"
    );
    let rejected = mcp.call("write_file", json!({"path": 7}));
    assert_eq!(
        rejected["result"]["structuredContent"]["code"],
        "invalid_arguments"
    );
    // A live journal can be read while aido mcp holds it.
    let id = session_of(&h, "forensics");
    mcp.close();
    assert_eq!(
        std::fs::read_to_string(h.home.join("notes.txt")).unwrap(),
        "hello"
    );

    let show = h.cmd(&["replay", "show", &id[..8]]);
    let text = stdout(&show);
    assert!(
        text.contains("write_file [fs_write]") && text.contains("allow"),
        "{text}"
    );
    assert!(
        text.contains("DENY path_denied_by_pattern by deny_patterns"),
        "{text}"
    );
    assert!(
        text.contains("rejected call to \"write_file\" [invalid_arguments]"),
        "{text}"
    );
    assert!(!text.contains("\x1b["), "no colour when piped");

    let export = stdout(&h.cmd(&["replay", "export", &id, "--jsonl"]));
    let records: Vec<Value> = export
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=records.len() as u64).collect::<Vec<_>>());
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "session_started",
            "action_proposed",
            "action_completed",
            "action_proposed",
            "call_rejected",
            "session_ended"
        ]
    );
    assert_eq!(records[3]["verdict"]["code"], "path_denied_by_pattern");
    for pair in records.windows(2) {
        assert_eq!(pair[1]["prev"], pair[0]["hash"]);
    }

    let verify = h.cmd(&["replay", "verify", &id]);
    assert!(verify.status.success(), "{}", stdout(&verify));
    assert!(stdout(&verify).contains("chain intact"));

    // Change the denied proposal's recorded path on disk, as someone covering tracks would.
    tamper(
        &h.aido_home.join("journal/main"),
        &id,
        4,
        b"id_ed25519",
        b"id_rsa_xx1",
    );
    let verify = h.cmd(&["replay", "verify", &id]);
    assert_eq!(verify.status.code(), Some(1));
    assert!(
        stdout(&verify).contains("BROKEN at seq 4"),
        "{}",
        stdout(&verify)
    );
}

fn tamper(db: &Path, session: &str, seq: u64, from: &[u8], to: &[u8]) {
    let db = sled::open(db).unwrap();
    let records = db.open_tree("records").unwrap();
    let mut key = (0..16)
        .map(|i| u8::from_str_radix(&session[2 * i..2 * i + 2], 16).unwrap())
        .collect::<Vec<_>>();
    key.extend_from_slice(&seq.to_be_bytes());
    let mut value = records.get(&key).unwrap().unwrap().to_vec();
    let at = value
        .windows(from.len())
        .position(|w| w == from)
        .expect("the bytes to alter");
    value[at..at + to.len()].copy_from_slice(to);
    records.insert(key, value).unwrap();
    db.flush().unwrap();
}

#[test]
fn two_aido_processes_share_one_home() {
    let h = home();
    let mut first = Mcp::start(&h, "first");
    let mut second = Mcp::start(&h, "second");
    assert_eq!(
        first.call("write_file", json!({"path": "a", "content": "1"}))["result"]["isError"],
        false
    );
    assert_eq!(
        second.call("write_file", json!({"path": "b", "content": "2"}))["result"]["isError"],
        false
    );
    first.close();
    second.close();
    assert!(
        h.aido_home.join("journal/main").exists() && h.aido_home.join("journal/shard-2").exists()
    );
    for client in ["first", "second"] {
        let id = session_of(&h, client);
        assert!(h.cmd(&["replay", "verify", &id]).status.success());
    }
}

#[test]
fn config_show_names_the_source_of_every_value() {
    let h = home();
    std::fs::create_dir_all(&h.aido_home).unwrap();
    std::fs::write(
        h.aido_home.join("config.toml"),
        "mode = \"confirm\"\n[paths]\ndeny = [\"**/secrets/**\"]\n",
    )
    .unwrap();
    let extra = h.home.join("extra.toml");
    std::fs::write(&extra, "[limits]\nread_bytes_max = 1024\n").unwrap();
    let out = h.cmd(&[
        "config",
        "show",
        "--json",
        "--config",
        extra.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["config"]["mode"], "confirm");
    assert_eq!(v["config"]["limits"]["read_bytes_max"], 1024);
    let home_file = h.aido_home.join("config.toml").display().to_string();
    assert_eq!(v["sources"]["mode"], json!([home_file]));
    assert_eq!(
        v["sources"]["limits.read_bytes_max"],
        json!([extra.display().to_string()])
    );
    assert_eq!(v["sources"]["desktop.enabled"], json!(["defaults"]));
    assert_eq!(v["sources"]["paths.deny"], json!(["defaults", home_file]));
    let text = stdout(&h.cmd(&["config", "show"]));
    assert!(
        text.contains("mode") && text.contains("defaults") && text.contains("[limits]"),
        "{text}"
    );

    std::fs::write(h.aido_home.join("config.toml"), "mode = \"yolo\"\n").unwrap();
    let bad = h.cmd(&["config", "show"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("[config_shape]"));
}

#[test]
fn policy_check_answers_with_verdict_and_exit_code() {
    let h = home();
    let check = |action: Value| h.cmd(&["policy", "check", &action.to_string()]);
    let allow = check(json!({"type": "write_file", "path": "~/x.txt", "content": ""}));
    assert_eq!(allow.status.code(), Some(0));
    assert!(stdout(&allow).contains("\"allow\""));
    let deny =
        check(json!({"type": "pipeline", "steps": [{"type": "read_file", "path": "/etc/shadow"}]}));
    assert_eq!(deny.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&deny.stdout).unwrap();
    assert_eq!(
        (v["gate"].as_str(), v["code"].as_str(), v["leaf"].as_str()),
        (
            Some("path_walls"),
            Some("path_outside_walls"),
            Some("steps[0]")
        )
    );
    std::fs::create_dir_all(&h.aido_home).unwrap();
    std::fs::write(h.aido_home.join("config.toml"), "mode = \"confirm\"\n").unwrap();
    assert_eq!(
        check(json!({"type": "write_file", "path": "~/x", "content": ""}))
            .status
            .code(),
        Some(3)
    );
    assert_eq!(
        h.cmd(&["policy", "check", "{\"type\": \"rm\"}"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn a_full_session_refuses_new_actions_with_a_code_and_loses_nothing() {
    let h = home();
    std::fs::create_dir_all(&h.aido_home).unwrap();
    // started + 2 x (proposal, outcome) = 5; a third action would need 3 more.
    std::fs::write(
        h.aido_home.join("config.toml"),
        "[limits]\nrecords_per_session_max = 7\n",
    )
    .unwrap();
    let mut mcp = Mcp::start(&h, "full");
    for name in ["one", "two"] {
        let r = mcp.call("write_file", json!({"path": name, "content": name}));
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
    for _ in 0..2 {
        let r = mcp.call("write_file", json!({"path": "three", "content": "3"}));
        assert_eq!(r["result"]["isError"], true);
        assert_eq!(
            r["result"]["structuredContent"]["code"],
            "journal_session_full"
        );
    }
    // Still serving.
    let tools = mcp.request("tools/list", json!({}));
    assert!(tools["result"]["tools"].as_array().unwrap().len() > 10);
    let id = session_of(&h, "full");
    mcp.close();
    assert!(
        !h.home.join("three").exists(),
        "a refused action did not run"
    );
    let verify = h.cmd(&["replay", "verify", &id]);
    assert!(verify.status.success());
    let export = stdout(&h.cmd(&["replay", "export", &id, "--jsonl"]));
    let completed = export
        .lines()
        .filter(|l| l.contains("\"action_completed\""))
        .count();
    assert_eq!(completed, 2, "both finished actions kept their outcomes");
}
