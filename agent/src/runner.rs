//! Where the loop's actions run. [`InProcess`]: a session of a runtime in this process (what
//! `aido agent` does by default, as `aido exec` does). The cli also runs them in a session of
//! a running `aido serve` through its `/actions` route, so `aido watch` follows it live; both
//! take the same path in the runtime (policy, journal, body, journal).

use std::future::Future;
use std::pin::Pin;

use aido_actions::Action;
use aido_actors::{Hooks, Session};
use serde_json::Value;

use crate::AgentError;

/// A boxed future, as the runners return them.
pub type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An action that ran.
#[derive(Clone, Debug)]
pub struct Done {
    /// Its proposal's seq.
    pub seq: u64,
    /// The text an agent reads.
    pub text: String,
    /// The structured output.
    pub output: Value,
}

/// An action that was refused (with its gate) or failed.
#[derive(Clone, Debug)]
pub struct Refusal {
    /// Its proposal's seq, when it got that far.
    pub seq: Option<u64>,
    /// The code.
    pub code: String,
    /// The message.
    pub message: String,
    /// The policy's gate, for a refusal.
    pub gate: Option<String>,
    /// A failure's details.
    pub details: Option<Value>,
}

/// What a runner answers for one action: its result, or why the runner itself failed (which
/// stops the loop).
pub type Answer = Result<Result<Done, Refusal>, AgentError>;

/// A session the loop's actions run in.
pub trait Runner: Send + Sync {
    /// The session's id, once it has one.
    fn session(&self) -> Option<String>;
    /// Run `action`, which is the tool call `tool` with `arguments`.
    fn run<'a>(&'a self, action: Action, tool: &'a str, arguments: &'a Value) -> Boxed<'a, Answer>;
    /// Journal a tool call that never became an action; its seq when it was journaled.
    fn reject<'a>(
        &'a self,
        tool: &'a str,
        code: &'a str,
        message: &'a str,
    ) -> Boxed<'a, Option<u64>>;
}

/// A session of a runtime in this process, with what the surface lends each call.
pub struct InProcess {
    /// The session.
    pub session: Session,
    /// Cloned into each call.
    pub hooks: Hooks,
}

impl Runner for InProcess {
    fn session(&self) -> Option<String> {
        Some(self.session.id().to_string())
    }

    fn run<'a>(&'a self, action: Action, _: &'a str, _: &'a Value) -> Boxed<'a, Answer> {
        Box::pin(async move {
            Ok(match self.session.run(action, self.hooks.clone()).await {
                Ok(ran) => Ok(Done {
                    seq: ran.seq,
                    text: ran.outcome.text,
                    output: ran.outcome.output,
                }),
                Err(e) => Err(Refusal {
                    seq: e.seq,
                    code: e.failure.code,
                    message: e.failure.message,
                    gate: e.gate.map(|gate| gate.to_string()),
                    details: e.failure.details,
                }),
            })
        })
    }

    fn reject<'a>(
        &'a self,
        tool: &'a str,
        code: &'a str,
        message: &'a str,
    ) -> Boxed<'a, Option<u64>> {
        Box::pin(self.session.reject(tool, code, message))
    }
}
