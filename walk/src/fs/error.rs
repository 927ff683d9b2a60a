use aido_actions::verdict::Gate;

/// Why a filesystem action failed. Every variant has a stable code.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The body's own check of a path refused it (same codes as the policy).
    #[error("{reason}")]
    Denied {
        /// The gate.
        gate: Gate,
        /// The policy code.
        code: &'static str,
        /// Why.
        reason: String,
    },
    /// The path named a different file when it was opened than when it was checked.
    #[error("{path} changed between the check and the open (now {now})")]
    ChangedDuringCheck {
        /// The checked path.
        path: String,
        /// What the descriptor really is.
        now: String,
    },
    /// No such file.
    #[error("{path} does not exist")]
    NotFound {
        /// The path.
        path: String,
    },
    /// Expected a regular file.
    #[error("{path} is not a regular file")]
    NotAFile {
        /// The path.
        path: String,
    },
    /// The file is not UTF-8 text.
    #[error("{path} is binary (not UTF-8 text); read it with encoding base64")]
    Binary {
        /// The path.
        path: String,
    },
    /// The file is larger than read_bytes_max.
    #[error("{path} is {bytes} bytes; the most returned whole is {max} (use offset and limit)")]
    TooLarge {
        /// The path.
        path: String,
        /// Its size.
        bytes: u64,
        /// The limit.
        max: u64,
    },
    /// edit_file's old_string is not in the file.
    #[error("old_string does not occur in {path}")]
    EditNoMatch {
        /// The path.
        path: String,
    },
    /// edit_file's old_string occurs more than once and replace_all is false.
    #[error("old_string occurs {count} times in {path}; make it unique or set replace_all")]
    EditAmbiguous {
        /// The path.
        path: String,
        /// How many times.
        count: usize,
    },
    /// edit_file's old_string is empty.
    #[error("old_string is empty")]
    EditEmpty,
    /// The patch text is not a unified diff.
    #[error("the patch for {path} is not a unified diff: {reason}")]
    PatchInvalid {
        /// The path.
        path: String,
        /// The parser's message.
        reason: String,
    },
    /// A hunk does not apply.
    #[error("the patch does not apply to {path}: {reason}")]
    PatchFailed {
        /// The path.
        path: String,
        /// Which hunk.
        reason: String,
    },
    /// patch_set wrote some files, then failed; the written ones were put back.
    #[error("writing {path} failed ({reason}); the files written before it were restored")]
    PatchSetRolledBack {
        /// The file that failed.
        path: String,
        /// Why.
        reason: String,
    },
    /// A command's file changes could not all be applied: the ones applied were put back.
    #[error(
        "the command's file changes were not applied ({path}: {reason}); none of them were kept"
    )]
    CommandChangesRolledBack {
        /// The change that failed.
        path: String,
        /// Why.
        reason: String,
    },
    /// A path of a change set held neither what it held when the change set was staged nor
    /// what it was to hold: something else changed it meanwhile.
    #[error("{path} changed while the command's changes were being applied (it now holds {found})")]
    CommandChangesConflict {
        /// The path.
        path: String,
        /// What it holds.
        found: String,
    },
    /// A name that is not UTF-8: the journal holds UTF-8 paths only, so a change set that
    /// holds one is refused whole, before anything is applied.
    #[error(
        "{path} is not UTF-8; aido journals only UTF-8 paths, so this change set is refused whole"
    )]
    PathNotUtf8 {
        /// The path, with the bytes that are not UTF-8 shown as U+FFFD.
        path: String,
    },
    /// Something at a changed path a change set cannot keep or replace (a device, a fifo,
    /// a socket).
    #[error("{path} is {what}, which a change set cannot keep or replace")]
    ChangeUnsupported {
        /// The path.
        path: String,
        /// What it is.
        what: String,
    },
    /// Content in base64 that is not base64.
    #[error("content is not valid base64: {reason}")]
    BadBase64 {
        /// The decoder's message.
        reason: String,
    },
    /// restore_from_trash found nothing trashed from this path.
    #[error("nothing in the trash came from {path}")]
    NotInTrash {
        /// The path.
        path: String,
    },
    /// restore_from_trash would overwrite something.
    #[error("{path} exists; move it away before restoring")]
    RestoreTargetExists {
        /// The path.
        path: String,
    },
    /// The trash cannot hold this item.
    #[error("cannot trash {path}: {reason}")]
    Trash {
        /// The path.
        path: String,
        /// Why.
        reason: String,
    },
    /// validate found the file malformed.
    #[error("{path} is not valid {format} at line {line}, column {column}: {reason}")]
    Invalid {
        /// The path.
        path: String,
        /// The format.
        format: &'static str,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        reason: String,
    },
    /// The new or previous contents of a write are larger than the journal keeps
    /// (`blob_bytes_max`); nothing was changed.
    #[error(
        "{path}: contents of {bytes} bytes are more than the journal keeps ({max}, blob_bytes_max); nothing was changed"
    )]
    ContentsTooLarge {
        /// The path.
        path: String,
        /// The contents' size.
        bytes: u64,
        /// blob_bytes_max.
        max: u64,
    },
    /// Keeping a write's contents would leave the journal's disk with less free space than
    /// `journal_free_bytes_min`; nothing was changed.
    #[error(
        "{path}: keeping its contents needs {needed} bytes free on the journal's disk, which has {free} (journal_free_bytes_min); nothing was changed"
    )]
    JournalSpaceLow {
        /// The path.
        path: String,
        /// Bytes needed (contents plus the reserve).
        needed: u64,
        /// Bytes free.
        free: u64,
    },
    /// The previous contents could not be stored in the journal; nothing was changed.
    #[error("{path}: cannot keep its previous contents ({reason}); nothing was changed")]
    KeepFailed {
        /// The path.
        path: String,
        /// Why.
        reason: String,
    },
    /// A tree to remove, copy or check is larger than the body goes through: more than `max`
    /// entries, or more than `max` directories deep (`what` says which limit); what was done
    /// before the limit stays done, the rest is untouched.
    #[error("{path}: more than {max} {what}; stopped there")]
    TreeTooLarge {
        /// The tree's root.
        path: String,
        /// `entries` or `directories deep`.
        what: &'static str,
        /// The limit.
        max: usize,
    },
    /// No space left on the device.
    #[error("no space left on the device writing {path}")]
    DiskFull {
        /// The path.
        path: String,
    },
    /// The OS refused access.
    #[error("permission denied: {path}")]
    PermissionDenied {
        /// The path.
        path: String,
    },
    /// Any other I/O failure.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The call was cancelled by the agent.
    #[error("cancelled")]
    Cancelled,
    /// diff or render_template refused its arguments or failed (its own codes).
    #[error(transparent)]
    Tool(#[from] crate::tools::ToolError),
}

