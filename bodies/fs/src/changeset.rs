//! A command's file changes, journaled whole before the first one lands, then applied.
//!
//! The process body runs a command over a copy-on-write layer and reads back what it changed
//! ([`CommandChange`]s, every path already judged). Here they become one change set
//! ([`aido_actions::changes`]) in three steps:
//!
//! 1. **Stage** ([`stage`]): for every path, what the host holds now (its `before`: contents
//!    streamed into the journal's blob store, bits, time, link target) and what it will hold
//!    (its `after`: the new contents streamed from the layer the same way). Nothing in the
//!    workspace changes. The entries go into parts (blobs), and the blob store is made
//!    durable (one sled flush, one `syncfs` of the objects). Memory stays at one buffer per
//!    file whatever its size, and holes stay holes.
//! 2. The caller writes a recovery marker naming the change set (synced) — from here a crash is
//!    finished at the next start from the journal's blobs alone.
//! 3. **Apply** ([`apply`]): every path is made to hold its `after`, in order, beneath a held
//!    handle of its parent directory opened from the wall root one component at a time with no
//!    symlink followed, and the parent's real path is judged again after each change (a
//!    directory moved mid-apply is caught, and what was made in it taken back). A new file
//!    from the layer is *moved* in (one `renameat`, no copy) when the layer is on the same file
//!    system and the file has one link; otherwise it is copied from the blob store. Set-id bits
//!    are stripped, every extended attribute (file capabilities, ACLs, overlay marks) is
//!    removed, the owner is the replaced file's or the parent directory's, and modification
//!    times are kept to the nanosecond. One `syncfs` per root at the end makes the batch
//!    durable. A path that holds neither its `before` nor its `after` when its turn comes (the
//!    host changed it meanwhile) stops the apply, and every path applied so far is put back.
//!
//! Undoing and redoing (rewind, recovery) run the same [`run_parts`] over the stored parts.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use aido_actions::changes::{Entry, Node, PART_ENTRIES_MAX, decode_part, encode_part};
use aido_actions::{AccessKind, Effect};
use aido_journal::BlobStore;
use aido_policy::SessionContext;
use cap_std::fs::Dir;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timespec, Timestamps};
use serde_json::{Value, json};

use super::error::FsError;
use super::walls::{self, Missing, Target, Walls};

/// Entries a result lists by name; the rest are counted.
pub const SHOWN_ENTRIES_MAX: usize = 200;

/// Where a new file's contents are.
#[derive(Clone, Debug)]
pub enum Contents {
    /// In a command's layer: `name` in the upper directory held by `dir` (aido's own,
    /// opened from the layer's handle without following links).
    Layer {
        /// The upper directory.
        dir: Arc<OwnedFd>,
        /// The file's name in it.
        name: OsString,
    },
    /// A file of aido's own (an artifact's).
    File(PathBuf),
}

/// One change a command made, as the process body read it from its layer and judged it.
#[derive(Clone, Debug)]
pub enum CommandChange {
    /// A regular file was created, or its contents, bits or time changed.
    File {
        /// The host path.
        path: PathBuf,
        /// Its permission bits as the command left them (set-id bits are stripped here).
        mode: u32,
        /// Its modification time, nanoseconds since the epoch; `None`: now.
        mtime_ns: Option<i64>,
        /// Where its new contents are.
        contents: Contents,
    },
    /// A directory was created, or an existing one's permission bits changed.
    Dir {
        /// The host path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// Its modification time as the command left it, when it made it.
        mtime_ns: Option<i64>,
        /// A directory the command made: where it is in the layer (`dir`, `name`), to move in
        /// whole when everything it holds is new.
        layer: Option<Contents>,
    },
    /// A file or link was removed.
    Removed {
        /// The host path.
        path: PathBuf,
    },
    /// A directory was removed, after everything in it (listed before it).
    RemovedDir {
        /// The host path.
        path: PathBuf,
    },
    /// A symbolic link was made (whatever was at its path was removed first, its own change).
    Link {
        /// The host path of the link.
        path: PathBuf,
        /// What it points at, as written in it.
        target: String,
    },
}

impl CommandChange {
    fn path(&self) -> &Path {
        match self {
            CommandChange::File { path, .. }
            | CommandChange::Dir { path, .. }
            | CommandChange::Removed { path }
            | CommandChange::RemovedDir { path }
            | CommandChange::Link { path, .. } => path,
        }
    }
}

/// What applying needs besides the entries: each file's fast source.
struct Plan {
    /// For a file moved in from the layer: the upper directory, its name there, its inode.
    source: Option<(Arc<OwnedFd>, OsString, u64)>,
    /// The set-id bits stripped from its mode.
    stripped: u32,
    /// The path as the walls admitted it at staging, used again by the live apply (which
    /// opens its parent from the wall's handle, refusing links, and confirms the change
    /// landed there): one judgement per path, not two.
    target: Option<Target>,
}

/// A change set whose every content is in the blob store (durable), ready to apply.
pub struct Staged {
    /// The entries, in order.
    entries: Vec<Entry>,
    plans: Vec<Plan>,
    /// The parts, by blake3, in order.
    pub parts: Vec<String>,
    /// Bytes of new contents.
    pub bytes: u64,
}

impl Staged {
    /// The effect that names it.
    pub fn effect(&self) -> Effect {
        Effect::Changes {
            parts: self.parts.clone(),
            entries: self.entries.len() as u64,
            bytes: self.bytes,
        }
    }

