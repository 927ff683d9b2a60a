//! Retention: removing old sessions, and everything only they use, from an `AIDO_HOME`.
//!
//! The journal is append-only while aido runs; retention is the one thing that removes from
//! it, and it removes by *what records remain*, never by guessing what a blob is for:
//!
//! 1. **Plan.** Every session of every shard under `AIDO_HOME/journal/` is scanned (each
//!    record read back checked). By the rules ([`Rules`]: age, a byte budget, a session
//!    count) a session goes whole, or, when only its older records are past the age, is
//!    *cut*: its records up to an action boundary go. A session is never touched when it is
//!    live: its shard is held by another running aido, or it has not ended and was active
//!    within [`LIVE_QUIET_MS`]. A session with a damaged record is never touched either (it is
//!    evidence), and nothing is swept from its shard.
//! 2. **Cut first, then remove.** A cut appends a `pruned` record (the last record removed
//!    and its hash, durable) before it removes anything, so the chain stays verifiable: the
//!    first record kept names that hash as its `prev`, and [`Journal::verify`] checks it. The
//!    workspace snapshots the removed `snapshot_taken` records name are removed next (through
//!    [`SnapshotStore`]), then the records, then the session's metadata when it went whole.
//! 3. **Mark.** Every string of 64 hex digits in every record that remains, in every shard
//!    (live ones read from a copy), and in every recovery marker beside them, is a mark; a
//!    change set's parts are read and the contents their entries name are marked; a marked
//!    chunked blob marks its chunks.
//! 4. **Sweep.** In the shards this run holds, every blob (`blobs`, `chunked`) and object file
//!    that is not marked goes. In the shard of the running aido that calls it at start, what
//!    that process stored since it opened the journal is pinned ([`crate::PinGuard`]) and
//!    stays.
//! 5. **Audit files** quiet for [`AUDIT_QUIET_MS`] lose the lines of records the journal no
//!    longer holds (removed by this run or an earlier one); a file left empty goes.
//! 6. **Compaction.** sled does not give deleted space back at once; a shard this run holds
//!    is copied into a fresh database under its lock and swapped in with one
//!    `renameat2(RENAME_EXCHANGE)` (see `compact`).
//! 7. **Journal it.** A `collected` record in a session of its own says what went.
//!
//! `--dry-run` does 1 and counts 3 and 4, changing nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::record::{Collected, SessionId, Skipped};

/// Reading a shard's audit files and leaving out the lines of removed records.
mod audit;
/// Copying a shard into a fresh database and swapping it in.
mod compact;
/// Retention's errors and the codes of what it leaves alone.
mod error;
/// What a record names: blobs, change-set parts, and what the parts name.
mod mark;
/// Which sessions go, whole or cut.
mod plan;
/// Removing records: whole sessions and cuts.
mod prune;
/// The run: open, plan, prune, mark, sweep, compact, journal.
mod run;
/// Reading every session of every shard.
mod scan;
/// Removing what nothing marks.
mod sweep;
/// What takes the space (`aido du`).
mod usage;

#[cfg(test)]
mod tests;

pub use error::{Kept, RetentionError};
pub use run::collect;
pub use usage::{KindBytes, SessionUsage, Usage, disk_bytes, usage};

/// A session that has not ended is treated as live (never touched) until it has been quiet
/// this long: it may belong to an aido that still runs, or to one that crashed a moment ago.
pub const LIVE_QUIET_MS: u64 = 24 * 60 * 60 * 1000;

/// An audit file appended to within this long is left whole: a running aido may still be
/// writing it (a day's file is appended to only during that UTC day).
pub const AUDIT_QUIET_MS: u64 = 48 * 60 * 60 * 1000;

/// Most sessions a `collected` record lists by id (the count is always whole).
pub const COLLECTED_SESSIONS_LISTED_MAX: usize = 64;

/// Most distinct hashes one run marks (about 50 bytes each in memory). A journal holding more
/// is refused with `retention_marks_max` before anything is removed.
pub const MARKS_MAX: usize = 16 << 20;

