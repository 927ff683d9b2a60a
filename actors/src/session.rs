use std::sync::Arc;
use std::time::Duration;

use aido_actions::{Action, Body, Failure, Input, SideEffectClass, Verdict};
use aido_journal::{Appended, Event, Queued, SessionId};
use aido_policy::{Admissions, FsResolver, SessionContext};
use ractor::rpc::CallResult;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::call::{Call, Children};
use crate::error::RuntimeError;
use crate::executor::Live;
use crate::hooks::{ConfirmAnswer, Hooks};
use crate::observe::{ActionReport, CommitReport, Judged};
use crate::shared::Shared;

pub use crate::call::{Ran, RunError};

/// What a confirmation came to: the answer, the stored question's id, and who answered.
type Confirmation = (
    ConfirmAnswer,
    Option<String>,
    Option<aido_actions::human::Answerer>,
);

/// Ask a person whether the action at `proposal` may run: one stored question every surface
/// sees (Mission Control, `aido watch`, `aido answer`), raced against the client's form.
#[cfg(feature = "prim-human")]
async fn confirm(
    shared: &Shared,
    hooks: &Hooks,
    session: &str,
    proposal: u64,
    prompt: String,
) -> Result<Confirmation, Failure> {
    let c = crate::human::confirm(shared, hooks, session, proposal, prompt).await?;
    Ok((c.answer, Some(c.question), c.by))
}

/// Ask through the client's form alone: a build without questions has no store for the other
/// surfaces to answer.
#[cfg(not(feature = "prim-human"))]
async fn confirm(
    shared: &Shared,
    hooks: &Hooks,
    _session: &str,
    _proposal: u64,
    prompt: String,
) -> Result<Confirmation, Failure> {
    let Some(confirmer) = &hooks.confirmer else {
        return Ok((ConfirmAnswer::Unavailable, None, None));
    };
    let wait = Duration::from_millis(shared.config_limits().confirm_timeout_ms);
    let answer = tokio::time::timeout(wait, confirmer.confirm(prompt))
        .await
        .unwrap_or(ConfirmAnswer::TimedOut);
    let by = matches!(
        answer,
        ConfirmAnswer::Approved | ConfirmAnswer::Declined | ConfirmAnswer::Cancelled
    )
    .then(|| aido_actions::human::Answerer::new(aido_actions::human::Surface::Elicitation, None));
    Ok((answer, None, by))
}

/// A session starts the child actions of its calls (a script's host calls, a watch's
/// reactions) as its own actions, each with its parent's seq.
impl Children for Session {
    fn run_child(
        &self,
        action: Action,
        hooks: Hooks,
        parent: u64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Ran, RunError>> + Send + '_>>
    {
        Box::pin(self.run_under(action, hooks, Some(parent)))
    }

    fn reject<'a>(
        &'a self,
        tool: &'a str,
        code: &'a str,
        message: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<u64>> + Send + 'a>> {
        Box::pin(Session::reject(self, tool, code, message))
    }

    fn owned(&self) -> Arc<dyn Children> {
        Arc::new(self.clone())
    }
}

/// One agent's session. Cheap to clone.
#[derive(Clone)]
pub struct Session {
    id: SessionId,
    actor: ActorRef<SessionMsg>,
    pub(crate) shared: Arc<Shared>,
    ctx: SessionContext,
    /// Where relative paths start now ([`Session::set_workdir`] moves it).
    workdir: Arc<std::sync::RwLock<std::path::PathBuf>>,
}

/// How long a proposal may wait for the session actor (judging and one journal write).
const PROPOSE_TIMEOUT_MS: u64 = 30_000;

impl Session {
    pub(crate) fn new(
        id: SessionId,
        actor: ActorRef<SessionMsg>,
        shared: Arc<Shared>,
        ctx: SessionContext,
    ) -> Self {
        Self {
            id,
            actor,
            shared,
            workdir: Arc::new(std::sync::RwLock::new(ctx.cwd.clone())),
            ctx,
        }
    }

    /// The session's id.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// The id of the capability grant this session runs under, if any.
    pub fn grant_id(&self) -> Option<&str> {
        self.ctx.grant_id.as_deref()
    }

