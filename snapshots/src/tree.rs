//! Directory handles on a tree: every read and change is made relative to an open directory,
//! one component at a time, and no step follows a symlink.
//!
//! Paths are checked when they are resolved, not when they are used: between a walk seeing
//! `ws/sub` as a directory and a write to `ws/sub/f`, a process in the workspace can put a
//! symlink to `/etc` in its place. So a directory is opened once, with `O_NOFOLLOW |
//! O_DIRECTORY`, from the handle on its parent, and everything inside it goes through that
//! handle (`openat`, `mkdirat`, `unlinkat`, `renameat`, `symlinkat`, `readlinkat`, `fstatat`
//! with `AT_SYMLINK_NOFOLLOW`). A name is always one component, never `.` or `..`. A swapped
//! entry is either the link itself to remove or replace inside the tree, or a coded error;
//! its target is never reached.

use cap_std::fs::MetadataExt;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cap_std::fs::Dir;
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::error::SnapshotError;

/// Most entries one snapshot may hold.
pub const ENTRIES_MAX: usize = 2_000_000;

/// Most directories one path may go down through (so a walk holds at most this many handles).
pub(crate) const DEPTH_MAX: usize = 256;

/// A moment between deciding what to do with an entry and doing it, where a test hook runs.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A walk is about to open a directory it listed (`rel` is that directory).
    Scan,
    /// A snapshot is about to open a workspace file to clone or store it.
    Snapshot,
    /// A restore is about to remove an entry the snapshot does not hold.
    Remove,
    /// A restore is about to make an entry match the snapshot (`rel` is `""` just before a
    /// btrfs restore exchanges the whole workspace).
    Restore,
    /// A delete is about to remove an entry of a snapshot's tree (`rel` is relative to the
    /// store's directory and starts with the snapshot id).
    Delete,
}

/// A test hook: called with the step and the entry's path (relative, `/`-separated) between
/// planning and acting on each entry. Unset, it costs one `Option` check.
#[derive(Clone)]
pub(crate) struct Hook(Arc<HookFn>);

/// What a [`Hook`] calls.
type HookFn = dyn Fn(Step, &str) + Send + Sync;

impl Hook {
    /// Wrap a callback.
    pub(crate) fn new(f: impl Fn(Step, &str) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

/// Run the hook, if there is one.
pub(crate) fn call(hook: Option<&Hook>, step: Step, rel: &str) {
    if let Some(Hook(f)) = hook {
        f(step, rel);
    }
}

/// True for the errors an `O_NOFOLLOW | O_DIRECTORY` open gives when the name is a symlink
/// (`ELOOP`) or not a directory (`ENOTDIR`): the entry is not the directory it was.
pub(crate) fn is_swapped(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(code) if code == rustix::io::Errno::LOOP.raw_os_error()
            || code == rustix::io::Errno::NOTDIR.raw_os_error()
    )
}

fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from(e)
}

/// Split a manifest path into its components, refusing empty, `.` and `..` ones (a stored
/// manifest is read back from disk and must not name anything outside its root).
pub(crate) fn parts(rel: &str) -> Result<Vec<&str>, SnapshotError> {
    let parts: Vec<&str> = rel.split('/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == ".." || p.contains('\0'))
    {
        return Err(SnapshotError::EntryInvalid {
            path: rel.to_owned(),
        });
    }
    if parts.len() > DEPTH_MAX {
        return Err(SnapshotError::TooDeep { max: DEPTH_MAX });
    }
    Ok(parts)
}

/// `exclude` as paths relative to `root` (the ones under it).
pub(crate) fn relative(root: &Path, exclude: &[PathBuf]) -> Vec<String> {
    exclude
        .iter()
        .filter_map(|x| x.strip_prefix(root).ok())
        .map(|x| x.to_string_lossy().into_owned())
        .collect()
}

/// True when `rel` is one of `exclude` or under one.
pub(crate) fn excluded(exclude: &[String], rel: &str) -> bool {
    exclude.iter().any(|x| {
        x.is_empty()
            || rel == x
            || rel
                .strip_prefix(x.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// Open the root of a tree by its path. Its last component must be a directory itself, not a
/// symlink to one: the store resolved the path when it opened, so a symlink here is a swap.
pub(crate) fn open_root(path: &Path) -> Result<Dir, SnapshotError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => Ok(Dir::from_std_file(std::fs::File::from(fd))),
        Err(e) if is_swapped(&errno(e)) => Err(SnapshotError::NotADirectory {
            path: path.display().to_string(),
        }),
        Err(e) => Err(SnapshotError::io("open", path, errno(e))),
    }
}

/// Open the directory `name` in `parent`, refusing a symlink.
pub(crate) fn open_dir(parent: &Dir, name: &str) -> io::Result<Dir> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(parent, name, flags, Mode::empty())
        .map(|fd| Dir::from_std_file(std::fs::File::from(fd)))
        .map_err(errno)
}

/// Open the regular file `name` in `parent` for reading, refusing a symlink, and anything that
/// is not a regular file (opened non-blocking, so a fifo swapped in cannot hang us).
pub(crate) fn open_file(parent: &Dir, name: &str) -> io::Result<std::fs::File> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file =
        std::fs::File::from(rustix::fs::openat(parent, name, flags, Mode::empty()).map_err(errno)?);
    if !file.metadata()?.is_file() {
        return Err(errno(rustix::io::Errno::LOOP));
    }
    Ok(file)
}

/// Create the file `name` in `parent` for writing; it must not exist (not even as a symlink).
pub(crate) fn create_file(parent: &Dir, name: &str) -> io::Result<std::fs::File> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(parent, name, flags, Mode::from_raw_mode(0o600))
        .map(std::fs::File::from)
        .map_err(errno)
}

