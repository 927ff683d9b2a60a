//! cgroup v2 limits on the whole tree, where a delegated subtree with the controllers exists.
//!
//! This machine (and many containers) mounts cgroup v2 with no controllers enabled (the
//! hybrid layout keeps pids, memory and cpu in v1), so a profile that demands cgroup limits
//! is refused with `sandbox_unavailable` naming the first missing controller.

use std::path::{Path, PathBuf};

use crate::error::SpawnError;

/// The controllers a [`crate::CgroupLimits`] needs.
const CONTROLLERS: [&str; 3] = ["pids", "memory", "cpu"];

/// The cgroup v2 directory this process belongs to, if cgroup v2 is mounted.
fn own_cgroup() -> Option<PathBuf> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = membership
        .lines()
        .find_map(|line| line.strip_prefix("0::"))?
        .trim_start_matches('/');
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .iter()
        .map(|mount| Path::new(mount).join(path))
        .find(|directory| directory.join("cgroup.controllers").exists())
}

/// Refuses unless the controllers are available to a child cgroup of ours.
pub(crate) fn check_available() -> Result<(), SpawnError> {
    let Some(directory) = own_cgroup() else {
        return Err(SpawnError::unavailable(
            "cgroup_v2",
            "no cgroup v2 hierarchy for this process",
        ));
    };
    let controllers =
        std::fs::read_to_string(directory.join("cgroup.controllers")).unwrap_or_default();
    for controller in CONTROLLERS {
        if !controllers
            .split_whitespace()
            .any(|present| present == controller)
        {
            return Err(SpawnError::unavailable(
                format!("cgroup_v2_{controller}"),
                format!("{} offers [{}]", directory.display(), controllers.trim()),
            ));
        }
    }
    // Enabling controllers for children and moving the child in is not implemented yet; never
    // pretend the limits hold.
    Err(SpawnError::unavailable(
        "cgroup_v2_delegation",
        format!(
            "{} has the controllers; delegation is not implemented yet",
            directory.display()
        ),
    ))
}