    /// The capability grant's scope this session runs under, if any.
    pub fn capabilities(&self) -> Option<&aido_policy::grant::GrantScope> {
        self.ctx.capabilities.as_deref()
    }

    /// Where its relative paths start.
    pub fn cwd(&self) -> std::path::PathBuf {
        match self.workdir.read() {
            Ok(cwd) => cwd.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The context an action runs in: the session's, at its working directory now, with the
    /// paths the chain admitted.
    fn context(&self, admitted: Admissions) -> SessionContext {
        let mut ctx = self.ctx.with_admitted(admitted);
        ctx.cwd = self.cwd();
        ctx
    }

    /// Make `dir` the directory relative paths and commands start in for the rest of the
    /// session (the client's first MCP root), journaled as `workdir_changed` so what-if judges
    /// the later actions from it. Only a directory inside a write root is taken, as for the
    /// directory aido was started in: `None` says it was not (nothing changed).
    pub async fn set_workdir(
        &self,
        dir: &std::path::Path,
        source: &str,
    ) -> Result<Option<std::path::PathBuf>, Failure> {
        let Ok(dir) = dir.canonicalize() else {
            return Ok(None);
        };
        // The policy's write roots are real paths already.
        let inside = dir.is_dir()
            && self
                .shared
                .policy
                .write_roots()
                .iter()
                .any(|root| dir.starts_with(root));
        if !inside {
            return Ok(None);
        }
        if dir == self.cwd() {
            return Ok(Some(dir));
        }
        self.journal(
            Event::WorkdirChanged {
                cwd: dir.display().to_string(),
                source: source.to_owned(),
            },
            Vec::new(),
        )
        .await?;
        // The actor judges later proposals from it; this handle runs them from it.
        let _ = self.actor.cast(SessionMsg::Workdir(dir.clone()));
        match self.workdir.write() {
            Ok(mut cwd) => *cwd = dir.clone(),
            Err(poisoned) => *poisoned.into_inner() = dir.clone(),
        }
        Ok(Some(dir))
    }

    /// Run one action through the whole path: judge and journal the proposal, ask a human if
    /// needed, execute, journal the outcome.
    ///
    /// # Cancel safety
    /// The work runs in its own task: dropping this future does not stop it half-way, and
    /// its records are still written. Use `hooks.cancel` to stop it between steps.
    pub async fn run(&self, action: Action, hooks: Hooks) -> Result<Ran, RunError> {
        self.run_under(action, hooks, None).await
    }

    /// [`Self::run`] for a child action: a host call of the script whose proposal is at
    /// `parent`. It takes the same path as a call from the agent (judged, journaled, run,
    /// its outcome journaled), and its proposal names the parent.
    pub(crate) async fn run_under(
        &self,
        action: Action,
        hooks: Hooks,
        parent: Option<u64>,
    ) -> Result<Ran, RunError> {
        let this = self.clone();
        match tokio::spawn(async move { this.run_observed(action, hooks, parent).await }).await {
            Ok(result) => result,
            Err(e) => Err(RunError::plain(
                None,
                RuntimeError::Internal { why: e.to_string() }.into(),
            )),
        }
    }

    /// Run, and tell the runtime's observer (if any) how it went: the one place every
    /// action of every surface passes.
    async fn run_observed(
        &self,
        action: Action,
        hooks: Hooks,
        parent: Option<u64>,
    ) -> Result<Ran, RunError> {
        let mut seen = Seen::default();
        let Some(observer) = self.shared.observer.get().cloned() else {
            return self.run_inner(action, hooks, parent, &mut seen).await;
        };
        // A downstream call is judged, and reported, by its tool's class.
        let (primitive, class) = (action.primitive(), self.shared.policy.class_of(&action));
        let downstream = match &action {
            Action::DownstreamCall(call) => Some((call.server().to_owned(), call.tool.clone())),
            _ => None,
        };
        let (trace_parent, transport) = (hooks.trace_parent.clone(), hooks.transport);
        let started_unix_ms = self.shared.clock.now_ms();
        let started = std::time::Instant::now();
        let result = self.run_inner(action, hooks, parent, &mut seen).await;
        let duration_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let (seq, error) = match &result {
            Ok(ran) => (Some(ran.seq), None),
            Err(e) => (e.seq, Some(e.failure.code.clone())),
        };
        observer.action(ActionReport {
            session: self.id,
            primitive,
            class,
            judged: seen.judged,
            seq,
            hash: seen.hash,
            error,
            started_unix_ms,
            duration_us,
            trace_parent,
            transport,
            downstream,
        });
        result
    }

    async fn run_inner(
        &self,
        action: Action,
        hooks: Hooks,
        parent: Option<u64>,
        seen: &mut Seen,
    ) -> Result<Ran, RunError> {
        let (proposal, verdict, admitted) = self.propose(&action, parent).await?;
        // From here on the session counts this action in flight until the guard drops.
        let _slot = Release(self.actor.clone());
        seen.judged = match &verdict {
            Verdict::Allow => Judged::Allowed,
            Verdict::Deny { gate, .. } => Judged::Denied(*gate),
            Verdict::Confirm { .. } => Judged::Confirmed { approved: false },
        };
        let seq = match proposal {
            Proposal::Sequenced(seq) => seq,
            Proposal::Durable(written) => {
                let seq = written.seq;
                if let Err(e) = written.durable().await {
                    return Err(RunError::plain(None, Failure::from(e)));
                }
                seq
            }
            Proposal::Queued(queued) => {
                return self.read_leaf(action, queued, hooks, admitted, seen).await;
            }
        };
        let mut inputs = Vec::new();
        match verdict {
            Verdict::Allow => {}
            Verdict::Deny {
                gate,
                code,
                reason,
                leaf,
            } => {
                let failure = Failure::new(code.code(), reason)
                    .with_details(serde_json::json!({"gate": gate, "leaf": leaf}));
                return Err(RunError {
                    seq: Some(seq),
                    failure,
                    gate: Some(gate),
                    leaf,
                });
            }
            Verdict::Confirm { gate, reason, leaf } => {
                let asked = Asked {
                    seq,
                    gate,
                    reason,
                    leaf,
                };
                inputs.push(self.ask_to_run(&action, &hooks, asked, seen).await?);
            }
        }
        self.execute(action, hooks, seq, admitted, inputs, seen)
            .await
    }

    /// Ask the session actor to judge `action` and journal its proposal.
    async fn propose(
        &self,
        action: &Action,
        parent: Option<u64>,
    ) -> Result<(Proposal, Verdict, Admissions), RunError> {
        let proposed = self
            .actor
            .call(
                |reply| SessionMsg::Propose {
                    action: Box::new(action.clone()),
                    parent,
                    reply,
                },
                Some(Duration::from_millis(PROPOSE_TIMEOUT_MS)),
            )
            .await;
        match proposed {
            Ok(CallResult::Success(Ok(p))) => Ok(p),
            Ok(CallResult::Success(Err(f))) => Err(RunError::plain(None, f)),
            Ok(CallResult::Timeout) => Err(RunError::plain(None, RuntimeError::SessionBusy.into())),
            Ok(CallResult::SenderError) | Err(_) => {
                Err(RunError::plain(None, RuntimeError::SessionClosed.into()))
            }
        }
    }

    /// A `confirm` verdict: ask a person, journal the answer, and either go on (the answer is
    /// the action's first input) or journal the refusal as the action's outcome.
    async fn ask_to_run(
        &self,
        action: &Action,
        hooks: &Hooks,
        asked: Asked,
        seen: &mut Seen,
    ) -> Result<Input, RunError> {
        let Asked {
            seq,
            gate,
            reason,
            leaf,
        } = asked;
        let prompt = format!(
            "aido asks before running {}: {reason}.\n{}",
            action.primitive(),
            serde_json::to_string_pretty(action).unwrap_or_default()
        );
        let confirmed = confirm(&self.shared, hooks, &self.id.to_string(), seq, prompt).await;
        let (answer, question, by, broke) = match confirmed {
            Ok((answer, question, by)) => (answer, question, by, None),
            Err(failure) => {
                let answer = if failure.code == RuntimeError::Cancelled.code() {
                    ConfirmAnswer::Cancelled
                } else {
                    ConfirmAnswer::Unavailable
                };
                (answer, None, None, Some(failure))
            }
        };
        let approved = answer == ConfirmAnswer::Approved;
        let event = Event::ConfirmAnswered {
            proposal: seq,
            approved,
            answer: answer.name().into(),
            question,
            by,
        };
        self.journal(event, Vec::new())
            .await
            .map_err(|f| RunError::plain(Some(seq), f))?;
        if approved {
            seen.judged = Judged::Confirmed { approved };
            return Ok(Input::HumanAnswer { approved });
        }
        let failure = match (broke, answer) {
            // The question could not be put (the store failed) or the agent cancelled: that
            // failure, as it is.
            (Some(failure), _) => failure,
            (None, ConfirmAnswer::Unavailable) => {
                RuntimeError::ConfirmUnavailable { reason }.into()
            }
            (None, _) => RuntimeError::ConfirmDeclined {
                reason,
                answer: answer.name(),
            }
            .into(),
        }
        .with_details(serde_json::json!({"gate": gate, "leaf": leaf}));
        let event = Event::ActionFailed {
            proposal: seq,
            failure: failure.clone(),
            effects: Vec::new(),
            inputs: Vec::new(),
            duration_ms: 0,
        };
        seen.hash = self
            .journal_outcome(event, Vec::new(), false)
            .await
            .map_err(|f| RunError::plain(Some(seq), f))?
            .hash
            .into();
        Err(RunError {
            seq: Some(seq),
            failure,
            gate: Some(gate),
            leaf,
        })
    }

    /// Run an admitted action through the live world and journal its outcome, completed or
    /// failed, with `inputs` (a person's answer) before what it recorded.
    async fn execute(
        &self,
        action: Action,
        hooks: Hooks,
        seq: u64,
        admitted: Admissions,
        mut inputs: Vec<Input>,
        seen: &mut Seen,
    ) -> Result<Ran, RunError> {
        let shared = &self.shared;
        let started = shared.clock.now_ms();
        // The body uses the paths the chain resolved instead of resolving them again.
        let ctx = self.context(admitted);
        let mut executor = Live(Call {
            shared: shared.clone(),
            session: self.id,
            proposal: seq,
            ctx: &ctx,
            hooks: &hooks,
            children: Some(self),
        });
        let result = executor.exec(&action).await;
        // The outcome of an action that changed nothing is answered once it is written to the
        // journal's tail (it survives kill -9), unless every record is to be flushed.
        let written = written_only(shared, &action);
        let duration_ms = shared.clock.now_ms().saturating_sub(started);
        match result {
            Ok(mut done) => {
                inputs.append(&mut done.outcome.inputs);
                done.outcome.inputs = inputs;
                // A minted grant's token goes to the agent, never to the journal.
                let outcome = crate::grants::journaled(&action, &done.outcome)
                    .unwrap_or_else(|| done.outcome.clone());
                let event = Event::ActionCompleted {
                    proposal: seq,
                    outcome,
                    duration_ms,
                };
                seen.hash = self
                    .journal_outcome(event, done.blobs, written)
                    .await
                    .map_err(|f| RunError::plain(Some(seq), f))?
                    .hash
                    .into();
                crate::recovery::Recovery::clear(shared, self.id, seq);
                Ok(Ran {
                    seq,
                    outcome: done.outcome,
                })
            }
            Err(mut failed) => {
                inputs.append(&mut failed.partial.outcome.inputs);
                let event = Event::ActionFailed {
                    proposal: seq,
                    failure: failed.failure.clone(),
                    effects: failed.partial.outcome.effects,
                    inputs,
                    duration_ms,
                };
                seen.hash = self
                    .journal_outcome(event, failed.partial.blobs, written)
                    .await
                    .map_err(|f| RunError::plain(Some(seq), f))?
                    .hash
                    .into();
                crate::recovery::Recovery::clear(shared, self.id, seq);
                Err(RunError::plain(Some(seq), failed.failure))
            }
        }
    }

    /// Run a filesystem leaf that changes nothing while the writer writes its proposal: the
    /// body's read and the proposal's write overlap, and the outcome follows the proposal in
    /// the journal (records are written in the order they are queued). Nothing is answered
    /// before both records are written to the journal's tail.
    async fn read_leaf(
        &self,
        action: Action,
        queued: Queued,
        hooks: Hooks,
        admitted: Admissions,
        seen: &mut Seen,
    ) -> Result<Ran, RunError> {
        let shared = &self.shared;
        let started = shared.clock.now_ms();
        // The leaf goes through the one walk like every action (a read leaf is one step of
        // it), so playback finds what it recorded where it looks for it.
        let ctx = self.context(admitted);
        let read = async {
            let mut executor = Live(Call {
                shared: shared.clone(),
                session: self.id,
                proposal: 0,
                ctx: &ctx,
                hooks: &hooks,
                children: None,
            });
            executor.exec(&action).await
        };
        let (sequenced, result) = tokio::join!(queued.sequenced(), read);
        let seq = sequenced
            .map_err(|e| RunError::plain(None, Failure::from(e)))?
            .seq;
        let duration_ms = shared.clock.now_ms().saturating_sub(started);
        match result {
            Ok(done) => {
                let event = Event::ActionCompleted {
                    proposal: seq,
                    outcome: done.outcome.clone(),
                    duration_ms,
                };
                seen.hash = self
                    .journal_outcome(event, done.blobs, true)
                    .await
                    .map_err(|f| RunError::plain(Some(seq), f))?
                    .hash
                    .into();
                Ok(Ran {
                    seq,
                    outcome: done.outcome,
                })
            }
            Err(failed) => {
                let event = Event::ActionFailed {
                    proposal: seq,
                    failure: failed.failure.clone(),
                    effects: failed.partial.outcome.effects,
                    inputs: failed.partial.outcome.inputs,
                    duration_ms,
                };
                seen.hash = self
                    .journal_outcome(event, failed.partial.blobs, true)
                    .await
                    .map_err(|f| RunError::plain(Some(seq), f))?
                    .hash
                    .into();
                Err(RunError::plain(Some(seq), failed.failure))
            }
        }
    }

    /// Journal a record of this session, durable (flushed) before this returns.
    async fn journal(&self, event: Event, blobs: Vec<(String, Vec<u8>)>) -> Result<u64, Failure> {
        self.journal_outcome(event, blobs, false)
            .await
            .map(|a| a.seq)
    }

    /// Journal a record: durable (flushed), or with `written` (the outcome of an action that
    /// changed nothing) once it is in the journal's tail.
    async fn journal_outcome(
        &self,
        event: Event,
        blobs: Vec<(String, Vec<u8>)>,
        written: bool,
    ) -> Result<Appended, Failure> {
        let (journal, now) = (&self.shared.journal, self.shared.clock.now_ms());
        let started = std::time::Instant::now();
        let appended = if written {
            journal.append_written(self.id, now, event, blobs).await
        } else {
            journal.append_with_blobs(self.id, now, event, blobs).await
        };
        if let Some(observer) = self.shared.observer.get() {
            observer.commit(CommitReport {
                duration_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                durable: !written,
            });
        }
        appended.map_err(Failure::from)
    }

    /// Journal a tool call that could not be parsed into an action.
    pub async fn reject(&self, tool: &str, code: &str, message: &str) -> Option<u64> {
        let event = Event::CallRejected {
            tool: tool.to_owned(),
            code: code.to_owned(),
            message: message.to_owned(),
        };
        match self.journal(event, Vec::new()).await {
            Ok(seq) => Some(seq),
            Err(f) => {
                tracing::error!(code = %f.code, "cannot journal a rejected call");
                None
            }
        }
    }

    /// End the session: its subscriptions end, then journal why and stop its actor.
    pub async fn close(&self, reason: &str) {
        #[cfg(feature = "prim-process")]
        self.shared.events.end_session(self.id).await;
        let _ = self
            .journal(
                Event::SessionEnded {
                    reason: reason.to_owned(),
                },
                Vec::new(),
            )
            .await;
        self.actor.stop(Some(reason.to_owned()));
        #[cfg(feature = "prim-process")]
        self.shared.tmps.end(&self.id.to_string());
        // Its browser closes and its profile goes (a body that is down has none open).
        #[cfg(feature = "prim-browser")]
        let _ = self
            .shared
            .bodies
            .browser
            .cast(crate::browser::BrowserMsg::End {
                session: self.id.to_string(),
            });
    }

    /// Stop this handle's actor without ending the session: for a person who resumed a
    /// session another surface still holds (a rewind asked of `aido serve`), whose own handle,
    /// subscriptions and temporary files go on. Journals nothing.
    pub fn leave(&self, reason: &str) {
        self.actor.stop(Some(reason.to_owned()));
    }
}

/// Whether the records of `action` are acknowledged once written to the journal's tail rather
/// than flushed: it changes nothing (no leaf can change the world) and the config allows it.
fn written_only(shared: &Shared, action: &Action) -> bool {
    shared.policy.config().journal.sync == aido_policy::config::Sync::Mutations
        && action
            .leaves()
            .iter()
            .all(|(_, leaf)| !leaf.class().mutates())
}

/// A `confirm` verdict on a proposal: what to ask a person about.
struct Asked {
    seq: u64,
    gate: aido_actions::verdict::Gate,
    reason: String,
    leaf: Option<String>,
}

/// What a run learnt on the way, for its [`ActionReport`].
struct Seen {
    judged: Judged,
    hash: Option<String>,
}

impl Default for Seen {
    fn default() -> Self {
        Self {
            judged: Judged::Unjudged,
            hash: None,
        }
    }
}

/// Sends Release when dropped, so every exit path frees the admission slot.
struct Release(ActorRef<SessionMsg>);

impl Drop for Release {
    fn drop(&mut self) {
        let _ = self.0.cast(SessionMsg::Release);
    }
}

/// The session actor: it admits actions (bounded in-flight count), judges them and journals
/// their proposals, one at a time, so a session's proposals are ordered.
pub(crate) struct SessionActor;

pub(crate) struct SessionArgs {
    pub(crate) shared: Arc<Shared>,
    pub(crate) id: SessionId,
    pub(crate) ctx: SessionContext,
}

pub(crate) struct SessionState {
    args: SessionArgs,
    in_flight: u32,
}

/// A proposal the session actor journaled (or queued).
pub(crate) enum Proposal {
    /// Written, with its seq: an allowed action that changes nothing, whose outcome's durable
    /// acknowledgement covers its proposal.
    Sequenced(u64),
    /// Written, with its seq, and being flushed: the caller waits for it to be durable before
    /// the action runs (write ahead), outside the session actor, so the session's next
    /// proposal is judged and written meanwhile and joins the same group commit.
    Durable(aido_journal::Sequenced),
    /// Queued to the writer: an allowed filesystem leaf that changes nothing, which may run
    /// while the writer writes its proposal.
    Queued(Queued),
}

pub(crate) enum SessionMsg {
    Propose {
        action: Box<Action>,
        /// A script's host call: the seq of the script call's proposal.
        parent: Option<u64>,
        reply: RpcReplyPort<Result<(Proposal, Verdict, Admissions), Failure>>,
    },
    Release,
    /// Relative paths start here from now on.
    Workdir(std::path::PathBuf),
}

impl Actor for SessionActor {
    type Msg = SessionMsg;
    type State = SessionState;
    type Arguments = SessionArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<SessionMsg>,
        args: SessionArgs,
    ) -> Result<SessionState, ActorProcessingErr> {
        Ok(SessionState { args, in_flight: 0 })
    }

    async fn handle(
        &self,
        _myself: ActorRef<SessionMsg>,
        msg: SessionMsg,
        state: &mut SessionState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SessionMsg::Propose {
                action,
                parent,
                reply,
            } => {
                let shared = &state.args.shared;
                let max = shared.config_limits().in_flight_actions_max;
                if state.in_flight >= max {
                    let _ = reply.send(Err(RuntimeError::TooManyInFlight { max }.into()));
                    return Ok(());
                }
                // An admitted action must be able to finish its story in the journal: its
                // proposal plus up to two more records (an answer and an outcome), for it and
                // for every action already in flight. Refuse it whole rather than run it and
                // lose its outcome.
                let records_max = shared.journal.limits().records_per_session_max;
                let head = shared
                    .journal
                    .written_head(state.args.id)
                    .unwrap_or(u64::MAX);
                let needed = 1 + 2 * (u64::from(state.in_flight) + 1);
                if head.saturating_add(needed) > records_max {
                    let _ = reply.send(Err(RuntimeError::SessionFull {
                        head,
                        max: records_max,
                    }
                    .into()));
                    return Ok(());
                }
                // Under a grant, each action spends one use first; a refused use refuses it.
                let spent = crate::grants::spend(shared, &state.args.ctx).await;
                let ctx = spent.as_ref().unwrap_or(&state.args.ctx);
                let (verdict, admitted) =
                    shared.policy.evaluate_admitting(&action, ctx, &FsResolver);
                // Write ahead: an action that can change the world runs only after its
                // proposal is durable. One that cannot (every leaf read-only or meta) starts as
                // soon as its proposal has a seq; its outcome record's durable acknowledgement
                // then covers the proposal too (records are written in order), so a read costs
                // one flush instead of two.
                let read_only = verdict.is_allow() && written_only(shared, &action);
                // A filesystem leaf that changes nothing does not wait for its proposal at
                // all: it is queued, and the body reads while the writer writes it.
                let queued = read_only
                    && action.body() == Body::Filesystem
                    && action.class() != SideEffectClass::Composite;
                let event = Event::ActionProposed {
                    action: crate::redact::journaled(*action),
                    verdict: verdict.clone(),
                    parent,
                };
                let (id, now) = (state.args.id, shared.clock.now_ms());
                let journal = &shared.journal;
                let appended = if queued {
                    journal
                        .append_queued(id, now, event)
                        .await
                        .map(Proposal::Queued)
                } else {
                    journal.append_sequenced(id, now, event).await.map(|s| {
                        if read_only {
                            Proposal::Sequenced(s.seq)
                        } else {
                            Proposal::Durable(s)
                        }
                    })
                };
                let answer = match appended {
                    Ok(proposal) => {
                        state.in_flight += 1;
                        Ok((proposal, verdict, admitted))
                    }
                    Err(e) => Err(Failure::from(e)),
                };
                if let Err(ractor::MessagingErr::SendErr(Ok((proposal, _, _)))) = reply.send(answer)
                {
                    // The caller stopped waiting (PROPOSE_TIMEOUT_MS) after the proposal was
                    // appended: it never runs, its slot is free again, and its outcome says so,
                    // so no proposal is left without one.
                    state.in_flight = state.in_flight.saturating_sub(1);
                    let seq = match proposal {
                        Proposal::Sequenced(seq) => Ok(seq),
                        Proposal::Durable(written) => Ok(written.seq),
                        Proposal::Queued(queued) => queued.sequenced().await.map(|s| s.seq),
                    };
                    let outcome = match seq {
                        Ok(seq) => {
                            let event = Event::ActionFailed {
                                proposal: seq,
                                failure: RuntimeError::SessionBusy.into(),
                                effects: Vec::new(),
                                inputs: Vec::new(),
                                duration_ms: 0,
                            };
                            journal
                                .append(id, shared.clock.now_ms(), event)
                                .await
                                .map(|_| seq)
                        }
                        Err(e) => Err(e),
                    };
                    if let Err(e) = outcome {
                        tracing::error!(
                            code = e.code(),
                            "cannot journal the outcome of an abandoned proposal"
                        );
                    }
                }
            }
            SessionMsg::Release => state.in_flight = state.in_flight.saturating_sub(1),
            SessionMsg::Workdir(cwd) => state.args.ctx.cwd = cwd,
        }
        Ok(())
    }
}
