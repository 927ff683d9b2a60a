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
pub fn what_if(
    records: &[Record],
    engine: &PolicyEngine,
    cwd: &std::path::Path,
    store: &aido_journal::BlobStore,
) -> Vec<Changed> {
    // Relative paths resolve where the session was when each action was proposed.
    let mut ctx = SessionContext::new(cwd.to_owned());
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
            Event::WorkdirChanged { cwd, .. } => {
                ctx.cwd = std::path::PathBuf::from(cwd);
                None
            }
            Event::ActionProposed {
                action, verdict, ..
            } => {
                let mut other = engine.evaluate(action, &ctx, &FsResolver);
                if other == Verdict::Allow && action.body() == Body::Process {
                    let made = effects.get(&r.seq).copied().unwrap_or_default();
                    if let Some(refused) = judge_changes(made, engine, &ctx, store) {
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
fn judge_changes(
    made: &[Effect],
    engine: &PolicyEngine,
    ctx: &SessionContext,
    store: &aido_journal::BlobStore,
) -> Option<Verdict> {
    let check = |path: &str, kind| engine.check_path(path, kind, ctx, &FsResolver).map(drop);
    let deny = |path: &str, refusal: aido_policy::PathCheckError| Verdict::Deny {
        gate: refusal.gate(),
        code: refusal.code(),
        reason: format!("the command's change to {path}: {refusal}"),
        leaf: Some(format!("changes[{path}]")),
    };
    for effect in made {
        let (path, judged) = match effect {
            // A change set: every entry, part by part, as its own change.
            Effect::Changes { parts, .. } => {
                let mut refused = None;
                let visited = store.visit_change_set(parts, |entry| {
                    let judged = match &entry.after {
                        aido_actions::changes::Node::Absent => {
                            check(&entry.path, AccessKind::Delete)
                        }
                        aido_actions::changes::Node::Link { target } => {
                            check(&entry.path, AccessKind::Write).and_then(|()| {
                                engine.check_link_target(
                                    std::path::Path::new(&entry.path),
                                    target,
                                    ctx,
                                    &FsResolver,
                                )
                            })
                        }
                        _ => check(&entry.path, AccessKind::Write),
                    };
                    match judged {
                        Ok(()) => true,
                        Err(refusal) => {
                            refused = Some(deny(&entry.path, refusal));
                            false
                        }
                    }
                });
                if let Err(why) = visited {
                    return Some(Verdict::Deny {
                        gate: aido_actions::verdict::Gate::PathWalls,
                        code: aido_actions::DenyCode::PathUnresolvable,
                        reason: format!("the command's change set cannot be read: {why}"),
                        leaf: Some("changes".into()),
                    });
                }
                match refused {
                    Some(verdict) => return Some(verdict),
                    None => continue,
                }
            }
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
            return Some(deny(path, refusal));
        }
    }
    None
}
