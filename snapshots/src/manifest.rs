use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::store::SnapshotError;

/// Most entries one snapshot may hold.
pub const ENTRIES_MAX: usize = 2_000_000;

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
    /// Walk `root`, skipping any path in `exclude` (and everything under it).
    pub fn scan(root: &Path, exclude: &[PathBuf]) -> Result<Self, SnapshotError> {
        let mut entries = BTreeMap::new();
        let mut stack = vec![(root.to_owned(), String::new())];
        while let Some((dir, rel)) = stack.pop() {
            let listing =
                std::fs::read_dir(&dir).map_err(|e| SnapshotError::io("list", &dir, e))?;
            for item in listing {
                let item = item.map_err(|e| SnapshotError::io("list", &dir, e))?;
                let path = item.path();
                if exclude.iter().any(|x| path.starts_with(x)) {
                    continue;
                }
                let name =
                    item.file_name()
                        .into_string()
                        .map_err(|n| SnapshotError::UnsupportedName {
                            name: n.to_string_lossy().into_owned(),
                        })?;
                let key = if rel.is_empty() {
                    name
                } else {
                    format!("{rel}/{name}")
                };
                let meta = std::fs::symlink_metadata(&path)
                    .map_err(|e| SnapshotError::io("stat", &path, e))?;
                let entry = if meta.file_type().is_symlink() {
                    let target = std::fs::read_link(&path)
                        .map_err(|e| SnapshotError::io("readlink", &path, e))?;
                    Entry::Symlink {
                        target: target.to_string_lossy().into_owned(),
                    }
                } else if meta.is_dir() {
                    stack.push((path.clone(), key.clone()));
                    Entry::Dir {
                        mode: meta.permissions().mode() & 0o7777,
                    }
                } else if meta.is_file() {
                    Entry::File {
                        size: meta.len(),
                        mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
                        mode: meta.permissions().mode() & 0o7777,
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
        Ok(Self { entries })
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

/// Make the tree at `root` match `target`. `fill(rel, entry, dest)` writes a file's contents
/// to `dest` (a new temporary file beside the final one). Idempotent.
pub(crate) fn apply(
    root: &Path,
    target: &Manifest,
    exclude: &[PathBuf],
    fill: &dyn Fn(&str, &Entry, &Path) -> std::io::Result<()>,
) -> Result<Applied, SnapshotError> {
    let current = Manifest::scan(root, exclude)?;
    let mut applied = Applied::default();
    // Remove what the target does not hold, or holds as another kind; deepest first.
    for (rel, entry) in current.entries.iter().rev() {
        let keep = target
            .entries
            .get(rel)
            .is_some_and(|t| kind(t) == kind(entry));
        if keep {
            continue;
        }
        let path = root.join(rel);
        let removed = match entry {
            Entry::Dir { .. } => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
        match removed {
            Ok(()) => applied.removed += 1,
            // Already gone with a removed parent.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(SnapshotError::io("remove", &path, e)),
        }
    }
    for (rel, entry) in &target.entries {
        let path = root.join(rel);
        match entry {
            Entry::Dir { mode } => {
                if !path.is_dir() {
                    std::fs::create_dir(&path).map_err(|e| SnapshotError::io("mkdir", &path, e))?;
                }
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))
                    .map_err(|e| SnapshotError::io("chmod", &path, e))?;
            }
            Entry::Symlink { target: to } => {
                let now = std::fs::read_link(&path).ok();
                if now.as_deref() != Some(Path::new(to)) {
                    let _ = std::fs::remove_file(&path);
                    std::os::unix::fs::symlink(to, &path)
                        .map_err(|e| SnapshotError::io("symlink", &path, e))?;
                    applied.written += 1;
                }
            }
            Entry::File { mtime_ns, mode, .. } => {
                if current
                    .entries
                    .get(rel)
                    .is_some_and(|c| same_file(c, entry))
                {
                    applied.unchanged += 1;
                    continue;
                }
                let temp = path.with_file_name(format!(
                    ".{}.aido-restore-{}",
                    path.file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    std::process::id()
                ));
                let _ = std::fs::remove_file(&temp);
                fill(rel, entry, &temp).map_err(|e| SnapshotError::io("restore", &path, e))?;
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&temp)
                    .map_err(|e| SnapshotError::io("open", &temp, e))?;
                file.set_permissions(std::fs::Permissions::from_mode(*mode))
                    .map_err(|e| SnapshotError::io("chmod", &temp, e))?;
                let when = SystemTime::UNIX_EPOCH + Duration::from_nanos((*mtime_ns).max(0) as u64);
                file.set_modified(when)
                    .map_err(|e| SnapshotError::io("set mtime", &temp, e))?;
                std::fs::rename(&temp, &path).map_err(|e| SnapshotError::io("rename", &path, e))?;
                applied.written += 1;
            }
        }
    }
    // One filesystem-wide sync instead of one per file: a restore interrupted before this
    // point is redone from its recovery marker, so only its end must be durable.
    let dir = std::fs::File::open(root).map_err(|e| SnapshotError::io("open", root, e))?;
    rustix::fs::syncfs(&dir)
        .map_err(|e| SnapshotError::io("sync", root, std::io::Error::from(e)))?;
    Ok(applied)
}
