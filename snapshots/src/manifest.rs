use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cap_std::fs::{Dir, MetadataExt};
use serde::{Deserialize, Serialize};

use crate::error::SnapshotError;
use crate::tree::{self, Hook, Step, Walk};

pub use crate::tree::ENTRIES_MAX;

/// One entry of a tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A directory.
    Dir {
        /// Permission bits.
        mode: u32,
    },
    /// A regular file.
    File {
        /// Bytes.
        size: u64,
        /// Modification time, nanoseconds since the epoch.
        mtime_ns: i64,
        /// Permission bits.
        mode: u32,
        /// blake3 of the contents (copy backend only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hash: Option<String>,
    },
    /// A symbolic link (never followed).
    Symlink {
        /// Where it points.
        target: String,
    },
}

/// A tree: paths relative to its root (with `/`), in order, so parents come before children.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The entries.
    pub entries: BTreeMap<String, Entry>,
}

impl Manifest {
    /// Walk `root`, skipping any path in `exclude` (and everything under it). Every directory
    /// is opened no-follow from its parent's handle and every entry is stat'ed without
    /// following it, so symlinks are recorded, never followed, and a directory swapped for a
    /// symlink mid-walk gives [`SnapshotError::Swapped`] instead of a read outside `root`.
    pub fn scan(root: &Path, exclude: &[PathBuf]) -> Result<Self, SnapshotError> {
        let mut walk = Walk::new(tree::open_root(root)?, root);
        scan_with(&mut walk, root, exclude, None)
    }

    /// Total bytes of the regular files.
    pub fn bytes(&self) -> u64 {
        self.entries
            .values()
            .map(|e| {
                if let Entry::File { size, .. } = e {
                    *size
                } else {
                    0
                }
            })
            .sum()
    }

    /// Number of regular files.
    pub fn files(&self) -> u64 {
        self.entries
            .values()
            .filter(|e| matches!(e, Entry::File { .. }))
            .count() as u64
    }
}

/// [`Manifest::scan`] through `walk` (on `root`'s handle, which the caller goes on using, so
/// what is planned and what is changed are the same directory), calling `hook` before opening
/// each directory it found.
pub(crate) fn scan_with(
    walk: &mut Walk<'_>,
    root: &Path,
    exclude: &[PathBuf],
    hook: Option<&Hook>,
) -> Result<Manifest, SnapshotError> {
    let exclude = tree::relative(root, exclude);
    let mut entries = BTreeMap::new();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let parts = if rel.is_empty() {
            Vec::new()
        } else {
            tree::call(hook, Step::Scan, &rel);
            tree::parts(&rel)?
        };
        let dir = walk.to(&parts)?;
        let shown = root.join(&rel);
        let listing = dir
            .entries()
            .map_err(|e| SnapshotError::io("list", &shown, e))?;
        for item in listing {
            let item = item.map_err(|e| SnapshotError::io("list", &shown, e))?;
            let name =
                item.file_name()
                    .into_string()
                    .map_err(|n| SnapshotError::UnsupportedName {
                        name: n.to_string_lossy().into_owned(),
                    })?;
            let key = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            if tree::excluded(&exclude, &key) {
                continue;
            }
            let meta = dir
                .symlink_metadata(&name)
                .map_err(|e| SnapshotError::io("stat", &root.join(&key), e))?;
            let entry = if meta.file_type().is_symlink() {
                let target = tree::read_link(dir, &name)
                    .map_err(|e| SnapshotError::io("readlink", &root.join(&key), e))?;
                Entry::Symlink {
                    target: String::from_utf8_lossy(&target).into_owned(),
                }
            } else if meta.is_dir() {
                stack.push(key.clone());
                Entry::Dir {
                    mode: meta.mode() & 0o7777,
                }
            } else if meta.is_file() {
                Entry::File {
                    size: meta.len(),
                    mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
                    mode: meta.mode() & 0o7777,
                    hash: None,
                }
            } else {
                // Sockets, fifos and devices are not workspace contents.
                continue;
            };
            entries.insert(key, entry);
            if entries.len() > ENTRIES_MAX {
                return Err(SnapshotError::TooManyEntries { max: ENTRIES_MAX });
            }
        }
    }
    Ok(Manifest { entries })
}

/// The entries in tree order: each directory followed at once by everything under it (string
/// order puts `a-b` between `a` and `a/c`), so a walk leaves a directory only when done
/// with it.
pub(crate) fn tree_order(manifest: &Manifest) -> Vec<(&String, &Entry)> {
    let mut all: Vec<_> = manifest.entries.iter().collect();
    all.sort_by(|(a, _), (b, _)| a.split('/').cmp(b.split('/')));
    all
}

