//! Holding the tree a session's journal derives against the live workspace
//! (`aido replay verify SESSION --tree`).
//!
//! Two questions, both answered from the records alone and the disk as it is now:
//!
//! 1. **Does every path the journal touched hold what the journal says it holds?** The live
//!    timeline's effects give each touched path its expected end state (a path only a
//!    rewind's abandoned records touched should hold what it held before them): absent, a
//!    file (its contents by blake3, and for a command's change set its bits and modification
//!    time to the nanosecond), a directory, a link and its target. Each is compared with the
//!    disk.
//! 2. **Did anything else change?** The write roots are walked; every entry whose inode
//!    changed (`ctime`, which no program can set back) since the session began and which the
//!    journal does not account for is named: a change made outside aido, or one that landed
//!    without its record. A directory counts as accounted for when the journal touched a path
//!    in it (its entries changed with them); a removal outside aido shows as its directory.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use aido_actions::changes::Node;
use aido_actions::{Before, Effect};
use aido_journal::{Event, Journal, Record};
use serde::Serialize;

/// Entries the walk of the write roots looks at before it stops (and says so).
pub const WALK_ENTRIES_MAX: u64 = 2_000_000;

/// What the journal says a path holds now; `None` fields are what the journal does not know.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Expect {
    /// Nothing.
    Absent,
    /// A regular file.
    File {
        /// Its contents' blake3.
        blob: Option<String>,
        /// Its permission bits.
        mode: Option<u32>,
        /// Its modification time.
        mtime_ns: Option<i64>,
    },
    /// A directory.
    Dir {
        /// Its permission bits.
        mode: Option<u32>,
    },
    /// A symbolic link.
    Link {
        /// What it points at.
        target: String,
    },
    /// Something, of a kind the journal did not record (a moved entry).
    Present,
}

impl Expect {
    fn of(node: &Node) -> Self {
        match node {
            Node::Absent => Expect::Absent,
            Node::File {
                blob,
                mode,
                mtime_ns,
                ..
            } => Expect::File {
                blob: Some(blob.clone()),
                mode: Some(*mode),
                mtime_ns: Some(*mtime_ns),
            },
            Node::Dir { mode, .. } => Expect::Dir { mode: Some(*mode) },
            Node::Link { target } => Expect::Link {
                target: target.clone(),
            },
        }
    }

    fn file(blob: &str) -> Self {
        Expect::File {
            blob: Some(blob.to_owned()),
            mode: None,
            mtime_ns: None,
        }
    }
}

/// One path the tree check names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TreeFinding {
    /// The path.
    pub path: String,
    /// `tree_mismatch` (a touched path holds something else) or `unaccounted` (changed since
    /// the session began, and not by it).
    pub kind: &'static str,
    /// What the journal says and what is there.
    pub detail: String,
}

/// The result of a tree check.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TreeReport {
    /// Paths the journal touched, each compared with the disk.
    pub checked: u64,
    /// Entries of the write roots walked.
    pub walked: u64,
    /// The walk stopped at [`WALK_ENTRIES_MAX`].
    pub truncated: bool,
    /// What was found.
    pub findings: Vec<TreeFinding>,
}

