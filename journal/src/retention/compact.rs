//! Compaction: sled gives the space of removed keys back only as it rewrites its segments, so
//! a shard this run holds is copied, tree by tree, into a fresh database beside it
//! (`<shard>.compact`) and swapped in:
//!
//! 1. the copy is made while the shard is open (this run holds its lock), flushed and
//!    closed, and its `db` file is locked (`flock`, as sled locks it);
//! 2. the shard is closed and its `db` file locked again by this run, then checked unchanged
//!    since the close (another aido that took it in between makes the run give up);
//! 3. `renameat2(RENAME_EXCHANGE)` swaps the two directories in one step, so the shard's path
//!    never names nothing (an aido starting then finds the new database, locked by this run,
//!    and takes another shard);
//! 4. the old database is removed.
//!
//! A crash leaves a `<shard>.compact` directory (a half copy, or the old database after the
//! swap); the next run removes it before compacting.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::scan::Shard;
use super::{Compacted, usage::disk_bytes};

/// Longest the run waits for sled to let go of a database it closed.
const COMPACT_LOCK_WAIT_MS: u64 = 5000;

/// Keys copied between flushes of the new database.
const COPY_STEP_KEYS: usize = 16_384;

/// The directory a compaction of `shard` copies into.
pub(crate) fn compact_dir(shard: &Path) -> PathBuf {
    let name = shard
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "journal".into());
    shard.with_file_name(format!("{name}.compact"))
}

fn lock(path: &Path, wait: Duration) -> Result<File, String> {
    let file = File::open(path).map_err(|e| format!("open {}: {e}", path.display()))?;
    let deadline = Instant::now() + wait;
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(file),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("lock {}: {e}", path.display()));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn stamp(path: &Path) -> Option<(u64, std::time::SystemTime)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

fn copy(source: &sled::Db, target: &sled::Db) -> Result<(), String> {
    let failed = |e: sled::Error| e.to_string();
    for name in source.tree_names() {
        let (from, to) = if name.as_ref() == b"__sled__default" {
            (
                std::ops::Deref::deref(source).clone(),
                std::ops::Deref::deref(target).clone(),
            )
        } else {
            (
                source.open_tree(&name).map_err(failed)?,
                target.open_tree(&name).map_err(failed)?,
            )
        };
        let mut n = 0;
        for item in from.iter() {
            let (k, v) = item.map_err(failed)?;
            to.insert(k, v).map_err(failed)?;
            n += 1;
            if n % COPY_STEP_KEYS == 0 {
                target.flush().map_err(failed)?;
            }
        }
    }
    target.flush().map_err(failed)?;
    Ok(())
}

/// Compact a shard this run holds (it consumes the handle). On failure the shard is as it
/// was (possibly reopened by another aido) and the error says why.
pub(crate) fn compact(shard: Shard) -> Result<Compacted, String> {
    let path = shard.path.clone();
    let fresh = compact_dir(&path);
    let before = disk_bytes(&path);
    if fresh.exists() {
        std::fs::remove_dir_all(&fresh)
            .map_err(|e| format!("remove the stale {}: {e}", fresh.display()))?;
    }
    {
        let target = crate::journal::sled_config(&fresh)
            .open()
            .map_err(|e| format!("open {}: {e}", fresh.display()))?;
        let copied = copy(&shard.journal.trees().db, &target);
        drop(target);
        if let Err(e) = copied {
            let _ = std::fs::remove_dir_all(&fresh);
            return Err(format!("copy into {}: {e}", fresh.display()));
        }
    }
    let wait = Duration::from_millis(COMPACT_LOCK_WAIT_MS);
    let new_lock = match lock(&fresh.join("db"), wait) {
        Ok(f) => f,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&fresh);
            return Err(e);
        }
    };
    // Close the shard: its writer stops, sled flushes and lets go of its lock.
    drop(shard);
    let db = path.join("db");
    let closed = stamp(&db);
    let old_lock = match lock(&db, wait) {
        Ok(f) => f,
        Err(e) => {
            drop(new_lock);
            let _ = std::fs::remove_dir_all(&fresh);
            return Err(format!("another aido took the shard meanwhile ({e})"));
        }
    };
    if stamp(&db) != closed {
        drop((old_lock, new_lock));
        let _ = std::fs::remove_dir_all(&fresh);
        return Err("another aido wrote the shard meanwhile".into());
    }
    if let Err(e) = rustix::fs::renameat_with(
        rustix::fs::CWD,
        &path,
        rustix::fs::CWD,
        &fresh,
        rustix::fs::RenameFlags::EXCHANGE,
    ) {
        drop((old_lock, new_lock));
        let _ = std::fs::remove_dir_all(&fresh);
        return Err(format!(
            "swap {} and {}: {e}",
            path.display(),
            fresh.display()
        ));
    }
    // `fresh` now holds the old database, still locked by this run.
    let removed = std::fs::remove_dir_all(&fresh);
    drop((old_lock, new_lock));
    removed.map_err(|e| format!("remove the old database {}: {e}", fresh.display()))?;
    Ok(Compacted {
        shard: path.display().to_string(),
        bytes_before: before,
        bytes_after: disk_bytes(&path),
    })
}
