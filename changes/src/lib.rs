//! What a command changed, read from the upper layers of an overlay run (aido's sandbox with
//! `aido_sandbox::WriteMode::Overlay`, or podman's overlay volumes).
//!
//! Each writable root was mounted as an overlay whose lower layer is the host directory and
//! whose upper layer is `LAYERS/INDEX/upper` (mounted with `userxattr`, so overlay's own marks
//! are `user.overlay.*` attributes). After the command ends the upper layer holds exactly what
//! it changed, in overlay's format:
//!
//! | in the upper layer | means |
//! |---|---|
//! | a regular file | created, or copied up and maybe changed (compared with the lower one) |
//! | a directory not in the lower layer | created, with everything in it |
//! | a directory marked `user.overlay.opaque` | the lower one was removed and made again |
//! | a character device 0:0 (a whiteout) | the lower entry was removed |
//! | a symlink | created or replaced |
//! | `user.overlay.redirect` | a renamed directory: not taken (metacopy never happens: `userxattr` turns it off) |
//!
//! [`collect`] turns that into a sorted list of [`Change`]s on host paths, which the caller
//! judges and either applies through its own journaled writes or only reports (a dry run).
//! The layer is read through directory handles only: the layer directory is held open by its
//! maker, and every directory below it is opened from its parent's handle without following a
//! symlink, so nothing swapped into the layer's path can make aido read another tree. A file's
//! contents are named by its directory's handle and its name ([`Upper`]). Nothing here touches
//! the host tree.
//!
//! # Example
//!
//! ```no_run
//! // The layer directory the overlay run was given, held as a handle.
//! let home = std::env::home_dir().unwrap_or_default();
//! let layers = aido_changes::open_layers(&home.join(".aido/layers/4711-0"))?;
//! let roots = [home.join("project")];
//! let caps = aido_changes::ChangeCaps::default();
//! for change in aido_changes::collect(&layers, &roots, caps)? {
//!     let _host_path = change.path();
//! }
//! # Ok::<(), aido_changes::ChangesError>(())
//! ```

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use serde::{Deserialize, Serialize};

/// Why a command's changes could not be taken. The sandbox reports each as its own coded
/// error (`aido_sandbox::SpawnError`: `sandbox_changes_unreadable`, `command_changes_too_large`,
/// `sandbox_layers_unsafe`), with the same fields.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChangesError {
    /// The changes an overlay run left in its upper layer could not be read.
    #[error("the command's changes could not be read at {path}: {detail}")]
    Unreadable {
        /// The upper-layer (or host) path.
        path: String,
        /// The error.
        detail: String,
    },
    /// An overlay run changed more than one command's change set may hold (the caps):
    /// nothing of it is applied.
    #[error("the command changed more than {max} {what} ({key}); none of its changes were applied")]
    TooLarge {
        /// `entries` or `bytes of new contents`.
        what: String,
        /// The cap.
        max: u64,
        /// The setting that sets it.
        key: String,
    },
    /// A layer directory aido did not make exclusively for itself (another owner, or others
    /// may enter it): nothing is read from it or mounted from it.
    #[error("the layer directory {path} is not aido's own: {detail}")]
    LayersUnsafe {
        /// The directory.
        path: String,
        /// What is wrong with it.
        detail: String,
    },
}

/// Entries of the upper layers [`collect`] looks at when no cap is given.
pub const CHANGED_ENTRIES_MAX: usize = 250_000;

/// The most one command's changes may hold, checked while they are read (before anything is
/// applied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangeCaps {
    /// Entries (files, directories, links, removals).
    pub entries_max: u64,
    /// Bytes of new contents.
    pub bytes_max: u64,
}

impl Default for ChangeCaps {
    fn default() -> Self {
        Self {
            entries_max: CHANGED_ENTRIES_MAX as u64,
            bytes_max: 8 << 30,
        }
    }
}

/// A file of the upper layer: its directory, held, and its name there.
#[derive(Clone, Debug)]
pub struct Upper {
    /// The upper directory that holds it.
    pub dir: Arc<OwnedFd>,
    /// Its name in it.
    pub name: OsString,
}