impl TreeReport {
    /// True when the journal accounts for the tree exactly.
    pub fn intact(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Every path the session touched, with what it should hold now: the live timeline's effects
/// give each path it touched its end state; a path only a rewind's abandoned records touched
/// should hold what it held before the first of them touched it (the rewind gave it back), so
/// it is compared with the disk too, and a rewind that left something behind is found.
pub fn expected(journal: &Journal, records: &[Record]) -> Result<BTreeMap<String, Expect>, String> {
    let gone = aido_journal::timeline::abandoned(records);
    let store = journal.blob_store();
    let mut live = Derived::default();
    let mut abandoned = Derived::default();
    for r in records {
        let into = if gone.contains_key(&r.seq) {
            &mut abandoned
        } else {
            &mut live
        };
        into.record(&store, r)?;
    }
    let mut now = live.now;
    for (path, was) in abandoned.first {
        now.entry(path).or_insert(was);
    }
    Ok(now)
}

/// A derivation in progress: each touched path's state now, and before it was first touched.
#[derive(Default)]
struct Derived {
    now: BTreeMap<String, Expect>,
    first: BTreeMap<String, Expect>,
    at_snapshot: BTreeMap<String, BTreeMap<String, Expect>>,
}

impl Derived {
    /// Fold one record's effects in.
    #[allow(clippy::too_many_lines)]
    fn record(&mut self, store: &aido_journal::BlobStore, r: &Record) -> Result<(), String> {
        let Derived {
            now,
            first,
            at_snapshot,
        } = self;
        if let Event::SnapshotTaken { snapshot, .. } = &r.event {
            at_snapshot.insert(snapshot.clone(), now.clone());
        }
        for effect in crate::derive::effects(r) {
            match effect {
                Effect::FileWritten {
                    path,
                    blob,
                    before,
                    mtime_ns,
                    before_mtime_ns,
                } => {
                    let was = match before {
                        Before::Kept(b) => Expect::File {
                            blob: Some(b.clone()),
                            mode: None,
                            mtime_ns: *before_mtime_ns,
                        },
                        Before::Absent => Expect::Absent,
                        Before::NotKept => Expect::Present,
                    };
                    let after = Expect::File {
                        blob: Some(blob.clone()),
                        mode: None,
                        mtime_ns: *mtime_ns,
                    };
                    set(now, first, path, was, after);
                }
                Effect::FileRemoved { path, before, .. } => {
                    let was = before.kept().map_or(Expect::Present, Expect::file);
                    set(now, first, path, was, Expect::Absent);
                }
                Effect::DirCreated { path } => {
                    set(now, first, path, Expect::Absent, Expect::Dir { mode: None })
                }
                Effect::DirRemoved { path, mode } => set(
                    now,
                    first,
                    path,
                    Expect::Dir { mode: *mode },
                    Expect::Absent,
                ),
                Effect::LinkCreated { path, target } => set(
                    now,
                    first,
                    path,
                    Expect::Absent,
                    Expect::Link {
                        target: target.clone(),
                    },
                ),
                Effect::LinkRemoved { path, target } => set(
                    now,
                    first,
                    path,
                    Expect::Link {
                        target: target.clone(),
                    },
                    Expect::Absent,
                ),
                Effect::ModeChanged { path, mode, .. } => {
                    let after = match now.get(path).cloned() {
                        Some(Expect::File { blob, mtime_ns, .. }) => Expect::File {
                            blob,
                            mode: Some(*mode),
                            mtime_ns,
                        },
                        Some(Expect::Dir { .. }) => Expect::Dir { mode: Some(*mode) },
                        _ => Expect::Present,
                    };
                    set(now, first, path, Expect::Present, after);
                }
                Effect::Moved { from, to } => {
                    let moved = now.get(from).cloned().unwrap_or(Expect::Present);
                    set(now, first, from, Expect::Present, Expect::Absent);
                    set(now, first, to, Expect::Absent, moved);
                }
                Effect::SnapshotRestored { snapshot, .. } => {
                    let saved = at_snapshot.get(snapshot).cloned().unwrap_or_default();
                    let touched: Vec<String> = now.keys().cloned().collect();
                    for path in touched {
                        let back = saved
                            .get(&path)
                            .or_else(|| first.get(&path))
                            .cloned()
                            .unwrap_or(Expect::Present);
                        now.insert(path, back);
                    }
                }
                // The records it abandoned are skipped: the timeline is already as it was.
                Effect::RewoundTo { .. } => {}
                Effect::Changes { parts, .. } => {
                    store.visit_change_set(parts, |entry| {
                        set(
                            now,
                            first,
                            &entry.path,
                            Expect::of(&entry.before),
                            Expect::of(&entry.after),
                        );
                        true
                    })?;
                }
            }
        }
        Ok(())
    }
}

fn set(
    now: &mut BTreeMap<String, Expect>,
    first: &mut BTreeMap<String, Expect>,
    path: &str,
    before: Expect,
    after: Expect,
) {
    first.entry(path.to_owned()).or_insert(before);
    now.insert(path.to_owned(), after);
}

/// Compare the expected tree with the disk, then walk `roots` (skipping `skip`) for entries
/// changed since `since_ms` that the journal does not account for: neither this session
/// (`expected`) nor another session's records since then (`others`: the paths they touched,
/// as [`expected`] finds them; a change another aido session made is in the journal too).
pub fn check(
    expected: &BTreeMap<String, Expect>,
    others: &BTreeSet<String>,
    roots: &[PathBuf],
    skip: &[PathBuf],
    since_ms: u64,
) -> TreeReport {
    let mut report = TreeReport::default();
    for (path, expect) in expected {
        report.checked += 1;
        if let Some(detail) = differs(Path::new(path), expect) {
            report.findings.push(TreeFinding {
                path: path.clone(),
                kind: "tree_mismatch",
                detail,
            });
        }
    }
    // A directory holding a touched path changed with it.
    let mut accounted: HashSet<&Path> = HashSet::new();
    for path in expected.keys().chain(others.iter()) {
        let mut at = Path::new(path.as_str());
        accounted.insert(at);
        while let Some(parent) = at.parent() {
            if !accounted.insert(parent) {
                break;
            }
            at = parent;
        }
    }
    let since_ns = i128::from(since_ms) * 1_000_000;
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    for root in roots {
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if skip.iter().any(|s| path.starts_with(s)) || !seen.insert(path.clone()) {
                    continue;
                }
                report.walked += 1;
                if report.walked > WALK_ENTRIES_MAX {
                    report.truncated = true;
                    return report;
                }
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                if meta.is_dir() {
                    stack.push(path.clone());
                }
                let changed =
                    i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec());
                if changed < since_ns || accounted.contains(path.as_path()) {
                    continue;
                }
                let what = if meta.is_dir() {
                    "a directory whose entries or bits changed since the session began"
                } else {
                    "changed since the session began"
                };
                report.findings.push(TreeFinding {
                    path: path.display().to_string(),
                    kind: "unaccounted",
                    detail: format!("{what}, and the journal does not account for it"),
                });
            }
        }
    }
    report
}

