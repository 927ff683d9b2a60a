use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use aido_actions::AccessKind;
use aido_policy::{FsResolver, PolicyEngine, SessionContext};
use base64::Engine;
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::error::FsError;
use aido_walk::fs::render::NewContents;

/// A path that passed the walls, with the root it lives under.
#[derive(Clone, Debug)]
pub struct Target {
    /// Resolved, absolute.
    pub resolved: PathBuf,
    /// The wall root that admitted it.
    pub root: PathBuf,
    /// `resolved` relative to `root` (`.` for the root itself).
    pub rel: PathBuf,
    /// How it is touched.
    pub kind: AccessKind,
}

impl Target {
    pub fn shown(&self) -> String {
        self.resolved.display().to_string()
    }
}

/// What a write replaced.
pub struct Written {
    pub created: bool,
    /// The new file's modification time, nanoseconds since the epoch.
    pub mtime_ns: Option<i64>,
    /// The replaced file's modification time.
    pub before_mtime_ns: Option<i64>,
    /// The previous contents, kept (when the write was asked to keep them).
    pub before: Option<Kept>,
    /// Directories the write created above the file, outermost first.
    pub dirs: Vec<PathBuf>,
}

/// Previous contents a write kept: their blake3, and their bytes when they are small enough
/// to travel with the record (larger ones were streamed into the journal's blob store).
pub struct Kept {
    pub hash: String,
    pub bytes: Option<Vec<u8>>,
}

/// How a write keeps what it replaces: every previous contents are kept, of any size, or the
/// write is refused before it changes anything.
pub struct Keep<'a> {
    /// Where large previous contents are streamed.
    pub store: &'a aido_journal::BlobStore,
    /// `blob_bytes_max`: larger contents (new or previous) refuse the write.
    pub max: u64,
    /// The journal's directory, whose file system must keep `free_min` bytes free.
    pub journal_dir: &'a Path,
    /// `journal_free_bytes_min`.
    pub free_min: u64,
    /// Where the write says what it is about to do, before its rename (journaled actions).
    pub intents: Option<&'a super::intent::Intents>,
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

/// An error of a cap-std open relative to a root. cap-std refuses, with a `PermissionDenied`
/// that carries no OS error, a path that would lead out of the root's directory; a checked
/// path (resolved, with no symlink in it) can only do that when a symlink was swapped in
/// after the check, so that is [`FsError::ChangedDuringCheck`].
fn opening(op: &'static str, target: &Target, e: std::io::Error) -> FsError {
    if e.kind() == std::io::ErrorKind::PermissionDenied && e.raw_os_error().is_none() {
        return FsError::ChangedDuringCheck {
            path: target.shown(),
            now: "a path that leads out of its root".into(),
        };
    }
    FsError::io(op, &target.shown(), e)
}

/// Directory handles for the wall roots, and the checks around every open.
pub struct Walls {
    pub policy: Arc<PolicyEngine>,
    dirs: Mutex<HashMap<PathBuf, Arc<Dir>>>,
    counter: std::sync::atomic::AtomicU64,
}

impl Walls {
    pub fn new(policy: Arc<PolicyEngine>) -> Self {
        Self {
            policy,
            dirs: Mutex::new(HashMap::new()),
            counter: Default::default(),
        }
    }

