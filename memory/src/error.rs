//! Errors, one enum per operation, each with a stable code.
//!
//! Failures two operations share (the database is busy, corrupt or failed; a filter or a
//! clock value is bad) live in [`StoreError`] and [`InputError`] and keep their code when an
//! operation's error wraps them, so a code is declared exactly once.

use std::path::PathBuf;

/// Declares `code()` and the `CODES` table of an error enum from one list (through
/// `aido_codes::coded!`, which registers the table), so the table an
/// agent sees and the codes the enum returns cannot drift apart. `@wrap` names variants that
/// hold another coded error and give its code.
macro_rules! coded {
    ($ty:ident {
        $( @wrap [ $( $wrapped:ident ),* $(,)? ] )?
        $( $variant:ident => $code:literal ),* $(,)?
    }) => {
        aido_codes::coded!($ty {
            @delegate { $( $( Self::$wrapped(inner) => inner.code(), )* )? }
            $( $variant => $code, )*
        });
    };
}

/// The database failed underneath an operation. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Other processes held the write lock for longer than `busy_timeout_ms`, every one of
    /// `busy_attempts_max` attempts.
    #[error("the memory store stayed busy through {attempts} attempts")]
    Busy {
        /// How many attempts were made.
        attempts: u32,
    },
    /// SQLite found the file damaged, it is not a database at all, or a stored value is not
    /// what the schema promises.
    #[error("the memory store is corrupt: {detail}")]
    Corrupt {
        /// What SQLite or the check said.
        detail: String,
    },
    /// Any other SQLite failure (a full disk, an I/O error).
    #[error("the memory store failed: {source}")]
    Failed {
        /// SQLite's error.
        source: rusqlite::Error,
    },
}

coded!(StoreError {
    Busy => "memory_store_busy",
    Corrupt => "memory_store_corrupt",
    Failed => "memory_store_failed",
});

/// An argument that is not valid for any operation taking it. Nothing was read or written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// A tag is empty, longer than `tag_bytes_max`, or holds a control character.
    #[error("the tag {tag:?} is not valid (1 to {max} bytes, no control characters)")]
    TagInvalid {
        /// The tag.
        tag: String,
        /// tag_bytes_max.
        max: usize,
    },
    /// More tags than `tags_max`.
    #[error("{count} tags; the limit is {max}")]
    TagsTooMany {
        /// How many were given.
        count: usize,
        /// tags_max.
        max: usize,
    },
    /// A project key or session id is empty, longer than `scope_key_bytes_max`, or holds a
    /// control character.
    #[error("the scope key {key:?} is not valid (1 to {max} bytes, no control characters)")]
    ScopeInvalid {
        /// The key.
        key: String,
        /// scope_key_bytes_max.
        max: usize,
    },
    /// A filter lists more scopes than `filter_scopes_max`.
    #[error("{count} scopes in the filter; the limit is {max}")]
    ScopesTooMany {
        /// How many were given.
        count: usize,
        /// filter_scopes_max.
        max: usize,
    },
    /// A time or seq does not fit SQLite's signed 64-bit integers.
    #[error("the value {value} is out of range")]
    OutOfRange {
        /// The value.
        value: u64,
    },
    /// More results were asked for than the limit allows.
    #[error("{asked} results asked for; the limit is {max}")]
    ResultsTooMany {
        /// The limit asked for.
        asked: u32,
        /// recall_results_max or list_results_max.
        max: u32,
    },
    /// The character budget is larger than `recall_chars_max` or `list_chars_max`.
    #[error("a budget of {asked} characters; the limit is {max}")]
    BudgetTooLarge {
        /// The budget asked for.
        asked: u32,
        /// recall_chars_max or list_chars_max.
        max: u32,
    },
    /// The cursor was not made by this operation (or was altered).
    #[error("the cursor {cursor:?} was not made by this operation")]
    CursorInvalid {
        /// The cursor.
        cursor: String,
    },
}

coded!(InputError {
    TagInvalid => "memory_tag_invalid",
    TagsTooMany => "memory_tags_too_many",
    ScopeInvalid => "memory_scope_invalid",
    ScopesTooMany => "memory_filter_scopes_too_many",
    OutOfRange => "memory_value_out_of_range",
    ResultsTooMany => "memory_results_too_many",
    BudgetTooLarge => "memory_budget_too_large",
    CursorInvalid => "memory_cursor_invalid",
});