    /// True when nothing would change.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What the apply needs from the body.
pub struct Cx<'a> {
    pub walls: &'a Walls,
    pub session: &'a SessionContext,
    pub store: &'a BlobStore,
    /// The journal's directory and the free bytes its disk must keep (`journal_free_bytes_min`):
    /// a change set whose contents would take more is refused before anything is stored.
    pub space: Option<(&'a Path, u64)>,
    /// Fault injection (a window between entries, for crash tests).
    pub faults: Option<&'a aido_call::faults::Faults>,
}

fn io(op: &'static str, path: &str, e: impl Into<std::io::Error>) -> FsError {
    FsError::io(op, path, e.into())
}

fn keep_failed(path: &str, e: impl std::fmt::Display) -> FsError {
    FsError::KeepFailed {
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

fn utf8(path: &Path) -> Result<&str, FsError> {
    path.to_str().ok_or_else(|| FsError::PathNotUtf8 {
        path: path.display().to_string(),
    })
}

fn mtime_of(stat: &rustix::fs::Stat) -> i64 {
    stat.st_mtime * 1_000_000_000 + stat.st_mtime_nsec as i64
}

/// What is at a path now.
#[derive(Debug)]
enum Found {
    Absent,
    File {
        bytes: u64,
        mode: u32,
        mtime_ns: i64,
        uid: u32,
        gid: u32,
    },
    Dir {
        mode: u32,
        mtime_ns: i64,
        uid: u32,
        gid: u32,
    },
    Link {
        target: OsString,
    },
    Other(&'static str),
}

fn found(dir: &Dir, name: &OsStr, shown: &str) -> Result<Found, FsError> {
    let stat = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(rustix::io::Errno::NOENT) => return Ok(Found::Absent),
        Err(e) => return Err(io("stat", shown, e)),
    };
    let mode = stat.st_mode & 0o7777;
    Ok(match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Found::File {
            bytes: stat.st_size as u64,
            mode,
            mtime_ns: mtime_of(&stat),
            uid: stat.st_uid,
            gid: stat.st_gid,
        },
        FileType::Directory => Found::Dir {
            mode,
            mtime_ns: mtime_of(&stat),
            uid: stat.st_uid,
            gid: stat.st_gid,
        },
        FileType::Symlink => Found::Link {
            target: std::os::unix::ffi::OsStringExt::from_vec(
                rustix::fs::readlinkat(dir, name, Vec::new())
                    .map_err(|e| io("readlink", shown, e))?
                    .into_bytes(),
            ),
        },
        FileType::Fifo => Found::Other("a fifo"),
        FileType::Socket => Found::Other("a socket"),
        _ => Found::Other("a device node"),
    })
}

fn link_target(dir: &Dir, name: &OsStr, shown: &str) -> Result<String, FsError> {
    let target =
        rustix::fs::readlinkat(dir, name, Vec::new()).map_err(|e| io("readlink", shown, e))?;
    target.into_string().map_err(|_| FsError::PathNotUtf8 {
        path: format!("{shown} (the target of the link)"),
    })
}

/// Does what is there hold `node`? (Files by size, bits and time: a file aido made carries
/// exactly the time it was given.)
fn holds(dir: &Dir, name: &OsStr, now: &Found, node: &Node, shown: &str) -> Result<bool, FsError> {
    Ok(match (now, node) {
        (Found::Absent, Node::Absent) => true,
        (
            Found::File {
                bytes,
                mode,
                mtime_ns,
                ..
            },
            Node::File {
                bytes: b,
                mode: m,
                mtime_ns: t,
                ..
            },
        ) => bytes == b && mode == m && mtime_ns == t,
        (Found::Dir { mode, .. }, Node::Dir { mode: m, .. }) => mode == m,
        (Found::Link { .. }, Node::Link { target }) => {
            link_target(dir, name, shown).is_ok_and(|t| &t == target)
        }
        _ => false,
    })
}

/// Parent directories held open for one run, by their resolved path.
struct Parents {
    held: HashMap<PathBuf, Arc<Dir>>,
}

/// Most parent directories one run keeps open at once.
const PARENTS_HELD_MAX: usize = 256;

impl Parents {
    fn new() -> Self {
        Self {
            held: HashMap::new(),
        }
    }

    /// The checked path's parent, held, or `None` when it does not exist.
    fn get(&mut self, walls: &Walls, target: &Target) -> Result<Option<Arc<Dir>>, FsError> {
        let Some(parent) = target.resolved.parent() else {
            return Err(io(
                "open the parent of",
                &target.shown(),
                std::io::Error::from(std::io::ErrorKind::InvalidInput),
            ));
        };
        if let Some(dir) = self.held.get(parent) {
            return Ok(Some(dir.clone()));
        }
        let Some(opened) = walls.parent(target, Missing::Absent, &mut Vec::new())? else {
            return Ok(None);
        };
        if self.held.len() >= PARENTS_HELD_MAX {
            self.held.clear();
        }
        let dir = Arc::new(opened.dir);
        self.held.insert(parent.to_owned(), dir.clone());
        Ok(Some(dir))
    }

    /// After a change in `dir`: it must still be the directory the check named (a directory
    /// moved elsewhere while held would take the change with it).
    fn confirm(&mut self, dir: &Dir, target: &Target) -> Result<(), FsError> {
        let expected = target.resolved.parent();
        match walls::real_path(dir) {
            Some(real) if Some(real.as_path()) != expected => {
                self.held.clear();
                Err(FsError::ChangedDuringCheck {
                    path: target.shown(),
                    now: real
                        .join(target.resolved.file_name().unwrap_or_default())
                        .display()
                        .to_string(),
                })
            }
            _ => Ok(()),
        }
    }
}

fn name_of(target: &Target) -> Result<&OsStr, FsError> {
    target
        .resolved
        .file_name()
        .ok_or_else(|| FsError::NotAFile {
            path: target.shown(),
        })
}

fn kind_of(node: &Node) -> AccessKind {
    match node {
        Node::Absent => AccessKind::Delete,
        _ => AccessKind::Write,
    }
}

/// Stage `changes` (see the module docs): every content in the blob store, the entries in
/// parts, all durable. `max` bounds one file's contents. Nothing in the workspace changes.
pub fn stage(cx: &Cx, changes: Vec<CommandChange>, max: u64) -> Result<Staged, FsError> {
    if let Some((journal, free_min)) = cx.space {
        room(journal, free_min, &changes)?;
    }
    let mut parents = Parents::new();
    let mut entries = Vec::with_capacity(changes.len());
    let mut plans = Vec::with_capacity(changes.len());
    let mut bytes_total = 0u64;
    // A path changed twice in one set (removed, then made again as something else) held the
    // first change's `after` when the second comes.
    let mut staged: HashMap<String, Node> = HashMap::new();
    for change in changes {
        let shown = utf8(change.path())?.to_owned();
        let kind = match &change {
            CommandChange::Removed { .. } | CommandChange::RemovedDir { .. } => AccessKind::Delete,
            _ => AccessKind::Write,
        };
        let target = cx.walls.check(&shown, kind, cx.session)?;
        let before = match staged.get(&shown) {
            Some(node) => node.clone(),
            None => match parents.get(cx.walls, &target)? {
                // Its directory is made by an earlier change of this set: nothing is there.
                None => Node::Absent,
                Some(dir) => before_of(cx, &dir, name_of(&target)?, &shown, max)?,
            },
        };
        let (after, plan) = match change {
            CommandChange::File {
                mode,
                mtime_ns,
                contents,
                ..
            } => {
                let (node, source) = new_file(cx, &shown, mode, mtime_ns, &contents, max)?;
                bytes_total += node_bytes(&node);
                (
                    node,
                    Plan {
                        source,
                        stripped: mode & 0o7000,
                        target: None,
                    },
                )
            }
            CommandChange::Dir {
                mode,
                mtime_ns,
                layer,
                ..
            } => {
                let mtime_ns = match &before {
                    // An existing directory keeps its time: only its bits change.
                    Node::Dir { .. } => None,
                    _ => mtime_ns,
                };
                (
                    Node::Dir {
                        mode: mode & 0o1777,
                        mtime_ns,
                    },
                    Plan {
                        source: layer_dir(layer.as_ref()),
                        stripped: mode & 0o6000,
                        target: None,
                    },
                )
            }
            CommandChange::Link { target, .. } => (
                Node::Link { target },
                Plan {
                    source: None,
                    stripped: 0,
                    target: None,
                },
            ),
            CommandChange::Removed { .. } | CommandChange::RemovedDir { .. } => (
                Node::Absent,
                Plan {
                    source: None,
                    stripped: 0,
                    target: None,
                },
            ),
        };
        let same = match (&before, &after) {
            (Node::Dir { mode: a, .. }, Node::Dir { mode: b, .. }) => a == b,
            (a, b) => a == b,
        };
        if same {
            continue;
        }
        staged.insert(shown.clone(), after.clone());
        entries.push(Entry {
            path: shown,
            before,
            after,
        });
        plans.push(Plan {
            target: Some(target),
            ..plan
        });
    }
    let mut parts = Vec::new();
    for chunk in entries.chunks(PART_ENTRIES_MAX) {
        let bytes = encode_part(chunk);
        let hash = blake3::hash(&bytes).to_hex().to_string();
        put_bytes(cx.store, &hash, &bytes).map_err(|e| keep_failed("a change set part", e))?;
        parts.push(hash);
    }
    cx.store
        .flush()
        .map_err(|e| keep_failed("the change set's contents", e))?;
    Ok(Staged {
        entries,
        plans,
        parts,
        bytes: bytes_total,
    })
}

/// Refuse before anything is stored when the journal's disk cannot hold the set's new
/// contents and before-images (at most what the host holds at each path now) beside
/// `free_min`.
fn room(journal: &Path, free_min: u64, changes: &[CommandChange]) -> Result<(), FsError> {
    let mut needed = 0u64;
    for change in changes {
        if let CommandChange::File { contents, .. } = change {
            let size = match contents {
                Contents::Layer { dir, name } => {
                    rustix::fs::statat(dir.as_fd(), name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                        .map(|s| s.st_blocks as u64 * 512)
                        .unwrap_or(0)
                }
                Contents::File(path) => std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
            };
            needed = needed.saturating_add(size);
        }
        if !matches!(
            change,
            CommandChange::Dir { .. } | CommandChange::Link { .. }
        ) {
            let host = std::fs::symlink_metadata(change.path())
                .ok()
                .filter(|m| m.is_file())
                .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
                .unwrap_or(0);
            needed = needed.saturating_add(host);
        }
    }
    let free = rustix::fs::statvfs(journal)
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
        .map_err(|e| {
            io(
                "stat the journal's disk for",
                &journal.display().to_string(),
                e,
            )
        })?;
    let needed = needed.saturating_add(free_min);
    if free < needed {
        return Err(FsError::JournalSpaceLow {
            path: journal.display().to_string(),
            needed,
            free,
        });
    }
    Ok(())
}

fn node_bytes(node: &Node) -> u64 {
    match node {
        Node::File { bytes, .. } => *bytes,
        _ => 0,
    }
}

fn put_bytes(store: &BlobStore, hash: &str, bytes: &[u8]) -> Result<(), aido_journal::AppendError> {
    if bytes.len() as u64 >= aido_journal::objects::OBJECT_BYTES_MIN {
        store.objects().put_bytes(hash, bytes)
    } else {
        store.put(hash, bytes)
    }
}

/// What the host holds at `name` in `dir` now, its contents kept.
fn before_of(cx: &Cx, dir: &Dir, name: &OsStr, shown: &str, max: u64) -> Result<Node, FsError> {
    Ok(match found(dir, name, shown)? {
        Found::Absent => Node::Absent,
        Found::File { mode, mtime_ns, .. } => {
            let file = rustix::fs::openat(
                dir,
                name,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
                Mode::empty(),
            )
            .map_err(|e| io("open", shown, e))?;
            let file = std::fs::File::from(file);
            let kept = cx.store.put_file(&file, max).map_err(|e| match e {
                aido_journal::AppendError::BlobTooLarge { bytes, max } => {
                    FsError::ContentsTooLarge {
                        path: shown.to_owned(),
                        bytes,
                        max,
                    }
                }
                e => keep_failed(shown, e),
            })?;
            Node::File {
                blob: kept.hash,
                bytes: kept.bytes,
                mode,
                mtime_ns,
            }
        }
        Found::Dir { mode, mtime_ns, .. } => Node::Dir {
            mode,
            mtime_ns: Some(mtime_ns),
        },
        Found::Link { .. } => Node::Link {
            target: link_target(dir, name, shown)?,
        },
        Found::Other(what) => {
            return Err(FsError::ChangeUnsupported {
                path: shown.to_owned(),
                what: what.to_owned(),
            });
        }
    })
}

/// A new file's node, its contents kept, and where to move it in from.
#[allow(clippy::type_complexity)]
fn new_file(
    cx: &Cx,
    shown: &str,
    mode: u32,
    mtime_ns: Option<i64>,
    contents: &Contents,
    max: u64,
) -> Result<(Node, Option<(Arc<OwnedFd>, OsString, u64)>), FsError> {
    let (file, source) = match contents {
        Contents::Layer { dir, name } => {
            let fd = rustix::fs::openat(
                dir.as_fd(),
                name.as_os_str(),
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
                Mode::empty(),
            )
            .map_err(|e| io("open the layer's copy of", shown, e))?;
            (std::fs::File::from(fd), Some((dir.clone(), name.clone())))
        }
        Contents::File(path) => (
            std::fs::File::open(path).map_err(|e| io("open", &path.display().to_string(), e))?,
            None,
        ),
    };
    let stat = rustix::fs::fstat(&file).map_err(|e| io("stat", shown, e))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(FsError::NotAFile {
            path: shown.to_owned(),
        });
    }
    let kept = cx.store.put_file(&file, max).map_err(|e| match e {
        aido_journal::AppendError::BlobTooLarge { bytes, max } => FsError::ContentsTooLarge {
            path: shown.to_owned(),
            bytes,
            max,
        },
        e => keep_failed(shown, e),
    })?;
    let node = Node::File {
        blob: kept.hash,
        bytes: kept.bytes,
        mode: mode & 0o777,
        mtime_ns: mtime_ns.unwrap_or_else(|| mtime_of(&stat)),
    };
    // Only a file with one name is moved in: a second name would tie the workspace's file to
    // another path the journal knows nothing of.
    let source = source
        .filter(|_| stat.st_nlink == 1 && mtime_ns.is_none_or(|t| t == mtime_of(&stat)))
        .map(|(dir, name)| (dir, name, stat.st_ino));
    Ok((node, source))
}

/// A directory the command made, in its layer: its upper directory, name and inode.
fn layer_dir(layer: Option<&Contents>) -> Option<(Arc<OwnedFd>, OsString, u64)> {
    let Some(Contents::Layer { dir, name }) = layer else {
        return None;
    };
    let stat = rustix::fs::statat(dir.as_fd(), name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
    (FileType::from_raw_mode(stat.st_mode) == FileType::Directory)
        .then(|| (dir.clone(), name.clone(), stat.st_ino))
}

/// How many entries from `index` on make one directory the command made whole: the
/// directory (nothing at its path before, its layer copy known) and every entry below it,
/// each new and each movable from the layer (a file with one name, its time as staged; a
/// directory; a link). `None` when that is not so, or it holds nothing.
fn whole_dir(staged: &Staged, index: usize) -> Option<usize> {
    let (top, plan) = (&staged.entries[index], &staged.plans[index]);
    if !matches!(top.after, Node::Dir { .. }) || !top.before.is_absent() || plan.source.is_none() {
        return None;
    }
    let under = Path::new(&top.path);
    let mut count = 1;
    for (entry, plan) in staged.entries[index + 1..]
        .iter()
        .zip(&staged.plans[index + 1..])
    {
        if !Path::new(&entry.path).starts_with(under) {
            break;
        }
        let movable = match entry.after {
            Node::File { .. } | Node::Dir { .. } => plan.source.is_some(),
            Node::Link { .. } => true,
            Node::Absent => false,
        };
        if !entry.before.is_absent() || !movable {
            return None;
        }
        count += 1;
    }
    (count > 1).then_some(count)
}

/// Move a directory the command made whole ([`whole_dir`]: `count` entries from `index`) in
/// with one rename: first, in the layer, every entry below it gets what the entry-by-entry
/// apply would give it (attributes stripped, the owner, the bits, set-id stripped) and the
/// layer is checked to hold exactly the staged entries (no other name, each of its staged
/// kind and inode), then the directory is renamed to its path, which must be empty
/// (`RENAME_NOREPLACE`), and confirmed where the check said. `Ok(None)`: it cannot be moved
/// so (the layer on another file system, something at the path): apply entry by entry.
fn move_dir_in(
    cx: &Cx,
    parents: &mut Parents,
    staged: &Staged,
    index: usize,
    count: usize,
) -> Result<Option<PathBuf>, FsError> {
    let (top, plan) = (&staged.entries[index], &staged.plans[index]);
    let shown = top.path.as_str();
    let Some((layer, from, ino)) = plan.source.as_ref() else {
        return Ok(None);
    };
    if let Some(faults) = cx.faults {
        faults.apply_step();
    }
    let target = match &plan.target {
        Some(target) if target.kind == AccessKind::Write => target.clone(),
        _ => cx.walls.check(shown, AccessKind::Write, cx.session)?,
    };
    super::walls::hook::call(super::walls::hook::Op::Write, &target.resolved);
    let Some(dir) = parents.get(cx.walls, &target)? else {
        return Ok(None);
    };
    let name = name_of(&target)?;
    let Ok(moved) = rustix::fs::openat(
        layer.as_fd(),
        from.as_os_str(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return Ok(None);
    };
    let stat = rustix::fs::fstat(&moved).map_err(|e| io("stat", shown, e))?;
    let here = rustix::fs::fstat(&*dir).map_err(|e| io("stat the parent of", shown, e))?;
    if stat.st_ino != *ino || stat.st_dev != here.st_dev {
        return Ok(None);
    }
    let root = rustix::process::geteuid().is_root();
    let owner = (here.st_uid, here.st_gid);
    let entries = &staged.entries[index..index + count];
    let plans = &staged.plans[index..index + count];
    // Each staged directory's layer handle, by path, and how many entries it must hold.
    let mut dirs: HashMap<&str, (OwnedFd, usize)> = HashMap::new();
    dirs.insert(shown, (moved, 0));
    for (entry, plan) in entries.iter().zip(plans).skip(1) {
        let path = Path::new(&entry.path);
        let (Some(parent), Some(leaf)) = (path.parent().and_then(Path::to_str), path.file_name())
        else {
            return Ok(None);
        };
        let Some((parent_fd, held)) = dirs.get_mut(parent) else {
            return Ok(None);
        };
        *held += 1;
        let parent_fd = parent_fd.as_fd();
        let ready = match (&entry.after, plan.source.as_ref()) {
            (Node::File { mode, .. }, Some((_, _, ino))) => {
                let file = rustix::fs::openat(
                    parent_fd,
                    leaf,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
                    Mode::empty(),
                )
                .map_err(|e| io("open the layer's copy of", &entry.path, e))?;
                let stat = rustix::fs::fstat(&file).map_err(|e| io("stat", &entry.path, e))?;
                if stat.st_ino != *ino
                    || stat.st_nlink != 1
                    || FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile
                {
                    return Ok(None);
                }
                prepare(&file, owner, root, mode & 0o777, &entry.path)?;
                None
            }
            (Node::Dir { mode, .. }, Some((_, _, ino))) => {
                let sub = rustix::fs::openat(
                    parent_fd,
                    leaf,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| io("open the layer's copy of", &entry.path, e))?;
                let stat = rustix::fs::fstat(&sub).map_err(|e| io("stat", &entry.path, e))?;
                if stat.st_ino != *ino {
                    return Ok(None);
                }
                prepare(&sub, owner, root, *mode, &entry.path)?;
                Some(sub)
            }
            (Node::Link { target }, _) => {
                let written = rustix::fs::readlinkat(parent_fd, leaf, Vec::new())
                    .map_err(|e| io("readlink", &entry.path, e))?;
                if written.as_bytes() != target.as_bytes() {
                    return Ok(None);
                }
                if root {
                    rustix::fs::chownat(
                        parent_fd,
                        leaf,
                        Some(uid(owner.0)),
                        Some(gid(owner.1)),
                        AtFlags::SYMLINK_NOFOLLOW,
                    )
                    .map_err(|e| io("chown", &entry.path, e))?;
                }
                None
            }
            _ => return Ok(None),
        };
        if let Some(sub) = ready {
            dirs.insert(entry.path.as_str(), (sub, 0));
        }
    }
    // The layer holds exactly the staged entries: nothing else may ride along.
    for (fd, held) in dirs.values() {
        let names = names_in(fd).map_err(|e| io("read the layer's copy of", shown, e))?;
        if names != *held {
            return Ok(None);
        }
    }
    let Some((moved, _)) = dirs.remove(shown) else {
        return Ok(None);
    };
    let Node::Dir { mode, .. } = &top.after else {
        return Ok(None);
    };
    prepare(&moved, owner, root, *mode, shown)?;
    match rustix::fs::renameat_with(
        layer.as_fd(),
        from.as_os_str(),
        &*dir,
        name,
        rustix::fs::RenameFlags::NOREPLACE,
    ) {
        Ok(()) => {}
        Err(rustix::io::Errno::EXIST | rustix::io::Errno::XDEV | rustix::io::Errno::INVAL) => {
            return Ok(None);
        }
        Err(e) => return Err(io("rename", shown, e)),
    }
    // What landed must be the directory that was staged, where the check said.
    let landed = rustix::fs::statat(&*dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| io("stat", shown, e))?;
    let confirmed = if landed.st_ino != *ino || landed.st_dev != stat.st_dev {
        Err(FsError::ChangedDuringCheck {
            path: shown.to_owned(),
            now: "another directory than the one staged".into(),
        })
    } else {
        parents.confirm(&dir, &target)
    };
    if let Err(e) = confirmed {
        // Taken out again through the handle it landed under.
        let mut budget = walls::TREE_ENTRIES_MAX;
        if let Err(left) = walls::remove_tree(&dir, name, Path::new(shown), 0, &mut budget) {
            tracing::error!(path = shown, error = %left, "cannot take back a directory moved in");
        }
        return Err(e);
    }
    Ok(Some(target.root))
}

/// What the entry-by-entry apply gives a file or directory it makes: no extended attribute,
/// the owner (aido as root), the bits.
fn prepare(
    fd: &OwnedFd,
    owner: (u32, u32),
    root: bool,
    mode: u32,
    shown: &str,
) -> Result<(), FsError> {
    strip_xattrs(fd, shown)?;
    if root {
        rustix::fs::fchown(fd, Some(uid(owner.0)), Some(gid(owner.1)))
            .map_err(|e| io("chown", shown, e))?;
    }
    rustix::fs::fchmod(fd, Mode::from_raw_mode(mode)).map_err(|e| io("chmod", shown, e))
}

/// How many entries a directory holds (besides `.` and `..`).
fn names_in(fd: &OwnedFd) -> rustix::io::Result<usize> {
    let mut dir = rustix::fs::Dir::read_from(fd)?;
    let mut names = 0;
    while let Some(entry) = dir.read() {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names += 1;
        }
    }
    Ok(names)
}

/// The result of an apply: what the agent is shown.
pub struct Applied {
    /// The first [`SHOWN_ENTRIES_MAX`] entries as changes, the counts of all.
    pub shown: Value,
}

/// Apply a staged change set (see the module docs); on failure every path applied so far is
/// put back and the error names the path that stopped it.
pub fn apply(cx: &Cx, staged: &Staged) -> Result<Applied, FsError> {
    let mut parents = Parents::new();
    let mut done = 0usize;
    let mut roots = Vec::new();
    while done < staged.entries.len() {
        let (entry, plan) = (&staged.entries[done], &staged.plans[done]);
        // A directory the command made whole moves in with one rename.
        if let Some(count) = whole_dir(staged, done) {
            match move_dir_in(cx, &mut parents, staged, done, count) {
                Ok(Some(root)) => {
                    if !roots.contains(&root) {
                        roots.push(root);
                    }
                    done += count;
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    put_back(cx, &staged.entries[..done]);
                    return Err(FsError::CommandChangesRolledBack {
                        path: entry.path.clone(),
                        reason: e.to_string(),
                    });
                }
            }
        }
        match set(
            cx,
            &mut parents,
            entry,
            Direction::Live,
            plan.source.as_ref(),
            plan.target.as_ref(),
        ) {
            Ok(root) => {
                if !roots.contains(&root) {
                    roots.push(root);
                }
                done += 1;
            }
            Err(e) => {
                put_back(cx, &staged.entries[..done]);
                return Err(FsError::CommandChangesRolledBack {
                    path: entry.path.clone(),
                    reason: e.to_string(),
                });
            }
        }
    }
    dir_times(cx, &mut parents, staged.entries.iter(), true);
    sync_roots(cx, &roots);
    Ok(Applied {
        shown: shown(&staged.entries, &staged.plans),
    })
}

/// Put back what `entries` (applied, in order) changed, newest first. Best effort: the call
/// fails anyway, and each failure is logged.
fn put_back(cx: &Cx, entries: &[Entry]) {
    let mut parents = Parents::new();
    for entry in entries.iter().rev() {
        let back = Entry {
            path: entry.path.clone(),
            before: entry.after.clone(),
            after: entry.before.clone(),
        };
        if let Err(e) = set(cx, &mut parents, &back, Direction::Force, None, None) {
            tracing::error!(path = %entry.path, error = %e, "cannot put back a change after a failed apply");
        }
    }
    dir_times(cx, &mut parents, entries.iter().rev(), false);
}

/// How [`set`] treats what it finds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// A live apply: the path must hold its `before` (or already its `after`).
    Live,
    /// Recovery's apply: as live, contents from the blob store.
    Recover,
    /// A rewind, a redo, a put-back: whatever is there is replaced.
    Force,
}

/// Make `entry.path` hold `entry.after`. The root it lives under.
fn set(
    cx: &Cx,
    parents: &mut Parents,
    entry: &Entry,
    direction: Direction,
    source: Option<&(Arc<OwnedFd>, OsString, u64)>,
    checked: Option<&Target>,
) -> Result<PathBuf, FsError> {
    let shown = entry.path.as_str();
    if let Some(faults) = cx.faults {
        faults.apply_step();
    }
    let target = match checked {
        Some(target) if target.kind == kind_of(&entry.after) => target.clone(),
        _ => cx.walls.check(shown, kind_of(&entry.after), cx.session)?,
    };
    super::walls::hook::call(super::walls::hook::Op::Write, &target.resolved);
    let Some(dir) = parents.get(cx.walls, &target)? else {
        if entry.after.is_absent() {
            return Ok(target.root);
        }
        return Err(FsError::NotFound {
            path: target
                .resolved
                .parent()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        });
    };
    let name = name_of(&target)?;
    let now = found(&dir, name, shown)?;
    if holds(&dir, name, &now, &entry.after, shown)? {
        return Ok(target.root);
    }
    if direction != Direction::Force && !holds(&dir, name, &now, &entry.before, shown)? {
        return Err(FsError::CommandChangesConflict {
            path: shown.to_owned(),
            found: describe(&now),
        });
    }
    let owner = match &now {
        Found::File { uid, gid, .. } | Found::Dir { uid, gid, .. } => Some((*uid, *gid)),
        _ => None,
    };
    let owner = match owner {
        Some(owner) => owner,
        None => {
            let stat = rustix::fs::fstat(&*dir).map_err(|e| io("stat the parent of", shown, e))?;
            (stat.st_uid, stat.st_gid)
        }
    };
    let result = make(cx, &dir, name, &now, &entry.after, owner, shown, source);
    // Whatever happened, the change must have been made where the check said.
    parents.confirm(&dir, &target).inspect_err(|_| {
        if result.is_ok() && !entry.after.is_absent() {
            let _ = remove_entry(&dir, name, shown);
        }
    })?;
    result.map(|()| target.root)
}

fn describe(found: &Found) -> String {
    match found {
        Found::Absent => "nothing".into(),
        Found::File { bytes, mode, .. } => format!("a file of {bytes} bytes, mode {mode:04o}"),
        Found::Dir { mode, .. } => format!("a directory, mode {mode:04o}"),
        Found::Link { target } => format!("a link to {}", target.to_string_lossy()),
        Found::Other(what) => (*what).into(),
    }
}

fn remove_entry(dir: &Dir, name: &OsStr, shown: &str) -> Result<(), FsError> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(rustix::io::Errno::ISDIR | rustix::io::Errno::PERM) => {
            rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR).map_err(|e| io("rmdir", shown, e))
        }
        Err(e) => Err(io("unlink", shown, e)),
    }
}

