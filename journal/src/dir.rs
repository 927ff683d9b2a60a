//! Journals under `AIDO_HOME/journal/`. The first aido process takes `main`; a second one
//! started on the same `AIDO_HOME` (two MCP clients at once) takes `shard-2`, and so on up to
//! [`SHARDS_MAX`](crate::dir::SHARDS_MAX). Session ids are unique across shards, so readers
//! simply look in all of them.

use std::path::{Path, PathBuf};

use crate::error::{OpenError, ReadError};
use crate::journal::{CommitMode, Journal, Limits, SessionSummary};
use crate::record::SessionId;

/// Most journals (concurrent aido processes) one `AIDO_HOME` holds.
pub const SHARDS_MAX: usize = 8;

/// The directory of shard `n` (1 is `main`).
pub fn shard_path(dir: &Path, n: usize) -> PathBuf {
    if n == 1 {
        dir.join("main")
    } else {
        dir.join(format!("shard-{n}"))
    }
}

/// Every shard directory under `dir` that exists, in order (`main` first).
pub fn shard_paths(dir: &Path) -> Result<Vec<PathBuf>, OpenError> {
    let mut out = Vec::new();
    for n in 1..=SHARDS_MAX {
        let path = shard_path(dir, n);
        let exists = path.try_exists().map_err(|source| OpenError::Unreadable {
            path: path.display().to_string(),
            source,
        })?;
        if exists {
            out.push(path);
        }
    }
    Ok(out)
}

/// Where the recovery markers of the journal at `journal` live: beside it, in
/// `<journal>.recovery` (`journal/main.recovery`), so another aido on the same `AIDO_HOME`
/// never sees them.
pub fn recovery_dir(journal: &Path) -> PathBuf {
    let name = journal
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "journal".into());
    journal.with_file_name(format!("{name}.recovery"))
}

/// Where the audit files of `home` are: `AIDO_HOME/audit/YYYY-MM-DD.jsonl`, one line per
/// record (written by `aido serve`'s feed, read by retention).
pub fn audit_dir(home: &Path) -> PathBuf {
    home.join("audit")
}

/// Open the first journal under `dir` that no other process holds.
pub fn open_writer(dir: &Path, limits: Limits, mode: CommitMode) -> Result<Journal, OpenError> {
    let mut last = None;
    for n in 1..=SHARDS_MAX {
        match Journal::open(&shard_path(dir, n), limits, mode) {
            Ok(j) => return Ok(j),
            Err(e @ OpenError::Locked { .. }) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or(OpenError::Locked {
        path: dir.display().to_string(),
    }))
}

/// Every journal under `dir`, for reading (live ones are read from a copy).
pub fn open_readers(dir: &Path) -> Result<Vec<Journal>, OpenError> {
    // `exists` says "no" when it cannot tell; a shard we cannot look at is an error (from
    // `shard_paths`), not an absent one whose sessions silently go missing.
    shard_paths(dir)?
        .iter()
        .map(|path| Journal::open_read_only(path))
        .collect()
}

/// All sessions in all journals, oldest first.
pub fn sessions(journals: &[Journal]) -> Result<Vec<SessionSummary>, ReadError> {
    let mut all = Vec::new();
    for j in journals {
        all.extend(j.sessions()?);
    }
    all.sort_by_key(|s| (s.started_ms, s.id));
    Ok(all)
}

/// The journal holding the session with this id or unique id prefix.
pub fn find<'a>(
    journals: &'a [Journal],
    prefix: &str,
) -> Result<(&'a Journal, SessionId), ReadError> {
    let mut found = Vec::new();
    for j in journals {
        match j.find_session(prefix) {
            Ok(id) => found.push((j, id)),
            Err(ReadError::NoSuchSession(_)) => {}
            Err(e) => return Err(e),
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(ReadError::NoSuchSession(prefix.to_owned())),
        _ => Err(ReadError::AmbiguousSession(prefix.to_owned())),
    }
}