/// The store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// SQLite could not open or create the file (a missing directory, no permission).
    #[error("cannot open the memory store at {path}: {source}")]
    Unopenable {
        /// The file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The file could not be put in WAL mode (a file system without shared memory), so
    /// several processes could not share it safely.
    #[error("the memory store at {path} cannot use WAL (journal mode stayed {mode:?})")]
    WalUnavailable {
        /// The file.
        path: PathBuf,
        /// The mode SQLite kept.
        mode: String,
    },
    /// The file is an SQLite database of something else.
    #[error("{path} is not an aido memory store (application id {application_id:#x})")]
    Foreign {
        /// The file.
        path: PathBuf,
        /// Its application id.
        application_id: i32,
    },
    /// The store was written by a newer aido.
    #[error("the memory store is schema version {found}; this aido reads 1 to {supported}")]
    SchemaTooNew {
        /// Its user_version.
        found: i64,
        /// The newest this code knows.
        supported: i64,
    },
    /// The store claims a schema version whose tables are not there.
    #[error("the memory store's schema is damaged: {missing} is missing")]
    SchemaDamaged {
        /// The table, index or trigger that is missing.
        missing: String,
    },
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

coded!(OpenError {
    @wrap [Store]
    Unopenable => "memory_store_unopenable",
    WalUnavailable => "memory_store_wal_unavailable",
    Foreign => "memory_store_foreign",
    SchemaTooNew => "memory_schema_too_new",
    SchemaDamaged => "memory_schema_damaged",
});

/// A memory could not be remembered. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum RememberError {
    /// The text is empty or only whitespace.
    #[error("the text is empty")]
    TextEmpty,
    /// The text is larger than `text_bytes_max`.
    #[error("the text is {bytes} bytes; the limit is {max}")]
    TextTooLarge {
        /// Its size.
        bytes: usize,
        /// text_bytes_max.
        max: usize,
    },
    /// The expiry is not after now.
    #[error("the expiry {expires_ms} ms is not after now ({now_ms} ms)")]
    ExpiryPast {
        /// When it would expire.
        expires_ms: u64,
        /// Now.
        now_ms: u64,
    },
    /// The provenance's session id is empty, too long or holds a control character.
    #[error("the provenance session {session:?} is not valid (1 to {max} bytes)")]
    ProvenanceInvalid {
        /// The session id.
        session: String,
        /// scope_key_bytes_max.
        max: usize,
    },
    /// The scope already holds `scope_memories_max` memories.
    #[error("the scope holds {max} memories, the most one scope may hold")]
    ScopeFull {
        /// scope_memories_max.
        max: u64,
    },
    /// The store already holds `memories_max` memories.
    #[error("the store holds {max} memories, the most it may hold")]
    StoreFull {
        /// memories_max.
        max: u64,
    },
    /// An argument is not valid.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

coded!(RememberError {
    @wrap [Input, Store]
    TextEmpty => "memory_text_empty",
    TextTooLarge => "memory_text_too_large",
    ExpiryPast => "memory_expiry_past",
    ProvenanceInvalid => "memory_provenance_invalid",
    ScopeFull => "memory_scope_full",
    StoreFull => "memory_store_full",
});

/// Memories could not be recalled.
#[derive(Debug, thiserror::Error)]
pub enum RecallError {
    /// The query holds no word to search for (only punctuation or whitespace).
    #[error("the query holds no word to search for")]
    QueryEmpty,
    /// The query is larger than `query_bytes_max`.
    #[error("the query is {bytes} bytes; the limit is {max}")]
    QueryTooLarge {
        /// Its size.
        bytes: usize,
        /// query_bytes_max.
        max: usize,
    },
    /// The query holds more words than `query_terms_max`.
    #[error("the query holds {count} words; the limit is {max}")]
    QueryTermsTooMany {
        /// How many.
        count: usize,
        /// query_terms_max.
        max: usize,
    },
    /// An argument is not valid.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

coded!(RecallError {
    @wrap [Input, Store]
    QueryEmpty => "memory_query_empty",
    QueryTooLarge => "memory_query_too_large",
    QueryTermsTooMany => "memory_query_terms_too_many",
});

/// Memories could not be forgotten. Nothing was deleted.
#[derive(Debug, thiserror::Error)]
pub enum ForgetError {
    /// No live memory has this id (it never existed, was forgotten, or expired).
    #[error("no memory has the id {id}")]
    NotFound {
        /// The id.
        id: u64,
    },
    /// The filter names nothing to match on; forgetting everything must be asked for by
    /// naming the scopes.
    #[error("the forget filter is empty")]
    FilterEmpty,
    /// An argument is not valid.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

coded!(ForgetError {
    @wrap [Input, Store]
    NotFound => "memory_not_found",
    FilterEmpty => "memory_forget_filter_empty",
});

/// Memories could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// An argument is not valid.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

coded!(ListError {
    @wrap [Input, Store]
});

/// Every code this crate can give, in declaration order, without repeats.
pub fn code_table() -> Vec<&'static str> {
    let mut table: Vec<&'static str> = Vec::new();
    for codes in [
        StoreError::CODES,
        InputError::CODES,
        OpenError::CODES,
        RememberError::CODES,
        RecallError::CODES,
        ForgetError::CODES,
        ListError::CODES,
    ] {
        table.extend_from_slice(codes);
    }
    table
}

/// Sorts a SQLite error into busy, corrupt or failed. A stored value of the wrong type or
/// range is corruption too: the schema's CHECKs would never have let it in.
pub(crate) fn classify(source: rusqlite::Error) -> StoreError {
    use rusqlite::Error as E;
    match &source {
        E::FromSqlConversionFailure(..)
        | E::IntegralValueOutOfRange(..)
        | E::InvalidColumnType(..) => {
            return StoreError::Corrupt {
                detail: source.to_string(),
            };
        }
        _ => {}
    }
    match source.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            StoreError::Busy { attempts: 1 }
        }
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase) => {
            StoreError::Corrupt {
                detail: source.to_string(),
            }
        }
        _ => StoreError::Failed { source },
    }
}

