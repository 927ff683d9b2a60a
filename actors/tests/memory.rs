//! The memory body through a real runtime: remember, recall, list and forget in one session;
//! the same AIDO_HOME after a restart; two runtimes (each with its own journal, as two `aido`
//! processes have) sharing one memory store; and playback reproducing every memory result
//! from the journal alone.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::path::{Path, PathBuf};

use aido_actions::Action;
use aido_actors::{Hooks, Runtime, Session};
use serde_json::{Value, json};

struct Aido {
    runtime: Runtime,
    session: Session,
}

/// A runtime on `base/aido` (AIDO_HOME) whose journal is `journal/<name>`, working in
/// `base/home/project`.
async fn aido(base: &Path, name: &str, config: &str) -> Aido {
    let home = base.join("home");
    std::fs::create_dir_all(home.join("project")).unwrap();
    let aido_home = base.join("aido");
    let text = format!("workdir = \"{}\"\n{config}", home.join("project").display());
    let runtime = common::runtime(
        &text,
        &home,
        &aido_home,
        &aido_home.join("journal").join(name),
    )
    .await;
    // FixedClock counts ids from zero in every runtime: let the sessions of "b" and later
    // names differ from those of "a", as they do under the system clock.
    for _ in 0..name.len().saturating_sub(1) + usize::from(name != "a") {
        runtime.open_session(None).await.unwrap();
    }
    let session = runtime.open_session(Some(name.into())).await.unwrap();
    Aido { runtime, session }
}

fn base() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    (dir, base)
}

impl Aido {
    async fn run(&self, primitive: &str, args: Value) -> Result<Value, String> {
        let action = Action::from_tool_call(primitive, args).unwrap();
        match self.session.run(action, Hooks::default()).await {
            Ok(ran) => Ok(ran.outcome.output),
            Err(e) => Err(e.failure.code),
        }
    }

    async fn ok(&self, primitive: &str, args: Value) -> Value {
        self.run(primitive, args)
            .await
            .unwrap_or_else(|code| panic!("{primitive} failed: {code}"))
    }

    async fn err(&self, primitive: &str, args: Value) -> String {
        match self.run(primitive, args).await {
            Ok(out) => panic!("{primitive} should fail but gave {out}"),
            Err(code) => code,
        }
    }