/// `rel` as the components of its parent directory and its own name.
pub(crate) fn split(rel: &str) -> Result<(Vec<&str>, &str), SnapshotError> {
    let mut parts = tree::parts(rel)?;
    let name = parts.pop().ok_or_else(|| SnapshotError::EntryInvalid {
        path: rel.to_owned(),
    })?;
    Ok((parts, name))
}

/// What a restore did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Applied {
    /// Files and links written.
    pub written: u64,
    /// Entries removed.
    pub removed: u64,
    /// Files left as they were.
    pub unchanged: u64,
}

fn same_file(a: &Entry, b: &Entry) -> bool {
    match (a, b) {
        (
            Entry::File {
                size: s1,
                mtime_ns: m1,
                mode: p1,
                ..
            },
            Entry::File {
                size: s2,
                mtime_ns: m2,
                mode: p2,
                ..
            },
        ) => s1 == s2 && m1 == m2 && p1 == p2,
        _ => false,
    }
}

fn kind(e: &Entry) -> u8 {
    match e {
        Entry::Dir { .. } => 0,
        Entry::File { .. } => 1,
        Entry::Symlink { .. } => 2,
    }
}

/// The name of the temporary entry a restore writes beside `name` before renaming it over.
fn temp_name(name: &str) -> String {
    if name.len() <= 200 {
        format!(".{name}.aido-restore-{}", std::process::id())
    } else {
        // Too long to extend within NAME_MAX (255 bytes): name it by its hash instead.
        let key = blake3::hash(name.as_bytes()).to_hex();
        format!(".aido-restore-{}-{}", std::process::id(), &key[..16])
    }
}

/// An error making `rel` in a directory the restore holds open. Not found means that
/// directory was removed since it was opened, and not a directory that a symlink took a name
/// just made: both are swaps, which a second run repairs.
fn inside(op: &'static str, rel: &str, shown: &Path, e: std::io::Error) -> SnapshotError {
    if e.kind() == std::io::ErrorKind::NotFound || tree::is_swapped(&e) {
        SnapshotError::Swapped {
            path: rel.to_owned(),
        }
    } else {
        SnapshotError::io(op, shown, e)
    }
}

/// Remove a temporary entry left by an interrupted restore (whatever it is now).
fn remove_temp(parent: &Dir, temp: &str) -> Result<(), SnapshotError> {
    let mut budget = ENTRIES_MAX;
    tree::remove_tree(parent, temp, temp, &mut budget, None, Step::Restore)
}

/// Rename `temp` over `name` in `parent`. A directory that took the name since the plan (a
/// file cannot be renamed over one) is removed, without following anything, and the rename
/// tried once more.
fn place(parent: &Dir, temp: &str, name: &str, shown: &Path) -> Result<(), SnapshotError> {
    match tree::rename(parent, temp, name) {
        Ok(()) => return Ok(()),
        Err(e)
            if [
                rustix::io::Errno::ISDIR,
                rustix::io::Errno::NOTEMPTY,
                rustix::io::Errno::EXIST,
            ]
            .iter()
            .any(|c| e.raw_os_error() == Some(c.raw_os_error())) => {}
        Err(e) => return Err(SnapshotError::io("rename", shown, e)),
    }
    remove_temp(parent, name)?;
    tree::rename(parent, temp, name).map_err(|e| SnapshotError::io("rename", shown, e))
}

