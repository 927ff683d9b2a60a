//! The btrfs filesystem the snapshot benchmarks run on: made by aido's own
//! `aido_snapshots::volume::init` (what `aido workspace init --btrfs` does: a sparse loop file,
//! `mkfs.btrfs`, `mount -o loop`, a subvolume for the workspace), and unmounted by a guard on
//! every path out, including a failed `init` that got as far as mounting.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use aido_snapshots::volume;

use crate::harness::exec;

/// A mounted btrfs loop volume; unmounted on drop (the loop device goes with it: `mount -o
/// loop` sets autoclear).
pub struct Volume {
    guard: MountGuard,
    /// The workspace subvolume `init` made (canonical path, inside the mount).
    pub subvolume: PathBuf,
    /// The loop image's size in bytes (sparse).
    pub bytes: u64,
}

impl Volume {
    /// Makes a `bytes`-sized btrfs volume mounted under `parent` (as `.btrfs.aido-volume`),
    /// its image in `aido_home/volumes`. `Err` says why it could not (not root, no
    /// `mkfs.btrfs`, no loop devices, ...).
    pub fn create(parent: &Path, aido_home: &Path, bytes: u64) -> Result<Self, String> {
        let path = parent.join("btrfs");
        // Guard the mount point before init runs: init does not unmount when a later step
        // (the subvolume, the symlink) fails.
        let guard = MountGuard(parent.join(".btrfs.aido-volume"));
        match volume::init(&path, aido_home, Some(bytes)) {
            Ok(made) if made.subvolume => Ok(Self {
                guard,
                subvolume: made.resolved,
                bytes,
            }),
            Ok(_) => Err("aido's volume init made no subvolume".into()),
            Err(e) => Err(format!("aido's btrfs volume init failed: {e}")),
        }
    }

    /// Where the filesystem is mounted.
    pub fn mount(&self) -> &Path {
        &self.guard.0
    }
}

/// A journaled ext4 on a loop device (`mkfs.ext4` defaults) in the temp dir, made for the
/// real-work loop (aido-bench as root, with e2fsprogs): a root file system may be ext4 without
/// a journal, where ext4 skips recently deleted inodes one by one when it allocates, which
/// makes creating 20,000 files after 20,000 were removed slow and noisy for both sides.
/// Unmounted, and its image and mount point removed, on drop.
pub struct Ext4 {
    guard: MountGuard,
    image: PathBuf,
}

impl Ext4 {
    /// Makes and mounts a `bytes`-sized ext4 under `temp`.
    pub fn create(temp: &Path, bytes: u64) -> anyhow::Result<Self> {
        let id = std::process::id();
        let made = Self {
            guard: MountGuard(temp.join(format!("aido-bench-ext4-{id}"))),
            image: temp.join(format!("aido-bench-ext4-{id}.img")),
        };
        std::fs::File::create(&made.image)?.set_len(bytes)?;
        exec(
            Command::new("mkfs.ext4")
                .args(["-q", "-F"])
                .arg(&made.image),
        )?;
        std::fs::create_dir_all(made.mount())?;
        exec(
            Command::new("mount")
                .args(["-o", "loop"])
                .arg(&made.image)
                .arg(made.mount()),
        )?;
        Ok(made)
    }

    /// Where it is mounted.
    pub fn mount(&self) -> &Path {
        &self.guard.0
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let mount = self.guard.0.clone();
        // The guard unmounts first (its own drop, right here), then the files go.
        drop(std::mem::replace(
            &mut self.guard,
            MountGuard(PathBuf::new()),
        ));
        let _ = std::fs::remove_dir(&mount);
        let _ = std::fs::remove_file(&self.image);
    }
}

/// Unmounts its path on drop if something is mounted there.
struct MountGuard(PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        for _ in 0..20 {
            if !is_mounted(&self.0) {
                return;
            }
            let _ = Command::new("umount").arg(&self.0).output();
            if !is_mounted(&self.0) {
                return;
            }
            // Busy (a child still exiting, the btrfs cleaner): wait and retry.
            std::thread::sleep(Duration::from_millis(250));
        }
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
        if is_mounted(&self.0) {
            eprintln!(
                "aido-bench: could not unmount {}; run `umount {}`",
                self.0.display(),
                self.0.display()
            );
        }
    }
}

/// Whether `path` is a mount point, from /proc/self/mountinfo.
pub fn is_mounted(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    mounted_in(&info, path)
}

/// [`is_mounted`] on the text of a mountinfo file (field 5 is the mount point, with spaces
/// and other specials escaped in octal).
fn mounted_in(info: &str, path: &Path) -> bool {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_owned());
    let wanted = path
        .to_string_lossy()
        .replace('\\', "\\134")
        .replace(' ', "\\040")
        .replace('\t', "\\011")
        .replace('\n', "\\012");
    info.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|point| point == wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_is_read_by_mount_point() {
        let info = "36 35 98:0 / /mnt/a\\040b rw,noatime - btrfs /dev/loop0 rw\n\
                    37 35 98:0 / /tmp/x rw - ext4 /dev/vda rw\n";
        assert!(mounted_in(info, Path::new("/mnt/a b")));
        assert!(mounted_in(info, Path::new("/tmp/x")));
        assert!(!mounted_in(info, Path::new("/tmp")));
        assert!(is_mounted(Path::new("/")));
        assert!(!is_mounted(Path::new("/no/such/aido-bench/mount")));
    }

    #[test]
    fn a_guard_on_an_unmounted_path_does_nothing() {
        let dir = tempfile::tempdir().unwrap();
        drop(MountGuard(dir.path().to_owned()));
        assert!(dir.path().is_dir());
    }
}
