//! What an overlay run changed, read back from its layers by [`aido_changes`], with the
//! sandbox's coded errors (`sandbox_changes_unreadable`, `command_changes_too_large`,
//! `sandbox_layers_unsafe`), as every caller of the sandbox matches them.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use aido_changes::{Change, ChangeCaps};

use crate::error::SpawnError;

/// The changes in the upper layers under the held layer directory `layers` (`roots[i]` is the
/// host directory whose upper layer is `i/upper` in it): [`aido_changes::collect`].
pub fn collect_changes(
    layers: &impl AsFd,
    roots: &[PathBuf],
    caps: ChangeCaps,
) -> Result<Vec<Change>, SpawnError> {
    Ok(aido_changes::collect(layers, roots, caps)?)
}

/// Open a layer directory as a handle, refusing one that is not this user's own, mode 0700:
/// [`aido_changes::open_layers`].
pub fn open_layers(path: &Path) -> Result<OwnedFd, SpawnError> {
    Ok(aido_changes::open_layers(path)?)
}

/// A directory held open must be this user's own, mode 0700: [`aido_changes::check_owned`].
pub fn check_owned(fd: &impl AsFd, path: &Path) -> Result<(), SpawnError> {
    Ok(aido_changes::check_owned(fd, path)?)
}
