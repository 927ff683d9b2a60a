//! One call's context: who an action runs for and what it may use. The live world (the
//! executor), every service (grants, questions, artifacts, scripts, subscriptions, logs) and
//! every body call take a [`Call`]; a service is a plain function of it.
//!
//! A call can start child actions (a script's host calls, a reaction to a file change) only
//! through [`Children`], which the session (in `aido-actors`) implements: the services, in
//! crates below the runtime, never name it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use aido_actions::verdict::Gate;
use aido_actions::{Action, Failure, Outcome};
use aido_journal::SessionId;
use aido_policy::SessionContext;
use serde::Serialize;

use crate::hooks::Hooks;
use crate::shared::Shared;

/// A finished action.
#[derive(Clone, Debug, Serialize)]
pub struct Ran {
    /// The seq of its proposal record.
    pub seq: u64,
    /// What it returned.
    pub outcome: Outcome,
}

/// An action that was refused or failed.
#[derive(Clone, Debug, Serialize)]
pub struct RunError {
    /// The seq of its proposal record, when it got that far.
    pub seq: Option<u64>,
    /// The code, message and details.
    pub failure: Failure,
    /// For refusals: the gate that refused.
    pub gate: Option<Gate>,
    /// For refusals of composites: the leaf.
    pub leaf: Option<String>,
}

impl RunError {
    pub fn plain(seq: Option<u64>, failure: Failure) -> Self {
        Self {
            seq,
            failure,
            gate: None,
            leaf: None,
        }
    }
}

/// A boxed future a [`Children`] method answers with.
pub type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a call starts child actions: each judged by the policy chain, proposed and journaled
/// with its parent's seq, and run like anything the agent does (the session implements it).
pub trait Children: Send + Sync {
    /// Run `action` as a child of proposal `parent`.
    fn run_child(
        &self,
        action: Action,
        hooks: Hooks,
        parent: u64,
    ) -> Boxed<'_, Result<Ran, RunError>>;
    /// Journal a call that never became an action (its arguments did not parse); its seq.
    fn reject<'a>(
        &'a self,
        tool: &'a str,
        code: &'a str,
        message: &'a str,
    ) -> Boxed<'a, Option<u64>>;
    /// A handle that outlives the call (a watch's reactions fire long after it answered).
    fn owned(&self) -> Arc<dyn Children>;
}

/// One call: the session and proposal it runs for, the session's context, what the surface
/// lends it, the runtime's shared state, and a way to start child actions.
pub struct Call<'a> {
    /// The runtime's shared state.
    pub shared: Arc<Shared>,
    /// The session.
    pub session: SessionId,
    /// The seq of the proposal being run.
    pub proposal: u64,
    /// The session's context (working directory, grant, admissions).
    pub ctx: &'a SessionContext,
    /// What the surface lends the call: asking a human, progress, cancellation.
    pub hooks: &'a Hooks,
    /// The session, for the child actions a script's host calls and a watch's reactions are
    /// (`None` where nothing can have children: a filesystem read run beside its proposal).
    pub children: Option<&'a dyn Children>,
}