static TEMP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A short temporary name in the same directory (a 255-byte name leaves no room to add to).
fn temp_name() -> String {
    format!(
        ".aido-{}-{}.tmp",
        std::process::id(),
        TEMP.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

#[allow(clippy::too_many_arguments)]
fn make(
    cx: &Cx,
    dir: &Dir,
    name: &OsStr,
    now: &Found,
    node: &Node,
    owner: (u32, u32),
    shown: &str,
    source: Option<&(Arc<OwnedFd>, OsString, u64)>,
) -> Result<(), FsError> {
    let root = rustix::process::geteuid().is_root();
    // A directory in the way goes first (it must be empty: what it held came earlier).
    let clear_dir = |now: &Found| -> Result<(), FsError> {
        if matches!(now, Found::Dir { .. }) && !matches!(node, Node::Dir { .. }) {
            rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
                .map_err(|e| io("rmdir", shown, e))?;
        }
        Ok(())
    };
    match node {
        Node::Absent => remove_entry(dir, name, shown),
        Node::Dir { mode, .. } => {
            if !matches!(now, Found::Dir { .. }) {
                if !matches!(now, Found::Absent) {
                    remove_entry(dir, name, shown)?;
                }
                match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700)) {
                    Ok(()) => {}
                    Err(e) => return Err(io("mkdir", shown, e)),
                }
            }
            let fd = rustix::fs::openat(
                dir,
                name,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| io("open", shown, e))?;
            if root && matches!(now, Found::Absent | Found::File { .. } | Found::Link { .. }) {
                rustix::fs::fchown(&fd, Some(uid(owner.0)), Some(gid(owner.1)))
                    .map_err(|e| io("chown", shown, e))?;
            }
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(*mode)).map_err(|e| io("chmod", shown, e))
        }
        Node::Link { target } => {
            let temp = temp_name();
            rustix::fs::symlinkat(target.as_str(), dir, temp.as_str())
                .map_err(|e| io("symlink", shown, e))?;
            let placed = (|| {
                if root {
                    rustix::fs::chownat(
                        dir,
                        temp.as_str(),
                        Some(uid(owner.0)),
                        Some(gid(owner.1)),
                        AtFlags::SYMLINK_NOFOLLOW,
                    )
                    .map_err(|e| io("chown", shown, e))?;
                }
                clear_dir(now)?;
                rustix::fs::renameat(dir, temp.as_str(), dir, name)
                    .map_err(|e| io("rename", shown, e))
            })();
            if placed.is_err() {
                let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
            }
            placed
        }
        Node::File {
            blob,
            mode,
            mtime_ns,
            ..
        } => {
            if let Some((layer, from, ino)) = source {
                match move_in(
                    dir, name, layer, from, *ino, *mode, owner, root, shown, &clear_dir, now,
                ) {
                    Ok(true) => return Ok(()),
                    Ok(false) => {}
                    Err(e) => return Err(e),
                }
            }
            copy_in(
                cx, dir, name, blob, *mode, *mtime_ns, owner, root, shown, &clear_dir, now,
            )
        }
    }
}

