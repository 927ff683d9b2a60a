//! Asking a human: ask_human, confirm and ask_multiple_choice, and the policy's own
//! confirmations (mode `confirm`), put one question to every surface at once. The question is
//! stored in AIDO_HOME/questions.sqlite (see [`store`]), where Mission Control, `aido watch` and
//! `aido answer` see and answer it, and, when the client can show a form, it is asked there
//! too (MCP elicitation). Whichever answers first wins, exactly once: every answer, the
//! client's too, is the same conditional `UPDATE` of the stored question, and the call closes
//! the question when it stops waiting, so a late answer from anywhere is refused with a code
//! and a late elicitation's answer is ignored. Who answered (the surface and the person) is
//! kept with the answer and journaled.
//!
//! Without a form on the client, an ask primitive fails `needs_human` with the question's id at
//! once, or, when the agent named a `timeout_ms`, after waiting that long; check_answer
//! collects the answer later. A policy confirmation always waits, up to `[limits]
//! confirm_timeout_ms`.
//!
//! What the person answered (or that nobody did) is recorded as the action's input
//! (`Input::Answer { from: "human" }`), and the result is `aido_walk::human::render` of it, so
//! playback reproduces it without asking anyone. Nothing here answers a question for a
//! person: only a person's surfaces (`aido answer`, Mission Control, `aido watch`) and the
//! client's form write answers, and none of them is a tool.

/// The question store (SQLite, shared by every aido process of an AIDO_HOME).
pub mod store;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aido_actions::{Failure, HumanAction, Input};
use aido_walk::Executed;
use aido_walk::human::{ANSWER_FROM, render, timeout_ms};
use serde_json::{Value, json};

use aido_context::call::Call;
use aido_context::error::RuntimeError;
use aido_context::hooks::{Asker, ConfirmAnswer, Elicited, Hooks};
use aido_context::shared::Shared;

pub use aido_actions::human::{Answerer, Surface};
pub use aido_walk::human::{HumanError, Kind, Question};
pub use store::{Questions, Stored, question_id};

pub use aido_context::shared::QUESTIONS_FILE;

/// How often a waiting call looks at the store for an answer.
const POLL_MS: u64 = 200;

