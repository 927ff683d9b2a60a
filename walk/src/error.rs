//! The runtime's own failures while running an action, and a rewind's: shared by live
//! execution and playback, so both build the same failure from the same case.

/// A rewind could not be planned or applied. Nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum RewindError {
    /// The target is not an earlier record of the session (or both or neither of `to_seq`
    /// and `before_seq` were given).
    #[error("cannot rewind there: {why}")]
    TargetInvalid {
        /// Why.
        why: String,
    },
    /// The target is on a branch an earlier rewind abandoned.
    #[error("seq {seq} is on an abandoned branch")]
    TargetAbandoned {
        /// The seq.
        seq: u64,
    },
    /// The action named has no outcome yet (it is still running).
    #[error("the action at seq {seq} has not finished; rewind to it once it has")]
    TargetRunning {
        /// The seq.
        seq: u64,
    },
    /// `before_seq` names a rewind: the state before it is on the branch it abandoned.
    #[error(
        "seq {seq} is a rewind; the state before it lies on the branch it abandoned, which a rewind cannot return to yet (rewind to_seq an action on the live timeline instead)"
    )]
    UndoOfRewind {
        /// The rewind's seq.
        seq: u64,
    },
    /// Undoing a change whose previous contents the journal did not keep.
    #[error(
        "the change at seq {seq} to {path} kept no previous contents, so it cannot be undone; rewind to a snapshot taken before it"
    )]
    NotKept {
        /// The record that made the change.
        seq: u64,
        /// The path.
        path: String,
    },
    /// A snapshot restore cannot be undone without an earlier snapshot.
    #[error("the snapshot restore at seq {seq} cannot be undone without an earlier snapshot")]
    NeedsSnapshot {
        /// The record of the restore.
        seq: u64,
    },
    /// Retention removed the records up to `through` (`aido gc`): the state at the target is
    /// no longer in the journal.
    #[error(
        "seq {seq} was removed by retention (the session's records up to seq {through} are gone); rewind to a later seq"
    )]
    TargetPruned {
        /// The seq named.
        seq: u64,
        /// The last record removed.
        through: u64,
    },
}

aido_actions::coded!(RewindError {
    @details RewindError::details;
    TargetInvalid => "rewind_target_invalid",
    TargetAbandoned => "rewind_target_abandoned",
    TargetRunning => "rewind_target_running",
    UndoOfRewind => "rewind_undo_of_rewind",
    NotKept => "rewind_not_kept",
    NeedsSnapshot => "rewind_needs_snapshot",
    TargetPruned => "rewind_target_pruned",
});

impl RewindError {
    fn details(&self) -> Option<serde_json::Value> {
        match self {
            Self::TargetAbandoned { seq }
            | Self::TargetRunning { seq }
            | Self::UndoOfRewind { seq }
            | Self::NeedsSnapshot { seq } => Some(serde_json::json!({"seq": seq})),
            Self::NotKept { seq, path } => Some(serde_json::json!({"seq": seq, "path": path})),
            Self::TargetPruned { seq, through } => {
                Some(serde_json::json!({"seq": seq, "pruned_through": through}))
            }
            Self::TargetInvalid { .. } => None,
        }
    }
}

