use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// How snapshots of a workspace are taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// Read-only btrfs snapshots of the workspace subvolume.
    BtrfsSubvolume,
    /// Per-file extent clones (FICLONE).
    Reflink,
    /// A content-addressed copy.
    Copy,
}

impl Backend {
    /// The backend of this snake_case name (as `snapshot_taken` records name it).
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::BtrfsSubvolume, Self::Reflink, Self::Copy]
            .into_iter()
            .find(|b| b.name() == name)
    }

    /// The snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::BtrfsSubvolume => "btrfs_subvolume",
            Self::Reflink => "reflink",
            Self::Copy => "copy",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

const BTRFS_SUPER_MAGIC: u64 = 0x9123_683E;
/// The inode number of every btrfs subvolume's root directory.
const BTRFS_SUBVOLUME_ROOT_INO: u64 = 256;

fn fs_type(path: &Path) -> Option<u64> {
    rustix::fs::statfs(path).ok().map(|s| s.f_type as u64)
}

/// True when `path` is the root of a btrfs subvolume whose parent directory is on btrfs too
/// (so snapshots can live beside it and be swapped into its place).
pub(crate) fn is_btrfs_subvolume(path: &Path) -> bool {
    let Some(parent) = path.parent() else {
        return false;
    };
    fs_type(path) == Some(BTRFS_SUPER_MAGIC)
        && fs_type(parent) == Some(BTRFS_SUPER_MAGIC)
        && std::fs::metadata(path).is_ok_and(|m| m.ino() == BTRFS_SUBVOLUME_ROOT_INO)
        && std::process::Command::new("btrfs")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
}

/// True when a file in `dir` can be cloned to a sibling with FICLONE.
pub(crate) fn supports_reflink(dir: &Path) -> bool {
    let probe = dir.join(format!(".aido-reflink-probe-{}", std::process::id()));
    let clone = dir.join(format!(".aido-reflink-probe-{}.clone", std::process::id()));
    let ok =
        std::fs::write(&probe, b"probe").is_ok() && reflink_copy::reflink(&probe, &clone).is_ok();
    let _ = std::fs::remove_file(&probe);
    let _ = std::fs::remove_file(&clone);
    ok
}
