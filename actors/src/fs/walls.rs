use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use aido_actions::AccessKind;
use aido_policy::{FsResolver, PolicyEngine, SessionContext};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};

use super::error::FsError;

/// A path that passed the walls, with the root it lives under.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    /// Resolved, absolute.
    pub(crate) resolved: PathBuf,
    /// The wall root that admitted it.
    pub(crate) root: PathBuf,
    /// `resolved` relative to `root` (`.` for the root itself).
    pub(crate) rel: PathBuf,
    /// How it is touched.
    pub(crate) kind: AccessKind,
}

impl Target {
    pub(crate) fn shown(&self) -> String {
        self.resolved.display().to_string()
    }
}

/// What a write replaced.
pub(crate) struct Written {
    pub(crate) created: bool,
    /// The previous contents, kept (when the write was asked to keep them).
    pub(crate) before: Option<Kept>,
    /// Directories the write created above the file, outermost first.
    pub(crate) dirs: Vec<PathBuf>,
}

/// Previous contents a write kept: their blake3, and their bytes when they are small enough
/// to travel with the record (larger ones were streamed into the journal's blob store).
pub(crate) struct Kept {
    pub(crate) hash: String,
    pub(crate) bytes: Option<Vec<u8>>,
}

/// How a write keeps what it replaces: every previous contents are kept, of any size, or the
/// write is refused before it changes anything.
pub(crate) struct Keep<'a> {
    /// Where large previous contents are streamed.
    pub(crate) store: &'a aido_journal::BlobStore,
    /// `blob_bytes_max`: larger contents (new or previous) refuse the write.
    pub(crate) max: u64,
    /// The journal's directory, whose file system must keep `free_min` bytes free.
    pub(crate) journal_dir: &'a Path,
    /// `journal_free_bytes_min`.
    pub(crate) free_min: u64,
}

/// Previous contents up to this size are read into memory and travel with the record; larger
/// ones are streamed into the blob store in chunks.
const KEPT_IN_MEMORY_BYTES_MAX: u64 = 4 << 20;

impl Keep<'_> {
    /// Refuse before anything changes if the contents cannot be kept: larger than
    /// `blob_bytes_max`, or more than the journal's disk can hold beside `free_min`.
    fn admit(&self, path: &str, previous: u64, new: u64) -> Result<(), FsError> {
        for bytes in [previous, new] {
            if bytes > self.max {
                return Err(FsError::ContentsTooLarge {
                    path: path.to_owned(),
                    bytes,
                    max: self.max,
                });
            }
        }
        let free = rustix::fs::statvfs(self.journal_dir)
            .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
            .map_err(|e| FsError::io("stat the journal's disk for", path, e.into()))?;
        let needed = previous.saturating_add(new).saturating_add(self.free_min);
        if free < needed {
            return Err(FsError::JournalSpaceLow {
                path: path.to_owned(),
                needed,
                free,
            });
        }
        Ok(())
    }
}

/// Directory handles for the wall roots, and the checks around every open.
pub(crate) struct Walls {
    pub(crate) policy: Arc<PolicyEngine>,
    dirs: Mutex<HashMap<PathBuf, Arc<Dir>>>,
    counter: std::sync::atomic::AtomicU64,
}

impl Walls {
    pub(crate) fn new(policy: Arc<PolicyEngine>) -> Self {
        Self {
            policy,
            dirs: Mutex::new(HashMap::new()),
            counter: Default::default(),
        }
    }

