//! Expanding deny globs over a large tree once, and then only what changed.
//!
//! A relative deny glob such as `**/.ssh/**` applies under every writable root, and hiding its
//! matches means finding them all: a walk of the whole root. A home directory with a Rust
//! toolchain holds a few hundred thousand entries, half a second of `readdir`, far too slow to
//! pay on every command. The [`GlobIndex`] keeps, per glob set, each directory it walked and
//! what it found there, and learns what changed since in one of two ways:
//!
//! - **inotify** (the normal case): each directory read gets a watch first (create, delete,
//!   move in or out, its own deletion or move). Events are queued by the kernel before the
//!   system call that made the change returns, so draining the queue at the start of an
//!   expansion sees every change made before it; a directory with no event since it was read
//!   is reused without even a `stat`. A queue overflow or a change of the mount table makes
//!   every directory suspect again (checked by `stat`, below).
//! - **stamps** (a directory without a watch: inotify missing, the watch limit reached, or a
//!   suspect one): each directory is `stat`ed and read again only if its stamp (device, inode,
//!   modification time) changed, since creating, removing or renaming an entry changes its
//!   directory's time and a glob only ever matches names. As git's index does with "racily
//!   clean" entries, a directory modified within [`RACY_WINDOW`] of being read is read again
//!   next time, since a change in the same clock tick would leave its time unchanged.
//!
//! Either way the answer is the one a full walk would give; only the cost differs.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::hash::{Hash, Hasher};
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

use crate::error::SpawnError;

/// Directory entries one deny glob may visit while it is expanded (a walk this large is
/// refused: the command does not run).
pub(crate) const DENY_WALK_ENTRIES_MAX: usize = 4_000_000;

/// A directory modified this recently when it was read is read again on the next expansion
/// (when it has no watch).
pub(crate) const RACY_WINDOW: Duration = Duration::from_secs(2);

/// Set once a process says it runs a single command and exits (`aido exec`).
static SINGLE_COMMAND: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Says that this process runs a single command and exits (`aido exec`): deny globs are then
/// expanded without inotify watches (nothing is read twice), and nothing is expanded ahead of
/// the command. Call it before the first command.
pub fn set_single_command() {
    SINGLE_COMMAND.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether [`set_single_command`] was called.
pub fn single_command() -> bool {
    SINGLE_COMMAND.load(std::sync::atomic::Ordering::Relaxed)
}

/// What one directory held when it was read.
#[derive(Debug)]
struct Dir {
    stamp: Stamp,
    /// Read within [`RACY_WINDOW`] of its last change: not trusted by its stamp next time.
    racy: bool,
    /// Its inotify watch, added before it was read.
    watch: Option<WatchDescriptor>,
    /// The generation of the expansion that last read or checked it.
    seen: u64,
    /// Read in the current expansion: its subdirectories are confirmed by `stat`.
    fresh: bool,
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
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    trees: HashMap<TreeKey, Option<Dir>>,
    /// `None` before the first expansion; `Some(None)` when inotify is not available.
    watch: Option<Option<Watch>>,
    /// The current expansion's generation (starts at 1).
    generation: u64,
}

#[derive(Debug)]
struct Watch {
    inotify: Inotify,
    /// Per watch, the generation in which its latest event was drained.
    changed: HashMap<WatchDescriptor, u64>,
    /// Every directory read before this generation is suspect (a queue overflow, a mount).
    suspect_before: u64,
    /// A hash of `/proc/self/mountinfo` at the last expansion.
    mounts: u64,
}

/// A literal prefix and the globs walked under it.
type TreeKey = (PathBuf, Vec<String>);

/// What one expansion cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpandStats {
    /// Directories read with `readdir`.
    pub read: usize,
    /// Directories reused after a `stat` showed their stamp unchanged.
    pub reused: usize,
    /// Directories reused with no system call: watched, and no event since they were read.
    pub watched: usize,
}

struct Walk<'a> {
    set: &'a globset::GlobSet,
    watch: Option<&'a mut Watch>,
    generation: u64,
    stats: ExpandStats,
    visited: usize,
    found: Vec<PathBuf>,
    now: SystemTime,
}

const WATCHED: WatchMask = WatchMask::CREATE
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::ONLYDIR)
    .union(WatchMask::DONT_FOLLOW);

impl Watch {
    fn new() -> Option<Watch> {
        Some(Watch {
            inotify: Inotify::init().ok()?,
            changed: HashMap::new(),
            suspect_before: 0,
            mounts: mount_table(),
        })
    }