/// Whether SQLite gave up waiting for another process's lock.
pub(crate) fn is_busy(source: &rusqlite::Error) -> bool {
    matches!(
        source.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    /// The whole code table, pinned: a code that changes or disappears breaks agents.
    #[test]
    fn code_table_is_pinned() {
        assert_eq!(
            code_table(),
            [
                "memory_store_busy",
                "memory_store_corrupt",
                "memory_store_failed",
                "memory_tag_invalid",
                "memory_tags_too_many",
                "memory_scope_invalid",
                "memory_filter_scopes_too_many",
                "memory_value_out_of_range",
                "memory_results_too_many",
                "memory_budget_too_large",
                "memory_cursor_invalid",
                "memory_store_unopenable",
                "memory_store_wal_unavailable",
                "memory_store_foreign",
                "memory_schema_too_new",
                "memory_schema_damaged",
                "memory_text_empty",
                "memory_text_too_large",
                "memory_expiry_past",
                "memory_provenance_invalid",
                "memory_scope_full",
                "memory_store_full",
                "memory_query_empty",
                "memory_query_too_large",
                "memory_query_terms_too_many",
                "memory_not_found",
                "memory_forget_filter_empty",
            ]
        );
        let mut unique = code_table();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), code_table().len(), "a code is declared twice");
    }

    /// Wrapping keeps the wrapped code, so an agent sees `memory_store_busy` whatever the
    /// operation.
    #[test]
    fn wrapped_errors_keep_their_code() {
        let busy = || StoreError::Busy { attempts: 3 };
        assert_eq!(RememberError::from(busy()).code(), "memory_store_busy");
        assert_eq!(RecallError::from(busy()).code(), "memory_store_busy");
        assert_eq!(ForgetError::from(busy()).code(), "memory_store_busy");
        assert_eq!(ListError::from(busy()).code(), "memory_store_busy");
        assert_eq!(OpenError::from(busy()).code(), "memory_store_busy");
        let bad = InputError::CursorInvalid { cursor: "x".into() };
        assert_eq!(ListError::from(bad).code(), "memory_cursor_invalid");
    }

    #[test]
    fn sqlite_errors_are_sorted() {
        let busy = rusqlite::ffi::SQLITE_BUSY;
        let locked = rusqlite::ffi::SQLITE_LOCKED;
        let corrupt = rusqlite::ffi::SQLITE_CORRUPT;
        let notadb = rusqlite::ffi::SQLITE_NOTADB;
        let full = rusqlite::ffi::SQLITE_FULL;
        assert_eq!(classify(sqlite(busy)).code(), "memory_store_busy");
        assert_eq!(classify(sqlite(locked)).code(), "memory_store_busy");
        assert_eq!(classify(sqlite(corrupt)).code(), "memory_store_corrupt");
        assert_eq!(classify(sqlite(notadb)).code(), "memory_store_corrupt");
        assert_eq!(classify(sqlite(full)).code(), "memory_store_failed");
        let wrong_type = rusqlite::Error::IntegralValueOutOfRange(0, -1);
        assert_eq!(classify(wrong_type).code(), "memory_store_corrupt");
        assert!(is_busy(&sqlite(busy)));
        assert!(!is_busy(&sqlite(full)));
    }
}