/// Make the tree at `root` match `target`. `fill(rel, entry, dest)` writes a file's contents
/// into `dest` (a new temporary file beside the final one, open for writing). Idempotent.
///
/// Every step goes through directory handles opened no-follow from `root` down: an entry
/// the plan saw as a directory and that is now a symlink is removed (the link itself) or
/// replaced by a directory, never followed; a directory moved away while the restore wrote
/// into it gives [`SnapshotError::Swapped`], and running the restore again finishes it.
#[allow(clippy::too_many_lines)]
pub(crate) fn apply(
    root: &Path,
    target: &Manifest,
    exclude: &[PathBuf],
    hook: Option<&Hook>,
    fill: &dyn Fn(&str, &Entry, &std::fs::File) -> std::io::Result<()>,
) -> Result<Applied, SnapshotError> {
    // A stored manifest is data read back from disk: refuse a path out of the tree before
    // anything is changed, not half way through.
    for rel in target.entries.keys() {
        tree::parts(rel)?;
    }
    let mut walk = Walk::new(tree::open_root(root)?, root);
    let current = scan_with(&mut walk, root, exclude, hook)?;
    let excluded = tree::relative(root, exclude);
    let mut applied = Applied::default();
    let mut budget = ENTRIES_MAX;
    // Remove what the target does not hold, or holds as another kind; deepest first.
    for (rel, entry) in tree_order(&current).into_iter().rev() {
        let keep = target
            .entries
            .get(rel)
            .is_some_and(|t| kind(t) == kind(entry));
        if keep {
            continue;
        }
        let (parts, name) = split(rel)?;
        let shown = root.join(rel);
        let parent = match walk.to(&parts) {
            Ok(parent) => parent,
            // The parent went, or is no longer a directory: nothing of it is left to remove
            // inside the tree (what took its place is dealt with as its own entry).
            Err(SnapshotError::Swapped { .. }) => continue,
            Err(SnapshotError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                continue;
            }
            Err(e) => return Err(e),
        };
        if let Entry::Dir { .. } = entry {
            tree::remove_tree(parent, name, rel, &mut budget, hook, Step::Remove)?;
            applied.removed += 1;
            continue;
        }
        tree::call(hook, Step::Remove, rel);
        match tree::unlink(parent, name) {
            Ok(()) => applied.removed += 1,
            // Already gone with a removed parent.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // A directory took its place since the scan.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::ISDIR.raw_os_error()) => {
                tree::remove_tree(parent, name, rel, &mut budget, hook, Step::Remove)?;
                applied.removed += 1;
            }
            Err(e) => return Err(SnapshotError::io("remove", &shown, e)),
        }
    }
    // Directories made anew by this restore (a symlink or file stood in their place): what
    // the scan saw under their names is not in them.
    let mut fresh: HashSet<&str> = HashSet::new();
    for (rel, entry) in tree_order(target) {
        if tree::excluded(&excluded, rel) {
            continue;
        }
        let under_fresh = rel
            .match_indices('/')
            .any(|(i, _)| fresh.contains(&rel[..i]));
        if matches!(entry, Entry::File { .. })
            && !under_fresh
            && current
                .entries
                .get(rel)
                .is_some_and(|c| same_file(c, entry))
        {
            applied.unchanged += 1;
            continue;
        }
        let (parts, name) = split(rel)?;
        let shown = root.join(rel);
        tree::call(hook, Step::Restore, rel);
        let parent = walk.to(&parts)?;
        match entry {
            Entry::Dir { mode } => {
                let (dir, made) =
                    tree::ensure_dir(parent, name).map_err(|e| inside("mkdir", rel, &shown, e))?;
                if made || under_fresh {
                    fresh.insert(rel);
                }
                // Its mode goes on when the walk leaves it, after its contents.
                walk.enter(name, dir, Some(*mode));
            }
            Entry::Symlink { target: to } => {
                let now = tree::read_link(parent, name).ok();
                if now.as_deref() != Some(to.as_bytes()) {
                    let temp = temp_name(name);
                    remove_temp(parent, &temp)?;
                    tree::symlink(to, parent, &temp)
                        .map_err(|e| inside("symlink", rel, &shown, e))?;
                    place(parent, &temp, name, &shown)?;
                    applied.written += 1;
                }
            }
            Entry::File { mtime_ns, mode, .. } => {
                let temp = temp_name(name);
                remove_temp(parent, &temp)?;
                let file = tree::create_file(parent, &temp)
                    .map_err(|e| inside("create", rel, &shown, e))?;
                fill(rel, entry, &file).map_err(|e| SnapshotError::io("restore", &shown, e))?;
                // Mode and mtime on the open file, never by path.
                file.set_permissions(std::fs::Permissions::from_mode(*mode))
                    .map_err(|e| SnapshotError::io("chmod", &shown, e))?;
                let when = SystemTime::UNIX_EPOCH + Duration::from_nanos((*mtime_ns).max(0) as u64);
                file.set_modified(when)
                    .map_err(|e| SnapshotError::io("set mtime", &shown, e))?;
                drop(file);
                place(parent, &temp, name, &shown)?;
                applied.written += 1;
            }
        }
    }
    let root_dir = walk.finish()?;
    // One filesystem-wide sync instead of one per file: a restore interrupted before this
    // point is redone from its recovery marker, so only its end must be durable.
    rustix::fs::syncfs(&root_dir)
        .map_err(|e| SnapshotError::io("sync", root, std::io::Error::from(e)))?;
    Ok(applied)
}
