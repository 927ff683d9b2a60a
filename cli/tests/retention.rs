//! Retention through the real binary: sessions made by agents over `aido mcp`, then `aido gc`
//! by age, count and budget, `aido du`, and the retention `aido mcp` runs at start. Every test
//! measures what is on disk and checks what must survive: the other sessions verify and
//! rewind, their blobs read back.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{Home, Mcp, home, session_of, stdout};
use serde_json::{Value, json};

/// Bytes a tree takes on disk (blocks, directories included), measured here, apart from
/// aido's own measure.
fn disk(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            total += disk(&e.unwrap().path());
        }
    }
    total
}

fn ok(v: &Value) -> &Value {
    assert_eq!(v["result"]["isError"], false, "{v}");
    &v["result"]
}

fn seq(v: &Value) -> u64 {
    v["result"]["_meta"]["aido/seq"].as_u64().unwrap()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json_of(o: &std::process::Output) -> Value {
    assert!(o.status.success(), "{}{}", stdout(o), stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn sessions(h: &Home) -> Vec<Value> {
    json_of(&h.cmd(&["replay", "sessions", "--json"]))
        .as_array()
        .unwrap()
        .clone()
}

/// Contents large enough to be kept as an object file beside the journal.
fn large(tag: &str, lines: usize) -> String {
    (0..lines).map(|n| format!("{tag} line {n}\n")).collect()
}

/// Two agents' sessions sharing a file's contents; `aido gc --keep-sessions 1` removes the
/// older: the bytes on disk shrink by at least what only it held, the newer session still
/// verifies, plays back and rewinds (needing the shared contents), and `aido du` adds up.
#[test]
fn gc_removes_the_older_of_two_sessions_sharing_contents_and_the_other_still_rewinds() {
    let h = home();
    let ws = h.workspace("project", "[retention]\nat_start = false\n");
    let shared = large("shared", 8000);
    let only_old = large("old only", 20_000);

    let mut old = Mcp::start(&h, "old-agent");
    ok(&old.call(
        "write_file",
        json!({"path": "shared.txt", "content": shared}),
    ));
    ok(&old.call(
        "write_file",
        json!({"path": "old.txt", "content": only_old}),
    ));
    ok(&old.call(
        "write_file",
        json!({"path": "old.txt", "content": "small\n"}),
    ));
    old.close();
    let old_id = session_of(&h, "old-agent");

    let mut new = Mcp::start(&h, "new-agent");
    ok(&new.call("write_file", json!({"path": "copy.txt", "content": shared})));
    let kept = new.call("write_file", json!({"path": "copy.txt", "content": shared}));
    let target = seq(&kept) + 1;
    ok(&new.call(
        "write_file",
        json!({"path": "copy.txt", "content": "changed\n"}),
    ));
    ok(&new.call(
        "write_file",
        json!({"path": "shared.txt", "content": "gone\n"}),
    ));
    new.close();
    let new_id = session_of(&h, "new-agent");

    let du = json_of(&h.cmd(&["du", "--json"]));
    let by_id = |id: &str| {
        du["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .cloned()
            .unwrap()
    };
    assert!(by_id(&old_id)["alone_bytes"].as_u64().unwrap() >= only_old.len() as u64 / 2);
    assert!(by_id(&old_id)["shared_bytes"].as_u64().unwrap() >= shared.len() as u64 / 2);
    assert_eq!(
        by_id(&old_id)["shared_bytes"],
        by_id(&new_id)["shared_bytes"],
        "both name the shared contents"
    );

    let journal = h.aido_home.join("journal");
    let before = disk(&journal);
    let dry = json_of(&h.cmd(&["gc", "--keep-sessions", "1", "--dry-run", "--json"]));
    assert_eq!(dry["summary"]["sessions_removed"], 1);
    assert_eq!(sessions(&h).len(), 2, "a dry run changes nothing");
    let report = json_of(&h.cmd(&["gc", "--keep-sessions", "1", "--json"]));
    let after = disk(&journal);
    eprintln!(
        "journal on disk: {before} -> {after} bytes; report: {}",
        report["summary"]
    );
    assert_eq!(report["summary"]["sessions_removed"], 1, "{report}");
    assert_eq!(report["sessions"][0]["session"], old_id.as_str());
    assert!(
        after + only_old.len() as u64 / 2 < before,
        "the journal shrank by at least what only the old session held: {before} -> {after}"
    );

    let listed: Vec<String> = sessions(&h)
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        !listed.contains(&old_id) && listed.contains(&new_id),
        "{listed:?}"
    );
    assert!(
        sessions(&h).iter().any(|s| s["client"] == "aido gc"),
        "the run is journaled in a session of its own"
    );
    let verify = h.cmd(&["replay", "verify", &new_id]);
    assert!(verify.status.success(), "{}", stdout(&verify));
    assert!(stdout(&verify).contains("every blob and file hash checks out"));
    let playback = h.cmd(&["replay", "playback", &new_id]);
    assert!(playback.status.success(), "{}", stdout(&playback));

    let rewind = h.cmd(&["replay", "rewind", &new_id, "--to", &target.to_string()]);
    assert!(
        rewind.status.success(),
        "{}{}",
        stdout(&rewind),
        stderr(&rewind)
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("copy.txt")).unwrap(),
        shared
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("shared.txt")).unwrap(),
        shared,
        "the shared contents came back from the journal"
    );
}

/// An age cut: the older records of a session go (to an action boundary), a `pruned` record
/// names the cut, `verify` checks the chain from it, a rewind past it is refused with
/// `rewind_target_pruned` and one after it works; altering the cut record fails verify.
#[test]
fn an_age_cut_verifies_refuses_rewinds_past_it_and_a_tampered_cut_fails() {
    let h = home();
    let ws = h.workspace("project", "[retention]\nat_start = false\n");
    let mut mcp = Mcp::start(&h, "long-agent");
    let mut seqs = Vec::new();
    for n in 0..4 {
        let done = mcp.call(
            "write_file",
            json!({"path": "f.txt", "content": large(&format!("version {n}"), 500)}),
        );
        seqs.push(seq(&done));
        // Distinct milliseconds between the actions, so a time falls between them.
        std::thread::sleep(Duration::from_millis(5));
    }
    mcp.close();
    let id = session_of(&h, "long-agent");
    let records = json_of(&h.cmd(&["replay", "show", &id, "--json"]));
    let time_of = |seq: u64| {
        records
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["seq"] == seq)
            .unwrap()["time_ms"]
            .as_u64()
            .unwrap()
    };
    // Everything before the third write's proposal goes.
    let cutoff = time_of(seqs[2]);
    let report = json_of(&h.cmd(&["gc", "--before-ms", &cutoff.to_string(), "--json"]));
    assert_eq!(report["summary"]["sessions_cut"], 1, "{report}");
    let through = report["sessions"][0]["through_seq"].as_u64().unwrap();
    assert_eq!(
        through,
        seqs[2] - 1,
        "the cut falls right before the third write"
    );

    let verify = h.cmd(&["replay", "verify", &id]);
    assert!(verify.status.success(), "{}", stdout(&verify));
    assert!(
        stdout(&verify).contains(&format!("cut through seq {through}")),
        "{}",
        stdout(&verify)
    );
    let show = stdout(&h.cmd(&["replay", "show", &id]));
    assert!(show.contains("PRUNED by retention"), "{show}");

    let refused = h.cmd(&["replay", "rewind", &id, "--to", &seqs[1].to_string()]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("[rewind_target_pruned]"),
        "{}",
        stderr(&refused)
    );
    let rewound = h.cmd(&["replay", "rewind", &id, "--to", &(seqs[2] + 1).to_string()]);
    assert!(
        rewound.status.success(),
        "{}{}",
        stdout(&rewound),
        stderr(&rewound)
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("f.txt")).unwrap(),
        large("version 2", 500)
    );

    // The cut record re-signed with another hash: verify names the first record it no
    // longer chains.
    let pruned_seq = json_of(&h.cmd(&["replay", "show", &id, "--json"]))
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["event"] == "pruned")
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    {
        let journal = aido_journal::Journal::open(
            &h.aido_home.join("journal/main"),
            aido_journal::Limits::default(),
            aido_journal::CommitMode::Group,
        )
        .unwrap();
        let session = aido_journal::SessionId::parse(&id).unwrap();
        let tree = journal.raw_records_tree();
        let mut key = session.as_bytes().to_vec();
        key.extend_from_slice(&pruned_seq.to_be_bytes());
        let value = tree.get(&key).unwrap().unwrap();
        let text = String::from_utf8(value[32..].to_vec()).unwrap();
        let stored: Value = serde_json::from_str(&text).unwrap();
        let forged = text.replace(stored["hash"].as_str().unwrap(), &"0".repeat(64));
        let mut out = blake3::hash(forged.as_bytes()).as_bytes().to_vec();
        out.extend_from_slice(forged.as_bytes());
        tree.insert(key, out).unwrap();
        tree.flush().unwrap();
    }
    let verify = h.cmd(&["replay", "verify", &id]);
    assert!(!verify.status.success(), "{}", stdout(&verify));
    assert!(
        stdout(&verify).contains(&format!("BROKEN at seq {}", through + 1)),
        "{}",
        stdout(&verify)
    );
}

