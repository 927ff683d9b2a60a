//! Subscriptions and reactions against a real runtime (sled journal, real inotify): batches
//! are journaled before the notifier hears of them, denied paths never reach it, reactions
//! fire as journaled child actions within their rate, never on their own writes, and a
//! session's subscriptions end with it.

#![cfg(feature = "prim-process")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aido_actions::Action;
use aido_actors::{Hooks, Notifier, Runtime, Session};
use aido_journal::Event;
use serde_json::{Value, json};

#[derive(Default)]
struct Told(Mutex<Vec<Value>>);

impl Notifier for Told {
    fn notify(&self, batch: Value) {
        self.0.lock().unwrap().push(batch);
    }
}

impl Told {
    fn all(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }

    fn paths(&self) -> Vec<String> {
        self.all()
            .iter()
            .flat_map(|b| b["changes"].as_array().cloned().unwrap_or_default())
            .map(|c| c["path"].as_str().unwrap().to_owned())
            .collect()
    }
}

struct World {
    _dir: tempfile::TempDir,
    project: PathBuf,
    runtime: Runtime,
    session: Session,
    told: Arc<Told>,
}

async fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let home = base.join("home");
    let project = home.join("project");
    std::fs::create_dir_all(project.join("watched")).unwrap();
    let aido_home = base.join("aido");
    let text = format!(
        "workdir = \"{}\"\n[paths]\ndeny = [\"**/*.secret\"]\n",
        project.display()
    );
    let runtime = common::runtime(&text, &home, &aido_home, &aido_home.join("journal")).await;
    let session = runtime.open_session(Some("events".into())).await.unwrap();
    World {
        _dir: dir,
        project,
        runtime,
        session,
        told: Arc::default(),
    }
}

impl World {
    fn hooks(&self) -> Hooks {
        Hooks {
            notifier: Some(self.told.clone()),
            ..Hooks::default()
        }
    }

    async fn run(&self, primitive: &str, args: Value) -> Result<(u64, Value), String> {
        let action = Action::from_tool_call(primitive, args).unwrap();
        self.session
            .run(action, self.hooks())
            .await
            .map(|r| (r.seq, r.outcome.output))
            .map_err(|e| e.failure.code)
    }

