//! A property test over the whole rewind path: random sequences of filesystem actions,
//! snapshots and rewinds to random earlier seqs, run through a real runtime (sled journal,
//! filesystem body, snapshot store). After every rewind the workspace must equal the tree that
//! was recorded at the target seq; at the end, re-derivation must find no damage, the hash
//! chain must verify, and playback must reproduce every recorded result byte for byte (none
//! left out as not reproducible). The workspace holds files from before the session, so
//! results built from the world outside the journal (reads, stats, hashes of those files)
//! are covered too; and a copy of a journal with one input or one output changed must be
//! reported as a mismatch at that seq.
//!
//! Commands are drawn too (`run_command`: files created and changed, chmods, symlinks,
//! `rm -r`, `mkdir`, a 30-file loop, a file large enough to be an object, `touch -d`, a
//! directory renamed), and the model's tree holds every entry's modification time to the
//! nanosecond: a rewind gives back contents, modes, links and times exactly. Commands run in
//! the real sandbox, so this binary is its own sandbox child (`main` calls
//! `aido_sandbox::run_child_if_requested` first, as aido's does) and has a small runner that
//! answers `--list` and `--exact` as libtest does (`harness = false`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly
#![allow(clippy::print_stdout, clippy::print_stderr)] // the runner reports like libtest

use std::collections::BTreeMap;
use std::path::Path;

use aido_actions::Action;
use aido_actors::Hooks;
use aido_journal::{CommitMode, Journal, Limits};
use proptest::prelude::*;
use serde_json::{Value, json};

#[derive(Clone, Debug)]
enum Op {
    Write(u8, u8),
    Edit(u8),
    Trash(u8),
    Read(u8),
    Snapshot,
    Rewind(u8),
    Stat(u8),
    Info(u8),
    Sum(u8, bool),
    ReadMany,
    Window(u8),
    TryPatch(u8),
    Composite(u8),
    History,
    Random,
    PolicyCheck,
    Restore(u8),
    Validate,
    ListSnapshots,
    DryEdit(u8),
    /// A safe_change whose check passes or fails (then it restores), alone or inside a try.
    SafeChange(u8, bool),
    /// A write that creates its parent directories.
    WriteDeep(u8, u8),
    /// Rewind undoing an earlier action too (`before_seq`).
    Undo(u8),
    /// A command (kind, file, content): see [`command`].
    Command(u8, u8, u8),
}

/// The shell line of a drawn command.
fn command(kind: u8, f: u8, c: u8) -> String {
    let (d, n) = (f % 2, f % 4);
    match kind % 10 {
        0 => format!("mkdir -p d{d} && printf 'cmd {c}\\n' > d{d}/f{n}.txt"),
        1 => format!(
            "chmod {} d{d}/f{n}.txt 2>/dev/null; true",
            if c.is_multiple_of(2) { "600" } else { "755" }
        ),
        2 => format!("mkdir -p d{d} && ln -sfn f{n}.txt d{d}/l{n}"),
        3 => format!("rm -rf n{} d{d}", f % 3),
        4 => format!("mkdir -p m{}/e{}", f % 3, c % 2),
        5 => format!("mkdir -p many{d} && for i in $(seq 30); do echo {c} $i > many{d}/x$i; done"),
        6 => format!(
            "python3 -c \"open('big{d}.bin','wb').write(bytes([{c}])*{})\"",
            70_000 + u32::from(c) * 1000
        ),
        7 => format!(
            "touch -d @{} d{d}/f{n}.txt 2>/dev/null; true",
            1_000_000_000 + u32::from(c)
        ),
        8 => format!("rm -f d{d}/f{n}.txt pre/p0.txt"),
        _ => format!("mkdir -p d0 && mv d0 moved{} 2>/dev/null; true", c % 2),
    }
}

