//! What another policy would have said about every action of a session. The recorded actions
//! are judged again by the other policy's engine (paths are resolved against the filesystem as
//! it is now, since the journal keeps the verdict, not the resolution).

use aido_actions::Verdict;
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
/// says otherwise (or a different denial).
pub fn what_if(records: &[Record], engine: &PolicyEngine, cwd: &std::path::Path) -> Vec<Changed> {
    let ctx = SessionContext::new(cwd.to_owned());
    records
        .iter()
        .filter_map(|r| match &r.event {
            Event::ActionProposed {
                action, verdict, ..
            } => {
                let other = engine.evaluate(action, &ctx, &FsResolver);
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
