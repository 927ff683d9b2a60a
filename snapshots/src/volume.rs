//! Making a workspace that snapshots well: a btrfs subvolume, optionally on a btrfs filesystem
//! in a loop file, so users get O(1) snapshots without repartitioning.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::SnapshotError;

/// What `init` made.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Workspace {
    /// The workspace path as asked for.
    pub path: PathBuf,
    /// Where it really lives (the subvolume, when there is one).
    pub resolved: PathBuf,
    /// The loop image, for `--btrfs`.
    pub image: Option<PathBuf>,
    /// Where the loop image is mounted.
    pub mount: Option<PathBuf>,
    /// Whether the workspace is a btrfs subvolume.
    pub subvolume: bool,
}

fn run(program: &str, args: &[&str]) -> Result<(), SnapshotError> {
    let shown = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| SnapshotError::Command {
            command: shown.clone(),
            stderr: e.to_string(),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(SnapshotError::Command {
            command: shown,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Make `path` a workspace. With `btrfs_bytes`, create a btrfs filesystem of that size in a
/// loop file under `aido_home/volumes`, mount it beside `path` (as `.NAME.aido-volume`), make
/// a subvolume in it and point `path` at that subvolume with a symlink (mounting needs root).
/// Without it, `path` becomes a subvolume when its parent is on btrfs, else a directory.
pub fn init(
    path: &Path,
    aido_home: &Path,
    btrfs_bytes: Option<u64>,
) -> Result<Workspace, SnapshotError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| SnapshotError::NotADirectory { path: s(path) })?;
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| SnapshotError::io("create", parent, e))?;
    let parent = parent
        .canonicalize()
        .map_err(|e| SnapshotError::io("resolve", parent, e))?;
    let path = parent.join(&name);
    if path.symlink_metadata().is_ok() {
        let empty_dir =
            path.is_dir() && std::fs::read_dir(&path).is_ok_and(|mut d| d.next().is_none());
        if !empty_dir {
            return Err(SnapshotError::Exists { id: s(&path) });
        }
        std::fs::remove_dir(&path).map_err(|e| SnapshotError::io("replace", &path, e))?;
    }
    match btrfs_bytes {
        Some(bytes) => {
            let volumes = aido_home.join("volumes");
            std::fs::create_dir_all(&volumes)
                .map_err(|e| SnapshotError::io("create", &volumes, e))?;
            let key = &blake3::hash(path.as_os_str().as_encoded_bytes()).to_hex()[..12];
            let image = volumes.join(format!("{name}-{key}.btrfs"));
            let file = std::fs::File::create(&image)
                .map_err(|e| SnapshotError::io("create", &image, e))?;
            file.set_len(bytes)
                .map_err(|e| SnapshotError::io("size", &image, e))?;
            drop(file);
            run("mkfs.btrfs", &["-q", "-f", &s(&image)])?;
            let mount = parent.join(format!(".{name}.aido-volume"));
            std::fs::create_dir_all(&mount).map_err(|e| SnapshotError::io("create", &mount, e))?;
            run("mount", &["-o", "loop", &s(&image), &s(&mount)])?;
            let subvolume = mount.join("workspace");
            let finished = crate::btrfs::create(&subvolume).and_then(|_| {
                std::os::unix::fs::symlink(&subvolume, &path)
                    .map_err(|e| SnapshotError::io("link", &path, e))
            });
            if let Err(e) = finished {
                // Leave nothing mounted behind a failure.
                let _ = run("umount", &[&s(&mount)]);
                return Err(e);
            }
            Ok(Workspace {
                path: path.clone(),
                resolved: subvolume,
                image: Some(image),
                mount: Some(mount),
                subvolume: true,
            })
        }
        None => {
            let subvolume = crate::btrfs::create(&path).is_ok();
            if !subvolume {
                std::fs::create_dir(&path).map_err(|e| SnapshotError::io("create", &path, e))?;
            }
            Ok(Workspace {
                resolved: path.clone(),
                path,
                image: None,
                mount: None,
                subvolume,
            })
        }
    }
}

/// Unmount a volume made by [`init`] (the image stays).
pub fn unmount(workspace: &Workspace) -> Result<(), SnapshotError> {
    match &workspace.mount {
        Some(m) => run("umount", &[&s(m)]),
        None => Ok(()),
    }
}
