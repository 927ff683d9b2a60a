use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

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
        self.walk(path, PathBuf::from("/"), path)
    }

    fn resolve_from(&self, path: &Path, anchors: &[PathBuf]) -> Result<PathBuf, ResolveError> {
        let anchor = anchors
            .iter()
            .filter(|a| path.starts_with(a))
            .max_by_key(|a| a.as_os_str().len());
        match anchor.and_then(|a| path.strip_prefix(a).ok().map(|rest| (a, rest))) {
            Some((anchor, rest)) => self.walk(path, anchor.clone(), rest),
            None => self.resolve(path),
        }
    }
}

impl FsResolver {
    /// Resolve `rest` below the already-resolved directory `start`.
    fn walk(&self, path: &Path, start: PathBuf, rest: &Path) -> Result<PathBuf, ResolveError> {
        if !path.is_absolute() {
            return Err(ResolveError::NotAbsolute {
                path: path.to_owned(),
            });
        }
        let mut pending: VecDeque<OsString> = VecDeque::new();
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
}

/// Put the components of `path` (minus the root, minus `.`) at the front of `pending`.
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

/// Lexically clean an absolute path: drop `.`, apply `..` textually. Used only to match deny
/// globs against the path as written (the resolved path is matched too).
pub fn normalize_lexically(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
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
}