    /// Judge a path as the policy does and find its root.
    pub(crate) fn check(
        &self,
        given: &str,
        kind: AccessKind,
        ctx: &SessionContext,
    ) -> Result<Target, FsError> {
        let check = self
            .policy
            .check_path(given, kind, ctx, &FsResolver)
            .map_err(|(gate, code, reason)| FsError::Denied { gate, code, reason })?;
        let rel = check
            .resolved
            .strip_prefix(&check.root)
            .map(Path::to_owned)
            .unwrap_or_default();
        let rel = if rel.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            rel
        };
        Ok(Target {
            resolved: check.resolved,
            root: check.root,
            rel,
            kind,
        })
    }

    /// The directory handle of a wall root, opened once.
    pub(crate) fn root_dir(&self, root: &Path) -> Result<Arc<Dir>, FsError> {
        let shown = root.display().to_string();
        let mut dirs = self.dirs.lock().map_err(|_| FsError::Io {
            op: "lock",
            path: shown.clone(),
            source: std::io::Error::other("poisoned"),
        })?;
        if let Some(dir) = dirs.get(root) {
            return Ok(dir.clone());
        }
        let dir = Arc::new(
            Dir::open_ambient_dir(root, ambient_authority())
                .map_err(|e| FsError::io("open root", &shown, e))?,
        );
        dirs.insert(root.to_owned(), dir.clone());
        Ok(dir)
    }

    /// Drop cached root handles (after a restore swapped a directory).
    pub(crate) fn forget_dirs(&self) {
        if let Ok(mut dirs) = self.dirs.lock() {
            dirs.clear();
        }
    }

    /// After an open: ask the kernel what the descriptor is, and judge that path too.
    pub(crate) fn confirm_fd(
        &self,
        file: &std::fs::File,
        target: &Target,
        ctx: &SessionContext,
    ) -> Result<(), FsError> {
        let Ok(real) = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) else {
            // Without /proc the cap-std open (which cannot leave the root) is the guard.
            return Ok(());
        };
        if real == target.resolved {
            return Ok(());
        }
        let real_text = real.display().to_string();
        match self
            .policy
            .check_path(&real_text, target.kind, ctx, &FsResolver)
        {
            Ok(_) => Ok(()),
            Err(_) => Err(FsError::ChangedDuringCheck {
                path: target.shown(),
                now: real_text,
            }),
        }
    }

    /// Open an existing regular file for reading.
    pub(crate) fn open_read(
        &self,
        target: &Target,
        ctx: &SessionContext,
    ) -> Result<std::fs::File, FsError> {
        let dir = self.root_dir(&target.root)?;
        let file = dir
            .open(&target.rel)
            .map_err(|e| FsError::io("open", &target.shown(), e))?
            .into_std();
        self.confirm_fd(&file, target, ctx)?;
        let meta = file
            .metadata()
            .map_err(|e| FsError::io("stat", &target.shown(), e))?;
        if !meta.is_file() {
            return Err(FsError::NotAFile {
                path: target.shown(),
            });
        }
        Ok(file)
    }

    /// Metadata following symlinks inside the root; `None` when the path does not exist.
    pub(crate) fn metadata(
        &self,
        target: &Target,
    ) -> Result<Option<cap_std::fs::Metadata>, FsError> {
        let dir = self.root_dir(&target.root)?;
        match dir.metadata(&target.rel) {
            Ok(m) => Ok(Some(m)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(FsError::io("stat", &target.shown(), e)),
        }
    }

    /// Read a whole file, at most `max` bytes (larger files are refused).
    pub(crate) fn read_all(
        &self,
        target: &Target,
        ctx: &SessionContext,
        max: u64,
    ) -> Result<Vec<u8>, FsError> {
        let file = self.open_read(target, ctx)?;
        let size = file
            .metadata()
            .map_err(|e| FsError::io("stat", &target.shown(), e))?
            .len();
        if size > max {
            return Err(FsError::TooLarge {
                path: target.shown(),
                bytes: size,
                max,
            });
        }
        let mut bytes = Vec::with_capacity(size as usize);
        // take() guards against a file that grows while it is read.
        file.take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| FsError::io("read", &target.shown(), e))?;
        if bytes.len() as u64 > max {
            return Err(FsError::TooLarge {
                path: target.shown(),
                bytes: bytes.len() as u64,
                max,
            });
        }
        Ok(bytes)
    }

    /// Replace a file atomically: write a temporary file beside it, sync it, rename it over.
    /// With `keep`, the previous contents are kept for the journal (of any size: small ones
    /// in memory, large ones streamed into the blob store), and a write whose contents cannot
    /// be kept is refused before anything changes; `create_parents` creates the missing
    /// directories above the file and reports them.
    pub(crate) fn write_atomic(
        &self,
        target: &Target,
        ctx: &SessionContext,
        bytes: &[u8],
        create_parents: bool,
        keep: Option<&Keep>,
    ) -> Result<Written, FsError> {
        let shown = target.shown();
        let dir = self.root_dir(&target.root)?;
        let parent = target.rel.parent().map(Path::to_owned).unwrap_or_default();
        let name = target.rel.file_name().ok_or_else(|| FsError::NotAFile {
            path: shown.clone(),
        })?;
        let existing = match dir.open(&target.rel) {
            Ok(file) => {
                let file = file.into_std();
                self.confirm_fd(&file, target, ctx)?;
                let meta = file
                    .metadata()
                    .map_err(|e| FsError::io("stat", &shown, e))?;
                if !meta.is_file() {
                    return Err(FsError::NotAFile { path: shown });
                }
                Some((file, meta))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(FsError::io("open", &shown, e)),
        };
        if let Some(keep) = keep {
            let previous = existing.as_ref().map_or(0, |(_, m)| m.len());
            keep.admit(&shown, previous, bytes.len() as u64)?;
        }
        let (before, permissions) = match existing {
            Some((mut file, meta)) => {
                let before = match keep {
                    None => None,
                    Some(_) if meta.len() <= KEPT_IN_MEMORY_BYTES_MAX => {
                        let mut old = Vec::with_capacity(meta.len() as usize);
                        file.read_to_end(&mut old)
                            .map_err(|e| FsError::io("read", &shown, e))?;
                        Some(Kept {
                            hash: blake3::hash(&old).to_hex().to_string(),
                            bytes: Some(old),
                        })
                    }
                    Some(keep) => {
                        let stored = keep
                            .store
                            .put_stream(&mut file, keep.max)
                            .map_err(|e| FsError::KeepFailed {
                                path: shown.clone(),
                                reason: e.to_string(),
                            })?;
                        Some(Kept {
                            hash: stored.hash,
                            bytes: None,
                        })
                    }
                };
                (before, Some(meta.permissions()))
            }
            None => (None, None),
        };
        let created = permissions.is_none();
        // Missing parents are created one by one, so each one made is known (and journaled,
        // so a rewind removes it again).
        let mut dirs = Vec::new();
        if create_parents && created && !parent.as_os_str().is_empty() {
            let mut missing = Vec::new();
            let mut at = parent.as_path();
            loop {
                match dir.symlink_metadata(at) {
                    Ok(_) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing.push(at),
                    Err(e) => return Err(FsError::io("stat parent of", &shown, e)),
                }
                match at.parent() {
                    Some(up) if !up.as_os_str().is_empty() => at = up,
                    _ => break,
                }
            }
            for rel in missing.iter().rev() {
                match dir.create_dir(rel) {
                    Ok(()) => dirs.push(target.root.join(rel)),
                    // Made by someone else meanwhile: not ours to remove.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(FsError::io("create parent of", &shown, e)),
                }
            }
        }
        let n = self
            .counter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let temp = parent.join(format!(
            ".{}.aido-{}-{n}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        let mut file = dir
            .open_with(&temp, OpenOptions::new().write(true).create_new(true))
            .map_err(|e| FsError::io("create", &shown, e))?
            .into_std();
        let result = (|| {
            // The temporary file must sit where the checked target's parent is.
            let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok();
            if let Some(real) = real
                && real.parent() != target.resolved.parent()
            {
                return Err(FsError::ChangedDuringCheck {
                    path: shown.clone(),
                    now: real.display().to_string(),
                });
            }
            file.write_all(bytes)
                .map_err(|e| FsError::io("write", &shown, e))?;
            if let Some(p) = permissions {
                file.set_permissions(p)
                    .map_err(|e| FsError::io("chmod", &shown, e))?;
            }
            file.sync_all()
                .map_err(|e| FsError::io("sync", &shown, e))?;
            dir.rename(&temp, &dir, &target.rel)
                .map_err(|e| FsError::io("rename", &shown, e))
        })();
        if result.is_err() {
            let _ = dir.remove_file(&temp);
            // Directories made for a write that did not happen are not left behind.
            for made in dirs.iter().rev() {
                if let Ok(rel) = made.strip_prefix(&target.root) {
                    let _ = dir.remove_dir(rel);
                }
            }
        }
        result?;
        Ok(Written {
            created,
            before,
            dirs,
        })
    }
}
