//! Rewind and replay through the real binary: an agent snapshots and rewinds over MCP, a person
//! reads the branches with `aido replay show`, re-derives the files with `verify`, reproduces
//! results with `playback`, asks `what-if` of a stricter policy, diffs two seqs, rewinds from the
//! command line; and a `kill -9` in the middle of a restore leaves a consistent workspace.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{AIDO, Mcp, home, session_of, stdout};
use serde_json::{Value, json};

fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(rel, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    out
}

fn seq(v: &Value) -> u64 {
    v["result"]["_meta"]["aido/seq"].as_u64().unwrap()
}

#[test]
#[allow(clippy::too_many_lines)]
fn an_agent_rewinds_and_a_person_can_follow_verify_and_replay_it() {
    let h = home();
    let ws = h.workspace("project", "");

    let mut mcp = Mcp::start(&h, "rewinder");
    assert_eq!(
        mcp.call("write_file", json!({"path": "a.txt", "content": "one\n"}))["result"]["isError"],
        false
    );
    let snap = mcp.call("create_snapshot", json!({"label": "start"}));
    assert_eq!(snap["result"]["isError"], false, "{snap}");
    eprintln!(
        "snapshot backend: {}",
        snap["result"]["structuredContent"]["backend"]
    );
    let edit = mcp.call(
        "edit_file",
        json!({"path": "a.txt", "old_string": "one", "new_string": "two"}),
    );
    let read = mcp.call("read_file", json!({"path": "a.txt"}));
    assert_eq!(read["result"]["structuredContent"]["content"], "two\n");
    mcp.call("checksum", json!({"path": "a.txt"}));
    let target = seq(&read) + 1; // the read's outcome record
    let state_at_target = tree(&ws);
    mcp.call("write_file", json!({"path": "b.txt", "content": "b\n"}));
    mcp.call("move_to_trash", json!({"path": "a.txt"}));
    let rewound = mcp.call("rewind", json!({"to_seq": target}));
    assert_eq!(rewound["result"]["isError"], false, "{rewound}");
    assert_eq!(rewound["result"]["structuredContent"]["method"], "snapshot");
    assert_eq!(
        tree(&ws),
        state_at_target,
        "the files are as they were at seq {target}"
    );
    let id = session_of(&h, "rewinder");
    mcp.close();

    let show = stdout(&h.cmd(&["replay", "show", &id]));
    assert!(show.contains("REWOUND to seq"), "{show}");
    assert!(
        show.contains(" b1│"),
        "abandoned records carry their branch: {show}"
    );
    assert!(show.contains("snapshot "), "{show}");

    let verify = h.cmd(&["replay", "verify", &id]);
    assert!(verify.status.success(), "{}", stdout(&verify));
    assert!(stdout(&verify).contains("every blob and file hash checks out"));

    let playback = h.cmd(&["replay", "playback", &id]);
    assert!(playback.status.success(), "{}", stdout(&playback));
    assert!(
        stdout(&playback).starts_with(
            "reproduced 8 result(s) byte for byte; 0 not reproducible; 0 external; 0 mismatch(es)"
        ),
        "every result: the writes, the snapshot, the edit, the read, the checksum, the trash and the rewind: {}",
        stdout(&playback)
    );

    let strict = h.home.join("strict.toml");
    std::fs::write(&strict, "mode = \"readonly\"\n").unwrap();
    let what_if = h.cmd(&[
        "replay",
        "what-if",
        &id,
        "--policy",
        strict.to_str().unwrap(),
        "--json",
    ]);
    let changed: Vec<Value> = serde_json::from_slice(&what_if.stdout).unwrap();
    let primitives: Vec<&str> = changed
        .iter()
        .map(|c| c["primitive"].as_str().unwrap())
        .collect();
    assert_eq!(
        primitives,
        [
            "write_file",
            "edit_file",
            "write_file",
            "move_to_trash",
            "rewind"
        ]
    );
    assert!(
        changed
            .iter()
            .all(|c| c["other"]["code"] == "mode_readonly")
    );

    let diff = h.cmd(&[
        "replay",
        "diff",
        &id,
        "--from",
        &(seq(&edit) - 1).to_string(),
        "--to",
        &target.to_string(),
        "--json",
    ]);
    let changes: Vec<Value> = serde_json::from_slice(&diff.stdout).unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0]["kind"], "modified");
    assert!(
        changes[0]["diff"]
            .as_str()
            .unwrap()
            .contains("-one\n+two\n")
    );

    // A person rewinds further back from the command line.
    let back = h.cmd(&["replay", "rewind", &id, "--to", "3"]); // seq 3: the first write's outcome
    assert!(
        back.status.success(),
        "{}",
        String::from_utf8_lossy(&back.stderr)
    );
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "one\n");
    assert!(h.cmd(&["replay", "verify", &id]).status.success());
    let show = stdout(&h.cmd(&["replay", "show", &id]));
    assert!(
        show.contains("session resumed by aido replay rewind"),
        "{show}"
    );
}

