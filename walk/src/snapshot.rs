//! What the filesystem body answers to the workspace's snapshot operations, as types: the
//! body builds these, the runtime journals them as `Input::Answer { from: "snapshots" }`, and
//! [`crate::render`] builds create_snapshot's, restore_snapshot's, list_snapshots', rewind's
//! and a recovery's results from them, live and in playback.
//!
//! The JSON is what the body answered before these types existed. The parts taken from
//! `aido-snapshots` that the walk only passes through (a restore's statistics) stay JSON;
//! the backend is its snake_case name.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use aido_actions::Failure;

/// Who answers in the recorded input.
pub const ANSWERED_BY: &str = "snapshots";

/// create_snapshot: the snapshot the store took.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taken {
    /// Its id.
    pub snapshot: String,
    /// How it was taken (`btrfs_subvolume`, `reflink`, `copy`).
    pub backend: String,
    /// Regular files in it (`null` for a btrfs snapshot, which never counts them).
    pub files: Option<u64>,
    /// Their bytes (as `files`).
    pub bytes: Option<u64>,
    /// The workspace, resolved.
    pub workspace: String,
    /// Why this backend.
    pub why: String,
}

/// restore_snapshot: what the store did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restored {
    /// The snapshot restored.
    pub snapshot: String,
    /// The store's statistics (backend, files written, removed, unchanged).
    pub stats: Value,
}

/// delete_snapshot: the snapshot deleted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    /// Its id.
    pub deleted: String,
}

/// One snapshot as list_snapshots' answer lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listed {
    /// Its id.
    pub id: String,
    /// How it was taken.
    pub backend: String,
    /// When (the clock's milliseconds since the epoch).
    pub created_ms: u64,
    /// Regular files in it, when counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<u64>,
    /// Their bytes, when counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// A rewind's or a restore's steps, applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// How many.
    pub applied: usize,
}

/// A restore or rewind a crash interrupted, finished at the next start: its plan's length
/// and the filesystem body's answer to applying it (journaled from `recovery`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovered {
    /// The plan's steps.
    pub steps: usize,
    /// What applying them answered.
    pub applied: Applied,
}

/// An answer as JSON, for the message and the journal. Every field is a string, a number or
/// JSON already, so this cannot fail; the `Null` branch is never taken.
pub fn to_value(answer: &impl Serialize) -> Value {
    serde_json::to_value(answer).unwrap_or(Value::Null)
}

/// An answer read back as the type it was made from; one that does not read is the
/// runtime's own fault (`internal_error`), never rendered anyway.
pub fn read<T: DeserializeOwned>(answer: &Value) -> Result<T, Failure> {
    T::deserialize(answer).map_err(|error| {
        Failure::from(crate::error::RuntimeError::Internal {
            why: format!("the snapshot store's answer does not read: {error}"),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Answers as the filesystem body gave them before they were typed.
    #[test]
    fn answers_read_back_to_the_same_json() {
        fn same<T: Serialize + DeserializeOwned>(answer: Value) {
            let typed: T = read(&answer).unwrap();
            assert_eq!(to_value(&typed), answer);
        }
        same::<Taken>(
            json!({"snapshot": "s-1a2b", "backend": "reflink", "files": 3,
            "bytes": 120, "workspace": "/agent-home/project", "why": "reflink works here"}),
        );
        same::<Taken>(
            json!({"snapshot": "s-1a2b", "backend": "btrfs_subvolume", "files": null,
            "bytes": null, "workspace": "/agent-home/project", "why": "a subvolume"}),
        );
        same::<Restored>(json!({"snapshot": "s-1a2b", "stats": {"backend": "copy",
            "written": 2, "removed": 1, "unchanged": 4}}));
        same::<Deleted>(json!({"deleted": "s-1a2b"}));
        same::<Vec<Listed>>(json!([{"id": "s-1", "backend": "copy", "created_ms": 5,
            "files": 1, "bytes": 2}, {"id": "s-2", "backend": "btrfs_subvolume", "created_ms": 6}]));
        same::<Applied>(json!({"applied": 7}));
        same::<Recovered>(json!({"steps": 7, "applied": {"applied": 7}}));
    }

    #[test]
    fn an_answer_that_does_not_read_is_an_internal_error() {
        let failure = read::<Applied>(&json!({"applied": "seven"})).unwrap_err();
        assert_eq!(failure.code, "internal_error");
    }
}
