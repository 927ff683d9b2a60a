//! A property test over the whole rewind path: random sequences of filesystem actions,
//! snapshots and rewinds to random earlier seqs, run through a real runtime (sled journal,
//! filesystem body, snapshot store). After every rewind the workspace must equal the tree that
//! was recorded at the target seq; at the end, re-derivation and playback of the session must
//! find no damage and no mismatch, and the hash chain must verify.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use aido_actions::Action;
use aido_actors::clock::FixedClock;
use aido_actors::{Hooks, Runtime, RuntimeOptions};
use aido_journal::{CommitMode, Journal, Limits};
use aido_policy::{Environment, Layered, Source};
use proptest::prelude::*;
use serde_json::json;

#[derive(Clone, Debug)]
enum Op {
    Write(u8, u8),
    Edit(u8),
    Trash(u8),
    Read(u8),
    Snapshot,
    Rewind(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4, 0u8..6).prop_map(|(f, c)| Op::Write(f, c)),
        2 => (0u8..4).prop_map(Op::Edit),
        1 => (0u8..4).prop_map(Op::Trash),
        1 => (0u8..4).prop_map(Op::Read),
        1 => Just(Op::Snapshot),
        2 => any::<u8>().prop_map(Op::Rewind),
    ]
}

fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(
                    p.strip_prefix(root).unwrap().display().to_string(),
                    std::fs::read_to_string(&p).unwrap(),
                );
            }
        }
    }
    out
}

async fn run(ops: Vec<Op>, backend: &str) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let (home, ws, aido_home) = (base.join("home"), base.join("home/ws"), base.join("aido"));
    std::fs::create_dir_all(&ws).unwrap();
    let text = format!(
        "workdir = \"{}\"\n[snapshots]\nbackend = \"{backend}\"\n",
        ws.display()
    );
    let config = Layered::from_layers(&[(Source::File("t".into()), &text)])
        .unwrap()
        .config;
    let journal = Journal::open(
        &aido_home.join("journal"),
        Limits::default(),
        CommitMode::Group,
    )
    .unwrap();
    let runtime = Runtime::start(RuntimeOptions {
        config,
        env: Environment {
            home: home.clone(),
            aido_home: aido_home.clone(),
        },
        journal,
        clock: Arc::new(FixedClock::default()),
    })
    .await
    .unwrap();
    let session = runtime.open_session(Some("proptest".into())).await.unwrap();
    let id = session.id();
    let head = || runtime.journal().head_seq(id).unwrap();
    // (seq, tree) on the live timeline, after each action's outcome.
    let mut states: Vec<(u64, BTreeMap<String, String>)> = vec![(head(), tree(&ws))];
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
                let (target, _) = states[*pick as usize % states.len()];
                ("rewind", json!({"to_seq": target}))
            }
        };
        let action = Action::from_tool_call(primitive, args.clone()).unwrap();
        let result = session.run(action, Hooks::default()).await;
        if let Op::Rewind(_) = op {
            let target = args["to_seq"].as_u64().unwrap();
            let ran =
                result.unwrap_or_else(|e| panic!("rewind to {target} failed: {:?}", e.failure));
            let expected = &states.iter().find(|(s, _)| *s == target).unwrap().1;
            assert_eq!(&tree(&ws), expected, "after {}", ran.outcome.text);
            // Everything after the target is now an abandoned branch.
            states.retain(|(s, _)| *s <= target);
        }
        states.push((head(), tree(&ws)));
    }
    let journal = runtime.journal();
    assert_eq!(journal.verify(id).unwrap().broken, None);
    let records = journal.all_records(id).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let derived = aido_replay::derive::derive(journal, &records, scratch.path()).unwrap();
    assert!(derived.intact(), "{:?}", derived.findings);
    let played = aido_replay::playback::playback(journal, &records);
    assert!(played.mismatches.is_empty(), "{:?}", played.mismatches);
    assert!(
        played.not_reproducible.is_empty(),
        "{:?}",
        played.not_reproducible
    );
    session.close("done").await;
    runtime.shutdown().await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 64, ..ProptestConfig::default() })]

    #[test]
    fn rewinding_to_any_seq_gives_back_the_recorded_tree(ops in prop::collection::vec(op(), 1..24)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(run(ops, "copy"));
    }
}

/// The same on whatever backend the temp dir supports best (reflink or btrfs where the temp
/// dir is on such a filesystem); prints which one it took.
#[test]
fn one_long_session_on_the_best_backend() {
    let ops: Vec<Op> = (0..60u8)
        .map(|i| match i % 9 {
            0..=2 => Op::Write(i % 4, i % 6),
            3 => Op::Edit(i % 4),
            4 => Op::Snapshot,
            5 => Op::Read(i % 4),
            6 => Op::Trash(i % 4),
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
