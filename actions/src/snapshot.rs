//! Snapshot and time-travel primitives: checkpoints of the workspace, and rewinding the
//! session (files and journal head together) to any earlier seq.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// Take a snapshot of the workspace, tied to this action's seq in the journal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSnapshot {
    /// A note for people (`before refactor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// Make the workspace equal to a snapshot again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreSnapshot {
    /// The snapshot id (from create_snapshot or list_snapshots).
    pub snapshot: String,
}

/// The workspace's snapshots, with the seq each was taken at and the backend.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSnapshots {}

/// Delete a snapshot (the journal keeps its record).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteSnapshot {
    /// The snapshot id.
    pub snapshot: String,
}

/// Rewind this session, like `git reset` to a commit. `to_seq` is the seq an action's result
/// carried (or any seq from session_history): that action is KEPT, with its effects, and
/// everything after it is undone. `before_seq` undoes that action too: the session goes back
/// to just before it. Give exactly one. The workspace's files become what they were then (the
/// newest snapshot at or before it, then the journaled changes up to it, or the later changes
/// undone from their kept contents), the result lists exactly which actions were undone, and
/// the undone records become an abandoned branch, kept and verifiable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rewind {
    /// Keep the action (or record) at this seq and undo everything after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_seq: Option<u64>,
    /// Undo the action proposed at this seq and everything after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_seq: Option<u64>,
}

/// Where a rewind goes, as the agent named it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RewindTarget {
    /// Keep this action (or record) and undo what came after it.
    Keep(u64),
    /// Undo this action and what came after it.
    Undo(u64),
}

impl Rewind {
    /// The target, when exactly one of `to_seq` and `before_seq` is given.
    pub fn target(&self) -> Option<RewindTarget> {
        match (self.to_seq, self.before_seq) {
            (Some(n), None) => Some(RewindTarget::Keep(n)),
            (None, Some(n)) => Some(RewindTarget::Undo(n)),
            _ => None,
        }
    }
}

/// Random bytes from the operating system, recorded in the journal so a replay sees the same.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RandomBytes {
    /// How many (1 to 4096).
    pub count: u32,
}

impl RandomBytes {
    /// Most bytes one call returns.
    pub const COUNT_MAX: u32 = 4096;
}

macro_rules! touches_nothing {
    ($($t:ty),*) => {
        $(impl Touches for $t {
            fn touches(&self, _out: &mut Vec<Access>) {}
        })*
    };
}

touches_nothing!(
    CreateSnapshot,
    RestoreSnapshot,
    ListSnapshots,
    DeleteSnapshot,
    Rewind,
    RandomBytes
);