    /// Takes every queued event, marking its directory changed in `generation`.
    fn drain(&mut self, generation: u64) {
        let mut buffer = [0u8; 16 << 10];
        loop {
            match self.inotify.read_events(&mut buffer) {
                Ok(events) => {
                    let mut any = false;
                    for event in events {
                        any = true;
                        if event.mask.contains(EventMask::Q_OVERFLOW) {
                            self.suspect_before = generation;
                        } else {
                            self.changed.insert(event.wd, generation);
                        }
                    }
                    if !any {
                        break;
                    }
                }
                Err(error) if error.kind() == ErrorKind::WouldBlock => break,
                Err(_) => {
                    // An unreadable queue says nothing: trust no watch.
                    self.suspect_before = generation;
                    break;
                }
            }
        }
        let mounts = mount_table();
        if mounts != self.mounts {
            // A mount over a watched directory sends no event.
            self.mounts = mounts;
            self.suspect_before = generation;
        }
    }

    /// No event reached `dir`'s watch since it was read.
    fn unchanged(&self, dir: &Dir) -> bool {
        match &dir.watch {
            None => false,
            Some(watch) => {
                dir.seen >= self.suspect_before
                    && self.changed.get(watch).is_none_or(|at| *at <= dir.seen)
            }
        }
    }

    /// `dir`'s watch had an event since it was read.
    fn evented(&self, dir: &Dir) -> bool {
        dir.watch
            .as_ref()
            .and_then(|watch| self.changed.get(watch))
            .is_some_and(|at| *at > dir.seen)
    }
}

/// A hash of this process's mount table (0 when it cannot be read, which then never changes).
fn mount_table() -> u64 {
    let text = std::fs::read("/proc/self/mountinfo").unwrap_or_default();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

impl GlobIndex {
    /// The existing paths matching any of the absolute globs (matches are not descended).
    /// Globs sharing a literal prefix (`$HOME` for `$HOME/**/.ssh` and `$HOME/**/.env`,
    /// once expanded) share one walk.
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
        let mut state = self
            .state
            .lock()
            .map_err(|_| SpawnError::invalid("the deny glob index was poisoned by a panic"))?;
        let state = &mut *state;
        if groups.is_empty() {
            return Ok((Vec::new(), ExpandStats::default()));
        }
        state.generation += 1;
        let generation = state.generation;
        // A process that runs one command never reads again what it read: no watches (and
        // closing an inotify instance that holds watches waits for an SRCU grace period, ~20 ms
        // here, at that process's exit).
        let mut watch = if single_command() {
            None
        } else {
            state.watch.get_or_insert_with(Watch::new).as_mut()
        };
        if let Some(watch) = watch.as_deref_mut() {
            watch.drain(generation);
        }
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
            let known = state.trees.remove(&key).flatten();
            let mut walk = Walk {
                set: &set,
                watch: watch.as_deref_mut(),
                generation,
                stats: ExpandStats::default(),
                visited: 0,
                found: Vec::new(),
                now: SystemTime::now(),
            };
            let mut path = key.0.clone();
            let tree = walk.directory(&mut path, known, true)?;
            stats.read += walk.stats.read;
            stats.reused += walk.stats.reused;
            stats.watched += walk.stats.watched;
            found.append(&mut walk.found);
            state.trees.insert(key, tree);
        }
        found.sort();
        found.dedup();
        Ok((found, stats))
    }
}

