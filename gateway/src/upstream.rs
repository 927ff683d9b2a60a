//! What a downstream asks of the caller while a call runs: progress to pass on, and
//! elicitations (questions for the user) to answer. The runtime implements [`Upstream`] for
//! the agent's connection; the gateway only forwards.

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

/// A boxed future, so [`Upstream`] stays usable as `dyn Upstream`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One progress notification of a downstream, for the call it belongs to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// The downstream.
    pub server: String,
    /// How far (grows with each notification).
    pub progress: f64,
    /// Out of how much, when known.
    pub total: Option<f64>,
    /// What it is doing, when it says.
    pub message: Option<String>,
}

/// Where a call's progress and elicitations go: the caller's side of the call (for the
/// runtime, the agent's MCP connection).
pub trait Upstream: Send + Sync {
    /// The downstream reported progress on the call.
    fn progress(&self, progress: Progress) -> BoxFuture<'_, ()>;

    /// The downstream asks the user something during the call; the answer goes back to it.
    fn elicit(
        &self,
        server: &str,
        request: rmcp::model::ElicitRequestParams,
    ) -> BoxFuture<'_, rmcp::model::ElicitResult>;
}

/// An upstream that drops progress and declines every elicitation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Declining;

impl Upstream for Declining {
    fn progress(&self, _progress: Progress) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    fn elicit(
        &self,
        _server: &str,
        _request: rmcp::model::ElicitRequestParams,
    ) -> BoxFuture<'_, rmcp::model::ElicitResult> {
        Box::pin(std::future::ready(declined()))
    }
}

/// The answer "declined" to an elicitation.
pub fn declined() -> rmcp::model::ElicitResult {
    rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Decline)
}