/// Run a human primitive for `session`'s action at `proposal`.
pub async fn run(call: &Call<'_>, action: HumanAction) -> Result<Executed, Failure> {
    let (shared, hooks) = (call.shared.as_ref(), call.hooks);
    let max_ms = shared.config_limits().confirm_timeout_ms;
    let (question, answer) = match Question::of(&action) {
        Some(checked) => {
            let (question, asked) = checked?;
            let timeout = timeout_ms(asked, max_ms)?;
            let id = put(shared, &call.session.to_string(), call.proposal, &question).await?;
            let elicitation = hooks
                .asker
                .clone()
                .filter(|a| a.can_ask())
                .map(|asker| elicit(asker, &question, timeout));
            let racing = elicitation.is_some();
            if !racing {
                tracing::warn!(%id, "a question waits for a person: `aido answer --list`");
            }
            // Without a form on the client, waiting only helps when the agent chose to: until
            // the call returns, it cannot tell its person the id to answer. With one, the call
            // waits for whichever surface answers first and then closes the question.
            let wait_ms = if racing || asked.is_some() {
                timeout
            } else {
                0
            };
            let settled = race(shared, hooks, &id, elicitation, wait_ms, racing).await?;
            (question, settled.recorded(timeout))
        }
        None => {
            let HumanAction::CheckAnswer(check) = action else {
                return Err(RuntimeError::Internal {
                    why: "a human action without a question".into(),
                }
                .into());
            };
            let wait_ms = timeout_ms(Some(check.wait_ms.unwrap_or(0)), max_ms)?;
            let stored = match race(shared, hooks, &check.id, None, wait_ms, false).await? {
                Settled::Answered(stored) | Settled::Unanswered(stored) => stored,
                Settled::Dismissed { stored, .. } => stored,
            };
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

/// Most characters of a policy confirmation's question (the action it would run, cut).
const CONFIRM_PROMPT_CHARS_MAX: usize = aido_walk::human::QUESTION_CHARS_MAX;

/// How a policy confirmation (a `confirm` verdict) ended.
pub struct Confirmed {
    /// What it came to.
    pub answer: ConfirmAnswer,
    /// The stored question every surface was shown.
    pub question: String,
    /// Who answered; `None` when nobody did.
    pub by: Option<Answerer>,
}

/// Ask a person whether the action at `session`'s `proposal` may run (the policy's mode is
/// `confirm`): one stored question that every surface sees (Mission Control, `aido watch`,
/// `aido answer`), raced against the client's elicitation when it can show one; the first
/// answer wins, the question is then closed, and the others are refused. Bounded by `[limits]
/// confirm_timeout_ms`.
pub async fn confirm(
    shared: &Shared,
    hooks: &Hooks,
    session: &str,
    proposal: u64,
    prompt: String,
) -> Result<Confirmed, Failure> {
    let prompt = if prompt.chars().count() > CONFIRM_PROMPT_CHARS_MAX {
        let cut: String = prompt.chars().take(CONFIRM_PROMPT_CHARS_MAX - 1).collect();
        format!("{cut}…")
    } else {
        prompt
    };
    let question = Question {
        kind: Kind::Confirm,
        question: prompt.clone(),
    };
    let id = put(shared, session, proposal, &question).await?;
    tracing::info!(%id, "a confirmation waits for a person: `aido answer --list`, `aido watch` or Mission Control");
    let elicitation = hooks.confirmer.clone().map(|confirmer| -> Elicitation {
        Box::pin(async move {
            Ok(match confirmer.confirm(prompt).await {
                ConfirmAnswer::Approved => Heard::Answer(Some(json!({"approved": true}))),
                ConfirmAnswer::Declined => Heard::Answer(None),
                ConfirmAnswer::Cancelled => Heard::Dismissed,
                ConfirmAnswer::TimedOut | ConfirmAnswer::Unavailable => Heard::Gone,
            })
        })
    });
    let wait_ms = shared.config_limits().confirm_timeout_ms;
    let (answer, by) = match race(shared, hooks, &id, elicitation, wait_ms, true).await? {
        Settled::Answered(stored) => {
            let approved = stored.state == "accept"
                && stored
                    .answer
                    .as_ref()
                    .is_some_and(|a| a["approved"] == Value::Bool(true));
            let answer = if approved {
                ConfirmAnswer::Approved
            } else {
                ConfirmAnswer::Declined
            };
            (answer, stored.by)
        }
        Settled::Dismissed { by, .. } => (ConfirmAnswer::Cancelled, by),
        Settled::Unanswered(_) => (ConfirmAnswer::TimedOut, None),
    };
    Ok(Confirmed {
        answer,
        question: id,
        by,
    })
}

/// Store `question` for every surface to see; its id.
async fn put(
    shared: &Shared,
    session: &str,
    proposal: u64,
    question: &Question,
) -> Result<String, Failure> {
    let now_ms = shared.clock.now_ms();
    let id = question_id(session, proposal, question);
    let (q, i, s) = (question.clone(), id.clone(), session.to_owned());
    store(&shared.questions, move |store| {
        store.ask(&i, &s, proposal, &q, now_ms)
    })
    .await?;
    Ok(id)
}

/// What the client's form came back with, as [`race`] takes it.
pub enum Heard {
    /// A checked answer (`Some`), or a decline (`None`).
    Answer(Option<Value>),
    /// The person dismissed the form.
    Dismissed,
    /// The surface gave up (it timed out, failed or went away): another may still answer.
    Gone,
}

/// The client's form, running: its answer, or why it cannot be taken (an answer that does
/// not fit the question).
pub type Elicitation = Pin<Box<dyn Future<Output = Result<Heard, Failure>> + Send>>;

/// How a [`race`] ended.
pub enum Settled {
    /// Accepted or declined, by whoever answered first (`stored.by`).
    Answered(Stored),
    /// The person dismissed the client's form; the question is closed.
    Dismissed {
        /// The question, closed.
        stored: Stored,
        /// The surface that dismissed it.
        by: Option<Answerer>,
    },
    /// Nobody answered in time: the question, closed when the race was to close it, else
    /// still pending.
    Unanswered(Stored),
}

impl Settled {
    /// The answer as the asking action records it (`Input::Answer { from: "human" }`); one
    /// the client's form gave is recorded as an elicitation's, as before the race.
    fn recorded(&self, timeout_ms: u64) -> Value {
        let via = "elicitation";
        match self {
            Settled::Answered(stored)
                if stored.by.as_ref().map(|b| b.surface) == Some(Surface::Elicitation) =>
            {
                let mut v = json!({"via": via, "action": stored.state, "by": stored.by});
                if let Some(answer) = &stored.answer {
                    v["answer"] = answer.clone();
                }
                v
            }
            Settled::Answered(stored) => stored.recorded(),
            Settled::Dismissed { by, .. } => json!({"via": via, "action": "cancel", "by": by}),
            Settled::Unanswered(stored) if stored.state == "closed" => {
                json!({"via": via, "action": "timeout", "timeout_ms": timeout_ms})
            }
            Settled::Unanswered(stored) => stored.recorded(),
        }
    }
}

/// Answers written by this process: a call waiting in the same process (Mission Control's
/// answer in `aido serve`) hears of one at once. An answer from another process (`aido
/// answer`, another runtime's Mission Control) is seen at the next look, [`POLL_MS`] later.
static ANSWERED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// The form of `question` on the client, asked through `asker` for at most `timeout` ms.
fn elicit(asker: Arc<dyn Asker>, question: &Question, timeout: u64) -> Elicitation {
    let (message, schema) = question.form();
    let question = question.clone();
    Box::pin(async move {
        let wait = Duration::from_millis(timeout);
        Ok(match asker.ask(message, schema, wait).await {
            Elicited::Accepted(content) => Heard::Answer(Some(question.accept(&content)?)),
            Elicited::Declined => Heard::Answer(None),
            Elicited::Cancelled => Heard::Dismissed,
            Elicited::TimedOut | Elicited::Unavailable => Heard::Gone,
        })
    })
}

/// Wait up to `wait_ms` for the stored question `id` to be answered, by the client's form
/// (`elicitation`, whose answer is claimed in the store like any other) or by any surface that
/// answers the store: the first answer wins, exactly once, since every answer and the close
/// are the same conditional `UPDATE`. At the deadline, or when the agent cancels, the question
/// is closed if `close` (a later answer is refused `question_closed`); else it stays pending
/// for `check_answer`.
///
/// No wakeup is lost: this process's answers are heard through [`ANSWERED`], armed before each
/// look at the store, other processes' at the next look; and an answer landing at the deadline
/// makes the close fail, so it is taken rather than lost.
///
/// # Cancel safety
/// Dropping the future leaves the question pending (and drops the elicitation, which its
/// surface then withdraws); callers await it to the end.
async fn race(
    shared: &Shared,
    hooks: &Hooks,
    id: &str,
    mut elicitation: Option<Elicitation>,
    wait_ms: u64,
    close: bool,
) -> Result<Settled, Failure> {
    let path = shared.questions.clone();
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    let elicited = Answerer::new(Surface::Elicitation, None);
    loop {
        let answered = ANSWERED.notified();
        tokio::pin!(answered);
        answered.as_mut().enable();
        let stored = look(&path, id).await?;
        if stored.state != "pending" {
            return Ok(settled(stored));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            if !close {
                return Ok(Settled::Unanswered(stored));
            }
            return shut(shared, id, None).await;
        }
        tokio::select! {
            heard = hear(&mut elicitation) => {
                elicitation = None;
                let now_ms = shared.clock.now_ms();
                match heard {
                    Ok(Heard::Gone) => {}
                    Ok(Heard::Answer(answer)) => {
                        let (i, by) = (id.to_owned(), elicited.clone());
                        let claimed = store(&path, move |s| match s.answer(&i, answer.as_ref(), now_ms, &by) {
                            Ok(stored) => Ok(Some(stored)),
                            // Another surface answered first: its answer is the one.
                            Err(HumanError::AlreadyAnswered { .. } | HumanError::QuestionClosed { .. }) => Ok(None),
                            Err(e) => Err(e),
                        })
                        .await?;
                        match claimed {
                            Some(stored) => {
                                ANSWERED.notify_waiters();
                                return Ok(Settled::Answered(stored));
                            }
                            None => return Ok(settled(look(&path, id).await?)),
                        }
                    }
                    Ok(Heard::Dismissed) => return shut(shared, id, Some(elicited)).await,
                    Err(failure) => {
                        // An answer that does not fit: nobody else may answer a call that
                        // has failed.
                        shut(shared, id, None).await?;
                        return Err(failure);
                    }
                }
            }
            () = tokio::time::sleep(left.min(Duration::from_millis(POLL_MS))) => {}
            () = &mut answered => {}
            () = hooks.cancel.cancelled() => {
                if close {
                    shut(shared, id, None).await?;
                }
                return Err(RuntimeError::Cancelled.into());
            }
        }
    }
}

/// The client's form's answer, or never when there is none (any more).
async fn hear(elicitation: &mut Option<Elicitation>) -> Result<Heard, Failure> {
    match elicitation {
        Some(running) => running.await,
        None => std::future::pending().await,
    }
}

/// What a question no longer pending came to.
fn settled(stored: Stored) -> Settled {
    match stored.state.as_str() {
        "closed" if stored.by.is_some() => Settled::Dismissed {
            by: stored.by.clone(),
            stored,
        },
        "closed" => Settled::Unanswered(stored),
        _ => Settled::Answered(stored),
    }
}

/// Close the question `id` (`by`: the surface that dismissed it); what it came to, which is
/// an answer when one landed first.
async fn shut(shared: &Shared, id: &str, by: Option<Answerer>) -> Result<Settled, Failure> {
    let now_ms = shared.clock.now_ms();
    let i = id.to_owned();
    let dismissed = by.clone();
    let first = store(&shared.questions, move |s| {
        s.close(&i, now_ms, dismissed.as_ref())
    })
    .await?;
    ANSWERED.notify_waiters();
    Ok(match first {
        Some(stored) => settled(stored),
        None => settled(look(&shared.questions, id).await?),
    })
}

/// The stored question `id`.
async fn look(path: &Path, id: &str) -> Result<Stored, Failure> {
    let i = id.to_owned();
    store(path, move |s| s.get(&i))
        .await?
        .ok_or_else(|| Failure::from(HumanError::QuestionNotFound { id: id.to_owned() }))
}

/// A person answers the stored question `id`, out of band, through `by` (the surface and the
/// person, journaled with the answer): `Some(content)` is the form's content (`{"answer"}`,
/// `{"approve"}`, `{"choice"}` or `{"choices"}`, checked as an elicitation's would be), `None`
/// declines it. The one path `aido answer`, Mission Control and `aido watch` take; no tool
/// calls it. The first answer wins: one given already (by any surface, the client's form
/// too) is refused `question_already_answered`, one to a question whose call stopped waiting
/// `question_closed`. Blocking (SQLite).
pub fn answer_stored(
    path: &Path,
    id: &str,
    content: Option<&Value>,
    now_ms: u64,
    by: &Answerer,
) -> Result<Stored, HumanError> {
    let store = Questions::open(path)?;
    let stored = store
        .get(id)?
        .ok_or_else(|| HumanError::QuestionNotFound { id: id.to_owned() })?;
    let answer = match content {
        Some(content) => Some(stored.question.accept(content)?),
        None => None,
    };
    let stored = store.answer(id, answer.as_ref(), now_ms, by)?;
    // A call waiting in this process takes it now rather than at its next look.
    ANSWERED.notify_waiters();
    Ok(stored)
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