/// Files in the workspace before the session starts: playback must reproduce results built
/// from them without aido ever having written them.
fn seed(ws: &Path) {
    std::fs::create_dir_all(ws.join("pre")).unwrap();
    std::fs::create_dir_all(ws.join("d0")).unwrap();
    std::fs::write(
        ws.join("pre/p0.txt"),
        "pre line 1\npre line 2\npre line 3\n",
    )
    .unwrap();
    std::fs::write(ws.join("pre/config.json"), "{\"a\": 1}\n").unwrap();
    let binary: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(ws.join("pre/big.bin"), binary).unwrap();
    std::fs::write(ws.join("d0/f0.txt"), "content 9\n").unwrap();
    std::fs::create_dir_all(ws.join("pre/empty")).unwrap();
    // Modes the model checks: a write keeps them, a rewind gives them back.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(ws.join("d0/f0.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(
        ws.join("pre/p0.txt"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
}

fn file(f: u8) -> String {
    match f % 6 {
        4 => "pre/p0.txt".into(),
        5 => "pre/big.bin".into(),
        n => format!("d{}/f{n}.txt", n % 2),
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4, 0u8..6).prop_map(|(f, c)| Op::Write(f, c)),
        2 => (0u8..4).prop_map(Op::Edit),
        1 => (0u8..4).prop_map(Op::Trash),
        1 => (0u8..4).prop_map(Op::Read),
        1 => Just(Op::Snapshot),
        2 => any::<u8>().prop_map(Op::Rewind),
        1 => any::<u8>().prop_map(Op::Stat),
        1 => any::<u8>().prop_map(Op::Info),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(f, s)| Op::Sum(f, s)),
        1 => Just(Op::ReadMany),
        1 => any::<u8>().prop_map(Op::Window),
        1 => any::<u8>().prop_map(Op::TryPatch),
        1 => any::<u8>().prop_map(Op::Composite),
        1 => Just(Op::History),
        1 => Just(Op::Random),
        1 => Just(Op::PolicyCheck),
        1 => (0u8..4).prop_map(Op::Restore),
        1 => Just(Op::Validate),
        1 => Just(Op::ListSnapshots),
        1 => any::<u8>().prop_map(Op::DryEdit),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(f, t)| Op::SafeChange(f, t)),
        2 => (0u8..6, 0u8..6).prop_map(|(f, c)| Op::WriteDeep(f, c)),
        1 => any::<u8>().prop_map(Op::Undo),
        5 => (any::<u8>(), any::<u8>(), 0u8..6).prop_map(|(k, f, c)| Op::Command(k, f, c)),
    ]
}

/// Everything a user sees of the tree: every directory (empty ones too), file and symbolic
/// link, with its permission bits, each file's contents and modification time (to the
/// nanosecond), and each link's target.
fn tree(root: &Path) -> BTreeMap<String, String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if meta.is_dir() {
                out.insert(rel, format!("<dir {mode:o}>"));
                stack.push(p);
            } else if meta.file_type().is_symlink() {
                out.insert(
                    rel,
                    format!("-> {}", std::fs::read_link(&p).unwrap().display()),
                );
            } else {
                let bytes = std::fs::read(&p).unwrap();
                let shown = if bytes.len() > 256 {
                    format!("{} bytes {}", bytes.len(), blake3::hash(&bytes).to_hex())
                } else {
                    String::from_utf8_lossy(&bytes).into_owned()
                };
                let mtime = meta.mtime() * 1_000_000_000 + meta.mtime_nsec();
                out.insert(rel, format!("{mode:o} @{mtime} {shown}"));
            }
        }
    }
    out
}

/// One point of the live timeline: the action's proposal seq (0 for the start), its last
/// record, and the tree after it.
struct Point {
    proposal: u64,
    last: u64,
    tree: BTreeMap<String, String>,
}

