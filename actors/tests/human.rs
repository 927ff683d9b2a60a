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
use aido_actors::human::{Answerer, QUESTIONS_FILE, Questions, Surface, answer_stored};
use aido_actors::{Asker, ConfirmAnswer, Confirmer, Elicited, Hooks, Runtime, Session};
use aido_journal::Event;
use serde_json::{Value, json};

struct Aido {
    runtime: Runtime,
    session: Session,
    aido_home: PathBuf,
    home: PathBuf,
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
        home,
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

    fn p(&self, rel: &str) -> PathBuf {
        self.home.join(rel)
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
            let by = Answerer::new(Surface::Cli, Some("alice"));
            s.answer(&id, Some(&json!({"text": "fast"})), 1, &by)
                .unwrap();
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

/// A surface whose form is answered when the test says so, through a channel; what it was
/// shown is kept. Dropped unanswered, its sender tells the test the form was withdrawn.
struct Held {
    answer: Mutex<Option<tokio::sync::oneshot::Receiver<Elicited>>>,
    asked: tokio::sync::Notify,
}

impl Held {
    fn new() -> (Arc<Self>, tokio::sync::oneshot::Sender<Elicited>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let held = Arc::new(Self {
            answer: Mutex::new(Some(rx)),
            asked: tokio::sync::Notify::new(),
        });
        (held, tx)
    }

    fn take(&self) -> Pin<Box<dyn Future<Output = Elicited> + Send>> {
        let rx = self.answer.lock().unwrap().take().expect("asked once");
        self.asked.notify_one();
        Box::pin(async move { rx.await.unwrap_or(Elicited::Unavailable) })
    }
}

impl Asker for Held {
    fn can_ask(&self) -> bool {
        true
    }

    fn ask(
        &self,
        _message: String,
        _schema: Value,
        _timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Elicited> + Send>> {
        self.take()
    }
}

impl Confirmer for Held {
    fn confirm(&self, prompt: String) -> Pin<Box<dyn Future<Output = ConfirmAnswer> + Send>> {
        assert!(prompt.contains("write_file"), "{prompt}");
        let asked = self.take();
        Box::pin(async move {
            match asked.await {
                Elicited::Accepted(c) if c["approve"] == json!(true) => ConfirmAnswer::Approved,
                Elicited::Accepted(_) | Elicited::Declined => ConfirmAnswer::Declined,
                Elicited::Cancelled => ConfirmAnswer::Cancelled,
                Elicited::TimedOut => ConfirmAnswer::TimedOut,
                Elicited::Unavailable => ConfirmAnswer::Unavailable,
            }
        })
    }
}

impl Aido {
    /// The one question waiting in the store, once it is there (within 10 s).
    async fn waiting(&self) -> aido_actors::human::Stored {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let pending = self.store().pending().unwrap();
            if let [one] = pending.as_slice() {
                return one.clone();
            }
            assert!(pending.len() < 2, "{pending:?}");
            assert!(std::time::Instant::now() < deadline, "no question waits");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A person answers the stored question `id` through `by` (as Mission Control, `aido
    /// watch` and `aido answer` do), on the blocking pool.
    async fn answer(
        &self,
        id: &str,
        content: Option<Value>,
        by: Answerer,
    ) -> Result<aido_actors::human::Stored, String> {
        let (path, id) = (self.aido_home.join(QUESTIONS_FILE), id.to_owned());
        tokio::task::spawn_blocking(move || {
            answer_stored(&path, &id, content.as_ref(), 1, &by).map_err(|e| e.code().to_owned())
        })
        .await
        .unwrap()
    }

    fn events(&self) -> Vec<Event> {
        let journal = self.runtime.journal();
        journal
            .all_records(self.session.id())
            .unwrap()
            .into_iter()
            .map(|r| r.event)
            .collect()
    }

    /// Each `confirm_answered` record: approved, answer, who.
    fn confirmations(&self) -> Vec<(bool, String, Option<Answerer>)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::ConfirmAnswered {
                    approved,
                    answer,
                    by,
                    question,
                    ..
                } => {
                    assert!(question.is_some(), "a confirmation names its question");
                    Some((approved, answer, by))
                }
                _ => None,
            })
            .collect()
    }

    fn completed(&self) -> usize {
        self.events()
            .iter()
            .filter(|e| matches!(e, Event::ActionCompleted { .. }))
            .count()
    }
}

fn write(path: &str) -> Action {
    Action::from_tool_call("write_file", json!({"path": path, "content": "x"})).unwrap()
}

/// A confirm-mode write waits while the client's form is open; Mission Control answers
/// first: the write runs once, the journal names Mission Control, the form is withdrawn and
/// its late answer changes nothing, and a second answer is refused with a code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmation_answered_from_the_store_wins_over_a_pending_elicitation() {
    let a = aido("mode = \"confirm\"").await;
    let (held, late) = Held::new();
    let hooks = Hooks {
        confirmer: Some(held.clone() as Arc<dyn Confirmer>),
        ..Hooks::default()
    };
    let running = {
        let session = a.session.clone();
        tokio::spawn(async move { session.run(write("mc.txt"), hooks).await })
    };
    held.asked.notified().await;
    let q = a.waiting().await;
    assert_eq!(q.session, a.session.id().to_string());
    assert!(q.question.question.contains("write_file"), "{q:?}");
    // The write waits for the answer.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!running.is_finished());
    assert!(!a.p("mc.txt").exists());

