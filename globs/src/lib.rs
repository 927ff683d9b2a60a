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
//!
//! An index made with [`GlobIndex::persisted`] also keeps what it walked in a file (in
//! `AIDO_HOME`, which no command sees), so a new process (`aido exec`, a restarted server)
//! starts from it and checks each directory by its stamp instead of reading the whole tree
//! again: a stat per directory instead of a `readdir` of every one. The file is only ever a
//! starting point: a directory whose stamp changed, or that was racy, is read again.
//!
//! # Example
//!
//! ```no_run
//! let index = aido_globs::GlobIndex::default();
//! let home = std::env::home_dir().unwrap_or_default();
//! // Every `.env` under the home, except under `.cache` (hidden whole by the caller).
//! let (matches, stats) = index.expand(&[home.join("**/.env")], &[home.join(".cache")])?;
//! // A second expansion reads only the directories that changed since.
//! let (again, _) = index.expand(&[home.join("**/.env")], &[home.join(".cache")])?;
//! assert_eq!(matches, again);
//! # let _ = stats;
//! # Ok::<(), aido_globs::ExpandError>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::hash::{Hash, Hasher};
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

/// Directory entries one deny glob may visit while it is expanded (a walk this large is
/// refused: the command does not run).
pub const DENY_WALK_ENTRIES_MAX: usize = 4_000_000;

/// A directory modified this recently when it was read is read again on the next expansion
/// (when it has no watch).
pub const RACY_WINDOW: Duration = Duration::from_secs(2);

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

/// Why deny globs could not be expanded (a malformed glob, a walk past
/// [`DENY_WALK_ENTRIES_MAX`], a walker that panicked): the sandbox refuses the command with it
/// (`sandbox_request_invalid`) before anything runs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct ExpandError {
    /// What went wrong.
    pub reason: String,
}

impl ExpandError {
    fn new(reason: impl Into<String>) -> Self {
        ExpandError {
            reason: reason.into(),
        }
    }
}