/// What goes. Every rule given applies; a session any of them picks goes (unless it is live
/// or damaged).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Rules {
    /// Records older than this many milliseconds before `now_ms` go: whole sessions whose
    /// last record is that old, and the older records (to an action boundary) of sessions
    /// that started before then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub older_than_ms: Option<u64>,
    /// The same, with the cut-off given as a time (milliseconds since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_ms: Option<u64>,
    /// The most bytes the journal, its audit files and the sessions' snapshots may take:
    /// the oldest sessions go, whole, until what they alone hold brings it under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// The most sessions kept: the oldest beyond it go, whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_sessions: Option<u64>,
}

impl Rules {
    /// True when no rule is given (nothing would be planned).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The age cut-off at `now_ms`: records before it go.
    pub fn cutoff_ms(&self, now_ms: u64) -> Option<u64> {
        let by_age = self.older_than_ms.map(|age| now_ms.saturating_sub(age));
        match (by_age, self.before_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

/// How a run goes.
#[derive(Clone, Debug)]
pub struct Options {
    /// The rules.
    pub rules: Rules,
    /// Now, milliseconds since the epoch (from the caller's clock).
    pub now_ms: u64,
    /// Plan and count only; change nothing.
    pub dry_run: bool,
    /// Compact the shards this run holds after removing from them.
    pub compact: bool,
    /// What runs it, for the `collected` record (`aido gc`, `aido mcp`).
    pub trigger: String,
    /// The session the `collected` record is journaled in (a fresh id from the caller's
    /// clock), and the aido version that writes it.
    pub session: SessionId,
    /// The aido version, for that session's start.
    pub runtime: String,
}

/// Where an `AIDO_HOME` keeps what retention reads and removes.
#[derive(Clone, Debug)]
pub struct Paths {
    /// `AIDO_HOME/journal`: the shards.
    pub journal: PathBuf,
    /// `AIDO_HOME/audit`: the audit files.
    pub audit: PathBuf,
}

impl Paths {
    /// The paths of `home`.
    pub fn of(home: &Path) -> Self {
        Self {
            journal: home.join("journal"),
            audit: crate::dir::audit_dir(home),
        }
    }
}

/// A workspace snapshot, as the `snapshot_taken` record that catalogues it names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SnapshotRef {
    /// The session that took it.
    pub session: SessionId,
    /// The `snapshot_taken` record's seq.
    pub seq: u64,
    /// The snapshot id.
    pub snapshot: String,
    /// Its backend (`btrfs_subvolume`, `reflink`, `copy`).
    pub backend: String,
    /// The workspace it is of.
    pub workspace: String,
}

/// The workspace snapshot store, as retention needs it (the journal crate does not depend on
/// the snapshot store; the binary lends it).
pub trait SnapshotStore {
    /// Remove a snapshot whose record went; the bytes on disk it gave back. An error is a code
    /// and a message; the snapshot is then reported as kept.
    fn remove(&self, snapshot: &SnapshotRef) -> Result<u64, (String, String)>;
    /// The bytes on disk each of these snapshots holds alone (by id; a snapshot that cannot
    /// be measured is left out).
    fn usage(&self, snapshots: &[SnapshotRef]) -> HashMap<String, u64>;
}

/// A store that holds no snapshots (tests, and callers without one).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoSnapshots;

impl SnapshotStore for NoSnapshots {
    fn remove(&self, _: &SnapshotRef) -> Result<u64, (String, String)> {
        Ok(0)
    }
    fn usage(&self, _: &[SnapshotRef]) -> HashMap<String, u64> {
        HashMap::new()
    }
}

/// What a run removed (or, dry, would remove).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Nothing was changed.
    pub dry_run: bool,
    /// The sessions that went, whole or cut.
    pub sessions: Vec<Planned>,
    /// The counts, as the `collected` record keeps them (`bytes_freed` measured).
    pub summary: Collected,
    /// Bytes on disk of `AIDO_HOME/journal` before and after.
    pub journal_bytes_before: u64,
    /// After.
    pub journal_bytes_after: u64,
    /// Bytes on disk of `AIDO_HOME/audit` before.
    pub audit_bytes_before: u64,
    /// After.
    pub audit_bytes_after: u64,
    /// Bytes the snapshots removed gave back (some live beside their workspaces).
    pub snapshot_bytes_freed: u64,
    /// Shards compacted, with their sizes.
    pub compacted: Vec<Compacted>,
    /// The `collected` record's session, when it was journaled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journaled_in: Option<SessionId>,
}

/// A session a run removed or cut.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Planned {
    /// The session.
    pub session: SessionId,
    /// Its shard's directory.
    pub shard: String,
    /// `remove` (whole) or `cut` (its older records).
    pub action: &'static str,
    /// For a cut: the last record removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub through_seq: Option<u64>,
    /// Records removed.
    pub records: u64,
    /// Bytes of those records (as stored).
    pub record_bytes: u64,
    /// The rule that picked it: `older_than`, `keep_sessions`, `max_bytes`, or `unfinished`
    /// (a cut an earlier run recorded and did not finish).
    pub rule: &'static str,
    /// When its last record was written.
    pub last_ms: u64,
}

