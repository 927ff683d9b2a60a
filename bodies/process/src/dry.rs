//! `run_command` with `dry_run`: the command runs over a copy-on-write layer of the write roots
//! ([`aido_sandbox::WriteMode::Overlay`]), and what it changed is read back from the layer
//! ([`aido_sandbox::collect_changes`]) and returned, with unified diffs of text files; the
//! layer is then thrown away, so the host tree is left exactly as it was.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use aido_sandbox::Change;
use aido_walk::process::record::{ChangeKind, ChangeShown, DryRun, FileShown};

/// Largest file (each side) a dry run diffs; larger ones are described by size only.
pub const DIFF_FILE_BYTES_MAX: u64 = 1 << 20;

/// Where commands put their layers: `AIDO_HOME/layers`, unless that lies inside a write root
/// (overlayfs refuses an upper layer inside its lower one, and a command must never see its
/// own layer), then a directory of this process's own in the temp dir, made with a name no one
/// could have taken first (`mkdtemp`, mode 0700).
pub fn layers_base(aido_home: &Path, write_roots: &[PathBuf]) -> PathBuf {
    let home = aido_home
        .canonicalize()
        .unwrap_or_else(|_| aido_home.to_owned());
    let inside = write_roots
        .iter()
        .any(|root| home.starts_with(root) || root.starts_with(&home));
    if !inside {
        return aido_home.join("layers");
    }
    static PRIVATE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PRIVATE
        .get_or_init(|| {
            match tempfile::Builder::new()
                .prefix(&format!(
                    "aido-layers-{}-",
                    rustix::process::getuid().as_raw()
                ))
                .tempdir()
            {
                Ok(dir) => {
                    let dir = dir.keep();
                    // Whatever the umask or the crate's default, aido's alone.
                    let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
                    dir
                }
                // Layers::new refuses it with a code, naming it.
                Err(_) => std::env::temp_dir().join("aido-layers-unavailable"),
            }
        })
        .clone()
}

/// One run's layer directory, made exclusively (mode 0700) in a base directory that must be
/// aido's own (owned by this user, mode 0700), held open: its changes are read through that
/// handle, never by its path again. Removed when dropped.
pub struct Layers {
    pub dir: PathBuf,
    pub fd: std::sync::Arc<std::os::fd::OwnedFd>,
}

impl Layers {
    /// The failure a call gets when no layer can be made under `base`: `sandbox_layers_unsafe`
    /// for a base that is not aido's own, else `sandbox_setup_failed`.
    pub fn failure(base: &Path, error: std::io::Error) -> aido_actions::Failure {
        let code = match error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<aido_sandbox::SpawnError>())
        {
            Some(spawn) => spawn.code(),
            None => "sandbox_setup_failed",
        };
        aido_actions::Failure::new(
            code,
            format!(
                "the command's layer directory under {}: {error}",
                base.display()
            ),
        )
    }

    pub fn new(base: &Path) -> std::io::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        match std::fs::DirBuilder::new().mode(0o700).create(base) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        // The base must be aido's own: a directory another user made (in a shared temp dir)
        // or one others may enter is refused, never used.
        let held = aido_sandbox::open_layers(base).map_err(std::io::Error::other)?;
        let name = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let dir = base.join(&name);
        // A leftover of a killed aido with the same pid goes first (the base is ours alone).
        remove(&dir);
        rustix::fs::mkdirat(&held, name.as_str(), rustix::fs::Mode::from_raw_mode(0o700))?;
        let fd = rustix::fs::openat(
            &held,
            name.as_str(),
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::NOFOLLOW
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        aido_sandbox::check_owned(&fd, &dir).map_err(std::io::Error::other)?;
        Ok(Layers {
            dir,
            fd: std::sync::Arc::new(fd),
        })
    }
}

impl Drop for Layers {
    fn drop(&mut self) {
        remove(&self.dir);
    }
}

/// Overlay leaves `work/work` without permissions; make every directory removable first.
pub fn remove(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for index in entries.flatten() {
            let work = index.path().join("work/work");
            let _ = std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o700));
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The changes as the result shows them: each with its kind and path, files with their mode,
/// size and a unified diff when both sides are text (within `budget` bytes of diff in all).
pub fn render(changes: &[Change], budget: usize) -> DryRun {
    let mut left = budget;
    let mut truncated = false;
    let changes = changes
        .iter()
        .map(|change| {
            let (path, kind, refused) = match change {
                Change::File {
                    path,
                    created,
                    mode,
                    bytes,
                    contents,
                    ..
                } => {
                    let mut file = FileShown {
                        mode: format!("{mode:04o}"),
                        bytes: *bytes,
                        diff: None,
                        diff_truncated: false,
                        binary: false,
                    };
                    match diff(path, *created, contents) {
                        Some(text) if text.len() <= left => {
                            left -= text.len();
                            file.diff = Some(text);
                        }
                        Some(_) => {
                            truncated = true;
                            file.diff_truncated = true;
                        }
                        None => file.binary = true,
                    }
                    let kind = if *created {
                        ChangeKind::FileCreated(file)
                    } else {
                        ChangeKind::FileChanged(file)
                    };
                    (path, kind, None)
                }
                Change::Dir { path, mode, .. } => (
                    path,
                    ChangeKind::DirCreated {
                        mode: format!("{mode:04o}"),
                    },
                    None,
                ),
                Change::DirMode { path, mode, before } => (
                    path,
                    ChangeKind::ModeChanged {
                        mode: format!("{mode:04o}"),
                        before: format!("{before:04o}"),
                    },
                    None,
                ),
                Change::Symlink { path, target } => (
                    path,
                    ChangeKind::LinkCreated {
                        target: target.display().to_string(),
                    },
                    None,
                ),
                Change::Removed { path, dir } => (
                    path,
                    if *dir {
                        ChangeKind::DirRemoved
                    } else {
                        ChangeKind::Removed
                    },
                    None,
                ),
                Change::Unsupported { path, what, code } => (
                    path,
                    ChangeKind::Unsupported { what: what.clone() },
                    Some(code.to_string()),
                ),
            };
            ChangeShown {
                path: path.display().to_string(),
                kind,
                refused,
            }
        })
        .collect();
    DryRun {
        dry_run: true,
        changes,
        diff_truncated: truncated,
    }
}

/// A unified diff of the host file (empty when created) against the new contents, when both
/// are text and small enough; `None` otherwise.
fn diff(host: &Path, created: bool, contents: &Option<aido_sandbox::Upper>) -> Option<String> {
    let read = |file: std::fs::File| -> Option<String> {
        use std::io::Read;
        let meta = file.metadata().ok()?;
        if meta.len() > DIFF_FILE_BYTES_MAX {
            return None;
        }
        let mut bytes = Vec::new();
        file.take(DIFF_FILE_BYTES_MAX)
            .read_to_end(&mut bytes)
            .ok()?;
        if bytes.contains(&0) {
            return None;
        }
        String::from_utf8(bytes).ok()
    };
    let new = read(contents.as_ref()?.open().ok()?)?;
    let old = if created {
        String::new()
    } else {
        read(std::fs::File::open(host).ok()?)?
    };
    let shown = host.display().to_string();
    let mut options = diffy::DiffOptions::new();
    options.set_original_filename(if created {
        "/dev/null".to_owned()
    } else {
        shown.clone()
    });
    options.set_modified_filename(shown);
    Some(options.create_patch(&old, &new).to_string())
}
