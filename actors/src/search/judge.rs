use std::path::Path;

use aido_actions::AccessKind;
use aido_policy::{FsResolver, PolicyEngine, SessionContext};
use aido_search::{EntryKind, Judge, Verdict};

/// The policy's walls and deny globs, asked about every entry before aido-search opens it:
/// the path is resolved (symlinks followed by the resolver, never by the search), must be
/// under a read wall, outside `AIDO_HOME`, and match no deny glob. A path that is not UTF-8
/// cannot be judged and is denied.
pub struct Walls<'a> {
    /// The policy.
    pub policy: &'a PolicyEngine,
    /// The calling session (its working directory).
    pub session: &'a SessionContext,
}

impl Judge for Walls<'_> {
    fn judge(&self, path: &Path, _kind: EntryKind) -> Verdict {
        let Some(given) = path.to_str() else {
            return Verdict::Deny;
        };
        match self
            .policy
            .check_path(given, AccessKind::Read, self.session, &FsResolver)
        {
            Ok(_) => Verdict::Allow,
            Err(_) => Verdict::Deny,
        }
    }
}