fn uid(raw: u32) -> rustix::fs::Uid {
    rustix::fs::Uid::from_raw(raw)
}

fn gid(raw: u32) -> rustix::fs::Gid {
    rustix::fs::Gid::from_raw(raw)
}

/// Every extended attribute of an open file goes (file capabilities, ACLs, overlay marks,
/// labels): none of them is the command's to hand to the host.
fn strip_xattrs(file: &impl AsFd, shown: &str) -> Result<(), FsError> {
    let mut names = vec![0u8; 4096];
    let n = match rustix::fs::flistxattr(file, &mut names[..]) {
        Ok(n) => n,
        Err(rustix::io::Errno::RANGE) => {
            let size = rustix::fs::flistxattr_query(file)
                .map_err(|e| io("list the attributes of", shown, e))?;
            names.resize(size, 0);
            rustix::fs::flistxattr(file, &mut names[..])
                .map_err(|e| io("list the attributes of", shown, e))?
        }
        Err(rustix::io::Errno::NOTSUP) => return Ok(()),
        Err(e) => return Err(io("list the attributes of", shown, e)),
    };
    for attr in names[..n].split(|b| *b == 0).filter(|a| !a.is_empty()) {
        let attr = OsStr::new(std::str::from_utf8(attr).unwrap_or_default());
        if attr.is_empty() {
            continue;
        }
        match rustix::fs::fremovexattr(file, attr) {
            Ok(()) | Err(rustix::io::Errno::NODATA) => {}
            Err(e) => return Err(io("remove an attribute of", shown, e)),
        }
    }
    Ok(())
}

