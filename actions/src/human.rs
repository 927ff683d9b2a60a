//! Asking a human: free text, a yes/no confirmation, a multiple choice, and fetching an answer
//! given out of band.
//!
//! The runtime asks through the surface's elicitation (MCP form mode). A client that cannot ask
//! gets a coded `needs_human` failure carrying the question's id; the question is stored in
//! AIDO_HOME and a person answers it with `aido answer ID ...` (the command line only: no tool
//! answers a question, so the agent can never answer itself); the agent collects the answer
//! with `check_answer`. Questions and choices that ask for a secret (a password, a token, an API
//! key, ...) are refused before anyone is asked: a form is no place for secrets.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// Ask a person a question and wait (bounded) for a free-text answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskHuman {
    /// The question, as the person reads it (1 to 2000 characters; never ask for a secret).
    #[schemars(length(min = 1, max = 2000))]
    pub question: String,
    /// How long to wait for the answer, in ms (default 120000, at most the policy's
    /// `[limits] confirm_timeout_ms`). Without a client that can ask, the call answers
    /// needs_human at once unless a timeout is given, and then waits that long for
    /// `aido answer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Ask a person to confirm. Only an explicit yes is yes: a no, a decline, a cancel, a timeout
/// are all `approved: false`, with the reason.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Confirm {
    /// What the person is asked to approve (1 to 2000 characters).
    #[schemars(length(min = 1, max = 2000))]
    pub question: String,
    /// How long to wait, in ms (default 120000, at most `[limits] confirm_timeout_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Ask a person to pick one of several choices (or several, with `multiple`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskMultipleChoice {
    /// The question (1 to 2000 characters).
    #[schemars(length(min = 1, max = 2000))]
    pub question: String,
    /// The choices, 2 to 10, each 1 to 200 characters and all different.
    #[schemars(length(min = 2, max = 10), inner(length(min = 1, max = 200)))]
    pub choices: Vec<String>,
    /// Whether the person may pick several (at least one).
    #[serde(default)]
    pub multiple: bool,
    /// How long to wait, in ms (default 120000, at most `[limits] confirm_timeout_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Collect the answer to a question that came back `needs_human` (a person answers it with
/// `aido answer ID ...`), waiting up to `wait_ms` for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckAnswer {
    /// The question's id, as `needs_human` gave it (`q-` and 16 hex digits).
    #[schemars(length(min = 1, max = 64))]
    pub id: String,
    /// How long to wait for an answer, in ms (default 0: look once; at most
    /// `[limits] confirm_timeout_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

// A question touches no path: the class, mode and action gates judge it.
impl Touches for AskHuman {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for Confirm {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for AskMultipleChoice {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for CheckAnswer {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