impl Upper {
    /// Open it for reading (never following a symlink).
    pub fn open(&self) -> std::io::Result<std::fs::File> {
        rustix::fs::openat(
            self.dir.as_fd(),
            self.name.as_os_str(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .map(std::fs::File::from)
        .map_err(std::io::Error::from)
    }
}

/// One change a command made under a writable root.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    /// A regular file was created, or its contents, mode or time changed.
    File {
        /// The host path.
        path: PathBuf,
        /// Nothing was at the path before (a lower entry that was removed first counts as
        /// removed, listed before this).
        created: bool,
        /// Permission bits of the new file.
        mode: u32,
        /// Its size.
        bytes: u64,
        /// Its modification time, nanoseconds since the epoch.
        mtime_ns: i64,
        /// Where its new contents are (in the upper layer).
        #[serde(skip)]
        contents: Option<Upper>,
    },
    /// A directory was created.
    Dir {
        /// The host path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// Its modification time as the command left it.
        mtime_ns: i64,
        /// Where it is in the upper layer (with everything it holds, all new).
        #[serde(skip)]
        upper: Option<Upper>,
    },
    /// An existing directory's permission bits changed (what it holds is listed on its own).
    DirMode {
        /// The host path.
        path: PathBuf,
        /// Its permission bits now.
        mode: u32,
        /// The ones it had.
        before: u32,
    },
    /// A symbolic link was created.
    Symlink {
        /// The host path.
        path: PathBuf,
        /// What it points at.
        target: PathBuf,
    },
    /// A file, link or whole directory was removed.
    Removed {
        /// The host path.
        path: PathBuf,
        /// It was a directory (removed with everything in it).
        dir: bool,
    },
    /// Something that cannot be taken over as a journaled change: a device or fifo,
    /// a renamed directory, a metadata-only copy, a name that is not UTF-8.
    Unsupported {
        /// The host path.
        path: PathBuf,
        /// What it is.
        what: String,
        /// The refusal's code.
        code: String,
    },
}

impl Change {
    /// The host path it changes.
    pub fn path(&self) -> &Path {
        match self {
            Change::File { path, .. }
            | Change::Dir { path, .. }
            | Change::DirMode { path, .. }
            | Change::Symlink { path, .. }
            | Change::Removed { path, .. }
            | Change::Unsupported { path, .. } => path,
        }
    }
}

/// The changes in the upper layers under the held layer directory `layers` (`roots[i]` is the
/// host directory whose upper layer is `i/upper` in it), removals before creations at the
/// same path, otherwise sorted by path. More than `caps` allows is
/// [`ChangesError::TooLarge`], found while reading (nothing is kept past it).
pub fn collect(
    layers: &impl AsFd,
    roots: &[PathBuf],
    caps: ChangeCaps,
) -> Result<Vec<Change>, ChangesError> {
    let mut walk = Collect {
        out: Vec::new(),
        seen: 0,
        bytes: 0,
        caps,
    };
    for (index, root) in roots.iter().enumerate() {
        let shown = format!("{}/upper", index);
        let Some(index_dir) = open_dir(layers.as_fd(), OsStr::new(&index.to_string()), &shown)?
        else {
            continue;
        };
        let Some(upper) = open_dir(index_dir.as_fd(), OsStr::new("upper"), &shown)? else {
            continue;
        };
        walk.directory(Arc::new(upper), Path::new(&shown), root, false, 0)?;
    }
    let mut out = walk.out;
    // A removal sorts before what replaced it at the same path.
    out.sort_by(|a, b| a.path().cmp(b.path()).then_with(|| rank(a).cmp(&rank(b))));
    Ok(out)
}

/// Open a directory of the layer from its parent's handle, never following a symlink; `None`
/// when it is not there.
fn open_dir(
    parent: std::os::fd::BorrowedFd<'_>,
    name: &OsStr,
    shown: &str,
) -> Result<Option<OwnedFd>, ChangesError> {
    match rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(layer_error(Path::new(shown), &e.into())),
    }
}

fn rank(change: &Change) -> u8 {
    match change {
        Change::Removed { .. } => 0,
        _ => 1,
    }
}

/// Most directories deep a layer is read.
const DEPTH_MAX: usize = 512;

struct Collect {
    out: Vec<Change>,
    seen: u64,
    bytes: u64,
    caps: ChangeCaps,
}

fn mtime_ns(stat: &rustix::fs::Stat) -> i64 {
    stat.st_mtime * 1_000_000_000 + stat.st_mtime_nsec as i64
}

impl Collect {
    fn count(&mut self, bytes: u64) -> Result<(), ChangesError> {
        self.seen += 1;
        self.bytes = self.bytes.saturating_add(bytes);
        if self.seen > self.caps.entries_max {
            return Err(ChangesError::TooLarge {
                what: "entries".into(),
                max: self.caps.entries_max,
                key: "[processes] change_files_max".into(),
            });
        }
        if self.bytes > self.caps.bytes_max {
            return Err(ChangesError::TooLarge {
                what: "bytes of new contents".into(),
                max: self.caps.bytes_max,
                key: "[processes] change_bytes_max".into(),
            });
        }
        Ok(())
    }

