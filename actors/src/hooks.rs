//! What a surface (the MCP server, the CLI) lends a call: a way to ask a human, a place for
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
    pub(crate) fn name(self) -> &'static str {
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
    /// Ask; `prompt` says what would run and why the policy asks.
    fn confirm(&self, prompt: String) -> Pin<Box<dyn Future<Output = ConfirmAnswer> + Send>>;
}

/// Receives progress of long actions (MCP progress notifications, in the MCP server).
pub trait Progress: Send + Sync {
    /// `done` of `total` steps are finished.
    fn report(&self, done: u64, total: u64, message: String);
}

/// What a surface lends a call.
#[derive(Clone, Default)]
pub struct Hooks {
    /// How to ask a human; `None` means nobody can be asked.
    pub confirmer: Option<Arc<dyn Confirmer>>,
    /// Where progress goes.
    pub progress: Option<Arc<dyn Progress>>,
    /// Cancelled when the agent cancels the call.
    pub cancel: CancellationToken,
}
