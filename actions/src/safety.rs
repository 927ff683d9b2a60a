//! Safety primitives: ways to look before leaping (simulate, policy_check), to chain actions so
//! they are judged whole (pipeline, try, if), and to check the world (assert, validate).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};
use crate::action::Action;
use crate::condition::Condition;

/// Walk an action tree through the policy and project its side effects, without running it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Simulate {
    /// The action to simulate (any primitive, composites included).
    pub action: Box<Action>,
}

impl Touches for Simulate {
    fn touches(&self, _out: &mut Vec<Access>) {}
}

/// Ask the policy for its verdict on an action without running it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyCheck {
    /// The action to judge.
    pub action: Box<Action>,
}

impl Touches for PolicyCheck {
    fn touches(&self, _out: &mut Vec<Access>) {}
}

/// Run steps in order, stopping at the first that fails. The whole tree is judged before the
/// first step runs: one denied step refuses the pipeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Pipeline {
    /// The steps.
    pub steps: Vec<Action>,
}

impl Touches for Pipeline {
    fn touches(&self, _out: &mut Vec<Access>) {}
}

/// Run `action`; if it fails, run `fallback` (when given) instead of failing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Try {
    /// The action to attempt.
    pub action: Box<Action>,
    /// What to run when it fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Box<Action>>,
}

impl Touches for Try {
    fn touches(&self, _out: &mut Vec<Access>) {}
}

/// Evaluate a condition, then run `then` or `else`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct If {
    /// The question.
    pub condition: Condition,
    /// Run when the condition holds.
    pub then: Box<Action>,
    /// Run when it does not.
    #[serde(default, rename = "else", skip_serializing_if = "Option::is_none")]
    pub otherwise: Option<Box<Action>>,
}

impl Touches for If {
    fn touches(&self, out: &mut Vec<Access>) {
        self.condition.touches(out);
    }
}

/// Fail with `assertion_failed` unless the condition holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Assert {
    /// What must be true.
    pub condition: Condition,
    /// Said in the failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Touches for Assert {
    fn touches(&self, out: &mut Vec<Access>) {
        self.condition.touches(out);
    }
}

/// Take a snapshot, run `steps`, then `validate`; if any of them fails, restore the snapshot,
/// so the workspace is either changed and valid or exactly as it was.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SafeChange {
    /// The change.
    pub steps: Vec<Action>,
    /// Checks that must pass afterwards (assert, validate, read_file, ...).
    #[serde(default)]
    pub validate: Vec<Action>,
}

impl Touches for SafeChange {
    fn touches(&self, _out: &mut Vec<Access>) {}
}

/// A format validate can check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// Valid JSON.
    Json,
    /// Valid TOML.
    Toml,
    /// Valid UTF-8 text.
    Utf8,
}

/// Check that a file parses as the given format; fails with `validation_failed` and the line
/// and column of the first error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Validate {
    /// The file to check.
    pub path: String,
    /// The format it must have.
    pub format: Format,
}

impl Touches for Validate {
    fn touches(&self, out: &mut Vec<Access>) {
        out.push(Access::read(&self.path));
    }
}
