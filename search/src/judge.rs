//! The caller's judge: every entry of the walk is judged before it is opened.

use std::fs::File;
use std::path::Path;

/// What the walk is about to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory: denying it skips everything below it.
    Dir,
    /// A regular file: denying it means it is never opened and never appears in a result.
    File,
}

/// The judge's answer for one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny,
}

/// Decides, before anything is opened, whether a path may be read.
///
/// aido plugs its path walls and deny globs in here. The walk is parallel, so a judge is
/// `Sync`; it is called once per directory and once per regular file, with the path as the walk
/// sees it (the root joined with the entry's relative path). Symbolic links are never followed
/// and never judged: they are skipped and counted.
pub trait Judge: Sync {
    fn judge(&self, path: &Path, kind: EntryKind) -> Verdict;

    /// After a file the judge allowed is opened and before a byte of it is read: whether the
    /// file really opened (`file`, e.g. its `/proc/self/fd` link) is still the one judged at
    /// `path`. A directory swapped for a symbolic link between the judgement and the open
    /// would otherwise lead the open elsewhere. A denied file is closed unread and counted as
    /// denied. The default allows it.
    fn opened(&self, _path: &Path, _file: &File) -> Verdict {
        Verdict::Allow
    }

    /// Open a file the judge allowed in a way that makes it the file judged by construction
    /// (e.g. `openat2` with `RESOLVE_NO_SYMLINKS`, so no link swapped in on the way is
    /// followed), instead of an open followed by [`Judge::opened`]. `None` (the default, or
    /// when the judge cannot here): the search opens it and asks `opened`. The file must be
    /// opened read-only, without following a final symbolic link and without blocking.
    fn open(&self, _path: &Path) -> Option<Opened> {
        None
    }
}

/// What [`Judge::open`] gave.
#[derive(Debug)]
pub enum Opened {
    /// The file judged, open for reading.
    File(File),
    /// Something on the way was not what was judged (a link swapped in): closed unread and
    /// counted as denied.
    Denied,
    /// It could not be opened (gone, no permission).
    Unreadable,
}

impl<F> Judge for F
where
    F: Fn(&Path, EntryKind) -> Verdict + Sync,
{
    fn judge(&self, path: &Path, kind: EntryKind) -> Verdict {
        self(path, kind)
    }
}

/// A judge that allows every path (for tests, benches and trusted callers).
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl Judge for AllowAll {
    fn judge(&self, _path: &Path, _kind: EntryKind) -> Verdict {
        Verdict::Allow
    }
}
