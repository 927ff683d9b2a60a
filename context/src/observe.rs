//! What the runtime tells an observer (telemetry) about each action and journal write.
//!
//! The one place every action passes is [`crate::Session::run`]: when an action is over
//! (answered, refused or failed) it hands one [`ActionReport`] to the runtime's observer, and
//! every journal write of a session hands a [`CommitReport`]. Both are plain data built from
//! what the run already knew, so a runtime without an observer pays one `OnceLock` read.
//!
//! An observer is called on the action's task, after its outcome is journaled and before the
//! caller is answered: it must not block (aido-telemetry queues the report on a bounded
//! channel and counts what it drops).

use aido_actions::SideEffectClass;
use aido_actions::verdict::Gate;
use aido_journal::SessionId;

/// How the policy judged an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judged {
    /// It ran without asking.
    Allowed,
    /// A gate refused it.
    Denied(Gate),
    /// A human was asked; `approved` is the answer.
    Confirmed { approved: bool },
    /// It never got a verdict (the session was busy or closed, or the proposal failed).
    Unjudged,
}

impl Judged {
    /// The low-cardinality name used as a metric label: `allow`, `deny`, `confirm_approved`,
    /// `confirm_refused`, `none`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Allowed => "allow",
            Self::Denied(_) => "deny",
            Self::Confirmed { approved: true } => "confirm_approved",
            Self::Confirmed { approved: false } => "confirm_refused",
            Self::Unjudged => "none",
        }
    }
}

/// One finished action.
#[derive(Clone, Debug)]
pub struct ActionReport {
    /// Its session.
    pub session: SessionId,
    /// The primitive (`read_file`, `pipeline`, ...).
    pub primitive: &'static str,
    /// Its side-effect class.
    pub class: SideEffectClass,
    /// The verdict.
    pub judged: Judged,
    /// The seq of its proposal record, when it got one.
    pub seq: Option<u64>,
    /// The hash of the record that closed it (its outcome, or the failure recorded after a
    /// declined confirmation); `None` for a refusal (its proposal record, written by the
    /// session actor, closes it) and for what never reached the journal.
    pub hash: Option<String>,
    /// The failure's code, for an action that was refused or failed.
    pub error: Option<String>,
    /// When it was asked for, in ms since the Unix epoch (the runtime's clock).
    pub started_unix_ms: u64,
    /// How long it took, from being asked for to being answered, in microseconds.
    pub duration_us: u64,
    /// The W3C `traceparent` the caller sent (MCP `_meta.traceparent`, or the HTTP header).
    pub trace_parent: Option<String>,
    /// The transport it came over (`pipe` for stdio, `tcp` for HTTP), when the surface says.
    pub transport: Option<&'static str>,
    /// For a downstream call: the downstream server and its namespaced tool.
    pub downstream: Option<(String, String)>,
}

/// One journal write of a session (a proposal, an outcome, a confirmation answer ...).
#[derive(Clone, Copy, Debug)]
pub struct CommitReport {
    /// How long the append took until it was acknowledged, in microseconds.
    pub duration_us: u64,
    /// Whether it waited for the flush (`false`: written to the journal's tail only).
    pub durable: bool,
}

/// Receives reports. Implementations must return at once (see the module docs).
pub trait Observer: Send + Sync {
    /// An action is over.
    fn action(&self, report: ActionReport);
    /// A session's record was appended.
    fn commit(&self, report: CommitReport);
}
