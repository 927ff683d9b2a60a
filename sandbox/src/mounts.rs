//! The mount tree init builds in its new mount namespace, then pivots into.
//!
//! Like bubblewrap: a scaffolding tmpfs becomes the root first, so the host tree stays reachable
//! at `/oldroot` while the new tree is assembled at `/newroot`: the host bound recursively and
//! remounted read-only mount by mount, private `/tmp`, `/dev` and `/dev/shm`, a fresh `/proc`,
//! the writable roots bound (or overlaid) read-write, the denied paths covered. A second
//! `pivot_root` onto `/newroot` and a detach drop the scaffolding and the host tree.

use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};

use crate::error::{SpawnError, Step};
use crate::plan::hidden_path;
use crate::profile::WriteMode;
use crate::protocol::{Fds, Hidden, Plan};

const OLD: &str = "/oldroot";
const NEW: &str = "/newroot";
/// The empty file bound over denied files.
const EMPTY_FILE: &str = "/empty";
/// Device nodes bound into the sandbox's `/dev`.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];
/// Mounts under the new root that one remount pass may visit.
const MOUNTS_MAX: usize = 4096;

fn none() -> Option<&'static str> {
    None
}

fn under(base: &str, path: &Path) -> PathBuf {
    let relative = path.strip_prefix("/").unwrap_or(path);
    Path::new(base).join(relative)
}

pub(crate) fn build(plan: &Plan, fds: &Fds) -> Result<(), SpawnError> {
    mount(
        none(),
        "/",
        none(),
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        none(),
    )
    .map_err(|errno| SpawnError::setup(Step::MountPrivate, errno, "/"))?;
    scaffold()?;
    mount(
        Some(OLD),
        NEW,
        none(),
        MsFlags::MS_BIND | MsFlags::MS_REC,
        none(),
    )
    .map_err(|errno| SpawnError::setup(Step::MountRoot, errno, "rbind /"))?;
    remount_readonly()?;
    match (fds.shared_tmp, &plan.shared_tmp) {
        (None, None) => private_tmp(plan.tmp_bytes_max)?,
        (tree, dir) => shared_tmp(dir.as_deref(), tree)?,
    }
    minimal_dev(plan.tmp_bytes_max)?;
    mount(
        Some("proc"),
        &under(NEW, Path::new("/proc")),
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        none(),
    )
    .map_err(|errno| SpawnError::setup(Step::MountProc, errno, "/proc"))?;
    walls(plan, fds)?;
    writable(plan, fds)?;
    pin_ancestors(&plan.hidden, &plan.writable_roots)?;
    hide(&plan.hidden)?;
    pivot()
}

fn scaffold() -> Result<(), SpawnError> {
    let failed = |errno, detail: &str| SpawnError::setup(Step::MountScaffold, errno, detail);
    mount(
        Some("tmpfs"),
        "/tmp",
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755,size=1m"),
    )
    .map_err(|errno| failed(errno, "tmpfs"))?;
    for directory in ["/tmp/oldroot", "/tmp/newroot"] {
        std::fs::create_dir(directory)
            .map_err(|error| SpawnError::setup_io(Step::MountScaffold, &error, directory))?;
    }
    std::fs::write("/tmp/empty", b"")
        .map_err(|error| SpawnError::setup_io(Step::MountScaffold, &error, "/tmp/empty"))?;
    nix::unistd::chdir("/tmp").map_err(|errno| failed(errno, "chdir /tmp"))?;
    nix::unistd::pivot_root(".", "oldroot").map_err(|errno| failed(errno, "pivot_root"))?;
    nix::unistd::chdir("/").map_err(|errno| failed(errno, "chdir /"))?;
    Ok(())
}