/// A session a running `aido mcp` holds is never touched: `aido gc` reads its shard from a
/// copy, leaves it, and says why with a code.
#[test]
fn a_running_aido_keeps_its_sessions_and_gc_says_so() {
    let h = home();
    h.workspace("project", "[retention]\nat_start = false\n");
    let mut live = Mcp::start(&h, "live-agent");
    ok(&live.call(
        "write_file",
        json!({"path": "a.txt", "content": large("live", 5000)}),
    ));
    let report = json_of(&h.cmd(&["gc", "--keep-sessions", "0", "--json"]));
    assert_eq!(report["summary"]["sessions_removed"], 0, "{report}");
    let skipped = report["summary"]["skipped"].as_array().unwrap();
    assert!(
        skipped.iter().any(|s| s["code"] == "retention_shard_held"),
        "{report}"
    );
    ok(&live.call("read_file", json!({"path": "a.txt"})));
    let id = session_of(&h, "live-agent");
    live.close();
    let verify = h.cmd(&["replay", "verify", &id]);
    assert!(verify.status.success(), "{}", stdout(&verify));
}

/// Lines of removed records leave the audit files once those are quiet; the other sessions'
/// lines stay.
#[test]
fn audit_lines_of_removed_sessions_go_and_the_others_stay() {
    let h = home();
    h.workspace("project", "[retention]\nat_start = false\n");
    for client in ["first-agent", "second-agent"] {
        let mut mcp = Mcp::start(&h, client);
        ok(&mcp.call(
            "write_file",
            json!({"path": format!("{client}.txt"), "content": "x\n"}),
        ));
        mcp.close();
    }
    let (first, second) = (
        session_of(&h, "first-agent"),
        session_of(&h, "second-agent"),
    );
    let audit = h.aido_home.join("audit");
    let lines_of = |id: &str| -> usize {
        std::fs::read_dir(&audit)
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .flat_map(|t| t.lines().map(str::to_owned).collect::<Vec<_>>())
            .filter(|l| l.contains(id))
            .count()
    };
    assert!(lines_of(&first) >= 4 && lines_of(&second) >= 4);
    // Still being written: kept, and said so.
    let report = json_of(&h.cmd(&["gc", "--keep-sessions", "1", "--json"]));
    assert_eq!(report["summary"]["sessions_removed"], 1);
    assert_eq!(report["summary"]["audit_lines_removed"], 0);
    assert!(
        report["summary"]["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["code"] == "retention_audit_in_use"),
        "{report}"
    );
    // Quiet for three days: the next run takes the lines of what went, and only those.
    let three_days_ago = std::time::SystemTime::now() - Duration::from_secs(3 * 86_400);
    for e in std::fs::read_dir(&audit).unwrap() {
        let file = std::fs::File::options()
            .write(true)
            .open(e.unwrap().path())
            .unwrap();
        file.set_modified(three_days_ago).unwrap();
    }
    let second_lines = lines_of(&second);
    let report = json_of(&h.cmd(&["gc", "--keep-sessions", "2", "--json"]));
    assert!(
        report["summary"]["audit_lines_removed"].as_u64().unwrap() >= 4,
        "{report}"
    );
    assert_eq!(lines_of(&first), 0);
    assert_eq!(lines_of(&second), second_lines);
}

/// `aido du`'s kinds add up to AIDO_HOME as measured here (within 1%: the directory is
/// walked twice), and its sessions' records add up to the records' total.
#[test]
fn du_adds_up_to_what_is_on_disk() {
    let h = home();
    h.workspace("project", "[retention]\nat_start = false\n");
    for client in ["one", "two"] {
        let mut mcp = Mcp::start(&h, client);
        ok(&mcp.call(
            "write_file",
            json!({"path": "big.txt", "content": large(client, 9000)}),
        ));
        ok(&mcp.call("create_snapshot", json!({"label": client})));
        mcp.close();
    }
    let du = json_of(&h.cmd(&["du", "--json"]));
    let measured = disk(&h.aido_home);
    let total = du["total_bytes"].as_u64().unwrap();
    let k = &du["kinds"];
    let n = |v: &Value| v.as_u64().unwrap();
    eprintln!("du: {du}");
    assert!(
        total.abs_diff(measured) * 100 <= measured,
        "du says {total}, the disk {measured}"
    );
    assert_eq!(
        n(&du["journal_bytes"])
            + n(&k["snapshots_dir"])
            + n(&k["layers"])
            + n(&k["audit"])
            + n(&k["other"]),
        total
    );
    assert_eq!(
        n(&du["journal_bytes"]),
        n(&k["journal_db"]) + n(&k["objects"]) + n(&k["journal_other"])
    );
    let records: u64 = du["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| n(&s["record_bytes"]))
        .sum();
    assert_eq!(records, n(&k["records"]));
    assert!(n(&k["sled_blobs"]) + n(&k["objects"]) >= 2 * large("one", 9000).len() as u64);
    let snapshots: u64 = du["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| n(&s["snapshots"]))
        .sum();
    assert_eq!(snapshots, 2);
    let text = stdout(&h.cmd(&["du"]));
    assert!(
        text.contains("journal") && text.contains("audit files"),
        "{text}"
    );
}

/// `aido mcp` runs the `[retention]` rules in the background at start: the ended sessions
/// beyond the rule go (it runs before the client's session opens: keeping one keeps the
/// newest ended one), the runtime's own session stays whole, and the run is journaled.
#[test]
fn aido_mcp_runs_retention_at_start_and_journals_it() {
    let h = home();
    h.workspace("project", "[retention]\nkeep_sessions = 1\n");
    for client in ["first-agent", "second-agent"] {
        let mut mcp = Mcp::start(&h, client);
        ok(&mcp.call(
            "write_file",
            json!({"path": "f.txt", "content": large(client, 3000)}),
        ));
        mcp.close();
    }
    let (first, second) = (
        session_of(&h, "first-agent"),
        session_of(&h, "second-agent"),
    );
    // The first start ran it already today; a new day's run is due.
    let stamp = h.aido_home.join("journal/retention-at-start");
    assert!(stamp.exists());
    std::fs::remove_file(&stamp).unwrap();
    let mut live = Mcp::start(&h, "third-agent");
    ok(&live.call("write_file", json!({"path": "g.txt", "content": "live\n"})));
    let deadline = Instant::now() + Duration::from_secs(30);
    let ran = loop {
        let listed = sessions(&h);
        if let Some(run) = listed.iter().find(|s| {
            s["client"]
                .as_str()
                .is_some_and(|c| c.contains("retention at start"))
        }) {
            break (run["id"].as_str().unwrap().to_owned(), listed);
        }
        assert!(
            Instant::now() < deadline,
            "no retention run journaled: {listed:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let ids: Vec<&str> = ran.1.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert!(
        !ids.contains(&first.as_str()) && ids.contains(&second.as_str()),
        "{ids:?}"
    );
    let third = session_of(&h, "third-agent");
    ok(&live.call("read_file", json!({"path": "g.txt"})));
    live.close();
    let verify = h.cmd(&["replay", "verify", &third]);
    assert!(verify.status.success(), "{}", stdout(&verify));
    let show = stdout(&h.cmd(&["replay", "show", &ran.0]));
    assert!(show.contains("retention run by aido mcp"), "{show}");
}

/// Bad arguments and a config with no rule are coded refusals, and nothing is removed.
#[test]
fn bad_arguments_are_coded() {
    let h = home();
    h.workspace(
        "project",
        "[retention]\nolder_than_days = 0\nat_start = false\n",
    );
    for args in [
        &["gc", "--older-than", "3y"][..],
        &["gc", "--max-bytes", "10X"],
        &["gc"],
    ] {
        let out = h.cmd(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).contains("[retention_argument_invalid]"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}
