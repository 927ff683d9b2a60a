//! Expanding deny globs over a large tree once, and then only what changed.
//!
//! A relative deny glob such as `**/.ssh/**` applies under every writable root, and hiding its
//! matches means finding them all: a walk of the whole root. A home directory with a Rust
//! toolchain holds a few hundred thousand entries, half a second of `readdir`, far too slow to
//! pay on every command. The [`GlobIndex`] keeps, per glob, each directory it walked with the
//! stamp it had (device, inode, modification time) and what it found there. The next expansion
//! `stat`s each directory again and reads only those whose stamp changed: creating, removing or
//! renaming an entry changes its directory's modification time, and a glob only ever matches
//! names. It fails closed the way git's index does with "racily clean" entries: a directory
//! modified within [`RACY_WINDOW`] of being read is read again next time, since a change in the
//! same clock tick would leave its time unchanged. The answer is always the one a full walk
//! would give; only the cost differs.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::SpawnError;

/// Directory entries one deny glob may visit while it is expanded (a walk this large is
/// refused: the command does not run).
pub(crate) const DENY_WALK_ENTRIES_MAX: usize = 4_000_000;

/// A directory modified this recently when it was read is read again on the next expansion.
pub(crate) const RACY_WINDOW: Duration = Duration::from_secs(2);

/// What one directory held when it was read.
#[derive(Debug)]
struct Dir {
    stamp: Stamp,
    /// Read within [`RACY_WINDOW`] of its last change: not trusted next time.
    racy: bool,
    /// Entries it holds (counted against [`DENY_WALK_ENTRIES_MAX`] whether read or reused).
    entries: usize,
    /// Subdirectories that match no glob, by name (walked further).
    descend: Vec<(OsString, Option<Dir>)>,
    /// Names of entries that match (not descended into: hiding one hides everything below).
    matches: Vec<OsString>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mtime: i64,
    mtime_nsec: i64,
}

/// Expansions of deny globs, kept between commands (shared by every clone of a
/// [`crate::Sandbox`]): one tree per literal prefix and set of globs under it.
#[derive(Debug, Default)]
pub struct GlobIndex {
    trees: Mutex<HashMap<TreeKey, Option<Dir>>>,
}

/// A literal prefix and the globs walked under it.
type TreeKey = (PathBuf, Vec<String>);

/// What one expansion cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpandStats {
    /// Directories read with `readdir`.
    pub read: usize,
    /// Directories reused from the index after a `stat`.
    pub reused: usize,
}

struct Walk<'a> {
    set: &'a globset::GlobSet,
    stats: ExpandStats,
    visited: usize,
    found: Vec<PathBuf>,
    now: SystemTime,
}

impl GlobIndex {
    /// The existing paths matching any of the absolute globs (matches are not descended).
    /// Globs sharing a literal prefix (`/home/me` for `/home/me/**/.ssh` and
    /// `/home/me/**/.env`) share one walk.
    pub(crate) fn expand(
        &self,
        patterns: &[PathBuf],
    ) -> Result<(Vec<PathBuf>, ExpandStats), SpawnError> {
        let mut groups: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
        for pattern in patterns {
            let mut prefix = PathBuf::new();
            for component in pattern.components() {
                if crate::plan::is_glob(Path::new(component.as_os_str())) {
                    break;
                }
                prefix.push(component);
            }
            groups
                .entry(prefix)
                .or_default()
                .push(pattern.to_string_lossy().into_owned());
        }
        let mut trees = self
            .trees
            .lock()
            .map_err(|_| SpawnError::invalid("the deny glob index was poisoned by a panic"))?;
        let mut found = Vec::new();
        let mut stats = ExpandStats::default();
        for (prefix, mut texts) in groups {
            texts.sort();
            texts.dedup();
            let mut builder = globset::GlobSetBuilder::new();
            for text in &texts {
                builder.add(
                    globset::GlobBuilder::new(text)
                        .literal_separator(true)
                        .build()
                        .map_err(|error| {
                            SpawnError::invalid(format!("deny glob {text:?}: {error}"))
                        })?,
                );
            }
            let set = builder
                .build()
                .map_err(|error| SpawnError::invalid(format!("deny globs {texts:?}: {error}")))?;
            let key = (prefix, texts);
            let known = trees.remove(&key).flatten();
            let mut walk = Walk {
                set: &set,
                stats: ExpandStats::default(),
                visited: 0,
                found: Vec::new(),
                now: SystemTime::now(),
            };
            let mut path = key.0.clone();
            let tree = walk.directory(&mut path, known)?;
            stats.read += walk.stats.read;
            stats.reused += walk.stats.reused;
            found.append(&mut walk.found);
            trees.insert(key, tree);
        }
        found.sort();
        found.dedup();
        Ok((found, stats))
    }
}