/// Every mount under the new root, remounted read-only with its other flags kept: in a user
/// namespace the flags inherited from the host (nosuid, nodev, noexec, atime) are locked and a
/// remount that dropped one would fail.
fn remount_readonly() -> Result<(), SpawnError> {
    let mountinfo = std::fs::read_to_string(format!("{OLD}/proc/self/mountinfo"))
        .map_err(|error| SpawnError::setup_io(Step::MountReadonly, &error, "mountinfo"))?;
    let mut visited = 0usize;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(point), Some(options)) = (fields.get(4), fields.get(5)) else {
            continue;
        };
        let point = unescape(point);
        if point != NEW && !point.starts_with(&format!("{NEW}/")) {
            continue;
        }
        // These are covered by fresh mounts of their own below (a private /tmp, a minimal /dev,
        // the pid namespace's /proc), so what is under them is never reachable again: a
        // remount would only cost time.
        let covered = ["/dev", "/proc", "/tmp"].iter().any(|top| {
            let top = format!("{NEW}{top}");
            point == top || point.starts_with(&format!("{top}/"))
        });
        if covered {
            continue;
        }
        visited += 1;
        if visited > MOUNTS_MAX {
            return Err(SpawnError::SetupFailed {
                step: Step::MountReadonly,
                errno: 0,
                detail: format!("more than {MOUNTS_MAX} mounts"),
            });
        }
        let mut flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
        for option in options.split(',') {
            flags |= match option {
                "nosuid" => MsFlags::MS_NOSUID,
                "nodev" => MsFlags::MS_NODEV,
                "noexec" => MsFlags::MS_NOEXEC,
                "noatime" => MsFlags::MS_NOATIME,
                "nodiratime" => MsFlags::MS_NODIRATIME,
                "relatime" => MsFlags::MS_RELATIME,
                _ => MsFlags::empty(),
            };
        }
        match mount(none(), point.as_str(), none(), flags, none()) {
            Ok(()) => {}
            // A mount under a mount that was detached meanwhile, or one stacked over: the
            // visible one is remounted by its own line.
            Err(nix::errno::Errno::ENOENT) => {}
            Err(errno) => return Err(SpawnError::setup(Step::MountReadonly, errno, point)),
        }
    }
    Ok(())
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'\\' && index + 4 <= bytes.len() {
            let digits = &field[index + 1..index + 4];
            if let Ok(value) = u8::from_str_radix(digits, 8) {
                out.push(value);
                index += 4;
                continue;
            }
        }
        out.push(bytes[index]);
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn tmpfs(target: &Path, flags: MsFlags, options: &str, step: Step) -> Result<(), SpawnError> {
    mount(Some("tmpfs"), target, Some("tmpfs"), flags, Some(options))
        .map_err(|errno| SpawnError::setup(step, errno, target.display().to_string()))
}

fn private_tmp(tmp_bytes_max: u64) -> Result<(), SpawnError> {
    tmpfs(
        &under(NEW, Path::new("/tmp")),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        &format!("mode=1777,size={tmp_bytes_max}"),
        Step::MountTmp,
    )
}

/// The session's `/tmp`: the child's detached mount of it (its clone of the session's tmpfs,
/// or of the directory, which a command that runs as an unprivileged host user may not reach
/// by path), or a clone of the directory made here; `nosuid,nodev` either way.
fn shared_tmp(dir: Option<&Path>, tree: Option<i32>) -> Result<(), SpawnError> {
    use rustix::mount::MoveMountFlags;
    let shown = dir.map_or_else(
        || "the session's tmpfs".to_owned(),
        |dir| dir.display().to_string(),
    );
    let failed = |error: std::io::Error| SpawnError::setup_io(Step::MountTmp, &error, &shown);
    let target = under(NEW, Path::new("/tmp"));
    match tree {
        Some(fd) => attach(fd, &target).map_err(failed),
        None => {
            let dir = dir.ok_or_else(|| SpawnError::protocol("a shared /tmp without a source"))?;
            let tree = sealed_clone(&under(OLD, dir)).map_err(failed)?;
            rustix::mount::move_mount(
                &tree,
                "",
                rustix::fs::CWD,
                &target,
                MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
            )
            .map_err(|errno| failed(errno.into()))
        }
    }
}

fn minimal_dev(tmp_bytes_max: u64) -> Result<(), SpawnError> {
    let dev = under(NEW, Path::new("/dev"));
    tmpfs(
        &dev,
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "mode=0755,size=64k",
        Step::MountDev,
    )?;
    for device in DEVICES {
        let target = dev.join(device);
        std::fs::write(&target, b"")
            .map_err(|error| SpawnError::setup_io(Step::MountDev, &error, device))?;
        mount(
            Some(&Path::new(OLD).join("dev").join(device)),
            &target,
            none(),
            MsFlags::MS_BIND,
            none(),
        )
        .map_err(|errno| SpawnError::setup(Step::MountDev, errno, device))?;
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(link))
            .map_err(|error| SpawnError::setup_io(Step::MountDev, &error, link))?;
    }
    let shm = dev.join("shm");
    std::fs::create_dir(&shm)
        .map_err(|error| SpawnError::setup_io(Step::MountDev, &error, "shm"))?;
    tmpfs(
        &shm,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        &format!("mode=1777,size={tmp_bytes_max}"),
        Step::MountTmp,
    )?;
    // The device tmpfs itself is read-only once populated.
    mount(
        none(),
        &dev,
        none(),
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("mode=0755,size=64k"),
    )
    .map_err(|errno| SpawnError::setup(Step::MountDev, errno, "remount /dev read-only"))
}

