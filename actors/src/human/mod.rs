//! Asking a human: ask_human, confirm and ask_multiple_choice ask through the surface's form
//! (MCP elicitation) when the client can show one; otherwise the question is stored in
//! AIDO_HOME/questions.sqlite for `aido answer` (see [`store`]) and the call fails
//! `needs_human` with the question's id at once, or, when the agent named a `timeout_ms`, after
//! waiting that long for the answer; check_answer collects the answer later.
//!
//! What the person answered (or that nobody did) is recorded as the action's input
//! (`Input::Answer { from: "human" }`), and the result is `aido_walk::human::render` of it, so
//! playback reproduces it without asking anyone. Nothing here answers a question: only the
//! `aido answer` command writes answers, and it is not a tool.

/// The question store (SQLite, shared by every aido process of an AIDO_HOME).
pub mod store;

use std::path::Path;
use std::time::{Duration, Instant};

use aido_actions::{Failure, HumanAction, Input};
use aido_walk::Executed;
use aido_walk::human::{ANSWER_FROM, render, timeout_ms};
use serde_json::{Value, json};

use crate::error::RuntimeError;
use crate::hooks::{Asker, Elicited, Hooks};
use crate::shared::Shared;

pub use aido_walk::human::{HumanError, Kind, Question};
pub use store::{Questions, Stored, question_id};

pub use crate::shared::QUESTIONS_FILE;

/// How often a waiting call looks at the store for an answer.
const POLL_MS: u64 = 200;

/// How long past the question's timeout the runtime waits for a surface that promised to
/// withdraw it then.
const SURFACE_GRACE_MS: u64 = 2_000;

/// Run a human primitive for `session`'s action at `proposal`.
pub(crate) async fn run(
    shared: &Shared,
    hooks: &Hooks,
    session: String,
    proposal: u64,
    action: HumanAction,
) -> Result<Executed, Failure> {
    let max_ms = shared.config_limits().confirm_timeout_ms;
    let (question, answer) = match Question::of(&action) {
        Some(checked) => {
            let (question, asked) = checked?;
            let timeout = timeout_ms(asked, max_ms)?;
            let elicited = match hooks.asker.as_ref().filter(|a| a.can_ask()) {
                Some(asker) => elicit(asker.as_ref(), hooks, &question, timeout).await?,
                None => None,
            };
            let answer = match elicited {
                Some(answer) => answer,
                None => {
                    let now_ms = shared.clock.now_ms();
                    let id = question_id(&session, proposal, &question);
                    let (q, i) = (question.clone(), id.clone());
                    store(&shared.questions, move |s| {
                        s.ask(&i, &session, proposal, &q, now_ms)
                    })
                    .await?;
                    tracing::warn!(%id, "a question waits for a person: `aido answer --list`");
                    // Waiting here only helps when the agent chose to: until the call returns,
                    // it cannot tell its person the id to answer.
                    let wait_ms = if asked.is_some() { timeout } else { 0 };
                    wait(&shared.questions, hooks, &id, wait_ms)
                        .await?
                        .recorded()
                }
            };
            (question, answer)
        }
        None => {
            let HumanAction::CheckAnswer(check) = action else {
                return Err(RuntimeError::Internal {
                    why: "a human action without a question".into(),
                }
                .into());
            };
            let wait_ms = timeout_ms(Some(check.wait_ms.unwrap_or(0)), max_ms)?;
            let stored = wait(&shared.questions, hooks, &check.id, wait_ms).await?;
            (stored.question.clone(), stored.recorded())
        }
    };
    let outcome = render(&question, &answer)?;
    let mut done = Executed::new(outcome);
    done.outcome.inputs.push(Input::Answer {
        from: ANSWER_FROM.into(),
        value: answer,
    });
    Ok(done)
}

/// Ask through the surface's form. `None`: the surface could not ask after all, and the
/// question goes to the store.
async fn elicit(
    asker: &dyn Asker,
    hooks: &Hooks,
    question: &Question,
    timeout: u64,
) -> Result<Option<Value>, Failure> {
    let (message, schema) = question.form();
    let wait = Duration::from_millis(timeout);
    let asked = tokio::time::timeout(
        wait + Duration::from_millis(SURFACE_GRACE_MS),
        asker.ask(message, schema, wait),
    );
    let elicited = tokio::select! {
        e = asked => e.unwrap_or(Elicited::TimedOut),
        () = hooks.cancel.cancelled() => return Err(RuntimeError::Cancelled.into()),
    };
    let via = "elicitation";
    Ok(Some(match elicited {
        Elicited::Accepted(content) => {
            json!({"via": via, "action": "accept", "answer": question.accept(&content)?})
        }
        Elicited::Declined => json!({"via": via, "action": "decline"}),
        Elicited::Cancelled => json!({"via": via, "action": "cancel"}),
        Elicited::TimedOut => json!({"via": via, "action": "timeout", "timeout_ms": timeout}),
        Elicited::Unavailable => return Ok(None),
    }))
}

/// Wait up to `wait_ms` for the stored question `id` to be answered; what it is then (still
/// `pending` when nobody answered).
async fn wait(path: &Path, hooks: &Hooks, id: &str, wait_ms: u64) -> Result<Stored, Failure> {
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    loop {
        let i = id.to_owned();
        let stored = store(path, move |s| s.get(&i))
            .await?
            .ok_or_else(|| Failure::from(HumanError::QuestionNotFound { id: id.to_owned() }))?;
        let left = deadline.saturating_duration_since(Instant::now());
        if stored.state != "pending" || left.is_zero() {
            return Ok(stored);
        }
        tokio::select! {
            () = tokio::time::sleep(left.min(Duration::from_millis(POLL_MS))) => {}
            () = hooks.cancel.cancelled() => return Err(RuntimeError::Cancelled.into()),
        }
    }
}

/// A person answers the stored question `id`, out of band: `Some(content)` is the form's
/// content (`{"answer"}`, `{"approve"}`, `{"choice"}` or `{"choices"}`, checked as an
/// elicitation's would be), `None` declines it. The one path both `aido answer` and Mission
/// Control's answer take; no tool calls it. Blocking (SQLite).
pub fn answer_stored(
    path: &Path,
    id: &str,
    content: Option<&Value>,
    now_ms: u64,
) -> Result<Stored, HumanError> {
    let store = Questions::open(path)?;
    let stored = store
        .get(id)?
        .ok_or_else(|| HumanError::QuestionNotFound { id: id.to_owned() })?;
    let answer = match content {
        Some(content) => Some(stored.question.accept(content)?),
        None => None,
    };
    store.answer(id, answer.as_ref(), now_ms)
}

/// Run `f` on the store, opened on the blocking pool (SQLite blocks).
async fn store<T: Send + 'static>(
    path: &Path,
    f: impl FnOnce(&Questions) -> Result<T, HumanError> + Send + 'static,
) -> Result<T, Failure> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || Questions::open(&path).and_then(|s| f(&s)))
        .await
        .map_err(|e| Failure::from(HumanError::StoreFailed { why: e.to_string() }))?
        .map_err(Failure::from)
}
