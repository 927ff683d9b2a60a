//! Re-deriving a session's files from its records alone. Every change the journal recorded
//! (`file_written`, `moved`, `file_removed`, restores and rewinds) is applied in seq order to
//! a model of the workspace and to a scratch directory, and each step is checked: the blob the
//! record names exists and hashes to its name, the file written in the scratch dir hashes to
//! it, and the `before` a write recorded matches what the model held (a mismatch there means
//! the file was changed outside aido, which is worth knowing but is not damage).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aido_actions::Effect;
use aido_journal::{Event, Journal, Record};
use serde::Serialize;

/// What the model knows of one path: the blob it holds, or that it is absent.
pub type State = BTreeMap<String, Option<String>>;

/// One thing re-derivation found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The record.
    pub seq: u64,
    /// The path.
    pub path: String,
    /// `blob_missing`, `blob_mismatch`, `scratch_mismatch` (damage) or `changed_outside_aido`
    /// (a note).
    pub kind: &'static str,
    /// Details.
    pub detail: String,
}

impl Finding {
    /// True for findings that mean the journal is damaged.
    pub fn is_damage(&self) -> bool {
        self.kind != "changed_outside_aido"
    }
}

/// The result of a re-derivation.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Derived {
    /// Changes applied.
    pub steps: u64,
    /// The model after each record that changed it.
    #[serde(skip)]
    pub states: Vec<(u64, State)>,
    /// What was found.
    pub findings: Vec<Finding>,
}

impl Derived {
    /// The model just after `seq`.
    pub fn state_at(&self, seq: u64) -> State {
        self.states
            .iter()
            .rev()
            .find(|(s, _)| *s <= seq)
            .map(|(_, st)| st.clone())
            .unwrap_or_default()
    }

    /// True when nothing damaged was found.
    pub fn intact(&self) -> bool {
        !self.findings.iter().any(Finding::is_damage)
    }
}

fn scratch_path(scratch: &Path, path: &str) -> PathBuf {
    scratch.join(path.trim_start_matches('/'))
}

/// The effects a record carries.
pub fn effects(record: &Record) -> &[Effect] {
    match &record.event {
        Event::ActionCompleted { outcome, .. } => &outcome.effects,
        Event::ActionFailed { effects, .. } => effects,
        _ => &[],
    }
}

/// Re-derive `records` (one session, all of it) into `scratch`.
#[allow(clippy::too_many_lines)]
pub fn derive(journal: &Journal, records: &[Record], scratch: &Path) -> std::io::Result<Derived> {
    let mut out = Derived::default();
    let mut state = State::new();
    let mut snapshots: BTreeMap<String, u64> = BTreeMap::new();
    for r in records {
        if let Event::SnapshotTaken { snapshot, .. } = &r.event {
            snapshots.insert(snapshot.clone(), r.seq);
        }
        let changes = effects(r);
        if changes.is_empty() {
            continue;
        }
        for effect in changes {
            out.steps += 1;
            match effect {
                Effect::FileWritten {
                    path, blob, before, ..
                } => {
                    if let (Some(b), Some(Some(known))) = (before.kept(), state.get(path))
                        && b != known
                    {
                        out.findings.push(Finding {
                            seq: r.seq,
                            path: path.clone(),
                            kind: "changed_outside_aido",
                            detail: format!("the write found {b}, the journal last left {known}"),
                        });
                    }
                    match journal.blob(blob).ok().flatten() {
                        None => out.findings.push(Finding {
                            seq: r.seq,
                            path: path.clone(),
                            kind: "blob_missing",
                            detail: blob.clone(),
                        }),
                        Some(bytes) => {
                            if blake3::hash(&bytes).to_hex().as_str() != blob {
                                out.findings.push(Finding {
                                    seq: r.seq,
                                    path: path.clone(),
                                    kind: "blob_mismatch",
                                    detail: blob.clone(),
                                });
                            }
                            let file = scratch_path(scratch, path);
                            if let Some(parent) = file.parent() {
                                std::fs::create_dir_all(parent)?;
                            }
                            std::fs::write(&file, &bytes)?;
                            let again = blake3::hash(&std::fs::read(&file)?).to_hex().to_string();
                            if &again != blob {
                                out.findings.push(Finding {
                                    seq: r.seq,
                                    path: path.clone(),
                                    kind: "scratch_mismatch",
                                    detail: again,
                                });
                            }
                        }
                    }
                    state.insert(path.clone(), Some(blob.clone()));
                }
                Effect::Moved { from, to } => {
                    let held = state.insert(from.clone(), None).flatten();
                    state.insert(to.clone(), held);
                    let (a, b) = (scratch_path(scratch, from), scratch_path(scratch, to));
                    if a.exists() {
                        if let Some(parent) = b.parent() {
                            std::fs::create_dir_all(parent)?;
                        }
                        std::fs::rename(a, b)?;
                    }
                }
                Effect::FileRemoved { path, .. } => {
                    state.insert(path.clone(), None);
                    let _ = std::fs::remove_file(scratch_path(scratch, path));
                }
                Effect::DirCreated { path } => {
                    std::fs::create_dir_all(scratch_path(scratch, path))?;
                }
                Effect::DirRemoved { path, .. } => {
                    let _ = std::fs::remove_dir(scratch_path(scratch, path));
                }
                // The model holds file contents; a mode changes none, and a link holds none.
                Effect::ModeChanged { .. } => {}
                Effect::LinkRemoved { path, .. } | Effect::LinkCreated { path, .. } => {
                    state.insert(path.clone(), None);
                    let _ = std::fs::remove_file(scratch_path(scratch, path));
                }
                Effect::SnapshotRestored { taken_at, .. } => {
                    state = out.state_at(*taken_at);
                    rewrite(journal, &state, scratch)?;
                }
                Effect::RewoundTo { seq } => {
                    state = out.state_at(*seq);
                    rewrite(journal, &state, scratch)?;
                }
                Effect::Changes { parts, .. } => {
                    out.steps -= 1;
                    change_set(journal, r.seq, parts, &mut state, scratch, &mut out)?;
                }
            }
        }
        out.states.push((r.seq, state.clone()));
    }
    let _ = snapshots;
    Ok(out)
}