/// A mount point that is missing in the new tree can only be created inside the private
/// tmpfs (a writable root under the host's `/tmp`); anywhere else it exists already.
fn ensure_mount_point(target: &Path, step: Step) -> Result<(), SpawnError> {
    if std::fs::symlink_metadata(target).is_ok() {
        return Ok(());
    }
    std::fs::create_dir_all(target)
        .map_err(|error| SpawnError::setup_io(step, &error, target.display().to_string()))
}

/// A command that runs as an unprivileged host user: the directories on the way to its walls
/// it may not pass through are covered (an empty tmpfs holding only the way down), then each
/// wall is attached from the child's detached idmapped mount, where the files of the walls'
/// owner are the command's own.
fn walls(plan: &Plan, fds: &Fds) -> Result<(), SpawnError> {
    if plan.walls.is_empty() {
        return Ok(());
    }
    if fds.walls.len() != plan.walls.len() {
        return Err(SpawnError::protocol(format!(
            "{} idmapped walls for {} in the plan",
            fds.walls.len(),
            plan.walls.len()
        )));
    }
    let sealed = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    for cover in &plan.covers {
        let target = under(NEW, cover);
        tmpfs(&target, sealed, "mode=0755,size=64k", Step::MountWall)?;
        for wall in plan
            .walls
            .iter()
            .filter(|wall| wall.path.starts_with(cover))
        {
            let point = under(NEW, &wall.path);
            std::fs::create_dir_all(&point).map_err(|error| {
                SpawnError::setup_io(Step::MountWall, &error, point.display().to_string())
            })?;
        }
        for root in plan
            .writable_roots
            .iter()
            .filter(|root| root.starts_with(cover))
        {
            let point = under(NEW, root);
            std::fs::create_dir_all(&point).map_err(|error| {
                SpawnError::setup_io(Step::MountWall, &error, point.display().to_string())
            })?;
        }
    }
    for (wall, fd) in plan.walls.iter().zip(&fds.walls) {
        let target = under(NEW, &wall.path);
        ensure_mount_point(&target, Step::MountWall)?;
        attach(*fd, &target).map_err(|error| {
            SpawnError::setup_io(Step::MountWall, &error, wall.path.display().to_string())
        })?;
    }
    for cover in &plan.covers {
        let target = under(NEW, cover);
        mount(
            none(),
            &target,
            none(),
            MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | sealed,
            Some("mode=0755,size=64k"),
        )
        .map_err(|errno| SpawnError::setup(Step::MountWall, errno, cover.display().to_string()))?;
    }
    Ok(())
}

/// Attach the child's detached mount of layer `index` in the scaffold (`/layers/INDEX`), so
/// overlayfs, which takes its upper layer only from this mount namespace, can use it.
fn attach_layer(index: usize, tree: i32) -> Result<PathBuf, SpawnError> {
    let point = PathBuf::from(format!("/layers/{index}"));
    std::fs::create_dir_all(&point).map_err(|error| {
        SpawnError::setup_io(Step::MountWritable, &error, point.display().to_string())
    })?;
    attach(tree, &point)
        .map_err(|error| SpawnError::setup_io(Step::MountWritable, &error, "attach a layer"))?;
    Ok(point)
}

/// A detached clone of the mount at `dir`, `nosuid,nodev`, its other attributes kept.
pub(crate) fn sealed_clone(dir: &Path) -> std::io::Result<std::os::fd::OwnedFd> {
    use rustix::mount::{OpenTreeFlags, open_tree};
    let tree = open_tree(
        rustix::fs::CWD,
        dir,
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )?;
    aido_sys::seal_mount(std::os::fd::AsFd::as_fd(&tree))?;
    Ok(tree)
}

/// Attaches at `target` the detached mount the child left open at descriptor `fd` (its magic
/// link under the old root's `/proc/self/fd` names it).
fn attach(fd: i32, target: &Path) -> std::io::Result<()> {
    let tree = format!("{OLD}/proc/self/fd/{fd}");
    rustix::mount::move_mount(
        rustix::fs::CWD,
        tree.as_str(),
        rustix::fs::CWD,
        target,
        rustix::mount::MoveMountFlags::MOVE_MOUNT_F_SYMLINKS,
    )
    .map_err(std::io::Error::from)
}