#[allow(clippy::too_many_lines)]
async fn run(ops: Vec<Op>, backend: &str) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let (home, ws, aido_home) = (base.join("home"), base.join("home/ws"), base.join("aido"));
    std::fs::create_dir_all(&ws).unwrap();
    seed(&ws);
    let text = format!(
        "workdir = \"{}\"\n[snapshots]\nbackend = \"{backend}\"\n",
        ws.display()
    );
    let runtime =
        aido_testkit::runtime::start(&text, &home, &aido_home, &aido_home.join("journal")).await;
    let session = runtime.open_session(Some("proptest".into())).await.unwrap();
    let id = session.id();
    let head = || runtime.journal().head_seq(id).unwrap();
    // Commands run and the changes they applied.
    let mut commands = (0u64, 0u64);
    // The live timeline: each action and the tree after it.
    let mut states: Vec<Point> = vec![Point {
        proposal: 0,
        last: head(),
        tree: tree(&ws),
    }];
    for op in ops {
        let (primitive, args) = match &op {
            Op::Write(f, c) => (
                "write_file",
                json!({"path": format!("d{}/f{f}.txt", f % 2), "content": format!("content {c}\n")}),
            ),
            Op::Edit(f) => (
                "edit_file",
                json!({"path": format!("d{}/f{f}.txt", f % 2), "old_string": "content", "new_string": "edited"}),
            ),
            Op::Trash(f) => (
                "move_to_trash",
                json!({"path": format!("d{}/f{f}.txt", f % 2)}),
            ),
            Op::Read(f) => ("read_file", json!({"path": format!("d{}/f{f}.txt", f % 2)})),
            Op::Snapshot => ("create_snapshot", json!({})),
            Op::Rewind(pick) => {
                // The seq the agent sees: an action's proposal (kept), or the start.
                let point = &states[*pick as usize % states.len()];
                let seq = if point.proposal == 0 {
                    point.last
                } else {
                    point.proposal
                };
                ("rewind", json!({"to_seq": seq}))
            }
            // Any action on the live timeline (the start has none to undo).
            Op::Undo(pick) if states.len() > 1 => {
                let point = &states[1 + *pick as usize % (states.len() - 1)];
                ("rewind", json!({"before_seq": point.proposal}))
            }
            Op::Undo(_) => ("session_history", json!({"limit": 1})),
            Op::WriteDeep(f, c) => (
                "write_file",
                json!({"path": format!("n{}/deep{}/f.txt", f % 3, f % 2), "content": format!("deep {c}\n"), "create_parents": true}),
            ),
            Op::Stat(f) => (
                "stat_files",
                json!({"paths": [file(*f), "d0", "pre", "nowhere.txt"]}),
            ),
            Op::Info(f) => ("file_info", json!({"path": file(*f)})),
            Op::Sum(f, sha) => (
                "checksum",
                json!({"path": file(*f), "algorithm": if *sha { "sha256" } else { "blake3" }}),
            ),
            Op::ReadMany => (
                "read_files",
                json!({"paths": ["pre/p0.txt", "d0/f0.txt", "pre/big.bin", "missing.txt", "d1/f1.txt"]}),
            ),
            Op::Window(f) => (
                "read_file",
                json!({"path": file(*f), "offset": 2, "limit": 1 + u64::from(*f % 2)}),
            ),
            Op::TryPatch(f) => (
                "try",
                json!({"action": {"type": "apply_patch", "path": file(*f),
                                  "patch": "--- a\n+++ b\n@@ -1 +1 @@\n-content 1\n+patched 1\n"},
                       "fallback": {"type": "read_file", "path": "pre/big.bin", "encoding": "base64"}}),
            ),
            Op::Composite(f) => (
                "pipeline",
                json!({"steps": [
                    {"type": "if", "condition": {"kind": "file_exists", "path": file(*f % 4)},
                     "then": {"type": "read_file", "path": file(*f % 4)},
                     "else": {"type": "write_file", "path": file(*f % 4), "content": "content 1\n"}},
                    {"type": "assert", "condition": {"kind": "all", "conditions": [
                        {"kind": "file_contains", "path": "pre/p0.txt", "text": "line 2"},
                        {"kind": "not", "condition": {"kind": "checksum_equals", "path": "pre/p0.txt", "digest": "00"}}]}},
                    {"type": "try", "action": {"type": "assert", "condition": {"kind": "file_exists", "path": "nowhere.txt"}}},
                ]}),
            ),
            Op::History => ("session_history", json!({"limit": 5})),
            Op::Random => ("random_bytes", json!({"count": 8})),
            Op::PolicyCheck => (
                "policy_check",
                json!({"action": {"type": "read_file", "path": "pre/p0.txt"}}),
            ),
            Op::Restore(f) => ("restore_from_trash", json!({"path": file(*f)})),
            Op::Validate => (
                "validate",
                json!({"path": "pre/config.json", "format": "json"}),
            ),
            Op::ListSnapshots => ("list_snapshots", json!({})),
            Op::SafeChange(f, in_try) => {
                let change = json!({"type": "safe_change",
                    "steps": [{"type": "write_file", "path": file(*f % 4), "content": "safe\n"}],
                    "validate": [{"type": "assert", "condition": {"kind": "file_exists", "path": file((*f / 4) % 4)}}]});
                if *in_try {
                    ("try", json!({"action": change}))
                } else {
                    (
                        "safe_change",
                        change
                            .as_object()
                            .map(|o| {
                                let mut o = o.clone();
                                o.remove("type");
                                Value::Object(o)
                            })
                            .unwrap(),
                    )
                }
            }
            Op::Command(kind, f, c) => (
                "run_command",
                json!({"shell": command(*kind, *f, *c), "timeout_ms": 60000}),
            ),
            Op::DryEdit(f) => (
                "edit_file",
                json!({"path": file(*f), "old_string": "line", "new_string": "LINE", "replace_all": true, "dry_run": true}),
            ),
        };
        let action = Action::from_tool_call(primitive, args.clone()).unwrap();
        let result = session.run(action, Hooks::default()).await;
        if let Op::Command(..) = op {
            // A command runs and its changes are applied, whatever its own exit.
            let ran = result
                .as_ref()
                .unwrap_or_else(|e| panic!("{args} failed: {:?}", e.failure));
            commands.0 += 1;
            commands.1 += ran.outcome.output["changes_total"].as_u64().unwrap_or(0);
        }
        let proposal = match &result {
            Ok(ran) => ran.seq,
            Err(e) => e.seq.unwrap(),
        };
        if primitive == "rewind"
            && let Err(e) = &result
            && e.failure.code == "rewind_undo_of_rewind"
        {
            // Undoing a rewind whose target left records behind is refused, changing nothing.
            assert_eq!(
                tree(&ws),
                states.last().unwrap().tree,
                "a refused rewind changes nothing"
            );
        } else if primitive == "rewind" {
            let ran = result.unwrap_or_else(|e| panic!("{args} failed: {:?}", e.failure));
            // Keeping a point keeps its action; undoing one goes back to the point before it.
            let kept = match (args["to_seq"].as_u64(), args["before_seq"].as_u64()) {
                (Some(seq), None) => states
                    .iter()
                    .position(|p| p.proposal == seq || (p.proposal == 0 && p.last == seq))
                    .unwrap(),
                (None, Some(seq)) => states.iter().position(|p| p.proposal == seq).unwrap() - 1,
                _ => unreachable!(),
            };
            assert_eq!(
                tree(&ws),
                states[kept].tree,
                "after {args}: {}",
                ran.outcome.text
            );
            // Exactly the actions after the kept point were undone, and the result says so.
            let undone: Vec<u64> = ran.outcome.output["undone"]
                .as_array()
                .unwrap()
                .iter()
                .map(|u| u["seq"].as_u64().unwrap())
                .collect();
            let expected: Vec<u64> = states[kept + 1..].iter().map(|p| p.proposal).collect();
            assert_eq!(undone, expected, "{}", ran.outcome.text);
            // Everything after the kept point is now an abandoned branch.
            states.truncate(kept + 1);
        }
        states.push(Point {
            proposal,
            last: head(),
            tree: tree(&ws),
        });
    }
    let journal = runtime.journal();
    assert_eq!(journal.verify(id).unwrap().broken, None);
    let records = journal.all_records(id).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let derived = aido_replay::derive::derive(journal, &records, scratch.path()).unwrap();
    assert!(derived.intact(), "{:?}", derived.findings);
    let played = aido_replay::playback::playback(journal, &records);
    assert!(played.mismatches.is_empty(), "{:#?}", played.mismatches);
    assert!(
        played.not_reproducible.is_empty(),
        "{:?}",
        played.not_reproducible
    );
    assert!(played.external.is_empty(), "{:?}", played.external);
    let completed = records
        .iter()
        .filter(|r| matches!(r.event, aido_journal::Event::ActionCompleted { .. }))
        .count() as u64;
    // Failures of actions that ran are results too (edits of trashed files, restores of
    // files not in the trash, ...): reproduced from their inputs like completions.
    let failed = records
        .iter()
        .filter(|r| matches!(&r.event, aido_journal::Event::ActionFailed { inputs, .. } if !inputs.is_empty()))
        .count() as u64;
    assert_eq!(
        played.reproduced,
        completed + failed,
        "every result is reproduced, failures too"
    );
    let mut kinds = BTreeMap::new();
    for r in &records {
        if let aido_journal::Event::ActionCompleted { proposal, .. } = &r.event
            && let Some(p) = records.iter().find_map(|p| match &p.event {
                aido_journal::Event::ActionProposed { action, .. } if p.seq == *proposal => {
                    Some(action.primitive())
                }
                _ => None,
            })
        {
            *kinds.entry(p).or_insert(0u32) += 1;
        }
    }
    eprintln!(
        "playback reproduced {completed} result(s) and {failed} failure(s): {kinds:?}; {} command(s) applied {} change(s)",
        commands.0, commands.1
    );
    session.close("done").await;
    runtime.shutdown().await;
}

