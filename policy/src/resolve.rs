use std::borrow::Cow;
use std::ffi::OsStr;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::FileType;
use rustix::io::Errno;

/// Why a path could not be resolved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// More symlinks than [`SYMLINK_HOPS_MAX`] (a loop, most likely).
    #[error("too many symlinks while resolving {path}")]
    SymlinkLoop {
        /// The path.
        path: PathBuf,
    },
    /// `..` after a component that does not exist: there is nothing to go up from.
    #[error("`..` follows a missing component in {path}")]
    ParentOfMissing {
        /// The path.
        path: PathBuf,
    },
    /// The metadata of a component could not be read.
    #[error("cannot inspect {path}: {error}")]
    Io {
        /// The component.
        path: PathBuf,
        /// The OS error.
        error: String,
    },
    /// The path is not absolute (the caller must join it to the working directory first).
    #[error("{path} is not absolute")]
    NotAbsolute {
        /// The path.
        path: PathBuf,
    },
}

/// Most symlinks followed while resolving one path (Linux's own bound).
pub const SYMLINK_HOPS_MAX: usize = 40;

/// Turns an absolute path into the real path it names: symlinks in every component followed,
/// `..` applied after the symlinks before it (POSIX semantics), and a missing tail (a file
/// about to be created) kept as written under its deepest existing parent.
pub trait PathResolver {
    /// Resolve `path`, which must be absolute.
    fn resolve(&self, path: &Path) -> Result<PathBuf, ResolveError>;

    /// Resolve `path`, taking the longest of `anchors` it starts with as already resolved.
    /// Anchors are real directories resolved when the policy was compiled (the wall roots and
    /// the working directory); the bodies pin them too, by opening files relative to a handle
    /// on the root, so both agree on what an anchor is. Saves one metadata call per component
    /// of the anchor.
    fn resolve_from(&self, path: &Path, anchors: &[PathBuf]) -> Result<PathBuf, ResolveError> {
        let _ = anchors;
        self.resolve(path)
    }
}

/// The resolver over the real filesystem. It reads metadata and link targets, never contents.
#[derive(Clone, Copy, Debug, Default)]
pub struct FsResolver;

impl PathResolver for FsResolver {
    fn resolve(&self, path: &Path) -> Result<PathBuf, ResolveError> {
        walk(path, Path::new("/"), path)
    }

    fn resolve_from(&self, path: &Path, anchors: &[PathBuf]) -> Result<PathBuf, ResolveError> {
        let nearest = anchors
            .iter()
            .filter_map(|anchor| strip_prefix(path, anchor).map(|rest| (anchor, rest)))
            .max_by_key(|(anchor, _)| anchor.as_os_str().len());
        match nearest {
            Some((anchor, rest)) => match plain(path, anchor, rest) {
                Some(resolved) => Ok(resolved),
                None => walk(path, anchor, rest),
            },
            None => self.resolve(path),
        }
    }
}

/// Set once `openat2` turned out to be missing (a kernel before 5.6, or a seccomp filter).
static OPENAT2_MISSING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Resolve `rest` below `start` with one system call when it can be answered that way: when it
/// is two or more plain names (no `.` or `..`), one `openat2` of the whole path with
/// `RESOLVE_NO_SYMLINKS` (which refuses a symlink in any component, the last included, where
/// it meets it) says all [`walk`] would learn from one probe per name. If it opens the path,
/// no component is a symlink and every one exists; if it says `ENOENT`, no symlink comes
/// before the first missing component, and [`walk`] keeps a missing tail as written. Either
/// way the resolved path is the path itself. Anything else (a symlink, a file in the middle, no
/// permission, no `openat2`) is `None`, and the walk answers, with its own errors.
fn plain(path: &Path, start: &Path, rest: &Path) -> Option<PathBuf> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    use std::sync::atomic::Ordering;
    if !path.is_absolute() || OPENAT2_MISSING.load(Ordering::Relaxed) {
        return None;
    }
    let mut names = 0;
    for component in rest.components() {
        match component {
            Component::Normal(_) => names += 1,
            _ => return None,
        }
    }
    // One name is one probe either way, and `readlink` is the cheaper call.
    if names < 2 {
        return None;
    }
    let mut resolved = PathBuf::with_capacity(start.as_os_str().len() + rest.as_os_str().len() + 1);
    resolved.push(start);
    for component in rest.components() {
        resolved.push(component);
    }
    let opened = rustix::fs::openat2(
        rustix::fs::CWD,
        &resolved,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS,
    );
    match opened {
        // The descriptor is closed at once: only the answer was wanted.
        Ok(_) | Err(Errno::NOENT) => Some(resolved),
        Err(Errno::NOSYS) | Err(Errno::PERM) => {
            OPENAT2_MISSING.store(true, Ordering::Relaxed);
            None
        }
        Err(_) => None,
    }
}