/// Move the layer's file in (same file system, one `renameat`). `Ok(false)` when it cannot be
/// moved (another file system, or it is gone): the caller copies from the blob store.
#[allow(clippy::too_many_arguments)]
fn move_in(
    dir: &Dir,
    name: &OsStr,
    layer: &Arc<OwnedFd>,
    from: &OsStr,
    ino: u64,
    mode: u32,
    owner: (u32, u32),
    root: bool,
    shown: &str,
    clear_dir: &dyn Fn(&Found) -> Result<(), FsError>,
    now: &Found,
) -> Result<bool, FsError> {
    let file = match rustix::fs::openat(
        layer.as_fd(),
        from,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    ) {
        Ok(file) => file,
        Err(_) => return Ok(false),
    };
    let stat = rustix::fs::fstat(&file).map_err(|e| io("stat", shown, e))?;
    if stat.st_ino != ino || FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Ok(false);
    }
    // Same file system as the target's directory?
    let here = rustix::fs::fstat(dir).map_err(|e| io("stat the parent of", shown, e))?;
    if here.st_dev != stat.st_dev {
        return Ok(false);
    }
    strip_xattrs(&file, shown)?;
    if root {
        rustix::fs::fchown(&file, Some(uid(owner.0)), Some(gid(owner.1)))
            .map_err(|e| io("chown", shown, e))?;
    }
    // After the chown (which drops set-id bits anyway), the bits, set-id stripped.
    rustix::fs::fchmod(&file, Mode::from_raw_mode(mode & 0o777))
        .map_err(|e| io("chmod", shown, e))?;
    clear_dir(now)?;
    rustix::fs::renameat(layer.as_fd(), from, dir, name).map_err(|e| io("rename", shown, e))?;
    // What landed must be the file that was staged.
    let landed = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| io("stat", shown, e))?;
    if landed.st_ino != ino || landed.st_dev != stat.st_dev {
        let _ = rustix::fs::unlinkat(dir, name, AtFlags::empty());
        return Err(FsError::ChangedDuringCheck {
            path: shown.to_owned(),
            now: "another file than the one staged".into(),
        });
    }
    Ok(true)
}