    /// Judge a path as the policy does and find its root.
    pub fn check(
        &self,
        given: &str,
        kind: AccessKind,
        ctx: &SessionContext,
    ) -> Result<Target, FsError> {
        // Resolved once: what the chain admitted for this action is used as it is. The open
        // under the root's handle and `confirm_fd` judge what is really opened.
        let check = match ctx.admitted(given, kind) {
            Some(check) => check.clone(),
            None => self
                .policy
                .check_path(given, kind, ctx, &FsResolver)
                .map_err(|refusal| FsError::Denied {
                    gate: refusal.gate(),
                    code: refusal.code().code(),
                    reason: refusal.to_string(),
                })?,
        };
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
    pub fn root_dir(&self, root: &Path) -> Result<Arc<Dir>, FsError> {
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
    pub fn forget_dirs(&self) {
        if let Ok(mut dirs) = self.dirs.lock() {
            dirs.clear();
        }
    }

    /// After an open: ask the kernel what the descriptor is, and judge that path too.
    pub fn confirm_fd(
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
    pub fn open_read(
        &self,
        target: &Target,
        ctx: &SessionContext,
    ) -> Result<std::fs::File, FsError> {
        let dir = self.root_dir(&target.root)?;
        let file = dir
            .open(&target.rel)
            .map_err(|e| opening("open", target, e))?
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

    /// Make a symbolic link at `target` (checked as the entry itself) pointing at `points_to`,
    /// its parent directories made as needed. A link already there goes first (it is what a
    /// rewind puts back); anything else there is left, and the call fails.
    pub fn make_link(&self, target: &Target, points_to: &str) -> Result<(), FsError> {
        let shown = target.shown();
        let parent = self
            .parent(target, Missing::Create, &mut Vec::new())?
            .ok_or_else(|| FsError::NotFound {
                path: shown.clone(),
            })?;
        let name = parent.name.as_os_str();
        match rustix::fs::statat(&parent.dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink => {
                rustix::fs::unlinkat(&parent.dir, name, AtFlags::empty())
                    .map_err(|e| FsError::io("unlink", &shown, e.into()))?;
            }
            Ok(_) => {
                return Err(FsError::io(
                    "link",
                    &shown,
                    std::io::Error::from(std::io::ErrorKind::AlreadyExists),
                ));
            }
            Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(FsError::io("stat", &shown, e.into())),
        }
        rustix::fs::symlinkat(points_to, &parent.dir, name)
            .map_err(|e| FsError::io("symlink", &shown, e.into()))
    }

    /// Set the permission bits (`0o7777` at most) of the file or directory at `target`,
    /// through a descriptor checked like every open; the bits it had, or `None` when nothing
    /// is there.
    pub fn set_mode(
        &self,
        target: &Target,
        ctx: &SessionContext,
        mode: u32,
    ) -> Result<Option<u32>, FsError> {
        use std::os::unix::fs::PermissionsExt;
        let Some(meta) = self.metadata(target)? else {
            return Ok(None);
        };
        let dir = self.root_dir(&target.root)?;
        let opened = if meta.is_dir() {
            dir.open_dir(&target.rel).map(Dir::into_std_file)
        } else {
            dir.open(&target.rel).map(cap_std::fs::File::into_std)
        }
        .map_err(|e| opening("open", target, e))?;
        self.confirm_fd(&opened, target, ctx)?;
        let shown = target.shown();
        let before = opened
            .metadata()
            .map_err(|e| FsError::io("stat", &shown, e))?
            .permissions()
            .mode()
            & 0o7777;
        if before != mode & 0o7777 {
            let bits = std::fs::Permissions::from_mode(mode & 0o7777);
            let set = if meta.is_dir() {
                // cap-std opens directories with O_PATH, which fchmod refuses: the descriptor's
                // magic link names exactly the directory it opened.
                std::fs::set_permissions(format!("/proc/self/fd/{}", opened.as_raw_fd()), bits)
            } else {
                opened.set_permissions(bits)
            };
            set.map_err(|e| FsError::io("chmod", &shown, e))?;
        }
        Ok(Some(before))
    }

    /// Give the entry at `target` (a link is not followed) the modification time `mtime_ns`,
    /// through its parent's handle.
    pub fn set_mtime(&self, target: &Target, mtime_ns: i64) -> Result<(), FsError> {
        let shown = target.shown();
        let Some(parent) = self.parent(target, Missing::Absent, &mut Vec::new())? else {
            return Err(FsError::NotFound { path: shown });
        };
        let at = rustix::fs::Timespec {
            tv_sec: mtime_ns.div_euclid(1_000_000_000),
            tv_nsec: mtime_ns.rem_euclid(1_000_000_000),
        };
        rustix::fs::utimensat(
            &parent.dir,
            parent.name.as_os_str(),
            &rustix::fs::Timestamps {
                last_access: at,
                last_modification: at,
            },
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| FsError::io("set the time of", &shown, e.into()))
    }

    /// Metadata of the entry itself (a symlink is not followed); `None` when nothing is there.
    pub fn entry_metadata(
        &self,
        target: &Target,
    ) -> Result<Option<cap_std::fs::Metadata>, FsError> {
        let dir = self.root_dir(&target.root)?;
        match dir.symlink_metadata(&target.rel) {
            Ok(m) => Ok(Some(m)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(opening("stat", target, e)),
        }
    }

    /// Metadata following symlinks inside the root; `None` when the path does not exist.
    pub fn metadata(&self, target: &Target) -> Result<Option<cap_std::fs::Metadata>, FsError> {
        let dir = self.root_dir(&target.root)?;
        match dir.metadata(&target.rel) {
            Ok(m) => Ok(Some(m)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(opening("stat", target, e)),
        }
    }

    /// Read a whole file, at most `max` bytes (larger files are refused).
    pub fn read_all(
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
    pub fn write_atomic(
        &self,
        target: &Target,
        ctx: &SessionContext,
        new: &NewContents<'_>,
        create_parents: bool,
        keep: Option<&Keep>,
    ) -> Result<Written, FsError> {
        let bytes = new.bytes;
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
            Err(e) => return Err(opening("open", target, e)),
        };
        if let Some(keep) = keep {
            let previous = existing.as_ref().map_or(0, |(_, m)| m.len());
            keep.admit(&shown, previous, bytes.len() as u64)?;
        }
        let existing_mtime = existing.as_ref().map(|(_, meta)| mtime_ns(meta));
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
                        let stored = keep.store.put_stream(&mut file, keep.max).map_err(|e| {
                            FsError::KeepFailed {
                                path: shown.clone(),
                                reason: e.to_string(),
                            }
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
        let before_mtime_ns = existing_mtime;
        // Missing parents are created one by one, so each one made is known (and journaled,
        // so a rewind removes it again).
        let mut missing = Vec::new();
        if create_parents && created && !parent.as_os_str().is_empty() {
            let mut at = parent.as_path();
            loop {
                match dir.symlink_metadata(at) {
                    Ok(_) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing.push(at),
                    Err(e) => return Err(opening("stat parent of", target, e)),
                }
                match at.parent() {
                    Some(up) if !up.as_os_str().is_empty() => at = up,
                    _ => break,
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
        // Before anything is made in the workspace, the write says what it will do.
        if let Some(keep) = keep
            && let Some(intents) = keep.intents
        {
            let planned = aido_walk::fs::render::Replaced {
                mtime_ns: None,
                before_mtime_ns: existing_mtime,
                path: shown.clone(),
                created,
                before: before.as_ref().map(|k| k.hash.clone()),
                dirs: missing
                    .iter()
                    .rev()
                    .map(|r| target.root.join(r).display().to_string())
                    .collect(),
                blob: new.blob().to_owned(),
            };
            let temp = target.root.join(&temp);
            intend(
                keep,
                intents,
                target,
                bytes.len() as u64,
                &planned,
                before.as_ref(),
                temp,
            )?;
        }
        let mut dirs = Vec::new();
        for rel in missing.iter().rev() {
            match dir.create_dir(rel) {
                Ok(()) => dirs.push(target.root.join(rel)),
                // Made by someone else meanwhile: not ours to remove.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(opening("create parent of", target, e)),
            }
        }
        let mut file = dir
            .open_with(&temp, OpenOptions::new().write(true).create_new(true))
            .map_err(|e| opening("create", target, e))?
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
            if let Some(mtime_ns) = new.mtime_ns {
                let time = std::time::UNIX_EPOCH
                    + std::time::Duration::from_nanos(u64::try_from(mtime_ns).unwrap_or(0));
                file.set_modified(time)
                    .map_err(|e| FsError::io("set the time of", &shown, e))?;
            }
            file.sync_all()
                .map_err(|e| FsError::io("sync", &shown, e))?;
            let written = file
                .metadata()
                .map_err(|e| FsError::io("stat", &shown, e))?;
            dir.rename(&temp, &dir, &target.rel)
                .map_err(|e| FsError::io("rename", &shown, e))?;
            Ok(mtime_ns(&written))
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
        let mtime_ns = result?;
        Ok(Written {
            created,
            mtime_ns: Some(mtime_ns),
            before_mtime_ns,
            before,
            dirs,
        })
    }
}

/// A file's modification time, nanoseconds since the epoch.
fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    use std::os::unix::fs::MetadataExt;
    meta.mtime() * 1_000_000_000 + meta.mtime_nsec()
}

/// Say what a write is about to do, before it makes anything (see `super::intent`). Previous
/// contents streamed into the blob store are flushed first, so the intent never names a blob
/// a kill -9 could lose.
fn intend(
    keep: &Keep<'_>,
    intents: &super::intent::Intents,
    target: &Target,
    bytes: u64,
    planned: &aido_walk::fs::render::Replaced,
    before: Option<&Kept>,
    temp: PathBuf,
) -> Result<(), FsError> {
    if before.is_some_and(|k| k.bytes.is_none()) {
        keep.store.flush().map_err(|e| FsError::KeepFailed {
            path: planned.path.clone(),
            reason: e.to_string(),
        })?;
    }
    intents.record(&super::intent::Intent {
        resolved: target.resolved.clone(),
        temp,
        blob: planned.blob.clone(),
        bytes,
        effects: planned.effects(),
        before: before
            .and_then(|k| k.bytes.as_deref())
            .map(|b| base64::engine::general_purpose::STANDARD.encode(b)),
    })
}

/// A test hook at the moment between judging a path and changing it, where a test can swap a
/// directory for a symlink. Process-global so an end-to-end test can reach the body inside a
/// real runtime; every hook added runs on every call, so each test filters on its own paths.
/// With none added, a call costs one atomic load.
#[doc(hidden)]
pub mod hook {
    use std::path::Path;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    /// The change about to be made to the path the hook is given (resolved, absolute).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Op {
        /// A rewind's `remove` step.
        Remove,
        /// A rewind's `move` step: called for its source, then for its destination.
        Move,
        /// A rewind's `mkdir` step.
        Mkdir,
        /// A rewind's `write` step.
        Write,
        /// `move_to_trash`, before a directory's contents are checked.
        Trash,
        /// `restore_from_trash` (the path the item goes back to).
        Restore,
    }

    type HookFn = dyn Fn(Op, &Path) + Send + Sync;

    static ACTIVE: AtomicUsize = AtomicUsize::new(0);
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static HOOKS: Mutex<Vec<(u64, Arc<HookFn>)>> = Mutex::new(Vec::new());

    /// Keeps a hook in place; dropping it removes the hook.
    #[must_use = "the hook is removed when the guard is dropped"]
    pub struct Guard(u64);

    impl Drop for Guard {
        fn drop(&mut self) {
            if let Ok(mut hooks) = HOOKS.lock() {
                hooks.retain(|(id, _)| *id != self.0);
                ACTIVE.store(hooks.len(), Ordering::SeqCst);
            }
        }
    }

    /// Add a hook, called with the operation and the checked path after the check and before
    /// the act, until the guard is dropped.
    pub fn add(f: impl Fn(Op, &Path) + Send + Sync + 'static) -> Guard {
        let id = NEXT.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut hooks) = HOOKS.lock() {
            hooks.push((id, Arc::new(f)));
            ACTIVE.store(hooks.len(), Ordering::SeqCst);
        }
        Guard(id)
    }

    /// Run every hook (outside the lock, so a hook may take its time).
    pub fn call(op: Op, path: &Path) {
        if ACTIVE.load(Ordering::Relaxed) == 0 {
            return;
        }
        let hooks: Vec<Arc<HookFn>> = match HOOKS.lock() {
            Ok(hooks) => hooks.iter().map(|(_, f)| f.clone()).collect(),
            Err(_) => return,
        };
        for f in hooks {
            f(op, path);
        }
    }
}

/// Most entries (files, links and directories, each once) one removal, copy or check of a
/// tree goes through.
pub const TREE_ENTRIES_MAX: usize = 200_000;

/// Most directories deep one removal, copy or check of a tree goes.
pub const TREE_DEPTH_MAX: usize = 256;

fn errno(e: rustix::io::Errno) -> std::io::Error {
    std::io::Error::from(e)
}

/// True for what an `O_NOFOLLOW | O_DIRECTORY` open gives when the name is a symlink
/// (`ELOOP`) or not a directory (`ENOTDIR`).
pub fn is_swapped(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(code) if code == rustix::io::Errno::LOOP.raw_os_error()
            || code == rustix::io::Errno::NOTDIR.raw_os_error()
    )
}

/// Open the directory `name` in `parent`, refusing a symlink (one component, never followed).
pub fn open_dir(parent: &Dir, name: &OsStr) -> std::io::Result<Dir> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(parent, name, flags, Mode::empty())
        .map(|fd| Dir::from_std_file(std::fs::File::from(fd)))
        .map_err(errno)
}

/// The directory `name` in `parent`, made (mode 0777 less the umask, as `create_dir_all`
/// does) if missing; the flag says it was made here.
fn ensure_dir(parent: &Dir, name: &OsStr) -> std::io::Result<(Dir, bool)> {
    match open_dir(parent, name) {
        Ok(dir) => return Ok((dir, false)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let made = match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o777)) {
        Ok(()) => true,
        Err(rustix::io::Errno::EXIST) => false,
        Err(e) => return Err(errno(e)),
    };
    // Anything that took the name meanwhile is refused, not followed.
    open_dir(parent, name).map(|dir| (dir, made))
}

/// What the kernel says an open directory is (`None` without /proc).
pub fn real_path(dir: &Dir) -> Option<PathBuf> {
    use std::os::fd::AsFd;
    let fd = dir.as_fd().as_raw_fd();
    std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()
}

/// The directory a checked path lives in, opened one component at a time from the root's
/// handle without following symlinks, and the path's last component: every change is made
/// relative to it (`unlinkat`, `renameat`, `mkdirat`), so nothing swapped in after the check
/// can lead it out of the root.
pub struct Parent {
    pub dir: Dir,
    pub name: OsString,
}

/// Whether [`Walls::parent`] makes missing directories.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// A missing directory means there is nothing there (`None`).
    Absent,
    /// Missing directories are made, one by one.
    Create,
}

impl Walls {
    /// The checked path's directory, by handle (see [`Parent`]). A component that is now a
    /// symlink or not a directory, or a directory that was moved out from under the walk, is
    /// [`FsError::ChangedDuringCheck`]. With [`Missing::Absent`], `None` when a directory on
    /// the way does not exist; with [`Missing::Create`], those are made and pushed to `made`.
    pub fn parent(
        &self,
        target: &Target,
        missing: Missing,
        made: &mut Vec<PathBuf>,
    ) -> Result<Option<Parent>, FsError> {
        let shown = target.shown();
        let (Some(name), Some(above)) = (target.rel.file_name(), target.rel.parent()) else {
            return Err(FsError::io(
                "open the parent of",
                &shown,
                std::io::Error::from(std::io::ErrorKind::InvalidInput),
            ));
        };
        let root = self.root_dir(&target.root)?;
        let mut dir = root
            .try_clone()
            .map_err(|e| FsError::io("open root", &shown, e))?;
        let mut at = target.root.clone();
        for part in above.components() {
            let std::path::Component::Normal(part) = part else {
                return Err(FsError::ChangedDuringCheck {
                    path: shown,
                    now: format!("a path with {part:?} in it"),
                });
            };
            at.push(part);
            let next = match missing {
                Missing::Absent => open_dir(&dir, part).map(|d| (d, false)),
                Missing::Create => ensure_dir(&dir, part),
            };
            dir = match next {
                Ok((next, was_made)) => {
                    if was_made {
                        made.push(at.clone());
                    }
                    next
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) if is_swapped(&e) && is_link(&dir, part) => {
                    return Err(FsError::ChangedDuringCheck {
                        path: shown,
                        now: format!("{} is a symlink", at.display()),
                    });
                }
                // Not a directory, as when the check saw it (nothing under it exists).
                Err(e) if is_swapped(&e) && missing == Missing::Absent => return Ok(None),
                Err(e) => return Err(FsError::io("open the parent of", &shown, e)),
            };
        }
        // The walk cannot leave the root, but a directory on it can be moved elsewhere while
        // it is held: act only in the one the check named.
        if let Some(real) = real_path(&dir)
            && Some(real.as_path()) != target.resolved.parent()
        {
            return Err(FsError::ChangedDuringCheck {
                path: shown,
                now: real.join(name).display().to_string(),
            });
        }
        Ok(Some(Parent {
            dir,
            name: name.to_owned(),
        }))
    }

    /// Remove a checked path if it exists: a file or symlink is unlinked itself, a directory
    /// with everything under it ([`remove_tree`]), all relative to the root's handle.
    pub fn remove(&self, target: &Target) -> Result<(), FsError> {
        let Some(parent) = self.parent(target, Missing::Absent, &mut Vec::new())? else {
            return Ok(());
        };
        let mut budget = TREE_ENTRIES_MAX;
        remove_tree(&parent.dir, &parent.name, &target.resolved, 0, &mut budget)
    }

    /// Make a checked directory and the missing ones above it, one component at a time
    /// relative to the root's handle (what `create_dir_all` does, without following links).
    pub fn make_dirs(&self, target: &Target) -> Result<(), FsError> {
        if target.rel == Path::new(".") {
            return Ok(());
        }
        let shown = target.shown();
        let Some(parent) = self.parent(target, Missing::Create, &mut Vec::new())? else {
            return Err(FsError::NotFound { path: shown });
        };
        match ensure_dir(&parent.dir, &parent.name) {
            Ok(_) => Ok(()),
            Err(e) if is_swapped(&e) && is_link(&parent.dir, &parent.name) => {
                Err(FsError::ChangedDuringCheck {
                    path: shown.clone(),
                    now: format!("{shown} is a symlink"),
                })
            }
            Err(e) => Err(FsError::io("mkdir", &shown, e)),
        }
    }
}

/// True when `name` in `parent` is a symlink now.
fn is_link(parent: &Dir, name: &OsStr) -> bool {
    lstat(parent, name).is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
}

fn lstat(parent: &Dir, name: &OsStr) -> std::io::Result<rustix::fs::Stat> {
    rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)
}

/// Count one entry against a tree's budget.
fn spend(budget: &mut usize, shown: &Path) -> Result<(), FsError> {
    *budget = budget.checked_sub(1).ok_or(FsError::TreeTooLarge {
        path: shown.display().to_string(),
        what: "entries",
        max: TREE_ENTRIES_MAX,
    })?;
    Ok(())
}

fn too_deep(shown: &Path) -> FsError {
    FsError::TreeTooLarge {
        path: shown.display().to_string(),
        what: "directories deep",
        max: TREE_DEPTH_MAX,
    }
}

/// The names in a directory held open, at most `budget` of them.
fn names(dir: &Dir, shown: &Path, budget: usize) -> Result<Vec<OsString>, FsError> {
    let fail = |e| FsError::io("list", &shown.display().to_string(), e);
    let mut names = Vec::new();
    for entry in dir.entries().map_err(fail)? {
        names.push(entry.map_err(fail)?.file_name());
        if names.len() > budget {
            return Err(FsError::TreeTooLarge {
                path: shown.display().to_string(),
                what: "entries",
                max: TREE_ENTRIES_MAX,
            });
        }
    }
    Ok(names)
}

/// Remove `name` in `parent` and everything under it, never following a symlink: a directory
/// is opened no-follow from its parent and emptied through that handle, and a symlink met
/// anywhere (even one swapped in for a directory mid-way) is unlinked itself. Every entry
/// counts against `budget`; missing is not an error. `shown` is the path for messages.
pub fn remove_tree(
    parent: &Dir,
    name: &OsStr,
    shown: &Path,
    depth: usize,
    budget: &mut usize,
) -> Result<(), FsError> {
    let fail = |op, e| FsError::io(op, &shown.display().to_string(), e);
    spend(budget, shown)?;
    let dir = match open_dir(parent, name) {
        Ok(dir) => dir,
        Err(e) if is_swapped(&e) => {
            return match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
                Err(e) => Err(fail("remove", errno(e))),
            };
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(fail("open", e)),
    };
    if depth >= TREE_DEPTH_MAX {
        return Err(too_deep(shown));
    }
    // Names first, then removals: the listing is not read while it changes.
    for child in names(&dir, shown, *budget)? {
        let child_shown = shown.join(&child);
        match rustix::fs::unlinkat(&dir, child.as_os_str(), AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => spend(budget, &child_shown)?,
            Err(rustix::io::Errno::ISDIR) => {
                remove_tree(&dir, &child, &child_shown, depth + 1, budget)?
            }
            Err(e) => return Err(fail("remove", errno(e))),
        }
    }
    drop(dir);
    match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        // The directory emptied through its handle was moved away and something else took its
        // name: that is not ours to remove.
        Err(rustix::io::Errno::NOTDIR) => Err(FsError::ChangedDuringCheck {
            path: shown.display().to_string(),
            now: format!("{} is not a directory", shown.display()),
        }),
        Err(e) => Err(fail("remove", errno(e))),
    }
}

/// Copy `name` in `source` to `to` in `target` (which must not exist), never following a
/// symlink: directories are made and filled through handles, files copied from a no-follow
/// open, symlinks made anew with the same text; modes are kept. Counts against `budget`.
fn copy_tree(
    source: &Dir,
    name: &OsStr,
    target: &Dir,
    to: &OsStr,
    shown: &Path,
    depth: usize,
    budget: &mut usize,
) -> Result<(), FsError> {
    let fail = |op, e| FsError::io(op, &shown.display().to_string(), e);
    spend(budget, shown)?;
    let st = lstat(source, name).map_err(|e| fail("stat", e))?;
    let mode = Mode::from_raw_mode(st.st_mode & 0o7777);
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => {
            if depth >= TREE_DEPTH_MAX {
                return Err(too_deep(shown));
            }
            let from = open_dir(source, name).map_err(|e| fail("open", e))?;
            rustix::fs::mkdirat(target, to, Mode::from_raw_mode(0o700))
                .map_err(|e| fail("create", errno(e)))?;
            let into = open_dir(target, to).map_err(|e| fail("open", e))?;
            for child in names(&from, shown, *budget)? {
                let child_shown = shown.join(&child);
                copy_tree(
                    &from,
                    &child,
                    &into,
                    &child,
                    &child_shown,
                    depth + 1,
                    budget,
                )?;
            }
            rustix::fs::fchmod(&into, mode).map_err(|e| fail("chmod", errno(e)))
        }
        FileType::Symlink => {
            let text = rustix::fs::readlinkat(source, name, Vec::new())
                .map_err(|e| fail("read link", errno(e)))?;
            rustix::fs::symlinkat(text.as_c_str(), target, to)
                .map_err(|e| fail("create link", errno(e)))
        }
        FileType::RegularFile => {
            let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
            let mut from = std::fs::File::from(
                rustix::fs::openat(source, name, flags, Mode::empty())
                    .map_err(|e| fail("open", errno(e)))?,
            );
            if !from.metadata().map_err(|e| fail("stat", e))?.is_file() {
                return Err(fail(
                    "copy",
                    std::io::Error::from(std::io::ErrorKind::InvalidData),
                ));
            }
            let flags =
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let mut into = std::fs::File::from(
                rustix::fs::openat(target, to, flags, Mode::from_raw_mode(0o600))
                    .map_err(|e| fail("create", errno(e)))?,
            );
            std::io::copy(&mut from, &mut into).map_err(|e| fail("copy", e))?;
            rustix::fs::fchmod(&into, mode).map_err(|e| fail("chmod", errno(e)))?;
            into.sync_all().map_err(|e| fail("sync", e))
        }
        // A fifo, socket or device: not something a copy can carry.
        _ => Err(fail(
            "copy",
            std::io::Error::from(std::io::ErrorKind::Unsupported),
        )),
    }
}

/// Whether a move may replace what is at its destination.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Replace {
    /// Like `rename(2)`: a file there is replaced.
    Yes,
    /// The destination must not exist (`RENAME_NOREPLACE`).
    No,
}

/// `renameat` from one handle to another, refusing to replace anything with [`Replace::No`].
fn rename_between(
    source: &Dir,
    name: &OsStr,
    target: &Dir,
    to: &OsStr,
    replace: Replace,
) -> rustix::io::Result<()> {
    match replace {
        Replace::Yes => rustix::fs::renameat(source, name, target, to),
        Replace::No => match rustix::fs::renameat_with(
            source,
            name,
            target,
            to,
            rustix::fs::RenameFlags::NOREPLACE,
        ) {
            // A filesystem without RENAME_NOREPLACE: look, then rename.
            Err(rustix::io::Errno::INVAL) => match lstat(target, to) {
                Ok(_) => Err(rustix::io::Errno::EXIST),
                Err(_) => rustix::fs::renameat(source, name, target, to),
            },
            other => other,
        },
    }
}

/// Names of the temporary copies a move across filesystems makes.
static COPIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Move `name` in `source` to `to` in `target`: one `renameat` between the two handles, or,
/// across filesystems, a copy through the handles under a temporary name, renamed into place,
/// and then a removal of the source through its handle (a copy that fails is removed again
/// and the source stays). `shown` names the source in messages.
pub fn move_entry(
    source: &Dir,
    name: &OsStr,
    target: &Dir,
    to: &OsStr,
    replace: Replace,
    shown: &Path,
) -> Result<(), FsError> {
    let fail = |op, e| FsError::io(op, &shown.display().to_string(), errno(e));
    match rename_between(source, name, target, to, replace) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::XDEV) => {
            let before = lstat(source, name)
                .map_err(|e| FsError::io("stat", &shown.display().to_string(), e))?;
            let n = COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let temp = OsString::from(format!(
                ".{}.aido-{}-{n}.copy",
                to.to_string_lossy(),
                std::process::id()
            ));
            let mut budget = TREE_ENTRIES_MAX;
            let copied =
                copy_tree(source, name, target, &temp, shown, 0, &mut budget).and_then(|()| {
                    // The entry copied is the one that goes: not one put in its place meanwhile.
                    let now = lstat(source, name)
                        .map_err(|e| FsError::io("stat", &shown.display().to_string(), e))?;
                    if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino) {
                        return Err(FsError::ChangedDuringCheck {
                            path: shown.display().to_string(),
                            now: "another entry".into(),
                        });
                    }
                    rename_between(target, &temp, target, to, replace).map_err(|e| fail("move", e))
                });
            if let Err(e) = copied {
                let mut budget = TREE_ENTRIES_MAX;
                let _ = remove_tree(target, &temp, shown, 0, &mut budget);
                return Err(e);
            }
            let mut budget = TREE_ENTRIES_MAX;
            remove_tree(source, name, shown, 0, &mut budget)
        }
        Err(e) => Err(fail("move", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &Path) -> Dir {
        Dir::open_ambient_dir(path, ambient_authority()).unwrap()
    }

    #[test]
    fn a_tree_is_removed_without_following_a_link_in_it() {
        let base = tempfile::tempdir().unwrap();
        let (root, outside) = (base.path().join("root"), base.path().join("outside"));
        std::fs::create_dir_all(root.join("t/a/b")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep.txt"), "keep").unwrap();
        std::fs::write(root.join("t/a/b/f.txt"), "f").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("t/a/out")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let dir = open(&root);
        let mut budget = TREE_ENTRIES_MAX;
        remove_tree(&dir, OsStr::new("t"), &root.join("t"), 0, &mut budget).unwrap();
        assert!(!root.join("t").exists());
        assert_eq!(budget, TREE_ENTRIES_MAX - 5, "t, a, b, f.txt and out");
        // A symlink named as the tree is unlinked itself.
        remove_tree(&dir, OsStr::new("link"), &root.join("link"), 0, &mut budget).unwrap();
        assert!(root.join("link").symlink_metadata().is_err());
        assert_eq!(
            std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
            "keep"
        );
        // Missing is not an error.
        remove_tree(&dir, OsStr::new("t"), &root.join("t"), 0, &mut budget).unwrap();
    }

    #[test]
    fn a_tree_larger_than_its_budget_is_a_coded_error() {
        let base = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(base.path().join("t")).unwrap();
        for i in 0..5 {
            std::fs::write(base.path().join(format!("t/{i}")), "x").unwrap();
        }
        let dir = open(base.path());
        let mut budget = 3;
        let e = remove_tree(
            &dir,
            OsStr::new("t"),
            &base.path().join("t"),
            0,
            &mut budget,
        )
        .unwrap_err();
        assert_eq!(e.code(), "tree_too_large");
        assert!(base.path().join("t").is_dir(), "stopped, not half-listed");
    }

    #[test]
    fn a_copy_carries_modes_and_links_and_never_replaces_with_replace_no() {
        let base = tempfile::tempdir().unwrap();
        let (from, into) = (base.path().join("from"), base.path().join("into"));
        std::fs::create_dir_all(from.join("t/sub")).unwrap();
        std::fs::create_dir_all(&into).unwrap();
        std::fs::write(from.join("t/sub/f"), "f").unwrap();
        std::os::unix::fs::symlink("/nowhere", from.join("t/l")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(from.join("t/sub"), std::fs::Permissions::from_mode(0o750))
            .unwrap();
        let (source, target) = (open(&from), open(&into));
        let mut budget = TREE_ENTRIES_MAX;
        let name = OsStr::new("t");
        copy_tree(
            &source,
            name,
            &target,
            name,
            &from.join("t"),
            0,
            &mut budget,
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(into.join("t/sub/f")).unwrap(), "f");
        assert_eq!(
            std::fs::read_link(into.join("t/l")).unwrap(),
            Path::new("/nowhere")
        );
        let mode = std::fs::metadata(into.join("t/sub"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o750);
        // The same filesystem: one rename, which refuses to replace what is there.
        let e = move_entry(&source, name, &target, name, Replace::No, &from.join("t")).unwrap_err();
        assert_eq!(e.code(), "io_error");
        assert!(from.join("t/sub/f").exists() && into.join("t/sub/f").exists());
    }
}