/// How the disk at `path` differs from `expect`, if it does.
fn differs(path: &Path, expect: &Expect) -> Option<String> {
    let meta = std::fs::symlink_metadata(path);
    let kind = |meta: &std::fs::Metadata| {
        if meta.is_dir() {
            "a directory"
        } else if meta.is_file() {
            "a file"
        } else if meta.file_type().is_symlink() {
            "a link"
        } else {
            "something else"
        }
    };
    match (expect, meta) {
        (Expect::Absent, Err(_)) => None,
        (Expect::Absent, Ok(meta)) => {
            Some(format!("the journal says absent; {} is there", kind(&meta)))
        }
        (_, Err(_)) => Some(format!(
            "the journal says {}; nothing is there",
            said(expect)
        )),
        (Expect::Present, Ok(_)) => None,
        (
            Expect::File {
                blob,
                mode,
                mtime_ns,
            },
            Ok(meta),
        ) => {
            if !meta.is_file() {
                return Some(format!("the journal says a file; {} is there", kind(&meta)));
            }
            if let Some(mode) = mode
                && meta.mode() & 0o7777 != *mode
            {
                return Some(format!(
                    "mode {:04o}, the journal says {mode:04o}",
                    meta.mode() & 0o7777
                ));
            }
            if let Some(t) = mtime_ns {
                let disk = meta.mtime() * 1_000_000_000 + meta.mtime_nsec();
                if disk != *t {
                    return Some(format!("modified at {disk} ns, the journal says {t} ns"));
                }
            }
            if let Some(blob) = blob {
                let hashed = std::fs::File::open(path)
                    .and_then(|f| aido_journal::objects::hash_file(&f))
                    .map(|(h, _)| h);
                match hashed {
                    Ok(h) if &h == blob => {}
                    Ok(h) => return Some(format!("holds {h}, the journal says {blob}")),
                    Err(e) => return Some(format!("cannot be read: {e}")),
                }
            }
            None
        }
        (Expect::Dir { mode }, Ok(meta)) => {
            if !meta.is_dir() {
                return Some(format!(
                    "the journal says a directory; {} is there",
                    kind(&meta)
                ));
            }
            match mode {
                Some(mode) if meta.mode() & 0o7777 != *mode => Some(format!(
                    "mode {:04o}, the journal says {mode:04o}",
                    meta.mode() & 0o7777
                )),
                _ => None,
            }
        }
        (Expect::Link { target }, Ok(meta)) => {
            if !meta.file_type().is_symlink() {
                return Some(format!("the journal says a link; {} is there", kind(&meta)));
            }
            match std::fs::read_link(path) {
                Ok(now) if now.as_os_str() == target.as_str() => None,
                Ok(now) => Some(format!(
                    "points at {}, the journal says {target}",
                    now.display()
                )),
                Err(e) => Some(format!("cannot be read: {e}")),
            }
        }
    }
}

fn said(expect: &Expect) -> &'static str {
    match expect {
        Expect::Absent => "absent",
        Expect::File { .. } => "a file",
        Expect::Dir { .. } => "a directory",
        Expect::Link { .. } => "a link",
        Expect::Present => "something",
    }
}
