//! What a surface (the MCP server, the CLI) lends a call: ways to ask a human, a place for
//! progress, and the agent's cancellation.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// A human's answer to a confirmation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfirmAnswer {
    /// Run it.
    Approved,
    /// Do not.
    Declined,
    /// The human dismissed the question.
    Cancelled,
    /// No answer in time.
    TimedOut,
    /// The client cannot ask a human.
    Unavailable,
}

impl ConfirmAnswer {
    pub fn name(self) -> &'static str {
        match self {
            Self::Approved => "accepted",
            Self::Declined => "declined",
            Self::Cancelled => "cancelled",
            Self::TimedOut => "timeout",
            Self::Unavailable => "unavailable",
        }
    }
}

/// Asks a human to approve an action (MCP elicitation, in the MCP server).
pub trait Confirmer: Send + Sync {
    /// Ask; `prompt` says what would run and why the policy asks. The future is dropped
    /// when another surface answers first: the surface then withdraws its question.
    fn confirm(&self, prompt: String) -> Pin<Box<dyn Future<Output = ConfirmAnswer> + Send>>;
}

/// How a person answered a form the runtime asked a surface to show.
#[derive(Clone, Debug, PartialEq)]
pub enum Elicited {
    /// The person submitted the form with this content (an object of the form's fields).
    Accepted(serde_json::Value),
    /// The person declined.
    Declined,
    /// The person dismissed the form.
    Cancelled,
    /// No answer in time (the surface withdrew the question).
    TimedOut,
    /// The surface could not ask after all (the client failed or went away).
    Unavailable,
}

/// Asks a person a question through a form (MCP elicitation, form mode, in the MCP server):
/// ask_human, confirm and ask_multiple_choice.
pub trait Asker: Send + Sync {
    /// Whether this client can show a form at all (it declared form elicitation).
    fn can_ask(&self) -> bool;
    /// Show `message` with the form `schema` (a flat JSON object schema) and wait at most
    /// `timeout` for the answer.
    fn ask(
        &self,
        message: String,
        schema: serde_json::Value,
        timeout: std::time::Duration,
    ) -> Pin<Box<dyn Future<Output = Elicited> + Send>>;
}

/// Receives progress of long actions (MCP progress notifications, in the MCP server).
pub trait Progress: Send + Sync {
    /// `done` of `total` steps are finished.
    fn report(&self, done: u64, total: u64, message: String);
}

/// Tells the client a session's subscription saw file changes (MCP notifications, in the MCP
/// server). It must not block: it is called from the subscription's task.
pub trait Notifier: Send + Sync {
    /// Deliver `batch` (the subscription id, its changes, what was dropped) to the client.
    fn notify(&self, batch: serde_json::Value);
}

/// What a surface lends a call.
#[derive(Clone, Default)]
pub struct Hooks {
    /// How to ask a human to confirm in the client; `None`: the confirmation waits for the
    /// other surfaces alone (Mission Control, `aido watch`, `aido answer`), which always see
    /// it, and the first answer from any of them (or from this) wins.
    pub confirmer: Option<Arc<dyn Confirmer>>,
    /// How to ask a person a question (the ask primitives) in the client; `None` means
    /// questions wait in the store for the other surfaces.
    pub asker: Option<Arc<dyn Asker>>,
    /// Where progress goes.
    pub progress: Option<Arc<dyn Progress>>,
    /// Cancelled when the agent cancels the call.
    pub cancel: CancellationToken,
    /// The W3C `traceparent` the caller sent (MCP `_meta.traceparent`), the parent of the
    /// action's span.
    pub trace_parent: Option<String>,
    /// The transport the call came over (`pipe`, `tcp`), for telemetry.
    pub transport: Option<&'static str>,
    /// Where a subscription this call makes delivers its events; `None`: the surface cannot
    /// notify, and subscribe is refused (`events_undeliverable`).
    pub notifier: Option<Arc<dyn Notifier>>,
}