/// One step of a walk: a name to look up, or `..`.
enum Step<'a> {
    Name(Cow<'a, OsStr>),
    Parent,
}

impl Step<'_> {
    fn into_owned(self) -> Step<'static> {
        match self {
            Step::Name(name) => Step::Name(Cow::Owned(name.into_owned())),
            Step::Parent => Step::Parent,
        }
    }
}

/// What one metadata call says about a component.
enum Probe {
    /// A symlink, and its target.
    Link(PathBuf),
    /// Anything else that exists.
    Present,
    /// Nothing there (a file about to be created).
    Missing,
}

/// Resolve `rest` below the already-resolved directory `start`, in one buffer.
///
/// Components are looked up one at a time, one [`probe`] each, because a symlink anywhere in
/// the path must be seen: one call on the whole path would follow it silently, and even a
/// proof that the leaf exists says nothing about the directories above it. Once a component
/// is missing, the rest is kept as written without further calls. Link targets wait on a
/// stack, so a path without symlinks allocates nothing but the result.
fn walk(path: &Path, start: &Path, rest: &Path) -> Result<PathBuf, ResolveError> {
    if !path.is_absolute() {
        return Err(ResolveError::NotAbsolute {
            path: path.to_owned(),
        });
    }
    let mut resolved = PathBuf::with_capacity(start.as_os_str().len() + rest.as_os_str().len() + 1);
    resolved.push(start);
    let mut given = rest.components();
    // Steps from link targets, the next one last: they all come before what is left of `given`.
    let mut pending: Vec<Step<'_>> = Vec::new();
    let mut missing = false;
    let mut hops = 0;
    loop {
        let step = match pending.pop() {
            Some(step) => step,
            None => match given.next() {
                Some(component) => match step_of(component) {
                    Some(step) => step,
                    None => continue,
                },
                None => break,
            },
        };
        let name = match step {
            Step::Parent if missing => {
                return Err(ResolveError::ParentOfMissing {
                    path: path.to_owned(),
                });
            }
            Step::Parent => {
                resolved.pop();
                continue;
            }
            Step::Name(name) => name,
        };
        resolved.push(&name);
        if missing {
            continue;
        }
        match probe(&resolved)? {
            Probe::Present => {}
            Probe::Missing => missing = true,
            Probe::Link(target) => {
                hops += 1;
                if hops > SYMLINK_HOPS_MAX {
                    return Err(ResolveError::SymlinkLoop {
                        path: path.to_owned(),
                    });
                }
                resolved.pop();
                if target.is_absolute() {
                    resolved.clear();
                    resolved.push("/");
                }
                let steps = target.components().rev().filter_map(step_of);
                pending.extend(steps.map(Step::into_owned));
            }
        }
    }
    Ok(resolved)
}

