//! Why a snapshot operation failed, with its codes.

use std::path::Path;

/// A snapshot failed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// A file operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// No snapshot has this id.
    #[error("no snapshot {id}")]
    NotFound {
        /// The id.
        id: String,
    },
    /// A snapshot with this id exists.
    #[error("snapshot {id} exists")]
    Exists {
        /// The id.
        id: String,
    },
    /// Ids are letters, digits, `.`, `_` and `-`, at most 64.
    #[error("{id:?} is not a valid snapshot id")]
    InvalidId {
        /// The id.
        id: String,
    },
    /// A file name that is not UTF-8.
    #[error("cannot snapshot the file name {name:?} (not UTF-8)")]
    UnsupportedName {
        /// The name, lossily.
        name: String,
    },
    /// The tree is too large.
    #[error("the workspace holds more than {max} entries")]
    TooManyEntries {
        /// The bound.
        max: usize,
    },
    /// The workspace is not a directory.
    #[error("the workspace {path} is not a directory")]
    NotADirectory {
        /// The path.
        path: String,
    },
    /// A `btrfs` command failed.
    #[error("{command}: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// What it said.
        stderr: String,
    },
    /// An entry of the workspace changed kind between the plan and the act: a directory was
    /// replaced by a symlink or a file, or moved away while a restore wrote into it. Nothing
    /// outside the workspace was read or touched; run the operation again (a restore finishes
    /// the job).
    #[error("{path} changed while it was being walked (a directory replaced or moved)")]
    Swapped {
        /// The entry, relative to the workspace.
        path: String,
    },
    /// A manifest path that is empty or has an empty, `.` or `..` component (a damaged or
    /// forged manifest), refused before anything is touched through it.
    #[error("the snapshot entry {path:?} is not a path inside the workspace")]
    EntryInvalid {
        /// The path as stored.
        path: String,
    },
    /// The tree nests directories deeper than a walk may hold handles for.
    #[error("the workspace nests directories more than {max} deep")]
    TooDeep {
        /// The bound.
        max: usize,
    },
    /// A stored snapshot's metadata does not parse.
    #[error("snapshot {id} is damaged: {reason}")]
    Damaged {
        /// The id.
        id: String,
        /// Why.
        reason: String,
    },
}

impl SnapshotError {
    pub(crate) fn io(op: &'static str, path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.display().to_string(),
            source,
        }
    }
}

aido_codes::coded!(SnapshotError {
    @delegate {
        Self::Io { source, .. } if source.raw_os_error() == Some(28) => "disk_full",
    }
    @also ["disk_full"]
    Io => "snapshot_io_failed",
    NotFound => "snapshot_not_found",
    Exists => "snapshot_exists",
    InvalidId => "snapshot_id_invalid",
    UnsupportedName => "snapshot_name_unsupported",
    TooManyEntries => "snapshot_too_large",
    NotADirectory => "workspace_not_a_directory",
    Command => "snapshot_command_failed",
    Damaged => "snapshot_damaged",
    Swapped => "workspace_entry_swapped",
    EntryInvalid => "snapshot_entry_invalid",
    TooDeep => "snapshot_too_deep",
});