/// Remove the non-directory `name` in `parent` (a symlink itself, never its target).
pub(crate) fn unlink(parent: &Dir, name: &str) -> io::Result<()> {
    rustix::fs::unlinkat(parent, name, AtFlags::empty()).map_err(errno)
}

/// Rename `from` over `to`, both in `parent` (a symlink at `to` is replaced, not followed).
pub(crate) fn rename(parent: &Dir, from: &str, to: &str) -> io::Result<()> {
    rustix::fs::renameat(parent, from, parent, to).map_err(errno)
}

/// Make the symlink `name` in `parent`, pointing at `target`.
pub(crate) fn symlink(target: &str, parent: &Dir, name: &str) -> io::Result<()> {
    rustix::fs::symlinkat(target, parent, name).map_err(errno)
}

/// What the symlink `name` in `parent` points at, if it is one.
pub(crate) fn read_link(parent: &Dir, name: &str) -> io::Result<Vec<u8>> {
    rustix::fs::readlinkat(parent, name, Vec::new())
        .map(|c| c.into_bytes())
        .map_err(errno)
}

/// The directory `name` in `parent`, made if missing, and made anew (the old entry unlinked)
/// when something else — a symlink, a file — is there. The flag is true when the directory
/// is new (so nothing the plan saw under that name is in it).
pub(crate) fn ensure_dir(parent: &Dir, name: &str) -> io::Result<(Dir, bool)> {
    match open_dir(parent, name) {
        Ok(dir) => return Ok((dir, false)),
        Err(e) if is_swapped(&e) => unlink(parent, name)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(errno(e)),
    }
    // Anything that took the name since is refused, not followed.
    open_dir(parent, name).map(|dir| (dir, true))
}

/// True when `name` in `parent` is still the directory `dir` (not renamed away or replaced).
pub(crate) fn still_linked(parent: &Dir, name: &str, dir: &Dir) -> io::Result<bool> {
    let held = rustix::fs::fstat(dir).map_err(errno)?;
    let now = parent.symlink_metadata(name)?;
    Ok(now.is_dir() && now.ino() == held.st_ino && now.dev() == held.st_dev)
}

/// Remove `name` in `parent` and everything under it, never following a symlink: a directory
/// is opened no-follow from its parent and emptied through that handle; a symlink met
/// anywhere, even one swapped in for a directory mid-way, is unlinked itself. Counts against
/// `budget` (entries) and gives up past [`DEPTH_MAX`] levels. Missing is not an error.
pub(crate) fn remove_tree(
    parent: &Dir,
    name: &str,
    rel: &str,
    budget: &mut usize,
    hook: Option<&Hook>,
    step: Step,
) -> Result<(), SnapshotError> {
    remove_level(parent, name, rel, 1, budget, hook, step)
}