/// The step a component makes; `None` for the root and `.`, which go nowhere.
fn step_of(component: Component<'_>) -> Option<Step<'_>> {
    match component {
        Component::Normal(name) => Some(Step::Name(Cow::Borrowed(name))),
        Component::ParentDir => Some(Step::Parent),
        Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
    }
}

/// The longest symlink target read with the probe itself; a longer one is read again.
const LINK_TARGET_BYTES_MAX: usize = 4096;

/// What `path` is, from its last component without following it: one `readlink`, which
/// refuses (`EINVAL`) anything that is not a symlink without the inode's attributes being
/// gathered and copied out as `lstat` does, so it is the cheaper call for the common case.
/// When it does answer, `lstat` confirms the file type (an AFS mount point answers readlink
/// too, and is a directory), so the result is exactly what `lstat` alone would say.
fn probe(path: &Path) -> Result<Probe, ResolveError> {
    let failed = |errno: rustix::io::Errno| ResolveError::Io {
        path: path.to_owned(),
        error: std::io::Error::from(errno).to_string(),
    };
    let mut buffer = [MaybeUninit::<u8>::uninit(); LINK_TARGET_BYTES_MAX];
    let target = match rustix::fs::readlinkat_raw(rustix::fs::CWD, path, &mut buffer[..]) {
        Ok((target, _)) => target,
        Err(Errno::INVAL) => return Ok(Probe::Present),
        Err(Errno::NOENT) => return Ok(Probe::Missing),
        Err(errno) => return Err(failed(errno)),
    };
    match rustix::fs::lstat(path) {
        Ok(stat) if FileType::from_raw_mode(stat.st_mode).is_symlink() => {}
        Ok(_) => return Ok(Probe::Present),
        Err(Errno::NOENT) => return Ok(Probe::Missing),
        Err(errno) => return Err(failed(errno)),
    }
    if target.len() < LINK_TARGET_BYTES_MAX {
        return Ok(Probe::Link(PathBuf::from(OsStr::from_bytes(target))));
    }
    std::fs::read_link(path)
        .map(Probe::Link)
        .map_err(|e| ResolveError::Io {
            path: path.to_owned(),
            error: e.to_string(),
        })
}

/// `path.strip_prefix(base)`, component by component as [`Path::strip_prefix`] compares.
///
/// When both paths are spelled canonically (absolute, one separator between components, no
/// `.` component, no trailing separator) comparing bytes gives the same answer without
/// parsing components; resolved paths and compiled roots always are. Anything else takes the
/// component comparison.
pub(crate) fn strip_prefix<'a>(path: &'a Path, base: &Path) -> Option<&'a Path> {
    strip_prefix_spelled(path, base, is_canonical(path) && is_canonical(base))
}

/// [`strip_prefix`] when the caller knows already whether both paths are canonical.
pub(crate) fn strip_prefix_spelled<'a>(
    path: &'a Path,
    base: &Path,
    canonical: bool,
) -> Option<&'a Path> {
    if !canonical {
        return path.strip_prefix(base).ok();
    }
    let (bytes, prefix) = (path.as_os_str().as_bytes(), base.as_os_str().as_bytes());
    let rest = bytes.strip_prefix(prefix)?;
    match rest {
        [] => Some(Path::new("")),
        [b'/', tail @ ..] => Some(Path::new(OsStr::from_bytes(tail))),
        _ if prefix == b"/" => Some(Path::new(OsStr::from_bytes(rest))),
        _ => None,
    }
}

/// Absolute, one `/` between components, no `.` component, no trailing `/` (except `/`).
pub(crate) fn is_canonical(path: &Path) -> bool {
    match path.as_os_str().as_bytes() {
        [b'/'] => true,
        [b'/', names @ ..] => names
            .split(|b| *b == b'/')
            .all(|name| !name.is_empty() && name != b"."),
        _ => false,
    }
}