/// Write the blob's contents to an unnamed file in `dir` (holes kept), with its bits, owner
/// and time, then rename it over `name`.
#[allow(clippy::too_many_arguments)]
fn copy_in(
    cx: &Cx,
    dir: &Dir,
    name: &OsStr,
    blob: &str,
    mode: u32,
    mtime_ns: i64,
    owner: (u32, u32),
    root: bool,
    shown: &str,
    clear_dir: &dyn Fn(&Found) -> Result<(), FsError>,
    now: &Found,
) -> Result<(), FsError> {
    let temp = temp_name();
    let (file, named) = match rustix::fs::openat(
        dir,
        ".",
        OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    ) {
        Ok(fd) => (std::fs::File::from(fd), false),
        Err(_) => {
            let fd = rustix::fs::openat(
                dir,
                temp.as_str(),
                OFlags::CREATE | OFlags::EXCL | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .map_err(|e| io("create", shown, e))?;
            (std::fs::File::from(fd), true)
        }
    };
    let written = (|| {
        cx.store
            .copy_to(blob, &file)
            .map_err(|e| keep_failed(shown, e))?
            .ok_or_else(|| FsError::KeepFailed {
                path: shown.to_owned(),
                reason: format!("its contents {blob} are not in the journal's blob store"),
            })?;
        if root {
            rustix::fs::fchown(&file, Some(uid(owner.0)), Some(gid(owner.1)))
                .map_err(|e| io("chown", shown, e))?;
        }
        rustix::fs::fchmod(&file, Mode::from_raw_mode(mode & 0o777))
            .map_err(|e| io("chmod", shown, e))?;
        let at = Timespec {
            tv_sec: mtime_ns.div_euclid(1_000_000_000),
            tv_nsec: mtime_ns.rem_euclid(1_000_000_000),
        };
        rustix::fs::futimens(
            &file,
            &Timestamps {
                last_access: at,
                last_modification: at,
            },
        )
        .map_err(|e| io("set the time of", shown, e))?;
        if !named {
            rustix::fs::linkat(
                rustix::fs::CWD,
                format!("/proc/self/fd/{}", file.as_raw_fd()),
                dir,
                temp.as_str(),
                AtFlags::SYMLINK_FOLLOW,
            )
            .map_err(|e| io("link", shown, e))?;
        }
        clear_dir(now)?;
        rustix::fs::renameat(dir, temp.as_str(), dir, name).map_err(|e| io("rename", shown, e))
    })();
    if written.is_err() {
        let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
    }
    written
}

/// Give every directory of `entries` whose target node carries a time that time, deepest
/// first, now that everything in it is in place. Best effort.
fn dir_times<'e>(
    cx: &Cx,
    parents: &mut Parents,
    entries: impl Iterator<Item = &'e Entry>,
    forward: bool,
) {
    let mut timed: Vec<(&str, i64)> = entries
        .filter_map(|e| match if forward { &e.after } else { &e.before } {
            Node::Dir {
                mtime_ns: Some(t), ..
            } => Some((e.path.as_str(), *t)),
            _ => None,
        })
        .collect();
    timed.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
    for (path, t) in timed {
        let Ok(target) = cx.walls.check(path, AccessKind::Write, cx.session) else {
            continue;
        };
        let (Ok(Some(dir)), Some(name)) =
            (parents.get(cx.walls, &target), target.resolved.file_name())
        else {
            continue;
        };
        let at = Timespec {
            tv_sec: t.div_euclid(1_000_000_000),
            tv_nsec: t.rem_euclid(1_000_000_000),
        };
        let times = Timestamps {
            last_access: at,
            last_modification: at,
        };
        if let Err(e) = rustix::fs::utimensat(&*dir, name, &times, AtFlags::SYMLINK_NOFOLLOW) {
            tracing::debug!(path, error = %e, "cannot set a directory's time");
        }
    }
}

