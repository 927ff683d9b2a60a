//! Rewind plans: which record a rewind keeps (its cut), which actions it undoes and the steps
//! that put the workspace back, computed from the records alone. Live rewinds, recovery after
//! a crash and playback all plan with these, so a replayed rewind is the rewind that ran.

use std::collections::HashMap;

use aido_actions::snapshot::RewindTarget;
use aido_actions::{Before, Effect, Failure};
use aido_journal::Event;
use serde::{Deserialize, Serialize};

use crate::error::RewindError;

/// One step of a rewind: restore a snapshot, or redo (or undo) one journaled change.
/// Contents are named by blob hash; the bytes travel beside the steps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// Make the workspace equal to this snapshot.
    Restore {
        /// The snapshot id.
        snapshot: String,
    },
    /// Make `path` hold the blob.
    Write {
        /// Resolved path.
        path: String,
        /// blake3 of the contents.
        blob: String,
        /// The modification time it gets, when the journal kept it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mtime_ns: Option<i64>,
    },
    /// Remove `path` (file or directory) if it exists.
    Remove {
        /// Resolved path.
        path: String,
    },
    /// Move `from` to `to` if `from` exists.
    Move {
        /// Resolved path.
        from: String,
        /// Resolved path.
        to: String,
    },
    /// Create a directory (and its parents).
    Mkdir {
        /// Resolved path.
        path: String,
    },
    /// Remove a directory a change created, if it is empty. One that holds something the
    /// journal does not know of is left, with what it holds (a rewind never destroys data).
    RemoveDir {
        /// Resolved path.
        path: String,
    },
    /// Make a symbolic link at `path` pointing at `target` (what is at `path` goes first).
    Link {
        /// Resolved path.
        path: String,
        /// What it points at, as written.
        target: String,
    },
    /// Set the permission bits of what is at `path` (nothing there: nothing to do).
    Chmod {
        /// Resolved path.
        path: String,
        /// The bits (`0o7777` at most).
        mode: u32,
    },
    /// Make every path of a change set hold its `after` (`forward`, in order) or its
    /// `before` (newest first). Each path already holding it is left, so running it again
    /// after a crash finishes it.
    Changes {
        /// The change set's parts, by blake3 (hex), in order.
        parts: Vec<String>,
        /// Apply (true) or undo (false).
        forward: bool,
        /// Each path must hold one side or the other (a crashed apply being finished): one
        /// that holds neither stops it, and what it applied is put back. Rewinds replace
        /// whatever is there.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        checked: bool,
    },
}