/// A copy-backend workspace of 3000 files, an aido serving it as `client`, a snapshot of it,
/// and every file changed since: (workspace, aido, snapshot id, the tree at the snapshot).
fn three_thousand_files_changed_since_a_snapshot(
    h: &common::Home,
    client: &str,
) -> (PathBuf, Mcp, String, BTreeMap<String, String>) {
    let ws = h.workspace("big", "[snapshots]\nbackend = \"copy\"\n");
    for i in 0..3000 {
        std::fs::write(ws.join(format!("f{i:04}.txt")), format!("original {i}\n")).unwrap();
    }
    let mut mcp = Mcp::start(h, client);
    let snap = mcp.call("create_snapshot", json!({}));
    let snapshot = snap["result"]["structuredContent"]["snapshot"]
        .as_str()
        .unwrap()
        .to_owned();
    let original = tree(&ws);
    for i in 0..3000 {
        std::fs::write(ws.join(format!("f{i:04}.txt")), format!("changed {i}\n")).unwrap();
    }
    (ws, mcp, snapshot, original)
}

#[test]
fn kill_9_during_a_restore_leaves_the_workspace_before_or_after_and_the_journal_says_which() {
    let h = home();
    let (ws, mut mcp, snapshot, original) =
        three_thousand_files_changed_since_a_snapshot(&h, "crashy");
    let changed = tree(&ws);
    // Ask for the restore and kill aido in the middle of it: once its marker is on disk and
    // the first file is back.
    mcp.send(json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                    "params": {"name": "restore_snapshot", "arguments": {"snapshot": snapshot}}}));
    let recovery = h.aido_home.join("journal/main.recovery");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let begun = || {
        std::fs::read_dir(&recovery)
            .map(|d| {
                d.flatten()
                    .any(|e| e.path().extension().is_some_and(|x| x == "json"))
            })
            .unwrap_or(false)
            && std::fs::read_to_string(ws.join("f0000.txt"))
                .is_ok_and(|t| t.starts_with("original"))
    };
    while !begun() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    mcp.child.kill().unwrap();
    mcp.child.wait().unwrap();
    let at_kill = tree(&ws);
    let written = at_kill
        .iter()
        .filter(|(k, v)| original.get(*k) == Some(*v))
        .count();
    eprintln!("killed with {written} of 3000 files restored");

    // The next start finishes the restore before it serves anyone.
    start_again(&h);
    let after = tree(&ws);
    assert!(
        after == original || after == changed,
        "before or after, never half"
    );
    let id = session_of(&h, "crashy");
    let records = exported(&h, &id);
    let proposal = records
        .iter()
        .find(|r| r["event"] == "action_proposed" && r["action"]["type"] == "restore_snapshot")
        .unwrap();
    let outcome = records
        .iter()
        .find(|r| {
            r["proposal"] == proposal["seq"]
                && (r["event"] == "action_completed" || r["event"] == "action_failed")
        })
        .expect("the journal says how the restore ended");
    if after == changed {
        // Killed while the restore's marker was being written: nothing had run.
        assert_eq!(outcome["event"], "action_failed", "{outcome}");
        assert_eq!(outcome["failure"]["code"], "interrupted");
        eprintln!(
            "killed before the restore began: the workspace is as before, and the journal says so"
        );
    } else if written < 3000 {
        assert_eq!(outcome["outcome"]["output"]["recovered"], true, "{outcome}");
        // A recovered outcome records the same effects a live one does.
        assert_eq!(
            outcome["outcome"]["effects"][0]["effect"], "snapshot_restored",
            "{outcome}"
        );
        eprintln!("the restore was interrupted and finished at the next start");
    } else {
        eprintln!(
            "the restore finished before the kill landed; the journal says {}",
            outcome["event"]
        );
    }
    assert!(
        !recovery.exists() || std::fs::read_dir(&recovery).unwrap().count() == 0,
        "no marker left"
    );
    assert!(h.cmd(&["replay", "verify", &id]).status.success());
}