aido_actions::coded!(FsError {
    @details FsError::details;
    // A denial by the body's own check carries the policy's code (listed by the policy).
    @delegate {
        Self::Denied { code, .. } => code,
        // The toolbelt's codes are listed by ToolError.
        Self::Tool(e) => e.code(),
    }
    ChangedDuringCheck => "path_changed_during_check",
    NotFound => "file_not_found",
    NotAFile => "not_a_file",
    Binary => "binary_file",
    TooLarge => "file_too_large",
    EditNoMatch => "edit_no_match",
    EditAmbiguous => "edit_ambiguous_match",
    EditEmpty => "edit_empty_old_string",
    PatchInvalid => "patch_invalid",
    PatchFailed => "patch_failed",
    PatchSetRolledBack => "patch_set_rolled_back",
    CommandChangesRolledBack => "command_changes_rolled_back",
    CommandChangesConflict => "command_changes_conflict",
    PathNotUtf8 => "path_not_utf8",
    ChangeUnsupported => "command_change_unsupported",
    BadBase64 => "invalid_arguments",
    NotInTrash => "trash_item_not_found",
    RestoreTargetExists => "restore_target_exists",
    Trash => "trash_failed",
    Invalid => "validation_failed",
    ContentsTooLarge => "contents_too_large",
    JournalSpaceLow => "journal_space_low",
    KeepFailed => "keep_failed",
    TreeTooLarge => "tree_too_large",
    DiskFull => "disk_full",
    PermissionDenied => "permission_denied",
    Io => "io_error",
    Cancelled => "cancelled",
});

impl FsError {
    /// Classify an I/O error on `path`.
    pub fn io(op: &'static str, path: &str, source: std::io::Error) -> Self {
        let path = path.to_owned();
        match source.kind() {
            std::io::ErrorKind::NotFound => Self::NotFound { path },
            std::io::ErrorKind::PermissionDenied => Self::PermissionDenied { path },
            std::io::ErrorKind::StorageFull => Self::DiskFull { path },
            _ if source.raw_os_error() == Some(libc_enospc()) => Self::DiskFull { path },
            _ => Self::Io { op, path, source },
        }
    }

    fn details(&self) -> Option<serde_json::Value> {
        match self {
            Self::Denied { gate, .. } => Some(serde_json::json!({"gate": gate})),
            Self::TooLarge { bytes, max, .. } | Self::ContentsTooLarge { bytes, max, .. } => {
                Some(serde_json::json!({"bytes": bytes, "max": max}))
            }
            Self::JournalSpaceLow { needed, free, .. } => {
                Some(serde_json::json!({"needed": needed, "free": free}))
            }
            Self::TreeTooLarge { max, .. } => Some(serde_json::json!({"max": max})),
            Self::EditAmbiguous { count, .. } => Some(serde_json::json!({"count": count})),
            Self::Invalid { line, column, .. } => {
                Some(serde_json::json!({"line": line, "column": column}))
            }
            Self::Tool(tool) => tool.details(),
            _ => None,
        }
    }
}

const fn libc_enospc() -> i32 {
    28
}