impl Walk<'_> {
    /// The directory at `path` (as known before, if it was), walked; `None` when it is not a
    /// directory (any more).
    fn directory(
        &mut self,
        path: &mut PathBuf,
        known: Option<Dir>,
    ) -> Result<Option<Dir>, SpawnError> {
        let Ok(meta) = std::fs::metadata(&*path) else {
            return Ok(None);
        };
        if !meta.is_dir() {
            return Ok(None);
        }
        let stamp = Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            mtime: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
        };
        let mut dir = match known {
            Some(known) if known.stamp == stamp && !known.racy => {
                self.stats.reused += 1;
                known
            }
            known => {
                self.stats.read += 1;
                self.read(path, stamp, known)
            }
        };
        self.visited += dir.entries;
        if self.visited > DENY_WALK_ENTRIES_MAX {
            return Err(SpawnError::invalid(format!(
                "deny globs under {} visit more than {DENY_WALK_ENTRIES_MAX} entries",
                path.display()
            )));
        }
        for name in &dir.matches {
            self.found.push(path.join(name));
        }
        for (name, child) in &mut dir.descend {
            path.push(&*name);
            *child = self.directory(path, child.take())?;
            path.pop();
        }
        Ok(Some(dir))
    }

    /// Reads `path` afresh, keeping what was known of subdirectories that are still there.
    fn read(&self, path: &Path, stamp: Stamp, known: Option<Dir>) -> Dir {
        let modified = UNIX_EPOCH
            + Duration::new(
                u64::try_from(stamp.mtime).unwrap_or(0),
                u32::try_from(stamp.mtime_nsec).unwrap_or(0),
            );
        // A time in the future counts as racy too.
        let racy = self
            .now
            .duration_since(modified)
            .map_or(true, |age| age < RACY_WINDOW);
        let mut before: HashMap<OsString, Dir> = known
            .map(|known| {
                known
                    .descend
                    .into_iter()
                    .filter_map(|(name, child)| child.map(|child| (name, child)))
                    .collect()
            })
            .unwrap_or_default();
        let mut dir = Dir {
            stamp,
            racy,
            entries: 0,
            descend: Vec::new(),
            matches: Vec::new(),
        };
        // An unreadable directory is as unreadable to the command (same user): nothing to hide.
        let Ok(entries) = std::fs::read_dir(path) else {
            return dir;
        };
        for entry in entries.flatten() {
            dir.entries += 1;
            let name = entry.file_name();
            let Ok(file_type) = entry.file_type() else {
                continue;
            };
            if self.set.is_match(path.join(&name)) {
                dir.matches.push(name);
            } else if file_type.is_dir() {
                let child = before.remove(&name);
                dir.descend.push((name, child));
            }
        }
        dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn old(path: &Path) {
        let file = std::fs::File::open(path).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(60))
            .unwrap();
    }

    #[test]
    fn a_second_expansion_reads_only_what_changed_and_finds_new_matches() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path();
        for dir in ["a/b/c", "a/d", "e/.ssh", "f"] {
            std::fs::create_dir_all(base.join(dir)).unwrap();
        }
        std::fs::write(base.join("a/b/c/key"), "x").unwrap();
        for dir in ["", "a", "a/b", "a/b/c", "a/d", "e", "f"] {
            old(&base.join(dir));
        }
        let index = GlobIndex::default();
        let pattern = base.join("**/.ssh");
        let (first, stats) = index.expand(std::slice::from_ref(&pattern)).unwrap();
        assert_eq!(first, vec![base.join("e/.ssh")]);
        assert_eq!(stats, ExpandStats { read: 7, reused: 0 });

        let (again, stats) = index.expand(std::slice::from_ref(&pattern)).unwrap();
        assert_eq!(again, first);
        assert_eq!(stats, ExpandStats { read: 0, reused: 7 });

        // A new match deep in the tree: only its parent directory changed.
        std::fs::create_dir(base.join("a/b/c/.ssh")).unwrap();
        let (after, stats) = index.expand(std::slice::from_ref(&pattern)).unwrap();
        assert_eq!(after, vec![base.join("a/b/c/.ssh"), base.join("e/.ssh")]);
        assert_eq!(stats, ExpandStats { read: 1, reused: 6 });
        // Just changed, so racy: read again next time even though its stamp is the same.
        let (_, stats) = index.expand(std::slice::from_ref(&pattern)).unwrap();
        assert_eq!(stats.read, 1);

        // A renamed directory moves its matches with it.
        old(&base.join("a/b/c"));
        std::fs::rename(base.join("a/b"), base.join("f/b")).unwrap();
        let (moved, _) = index.expand(std::slice::from_ref(&pattern)).unwrap();
        assert_eq!(moved, vec![base.join("e/.ssh"), base.join("f/b/c/.ssh")]);
        // A removed match is gone.
        std::fs::remove_dir(base.join("e/.ssh")).unwrap();
        let (removed, _) = index.expand(std::slice::from_ref(&pattern)).unwrap();
        assert_eq!(removed, vec![base.join("f/b/c/.ssh")]);
    }

    #[test]
    fn the_answer_equals_a_fresh_walk_after_random_changes() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path();
        let index = GlobIndex::default();
        let pattern = base.join("**/.env");
        let mut seed = 7u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            (seed >> 33) as usize
        };
        let names = ["a", "b", ".env", "c"];
        for _ in 0..200 {
            let depth = next() % 4 + 1;
            let mut path = base.to_path_buf();
            for _ in 0..depth {
                path.push(names[next() % names.len()]);
            }
            match next() % 3 {
                0 => drop(std::fs::create_dir_all(&path)),
                1 => {
                    if let Some(parent) = path.parent() {
                        drop(std::fs::create_dir_all(parent));
                    }
                    drop(std::fs::write(&path, "x"));
                }
                _ => {
                    drop(std::fs::remove_dir_all(&path));
                    drop(std::fs::remove_file(&path));
                }
            }
            let (kept, _) = index.expand(std::slice::from_ref(&pattern)).unwrap();
            let (walked, _) = GlobIndex::default()
                .expand(std::slice::from_ref(&pattern))
                .unwrap();
            assert_eq!(kept, walked);
        }
    }
}