/// Lexically clean an absolute path: drop `.`, apply `..` textually. Used only to match deny
/// globs against the path as written (the resolved path is matched too).
pub fn normalize_lexically(path: &Path) -> PathBuf {
    let mut out = PathBuf::with_capacity(path.as_os_str().len() + 1);
    out.push("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn resolves_symlinks_parents_and_missing_tails() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("real/sub")).unwrap();
        symlink(root.join("real"), root.join("link")).unwrap();
        symlink("sub", root.join("real/rel")).unwrap();
        symlink(root.join("loop"), root.join("loop")).unwrap();
        let r = FsResolver;
        assert_eq!(
            r.resolve(&root.join("link/sub")).unwrap(),
            root.join("real/sub")
        );
        assert_eq!(
            r.resolve(&root.join("link/rel/new.txt")).unwrap(),
            root.join("real/sub/new.txt")
        );
        // `..` after a symlink goes up from the target, as the kernel does.
        assert_eq!(
            r.resolve(&root.join("real/rel/..")).unwrap(),
            root.join("real")
        );
        assert_eq!(
            r.resolve(&root.join("missing/a/b")).unwrap(),
            root.join("missing/a/b")
        );
        assert!(matches!(
            r.resolve(&root.join("missing/../../etc")),
            Err(ResolveError::ParentOfMissing { .. })
        ));
        assert!(matches!(
            r.resolve(&root.join("loop/x")),
            Err(ResolveError::SymlinkLoop { .. })
        ));
        // From an anchor: the same answers, `..` out of the anchor included.
        let anchors = [root.join("real")];
        assert_eq!(
            r.resolve_from(&root.join("real/rel/x"), &anchors).unwrap(),
            root.join("real/sub/x")
        );
        assert_eq!(
            r.resolve_from(&root.join("real/../link/sub"), &anchors)
                .unwrap(),
            root.join("real/sub")
        );
        assert_eq!(
            r.resolve_from(&root.join("link/sub"), &anchors).unwrap(),
            root.join("real/sub")
        );
        assert!(matches!(
            r.resolve(Path::new("rel")),
            Err(ResolveError::NotAbsolute { .. })
        ));
    }

    /// The resolver as it was before it shared one buffer and one `lstat` per component:
    /// a queue of owned components and `std::fs::symlink_metadata`. Kept as the reference the
    /// faster walk must agree with.
    fn reference_walk(path: &Path, start: PathBuf, rest: &Path) -> Result<PathBuf, ResolveError> {
        use std::collections::VecDeque;
        use std::ffi::OsString;
        fn push_front(pending: &mut VecDeque<OsString>, path: &Path) {
            let parts: Vec<OsString> = path
                .components()
                .filter_map(|c| match c {
                    Component::Normal(n) => Some(n.to_owned()),
                    Component::ParentDir => Some(OsString::from("..")),
                    Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
                })
                .collect();
            for part in parts.into_iter().rev() {
                pending.push_front(part);
            }
        }
        if !path.is_absolute() {
            return Err(ResolveError::NotAbsolute {
                path: path.to_owned(),
            });
        }
        let mut pending = VecDeque::new();
        push_front(&mut pending, rest);
        let mut resolved = start;
        let mut missing = false;
        let mut hops = 0;
        while let Some(part) = pending.pop_front() {
            if part == ".." {
                if missing {
                    return Err(ResolveError::ParentOfMissing {
                        path: path.to_owned(),
                    });
                }
                resolved.pop();
                continue;
            }
            let candidate = resolved.join(&part);
            if missing {
                resolved = candidate;
                continue;
            }
            match std::fs::symlink_metadata(&candidate) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    hops += 1;
                    if hops > SYMLINK_HOPS_MAX {
                        return Err(ResolveError::SymlinkLoop {
                            path: path.to_owned(),
                        });
                    }
                    let target = std::fs::read_link(&candidate).map_err(|e| ResolveError::Io {
                        path: candidate.clone(),
                        error: e.to_string(),
                    })?;
                    if target.is_absolute() {
                        resolved = PathBuf::from("/");
                    }
                    push_front(&mut pending, &target);
                }
                Ok(_) => resolved = candidate,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    missing = true;
                    resolved = candidate;
                }
                Err(e) => {
                    return Err(ResolveError::Io {
                        path: candidate,
                        error: e.to_string(),
                    });
                }
            }
        }
        Ok(resolved)
    }

    fn reference_resolve_from(path: &Path, anchors: &[PathBuf]) -> Result<PathBuf, ResolveError> {
        let anchor = anchors
            .iter()
            .filter(|a| path.starts_with(a))
            .max_by_key(|a| a.as_os_str().len());
        match anchor.and_then(|a| path.strip_prefix(a).ok().map(|rest| (a, rest))) {
            Some((anchor, rest)) => reference_walk(path, anchor.clone(), rest),
            None => reference_walk(path, PathBuf::from("/"), path),
        }
    }

    /// Regression guard for the one-buffer walk: every path of up to three components over a
    /// tree of directories, files, and relative, absolute, chained, dangling, looping and
    /// `..`-bearing symlinks resolves exactly as the reference walk resolves it (the same path,
    /// or the same error), from `/` and from anchors.
    #[test]
    fn the_walk_agrees_with_the_reference_on_every_short_path() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("d/e")).unwrap();
        std::fs::write(root.join("d/f"), "f").unwrap();
        std::fs::write(root.join("f"), "f").unwrap();
        let links: &[(&str, PathBuf)] = &[
            ("l_abs", root.join("d")),
            ("l_rel", "d/e".into()),
            ("d/up", "..".into()),
            ("d/e/back", "../../d".into()),
            ("l_file", "d/f".into()),
            ("l_dangling", "missing_target".into()),
            ("l_dangling_abs", root.join("nowhere/x")),
            ("loop1", "loop2".into()),
            ("loop2", "loop1".into()),
            ("l_chain", "l_rel".into()),
            ("l_dot", "./d/./e/..".into()),
            ("l_root", "/".into()),
            // Near the longest target Linux takes (PATH_MAX), read whole by the probe.
            ("l_long", format!("{}d/e", "./".repeat(2000)).into()),
        ];
        for (at, target) in links {
            symlink(target, root.join(at)).unwrap();
        }
        let names = [
            "d",
            "e",
            "f",
            "up",
            "back",
            "l_abs",
            "l_rel",
            "l_file",
            "l_dangling",
            "l_dangling_abs",
            "loop1",
            "l_chain",
            "l_dot",
            "l_root",
            "..",
            ".",
            "missing",
        ];
        let anchors = [root.clone(), root.join("d"), root.join("d/e")];
        let mut paths = vec![root.clone()];
        for a in names {
            paths.push(root.join(a));
            for b in names {
                paths.push(root.join(a).join(b));
                for c in names {
                    paths.push(root.join(a).join(b).join(c));
                }
            }
        }
        // Trailing slashes and `.` are no different to the walk than to the reference.
        paths.push(PathBuf::from(format!("{}/d/e/", root.display())));
        paths.push(PathBuf::from(format!("{}/./d//./e", root.display())));
        let r = FsResolver;
        let mut errors = 0;
        for path in &paths {
            let expected = reference_walk(path, PathBuf::from("/"), path);
            assert_eq!(r.resolve(path), expected, "resolve {}", path.display());
            assert_eq!(
                r.resolve_from(path, &anchors),
                reference_resolve_from(path, &anchors),
                "resolve_from {}",
                path.display()
            );
            errors += usize::from(expected.is_err());
        }
        // The tree exercises the failures too, not only the successes.
        assert!(errors > 100, "{errors} of {} paths fail", paths.len());
    }

    /// The one-call answer is given only where it is the walk's answer too: plain names, no
    /// symlink on the way (existing or missing tails alike); anything else is left to the walk.
    #[test]
    fn one_openat2_answers_only_for_plain_paths_without_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("d/e")).unwrap();
        std::fs::write(root.join("d/e/f"), "f").unwrap();
        symlink(root.join("d"), root.join("link")).unwrap();
        symlink("f", root.join("d/e/g")).unwrap();
        let plain_of = |rest: &str| plain(&root.join(rest), &root, Path::new(rest));
        assert_eq!(plain_of("d/e/f"), Some(root.join("d/e/f")));
        assert_eq!(plain_of("d/e/new"), Some(root.join("d/e/new")));
        assert_eq!(plain_of("d/missing/x"), Some(root.join("d/missing/x")));
        for walked in ["link/e", "d/e/g", "d/e/f/x", "d/../d/e", "d"] {
            assert_eq!(plain_of(walked), None, "{walked}");
        }
    }

    /// A regular file in the middle of a path is an I/O error naming the component, as before.
    #[test]
    fn a_file_in_the_middle_is_unresolvable() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("f"), "f").unwrap();
        match FsResolver.resolve(&root.join("f/x/y")) {
            Err(ResolveError::Io { path, .. }) => assert_eq!(path, root.join("f/x")),
            other => panic!("{other:?}"),
        }
    }

    /// The byte comparison answers exactly as `Path::strip_prefix` does, for every pair of
    /// spellings, canonical or not.
    #[test]
    fn strip_prefix_agrees_with_path_strip_prefix() {
        let spellings = [
            "", "/", "//", "/.", "/..", "a", "a/b", "./a", "/a", "/a/", "/a//", "/a/.", "/a/..",
            "/ab", "/a.", "/.a", "/a/b", "/a//b", "/a/./b", "/a/b/", "/a/b/.", "/a/b/c", "/a/bc",
            "/a/../b", "/a/b/..", "/a/.b", "/a/..b",
        ];
        for path in spellings {
            for base in spellings {
                let (path, base) = (Path::new(path), Path::new(base));
                assert_eq!(
                    strip_prefix(path, base),
                    path.strip_prefix(base).ok(),
                    "{path:?} under {base:?}"
                );
            }
        }
    }
}
