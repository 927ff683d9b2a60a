use crate::error::{AppendError, OpenError, ReadError};

/// A retention run (or `aido du`) could not go on. Nothing after the failing step ran; what
/// ran before it is whole (each step leaves the journal verifiable).
#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    /// An argument that makes no sense (an age or size that does not parse, no rule at all).
    #[error("invalid {argument}: {why}")]
    ArgumentInvalid {
        /// Which argument.
        argument: String,
        /// Why.
        why: String,
    },
    /// A shard could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// A shard could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A `pruned` or `collected` record could not be appended.
    #[error(transparent)]
    Append(#[from] AppendError),
    /// A file or directory retention reads or removes failed.
    #[error("retention could not {op} {path}: {source}")]
    Io {
        /// What it was doing.
        op: &'static str,
        /// The path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The journal holds more distinct contents than one run can mark.
    #[error(
        "the journal names more than {max} distinct contents; retention marks at most that many"
    )]
    MarksMax {
        /// [`MARKS_MAX`](super::MARKS_MAX).
        max: usize,
    },
}

aido_actions::coded!(RetentionError {
    @delegate {
        Self::Open(e) => e.code(),
        Self::Read(e) => e.code(),
        Self::Append(e) => e.code()
    }
    ArgumentInvalid => "retention_argument_invalid",
    Io => "retention_io_failed",
    MarksMax => "retention_marks_max",
});

impl RetentionError {
    pub(crate) fn io(op: &'static str, path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.display().to_string(),
            source,
        }
    }
}

/// Why a run left something alone: the codes of a report's `skipped` entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// Another running aido holds the shard: its sessions are read (from a copy) for marks,
    /// and nothing in it is removed.
    ShardHeld,
    /// The session has not ended and was active within
    /// [`LIVE_QUIET_MS`](super::LIVE_QUIET_MS).
    SessionLive,
    /// A record of the session does not check out: the session is kept as evidence and
    /// nothing is swept from its shard (what the record names cannot be known).
    RecordDamaged,
    /// A change set's part (or a blob a record names) could not be read, so what it names
    /// cannot be marked: nothing is swept from that shard.
    ReferenceUnreadable,
    /// The running aido that called retention stored more than
    /// [`PINS_MAX`](crate::pins::PINS_MAX) contents meanwhile: its shard is not swept.
    PinsOverflow,
    /// An audit file was written to within [`AUDIT_QUIET_MS`](super::AUDIT_QUIET_MS): it keeps
    /// its lines of removed records for now.
    AuditInUse,
    /// An audit file holds a line longer than retention reads (or one it cannot parse): the
    /// file is kept whole.
    AuditUnreadable,
    /// A snapshot a removed record named could not be removed (the store's code is in the
    /// detail).
    SnapshotKept,
    /// A shard could not be compacted (another aido took it meanwhile, or the copy failed):
    /// it keeps its size until the next run.
    CompactionSkipped,
}

aido_actions::coded!(Kept {
    ShardHeld => "retention_shard_held",
    SessionLive => "retention_session_live",
    RecordDamaged => "retention_record_damaged",
    ReferenceUnreadable => "retention_reference_unreadable",
    PinsOverflow => "retention_pins_overflow",
    AuditInUse => "retention_audit_in_use",
    AuditUnreadable => "retention_audit_unreadable",
    SnapshotKept => "retention_snapshot_kept",
    CompactionSkipped => "retention_compaction_skipped",
});
