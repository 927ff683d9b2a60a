//! The walk: ignore's parallel walker, every entry judged, the first `files_max` paths kept.

use std::collections::BinaryHeap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use ignore::overrides::OverrideBuilder;
use ignore::types::TypesBuilder;
use ignore::{ParallelVisitor, ParallelVisitorBuilder, WalkBuilder, WalkState};

use crate::error::SearchError;
use crate::judge::{EntryKind, Judge, Verdict};
use crate::request::{Limits, Scope};

/// The files to search, in sorted order, and what the walk left out.
pub(crate) struct Walked {
    pub(crate) files: Vec<PathBuf>,
    pub(crate) files_max_reached: bool,
    pub(crate) timed_out: bool,
    pub(crate) denied_files: u64,
    pub(crate) denied_dirs: u64,
    pub(crate) symlinks: u64,
    pub(crate) unreadable: u64,
}

#[derive(Default)]
struct Tally {
    /// A max-heap, so the largest kept path is dropped first: what is kept does not depend
    /// on the order in which the threads found the files.
    kept: BinaryHeap<SortKey>,
    files_max_reached: bool,
    denied_files: u64,
    denied_dirs: u64,
    symlinks: u64,
    unreadable: u64,
}

/// What a walker thread does with each file the judge allowed, as soon as it finds it.
pub(crate) type Found<'s> = Box<dyn FnMut(&Path) + Send + 's>;

/// Builds the walker for `scope`; the root itself is judged first. Each walker thread gets
/// its own `Found` from `found` (so the search runs in the walker threads, as in rg).
pub(crate) fn walk<'f>(
    scope: &Scope,
    limits: &Limits,
    judge: &dyn Judge,
    deadline: Instant,
    found: &(dyn Fn() -> Found<'f> + Sync),
) -> Result<Walked, SearchError> {
    let root = &scope.root;
    let metadata =
        std::fs::symlink_metadata(root).map_err(|source| SearchError::RootUnreadable {
            root: root.clone(),
            source,
        })?;
    let root_kind = if metadata.is_dir() {
        EntryKind::Dir
    } else {
        EntryKind::File
    };
    if judge.judge(root, root_kind) == Verdict::Deny {
        return Err(SearchError::RootDenied { root: root.clone() });
    }
    let mut builder = WalkBuilder::new(root);
    builder
        .hidden(!scope.hidden)
        .ignore(scope.ignore_files)
        .git_ignore(scope.ignore_files)
        .git_exclude(scope.ignore_files)
        .parents(scope.ignore_files)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .threads(limits.threads.max(1));
    if !scope.globs.is_empty() || !scope.globs_exclude.is_empty() {
        let mut overrides = OverrideBuilder::new(root);
        let excluded = scope
            .globs_exclude
            .iter()
            .map(|glob| (glob, format!("!{glob}")));
        for (glob, line) in scope
            .globs
            .iter()
            .map(|glob| (glob, glob.clone()))
            .chain(excluded)
        {
            overrides
                .add(&line)
                .map_err(|error| SearchError::GlobInvalid {
                    glob: glob.clone(),
                    message: error.to_string(),
                })?;
        }
        let built = overrides
            .build()
            .map_err(|error| SearchError::GlobInvalid {
                glob: String::new(),
                message: error.to_string(),
            })?;
        builder.overrides(built);
    }
    if !scope.types.is_empty() || !scope.types_exclude.is_empty() {
        let mut types = TypesBuilder::new();
        types.add_defaults();
        for name in &scope.types {
            types.select(name);
        }
        for name in &scope.types_exclude {
            types.negate(name);
        }
        let built = types.build().map_err(|error| match error {
            ignore::Error::UnrecognizedFileType(name) => SearchError::TypeUnknown { name },
            other => SearchError::GlobInvalid {
                glob: String::new(),
                message: other.to_string(),
            },
        })?;
        builder.types(built);
    }

    let tally = Mutex::new(Tally::default());
    let timed_out = AtomicBool::new(false);
    let mut visitors = Visitors {
        shared: &tally,
        judge,
        found,
        deadline,
        timed_out: &timed_out,
        files_max: usize::try_from(limits.files_max).unwrap_or(usize::MAX),
    };
    builder.build_parallel().visit(&mut visitors);
    let tally = match tally.into_inner() {
        Ok(tally) => tally,
        Err(poisoned) => poisoned.into_inner(),
    };
    Ok(Walked {
        files: tally
            .kept
            .into_sorted_vec()
            .into_iter()
            .map(|key| key.0)
            .collect(),
        files_max_reached: tally.files_max_reached,
        timed_out: timed_out.load(Ordering::Relaxed),
        denied_files: tally.denied_files,
        denied_dirs: tally.denied_dirs,
        symlinks: tally.symlinks,
        unreadable: tally.unreadable,
    })
}