#[test]
fn workspace_init_makes_a_snapshot_friendly_workspace() {
    let h = home();
    let plain = h.cmd(&["workspace", "init", h.home.join("plain").to_str().unwrap()]);
    assert!(
        plain.status.success(),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    assert!(
        stdout(&plain).contains("snapshot backend:"),
        "{}",
        stdout(&plain)
    );
    let vol = h.home.join("vol");
    let btrfs = h.cmd(&[
        "workspace",
        "init",
        vol.to_str().unwrap(),
        "--btrfs",
        "256M",
    ]);
    if btrfs.status.success() {
        let text = stdout(&btrfs);
        assert!(
            text.contains("a btrfs subvolume") && text.contains("btrfs_subvolume: supported"),
            "{text}"
        );
        let mount = h.home.join(".vol.aido-volume");
        let _ = Command::new("umount").arg(&mount).status();
    } else {
        eprintln!(
            "workspace init --btrfs failed here ({}); the plain workspace above took its backend",
            String::from_utf8_lossy(&btrfs.stderr).trim()
        );
        assert!(String::from_utf8_lossy(&btrfs.stderr).contains("[snapshot_command_failed]"));
    }
    let bad = h.cmd(&[
        "workspace",
        "init",
        h.home.join("x").to_str().unwrap(),
        "--btrfs",
        "12Q",
    ]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn kill_9_during_a_rewind_is_finished_at_the_next_start() {
    let h = home();
    let ws = h.workspace("big", "[snapshots]\nbackend = \"copy\"\n");
    for i in 0..3000 {
        std::fs::write(ws.join(format!("f{i:04}.txt")), format!("original {i}\n")).unwrap();
    }
    let mut mcp = Mcp::start(&h, "crashy-rewind");
    let snap = mcp.call("create_snapshot", json!({}));
    let target = seq(&snap) + 2; // the snapshot's outcome record
    let original = tree(&ws);
    // Change every file through aido, in three pipelines of 1000 steps.
    for part in 0..3 {
        let steps: Vec<Value> = (part * 1000..(part + 1) * 1000)
            .map(|i| json!({"type": "write_file", "path": format!("f{i:04}.txt"), "content": format!("changed {i}\n")}))
            .collect();
        let r = mcp.call("pipeline", json!({"steps": steps}));
        assert_eq!(r["result"]["isError"], false);
    }
    mcp.send(json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                    "params": {"name": "rewind", "arguments": {"to_seq": target}}}));
    let recovery = h.aido_home.join("journal/main.recovery");
    let begun = || {
        std::fs::read_dir(&recovery)
            .map(|d| {
                d.flatten()
                    .any(|e| e.path().extension().is_some_and(|x| x == "json"))
            })
            .unwrap_or(false)
            && std::fs::read_to_string(ws.join("f0000.txt"))
                .is_ok_and(|t| t.starts_with("original"))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !begun() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    mcp.child.kill().unwrap();
    mcp.child.wait().unwrap();
    let restored = tree(&ws)
        .iter()
        .filter(|(k, v)| original.get(*k) == Some(*v))
        .count();
    eprintln!("killed the rewind with {restored} of 3000 files back");

    start_again(&h);
    assert_eq!(tree(&ws), original, "the rewind was finished");
    let id = session_of(&h, "crashy-rewind");
    let records = exported(&h, &id);
    let rewound = records
        .iter()
        .find(|r| r["event"] == "rewound")
        .expect("the journal says it rewound");
    if restored < 3000 {
        assert_eq!(rewound["recovered"], true, "{rewound}");
        let outcome = records
            .iter()
            .find(|r| r["event"] == "action_completed" && r["proposal"] == rewound["proposal"])
            .expect("the recovered rewind has its outcome");
        assert_eq!(
            outcome["outcome"]["effects"][0]["effect"], "rewound_to",
            "a recovered outcome records the same effects a live one does: {outcome}"
        );
    }
    assert_eq!(rewound["to_seq"], target);
    assert!(h.cmd(&["replay", "verify", &id]).status.success());
}

/// Regression (issue 8, point 5): recovery markers lived in one folder for the whole
/// `AIDO_HOME`, so a second `aido mcp` starting while the first ran a restore "finished" the
/// other process's restore and wrote its records into its own journal. Markers now live beside
/// their journal shard.
#[test]
fn a_second_aido_never_finishes_another_ones_restore() {
    let h = home();
    let (_ws, mut first, snapshot, _) = three_thousand_files_changed_since_a_snapshot(&h, "first");
    first.send(json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                      "params": {"name": "restore_snapshot", "arguments": {"snapshot": snapshot}}}));
    let marker_dir = h.aido_home.join("journal/main.recovery");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let marked = || {
        std::fs::read_dir(&marker_dir)
            .map(|d| {
                d.flatten()
                    .any(|e| e.path().extension().is_some_and(|x| x == "json"))
            })
            .unwrap_or(false)
    };
    while !marked() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    assert!(marked(), "the restore's marker is beside journal/main");
    // A second aido on the same home, while the first is restoring: it takes its own journal
    // and finishes nothing of the first's.
    let second = Command::new(AIDO)
        .arg("mcp")
        .env("HOME", &h.home)
        .env("AIDO_HOME", &h.aido_home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(second.status.success());
    assert!(
        !String::from_utf8_lossy(&second.stderr).contains("finished an interrupted"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    // The first finishes its own restore and answers it.
    loop {
        let mut line = String::new();
        assert!(first.read_line(&mut line) > 0);
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["id"] == 99 {
            assert_eq!(v["result"]["isError"], false, "{v}");
            break;
        }
    }
    first.close();
    let id = session_of(&h, "first");
    // The session is in one journal only (a second writer would make it ambiguous), with one
    // outcome for the restore, and it verifies.
    let export = h.cmd(&["replay", "export", &id, "--jsonl"]);
    assert!(
        export.status.success(),
        "{}",
        String::from_utf8_lossy(&export.stderr)
    );
    let records: Vec<Value> = stdout(&export)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let proposal = records
        .iter()
        .find(|r| r["event"] == "action_proposed" && r["action"]["type"] == "restore_snapshot")
        .unwrap();
    let outcomes: Vec<&Value> = records
        .iter()
        .filter(|r| {
            r["proposal"] == proposal["seq"]
                && (r["event"] == "action_completed" || r["event"] == "action_failed")
        })
        .collect();
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    assert_eq!(outcomes[0]["event"], "action_completed");
    assert!(outcomes[0]["outcome"]["output"].get("recovered").is_none());
    assert!(h.cmd(&["replay", "verify", &id]).status.success());
    assert_eq!(
        std::fs::read_dir(&marker_dir).unwrap().count(),
        0,
        "no marker left"
    );
}

/// Regression (issue 8): a `kill -9` between a write's rename and its outcome record left a
/// change the journal did not know of (only the proposal was there), so a rewind could not give
/// the replaced contents back and the tree derived from the journal differed from the disk. The
/// write's intent is now on disk before the rename, and the next start journals what happened.
#[test]
fn kill_9_between_a_write_and_its_outcome_is_journaled_at_the_next_start() {
    let h = home();
    let ws = h.workspace("w", "");
    std::fs::write(ws.join("notes.txt"), "precious\n").unwrap();
    // Every filesystem action waits after its work, before its answer: the window between the
    // rename and the outcome record.
    let mut mcp = Mcp::start_with(&h, "crashy-write", &[("AIDO_FAULTS", "after_work_ms=1500")]);
    mcp.send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "pipeline", "arguments": {"steps": [
            {"type": "write_file", "path": "made/deep/new.txt", "content": "fresh\n", "create_parents": true},
            {"type": "write_file", "path": "notes.txt", "content": "overwritten\n"}]}}}));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let overwritten =
        || std::fs::read_to_string(ws.join("notes.txt")).is_ok_and(|t| t == "overwritten\n");
    while !overwritten() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    // Killed while the second write waits for its outcome record.
    mcp.child.kill().unwrap();
    mcp.child.wait().unwrap();
    assert!(overwritten(), "both writes ran");
    assert!(ws.join("made/deep/new.txt").exists());

    // The next start journals the write that happened, with what it made.
    start_again(&h);
    let id = session_of(&h, "crashy-write");
    let records = exported(&h, &id);
    let proposal = records
        .iter()
        .find(|r| r["event"] == "action_proposed")
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    let outcome = records
        .iter()
        .find(|r| r["event"] == "action_failed" && r["proposal"] == proposal)
        .expect("the cut pipeline has an outcome");
    assert_eq!(outcome["failure"]["code"], "interrupted", "{outcome}");
    let effects: Vec<&str> = outcome["effects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["effect"].as_str().unwrap())
        .collect();
    assert_eq!(
        effects,
        ["dir_created", "dir_created", "file_written", "file_written"],
        "{outcome}"
    );
    assert!(
        std::fs::read_dir(h.aido_home.join("journal/main.recovery"))
            .map(|d| d.count() == 0)
            .unwrap_or(true),
        "the intents are gone once journaled"
    );
    assert!(h.cmd(&["replay", "verify", &id]).status.success());

    // A rewind undoes what the cut action did.
    let back = h.cmd(&["replay", "rewind", &id, "--before", &proposal.to_string()]);
    assert!(
        back.status.success(),
        "{}",
        String::from_utf8_lossy(&back.stderr)
    );
    assert!(!ws.join("made").exists(), "{:?}", tree(&ws));
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "precious\n"
    );
    assert!(h.cmd(&["replay", "verify", &id]).status.success());
}

