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
    pub(crate) before: Option<Vec<u8>>,
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
            .map_err(|refusal| FsError::Denied {
                gate: refusal.gate(),
                code: refusal.code().code(),
                reason: refusal.to_string(),
            })?;
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
    /// The previous contents (up to `before_max` bytes) are returned for the journal.
    pub(crate) fn write_atomic(
        &self,
        target: &Target,
        ctx: &SessionContext,
        bytes: &[u8],
        create_parents: bool,
        before_max: u64,
    ) -> Result<Written, FsError> {
        let shown = target.shown();
        let dir = self.root_dir(&target.root)?;
        let parent = target.rel.parent().map(Path::to_owned).unwrap_or_default();
        let name = target.rel.file_name().ok_or_else(|| FsError::NotAFile {
            path: shown.clone(),
        })?;
        if create_parents && !parent.as_os_str().is_empty() {
            dir.create_dir_all(&parent)
                .map_err(|e| FsError::io("create parent of", &shown, e))?;
        }
        let (before, permissions) = match dir.open(&target.rel) {
            Ok(file) => {
                let file = file.into_std();
                self.confirm_fd(&file, target, ctx)?;
                let meta = file
                    .metadata()
                    .map_err(|e| FsError::io("stat", &shown, e))?;
                if !meta.is_file() {
                    return Err(FsError::NotAFile { path: shown });
                }
                let before = if meta.len() <= before_max {
                    let mut old = Vec::with_capacity(meta.len() as usize);
                    let mut file = file;
                    file.read_to_end(&mut old)
                        .map_err(|e| FsError::io("read", &shown, e))?;
                    Some(old)
                } else {
                    None
                };
                (before, Some(meta.permissions()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (None, None),
            Err(e) => return Err(FsError::io("open", &shown, e)),
        };
        let created = permissions.is_none();
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
        }
        result?;
        Ok(Written { created, before })
    }
}