    let by = Answerer::new(Surface::MissionControl, Some("with the operator's token"));
    let answered = a
        .answer(&q.id, Some(json!({"approve": true})), by.clone())
        .await
        .unwrap();
    assert_eq!(answered.by.as_ref(), Some(&by));
    running.await.unwrap().unwrap();
    assert!(a.p("mc.txt").exists());
    // The form was withdrawn when the store's answer won: its late answer finds nobody.
    assert!(late.is_closed(), "the elicitation is withdrawn");
    assert!(late.send(Elicited::Declined).is_err());
    // Answered twice: the second is refused, whoever sends it.
    let again = Answerer::new(Surface::Watch, Some("bob"));
    let refused = a.answer(&q.id, None, again).await.unwrap_err();
    assert_eq!(refused, "question_already_answered");
    assert_eq!(a.completed(), 1);
    assert_eq!(
        a.confirmations(),
        vec![(true, "accepted".to_owned(), Some(by))]
    );
}

/// The client's form answers first: the stored question is answered by it, the others are
/// refused, and the journal names the elicitation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmation_answered_by_the_elicitation_refuses_the_other_surfaces() {
    let a = aido("mode = \"confirm\"").await;
    let (held, answer) = Held::new();
    let hooks = Hooks {
        confirmer: Some(held.clone() as Arc<dyn Confirmer>),
        ..Hooks::default()
    };
    let running = {
        let session = a.session.clone();
        tokio::spawn(async move { session.run(write("form.txt"), hooks).await })
    };
    held.asked.notified().await;
    let q = a.waiting().await;
    answer
        .send(Elicited::Accepted(json!({"approve": true})))
        .unwrap();
    running.await.unwrap().unwrap();
    let stored = a.store().get(&q.id).unwrap().unwrap();
    assert_eq!(stored.state, "accept");
    let form = Answerer::new(Surface::Elicitation, None);
    assert_eq!(stored.by.as_ref(), Some(&form));
    let cli = Answerer::new(Surface::Cli, Some("alice"));
    let refused = a.answer(&q.id, Some(json!({"approve": false})), cli).await;
    assert_eq!(refused.unwrap_err(), "question_already_answered");
    assert_eq!(
        a.confirmations(),
        vec![(true, "accepted".to_owned(), Some(form))]
    );
    assert_eq!(a.completed(), 1);
}

/// A client without a form: the write waits for `aido answer`, whose "no" refuses it (nothing
/// written, the journal names the command line and its user); a confirmation nobody answers
/// ends at `confirm_timeout_ms`, and the question is closed to late answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmation_denied_from_the_store_writes_nothing_and_one_nobody_answers_closes() {
    let a = aido("mode = \"confirm\"\n[limits]\nconfirm_timeout_ms = 1500\n").await;
    let running = {
        let session = a.session.clone();
        tokio::spawn(async move { session.run(write("no.txt"), Hooks::default()).await })
    };
    let q = a.waiting().await;
    let cli = Answerer::new(Surface::Cli, Some("alice"));
    a.answer(&q.id, Some(json!({"approve": false})), cli.clone())
        .await
        .unwrap();
    let refused = running.await.unwrap().unwrap_err();
    assert_eq!(refused.failure.code, "confirm_declined");
    assert!(!a.p("no.txt").exists());

    let started = std::time::Instant::now();
    let late = a.session.run(write("late.txt"), Hooks::default()).await;
    assert_eq!(late.unwrap_err().failure.code, "confirm_declined");
    assert!(started.elapsed() >= Duration::from_millis(1400));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(a.store().pending().unwrap().is_empty());
    let closed = a.store().get(&last_question(&a)).unwrap();
    let closed = closed.expect("the second question is stored");
    assert_eq!(closed.state, "closed");
    let watch = Answerer::new(Surface::Watch, Some("bob"));
    let too_late = a.answer(&closed.id, Some(json!({"approve": true})), watch);
    assert_eq!(too_late.await.unwrap_err(), "question_closed");
    assert!(!a.p("late.txt").exists());
    assert_eq!(a.completed(), 0);
    assert_eq!(
        a.confirmations(),
        vec![
            (false, "declined".to_owned(), Some(cli)),
            (false, "timeout".to_owned(), None)
        ]
    );
}

/// The id of the question the last confirmation stored, as its `confirm_answered` record
/// names it.
fn last_question(a: &Aido) -> String {
    a.events()
        .into_iter()
        .rev()
        .find_map(|e| match e {
            Event::ConfirmAnswered { question, .. } => question,
            _ => None,
        })
        .expect("a confirmation")
}

/// An ask primitive's question is on every surface too: answered from `aido watch` while the
/// form is open, the call returns that answer, the record names who gave it, and the form's
/// late answer is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_answered_from_the_store_wins_over_a_pending_form() {
    let a = aido("").await;
    let (held, late) = Held::new();
    let hooks = Hooks {
        asker: Some(held.clone() as Arc<dyn Asker>),
        ..Hooks::default()
    };
    let running = {
        let session = a.session.clone();
        let ask = Action::from_tool_call("ask_human", json!({"question": "Which branch?"}));
        tokio::spawn(async move { session.run(ask.unwrap(), hooks).await })
    };
    held.asked.notified().await;
    let q = a.waiting().await;
    let watch = Answerer::new(Surface::Watch, Some("bob"));
    a.answer(&q.id, Some(json!({"answer": "main"})), watch.clone())
        .await
        .unwrap();
    let ran = running.await.unwrap().unwrap();
    assert_eq!(ran.outcome.output["answer"], "main");
    assert!(
        late.send(Elicited::Declined).is_err(),
        "the form is withdrawn"
    );
    let recorded = ran
        .outcome
        .inputs
        .iter()
        .find_map(|i| match i {
            aido_actions::Input::Answer { value, .. } => Some(value.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(recorded["by"], json!(watch));
    let again = a.answer(&q.id, None, Answerer::new(Surface::Cli, None));
    assert_eq!(again.await.unwrap_err(), "question_already_answered");
    played_back_all(&a, 1);
}
