//! The journal: the truth about every session, append-only, on sled.
//!
//! Each session is a chain of [`Record`]s with gap-free seqs from 1. Every record carries the
//! blake3 hash of the one before it, so altering any byte breaks the chain at that seq, and
//! [`Journal::verify`] names it. Long strings (file contents, outputs) move out of records into
//! a content-addressed blob store, so identical contents are stored once. One writer thread
//! owns all appends and group-commits them: it drains whatever is queued, writes it as one
//! batch, flushes once, and only then acknowledges — so an acknowledged record survives
//! `kill -9`, and under load one flush serves many records. Its queue is bounded
//! ([`QUEUE_RECORDS_MAX`]): a full queue makes async appends wait (without blocking the
//! runtime's threads) and blocking appends block, instead of growing memory.
//!
//! The journal checks itself, TigerBeetle style. Right before a record joins a batch the
//! writer asserts that its seq follows the head and its prev is the head's hash (a violation
//! is a bug: the writer panics, and every pending and later append gets
//! `journal_writer_gone`). After every read — the writer loading a session's head included —
//! the record's bytes must match its hash, its format be one this aido reads, and its header
//! name the key it is stored under; anything else is a coded error, never a default.
//!
//! ```
//! use aido_journal::{CommitMode, Event, Journal, Limits, SessionId};
//! let dir = tempfile::tempdir().unwrap();
//! let journal = Journal::open(dir.path(), Limits::default(), CommitMode::Group).unwrap();
//! let session = SessionId::from_bytes([7; 16]);
//! let started = Event::SessionStarted { client: None, cwd: "/w".into(), runtime: "test".into(), grant: None };
//! let appended = journal.append_blocking(session, 1, started).unwrap();
//! assert_eq!(appended.seq, 1);
//! assert!(journal.verify(session).unwrap().broken.is_none());
//! ```

/// The blob store (small contents in sled, larger ones as objects) and the moving of long
/// strings out of records.
pub mod blobs;
/// Where journals live under `AIDO_HOME`, and reading one a running aido holds.
pub mod dir;
/// Errors and their stable codes.
pub mod error;
/// Large contents as files beside the journal (holes kept, reflinked where possible).
pub mod objects;
/// Contents a running aido stores while retention sweeps its journal.
mod pins;
/// Records, events and session ids.
pub mod record;
/// Removing old sessions and everything only they use; what takes the space.
pub mod retention;
/// How records are stored: the trees, keys, the check of a stored value, bounds, answers.
mod stored;
/// What was written since the last flush, so kill -9 cannot lose it.
mod tail;
/// Which records are on the current timeline after rewinds.
pub mod timeline;
/// The group-committing writer thread.
mod writer;

mod journal;

pub use blobs::{BlobStore, StoredBlob};
pub use error::{AppendError, OpenError, ReadError};
pub use journal::{
    Appended, Broken, CommitMode, Cut, Journal, Limits, QUEUE_RECORDS_MAX, Queued, Sequenced,
    SessionSummary, VerifyReport,
};
pub use pins::{PINS_MAX, PinGuard};
pub use record::{Collected, Event, FORMAT_VERSION, Record, SessionId, Skipped};
pub use writer::LAZY_FLUSH_MS;