    /// The entries of the upper directory `upper` (shown as `shown`), which overlays the host
    /// directory `lower`. `fresh`: everything here is new (below a created or opaque directory).
    fn directory(
        &mut self,
        upper: Arc<OwnedFd>,
        shown: &Path,
        lower: &Path,
        fresh: bool,
        depth: usize,
    ) -> Result<(), ChangesError> {
        if depth > DEPTH_MAX {
            return Err(layer_error(
                shown,
                &std::io::Error::other(format!("more than {DEPTH_MAX} directories deep")),
            ));
        }
        let mut names: Vec<OsString> = Vec::new();
        let mut dir =
            rustix::fs::Dir::read_from(upper.as_fd()).map_err(|e| layer_error(shown, &e.into()))?;
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(|e| layer_error(shown, &e.into()))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            names.push(std::os::unix::ffi::OsStringExt::from_vec(name.to_vec()));
        }
        names.sort();
        for name in names {
            self.entry(
                &upper,
                &name,
                &shown.join(&name),
                &lower.join(&name),
                fresh,
                depth,
            )?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_lines)]
    fn entry(
        &mut self,
        upper: &Arc<OwnedFd>,
        name: &OsStr,
        shown: &Path,
        host: &Path,
        fresh: bool,
        depth: usize,
    ) -> Result<(), ChangesError> {
        let stat = rustix::fs::statat(upper.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| layer_error(shown, &e.into()))?;
        let kind = FileType::from_raw_mode(stat.st_mode);
        let mode = stat.st_mode & 0o7777;
        self.count(if kind == FileType::RegularFile {
            stat.st_size as u64
        } else {
            0
        })?;
        if host.to_str().is_none() {
            self.unsupported(host, "a name that is not UTF-8", "path_not_utf8");
            return Ok(());
        }
        let before = if fresh {
            None
        } else {
            std::fs::symlink_metadata(host).ok()
        };
        let was_dir = before.as_ref().is_some_and(|meta| meta.is_dir());
        let removed = |out: &mut Vec<Change>| {
            if before.is_some() {
                out.push(Change::Removed {
                    path: host.to_owned(),
                    dir: was_dir,
                });
            }
        };
        if kind == FileType::CharacterDevice && stat.st_rdev == 0 {
            removed(&mut self.out);
            return Ok(());
        }
        match kind {
            FileType::Directory => {
                let Some(fd) = open_dir(upper.as_fd(), name, &shown.display().to_string())? else {
                    return Ok(());
                };
                if xattr(&fd, "overlay.redirect") {
                    self.unsupported(
                        host,
                        "a renamed directory (overlay redirect)",
                        "command_change_unsupported",
                    );
                    return Ok(());
                }
                let opaque = xattr_is(&fd, "overlay.opaque", b"y");
                let fd = Arc::new(fd);
                match before {
                    Some(_) if was_dir && !opaque => {
                        let before_mode = before
                            .as_ref()
                            .map_or(mode, |meta| meta.permissions().mode() & 0o7777);
                        if mode != before_mode {
                            self.out.push(Change::DirMode {
                                path: host.to_owned(),
                                mode,
                                before: before_mode,
                            });
                        }
                        self.directory(fd, shown, host, false, depth + 1)
                    }
                    _ => {
                        removed(&mut self.out);
                        self.out.push(Change::Dir {
                            path: host.to_owned(),
                            mode,
                            mtime_ns: mtime_ns(&stat),
                            upper: Some(Upper {
                                dir: upper.clone(),
                                name: name.to_owned(),
                            }),
                        });
                        self.directory(fd, shown, host, true, depth + 1)
                    }
                }
            }
            FileType::RegularFile => {
                let contents = Upper {
                    dir: upper.clone(),
                    name: name.to_owned(),
                };
                // No metadata-only copy to fear: the sandbox mounts its overlay with
                // `userxattr`, which turns metacopy off (the kernel refuses the two together and
                // ignores a `user.overlay.metacopy` a command sets on its own file), so an upper
                // file always holds its own data.
                if let Some(old) = before.as_ref().filter(|old| old.is_file())
                    && old.permissions().mode() & 0o7777 == mode
                    && old.len() == stat.st_size as u64
                    && old.mtime() == stat.st_mtime as i64
                    && old.mtime_nsec() == stat.st_mtime_nsec as i64
                    && same_contents(&contents, host, shown)?
                {
                    // Copied up (opened for writing) but left exactly as it was.
                    return Ok(());
                }
                let replaced_file = before.as_ref().is_some_and(|old| old.is_file());
                if !replaced_file {
                    removed(&mut self.out);
                }
                self.out.push(Change::File {
                    path: host.to_owned(),
                    created: !replaced_file,
                    mode,
                    bytes: stat.st_size as u64,
                    mtime_ns: mtime_ns(&stat),
                    contents: Some(contents),
                });
                Ok(())
            }
            FileType::Symlink => {
                let target = rustix::fs::readlinkat(upper.as_fd(), name, Vec::new())
                    .map_err(|e| layer_error(shown, &e.into()))?;
                let target = PathBuf::from(
                    <OsString as std::os::unix::ffi::OsStringExt>::from_vec(target.into_bytes()),
                );
                let same = before
                    .as_ref()
                    .is_some_and(|old| old.file_type().is_symlink())
                    && std::fs::read_link(host).is_ok_and(|old| old == target);
                if !same {
                    removed(&mut self.out);
                    self.out.push(Change::Symlink {
                        path: host.to_owned(),
                        target,
                    });
                }
                Ok(())
            }
            FileType::Socket => {
                // A socket the command bound and left: it listened only while its process
                // lived, so there is nothing to take over. What it replaced is removed, as it
                // was in the layer; the socket itself is not made on the host.
                removed(&mut self.out);
                Ok(())
            }
            other => {
                let what = match other {
                    FileType::Fifo => "a fifo",
                    _ => "a device node",
                };
                self.unsupported(host, what, "command_change_unsupported");
                Ok(())
            }
        }
    }

    fn unsupported(&mut self, host: &Path, what: &str, code: &str) {
        self.out.push(Change::Unsupported {
            path: host.to_owned(),
            what: what.to_owned(),
            code: code.to_owned(),
        });
    }
}