/// A shard compacted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Compacted {
    /// Its directory.
    pub shard: String,
    /// Bytes on disk before.
    pub bytes_before: u64,
    /// After.
    pub bytes_after: u64,
}

/// A skip entry with its code.
pub(crate) fn skipped(what: impl Into<String>, kept: Kept, detail: impl Into<String>) -> Skipped {
    Skipped {
        what: what.into(),
        code: kept.code().to_owned(),
        detail: detail.into(),
    }
}

/// Parse an age such as `30d`, `12h`, `90m`, `45s` or `500ms` into milliseconds.
pub fn parse_age(text: &str) -> Result<u64, RetentionError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let bad = || RetentionError::ArgumentInvalid {
        argument: "older_than".into(),
        why: format!("{text:?} is not an age like 30d, 12h, 90m or 45s"),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => return Err(bad()),
    };
    n.checked_mul(unit_ms).ok_or_else(bad)
}

/// Parse a size such as `10G`, `512M`, `64KiB` or `1000` (bytes).
pub fn parse_bytes(text: &str) -> Result<u64, RetentionError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let bad = || RetentionError::ArgumentInvalid {
        argument: "max_bytes".into(),
        why: format!("{text:?} is not a size like 10G, 512M or 64K"),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let unit = unit.to_ascii_uppercase();
    let shift = match unit.trim_end_matches("IB").trim_end_matches('B') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

/// Bytes as people read them (`1.5 GiB`).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod parsing {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn ages_and_sizes_parse_and_bad_ones_are_coded() {
        assert_eq!(parse_age("30d").unwrap(), 30 * 86_400_000);
        assert_eq!(parse_age("12h").unwrap(), 12 * 3_600_000);
        assert_eq!(parse_age("0s").unwrap(), 0);
        assert_eq!(parse_age("250ms").unwrap(), 250);
        assert_eq!(parse_bytes("10G").unwrap(), 10 << 30);
        assert_eq!(parse_bytes("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_bytes("1000").unwrap(), 1000);
        for bad in ["", "d", "30", "30y", "-1d", "99999999999999999999d"] {
            assert_eq!(
                parse_age(bad).unwrap_err().code(),
                "retention_argument_invalid",
                "{bad:?}"
            );
        }
        for bad in ["", "G", "10X", "99999999999T"] {
            assert_eq!(
                parse_bytes(bad).unwrap_err().code(),
                "retention_argument_invalid",
                "{bad:?}"
            );
        }
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
    }

    #[test]
    fn the_cutoff_is_the_later_of_age_and_time() {
        let rules = Rules {
            older_than_ms: Some(10),
            before_ms: Some(95),
            ..Rules::default()
        };
        assert_eq!(rules.cutoff_ms(100), Some(95));
        assert_eq!(Rules::default().cutoff_ms(100), None);
        assert!(Rules::default().is_empty());
    }
}
