//! Asking a human through a real runtime: a scripted surface that answers forms (accept,
//! decline, cancel, time out, never answer), a surface that cannot ask (the question goes to
//! AIDO_HOME/questions.sqlite and is answered there from another connection, as `aido answer`
//! does from another process), cancellation while waiting, and playback reproducing every
//! result from the journal alone.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aido_actions::Action;
use aido_actors::human::{QUESTIONS_FILE, Questions};
use aido_actors::{Asker, Elicited, Hooks, Runtime, Session};
use serde_json::{Value, json};

struct Aido {
    runtime: Runtime,
    session: Session,
    aido_home: PathBuf,
    _dir: tempfile::TempDir,
}

async fn aido(config: &str) -> Aido {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let home = base.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let aido_home = base.join("aido");
    let text = format!("workdir = \"{}\"\n{config}", home.display());
    let runtime = common::runtime(
        &text,
        &home,
        &aido_home,
        &aido_home.join("journal").join("main"),
    )
    .await;
    let session = runtime.open_session(None).await.unwrap();
    Aido {
        runtime,
        session,
        aido_home,
        _dir: dir,
    }
}

/// A surface that answers every form with the next scripted answer (`None`: never answers)
/// and remembers what it was shown.
#[derive(Default)]
struct Scripted {
    answers: Mutex<Vec<Option<Elicited>>>,
    shown: Mutex<Vec<(String, Value, Duration)>>,
}

impl Scripted {
    fn new(answers: Vec<Option<Elicited>>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.into_iter().rev().collect()),
            shown: Mutex::default(),
        })
    }
}

impl Asker for Scripted {
    fn can_ask(&self) -> bool {
        true
    }

    fn ask(
        &self,
        message: String,
        schema: Value,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Elicited> + Send>> {
        self.shown.lock().unwrap().push((message, schema, timeout));
        let next = self
            .answers
            .lock()
            .unwrap()
            .pop()
            .expect("a scripted answer");
        Box::pin(async move {
            match next {
                Some(answer) => answer,
                None => std::future::pending().await,
            }
        })
    }
}

impl Aido {
    async fn run(&self, hooks: Hooks, primitive: &str, args: Value) -> Result<Value, Value> {
        let action = Action::from_tool_call(primitive, args).unwrap();
        match self.session.run(action, hooks).await {
            Ok(ran) => Ok(ran.outcome.output),
            Err(e) => Err(json!({"code": e.failure.code, "details": e.failure.details})),
        }
    }

    async fn ask(
        &self,
        asker: &Arc<Scripted>,
        primitive: &str,
        args: Value,
    ) -> Result<Value, Value> {
        let hooks = Hooks {
            asker: Some(asker.clone() as Arc<dyn Asker>),
            ..Hooks::default()
        };
        self.run(hooks, primitive, args).await
    }

    fn playback(&self) -> aido_replay::playback::Playback {
        let journal = self.runtime.journal();
        let records = journal.all_records(self.session.id()).unwrap();
        aido_replay::playback::playback(journal, &records)
    }

