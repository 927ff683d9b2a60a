//! aido's memory: what an agent learned, kept across sessions, restarts and processes.
//!
//! Four operations, each a serde request and result so they can become typed actions:
//! [`MemoryStore::remember`] stores a text with a [`Scope`] (global, one project, one
//! session), tags, an optional [`Expiry`] and its [`Provenance`] (the session and journal seq
//! it came from, and whether it was derived from untrusted input); [`MemoryStore::recall`]
//! ranks live memories against a query by bm25 and stops at a result limit or a character
//! budget; [`MemoryStore::forget`] deletes by id or by filter; [`MemoryStore::list_memory`]
//! pages through memories newest first with a stable cursor.
//!
//! # Design
//!
//! The store is one SQLite file (bundled SQLite, so FTS5 is always there), because the
//! normal deployment is several aido processes at once and the reference memory server,
//! rewriting one JSON file, loses writes when two clients share it. Here every process opens
//! the same file in WAL mode; writes are IMMEDIATE transactions (the write lock is taken at
//! BEGIN, where waiting under `busy_timeout_ms` is safe) retried a bounded number of times,
//! and commits fsync, so an acknowledged memory is never lost to another process or a
//! crash. The full-text index, tags and per-scope counts are kept by triggers inside the
//! same transaction as the memory, so they cannot drift from it.
//!
//! Recall never passes agent text to FTS5 as syntax: the query is cut into words and every
//! word is quoted (see `query.rs`), so `"`, `AND`, `*`, `NEAR(` or an unbalanced parenthesis
//! are searched for as text and never a syntax error. The tokenizer is `porter unicode61
//! remove_diacritics 2`: "builds" finds "building", "café" finds "cafe".
//!
//! The store reads no clock: every operation takes `now_ms` from the caller, who records it
//! in the journal. Ids are SQLite's AUTOINCREMENT rowids: no randomness, strictly growing,
//! never reused after a forget, and unique across every process sharing the file. They are
//! not a function of the content (two processes remembering the same text get two ids, and
//! which one gets the smaller depends on who commits first), so replay does not recompute
//! them: it reads the id a `remember` returned from the journal, as it does for every other
//! nondeterministic result. A content hash was the alternative; it would make two identical
//! memories collide and still need the time in the hash to tell them apart.
//!
//! Every bound is in [`Limits`]; exceeding one, a corrupt file, a newer schema or a store
//! that stays busy is a coded error ([`error::code_table`]), never a panic.
//!
//! # What a journal rewind should do to memories
//!
//! Our recommendation: a rewind leaves memories alone, and says which ones the rewound
//! actions made. Memory is shared state outside the rewound world, like a message already
//! sent: other sessions and processes may have recalled a memory and acted on it, and a
//! forget made by a rewound action may have been about a fact that really was wrong. Undoing
//! either silently would make the store disagree with what those sessions saw. Since each
//! memory keeps its provenance, the rewind can list the memories remembered at or after the
//! rewind point (`ForgetFilter { session, seq_min }` selects exactly those) and the person
//! decides whether to forget them, as a new, journaled `forget`. Memories from untrusted
//! input are the usual reason to do so, which is why recall shows `untrusted`.
//!
//! # Example
//!
//! ```
//! use aido_memory::{
//!     Limits, MemoryStore, Provenance, RecallRequest, RememberRequest, Scope,
//! };
//! let dir = tempfile::tempdir().unwrap();
//! let mut store = MemoryStore::open(dir.path().join("memory.sqlite"), Limits::default()).unwrap();
//! let now_ms = 1_764_590_400_000;
//! let remembered = store
//!     .remember(
//!         &RememberRequest {
//!             text: "The integration tests need `cargo test --features e2e`.".into(),
//!             scope: Scope::Project { key: "aido".into() },
//!             tags: vec!["testing".into()],
//!             expiry: None,
//!             provenance: Provenance { session: "s1".into(), seq: 42, untrusted: false },
//!         },
//!         now_ms,
//!     )
//!     .unwrap();
//! let recall = store.recall(&RecallRequest::new("how to run the tests"), now_ms + 1).unwrap();
//! assert_eq!(recall.results[0].memory.id, remembered.id);
//! assert!(!recall.results[0].memory.provenance.untrusted);
//! ```

/// Page cursors: offsets for recall, keyset positions for list, both fingerprinted.
mod cursor;
/// Errors, one enum per operation, and the table of their codes.
pub mod error;
/// Checking scopes and tags, and filters as SQL.
mod filter;
/// The bounds on everything.
mod limits;
/// The requests and results of the four operations.
mod model;
/// Agent text to a safe FTS5 MATCH expression.
mod query;
/// The tables, the schema version and its upgrades.
mod schema;
/// The store and its four operations.
mod store;

pub use error::{
    ForgetError, InputError, ListError, OpenError, RecallError, RememberError, StoreError,
};
pub use limits::Limits;
pub use model::{
    Expiry, ForgetFilter, ForgetRequest, Forgotten, ListPage, ListRequest, Memory, MemoryId,
    Provenance, Recall, RecallRequest, Recalled, RememberRequest, Remembered, Scope, Terms,
};
pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
pub use store::MemoryStore;