/// Makes one visitor per walker thread.
struct Visitors<'s, 'f> {
    shared: &'s Mutex<Tally>,
    judge: &'s dyn Judge,
    found: &'s (dyn Fn() -> Found<'f> + Sync),
    deadline: Instant,
    timed_out: &'s AtomicBool,
    files_max: usize,
}

impl<'s, 'f: 's> ParallelVisitorBuilder<'s> for Visitors<'s, 'f> {
    fn build(&mut self) -> Box<dyn ParallelVisitor + 's> {
        Box::new(Visitor {
            local: Tally::default(),
            shared: self.shared,
            judge: self.judge,
            found: (self.found)(),
            deadline: self.deadline,
            timed_out: self.timed_out,
            files_max: self.files_max,
        })
    }
}

/// One walker thread's tally, merged into the shared one when the thread is done, so the
/// judge and the bookkeeping run without a lock.
struct Visitor<'s> {
    local: Tally,
    shared: &'s Mutex<Tally>,
    judge: &'s dyn Judge,
    found: Found<'s>,
    deadline: Instant,
    timed_out: &'s AtomicBool,
    files_max: usize,
}

impl ParallelVisitor for Visitor<'_> {
    fn visit(&mut self, entry: Result<ignore::DirEntry, ignore::Error>) -> WalkState {
        if Instant::now() >= self.deadline {
            self.timed_out.store(true, Ordering::Relaxed);
            return WalkState::Quit;
        }
        let tally = &mut self.local;
        let entry = match entry {
            Ok(entry) => entry,
            Err(_) => {
                tally.unreadable += 1;
                return WalkState::Continue;
            }
        };
        let Some(file_type) = entry.file_type() else {
            // Only stdin has no file type; it is never walked.
            return WalkState::Continue;
        };
        let path = entry.path();
        if file_type.is_symlink() {
            tally.symlinks += 1;
            return WalkState::Continue;
        }
        if file_type.is_dir() {
            // The root was judged before the walk.
            if entry.depth() > 0 && self.judge.judge(path, EntryKind::Dir) == Verdict::Deny {
                tally.denied_dirs += 1;
                return WalkState::Skip;
            }
            return WalkState::Continue;
        }
        if !file_type.is_file() {
            tally.unreadable += 1;
            return WalkState::Continue;
        }
        if entry.depth() > 0 && self.judge.judge(path, EntryKind::File) == Verdict::Deny {
            tally.denied_files += 1;
            return WalkState::Continue;
        }
        keep(tally, path, self.files_max);
        (self.found)(path);
        WalkState::Continue
    }
}

impl Drop for Visitor<'_> {
    fn drop(&mut self) {
        let local = std::mem::take(&mut self.local);
        let mut shared = match self.shared.lock() {
            Ok(shared) => shared,
            Err(poisoned) => poisoned.into_inner(),
        };
        shared.files_max_reached |= local.files_max_reached;
        shared.denied_files += local.denied_files;
        shared.denied_dirs += local.denied_dirs;
        shared.symlinks += local.symlinks;
        shared.unreadable += local.unreadable;
        // The first `files_max` paths overall are among each thread's first `files_max`.
        for key in local.kept {
            keep_key(&mut shared, key, self.files_max);
        }
    }
}

fn keep(tally: &mut Tally, path: &Path, files_max: usize) {
    keep_key(tally, SortKey(path.to_path_buf()), files_max);
}

fn keep_key(tally: &mut Tally, key: SortKey, files_max: usize) {
    if tally.kept.len() < files_max {
        tally.kept.push(key);
        return;
    }
    tally.files_max_reached = true;
    if tally.kept.peek().is_some_and(|largest| key < *largest) {
        tally.kept.pop();
        tally.kept.push(key);
    }
}

/// A path ordered component by component, as `Path`'s own order, but by one pass over the
/// bytes with `/` below every other byte (`Path::cmp` parses components on every compare).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SortKey(pub(crate) PathBuf);

impl Ord for SortKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        path_order(&self.0, &other.0)
    }
}

/// The order of [`SortKey`], on borrowed paths: the first differing byte decides, with `/`
/// ranked below every other byte; a prefix comes first.
pub(crate) fn path_order(mine: &Path, theirs: &Path) -> std::cmp::Ordering {
    let (mine, theirs) = (mine.as_os_str().as_bytes(), theirs.as_os_str().as_bytes());
    let shared = mine.len().min(theirs.len());
    // Paths in one walk share long prefixes: skip them eight bytes at a time.
    let mut at = 0;
    while at + 8 <= shared && mine[at..at + 8] == theirs[at..at + 8] {
        at += 8;
    }
    while at < shared && mine[at] == theirs[at] {
        at += 1;
    }
    if at == shared {
        return mine.len().cmp(&theirs.len());
    }
    let rank = |byte: u8| {
        if byte == b'/' {
            0u16
        } else {
            u16::from(byte) + 1
        }
    };
    rank(mine[at]).cmp(&rank(theirs[at]))
}