fn remove_level(
    parent: &Dir,
    name: &str,
    rel: &str,
    depth: usize,
    budget: &mut usize,
    hook: Option<&Hook>,
    step: Step,
) -> Result<(), SnapshotError> {
    let fail = |op, e| SnapshotError::io(op, Path::new(rel), e);
    if depth > DEPTH_MAX {
        return Err(SnapshotError::TooDeep { max: DEPTH_MAX });
    }
    *budget = budget
        .checked_sub(1)
        .ok_or(SnapshotError::TooManyEntries { max: ENTRIES_MAX })?;
    call(hook, step, rel);
    let dir = match open_dir(parent, name) {
        Ok(dir) => dir,
        Err(e) if is_swapped(&e) => {
            return match unlink(parent, name) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(fail("remove", e)),
                _ => Ok(()),
            };
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(fail("open", e)),
    };
    // Names first, then removals: the listing is not read while it changes.
    let mut names = Vec::new();
    for item in dir.entries().map_err(|e| fail("list", e))? {
        let item = item.map_err(|e| fail("list", e))?;
        names.push(item.file_name());
        if names.len() > *budget {
            return Err(SnapshotError::TooManyEntries { max: ENTRIES_MAX });
        }
    }
    for child in names {
        let Some(child) = child.to_str() else {
            // Not UTF-8: never part of a snapshot; remove it the same way by its raw name.
            remove_raw(&dir, &child, rel, depth + 1, budget, hook, step)?;
            continue;
        };
        let child_rel = format!("{rel}/{child}");
        match dir.symlink_metadata(child) {
            Ok(m) if m.is_dir() => {
                remove_level(&dir, child, &child_rel, depth + 1, budget, hook, step)?
            }
            Ok(_) => {
                *budget = budget
                    .checked_sub(1)
                    .ok_or(SnapshotError::TooManyEntries { max: ENTRIES_MAX })?;
                call(hook, step, &child_rel);
                match unlink(&dir, child) {
                    // A directory swapped in for the file since the stat.
                    Err(e) if e.raw_os_error() == Some(rustix::io::Errno::ISDIR.raw_os_error()) => {
                        remove_level(&dir, child, &child_rel, depth + 1, budget, hook, step)?
                    }
                    Err(e) if e.kind() != io::ErrorKind::NotFound => {
                        return Err(fail("remove", e));
                    }
                    _ => {}
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail("stat", e)),
        }
    }
    drop(dir);
    match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        // The directory emptied through its handle was moved away and something else, a
        // symlink say, took its name: unlink that itself, and say the tree changed under us.
        Err(rustix::io::Errno::NOTDIR) => {
            unlink(parent, name).map_err(|e| fail("remove", e))?;
            Err(SnapshotError::Swapped {
                path: rel.to_owned(),
            })
        }
        Err(e) => Err(fail("remove", errno(e))),
    }
}

/// [`remove_level`] for a name that is not UTF-8 (rustix takes any bytes; the hook sees it
/// lossily).
fn remove_raw(
    parent: &Dir,
    name: &std::ffi::OsStr,
    rel: &str,
    depth: usize,
    budget: &mut usize,
    hook: Option<&Hook>,
    step: Step,
) -> Result<(), SnapshotError> {
    let shown = format!("{rel}/{}", name.to_string_lossy());
    match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(rustix::io::Errno::ISDIR) => {
            // Move it to a UTF-8 name inside the same directory, then remove that.
            let temp = format!(".aido-remove-{}", std::process::id());
            rustix::fs::renameat(parent, name, parent, temp.as_str())
                .map_err(|e| SnapshotError::io("rename", Path::new(&shown), errno(e)))?;
            remove_level(parent, &temp, &shown, depth, budget, hook, step)
        }
        Err(e) => Err(SnapshotError::io("remove", Path::new(&shown), errno(e))),
    }
}

/// One open directory below the root of a [`Walk`].
struct Level {
    name: String,
    dir: Dir,
    /// Permission bits to put on it when the walk leaves it (a restore sets a directory's
    /// mode after its contents, so a read-only directory can still be filled).
    mode: Option<u32>,
}

/// Handles from a root down to one directory, each opened from the one above it. Moving to
/// another directory keeps the handles of the common prefix and opens the rest no-follow, so
/// a walk in path order opens each directory once and holds at most [`DEPTH_MAX`] handles.
pub(crate) struct Walk<'a> {
    root: Dir,
    /// The root's path, for messages.
    shown: &'a Path,
    open: Vec<Level>,
}

impl<'a> Walk<'a> {
    /// A walk from `root` (shown as `shown` in errors).
    pub(crate) fn new(root: Dir, shown: &'a Path) -> Self {
        Self {
            root,
            shown,
            open: Vec::new(),
        }
    }

