//! Composite functions through a real runtime: a function whose host calls are child actions
//! (judged and journaled on their own, each proposal naming the call as its parent), a host
//! call to a denied path refused as such a child, a definition surviving a restart, and
//! playback reproducing every result (the children and the call) without running the script.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::path::Path;

use aido_actions::Action;
use aido_actors::{Hooks, Runtime, Session};
use aido_journal::Event;
use serde_json::{Value, json};

async fn start(base: &Path, journal: &str) -> (Runtime, Session) {
    let home = base.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(home.join("b.txt"), "beta\n").unwrap();
    let aido_home = base.join("aido");
    let text = format!(
        "workdir = \"{}\"\n[paths]\ndeny = [\"**/secret*\"]\n",
        home.display()
    );
    let runtime = common::runtime(
        &text,
        &home,
        &aido_home,
        &aido_home.join("journal").join(journal),
    )
    .await;
    let session = runtime.open_session(Some(journal.into())).await.unwrap();
    (runtime, session)
}

async fn run(session: &Session, primitive: &str, args: Value) -> Result<(u64, Value), Value> {
    let action = Action::from_tool_call(primitive, args).unwrap();
    match session.run(action, Hooks::default()).await {
        Ok(ran) => Ok((ran.seq, ran.outcome.output)),
        Err(e) => Err(json!({"seq": e.seq, "code": e.failure.code, "details": e.failure.details})),
    }
}

fn playback_is_whole(runtime: &Runtime, session: &Session) -> u64 {
    let journal = runtime.journal();
    let records = journal.all_records(session.id()).unwrap();
    let played = aido_replay::playback::playback(journal, &records);
    assert!(played.mismatches.is_empty(), "{:?}", played.mismatches);
    assert!(
        played.not_reproducible.is_empty(),
        "{:?}",
        played.not_reproducible
    );
    played.reproduced
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_calls_are_children_a_denied_one_is_refused_and_playback_reproduces_all() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let (runtime, session) = start(&base, "a").await;
    std::fs::write(base.join("home/secret.txt"), "hidden\n").unwrap();
    let source = r#"
        let out = [];
        for p in args.paths { out.push(run("read_file", #{path: p}).content); }
        out
    "#;
    run(
        &session,
        "define_function",
        json!({"name": "cat", "source": source}),
    )
    .await
    .unwrap();
    let (parent, out) = run(
        &session,
        "call_function",
        json!({"name": "cat", "args": {"paths": ["a.txt", "b.txt"]}}),
    )
    .await
    .unwrap();
    assert_eq!(out["result"], json!(["alpha\n", "beta\n"]));
    let children: Vec<u64> = out["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["seq"].as_u64().unwrap())
        .collect();
    let records = runtime.journal().all_records(session.id()).unwrap();
    for child in &children {
        let proposed = records.iter().find(|r| r.seq == *child).unwrap();
        match &proposed.event {
            Event::ActionProposed {
                action, parent: p, ..
            } => {
                assert_eq!(action.primitive(), "read_file");
                assert_eq!(*p, Some(parent));
            }
            other => panic!("{other:?}"),
        }
    }

    let refused = run(
        &session,
        "call_function",
        json!({"name": "cat", "args": {"paths": ["a.txt", "secret.txt"]}}),
    )
    .await
    .unwrap_err();
    assert_eq!(refused["code"], "script_host_call_failed");
    assert_eq!(refused["details"]["child_code"], "path_denied_by_pattern");
    let child = refused["details"]["seq"].as_u64().unwrap();
    let records = runtime.journal().all_records(session.id()).unwrap();
    let proposed = records.iter().find(|r| r.seq == child).unwrap();
    match &proposed.event {
        Event::ActionProposed {
            verdict, parent, ..
        } => {
            assert!(verdict.is_deny());
            assert_eq!(*parent, refused["seq"].as_u64());
        }
        other => panic!("{other:?}"),
    }
    // The define, the call, its two children, the failed call and its readable child.
    assert!(playback_is_whole(&runtime, &session) >= 6);
    runtime.shutdown().await;

    // A new runtime on the same AIDO_HOME (a restart) has the definition.
    let (runtime, session) = start(&base, "b").await;
    let (_, listed) = run(&session, "list_functions", json!({})).await.unwrap();
    assert_eq!(listed["definitions"][0]["name"], "cat");
    assert_eq!(runtime.defined_tools()[0].name, "cat");
    let (_, out) = run(
        &session,
        "call_function",
        json!({"name": "cat", "args": {"paths": ["b.txt"]}}),
    )
    .await
    .unwrap();
    assert_eq!(out["result"], json!(["beta\n"]));
    playback_is_whole(&runtime, &session);
    runtime.shutdown().await;
}