/// One `syncfs` per root's file system: the batch is durable before its outcome is journaled.
fn sync_roots(cx: &Cx, roots: &[PathBuf]) {
    let mut devices = Vec::new();
    for root in roots {
        let Ok(dir) = cx.walls.root_dir(root) else {
            continue;
        };
        let Ok(stat) = rustix::fs::fstat(&*dir) else {
            continue;
        };
        if devices.contains(&stat.st_dev) {
            continue;
        }
        devices.push(stat.st_dev);
        // The root's handle may be an O_PATH one, which syncfs refuses: open it for reading.
        let synced = rustix::fs::openat(
            &*dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .and_then(rustix::fs::syncfs);
        if let Err(e) = synced {
            tracing::warn!(root = %root.display(), error = %e, "syncfs after a change set");
        }
    }
}

/// The entries as a result shows them: the first [`SHOWN_ENTRIES_MAX`] and counts of all.
fn shown(entries: &[Entry], plans: &[Plan]) -> Value {
    let mut counts: std::collections::BTreeMap<&str, u64> = Default::default();
    let mut list = Vec::new();
    for (entry, plan) in entries.iter().zip(plans) {
        let change = entry.change();
        *counts.entry(change).or_default() += 1;
        if list.len() >= SHOWN_ENTRIES_MAX {
            continue;
        }
        list.push(shown_entry(entry, plan.stripped));
    }
    json!({
        "applied": list,
        "total": entries.len(),
        "counts": counts,
        "truncated": entries.len() > SHOWN_ENTRIES_MAX,
    })
}

fn shown_entry(entry: &Entry, stripped: u32) -> Value {
    let mut out = json!({"change": entry.change(), "path": entry.path});
    match &entry.after {
        Node::File { bytes, mode, .. } => {
            out["bytes"] = json!(bytes);
            out["mode"] = json!(format!("{mode:04o}"));
        }
        Node::Dir { mode, .. } => {
            out["mode"] = json!(format!("{mode:04o}"));
            if let Node::Dir { mode: before, .. } = &entry.before {
                out["before"] = json!(format!("{before:04o}"));
            }
        }
        Node::Link { target } => out["target"] = json!(target),
        Node::Absent => {
            if let Node::Link { target } = &entry.before {
                out["target"] = json!(target);
            }
        }
    }
    if stripped != 0 {
        out["stripped"] = json!(format!("{stripped:04o}"));
    }
    out
}

/// Run a stored change set forward (apply, in order) or backward (undo, newest first), part
/// by part, contents from the blob store: for rewinds, redos and recovery. With `recover`, a
/// path that holds neither side stops it (and what was applied is put back); otherwise
/// whatever is there is replaced. The entries it went through.
pub fn run_parts(cx: &Cx, parts: &[String], forward: bool, recover: bool) -> Result<u64, FsError> {
    let mut parents = Parents::new();
    let mut count = 0u64;
    let mut timed = Vec::new();
    let order: Vec<&String> = if forward {
        parts.iter().collect()
    } else {
        parts.iter().rev().collect()
    };
    let mut applied: Vec<Entry> = Vec::new();
    let mut roots = Vec::new();
    for part in order {
        let bytes = cx
            .store
            .get(part)
            .map_err(|e| keep_failed("a change set part", e))?
            .ok_or_else(|| FsError::KeepFailed {
                path: "a change set part".into(),
                reason: format!("{part} is not in the journal's blob store"),
            })?;
        let mut entries = decode_part(&bytes).map_err(|e| keep_failed("a change set part", e))?;
        if !forward {
            entries.reverse();
        }
        for entry in entries {
            let entry = if forward {
                entry
            } else {
                Entry {
                    path: entry.path,
                    before: entry.after,
                    after: entry.before,
                }
            };
            let direction = if recover {
                Direction::Recover
            } else {
                Direction::Force
            };
            match set(cx, &mut parents, &entry, direction, None, None) {
                Ok(root) => {
                    if !roots.contains(&root) {
                        roots.push(root);
                    }
                }
                Err(e) if recover => {
                    put_back(cx, &applied);
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
            if let Node::Dir {
                mtime_ns: Some(_), ..
            } = &entry.after
            {
                timed.push(entry.clone());
            }
            if recover {
                applied.push(entry);
            }
            count += 1;
        }
    }
    dir_times(cx, &mut parents, timed.iter(), true);
    sync_roots(cx, &roots);
    Ok(count)
}