/// A failure of the runtime itself while running an action (not of the action's body).
/// Every variant has a stable code.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A body crashed (panicked) while it had the call; it was restarted.
    #[error("the {body} body crashed ({why}); it was restarted, so try again")]
    BodyCrashed {
        /// Which body.
        body: &'static str,
        /// The panic or error that stopped it.
        why: String,
    },
    /// A body crashed more often than its restart budget allows and is stopped.
    #[error(
        "the {body} body crashed {restarts} times within {window_ms} ms and is stopped; restart aido"
    )]
    BodyFailed {
        /// Which body.
        body: &'static str,
        /// Restarts within the window.
        restarts: u32,
        /// The window.
        window_ms: u64,
    },
    /// A body did not start the call within action_timeout_ms; the call never ran.
    #[error(
        "the {body} body did not take the call within action_timeout_ms ({timeout_ms} ms); it never ran, nothing changed"
    )]
    BodyTimeout {
        /// Which body.
        body: &'static str,
        /// action_timeout_ms.
        timeout_ms: u64,
    },
    /// A body took the call and did not answer long after its deadline.
    #[error(
        "the {body} body took the call and has not answered {waited_ms} ms later; it was restarted and what the call changed is not known"
    )]
    BodyStuck {
        /// Which body.
        body: &'static str,
        /// How long aido waited.
        waited_ms: u64,
    },
    /// The session actor did not take the proposal in time.
    #[error("the session did not take the action in time")]
    SessionBusy,
    /// The session has ended.
    #[error("the session has ended")]
    SessionClosed,
    /// The session already runs in_flight_actions_max actions.
    #[error("this session already runs {max} actions (in_flight_actions_max)")]
    TooManyInFlight {
        /// in_flight_actions_max.
        max: u32,
    },
    /// The call was cancelled by the agent.
    #[error("the call was cancelled")]
    Cancelled,
    /// aido stopped (a crash, kill -9) while the action ran.
    #[error("interrupted: {finished}")]
    Interrupted {
        /// What became of it.
        finished: &'static str,
    },
    /// Finishing an interrupted restore or rewind at start-up failed.
    #[error("finishing the interrupted action failed: {why}")]
    RecoveryFailed {
        /// Why.
        why: String,
    },
    /// The recovery marker could not be written; nothing ran.
    #[error("cannot write the recovery marker {path}: {why}; nothing was changed")]
    RecoveryMarkerFailed {
        /// The marker's path.
        path: String,
        /// The OS error.
        why: String,
    },
    /// A blob a step needs is not in the journal.
    #[error("the journal has no blob {blob}")]
    BlobMissing {
        /// The hash.
        blob: String,
    },
    /// Arguments the schema admits but the primitive refuses.
    #[error("{why}")]
    InvalidArguments {
        /// Why.
        why: String,
    },
    /// A task of the runtime failed (a panic outside any body).
    #[error("internal error: {why}")]
    Internal {
        /// What failed.
        why: String,
    },
    /// The policy asks a human and this client cannot ask one (no MCP elicitation).
    #[error("{reason}, and this client cannot ask a human (no MCP elicitation)")]
    ConfirmUnavailable {
        /// Why the policy asks.
        reason: String,
    },
    /// The human did not approve.
    #[error("{reason}; the human answered: {answer}")]
    ConfirmDeclined {
        /// Why the policy asked.
        reason: String,
        /// declined, cancelled or timeout.
        answer: &'static str,
    },
    /// An `assert` (or a safe_change check) found its condition false.
    #[error("{message}")]
    AssertionFailed {
        /// The assert's message.
        message: String,
    },
    /// The session cannot hold the records one more action needs.
    #[error(
        "the session holds {head} of at most {max} records (records_per_session_max); start a new session"
    )]
    SessionFull {
        /// Records it holds.
        head: u64,
        /// records_per_session_max.
        max: u64,
    },
}

aido_actions::coded!(RuntimeError {
    BodyCrashed => "body_crashed",
    BodyFailed => "body_failed",
    BodyTimeout => "body_timeout",
    BodyStuck => "body_stuck",
    SessionBusy => "session_busy",
    SessionClosed => "session_closed",
    TooManyInFlight => "too_many_in_flight",
    Cancelled => "cancelled",
    Interrupted => "interrupted",
    RecoveryFailed => "recovery_failed",
    RecoveryMarkerFailed => "recovery_marker_failed",
    BlobMissing => "blob_missing",
    InvalidArguments => "invalid_arguments",
    Internal => "internal_error",
    ConfirmUnavailable => "confirm_unavailable",
    ConfirmDeclined => "confirm_declined",
    AssertionFailed => "assertion_failed",
    SessionFull => "journal_session_full",
});