/// What a rewind will do.
pub struct RewindPlan {
    /// The last record kept: the workspace becomes what it was just after it.
    pub cut: u64,
    /// The actions undone (their proposal seqs and primitives), oldest first.
    pub undone: Vec<(u64, &'static str)>,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// The snapshot it restores first, if any.
    pub snapshot: Option<String>,
    /// The branch number the abandoned records get.
    pub branch: u32,
}

/// The changes a record made (effects of outcomes, complete or partial).
fn effects_of(record: &aido_journal::Record) -> Vec<Effect> {
    match &record.event {
        Event::ActionCompleted { outcome, .. } => outcome.effects.clone(),
        Event::ActionFailed { effects, .. } => effects.clone(),
        _ => Vec::new(),
    }
}

/// The proposal an outcome record closes.
fn outcome_of(record: &aido_journal::Record) -> Option<u64> {
    match &record.event {
        Event::ActionCompleted { proposal, .. } | Event::ActionFailed { proposal, .. } => {
            Some(*proposal)
        }
        _ => None,
    }
}

fn invalid_target(proposal: u64, why: &str) -> Failure {
    RewindError::TargetInvalid {
        why: format!("{why}; seqs go from 1 to {}", proposal.saturating_sub(1)),
    }
    .into()
}

/// The newest cut retention made in these records: the last record it removed, and the
/// rewinds among the removed ones.
fn pruned(records: &[aido_journal::Record]) -> Option<(u64, u32)> {
    records.iter().rev().find_map(|r| match &r.event {
        Event::Pruned {
            through_seq,
            rewinds,
            ..
        } => Some((*through_seq, *rewinds)),
        _ => None,
    })
}

/// The last record a rewind keeps. Rewinding to an action's seq (the one its result carried)
/// keeps the action, like `git reset` to a commit: the cut is its outcome record. Any other
/// record is kept itself. `before_seq` undoes its action too: the cut is the record before it.
pub fn rewind_cut(
    records: &[aido_journal::Record],
    target: RewindTarget,
    proposal: u64,
) -> Result<u64, Failure> {
    let named = match target {
        RewindTarget::Keep(n) | RewindTarget::Undo(n) => n,
    };
    if named == 0 || named >= proposal {
        return Err(invalid_target(
            proposal,
            &format!("{named} is not an earlier record of this session"),
        ));
    }
    if let Some((through, _)) = pruned(records)
        && named <= through
    {
        return Err(RewindError::TargetPruned {
            seq: named,
            through,
        }
        .into());
    }
    let gone = aido_journal::timeline::abandoned(records);
    if gone.contains_key(&named) {
        return Err(RewindError::TargetAbandoned { seq: named }.into());
    }
    let record = records.iter().find(|r| r.seq == named);
    let is_action = matches!(record.map(|r| &r.event), Some(Event::ActionProposed { .. }));
    // A refused action has no outcome: its proposal is its last record.
    let refused = matches!(
        record.map(|r| &r.event),
        Some(Event::ActionProposed { verdict, .. }) if verdict.is_deny()
    );
    match target {
        RewindTarget::Undo(_) if !is_action => Err(invalid_target(
            proposal,
            &format!("before_seq {named} does not name an action's proposal"),
        )),
        // The record before it is on a branch an earlier rewind abandoned: the action is that
        // rewind, and the state before it lies on the branch, not on the live timeline.
        RewindTarget::Undo(n) if gone.contains_key(&(n - 1)) => {
            Err(RewindError::UndoOfRewind { seq: n }.into())
        }
        RewindTarget::Undo(n) => Ok(n - 1),
        RewindTarget::Keep(n) if !is_action || refused => Ok(n),
        RewindTarget::Keep(n) => records
            .iter()
            .filter(|r| r.seq < proposal && !gone.contains_key(&r.seq))
            .find(|r| outcome_of(r) == Some(n))
            .map(|r| r.seq)
            .ok_or_else(|| RewindError::TargetRunning { seq: n }.into()),
    }
}

/// Plan a rewind that keeps the records up to `cut`, for the rewind proposed at `proposal`:
/// restore the newest live snapshot at or before `cut` and redo the live changes after it;
/// with no snapshot, undo the live changes after `cut`, newest first, from what they kept.
pub fn rewind_plan(
    records: &[aido_journal::Record],
    cut: u64,
    proposal: u64,
) -> Result<RewindPlan, Failure> {
    if cut >= proposal {
        return Err(invalid_target(
            proposal,
            &format!("{cut} is not before the rewind"),
        ));
    }
    let gone = aido_journal::timeline::abandoned(records);
    let live: Vec<&aido_journal::Record> = records
        .iter()
        .filter(|r| !gone.contains_key(&r.seq) && r.seq < proposal)
        .collect();
    // Every live action whose outcome (or, still unanswered, proposal) is after the cut is
    // undone. The rewind itself is not listed.
    let outcomes: HashMap<u64, u64> = live
        .iter()
        .filter_map(|r| outcome_of(r).map(|p| (p, r.seq)))
        .collect();
    let undone = live
        .iter()
        .filter_map(|r| match &r.event {
            Event::ActionProposed { action, .. } => Some((r.seq, action.primitive())),
            _ => None,
        })
        .filter(|(seq, _)| *seq > cut || outcomes.get(seq).is_some_and(|o| *o > cut))
        .collect();
    // Rewinds retention removed still count, so branch numbers never repeat.
    let branch = records
        .iter()
        .filter(|r| matches!(r.event, Event::Rewound { .. }))
        .count() as u32
        + pruned(records).map_or(0, |(_, rewinds)| rewinds)
        + 1;
    let snapshot = live.iter().rev().find_map(|r| match &r.event {
        Event::SnapshotTaken { snapshot, .. } if r.seq <= cut => Some((r.seq, snapshot.clone())),
        _ => None,
    });
    let mut steps = Vec::new();
    match &snapshot {
        Some((taken, id)) => {
            steps.push(Step::Restore {
                snapshot: id.clone(),
            });
            for r in live.iter().filter(|r| r.seq > *taken && r.seq <= cut) {
                for effect in effects_of(r) {
                    steps.extend(redo(&effect));
                }
            }
        }
        None => {
            // Undoing past a snapshot restore: the restore put the workspace back to the state
            // at that snapshot's seq, so the restore and every change between that seq and it
            // cancel out; undoing goes on from before the snapshot.
            let taken_at: HashMap<&str, u64> = live
                .iter()
                .filter_map(|r| match &r.event {
                    Event::SnapshotTaken { snapshot, .. } => Some((snapshot.as_str(), r.seq)),
                    _ => None,
                })
                .collect();
            let mut skip_after: Option<u64> = None;
            for r in live.iter().rev().filter(|r| r.seq > cut) {
                if skip_after.is_some_and(|taken| r.seq > taken) {
                    continue;
                }
                skip_after = None;
                for effect in effects_of(r).iter().rev() {
                    if let Effect::SnapshotRestored { snapshot, .. } = effect
                        && let Some(&taken) = taken_at.get(snapshot.as_str())
                        && taken > cut
                    {
                        skip_after = Some(taken);
                        break;
                    }
                    steps.extend(undo(effect, r.seq)?);
                }
            }
        }
    }
    Ok(RewindPlan {
        cut,
        undone,
        steps,
        snapshot: snapshot.map(|(_, id)| id),
        branch,
    })
}

fn redo(effect: &Effect) -> Vec<Step> {
    match effect {
        Effect::FileWritten {
            path,
            blob,
            mtime_ns,
            ..
        } => vec![Step::Write {
            path: path.clone(),
            blob: blob.clone(),
            mtime_ns: *mtime_ns,
        }],
        Effect::Moved { from, to } => vec![Step::Move {
            from: from.clone(),
            to: to.clone(),
        }],
        Effect::DirCreated { path } => vec![Step::Mkdir { path: path.clone() }],
        Effect::DirRemoved { path, .. } => vec![Step::RemoveDir { path: path.clone() }],
        Effect::FileRemoved { path, .. } => vec![Step::Remove { path: path.clone() }],
        Effect::ModeChanged { path, mode, .. } => vec![Step::Chmod {
            path: path.clone(),
            mode: *mode,
        }],
        Effect::LinkRemoved { path, .. } => vec![Step::Remove { path: path.clone() }],
        Effect::LinkCreated { path, target } => vec![Step::Link {
            path: path.clone(),
            target: target.clone(),
        }],
        Effect::SnapshotRestored { snapshot, .. } => vec![Step::Restore {
            snapshot: snapshot.clone(),
        }],
        Effect::Changes { parts, .. } => vec![Step::Changes {
            parts: parts.clone(),
            forward: true,
            checked: false,
        }],
        // An earlier rewind on the live timeline: the records it abandoned are not on the
        // timeline being replayed, so the state before it already equals the state at its
        // target, and there is nothing to do.
        Effect::RewoundTo { .. } => Vec::new(),
    }
}

/// The steps that undo `effect`, recorded at `seq`.
fn undo(effect: &Effect, seq: u64) -> Result<Vec<Step>, Failure> {
    let not_kept = |path: &str| -> Failure {
        RewindError::NotKept {
            seq,
            path: path.to_owned(),
        }
        .into()
    };
    Ok(match effect {
        Effect::FileWritten {
            path,
            before,
            before_mtime_ns,
            ..
        } => match before {
            Before::Kept(b) => vec![Step::Write {
                path: path.clone(),
                blob: b.clone(),
                mtime_ns: *before_mtime_ns,
            }],
            Before::Absent => vec![Step::Remove { path: path.clone() }],
            Before::NotKept => return Err(not_kept(path)),
        },
        Effect::FileRemoved {
            path,
            before,
            mode: None,
        } => match before {
            Before::Kept(b) => vec![Step::Write {
                path: path.clone(),
                blob: b.clone(),
                mtime_ns: None,
            }],
            Before::Absent => vec![Step::Remove { path: path.clone() }],
            Before::NotKept => return Err(not_kept(path)),
        },
        Effect::FileRemoved {
            path,
            before,
            mode: Some(mode),
        } => match before {
            Before::Kept(b) => vec![
                Step::Write {
                    path: path.clone(),
                    blob: b.clone(),
                    mtime_ns: None,
                },
                Step::Chmod {
                    path: path.clone(),
                    mode: *mode,
                },
            ],
            Before::Absent | Before::NotKept => return Err(not_kept(path)),
        },
        Effect::ModeChanged { path, before, .. } => vec![Step::Chmod {
            path: path.clone(),
            mode: *before,
        }],
        Effect::LinkCreated { path, .. } => vec![Step::Remove { path: path.clone() }],
        Effect::LinkRemoved { path, target } => vec![Step::Link {
            path: path.clone(),
            target: target.clone(),
        }],
        Effect::Moved { from, to } => vec![Step::Move {
            from: to.clone(),
            to: from.clone(),
        }],
        Effect::DirCreated { path } => vec![Step::RemoveDir { path: path.clone() }],
        Effect::Changes { parts, .. } => vec![Step::Changes {
            parts: parts.clone(),
            forward: false,
            checked: false,
        }],
        Effect::DirRemoved { path, mode } => {
            let made = Step::Mkdir { path: path.clone() };
            match mode {
                Some(mode) => vec![
                    made,
                    Step::Chmod {
                        path: path.clone(),
                        mode: *mode,
                    },
                ],
                None => vec![made],
            }
        }
        // Walking the live timeline backwards, the state before an earlier rewind is the
        // state at its target (what it abandoned is not on this timeline): nothing to undo.
        Effect::RewoundTo { .. } => Vec::new(),
        Effect::SnapshotRestored { .. } => {
            return Err(RewindError::NeedsSnapshot { seq }.into());
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use aido_journal::{Record, SessionId};

    fn record(seq: u64, event: Event) -> Record {
        Record {
            v: aido_journal::FORMAT_VERSION,
            session: SessionId::from_bytes([1; 16]),
            seq,
            time_ms: seq,
            prev: String::new(),
            event,
            hash: String::new(),
        }
    }

    /// After retention cut a session through seq 5, a rewind to a removed record is refused
    /// with its code; one to a kept action, or to just before the first kept one, is planned.
    #[test]
    fn a_rewind_to_a_pruned_record_is_refused() {
        let action: aido_actions::Action =
            serde_json::from_value(serde_json::json!({"type": "read_file", "path": "/w/a"}))
                .unwrap();
        let records = vec![
            record(
                6,
                Event::ActionProposed {
                    action,
                    verdict: aido_actions::Verdict::Allow,
                    parent: None,
                },
            ),
            record(
                7,
                Event::ActionCompleted {
                    proposal: 6,
                    outcome: aido_actions::Outcome::default(),
                    duration_ms: 1,
                },
            ),
            record(
                8,
                Event::Pruned {
                    through_seq: 5,
                    hash: "0".repeat(64),
                    rewinds: 2,
                    reason: "older_than".into(),
                },
            ),
        ];
        let refused = rewind_cut(&records, RewindTarget::Keep(3), 9).unwrap_err();
        assert_eq!(refused.code, "rewind_target_pruned");
        let refused = rewind_cut(&records, RewindTarget::Undo(5), 9).unwrap_err();
        assert_eq!(refused.code, "rewind_target_pruned");
        assert_eq!(rewind_cut(&records, RewindTarget::Keep(6), 9).unwrap(), 7);
        assert_eq!(rewind_cut(&records, RewindTarget::Undo(6), 9).unwrap(), 5);
        let plan = rewind_plan(&records, 5, 9).unwrap();
        assert_eq!(plan.branch, 3, "the pruned rewinds still count");
    }
}