/// Whether the upper file and the host file hold the same bytes.
fn same_contents(upper: &Upper, host: &Path, shown: &Path) -> Result<bool, ChangesError> {
    use std::io::Read;
    let mut left = upper.open().map_err(|error| layer_error(shown, &error))?;
    let Ok(mut right) = std::fs::File::open(host) else {
        return Ok(false);
    };
    let (mut x, mut y) = (vec![0u8; 64 << 10], vec![0u8; 64 << 10]);
    loop {
        let n = read_full(&mut left, &mut x).map_err(|error| layer_error(shown, &error))?;
        let m = read_full(&mut right, &mut y).unwrap_or(usize::MAX);
        if n != m || x[..n] != y[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }

    fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut filled = 0;
        while filled < buf.len() {
            match file.read(&mut buf[filled..])? {
                0 => break,
                n => filled += n,
            }
        }
        Ok(filled)
    }
}

/// Whether the overlay attribute `name` (`overlay.opaque`, ...) is set on the open `fd`:
/// under `user.` where overlayfs was mounted with `userxattr` (aido's sandbox, in its user
/// namespace), under `trusted.` where it was mounted by root (podman's `:O` volumes).
fn xattr(fd: &impl AsFd, name: &str) -> bool {
    let mut buf = [0u8; 256];
    ["user.", "trusted."].iter().any(|space| {
        rustix::fs::fgetxattr(fd, format!("{space}{name}").as_str(), &mut buf[..]).is_ok()
    })
}

fn xattr_is(fd: &impl AsFd, name: &str, value: &[u8]) -> bool {
    let mut buf = [0u8; 16];
    ["user.", "trusted."].iter().any(|space| {
        matches!(
            rustix::fs::fgetxattr(fd, format!("{space}{name}").as_str(), &mut buf[..]),
            Ok(n) if &buf[..n] == value
        )
    })
}

fn layer_error(path: &Path, error: &std::io::Error) -> ChangesError {
    ChangesError::Unreadable {
        path: path.display().to_string(),
        detail: error.to_string(),
    }
}

/// Open the layer directory a maker made (mode 0700, owned by this process's user) as a
/// handle, refusing anything else: a directory another user made, or one others may enter,
/// or a symlink in its place.
pub fn open_layers(path: &Path) -> Result<OwnedFd, ChangesError> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| layer_error(path, &e.into()))?;
    check_owned(&fd, path)?;
    Ok(fd)
}

/// A directory held open must be this user's own, mode 0700 (no group or other bits).
pub fn check_owned(fd: &impl AsFd, path: &Path) -> Result<(), ChangesError> {
    let stat = rustix::fs::fstat(fd).map_err(|e| layer_error(path, &e.into()))?;
    let me = rustix::process::geteuid().as_raw();
    if stat.st_uid != me || stat.st_mode & 0o077 != 0 {
        return Err(ChangesError::LayersUnsafe {
            path: path.display().to_string(),
            detail: format!(
                "owned by uid {} with mode {:04o}; aido needs its own, mode 0700",
                stat.st_uid,
                stat.st_mode & 0o7777
            ),
        });
    }
    Ok(())
}
