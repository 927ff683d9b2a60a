use std::path::Path;
use std::process::Command;

use crate::error::SnapshotError;

fn run(args: &[&str], paths: &[&Path]) -> Result<(), SnapshotError> {
    let mut cmd = Command::new("btrfs");
    cmd.args(args).args(paths);
    let shown = format!(
        "btrfs {} {}",
        args.join(" "),
        paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let out = cmd.output().map_err(|e| SnapshotError::Command {
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

/// A read-only snapshot of `source` at `target`.
pub(crate) fn snapshot_read_only(source: &Path, target: &Path) -> Result<(), SnapshotError> {
    run(&["subvolume", "snapshot", "-r"], &[source, target])
}

/// A writable snapshot of `source` at `target`.
pub(crate) fn snapshot(source: &Path, target: &Path) -> Result<(), SnapshotError> {
    run(&["subvolume", "snapshot"], &[source, target])
}

/// Delete a subvolume.
pub(crate) fn delete(subvolume: &Path) -> Result<(), SnapshotError> {
    run(&["subvolume", "delete"], &[subvolume])
}

/// Create a subvolume.
pub fn create(subvolume: &Path) -> Result<(), SnapshotError> {
    run(&["subvolume", "create"], &[subvolume])
}

/// Swap the entries `a` and `b` of the directory `parent` atomically (`shown` names `b`'s path
/// in errors).
pub(crate) fn exchange(
    parent: &cap_std::fs::Dir,
    a: &str,
    b: &str,
    shown: &Path,
) -> Result<(), SnapshotError> {
    rustix::fs::renameat_with(parent, a, parent, b, rustix::fs::RenameFlags::EXCHANGE)
        .map_err(|e| SnapshotError::io("exchange", shown, std::io::Error::from(e)))
}