impl PartialOrd for SortKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::time::Duration;

    fn tree(files: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for file in files {
            let path = dir.path().join(file);
            fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            fs::write(&path, "x\n").expect("write");
        }
        dir
    }

    fn names(walked: &Walked, root: &Path) -> Vec<String> {
        let relative = |path: &PathBuf| {
            path.strip_prefix(root)
                .expect("under root")
                .display()
                .to_string()
        };
        walked.files.iter().map(relative).collect()
    }

    fn none<'s>() -> Found<'s> {
        Box::new(|_: &Path| {})
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn files_max_keeps_the_first_paths_in_order_whatever_the_walk_order() {
        let dir = tree(&["d/z", "a", "c", "b/x", "b/a", "e"]);
        let limits = Limits {
            files_max: 3,
            ..Limits::default()
        };
        for _ in 0..5 {
            let walked = walk(
                &Scope::new(dir.path()),
                &limits,
                &crate::AllowAll,
                later(),
                &none,
            )
            .expect("walks");
            assert_eq!(names(&walked, dir.path()), ["a", "b/a", "b/x"]);
            assert!(walked.files_max_reached);
        }
    }

    #[test]
    fn the_sort_key_orders_as_path_does() {
        let mut paths = [
            "a.b",
            "a/b",
            "a",
            "a-b/c",
            "a/b/c",
            "ab",
            "a/ba",
            "b",
            "a/.x",
            "é",
            "z/a",
            "long/common/prefix/x",
            "long/common/prefix.x",
            "long/common/prefix/x/y",
            "long/common/prefi",
            "long/common/prefix/x/ab/cd/ef/gh/ij",
            "long/common/prefix/x/ab/cd/ef/gh/ij/k",
        ];
        paths.sort_by_key(|path| SortKey(PathBuf::from(path)));
        let mut by_path = paths;
        by_path.sort_by(|a, b| Path::new(a).cmp(Path::new(b)));
        assert_eq!(paths, by_path);
        assert_eq!(paths[..3], ["a", "a/.x", "a/b"]);
    }

    #[test]
    fn gitignore_hidden_and_denied_dirs() {
        let dir = tree(&[
            ".hidden/f",
            ".h",
            "ignored/f",
            "kept/f",
            "walled/f",
            "walled/deeper/g",
        ]);
        fs::write(dir.path().join(".gitignore"), "ignored/\n").expect("write");
        let walled = dir.path().join("walled");
        let judge = |path: &Path, _kind: EntryKind| {
            if path.starts_with(&walled) {
                Verdict::Deny
            } else {
                Verdict::Allow
            }
        };
        let walked = walk(
            &Scope::new(dir.path()),
            &Limits::default(),
            &judge,
            later(),
            &none,
        )
        .expect("walks");
        assert_eq!(names(&walked, dir.path()), ["kept/f"]);
        assert_eq!(
            walked.denied_dirs, 1,
            "the walled directory is denied once, never entered"
        );
        assert_eq!(walked.denied_files, 0);

        let mut scope = Scope::new(dir.path());
        scope.hidden = true;
        scope.ignore_files = false;
        let walked = walk(&scope, &Limits::default(), &judge, later(), &none).expect("walks");
        assert_eq!(
            names(&walked, dir.path()),
            [".gitignore", ".h", ".hidden/f", "ignored/f", "kept/f"]
        );
    }

    #[test]
    fn a_denied_root_is_an_error() {
        let dir = tree(&["a"]);
        let deny = |_: &Path, _: EntryKind| Verdict::Deny;
        let error = walk(
            &Scope::new(dir.path()),
            &Limits::default(),
            &deny,
            later(),
            &none,
        )
        .err();
        assert_eq!(error.map(|e| e.code()), Some("root_denied"));
        let error = walk(
            &Scope::new(dir.path().join("missing")),
            &Limits::default(),
            &crate::AllowAll,
            later(),
            &none,
        )
        .err();
        assert_eq!(error.map(|e| e.code()), Some("root_unreadable"));
    }

    #[test]
    fn a_past_deadline_stops_the_walk() {
        let dir = tree(&["a", "b"]);
        let walked = walk(
            &Scope::new(dir.path()),
            &Limits::default(),
            &crate::AllowAll,
            Instant::now(),
            &none,
        )
        .expect("walks");
        assert!(walked.timed_out);
        assert!(walked.files.is_empty());
    }

    #[test]
    fn unknown_types_and_bad_globs_are_coded() {
        let dir = tree(&["a"]);
        let mut scope = Scope::new(dir.path());
        scope.types = vec!["no-such-type".into()];
        let error = walk(&scope, &Limits::default(), &crate::AllowAll, later(), &none).err();
        assert_eq!(error.map(|e| e.code()), Some("type_unknown"));
        let mut scope = Scope::new(dir.path());
        scope.globs = vec!["a[".into()];
        let error = walk(&scope, &Limits::default(), &crate::AllowAll, later(), &none).err();
        assert_eq!(error.map(|e| e.code()), Some("glob_invalid"));
    }
}