/// Whether `path` is a glob (has `*`, `?`, `[` or `{`) rather than a literal path.
pub fn is_glob(path: &Path) -> bool {
    path.to_string_lossy()
        .chars()
        .any(|character| matches!(character, '*' | '?' | '[' | '{'))
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
/// `aido_sandbox::Sandbox`): one tree per literal prefix and set of globs under it.
#[derive(Debug, Default)]
pub struct GlobIndex {
    state: Mutex<State>,
    /// Where the trees are kept between processes, if anywhere.
    file: Option<PathBuf>,
}

#[derive(Debug, Default)]
struct State {
    trees: HashMap<TreeKey, Option<Dir>>,
    /// The file was read (or there is none).
    loaded: bool,
    /// The next expansion's answer is to be kept for the one after ([`GlobIndex::hold_next`]).
    hold: bool,
    /// A held answer: the patterns and hidden directories it was for, and the matches.
    held: Option<Held>,
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
/// An expansion's answer kept for the next identical one: patterns, hidden, matches.
type Held = (Vec<PathBuf>, Vec<PathBuf>, Vec<PathBuf>);

/// A literal prefix, the globs walked under it, and the directories under it not walked
/// (hidden whole, so what they hold needs no search).
type TreeKey = (PathBuf, Vec<String>, Vec<PathBuf>);

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
    /// Directories not walked (sorted).
    skip: &'a [PathBuf],
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

/// What a worker of a shared walk found: its costs, the entries it visited, its matches.
type Walked = (ExpandStats, usize, Vec<PathBuf>);

/// Threads a walk without watches is shared out to: the cores, at most 4.
fn walkers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// A hash of this process's mount table (0 when it cannot be read, which then never changes).
fn mount_table() -> u64 {
    let text = std::fs::read("/proc/self/mountinfo").unwrap_or_default();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

impl GlobIndex {
    /// An index that starts from what `file` kept of an earlier process's walks, and keeps its
    /// own there (after its first expansion; in a single-command process, after each that
    /// read anything). A missing, unreadable or damaged file is a cold start.
    pub fn persisted(file: PathBuf) -> Self {
        GlobIndex {
            state: Mutex::default(),
            file: Some(file),
        }
    }

    /// In a process that runs one command: the next expansion (made ahead of the command,
    /// while the journal opens) is also the command's, if it asks for the same globs. Without
    /// watches a second expansion would `stat` every directory again; the one made ahead is
    /// as current as any expansion is when the command's mounts are made.
    pub fn hold_next(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.hold = true;
        }
    }

    /// The existing paths matching any of the absolute globs (matches are not descended).
    /// Globs sharing a literal prefix (`$HOME` for `$HOME/**/.ssh` and `$HOME/**/.env`,
    /// once expanded) share one walk. Directories in `hidden` are hidden whole by the caller,
    /// so they are not walked (aido's own home, busy with the journal, inside a user's home).
    #[allow(clippy::too_many_lines)]
    pub fn expand(
        &self,
        patterns: &[PathBuf],
        hidden: &[PathBuf],
    ) -> Result<(Vec<PathBuf>, ExpandStats), ExpandError> {
        let mut groups: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
        for pattern in patterns {
            let mut prefix = PathBuf::new();
            for component in pattern.components() {
                if is_glob(Path::new(component.as_os_str())) {
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
            .map_err(|_| ExpandError::new("the deny glob index was poisoned by a panic"))?;
        let state = &mut *state;
        if groups.is_empty() {
            return Ok((Vec::new(), ExpandStats::default()));
        }
        if let Some((for_patterns, for_hidden, found)) = state.held.take()
            && for_patterns == patterns
            && for_hidden == hidden
        {
            return Ok((found, ExpandStats::default()));
        }
        if !state.loaded {
            state.loaded = true;
            if let Some(file) = &self.file {
                state.trees = persist::load(file);
            }
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
                            ExpandError::new(format!("deny glob {text:?}: {error}"))
                        })?,
                );
            }
            let set = builder
                .build()
                .map_err(|error| ExpandError::new(format!("deny globs {texts:?}: {error}")))?;
            let mut skip: Vec<PathBuf> = hidden
                .iter()
                .filter(|dir| dir.starts_with(&prefix) && **dir != prefix)
                .cloned()
                .collect();
            skip.sort();
            skip.dedup();
            let key = (prefix, texts, skip);
            let known = state.trees.remove(&key).flatten();
            let mut walk = Walk {
                set: &set,
                skip: &key.2,
                watch: watch.as_deref_mut(),
                generation,
                stats: ExpandStats::default(),
                visited: 0,
                found: Vec::new(),
                now: SystemTime::now(),
            };
            let mut path = key.0.clone();
            // Without watches every directory costs a stat: shared out over the cores.
            let workers = if walk.watch.is_none() { walkers() } else { 1 };
            let tree = if workers > 1 {
                walk.directory_shared(&mut path, known, workers)?
            } else {
                walk.directory(&mut path, known, true)?
            };
            stats.read += walk.stats.read;
            stats.reused += walk.stats.reused;
            stats.watched += walk.stats.watched;
            found.append(&mut walk.found);
            state.trees.insert(key, tree);
        }
        if let Some(file) = &self.file
            && stats.read > 0
            && (generation == 1 || single_command())
        {
            // Best effort: a file that cannot be written is a cold start next time, never a
            // wrong answer.
            let _ = persist::save(file, &state.trees);
        }
        found.sort();
        found.dedup();
        if std::mem::take(&mut state.hold) {
            state.held = Some((patterns.to_vec(), hidden.to_vec(), found.clone()));
        }
        Ok((found, stats))
    }
}

/// The trees in a file: a magic and version, then each tree's key and directories, depth
/// first, every length checked when read back.
mod persist {
    use std::collections::HashMap;
    use std::ffi::OsString;
    use std::io::Write;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::{Path, PathBuf};

    use super::{Dir, Stamp, TreeKey};

    const MAGIC: &[u8; 12] = b"aido-deny-2\n";
    /// Deeper than any path can be (PATH_MAX is 4096 bytes): a file claiming more is damaged.
    const DEPTH_MAX: usize = 2048;

    pub(super) fn save(file: &Path, trees: &HashMap<TreeKey, Option<Dir>>) -> std::io::Result<()> {
        let mut out = MAGIC.to_vec();
        let kept: Vec<(&TreeKey, &Dir)> = trees
            .iter()
            .filter_map(|(key, tree)| tree.as_ref().map(|tree| (key, tree)))
            .collect();
        put_len(&mut out, kept.len());
        for ((prefix, globs, skip), tree) in kept {
            put_bytes(&mut out, prefix.as_os_str().as_bytes());
            put_len(&mut out, globs.len());
            for glob in globs {
                put_bytes(&mut out, glob.as_bytes());
            }
            put_len(&mut out, skip.len());
            for dir in skip {
                put_bytes(&mut out, dir.as_os_str().as_bytes());
            }
            put_dir(&mut out, tree);
        }
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // Whole or not at all: written aside, then renamed over the old one.
        let aside = file.with_extension(format!("tmp.{}", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&aside)
            .and_then(|mut f| f.write_all(&out))
            .and_then(|()| std::fs::rename(&aside, file));
        if written.is_err() {
            let _ = std::fs::remove_file(&aside);
        }
        written
    }

    pub(super) fn load(file: &Path) -> HashMap<TreeKey, Option<Dir>> {
        let Ok(bytes) = std::fs::read(file) else {
            return HashMap::new();
        };
        let mut input = Reader { bytes: &bytes };
        decode(&mut input).unwrap_or_default()
    }

    fn decode(input: &mut Reader<'_>) -> Option<HashMap<TreeKey, Option<Dir>>> {
        if input.take(MAGIC.len())? != MAGIC {
            return None;
        }
        let mut trees = HashMap::new();
        for _ in 0..input.len()? {
            let prefix = PathBuf::from(OsString::from_vec(input.bytes()?.to_vec()));
            let mut globs = Vec::new();
            for _ in 0..input.len()? {
                globs.push(String::from_utf8(input.bytes()?.to_vec()).ok()?);
            }
            let mut skip = Vec::new();
            for _ in 0..input.len()? {
                skip.push(PathBuf::from(OsString::from_vec(input.bytes()?.to_vec())));
            }
            let tree = get_dir(input, 0)?;
            trees.insert((prefix, globs, skip), Some(tree));
        }
        input.bytes.is_empty().then_some(trees)
    }

    fn put_len(out: &mut Vec<u8>, n: usize) {
        out.extend_from_slice(&(n as u64).to_le_bytes());
    }

    fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
        put_len(out, bytes.len());
        out.extend_from_slice(bytes);
    }

    fn put_dir(out: &mut Vec<u8>, dir: &Dir) {
        for n in [dir.stamp.dev, dir.stamp.ino] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        for n in [dir.stamp.mtime, dir.stamp.mtime_nsec] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.push(u8::from(dir.racy));
        put_len(out, dir.entries);
        put_len(out, dir.matches.len());
        for name in &dir.matches {
            put_bytes(out, name.as_bytes());
        }
        put_len(out, dir.descend.len());
        for (name, child) in &dir.descend {
            put_bytes(out, name.as_bytes());
            match child {
                Some(child) => {
                    out.push(1);
                    put_dir(out, child);
                }
                None => out.push(0),
            }
        }
    }

    fn get_dir(input: &mut Reader<'_>, depth: usize) -> Option<Dir> {
        if depth > DEPTH_MAX {
            return None;
        }
        let stamp = Stamp {
            dev: input.u64()?,
            ino: input.u64()?,
            mtime: input.u64()? as i64,
            mtime_nsec: input.u64()? as i64,
        };
        let racy = input.take(1)?[0] != 0;
        let entries = usize::try_from(input.u64()?).ok()?;
        let mut matches = Vec::new();
        for _ in 0..input.len()? {
            matches.push(OsString::from_vec(input.bytes()?.to_vec()));
        }
        let mut descend = Vec::new();
        for _ in 0..input.len()? {
            let name = OsString::from_vec(input.bytes()?.to_vec());
            let child = match input.take(1)?[0] {
                0 => None,
                1 => Some(get_dir(input, depth + 1)?),
                _ => return None,
            };
            descend.push((name, child));
        }
        Some(Dir {
            stamp,
            racy,
            watch: None,
            seen: 0,
            fresh: false,
            entries,
            descend,
            matches,
        })
    }

    struct Reader<'a> {
        bytes: &'a [u8],
    }

    impl<'a> Reader<'a> {
        fn take(&mut self, n: usize) -> Option<&'a [u8]> {
            if n > self.bytes.len() {
                return None;
            }
            let (head, rest) = self.bytes.split_at(n);
            self.bytes = rest;
            Some(head)
        }

        fn u64(&mut self) -> Option<u64> {
            Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
        }

        /// A count or length: never more than the bytes left (each item takes one at least).
        fn len(&mut self) -> Option<usize> {
            let n = usize::try_from(self.u64()?).ok()?;
            (n <= self.bytes.len()).then_some(n)
        }

        fn bytes(&mut self) -> Option<&'a [u8]> {
            let n = self.len()?;
            self.take(n)
        }
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
    ) -> Result<Option<Dir>, ExpandError> {
        let Some(mut dir) = self.own(path, known, check)? else {
            return Ok(None);
        };
        for (name, child) in &mut dir.descend {
            path.push(&*name);
            *child = self.directory(path, child.take(), dir.fresh)?;
            path.pop();
        }
        dir.fresh = false;
        Ok(Some(dir))
    }

    /// [`Self::directory`] over several threads, for a walk without watches (where every
    /// directory costs a `stat` at least): the top and its subdirectories here, then their
    /// subdirectories' trees shared out to workers that take the next one as they finish.
    fn directory_shared(
        &mut self,
        path: &mut PathBuf,
        known: Option<Dir>,
        workers: usize,
    ) -> Result<Option<Dir>, ExpandError> {
        let Some(mut top) = self.own(path, known, true)? else {
            return Ok(None);
        };
        for (name, child) in &mut top.descend {
            path.push(&*name);
            *child = self.own(path, child.take(), top.fresh)?;
            path.pop();
        }
        let mut items = Vec::new();
        for (name, child) in &mut top.descend {
            let Some(child) = child else { continue };
            for (inner, grandchild) in &mut child.descend {
                items.push((path.join(&*name).join(&*inner), child.fresh, grandchild));
            }
        }
        let queue = Mutex::new(items.into_iter());
        let (set, skip, generation, now) = (self.set, self.skip, self.generation, self.now);
        let parts: Vec<Result<Walked, ExpandError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    scope.spawn(|| {
                        let mut walk = Walk {
                            set,
                            skip,
                            watch: None,
                            generation,
                            stats: ExpandStats::default(),
                            visited: 0,
                            found: Vec::new(),
                            now,
                        };
                        loop {
                            let next = queue
                                .lock()
                                .map_err(|_| ExpandError::new("a deny glob walker panicked"))?
                                .next();
                            let Some((mut at, check, slot)) = next else {
                                break;
                            };
                            *slot = walk.directory(&mut at, slot.take(), check)?;
                        }
                        Ok((walk.stats, walk.visited, walk.found))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|_| Err(ExpandError::new("a deny glob walker panicked")))
                })
                .collect()
        });
        for part in parts {
            let (stats, visited, mut found) = part?;
            self.stats.read += stats.read;
            self.stats.reused += stats.reused;
            self.stats.watched += stats.watched;
            self.visited += visited;
            self.found.append(&mut found);
        }
        if self.visited > DENY_WALK_ENTRIES_MAX {
            return Err(ExpandError::new(format!(
                "deny globs under {} visit more than {DENY_WALK_ENTRIES_MAX} entries",
                path.display()
            )));
        }
        for (_, child) in &mut top.descend {
            if let Some(child) = child {
                child.fresh = false;
            }
        }
        top.fresh = false;
        Ok(Some(top))
    }

    /// The directory at `path` itself: checked (or read again), its entries counted and its
    /// matches found; its subdirectories are left to the caller.
    fn own(
        &mut self,
        path: &mut PathBuf,
        known: Option<Dir>,
        check: bool,
    ) -> Result<Option<Dir>, ExpandError> {
        let dir = match known {
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
            return Err(ExpandError::new(format!(
                "deny globs under {} visit more than {DENY_WALK_ENTRIES_MAX} entries",
                path.display()
            )));
        }
        for name in &dir.matches {
            self.found.push(path.join(name));
        }
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
            let full = path.join(&name);
            if self.set.is_match(&full) {
                dir.matches.push(name);
            } else if file_type.is_dir() && self.skip.binary_search(&full).is_err() {
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
                file: None,
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
        let expand = || index.expand(std::slice::from_ref(&pattern), &[]).unwrap();
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

    /// A new process starts from the kept walk: nothing unchanged is read again, a change is
    /// found, and a damaged file is a cold start with the same answer.
    #[test]
    fn a_kept_index_is_checked_by_stamps_in_the_next_process() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().join("tree");
        for dir in ["a/b/c", "a/d", "e/.ssh", "f"] {
            std::fs::create_dir_all(base.join(dir)).unwrap();
        }
        for dir in ["", "a", "a/b", "a/b/c", "a/d", "e", "f"] {
            old(&base.join(dir));
        }
        let file = root.path().join("aido/cache/deny-globs");
        let pattern = base.join("**/.ssh");
        let expand = || {
            GlobIndex::persisted(file.clone())
                .expand(std::slice::from_ref(&pattern), &[])
                .unwrap()
        };
        let (first, stats) = expand();
        assert_eq!(first, vec![base.join("e/.ssh")]);
        assert_eq!(stats.read, 7);
        let mode = std::fs::metadata(&file).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);

        let (again, stats) = expand();
        assert_eq!(again, first);
        assert_eq!((stats.read, stats.reused), (0, 7));

        std::fs::create_dir(base.join("a/b/c/.ssh")).unwrap();
        let (after, stats) = expand();
        assert_eq!(after, vec![base.join("a/b/c/.ssh"), base.join("e/.ssh")]);
        assert_eq!(stats.read, 1);

        let kept = std::fs::read(&file).unwrap();
        for damaged in [
            kept[..kept.len() / 2].to_vec(),
            b"garbage".to_vec(),
            [kept.as_slice(), b"x"].concat(),
        ] {
            std::fs::write(&file, damaged).unwrap();
            let (cold, stats) = expand();
            assert_eq!(cold, after);
            assert!(stats.read >= 7, "{stats:?}");
        }
    }

    /// A hidden directory is not walked (its matches are hidden with it); another set of
    /// hidden directories is another walk.
    #[test]
    fn hidden_directories_are_not_walked() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path();
        for dir in ["aido/journal/.ssh", "a/.ssh"] {
            std::fs::create_dir_all(base.join(dir)).unwrap();
        }
        let pattern = base.join("**/.ssh");
        let index = GlobIndex::stamps_only();
        let (found, stats) = index
            .expand(std::slice::from_ref(&pattern), &[base.join("aido")])
            .unwrap();
        assert_eq!(found, vec![base.join("a/.ssh")]);
        assert_eq!(stats.read, 2, "the top and a, never aido: {stats:?}");
        let (found, _) = index.expand(std::slice::from_ref(&pattern), &[]).unwrap();
        assert_eq!(
            found,
            vec![base.join("a/.ssh"), base.join("aido/journal/.ssh")]
        );
    }

    /// The answer of an expansion made ahead is the next expansion's, once, if it is the same.
    #[test]
    fn a_held_answer_serves_the_next_identical_expansion_once() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path();
        std::fs::create_dir_all(base.join("a/.ssh")).unwrap();
        let pattern = base.join("**/.ssh");
        let other = base.join("**/.env");
        let index = GlobIndex::stamps_only();
        index.hold_next();
        let (ahead, stats) = index.expand(std::slice::from_ref(&pattern), &[]).unwrap();
        assert_eq!(ahead, vec![base.join("a/.ssh")]);
        assert!(stats.read > 0);
        std::fs::create_dir_all(base.join("b/.ssh")).unwrap();
        let (held, stats) = index.expand(std::slice::from_ref(&pattern), &[]).unwrap();
        assert_eq!((held, stats), (ahead, ExpandStats::default()));
        let (now, _) = index.expand(std::slice::from_ref(&pattern), &[]).unwrap();
        assert_eq!(now, vec![base.join("a/.ssh"), base.join("b/.ssh")]);
        // Another expansion in between drops it: it is walked, and so is the next.
        index.hold_next();
        index.expand(std::slice::from_ref(&pattern), &[]).unwrap();
        std::fs::create_dir_all(base.join("c/.ssh")).unwrap();
        let (env, _) = index.expand(std::slice::from_ref(&other), &[]).unwrap();
        assert!(env.is_empty());
        let (walked, stats) = index.expand(std::slice::from_ref(&pattern), &[]).unwrap();
        assert_eq!(walked.len(), 3);
        assert!(stats.read > 0);
    }

    #[test]
    fn a_kept_index_equals_a_fresh_walk_after_random_changes() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("deny-globs");
        random_changes_with(|| GlobIndex::persisted(file.clone()));
    }

    fn random_changes(index: GlobIndex) {
        random_changes_with(|| &index);
    }

    /// Random changes to a tree, each followed by an expansion by `index()` (the same index, or
    /// a new one each time) compared with a fresh walk's.
    fn random_changes_with<I: std::borrow::Borrow<GlobIndex>>(index: impl Fn() -> I) {
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
            let (kept, _) = index()
                .borrow()
                .expand(std::slice::from_ref(&pattern), &[])
                .unwrap();
            let (walked, _) = GlobIndex::default()
                .expand(std::slice::from_ref(&pattern), &[])
                .unwrap();
            assert_eq!(kept, walked);
        }
    }
}
