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

/// Rewind this session to just after record `to_seq`: the workspace's files become what they
/// were then (the newest snapshot at or before it, then the journaled changes up to it), and
/// the records after it become an abandoned branch, kept and verifiable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rewind {
    /// The seq to go back to (see session_history).
    pub to_seq: u64,
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
