//! A session's `/tmp` as one tmpfs its commands share ([`crate::Sandbox::with_tmp`]).
//!
//! Made with the new mount API (`fsopen`/`fsmount`) by aido as root, it is a *detached*
//! mount: in no mount table of the host, sized like a private `/tmp`, owned by the user the
//! commands run as, `nosuid,nodev`. Each command's child clones it (`open_tree` of the
//! detached mount) and init attaches the clone at `/tmp`, so what one command leaves there the
//! next finds. It lives while aido holds it or a command has it mounted, and nothing of it
//! outlives aido's process.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use crate::error::SpawnError;

/// A shared tmpfs; cheap to clone.
#[derive(Clone, Debug)]
pub struct SharedTmp(Arc<OwnedFd>);

impl SharedTmp {
    /// A new tmpfs of at most `bytes_max`, mode 1777, its root owned by `owner` (the
    /// unprivileged user commands run as). Needs `CAP_SYS_ADMIN` (aido as root); without it
    /// `sandbox_unavailable`, naming what was missing.
    pub fn tmpfs(bytes_max: u64, owner: crate::RunAs) -> Result<Self, SpawnError> {
        use rustix::mount::{
            FsMountFlags, FsOpenFlags, MountAttrFlags, fsconfig_create, fsconfig_set_string,
            fsmount, fsopen,
        };
        let unavailable = |step: &str, errno: rustix::io::Errno| {
            SpawnError::unavailable("session_tmpfs", format!("{step}: {errno}"))
        };
        let fs = fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC)
            .map_err(|errno| unavailable("fsopen tmpfs", errno))?;
        for (key, value) in [
            ("size", bytes_max.to_string()),
            ("mode", "1777".to_owned()),
            ("uid", owner.uid.to_string()),
            ("gid", owner.gid.to_string()),
        ] {
            fsconfig_set_string(&fs, key, value.as_str())
                .map_err(|errno| unavailable(&format!("tmpfs {key}={value}"), errno))?;
        }
        fsconfig_create(&fs).map_err(|errno| unavailable("tmpfs create", errno))?;
        let mount = fsmount(
            &fs,
            FsMountFlags::FSMOUNT_CLOEXEC,
            MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV,
        )
        .map_err(|errno| unavailable("fsmount", errno))?;
        // Commands get clones of it: a kernel that cannot clone a detached mount (before
        // Linux 6.15) says so here, not at every command.
        rustix::mount::open_tree(
            &mount,
            "",
            rustix::mount::OpenTreeFlags::OPEN_TREE_CLONE
                | rustix::mount::OpenTreeFlags::AT_EMPTY_PATH
                | rustix::mount::OpenTreeFlags::OPEN_TREE_CLOEXEC,
        )
        .map_err(|errno| unavailable("a clone of a detached mount (Linux 6.15)", errno))?;
        Ok(SharedTmp(Arc::new(mount)))
    }

    pub(crate) fn fd(&self) -> &OwnedFd {
        &self.0
    }
}