impl Walk<'_> {
    /// The directory at `path` (as known before, if it was), walked; `None` when it is not a
    /// directory (any more). `check`: its parent was read again (or it is the top), so what
    /// is known of it is confirmed by a `stat` at least.
    fn directory(
        &mut self,
        path: &mut PathBuf,
        known: Option<Dir>,
        check: bool,
    ) -> Result<Option<Dir>, SpawnError> {
        let mut dir = match known {
            Some(mut known)
                if !check && self.watch.as_deref().is_some_and(|w| w.unchanged(&known)) =>
            {
                self.stats.watched += 1;
                known.seen = self.generation;
                known
            }
            known => {
                let evented = known
                    .as_ref()
                    .is_some_and(|k| self.watch.as_deref().is_some_and(|w| w.evented(k)));
                // The watch first, so a change after this point is an event.
                let watch = self
                    .watch
                    .as_deref_mut()
                    .and_then(|w| w.inotify.watches().add(&*path, WATCHED).ok());
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
                match known {
                    Some(mut known) if !evented && known.stamp == stamp && !known.racy => {
                        self.stats.reused += 1;
                        known.watch = watch;
                        known.seen = self.generation;
                        known
                    }
                    known => {
                        self.stats.read += 1;
                        self.read(path, stamp, known, watch)
                    }
                }
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
            *child = self.directory(path, child.take(), dir.fresh)?;
            path.pop();
        }
        dir.fresh = false;
        Ok(Some(dir))
    }

    /// Reads `path` afresh, keeping what was known of subdirectories that are still there.
    fn read(
        &self,
        path: &Path,
        stamp: Stamp,
        known: Option<Dir>,
        watch: Option<WatchDescriptor>,
    ) -> Dir {
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
            watch,
            seen: self.generation,
            fresh: true,
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

    impl GlobIndex {
        /// An index that never watches: every directory is checked by its stamp.
        fn stamps_only() -> Self {
            GlobIndex {
                state: Mutex::new(State {
                    watch: Some(None),
                    ..State::default()
                }),
            }
        }
    }

    /// What a second and later expansions cost, with watches (`watched`) or by stamps.
    fn reads_only_what_changed(index: GlobIndex, watched: bool) {
        let root = tempfile::tempdir().unwrap();
        let base = root.path();
        for dir in ["a/b/c", "a/d", "e/.ssh", "f"] {
            std::fs::create_dir_all(base.join(dir)).unwrap();
        }
        std::fs::write(base.join("a/b/c/key"), "x").unwrap();
        for dir in ["", "a", "a/b", "a/b/c", "a/d", "e", "f"] {
            old(&base.join(dir));
        }
        let pattern = base.join("**/.ssh");
        let expand = || index.expand(std::slice::from_ref(&pattern)).unwrap();
        let unchanged = |n: usize| {
            if watched {
                // The top of the walk is always checked by its stamp.
                ExpandStats {
                    read: 0,
                    reused: 1,
                    watched: n - 1,
                }
            } else {
                ExpandStats {
                    read: 0,
                    reused: n,
                    watched: 0,
                }
            }
        };
        let (first, stats) = expand();
        assert_eq!(first, vec![base.join("e/.ssh")]);
        assert_eq!(
            stats,
            ExpandStats {
                read: 7,
                ..ExpandStats::default()
            }
        );

        let (again, stats) = expand();
        assert_eq!(again, first);
        assert_eq!(stats, unchanged(7));

        // A new match deep in the tree: only its parent directory changed.
        std::fs::create_dir(base.join("a/b/c/.ssh")).unwrap();
        let (after, stats) = expand();
        assert_eq!(after, vec![base.join("a/b/c/.ssh"), base.join("e/.ssh")]);
        assert_eq!(
            stats,
            ExpandStats {
                read: 1,
                ..unchanged(6)
            }
        );
        // Just changed: without a watch it is racy, read again next time though its stamp is
        // the same; a watch says nothing happened since.
        let (_, stats) = expand();
        assert_eq!(stats.read, usize::from(!watched));

        // A renamed directory moves its matches with it.
        old(&base.join("a/b/c"));
        std::fs::rename(base.join("a/b"), base.join("f/b")).unwrap();
        let (moved, _) = expand();
        assert_eq!(moved, vec![base.join("e/.ssh"), base.join("f/b/c/.ssh")]);
        // A removed match is gone.
        std::fs::remove_dir(base.join("e/.ssh")).unwrap();
        let (removed, _) = expand();
        assert_eq!(removed, vec![base.join("f/b/c/.ssh")]);
        // A directory removed and made again under the same name is read afresh.
        std::fs::remove_dir_all(base.join("f/b")).unwrap();
        std::fs::create_dir_all(base.join("f/b/c/.ssh")).unwrap();
        std::fs::create_dir_all(base.join("f/b/x/.ssh")).unwrap();
        let (remade, _) = expand();
        assert_eq!(
            remade,
            vec![base.join("f/b/c/.ssh"), base.join("f/b/x/.ssh")]
        );
    }

    #[test]
    fn with_watches_a_second_expansion_reads_only_what_changed() {
        reads_only_what_changed(GlobIndex::default(), true);
    }

    #[test]
    fn by_stamps_a_second_expansion_reads_only_what_changed() {
        reads_only_what_changed(GlobIndex::stamps_only(), false);
    }

    #[test]
    fn the_answer_equals_a_fresh_walk_after_random_changes() {
        random_changes(GlobIndex::default());
        random_changes(GlobIndex::stamps_only());
    }

    fn random_changes(index: GlobIndex) {
        let root = tempfile::tempdir().unwrap();
        let base = root.path();
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