    /// The texts a recall finds.
    async fn recall(&self, query: &str) -> Vec<String> {
        let out = self.ok("recall", json!({"query": query})).await;
        out["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["memory"]["text"].as_str().unwrap().to_owned())
            .collect()
    }

    fn playback(&self) -> aido_replay::playback::Playback {
        let journal = self.runtime.journal();
        let records = journal.all_records(self.session.id()).unwrap();
        aido_replay::playback::playback(journal, &records)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remember_recall_list_forget_in_one_session_and_playback_reproduces_them() {
    let (_dir, base) = base();
    let a = aido(&base, "a", "").await;
    let kept = a
        .ok(
            "remember",
            json!({"text": "The integration tests need cargo test --features e2e", "tags": ["testing"]}),
        )
        .await;
    assert_eq!(kept["scope"]["kind"], "project");
    // The provenance is this session and the remember's own seq.
    assert_eq!(kept["provenance"]["session"], a.session.id().to_string());
    assert_eq!(kept["provenance"]["untrusted"], false);
    assert!(kept["provenance"]["seq"].as_u64().unwrap() > 0);
    a.ok(
        "remember",
        json!({"text": "Scratch notes live in /tmp/notes for this session only", "scope": "session"}),
    )
    .await;
    a.ok(
        "remember",
        json!({"text": "The build uses two cores", "scope": "global", "expiry": {"after_ms": 3_600_000}}),
    )
    .await;

    assert_eq!(
        a.recall("integration tests").await,
        ["The integration tests need cargo test --features e2e"]
    );
    assert_eq!(a.recall("scratch notes").await.len(), 1);
    let tagged = a
        .ok(
            "recall",
            json!({"query": "tests build", "tags": ["testing"]}),
        )
        .await;
    assert_eq!(tagged["results"].as_array().unwrap().len(), 1);

    let listed = a.ok("list_memory", json!({"limit": 2})).await;
    assert_eq!(listed["memories"].as_array().unwrap().len(), 2);
    let cursor = listed["next_cursor"].as_str().unwrap().to_owned();
    let rest = a
        .ok("list_memory", json!({"limit": 2, "cursor": cursor}))
        .await;
    assert_eq!(rest["memories"].as_array().unwrap().len(), 1);

    let id = kept["id"].as_u64().unwrap();
    assert_eq!(a.ok("forget", json!({"id": id})).await["count"], 1);
    assert!(a.recall("integration tests").await.is_empty());

    // Bad input: coded, and the body goes on serving.
    let huge = "x".repeat(16 * 1024 + 1);
    assert_eq!(
        a.err("remember", json!({"text": huge})).await,
        "memory_text_too_large"
    );
    assert_eq!(
        a.err("remember", json!({"text": "  "})).await,
        "memory_text_empty"
    );
    assert_eq!(
        a.err("recall", json!({"query": ""})).await,
        "memory_query_empty"
    );
    assert_eq!(
        a.err("recall", json!({"query": "(( ))"})).await,
        "memory_query_empty"
    );
    assert_eq!(a.err("forget", json!({"id": id})).await, "memory_not_found");
    assert_eq!(
        a.err("forget", json!({})).await,
        "memory_forget_filter_empty"
    );
    assert_eq!(
        a.err("forget", json!({"id": 1, "tags": ["x"]})).await,
        "invalid_arguments"
    );
    assert_eq!(
        a.err("recall", json!({"query": "x", "cursor": "nope"}))
            .await,
        "memory_cursor_invalid"
    );
    assert_eq!(a.recall("cores").await, ["The build uses two cores"]);

    // Every memory result (and every coded failure) is reproduced from the journal alone.
    let played = a.playback();
    assert!(played.mismatches.is_empty(), "{:?}", played.mismatches);
    assert!(
        played.not_reproducible.is_empty(),
        "{:?}",
        played.not_reproducible
    );
    assert!(played.external.is_empty(), "{:?}", played.external);
    // 11 results and 8 coded failures, every one of them.
    assert_eq!(played.reproduced, 19);
    a.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memories_outlive_a_restart_of_the_runtime() {
    let (_dir, base) = base();
    let first = aido(&base, "a", "").await;
    first
        .ok(
            "remember",
            json!({"text": "The deploy key rotates on Mondays"}),
        )
        .await;
    first
        .ok(
            "remember",
            json!({"text": "Monday scratch", "scope": "session"}),
        )
        .await;
    first.runtime.shutdown().await;

    let second = aido(&base, "b", "").await;
    // The project memory is there; the other session's is not visible to this one.
    assert_eq!(
        second
            .recall("when does the deploy key rotate Monday")
            .await,
        ["The deploy key rotates on Mondays"]
    );
    second.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runtimes_on_one_aido_home_see_each_others_memories() {
    let (_dir, base) = base();
    let (a, b) = tokio::join!(aido(&base, "a", ""), aido(&base, "b", ""));
    let writes = 20;
    let remember = |who: &'static str, n: u32| {
        let aido = if who == "a" { &a } else { &b };
        async move {
            aido.ok(
                "remember",
                json!({"text": format!("fact {n} from {who} about zebras"), "tags": [who]}),
            )
            .await
        }
    };
    for n in 0..writes {
        tokio::join!(remember("a", n), remember("b", n));
    }
    for (aido, other) in [(&a, "b"), (&b, "a")] {
        let seen = aido
            .ok("list_memory", json!({"tags": [other], "limit": 500}))
            .await;
        assert_eq!(
            seen["memories"].as_array().unwrap().len(),
            writes as usize,
            "every memory of {other} is seen"
        );
        let found = aido
            .ok(
                "recall",
                json!({"query": format!("zebras {other}"), "limit": 100}),
            )
            .await;
        assert_eq!(
            found["results"].as_array().unwrap().len(),
            2 * writes as usize
        );
    }
    for aido in [&a, &b] {
        let played = aido.playback();
        assert!(played.mismatches.is_empty(), "{:?}", played.mismatches);
        assert!(played.not_reproducible.is_empty());
    }
    a.runtime.shutdown().await;
    b.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_answers_to_the_policy() {
    let (_dir, base) = base();
    let off = aido(&base, "a", "[memory]\nenabled = false").await;
    for (primitive, args) in [
        ("remember", json!({"text": "t"})),
        ("recall", json!({"query": "t"})),
        ("forget", json!({"id": 1})),
        ("list_memory", json!({})),
    ] {
        assert_eq!(
            off.err(primitive, args).await,
            "memory_disabled",
            "{primitive}"
        );
    }
    off.runtime.shutdown().await;
    let readonly = aido(&base, "b", "mode = \"readonly\"").await;
    assert_eq!(
        readonly.err("remember", json!({"text": "t"})).await,
        "mode_readonly"
    );
    assert_eq!(
        readonly.err("forget", json!({"id": 1})).await,
        "mode_readonly"
    );
    readonly.ok("list_memory", json!({})).await;
    readonly.runtime.shutdown().await;
}