    fn top(&self) -> &Dir {
        self.open.last().map_or(&self.root, |l| &l.dir)
    }

    /// Leave the innermost directory: put its mode on, and check it is still where it was
    /// (else what was written through the handle did not land in the tree).
    fn leave(&mut self) -> Result<(), SnapshotError> {
        let Some(level) = self.open.pop() else {
            return Ok(());
        };
        let Some(mode) = level.mode else {
            return Ok(());
        };
        let rel = self
            .open
            .iter()
            .map(|l| l.name.as_str())
            .chain([level.name.as_str()])
            .collect::<Vec<_>>()
            .join("/");
        let path = self.shown.join(&rel);
        rustix::fs::fchmod(&level.dir, Mode::from_raw_mode(mode))
            .map_err(|e| SnapshotError::io("chmod", &path, errno(e)))?;
        let parent = self.top();
        match still_linked(parent, &level.name, &level.dir) {
            Ok(true) => Ok(()),
            Ok(false) => Err(SnapshotError::Swapped { path: rel }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(SnapshotError::Swapped { path: rel })
            }
            Err(e) => Err(SnapshotError::io("stat", &path, e)),
        }
    }

    /// The handle on directory `parts` (components below the root). A component that is no
    /// longer a directory gives [`SnapshotError::Swapped`].
    pub(crate) fn to(&mut self, parts: &[&str]) -> Result<&Dir, SnapshotError> {
        if parts.len() > DEPTH_MAX {
            return Err(SnapshotError::TooDeep { max: DEPTH_MAX });
        }
        let common = self
            .open
            .iter()
            .zip(parts)
            .take_while(|(l, p)| l.name == **p)
            .count();
        while self.open.len() > common {
            self.leave()?;
        }
        for (i, name) in parts.iter().enumerate().skip(common) {
            let dir = open_dir(self.top(), name).map_err(|e| {
                let rel = parts[..=i].join("/");
                if is_swapped(&e) {
                    SnapshotError::Swapped { path: rel }
                } else {
                    SnapshotError::io("open", &self.shown.join(&rel), e)
                }
            })?;
            self.open.push(Level {
                name: (*name).to_owned(),
                dir,
                mode: None,
            });
        }
        Ok(self.top())
    }

    /// Enter `dir`, just opened as `name` in the current directory; `mode` goes on when the
    /// walk leaves it.
    pub(crate) fn enter(&mut self, name: &str, dir: Dir, mode: Option<u32>) {
        self.open.push(Level {
            name: name.to_owned(),
            dir,
            mode,
        });
    }

    /// Leave every directory (setting modes, checking each is still in place) and give back
    /// the root.
    pub(crate) fn finish(mut self) -> Result<Dir, SnapshotError> {
        while !self.open.is_empty() {
            self.leave()?;
        }
        Ok(self.root)
    }
}

/// Clone `source`'s extents into `target` (FICLONE on the two fds), or copy its bytes where
/// the filesystem cannot share them.
pub(crate) fn clone_or_copy(source: &std::fs::File, target: &std::fs::File) -> io::Result<()> {
    if rustix::fs::ioctl_ficlone(target.as_fd(), source.as_fd()).is_ok() {
        return Ok(());
    }
    std::io::copy(&mut &*source, &mut &*target).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_path_never_leaves_its_root() {
        for bad in [
            "",
            "/etc",
            "a//b",
            ".",
            "..",
            "../x",
            "a/../../x",
            "a/./b",
            "a/",
            "a\0b",
        ] {
            assert_eq!(
                parts(bad).unwrap_err().code(),
                "snapshot_entry_invalid",
                "{bad:?}"
            );
        }
        assert_eq!(parts("a/b.c/..d").unwrap(), ["a", "b.c", "..d"]);
        let deep = vec!["d"; DEPTH_MAX + 1].join("/");
        assert_eq!(parts(&deep).unwrap_err().code(), "snapshot_too_deep");
    }

    #[test]
    fn exclusion_is_by_whole_components() {
        let exclude = relative(
            Path::new("/w"),
            &[PathBuf::from("/w/.aido"), PathBuf::from("/x")],
        );
        assert_eq!(exclude, [".aido"]);
        assert!(excluded(&exclude, ".aido"));
        assert!(excluded(&exclude, ".aido/journal/db"));
        assert!(!excluded(&exclude, ".aidox"));
        assert!(!excluded(&exclude, "a/.aido"));
    }
}