    fn store(&self) -> Questions {
        Questions::open(&self.aido_home.join(QUESTIONS_FILE)).unwrap()
    }
}

fn accepted(content: Value) -> Option<Elicited> {
    Some(Elicited::Accepted(content))
}

fn played_back_all(a: &Aido, count: u64) {
    let played = a.playback();
    assert!(played.mismatches.is_empty(), "{:?}", played.mismatches);
    assert!(
        played.not_reproducible.is_empty(),
        "{:?}",
        played.not_reproducible
    );
    assert_eq!(played.reproduced, count, "{played:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_are_answered_and_confirm_is_yes_only_on_an_explicit_yes() {
    let a = aido("").await;
    let asker = Scripted::new(vec![
        accepted(json!({"answer": "main"})),
        accepted(json!({"approve": true})),
        accepted(json!({"approve": false})),
        accepted(json!({"approve": "true"})),
        Some(Elicited::Declined),
        Some(Elicited::Cancelled),
        Some(Elicited::TimedOut),
        accepted(json!({"choices": ["b", "c"]})),
        Some(Elicited::Declined),
        accepted(json!({"choice": "z"})),
    ]);
    let out = a
        .ask(&asker, "ask_human", json!({"question": "Base branch?"}))
        .await
        .unwrap();
    assert_eq!(out["answer"], "main");
    let (message, schema, timeout) = asker.shown.lock().unwrap()[0].clone();
    assert_eq!(message, "Base branch?");
    assert_eq!(schema["required"], json!(["answer"]));
    assert_eq!(timeout, Duration::from_millis(120_000));

    let confirm = json!({"question": "Ship it?", "timeout_ms": 1000});
    let yes = a.ask(&asker, "confirm", confirm.clone()).await.unwrap();
    assert_eq!(
        (yes["approved"].clone(), yes["answer"].clone()),
        (json!(true), json!("yes"))
    );
    for reason in [
        "answered no",
        "answered no",
        "declined",
        "cancelled",
        "timeout",
    ] {
        let no = a.ask(&asker, "confirm", confirm.clone()).await.unwrap();
        assert_eq!(no["approved"], false, "{no}");
        assert_eq!(no["reason"], reason);
    }
    let choices = json!({"question": "Which?", "choices": ["a", "b", "c"], "multiple": true});
    let out = a
        .ask(&asker, "ask_multiple_choice", choices.clone())
        .await
        .unwrap();
    assert_eq!(out["choices"], json!(["b", "c"]));
    let declined = a
        .ask(&asker, "ask_multiple_choice", choices)
        .await
        .unwrap_err();
    assert_eq!(declined["code"], "human_declined");
    let single = json!({"question": "Which?", "choices": ["a", "b"]});
    let invalid = a
        .ask(&asker, "ask_multiple_choice", single)
        .await
        .unwrap_err();
    assert_eq!(invalid["code"], "human_answer_invalid");

    // Refused before the surface is asked: a secret, a timeout over the policy's maximum.
    let secret = a
        .ask(&asker, "ask_human", json!({"question": "Your API_KEY?"}))
        .await
        .unwrap_err();
    assert_eq!(secret["code"], "human_secret_requested");
    let long = json!({"question": "Later?", "timeout_ms": 300_001});
    let long = a.ask(&asker, "confirm", long).await.unwrap_err();
    assert_eq!(long["code"], "human_timeout_too_long");
    assert_eq!(asker.shown.lock().unwrap().len(), 10);

    // A confirm inside a pipeline: the walk asks it like any leaf.
    let asker = Scripted::new(vec![accepted(json!({"approve": true}))]);
    let pipeline = json!({"steps": [
        {"type": "confirm", "question": "Write it?"},
        {"type": "write_file", "path": "after.txt", "content": "x"},
    ]});
    a.ask(&asker, "pipeline", pipeline).await.unwrap();
    played_back_all(&a, 13);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_surface_that_never_answers_is_bounded_by_the_timeout() {
    let a = aido("").await;
    let asker = Scripted::new(vec![None, None]);
    let started = std::time::Instant::now();
    let confirm = json!({"question": "Still there?", "timeout_ms": 100});
    let out = a.ask(&asker, "confirm", confirm).await.unwrap();
    assert_eq!(out["reason"], "timeout");
    let text = json!({"question": "Still there?", "timeout_ms": 100});
    let failed = a.ask(&asker, "ask_human", text).await.unwrap_err();
    assert_eq!(failed["code"], "human_timeout");
    // Each waited its timeout plus the surface's grace (2 s), not forever.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    played_back_all(&a, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_surface_the_question_waits_in_the_store_for_aido_answer() {
    let a = aido("[limits]\nconfirm_timeout_ms = 20000\n").await;
    let hooks = Hooks::default; // no asker: nobody can be asked in this client
    let needs = a
        .run(
            hooks(),
            "ask_human",
            json!({"question": "Which flag?", "timeout_ms": 50}),
        )
        .await
        .unwrap_err();
    assert_eq!(needs["code"], "needs_human");
    let id = needs["details"]["id"].as_str().unwrap().to_owned();
    let pending = a.store().pending().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].id, id);
    assert_eq!(pending[0].session, a.session.id().to_string());

    // Without a timeout_ms the call does not wait: the agent gets the id at once.
    let started = std::time::Instant::now();
    let at_once = a
        .run(hooks(), "confirm", json!({"question": "Right away?"}))
        .await
        .unwrap_err();
    assert_eq!(at_once["code"], "needs_human");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(a.store().pending().unwrap().len(), 2);

    // Still nobody: check_answer says so again; an unknown id is its own code.
    let again = a
        .run(hooks(), "check_answer", json!({"id": id}))
        .await
        .unwrap_err();
    assert_eq!(again["code"], "needs_human");
    let unknown = a
        .run(hooks(), "check_answer", json!({"id": "q-x"}))
        .await
        .unwrap_err();
    assert_eq!(unknown["code"], "question_not_found");

    // Another connection (another process, in real life) answers while check_answer waits.
    let store = a.aido_home.join(QUESTIONS_FILE);
    let answerer = {
        let (id, store) = (id.clone(), store.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let s = Questions::open(&store).unwrap();
            s.answer(&id, Some(&json!({"text": "fast"})), 1).unwrap();
        })
    };
    let check = json!({"id": id, "wait_ms": 10_000});
    let out = a.run(hooks(), "check_answer", check).await.unwrap();
    answerer.join().unwrap();
    assert_eq!(
        out,
        json!({"via": "aido answer", "id": id, "status": "answered", "answer": "fast"})
    );

    // The original call waits within its timeout, and is cancelled with the call.
    let cancel = tokio_util::sync::CancellationToken::new();
    let waiting = Hooks {
        cancel: cancel.clone(),
        ..Hooks::default()
    };
    let ask = a.run(
        waiting,
        "confirm",
        json!({"question": "Go?", "timeout_ms": 15_000}),
    );
    let canceller = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    };
    let started = std::time::Instant::now();
    let (cancelled, ()) = tokio::join!(ask, canceller);
    assert_eq!(cancelled.unwrap_err()["code"], "cancelled");
    assert!(started.elapsed() < Duration::from_secs(5));

    // The agent cannot answer through the filesystem either: the store is in AIDO_HOME.
    let store_path = store.display().to_string();
    let write = json!({"path": store_path, "content": "answered"});
    let refused = a.run(hooks(), "write_file", write).await.unwrap_err();
    assert!(
        refused["code"].as_str().unwrap().starts_with("path_"),
        "{refused}"
    );
    assert_eq!(a.store().get(&id).unwrap().unwrap().state, "accept");

    // Playback reproduces all of it without the store.
    std::fs::rename(&store, a.aido_home.join("gone.sqlite")).unwrap();
    played_back_all(&a, 6);
}
