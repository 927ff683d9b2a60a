//! What a command changed, read from the upper layers of an overlay run
//! ([`crate::WriteMode::Overlay`]).
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
//! | `user.overlay.redirect` / `metacopy` | a renamed directory / a metadata-only copy: not taken |
//!
//! [`collect`] turns that into a sorted list of [`Change`]s on host paths, which the caller
//! judges and either applies through its own journaled writes or only reports (a dry run).
//! Nothing here touches the host tree.

use std::ffi::OsString;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::SpawnError;

/// Entries of the upper layers [`collect`] looks at before it refuses (the command wrote too
/// many files for one journaled change).
pub const CHANGED_ENTRIES_MAX: usize = 100_000;

/// One change a command made under a writable root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    /// A regular file was created, or its contents or mode changed.
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
        /// Where its new contents are (in the upper layer).
        #[serde(skip)]
        contents: PathBuf,
    },
    /// A directory was created.
    Dir {
        /// The host path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
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
    /// Something that cannot be taken over as a journaled change: a device, fifo or socket,
    /// a renamed directory, a metadata-only copy.
    Unsupported {
        /// The host path.
        path: PathBuf,
        /// What it is.
        what: String,
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

/// The changes in `layers_dir`'s upper layers, one per writable root (`roots[i]` is the host
/// directory whose upper layer is `layers_dir/i/upper`), removals before creations at the same
/// path, otherwise sorted by path.
pub fn collect(layers_dir: &Path, roots: &[PathBuf]) -> Result<Vec<Change>, SpawnError> {
    let mut walk = Collect {
        out: Vec::new(),
        seen: 0,
    };
    for (index, root) in roots.iter().enumerate() {
        let upper = layers_dir.join(index.to_string()).join("upper");
        if !upper.is_dir() {
            continue;
        }
        walk.directory(&upper, root, false)?;
    }
    let mut out = walk.out;
    // A removal sorts before what replaced it at the same path.
    out.sort_by(|a, b| a.path().cmp(b.path()).then_with(|| rank(a).cmp(&rank(b))));
    Ok(out)
}

fn rank(change: &Change) -> u8 {
    match change {
        Change::Removed { .. } => 0,
        _ => 1,
    }
}

struct Collect {
    out: Vec<Change>,
    seen: usize,
}

impl Collect {
    /// The entries of the upper directory `upper`, which overlays the host directory `lower`.
    /// `fresh`: everything here is new (below a created or opaque directory).
    fn directory(&mut self, upper: &Path, lower: &Path, fresh: bool) -> Result<(), SpawnError> {
        let mut names: Vec<OsString> = std::fs::read_dir(upper)
            .map_err(|error| layer_error(upper, &error))?
            .map(|entry| entry.map(|entry| entry.file_name()))
            .collect::<Result<_, _>>()
            .map_err(|error| layer_error(upper, &error))?;
        names.sort();
        for name in names {
            self.seen += 1;
            if self.seen > CHANGED_ENTRIES_MAX {
                return Err(SpawnError::ChangesTooMany {
                    max: CHANGED_ENTRIES_MAX,
                });
            }
            self.entry(&upper.join(&name), &lower.join(&name), fresh)?;
        }
        Ok(())
    }

    fn entry(&mut self, upper: &Path, host: &Path, fresh: bool) -> Result<(), SpawnError> {
        let meta = std::fs::symlink_metadata(upper).map_err(|error| layer_error(upper, &error))?;
        let kind = meta.file_type();
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
        if kind.is_char_device() && meta.rdev() == 0 {
            removed(&mut self.out);
            return Ok(());
        }
        if kind.is_dir() {
            if xattr(upper, "overlay.redirect") {
                self.unsupported(host, "a renamed directory (overlay redirect)");
                return Ok(());
            }
            let opaque = xattr_is(upper, "overlay.opaque", b"y");
            match before {
                Some(_) if was_dir && !opaque => {
                    let mode = meta.permissions().mode() & 0o7777;
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
                    self.directory(upper, host, false)
                }
                _ => {
                    removed(&mut self.out);
                    self.out.push(Change::Dir {
                        path: host.to_owned(),
                        mode: meta.permissions().mode() & 0o7777,
                    });
                    self.directory(upper, host, true)
                }
            }
        } else if kind.is_file() {
            if xattr(upper, "overlay.metacopy") {
                self.unsupported(host, "a metadata-only copy (overlay metacopy)");
                return Ok(());
            }
            let mode = meta.permissions().mode() & 0o7777;
            if let Some(old) = before.as_ref().filter(|old| old.is_file())
                && old.permissions().mode() & 0o7777 == mode
                && old.len() == meta.len()
                && same_contents(upper, host)?
            {
                // Copied up (opened for writing, touched) but left as it was.
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
                bytes: meta.len(),
                contents: upper.to_owned(),
            });
            Ok(())
        } else if kind.is_symlink() {
            let target = std::fs::read_link(upper).map_err(|error| layer_error(upper, &error))?;
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
        } else {
            let what = if kind.is_fifo() {
                "a fifo"
            } else if kind.is_socket() {
                "a socket"
            } else {
                "a device node"
            };
            self.unsupported(host, what);
            Ok(())
        }
    }

    fn unsupported(&mut self, host: &Path, what: &str) {
        self.out.push(Change::Unsupported {
            path: host.to_owned(),
            what: what.to_owned(),
        });
    }
}

fn same_contents(a: &Path, b: &Path) -> Result<bool, SpawnError> {
    use std::io::Read;
    let open = |path: &Path| std::fs::File::open(path).map_err(|error| layer_error(path, &error));
    let (mut left, mut right) = (open(a)?, open(b)?);
    let (mut x, mut y) = (vec![0u8; 64 << 10], vec![0u8; 64 << 10]);
    loop {
        let n = read_full(&mut left, &mut x).map_err(|error| layer_error(a, &error))?;
        let m = read_full(&mut right, &mut y).map_err(|error| layer_error(b, &error))?;
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

/// Whether the overlay attribute `name` (`overlay.opaque`, ...) is set on `path`: under
/// `user.` where overlayfs was mounted with `userxattr` (aido's sandbox, in its user
/// namespace), under `trusted.` where it was mounted by root (podman's `:O` volumes).
fn xattr(path: &Path, name: &str) -> bool {
    let mut buf = [0u8; 256];
    ["user.", "trusted."].iter().any(|space| {
        rustix::fs::lgetxattr(path, format!("{space}{name}").as_str(), &mut buf[..]).is_ok()
    })
}

fn xattr_is(path: &Path, name: &str, value: &[u8]) -> bool {
    let mut buf = [0u8; 16];
    ["user.", "trusted."].iter().any(|space| {
        matches!(
            rustix::fs::lgetxattr(path, format!("{space}{name}").as_str(), &mut buf[..]),
            Ok(n) if &buf[..n] == value
        )
    })
}

fn layer_error(path: &Path, error: &std::io::Error) -> SpawnError {
    SpawnError::ChangesUnreadable {
        path: path.display().to_string(),
        detail: error.to_string(),
    }
}
