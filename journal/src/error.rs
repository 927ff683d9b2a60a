/// The journal could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// sled refused (another process holds the lock, corrupt files, no space).
    #[error("cannot open the journal at {path}: {source}")]
    Storage {
        /// The directory.
        path: String,
        /// sled's error.
        source: sled::Error,
    },
    /// The tail (what the last writer wrote and did not flush) could not be read, replayed
    /// or opened.
    #[error("cannot replay or open the journal's tail {path}: {source}")]
    Tail {
        /// The tail file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Another aido process holds this journal.
    #[error("the journal at {path} is held by another aido process")]
    Locked {
        /// The directory.
        path: String,
    },
    /// Whether a journal exists here could not be found out (a directory that cannot be read).
    #[error("cannot look for a journal at {path}: {source}")]
    Unreadable {
        /// The directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The writer thread could not be started.
    #[error("cannot start the writer of the journal at {path}: {source}")]
    WriterStart {
        /// The directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Copying a live journal for reading failed.
    #[error("cannot copy the live journal at {path}: {source}")]
    Copy {
        /// The directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

aido_actions::coded!(OpenError {
    Storage => "journal_open_failed",
    Locked => "journal_locked",
    Tail => "journal_tail_failed",
    Copy => "journal_copy_failed",
    Unreadable => "journal_dir_unreadable",
    WriterStart => "journal_writer_start_failed",
});

impl OpenError {}

/// A record could not be appended. Nothing was written and no seq was used.
#[derive(Clone, Debug, thiserror::Error)]
pub enum AppendError {
    /// The encoded record is larger than `record_bytes_max`.
    #[error("the record is {bytes} bytes; the limit is {max}")]
    RecordTooLarge {
        /// Its size.
        bytes: u64,
        /// record_bytes_max.
        max: u64,
    },
    /// One blob is larger than `blob_bytes_max`.
    #[error("a blob is {bytes} bytes; the limit is {max}")]
    BlobTooLarge {
        /// Its size.
        bytes: u64,
        /// blob_bytes_max.
        max: u64,
    },
    /// The session already holds `records_per_session_max` records.
    #[error("the session holds {max} records, the most one session may hold")]
    SessionFull {
        /// records_per_session_max.
        max: u64,
    },
    /// sled failed to write or flush (a full disk, an I/O error).
    #[error("the journal could not write: {message}")]
    Storage {
        /// sled's message.
        message: String,
    },
    /// The writer thread is gone (the journal was closed, or it crashed: an invariant of the
    /// chain failed, which is a bug). Every append queued or made after it gets this.
    #[error("the journal writer has stopped")]
    WriterGone,
    /// The newest stored record of the session does not check out (its bytes do not match its
    /// hash, or its header does not match its key), so there is nothing sound to chain the
    /// next record to. The writer refuses this session until it is repaired; other sessions
    /// go on.
    #[error("the newest record of session {session} (seq {seq}) is corrupt: {reason}")]
    HeadCorrupt {
        /// The session.
        session: String,
        /// The seq its key names (0 when the key is not a record key at all).
        seq: u64,
        /// What does not check out.
        reason: String,
    },
    /// This journal was opened read-only.
    #[error("this journal was opened read-only")]
    ReadOnly,
}

aido_actions::coded!(AppendError {
    RecordTooLarge => "journal_record_too_large",
    BlobTooLarge => "journal_blob_too_large",
    SessionFull => "journal_session_full",
    Storage => "journal_storage_failed",
    WriterGone => "journal_writer_gone",
    ReadOnly => "journal_read_only",
    HeadCorrupt => "journal_head_corrupt",
});

impl AppendError {}

/// A record could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// sled failed.
    #[error("the journal could not be read: {0}")]
    Storage(#[from] sled::Error),
    /// A stored record is not valid (verify says where).
    #[error("record {seq} cannot be decoded: {reason}")]
    Corrupt {
        /// The seq.
        seq: u64,
        /// Why.
        reason: String,
    },
    /// A record of a format this aido does not read (written by a newer aido).
    #[error(
        "record {seq} is of journal format {version}; this aido reads formats 1 to {supported}"
    )]
    UnsupportedVersion {
        /// The seq.
        seq: u64,
        /// Its format version (0 when it has none).
        version: u64,
        /// The newest format this aido reads.
        supported: u16,
    },
    /// A key in the records tree is not a record key (16 bytes of session, 8 of seq).
    #[error("the journal holds a record key that is not one: {key}")]
    KeyCorrupt {
        /// The key, hex.
        key: String,
    },
    /// A session's metadata (when it started, its client and cwd) cannot be read.
    #[error("the metadata of session {session} cannot be read: {reason}")]
    SessionCorrupt {
        /// The session id (or the key, hex, when it is not one).
        session: String,
        /// Why.
        reason: String,
    },
    /// A stored blob is damaged: its chunk list, a chunk, or its size.
    #[error("blob {hash} is damaged: {reason}")]
    BlobCorrupt {
        /// Its blake3, hex.
        hash: String,
        /// Why.
        reason: String,
    },
    /// No session has this id (or id prefix).
    #[error("no session matches {0}")]
    NoSuchSession(String),
    /// More than one session matches this id prefix.
    #[error("{0} matches more than one session")]
    AmbiguousSession(String),
}

aido_actions::coded!(ReadError {
    Storage => "journal_read_failed",
    Corrupt => "journal_record_corrupt",
    UnsupportedVersion => "journal_format_unsupported",
    NoSuchSession => "session_not_found",
    AmbiguousSession => "session_ambiguous",
    KeyCorrupt => "journal_key_corrupt",
    SessionCorrupt => "journal_session_corrupt",
    BlobCorrupt => "journal_blob_corrupt",
});
