//! A change set applied as part of an action (a command's file changes, an artifact save):
//! staged whole into the journal's blob store, named in a synced recovery marker, then
//! applied (see [`crate::fs::changeset`]). Nothing reaches the workspace before every content
//! and before-image is durable and the marker says what is being done, so a crash at any
//! point leaves a state the journal names: before the marker, nothing happened; after it, the
//! next start finishes the apply from the journal's blobs and journals it.

use aido_actions::{Effect, Failure};
use aido_journal::SessionId;
use aido_policy::SessionContext;
use aido_walk::Step;
use serde_json::{Value, json};

use crate::fs::FsMsg;
use crate::fs::changeset::CommandChange;
use crate::recovery::Recovery;
use crate::shared::Shared;

/// What an applied change set gives its action: the changes as a result shows them (the first
/// few by name, counts of all) and the effect that names it (none when nothing changed).
pub(crate) struct Applied {
    /// `{"applied", "total", "counts", "truncated"}`.
    pub(crate) shown: Value,
    /// The change set's effect.
    pub(crate) effects: Vec<Effect>,
}

/// Stage, mark and apply `changes` for the action proposed at `proposal` of `session`.
pub(crate) async fn apply(
    shared: &Shared,
    session: SessionId,
    proposal: u64,
    ctx: &SessionContext,
    changes: Vec<CommandChange>,
    file_bytes_max: u64,
) -> Result<Applied, Failure> {
    let nothing = || Applied {
        shown: json!({"applied": [], "total": 0, "counts": {}, "truncated": false}),
        effects: Vec::new(),
    };
    if changes.is_empty() {
        return Ok(nothing());
    }
    let timeout = shared.action_timeout();
    let session_ctx = ctx.clone();
    let staged = shared
        .bodies
        .fs
        .ask(timeout, |reply| FsMsg::Stage {
            changes,
            file_bytes_max,
            session: session_ctx,
            reply,
        })
        .await?;
    if staged.is_empty() {
        return Ok(nothing());
    }
    let effect = staged.effect();
    let marker = Recovery::begin(
        shared,
        session,
        proposal,
        &[Step::Changes {
            parts: staged.parts.clone(),
            forward: true,
            checked: true,
        }],
        None,
        vec![effect.clone()],
    )?;
    let session_ctx = ctx.clone();
    let committed = shared
        .bodies
        .fs
        .ask(timeout, |reply| FsMsg::Commit {
            staged: Box::new(staged),
            session: session_ctx,
            reply,
        })
        .await;
    match committed {
        Ok((applied, _staged)) => {
            marker.finish();
            Ok(Applied {
                shown: applied.shown,
                effects: vec![effect],
            })
        }
        Err(failure) => {
            // Rolled back: the workspace is as it was, and no crash may finish it later.
            if failure.code == "command_changes_rolled_back" {
                Recovery::clear(shared, session, proposal);
            }
            Err(failure)
        }
    }
}
