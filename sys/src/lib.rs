//! The few Linux system calls aido needs that neither rustix nor nix wraps yet, each behind a
//! safe function: seccomp user notifications ([`notify`]), and `mount_setattr(2)` (Linux 5.12), which the sandbox uses to
//! make an *idmapped* mount: a view of a host directory in which files owned by one user
//! appear owned by another, so a confined command running as an unprivileged host user can
//! own the walls it works in while every other root-owned file stays out of its reach.
//!
//! ```no_run
//! use std::os::fd::AsFd;
//! # fn demo(tree: std::os::fd::OwnedFd, userns: std::fs::File) -> std::io::Result<()> {
//! // `tree` from open_tree(OPEN_TREE_CLONE), `userns` an open /proc/PID/ns/user.
//! aido_sys::idmap_mount(tree.as_fd(), userns.as_fd(), aido_sys::Attrs { recursive: true, read_only: true })?;
//! # Ok(()) }
//! ```

pub mod notify;

use std::os::fd::{AsRawFd, BorrowedFd};

/// `MOUNT_ATTR_RDONLY`.
const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
/// `MOUNT_ATTR_NOSUID`.
const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
/// `MOUNT_ATTR_NODEV`.
const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
/// `MOUNT_ATTR_IDMAP`.
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
/// `AT_EMPTY_PATH`.
const AT_EMPTY_PATH: libc::c_uint = 0x1000;
/// `AT_RECURSIVE`.
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// `struct mount_attr` (`MOUNT_ATTR_SIZE_VER0`).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// What else an idmapped mount is made with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attrs {
    /// Every mount below it too (`AT_RECURSIVE`).
    pub recursive: bool,
    /// Read-only.
    pub read_only: bool,
}

/// Make the detached mount `tree` (from `open_tree(OPEN_TREE_CLONE)`) idmapped by the user
/// namespace `userns` (its uid and gid maps say which host ids appear as which), `nosuid` and
/// `nodev` always, read-only if asked. The caller needs `CAP_SYS_ADMIN` in the user namespace
/// that owns the file system (the host's, for a host file system).
pub fn idmap_mount(
    tree: BorrowedFd<'_>,
    userns: BorrowedFd<'_>,
    attrs: Attrs,
) -> std::io::Result<()> {
    let mut set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if attrs.read_only {
        set |= MOUNT_ATTR_RDONLY;
    }
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    let mut flags = AT_EMPTY_PATH;
    if attrs.recursive {
        flags |= AT_RECURSIVE;
    }
    setattr(tree, flags, &attr)
}

/// Make the detached mount `tree` (from `open_tree(OPEN_TREE_CLONE)`) `nosuid` and `nodev`,
/// its other attributes kept (in a user namespace the atime ones inherited from the host are
/// locked, so a classic remount that restated them could fail).
pub fn seal_mount(tree: BorrowedFd<'_>) -> std::io::Result<()> {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    setattr(tree, AT_EMPTY_PATH, &attr)
}

fn setattr(tree: BorrowedFd<'_>, flags: libc::c_uint, attr: &MountAttr) -> std::io::Result<()> {
    #[allow(unsafe_code)]
    // SAFETY: mount_setattr reads `size_of::<MountAttr>()` bytes from `attr`, a live
    // `#[repr(C)]` value of exactly that layout (struct mount_attr, MOUNT_ATTR_SIZE_VER0), and
    // the empty C string; both outlive the call. The descriptors are borrowed, so they are
    // open for its duration. Nothing is written through any pointer.
    let result = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            flags,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Run `hook` in the child of `command`'s fork, just before it executes its program
/// (`CommandExt::pre_exec`), for a hook that only makes system calls on memory prepared
/// before the fork (entering a Landlock domain made in the parent, dropping capabilities): it
/// must not allocate, lock or touch another thread's state, since after a fork in a
/// multi-threaded process only async-signal-safe work is sound. An error from it fails the
/// spawn, so a program is never run without what the hook sets up.
pub fn before_exec(
    command: &mut std::process::Command,
    hook: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static,
) {
    use std::os::unix::process::CommandExt as _;
    #[allow(unsafe_code)]
    // SAFETY: the contract above is the one `pre_exec` states; every caller in this workspace
    // passes a hook that makes system calls only (see its own comment), on state built before
    // the fork.
    unsafe {
        command.pre_exec(hook);
    }
}
