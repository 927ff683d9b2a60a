//! Write intents: what a write is about to do, on disk before its rename, so a kill -9 between
//! the rename and the outcome record cannot leave a change the journal does not know of.
//!
//! A mutating action's proposal is durable before it runs and its outcome before the answer;
//! between them the world changes. For restores and rewinds a marker names the steps (see
//! `recovery`). For a plain write the intent names the file, the hash of the new contents, the
//! effects the write records and, when they are small enough to travel with the record, the
//! previous contents (larger ones are already in the blob store, flushed before the rename).
//! It is written (not synced: a kill -9 loses nothing the kernel has) before the write makes
//! anything (its directories, its temporary file) and removed once the outcome is journaled. At the next start, a write whose proposal has no
//! outcome is judged by the file itself: holding the new contents, the write happened, and the
//! journal gets an `interrupted` outcome with its effects (so a rewind gives the previous
//! contents back); otherwise it never happened, and only the directories it made are recorded.
//! A temporary file the crash left is removed either way.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use aido_actions::Effect;
use aido_journal::SessionId;
use serde::{Deserialize, Serialize};

use super::error::FsError;

/// One write about to happen.
#[derive(Debug, Serialize, Deserialize)]
pub struct Intent {
    /// The file, resolved and absolute.
    pub resolved: PathBuf,
    /// The temporary file the new contents go to first (removed if a crash left it).
    pub temp: PathBuf,
    /// blake3 of the new contents.
    pub blob: String,
    /// Their length.
    pub bytes: u64,
    /// The effects the write records (the directories it made, then the file).
    pub effects: Vec<Effect>,
    /// The previous contents, base64, when they travel with the record.
    pub before: Option<String>,
}

/// Where the writes of one proposal leave their intents.
#[derive(Clone, Debug)]
pub struct Intents {
    dir: PathBuf,
}

/// The recovery markers of the journal at `journal` live beside it, in `<journal>.recovery`.
pub fn recovery_dir(journal: &Path) -> PathBuf {
    aido_journal::dir::recovery_dir(journal)
}

/// `w-<session>-<proposal>`: the folder of one proposal's intents.
const PREFIX: &str = "w-";

static NEXT: AtomicU64 = AtomicU64::new(0);

impl Intents {
    /// The intents of `proposal` in `session`, journaled in `journal`.
    pub fn of(journal: &Path, session: SessionId, proposal: u64) -> Self {
        Self {
            dir: recovery_dir(journal).join(format!("{PREFIX}{session}-{proposal}")),
        }
    }

    /// Put an intent on disk (one file, renamed into place whole).
    pub fn record(&self, intent: &Intent) -> Result<(), FsError> {
        let failed = |e: std::io::Error| FsError::KeepFailed {
            path: intent.resolved.display().to_string(),
            reason: format!(
                "cannot write the write's intent in {}: {e}",
                self.dir.display()
            ),
        };
        std::fs::create_dir_all(&self.dir).map_err(failed)?;
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("{n:020}.json"));
        let temp = path.with_extension("tmp");
        let json = serde_json::to_vec(intent).map_err(|e| failed(std::io::Error::other(e)))?;
        std::fs::write(&temp, json).map_err(failed)?;
        std::fs::rename(&temp, &path).map_err(failed)
    }

    /// Remove them: the proposal's outcome is journaled.
    pub fn clear(&self) {
        match std::fs::remove_dir_all(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::error!(dir = %self.dir.display(), error = %e, "cannot remove write intents; the next start will see the outcome and leave them be")
            }
        }
    }
}

/// A folder of intents found at start: its session and proposal, and its intents in the
/// order they were written. `None` for anything else.
pub fn read(dir: &Path) -> Option<(SessionId, u64, Vec<Intent>)> {
    let name = dir.file_name()?.to_str()?.strip_prefix(PREFIX)?;
    let (session, proposal) = name.rsplit_once('-')?;
    let (session, proposal) = (SessionId::parse(session)?, proposal.parse().ok()?);
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let intents = files
        .iter()
        .filter_map(|p| {
            let read = std::fs::read(p).ok()?;
            match serde_json::from_slice(&read) {
                Ok(intent) => Some(intent),
                Err(e) => {
                    tracing::error!(intent = %p.display(), error = %e, "an unreadable write intent");
                    None
                }
            }
        })
        .collect();
    Some((session, proposal, intents))
}

/// Remove a folder of intents found at start.
pub fn remove(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}
