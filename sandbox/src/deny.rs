//! A profile's deny globs expanded ahead of its commands, into the index every clone of a
//! [`crate::Sandbox`] shares ([`aido_globs::GlobIndex`]: each root walked once, then only where
//! it changed).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::SpawnError;
use crate::profile::{Profile, Request};

/// Expansions of deny globs, kept between commands and shared by every clone of a
/// [`crate::Sandbox`]: [`aido_globs::GlobIndex`], which a command's plan expands its globs
/// with, and which a profile can warm before its first command.
#[derive(Debug, Default)]
pub struct GlobIndex(aido_globs::GlobIndex);

impl GlobIndex {
    /// An index that starts from what `file` kept of an earlier process's walks, and keeps its
    /// own there (see [`aido_globs::GlobIndex::persisted`]).
    pub fn persisted(file: PathBuf) -> Self {
        GlobIndex(aido_globs::GlobIndex::persisted(file))
    }

    /// Expands `profile`'s deny globs (as a command's plan would, with `home` for `~`) without
    /// running anything, so the first command does not pay the first walk of a large root.
    /// In a single-command process ([`aido_globs::set_single_command`]) the answer is held for
    /// that command.
    pub fn warm(&self, profile: &Profile, home: Option<&Path>) -> Result<(), SpawnError> {
        if aido_globs::single_command() {
            self.0.hold_next();
        }
        let request = Request::new(["true"], Path::new("/"));
        crate::plan::resolve(profile, &request, home, &BTreeMap::new(), &self.0).map(drop)
    }
}

impl std::ops::Deref for GlobIndex {
    type Target = aido_globs::GlobIndex;

    fn deref(&self) -> &aido_globs::GlobIndex {
        &self.0
    }
}