fn writable(plan: &Plan, fds: &Fds) -> Result<(), SpawnError> {
    let idmapped = !plan.walls.is_empty();
    for (index, root) in plan.writable_roots.iter().enumerate() {
        let target = under(NEW, root);
        ensure_mount_point(&target, Step::MountWritable)?;
        let source = under(OLD, root);
        match &plan.writes {
            // Idmapped: the wall attached at the target is the writable root already.
            WriteMode::Direct if idmapped => continue,
            WriteMode::Direct => mount(
                Some(&source),
                &target,
                none(),
                MsFlags::MS_BIND | MsFlags::MS_REC,
                none(),
            ),
            WriteMode::Overlay { layers_dir } => {
                let layer = under(OLD, &layers_dir.join(index.to_string()));
                // An unprivileged user cannot pass through the directories above the layer:
                // it is named by the child's handles instead (the lower is the idmapped wall
                // already attached at the target).
                let (lower, layer) = match fds.layers.get(index) {
                    Some(tree) if idmapped => (target.clone(), attach_layer(index, *tree)?),
                    _ => (source.clone(), layer),
                };
                let (upper, work) = (layer.join("upper"), layer.join("work"));
                let options = format!(
                    "lowerdir={},upperdir={},workdir={},userxattr",
                    lower.display(),
                    upper.display(),
                    work.display()
                );
                mount(
                    Some("overlay"),
                    &target,
                    Some("overlay"),
                    MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                    Some(options.as_str()),
                )
            }
        }
        .map_err(|errno| {
            SpawnError::setup(Step::MountWritable, errno, root.display().to_string())
        })?;
    }
    Ok(())
}

/// A mount point cannot be renamed or removed (EBUSY), so every directory between a writable
/// root and a denied path in it is bound onto itself: without that, `mv .git moved` (a rename
/// in one directory, which Landlock always allows) would carry the covered path away and let
/// the command create a fresh, uncovered one in its place.
fn pin_ancestors(hidden: &[Hidden], roots: &[PathBuf]) -> Result<(), SpawnError> {
    let mut pins = std::collections::BTreeSet::new();
    for entry in hidden {
        let path = hidden_path(entry);
        let Some(root) = roots.iter().find(|root| path.starts_with(root)) else {
            continue;
        };
        let mut ancestor = path.parent();
        while let Some(directory) = ancestor {
            if directory == root.as_path() || !directory.starts_with(root) {
                break;
            }
            pins.insert(directory.to_path_buf());
            ancestor = directory.parent();
        }
    }
    for pin in pins {
        let target = under(NEW, &pin);
        if !target.is_dir() {
            continue;
        }
        mount(
            Some(&target),
            &target,
            none(),
            MsFlags::MS_BIND | MsFlags::MS_REC,
            none(),
        )
        .map_err(|errno| {
            SpawnError::setup(Step::MountDeny, errno, format!("pin {}", pin.display()))
        })?;
    }
    Ok(())
}

fn hide(hidden: &[Hidden]) -> Result<(), SpawnError> {
    let sealed = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    for entry in hidden {
        let target = under(NEW, hidden_path(entry));
        // Not visible in the new tree (under the private /tmp or an already hidden directory).
        let Ok(metadata) = std::fs::symlink_metadata(&target) else {
            continue;
        };
        let failed =
            |errno| SpawnError::setup(Step::MountDeny, errno, target.display().to_string());
        // A mount follows symlinks in its target. The parent resolved this path; if a component
        // became a symlink since (another command in the same root), covering what it points
        // at would leave the denied path itself open. Refuse instead.
        if std::fs::canonicalize(&target).ok().as_deref() != Some(target.as_path()) {
            return Err(SpawnError::SetupFailed {
                step: Step::MountDeny,
                errno: libc::ELOOP,
                detail: format!(
                    "{} became a symlink after it was resolved",
                    target.display()
                ),
            });
        }
        if metadata.is_dir() {
            tmpfs(&target, sealed, "mode=0000,size=4k", Step::MountDeny)?;
        } else {
            mount(Some(EMPTY_FILE), &target, none(), MsFlags::MS_BIND, none()).map_err(failed)?;
            mount(
                none(),
                &target,
                none(),
                MsFlags::MS_REMOUNT | MsFlags::MS_BIND | sealed,
                none(),
            )
            .map_err(failed)?;
        }
    }
    Ok(())
}

fn pivot() -> Result<(), SpawnError> {
    let failed = |errno, detail: &str| SpawnError::setup(Step::PivotRoot, errno, detail);
    nix::unistd::chdir(NEW).map_err(|errno| failed(errno, "chdir /newroot"))?;
    nix::unistd::pivot_root(".", ".").map_err(|errno| failed(errno, "pivot_root"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(|errno| failed(errno, "detach the host tree"))?;
    nix::unistd::chdir("/").map_err(|errno| failed(errno, "chdir /"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(super::unescape(r"/a\040b\134c"), "/a b\\c");
        assert_eq!(super::unescape("/plain"), "/plain");
    }
}
