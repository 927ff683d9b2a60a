use serde::{Deserialize, Serialize};

/// How an action touches a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessKind {
    /// Contents or metadata are read.
    Read,
    /// The file is created or replaced.
    Write,
    /// The file is removed from its place (moved to the trash, deleted).
    Delete,
}

impl AccessKind {
    /// True when the access needs a write root rather than a read root.
    pub fn needs_write(self) -> bool {
        !matches!(self, Self::Read)
    }
}

/// One path an action touches, exactly as the agent wrote it (not yet resolved).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    /// The path as given: absolute, relative to the session's working directory, or `~/...`.
    pub path: String,
    /// What the action does to it.
    pub kind: AccessKind,
}

impl Access {
    /// A read of `path`.
    pub fn read(path: &str) -> Self {
        Self {
            path: path.to_owned(),
            kind: AccessKind::Read,
        }
    }
    /// A write of `path`.
    pub fn write(path: &str) -> Self {
        Self {
            path: path.to_owned(),
            kind: AccessKind::Write,
        }
    }
    /// A removal of `path`.
    pub fn delete(path: &str) -> Self {
        Self {
            path: path.to_owned(),
            kind: AccessKind::Delete,
        }
    }
}

/// Implemented by every primitive's argument struct: the paths this one action touches by
/// itself (children of composites are reached through [`crate::Action::children`]).
pub trait Touches {
    /// Push every path this action touches onto `out`.
    fn touches(&self, out: &mut Vec<Access>);
}