/// Apply a change set's entries to the model and the scratch dir, checking every blob it names
/// (new contents and before-images: a rewind needs both) and that the before it recorded is
/// what the model held.
fn change_set(
    journal: &Journal,
    seq: u64,
    parts: &[String],
    state: &mut State,
    scratch: &Path,
    out: &mut Derived,
) -> std::io::Result<()> {
    use aido_actions::changes::Node;
    let store = journal.blob_store();
    let mut failed: Option<std::io::Error> = None;
    let mut findings = Vec::new();
    let mut steps = 0u64;
    let visited = store.visit_change_set(parts, |entry| {
        steps += 1;
        let finding = |kind, detail: String| Finding {
            seq,
            path: entry.path.clone(),
            kind,
            detail,
        };
        if let Node::File { blob, .. } = &entry.before {
            if !store.contains(blob) {
                findings.push(finding(
                    "blob_missing",
                    format!("{blob} (what it held before)"),
                ));
            }
            if let Some(Some(known)) = state.get(&entry.path)
                && known != blob
            {
                findings.push(finding(
                    "changed_outside_aido",
                    format!("the command found {blob}, the journal last left {known}"),
                ));
            }
        }
        let file = scratch_path(scratch, &entry.path);
        let done = (|| -> std::io::Result<()> {
            match &entry.after {
                Node::File { blob, .. } => {
                    if let Some(parent) = file.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    if file.is_dir() {
                        std::fs::remove_dir_all(&file)?;
                    }
                    let target = std::fs::File::create(&file)?;
                    match store.copy_to(blob, &target) {
                        Ok(Some(_)) => {
                            let again =
                                aido_journal::objects::hash_file(&std::fs::File::open(&file)?)?.0;
                            if &again != blob {
                                findings.push(finding(
                                    "blob_mismatch",
                                    format!("{blob} holds {again}"),
                                ));
                            }
                        }
                        Ok(None) | Err(_) => findings.push(finding("blob_missing", blob.clone())),
                    }
                    state.insert(entry.path.clone(), Some(blob.clone()));
                }
                Node::Dir { .. } => {
                    if file.is_file() || file.is_symlink() {
                        std::fs::remove_file(&file)?;
                    }
                    std::fs::create_dir_all(&file)?;
                }
                Node::Link { .. } | Node::Absent => {
                    match std::fs::symlink_metadata(&file) {
                        Ok(meta) if meta.is_dir() => {
                            let _ = std::fs::remove_dir(&file);
                        }
                        Ok(_) => std::fs::remove_file(&file)?,
                        Err(_) => {}
                    }
                    state.insert(entry.path.clone(), None);
                }
            }
            Ok(())
        })();
        match done {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        }
    });
    out.steps += steps;
    out.findings.append(&mut findings);
    if let Err(why) = visited {
        out.findings.push(Finding {
            seq,
            path: String::new(),
            kind: "blob_missing",
            detail: why,
        });
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Make the scratch dir hold exactly the model.
fn rewrite(journal: &Journal, state: &State, scratch: &Path) -> std::io::Result<()> {
    if scratch.exists() {
        std::fs::remove_dir_all(scratch)?;
    }
    std::fs::create_dir_all(scratch)?;
    for (path, blob) in state {
        if let Some(bytes) = blob.as_ref().and_then(|b| journal.blob(b).ok().flatten()) {
            let file = scratch_path(scratch, path);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(file, bytes)?;
        }
    }
    Ok(())
}

/// One file's change between two seqs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileChange {
    /// The path.
    pub path: String,
    /// created, modified or deleted.
    pub kind: &'static str,
    /// Blob before.
    pub before: Option<String>,
    /// Blob after.
    pub after: Option<String>,
    /// A unified diff, when both sides are text.
    pub diff: Option<String>,
}

/// The file changes between the state after `from` and the state after `to`.
pub fn diff(journal: &Journal, derived: &Derived, from: u64, to: u64) -> Vec<FileChange> {
    let (a, b) = (derived.state_at(from), derived.state_at(to));
    let text = |h: &Option<String>| -> Option<String> {
        h.as_ref()
            .and_then(|h| journal.blob(h).ok().flatten())
            .and_then(|bytes| String::from_utf8(bytes).ok())
    };
    let mut out = Vec::new();
    let paths: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for path in paths {
        let before = a.get(path).cloned().flatten();
        let after = b.get(path).cloned().flatten();
        if before == after {
            continue;
        }
        let kind = match (&before, &after) {
            (None, Some(_)) => "created",
            (Some(_), None) => "deleted",
            _ => "modified",
        };
        let diff = match (
            text(&before).or(before.is_none().then(String::new)),
            text(&after).or(after.is_none().then(String::new)),
        ) {
            (Some(x), Some(y)) => Some(diffy::create_patch(&x, &y).to_string()),
            _ => None,
        };
        out.push(FileChange {
            path: path.clone(),
            kind,
            before,
            after,
            diff,
        });
    }
    out
}
