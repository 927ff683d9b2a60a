//! What another policy would have said about every action of a session. The recorded actions
//! are judged again by the other policy's engine (paths are resolved against the filesystem as
//! it is now, since the journal keeps the verdict, not the resolution).

use std::collections::HashMap;

use aido_actions::{AccessKind, Body, Effect, Verdict};
use aido_journal::{Event, Record};
use aido_policy::{FsResolver, PolicyEngine, SessionContext};
use serde::Serialize;

/// An action the other policy would have treated differently.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Changed {
    /// The proposal's seq.
    pub seq: u64,
    /// The primitive.
    pub primitive: &'static str,
    /// What the recorded policy said.
    pub recorded: Verdict,
    /// What the other policy says.
    pub other: Verdict,
}

/// Every proposal whose verdict under `engine` is a denial or a confirmation where the record
/// says otherwise (or a different denial). A command's file changes are judged too: the other
/// policy's walls and deny globs see each change a process-body action applied (recorded as
/// its effects), and the first it refuses makes the action a denial, as
/// `command_changes_refused` would have.
pub fn what_if(records: &[Record], engine: &PolicyEngine, cwd: &std::path::Path) -> Vec<Changed> {
    let ctx = SessionContext::new(cwd.to_owned());
    // What each action changed, by its proposal's seq.
    let mut effects: HashMap<u64, &[Effect]> = HashMap::new();
    for r in records {
        match &r.event {
            Event::ActionCompleted {
                proposal, outcome, ..
            } => {
                effects.insert(*proposal, &outcome.effects);
            }
            Event::ActionFailed {
                proposal,
                effects: made,
                ..
            } => {
                effects.insert(*proposal, made);
            }
            _ => {}
        }
    }
    records
        .iter()
        .filter_map(|r| match &r.event {
            Event::ActionProposed {
                action, verdict, ..
            } => {
                let mut other = engine.evaluate(action, &ctx, &FsResolver);
                if other == Verdict::Allow && action.body() == Body::Process {
                    let made = effects.get(&r.seq).copied().unwrap_or_default();
                    if let Some(refused) = judge_changes(made, engine, &ctx) {
                        other = refused;
                    }
                }
                let differs = match (&other, verdict) {
                    (Verdict::Allow, _) => false,
                    (o, v) => o != v,
                };
                differs.then(|| Changed {
                    seq: r.seq,
                    primitive: action.primitive(),
                    recorded: verdict.clone(),
                    other,
                })
            }
            _ => None,
        })
        .collect()
}

/// The first of a command's applied changes `engine` refuses, as a denial naming the path
/// (its leaf is `changes[PATH]`).
fn judge_changes(made: &[Effect], engine: &PolicyEngine, ctx: &SessionContext) -> Option<Verdict> {
    let check = |path: &str, kind| engine.check_path(path, kind, ctx, &FsResolver).map(drop);
    for effect in made {
        let (path, judged) = match effect {
            Effect::FileWritten { path, .. }
            | Effect::DirCreated { path }
            | Effect::ModeChanged { path, .. } => (path, check(path, AccessKind::Write)),
            Effect::FileRemoved { path, .. }
            | Effect::DirRemoved { path, .. }
            | Effect::LinkRemoved { path, .. } => (path, check(path, AccessKind::Delete)),
            Effect::LinkCreated { path, target } => (
                path,
                check(path, AccessKind::Write).and_then(|()| {
                    engine.check_link_target(std::path::Path::new(path), target, ctx, &FsResolver)
                }),
            ),
            Effect::Moved { .. } | Effect::SnapshotRestored { .. } | Effect::RewoundTo { .. } => {
                continue;
            }
        };
        if let Err(refusal) = judged {
            return Some(Verdict::Deny {
                gate: refusal.gate(),
                code: refusal.code(),
                reason: format!("the command's change to {path}: {refusal}"),
                leaf: Some(format!("changes[{path}]")),
            });
        }
    }
    None
}