fn rewinding_to_any_seq_gives_back_the_recorded_tree() {
    let config = ProptestConfig {
        cases: 24,
        max_shrink_iters: 64,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&prop::collection::vec(op(), 1..24), |ops| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(run(ops, "copy"));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// The same on whatever backend the temp dir supports best (reflink or btrfs where the temp
/// dir is on such a filesystem); prints which one it took.
fn one_long_session_on_the_best_backend() {
    let ops: Vec<Op> = (0..80u8)
        .map(|i| match i % 20 {
            0..=2 => Op::Write(i % 4, i % 6),
            3 => Op::Edit(i % 4),
            4 => Op::Snapshot,
            5 => Op::Read(i % 4),
            6 => Op::Trash(i % 4),
            7 => Op::Stat(i),
            8 => Op::Info(i),
            9 => Op::Sum(i, i % 3 == 0),
            10 => Op::ReadMany,
            11 => Op::Window(i),
            12 => Op::TryPatch(i),
            13 => Op::Composite(i),
            14 => Op::History,
            15 => Op::Restore(i % 4),
            16 => Op::Validate,
            17 => Op::DryEdit(i),
            18 if i % 3 == 0 => Op::SafeChange(i, i % 2 == 0),
            18 => Op::Random,
            19 if i % 3 == 1 => Op::WriteDeep(i % 6, i % 5),
            19 if i % 3 == 2 => Op::Undo(i.wrapping_mul(13)),
            19 => Op::Command(i / 3, i.wrapping_mul(7), i % 6),
            _ => Op::Rewind(i.wrapping_mul(37)),
        })
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(ops, "auto"));
}

/// The blobs a record names by hash (inputs and effects), for copying it to another journal.
fn blobs_of(journal: &Journal, record: &aido_journal::Record) -> Vec<(String, Vec<u8>)> {
    let mut names = Vec::new();
    if let aido_journal::Event::ActionCompleted { outcome, .. } = &record.event {
        for input in &outcome.inputs {
            match input {
                aido_actions::Input::File { blob, .. }
                | aido_actions::Input::Lines { blob, .. } => names.push(blob.clone()),
                aido_actions::Input::Written {
                    before: Some(b), ..
                } => names.push(b.clone()),
                _ => {}
            }
        }
        for effect in &outcome.effects {
            if let aido_actions::Effect::FileWritten { blob, before, .. } = effect {
                names.push(blob.clone());
                names.extend(before.kept().map(str::to_owned));
            }
        }
    }
    names
        .iter()
        .map(|n| (n.clone(), journal.blob(n).unwrap().unwrap()))
        .collect()
}

/// An alteration of one record (seq, event, the blobs copied with it).
type Change<'a> = dyn Fn(u64, &mut aido_journal::Event, &mut Vec<(String, Vec<u8>)>) + 'a;

/// Copy a session into a fresh journal, letting `change` alter each record's event.
async fn copy(
    journal: &Journal,
    id: aido_journal::SessionId,
    dir: &Path,
    change: &Change<'_>,
) -> Journal {
    let copy = Journal::open(dir, Limits::default(), CommitMode::Group).unwrap();
    for r in journal.all_records(id).unwrap() {
        let mut blobs = blobs_of(journal, &r);
        let mut event = r.event.clone();
        change(r.seq, &mut event, &mut blobs);
        let appended = copy
            .append_with_blobs(id, r.time_ms, event, blobs)
            .await
            .unwrap();
        assert_eq!(appended.seq, r.seq);
    }
    copy
}

/// A journal altered after the fact: a changed output, or an input swapped for other bytes,
/// is a mismatch at that record's seq; an untouched copy plays back clean.
#[allow(clippy::too_many_lines)]
fn playback_reports_a_changed_input_or_output_at_its_seq() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (home, ws, aido_home) = (base.join("home"), base.join("home/ws"), base.join("aido"));
        std::fs::create_dir_all(&ws).unwrap();
        seed(&ws);
        let text = format!("workdir = \"{}\"\n", ws.display());
        let journal = aido_home.join("journal");
        let runtime = aido_testkit::runtime::start(&text, &home, &aido_home, &journal).await;
        let session = runtime.open_session(Some("tamper".into())).await.unwrap();
        let id = session.id();
        let mut seqs = BTreeMap::new();
        for (name, primitive, args) in [
            ("read", "read_file", json!({"path": "pre/p0.txt"})),
            ("sum", "checksum", json!({"path": "pre/p0.txt"})),
            (
                "write",
                "write_file",
                json!({"path": "d0/new.txt", "content": "x\n"}),
            ),
        ] {
            let action = Action::from_tool_call(primitive, args).unwrap();
            let ran = session.run(action, Hooks::default()).await.unwrap();
            seqs.insert(name, runtime.journal().head_seq(id).unwrap());
            let _ = ran;
        }
        // Calls the agent cancelled before they started, a composite and a leaf: failures
        // that ran (they observed the cancellation), reproduced too.
        for (primitive, args) in [
            (
                "pipeline",
                json!({"steps": [{"type": "write_file", "path": "never.txt", "content": ""}]}),
            ),
            ("read_file", json!({"path": "pre/p0.txt"})),
        ] {
            let hooks = Hooks::default();
            hooks.cancel.cancel();
            let action = Action::from_tool_call(primitive, args).unwrap();
            let err = session.run(action, hooks).await.unwrap_err();
            assert_eq!(err.failure.code, "cancelled");
        }
        session.close("done").await;
        let original = runtime.journal();
        let clean = copy(original, id, &base.join("clean"), &|_, _, _| {}).await;
        let played = aido_replay::playback::playback(&clean, &clean.all_records(id).unwrap());
        assert!(played.mismatches.is_empty(), "{:?}", played.mismatches);
        assert_eq!(played.reproduced, 5, "three results and two cancellations");

        // The checksum's recorded digest is changed.
        let sum = seqs["sum"];
        let output = copy(original, id, &base.join("output"), &|seq, event, _| {
            if let aido_journal::Event::ActionCompleted { outcome, .. } = event
                && seq == sum
            {
                outcome.output["digest"] = json!("0".repeat(64));
            }
        })
        .await;
        let played = aido_replay::playback::playback(&output, &output.all_records(id).unwrap());
        let at: Vec<u64> = played.mismatches.iter().map(|m| m.seq).collect();
        assert_eq!(at, vec![sum], "{:?}", played.mismatches);

        // The read's input names other bytes (present in the blob store) than the file held.
        let read = seqs["read"];
        let other = b"not what the file held\n".to_vec();
        let other_name = blake3::hash(&other).to_hex().to_string();
        let input = copy(original, id, &base.join("input"), &|seq, event, blobs| {
            if let aido_journal::Event::ActionCompleted { outcome, .. } = event
                && seq == read
            {
                for i in outcome.inputs.iter_mut() {
                    if let aido_actions::Input::File { blob, .. } = i {
                        *blob = other_name.clone();
                    }
                }
                blobs.push((other_name.clone(), other.clone()));
            }
        })
        .await;
        let played = aido_replay::playback::playback(&input, &input.all_records(id).unwrap());
        let at: Vec<u64> = played.mismatches.iter().map(|m| m.seq).collect();
        assert_eq!(at, vec![read], "{:?}", played.mismatches);
        runtime.shutdown().await;
    });
}

type Test = fn();

const TESTS: &[(&str, Test)] = &[
    (
        "rewinding_to_any_seq_gives_back_the_recorded_tree",
        rewinding_to_any_seq_gives_back_the_recorded_tree,
    ),
    (
        "one_long_session_on_the_best_backend",
        one_long_session_on_the_best_backend,
    ),
    (
        "playback_reports_a_changed_input_or_output_at_its_seq",
        playback_reports_a_changed_input_or_output_at_its_seq,
    ),
];

fn main() {
    aido_sandbox::run_child_if_requested();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|arg| arg == "--list") {
        if !args.iter().any(|arg| arg == "--ignored") {
            for (name, _) in TESTS {
                println!("{name}: test");
            }
        }
        return;
    }
    let exact = args.iter().any(|arg| arg == "--exact");
    let filters: Vec<&String> = args.iter().filter(|arg| !arg.starts_with("--")).collect();
    let mut failed = 0;
    for (name, test) in TESTS {
        let chosen = filters.is_empty()
            || filters.iter().any(|f| {
                if exact {
                    *name == f.as_str()
                } else {
                    name.contains(f.as_str())
                }
            });
        if !chosen {
            continue;
        }
        match std::panic::catch_unwind(test) {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        std::process::exit(101);
    }
}