/// Issue 25, point 2: a `kill -9` in the middle of applying a command's change set (2,000
/// files changed, 1,000 made) leaves a state the journal names: the change set was staged
/// whole and marked before the first file landed, so the next start finishes the apply from
/// the journal's blobs and journals it as interrupted with its effect; verify passes, and a
/// rewind to before the command gives back exactly the tree it found.
#[test]
fn kill_9_during_a_commands_apply_is_finished_at_the_next_start() {
    let h = home();
    let ws = h.workspace("apply", "");
    for i in 0..2000 {
        std::fs::write(ws.join(format!("f{i:04}.txt")), format!("original {i}\n")).unwrap();
    }
    let original = tree(&ws);
    // Each entry waits 1 ms before it is applied: a window of seconds to kill aido in.
    let mut mcp = Mcp::start_with(&h, "crashy-apply", &[("AIDO_FAULTS", "apply_step_us=1000")]);
    let script = "for i in $(seq 0 1999); do echo changed $i > f$(printf %04d $i).txt; done; \
                  mkdir made; for i in $(seq 0 999); do echo new $i > made/n$i; done";
    mcp.send(
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "run_command", "arguments": {"shell": script, "timeout_ms": 120000}}}),
    );
    let recovery = h.aido_home.join("journal/main.recovery");
    let changed = |ws: &Path| {
        (0..2000)
            .filter(|i| {
                std::fs::read_to_string(ws.join(format!("f{i:04}.txt")))
                    .is_ok_and(|t| t.starts_with("changed"))
            })
            .count()
    };
    let begun = || {
        std::fs::read_dir(&recovery)
            .map(|d| {
                d.flatten()
                    .any(|e| e.path().extension().is_some_and(|x| x == "json"))
            })
            .unwrap_or(false)
            && std::fs::read_to_string(ws.join("f0100.txt")).is_ok_and(|t| t.starts_with("changed"))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !begun() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    mcp.child.kill().unwrap();
    mcp.child.wait().unwrap();
    let at_kill = changed(&ws);
    eprintln!("killed the apply with {at_kill} of 2000 files changed");
    assert!(
        at_kill > 0 && at_kill < 2000,
        "the kill landed in the middle of the apply ({at_kill} of 2000)"
    );

    start_again(&h);
    assert_eq!(changed(&ws), 2000, "the apply was finished");
    let made = std::fs::read_dir(ws.join("made")).unwrap().count();
    assert_eq!(made, 1000, "the files it made are all there");
    let id = session_of(&h, "crashy-apply");
    let records = exported(&h, &id);
    let proposal = records
        .iter()
        .find(|r| r["event"] == "action_proposed")
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    let outcome = records
        .iter()
        .find(|r| r["event"] == "action_failed" && r["proposal"] == proposal)
        .expect("the cut command has an outcome");
    assert_eq!(outcome["failure"]["code"], "interrupted", "{outcome}");
    assert_eq!(outcome["effects"][0]["effect"], "changes", "{outcome}");
    assert_eq!(outcome["effects"][0]["entries"], 3001, "{outcome}");
    let verified = h.cmd(&["replay", "verify", &id]);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
    // A rewind to before the command gives back the tree it found.
    let back = h.cmd(&["replay", "rewind", &id, "--before", &proposal.to_string()]);
    assert!(
        back.status.success(),
        "{}",
        String::from_utf8_lossy(&back.stderr)
    );
    assert_eq!(tree(&ws), original);
    assert!(!ws.join("made").exists(), "the directory it made is gone");
    assert!(h.cmd(&["replay", "verify", &id]).status.success());
}

/// Start `aido mcp` with no client (it recovers what a crash interrupted, then ends at EOF).
fn start_again(h: &common::Home) {
    let next = Command::new(AIDO)
        .arg("mcp")
        .env("HOME", &h.home)
        .env("AIDO_HOME", &h.aido_home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(next.success());
}

/// The session's records, as `aido replay export --jsonl` writes them.
fn exported(h: &common::Home, id: &str) -> Vec<Value> {
    stdout(&h.cmd(&["replay", "export", id, "--jsonl"]))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