    async fn until(&self, what: &str, cond: impl Fn(&[Value]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond(&self.told.all()) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {:?}",
                self.told.all()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn records(&self) -> Vec<aido_journal::Record> {
        self.runtime
            .journal()
            .all_records(self.session.id())
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_is_journaled_then_told_and_a_denied_path_never_is() {
    let w = world().await;
    let (proposal, sub) = w
        .run(
            "subscribe",
            json!({"paths": ["watched"], "debounce_ms": 50}),
        )
        .await
        .unwrap();
    let id = sub["subscription"].as_str().unwrap().to_owned();
    // Denied by the deny glob, and new: never delivered.
    std::fs::write(w.project.join("watched/new.secret"), "x").unwrap();
    w.run(
        "write_file",
        json!({"path": "watched/a.txt", "content": "a"}),
    )
    .await
    .unwrap();
    let a = w.project.join("watched/a.txt").display().to_string();
    w.until("a.txt", |_| w.told.paths().contains(&a)).await;
    assert!(
        w.told
            .paths()
            .iter()
            .all(|p| !p.ends_with(".secret") && !p.contains(".aido-")),
        "{:?}",
        w.told.all()
    );
    let journaled: Vec<u64> = w
        .records()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::EventsDelivered {
                subscription,
                proposal: of,
                changes,
                ..
            } if subscription == id => {
                assert_eq!(of, proposal);
                assert!(changes.iter().all(|c| !c.path.ends_with(".secret")));
                Some(r.seq)
            }
            _ => None,
        })
        .collect();
    let told: Vec<u64> = w
        .told
        .all()
        .iter()
        .map(|b| b["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(journaled, told, "every batch told is journaled, in order");
    // Not a notifier: refused before anything is watched.
    let action = Action::from_tool_call("subscribe", json!({"paths": ["watched"]})).unwrap();
    let refused = w.session.run(action, Hooks::default()).await.unwrap_err();
    assert_eq!(refused.failure.code, "events_undeliverable");
    // The session's end ends it: list_subscriptions of a new session shows none of it, and
    // nothing more is told.
    w.session.close("test over").await;
    let count = w.told.all().len();
    std::fs::write(w.project.join("watched/late.txt"), "x").unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(w.told.all().len(), count);
    let other = w.runtime.open_session(None).await.unwrap();
    let list = Action::from_tool_call("list_subscriptions", json!({})).unwrap();
    let listed = other.run(list, Hooks::default()).await.unwrap();
    assert_eq!(listed.outcome.output["subscriptions"], json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reaction_fires_as_child_actions_within_its_rate_and_never_on_its_own_writes() {
    let w = world().await;
    let (watch, _) = w
        .run(
            "watch_and_react",
            json!({
                "paths": ["watched"], "debounce_ms": 100, "per_minute": 2,
                "reaction": {"tool": "write_file", "arguments": {"path": "{{path}}.seen", "content": "{{relative}}"}},
            }),
        )
        .await
        .unwrap();
    for name in ["one", "two", "three"] {
        std::fs::write(w.project.join("watched").join(name), name).unwrap();
    }
    w.until("three changes", |all| all.len() >= 3).await;
    // Its own .seen writes come back as events; they must not fire it.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let all = w.told.all();
    let fired: Vec<&Value> = all.iter().filter(|b| b.get("fired").is_some()).collect();
    let limited: Vec<&Value> = all.iter().filter(|b| b.get("refused").is_some()).collect();
    assert_eq!((fired.len(), limited.len()), (2, 1), "{all:?}");
    assert_eq!(limited[0]["refused"], "watch_rate_limited");
    let seen = std::fs::read_dir(w.project.join("watched"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".seen")
        })
        .count();
    assert_eq!(seen, 2);
    let children: Vec<Action> = w
        .records()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::ActionProposed {
                action,
                parent,
                verdict,
                ..
            } if parent == Some(watch) => {
                assert!(verdict.is_allow());
                Some(action)
            }
            _ => None,
        })
        .collect();
    assert_eq!(children.len(), 2);
    assert!(children.iter().all(|a| a.primitive() == "write_file"));
    let (_, listed) = w.run("list_subscriptions", json!({})).await.unwrap();
    let mine = &listed["subscriptions"][0];
    assert_eq!(
        (mine["fired"].as_u64(), mine["rate_limited"].as_u64()),
        (Some(2), Some(1))
    );
    assert!(mine["own_changes_ignored"].as_u64().unwrap() >= 1, "{mine}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_denied_reaction_is_journaled_as_denied() {
    let w = world().await;
    let (watch, _) = w
        .run(
            "watch_and_react",
            json!({
                "paths": ["watched"], "debounce_ms": 50,
                "reaction": {"tool": "write_file", "arguments": {"path": "{{path}}.secret", "content": "x"}},
            }),
        )
        .await
        .unwrap();
    std::fs::write(w.project.join("watched/a"), "a").unwrap();
    w.until("a firing", |all| {
        all.iter().any(|b| b.get("fired").is_some())
    })
    .await;
    let fired = w
        .told
        .all()
        .into_iter()
        .find(|b| b.get("fired").is_some())
        .unwrap();
    assert_eq!(fired["fired"]["status"], "denied", "{fired}");
    assert_eq!(fired["fired"]["code"], "path_denied_by_pattern");
    assert!(!w.project.join("watched/a.secret").exists());
    let denied = w.records().into_iter().any(|r| {
        matches!(r.event, Event::ActionProposed { parent, verdict, .. }
            if parent == Some(watch) && !verdict.is_allow())
    });
    assert!(denied, "the denied firing is journaled");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_is_bounded_and_counted_as_lagged_and_aido_keeps_answering() {
    let w = world().await;
    w.run(
        "subscribe",
        json!({"paths": ["watched"], "debounce_ms": 1000}),
    )
    .await
    .unwrap();
    let dir = w.project.join("watched");
    let flood = std::thread::spawn(move || {
        for i in 0..6_000 {
            std::fs::write(dir.join(format!("f{i}")), "x").unwrap();
        }
    });
    // While the flood runs, a call answers.
    let started = Instant::now();
    w.run("read_file", json!({"path": "watched/f0"})).await.ok();
    let answered = started.elapsed();
    flood.join().unwrap();
    w.until("a lagged batch", |all| {
        all.iter().any(|b| b["lagged"].as_u64().unwrap_or(0) > 0)
    })
    .await;
    for batch in w.told.all() {
        assert!(
            batch["changes"].as_array().unwrap().len() <= 256,
            "a batch is bounded"
        );
    }
    let delivered: usize = w
        .told
        .all()
        .iter()
        .map(|b| b["changes"].as_array().unwrap().len())
        .sum();
    let lagged: u64 = w
        .told
        .all()
        .iter()
        .map(|b| b["lagged"].as_u64().unwrap())
        .sum();
    println!(
        "flood of 6000 files: {delivered} paths delivered, {lagged} events counted as lagged, a read answered in {answered:?} meanwhile"
    );
    assert!(answered < Duration::from_secs(5), "{answered:?}");
}
