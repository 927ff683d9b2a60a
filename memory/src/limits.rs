//! The bounds on everything the store holds and does.

use serde::{Deserialize, Serialize};

/// Every bound of the store, unit last. Exceeding one is a coded error, never a truncation
/// the caller does not hear about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// The largest text one memory may hold, in UTF-8 bytes.
    pub text_bytes_max: usize,
    /// The most tags one memory (or one filter) may carry.
    pub tags_max: usize,
    /// The longest tag, in bytes.
    pub tag_bytes_max: usize,
    /// The longest project key, session id or provenance session, in bytes.
    pub scope_key_bytes_max: usize,
    /// The most scopes one filter may list.
    pub filter_scopes_max: usize,
    /// The most live memories one scope may hold.
    pub scope_memories_max: u64,
    /// The most live memories the whole store may hold.
    pub memories_max: u64,
    /// The most results one recall may return.
    pub recall_results_max: u32,
    /// The results a recall returns when it names no limit.
    pub recall_results_default: u32,
    /// The largest character budget one recall may ask for.
    pub recall_chars_max: u32,
    /// The character budget of a recall that names none.
    pub recall_chars_default: u32,
    /// The most memories one list page may return.
    pub list_results_max: u32,
    /// The memories a list page returns when it names no limit.
    pub list_results_default: u32,
    /// The largest character budget one list page may ask for.
    pub list_chars_max: u32,
    /// The character budget of a list page that names none.
    pub list_chars_default: u32,
    /// The largest recall query, in bytes.
    pub query_bytes_max: usize,
    /// The most words one recall query may hold.
    pub query_terms_max: usize,
    /// The most expired memories one write purges (the rest go on later writes).
    pub purge_batch_max: u32,
    /// How long SQLite waits for another process's lock before giving up, in milliseconds.
    pub busy_timeout_ms: u64,
    /// How many times an operation that found the store busy is tried in all.
    pub busy_attempts_max: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            text_bytes_max: 16 * 1024,
            tags_max: 16,
            tag_bytes_max: 64,
            scope_key_bytes_max: 256,
            filter_scopes_max: 16,
            scope_memories_max: 50_000,
            memories_max: 200_000,
            recall_results_max: 100,
            recall_results_default: 10,
            recall_chars_max: 200_000,
            recall_chars_default: 8_000,
            list_results_max: 500,
            list_results_default: 50,
            list_chars_max: 200_000,
            list_chars_default: 16_000,
            query_bytes_max: 2 * 1024,
            query_terms_max: 32,
            purge_batch_max: 1_000,
            busy_timeout_ms: 5_000,
            busy_attempts_max: 5,
        }
    }
}
