//! Helpers shared by the tests: a whole-tree digest and a btrfs loop volume.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)] // helpers of tests may fail loudly

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// (kind, mode, contents or link target) of every entry, for comparing trees.
/// A tree as [`digest`] sees it.
pub type Tree = BTreeMap<String, (char, u32, Vec<u8>)>;

pub fn digest(root: &Path) -> Tree {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let mode = m.permissions().mode() & 0o7777;
            if m.file_type().is_symlink() {
                out.insert(
                    rel,
                    (
                        'l',
                        0,
                        std::fs::read_link(&p)
                            .unwrap()
                            .display()
                            .to_string()
                            .into_bytes(),
                    ),
                );
            } else if m.is_dir() {
                out.insert(rel, ('d', mode, Vec::new()));
                stack.push(p);
            } else {
                out.insert(rel, ('f', mode, std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// A btrfs filesystem in a loop file, mounted in a temp dir; unmounted on drop.
pub struct Volume {
    _dir: tempfile::TempDir,
    pub mount: PathBuf,
}

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}

pub fn btrfs_volume() -> Option<Volume> {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("v.img");
    let mount = dir.path().join("mnt");
    std::fs::create_dir(&mount).unwrap();
    std::fs::File::create(&image)
        .unwrap()
        .set_len(256 << 20)
        .unwrap();
    let ok = |c: &mut Command| c.output().is_ok_and(|o| o.status.success());
    // In CI a missing btrfs is a failure, unless the kernel truly has none: .ci/run installs
    // btrfs-progs and runs as root, so anything else is a broken setup, not a reason to skip.
    let unavailable = |why: &str| -> Option<Volume> {
        let kernel_has_btrfs = std::fs::read_to_string("/proc/filesystems")
            .is_ok_and(|f| f.lines().any(|l| l.trim_end().ends_with("btrfs")));
        if std::env::var_os("CI").is_some() && kernel_has_btrfs {
            panic!("CI must have btrfs on a loop device: {why}");
        }
        eprintln!("btrfs unavailable: {why}");
        None
    };
    if !ok(Command::new("mkfs.btrfs").args(["-q", "-f"]).arg(&image)) {
        return unavailable("mkfs.btrfs is missing (install btrfs-progs)");
    }
    if !ok(Command::new("mount")
        .args(["-o", "loop"])
        .arg(&image)
        .arg(&mount))
    {
        return unavailable("cannot mount a loop device here (needs root)");
    }
    Some(Volume { _dir: dir, mount })
}
