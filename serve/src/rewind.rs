//! A person rewinds a session from a frontend (`aido watch`, Mission Control): what a rewind
//! would undo, then the rewind itself, behind the operator's token.
//!
//! - `GET /mc/api/sessions/ID/rewind?to_seq=N` (or `before_seq=N`): the preview. The cut and
//!   the plan come from the records alone, by the planner the rewind primitive runs
//!   ([`aido_actors::rewind_cut`], [`aido_actors::rewind_plan`]), so what is shown is what
//!   would be done if nothing were written in between: the actions undone, the paths the steps
//!   touch, whether a snapshot is restored, the branch the undone records become.
//! - `POST /mc/api/sessions/ID/rewind` with `{"to_seq": N}` or `{"before_seq": N}` (and
//!   `"by"`, who asks, for the journal): the session is resumed in this runtime (a
//!   `session_resumed` record names who), the `rewind` primitive runs in it as any action
//!   does (policy, journal, the walls), and the resumed handle is left without ending the
//!   session, whose agent may go on. The answer is `/actions`'s: `ok`, `seq`, `text`, or
//!   `code` and `message`.
//!
//! A target the planner refuses is a 409 with the rewind's own code (`rewind_target_invalid`,
//! `rewind_target_abandoned`, ...), a body that is not a target a 400 `mc_rewind_invalid`.

use aido_actions::Action;
use aido_actions::snapshot::Rewind;
use aido_actors::Hooks;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Shared;
use crate::mc::{Refusal, blocking, coded, head_of, internal, session_of};

/// Most paths a preview lists.
pub const PREVIEW_PATHS_MAX: usize = 200;
/// Longest `by` kept, in characters.
pub const BY_CHARS_MAX: usize = 120;

/// Where a rewind goes, as a frontend names it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Target {
    #[serde(default)]
    to_seq: Option<u64>,
    #[serde(default)]
    before_seq: Option<u64>,
    /// Who asks (a frontend's own words, e.g. `aido watch (uid 1000)`).
    #[serde(default)]
    by: Option<String>,
}

impl Target {
    fn rewind(&self) -> Result<Rewind, Refusal> {
        let rewind = Rewind {
            to_seq: self.to_seq,
            before_seq: self.before_seq,
        };
        match rewind.target() {
            Some(_) => Ok(rewind),
            None => Err(Refusal {
                status: StatusCode::BAD_REQUEST,
                code: "mc_rewind_invalid",
                message:
                    "name exactly one of to_seq (keep that action) and before_seq (undo it too)"
                        .into(),
            }),
        }
    }
}

/// The paths a plan's steps touch, each once, in order.
fn step_paths(steps: &[impl serde::Serialize]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for step in steps {
        let value = serde_json::to_value(step).unwrap_or(Value::Null);
        for key in ["path", "from", "to"] {
            if let Some(path) = value.get(key).and_then(Value::as_str)
                && !out.iter().any(|p| p == path)
            {
                out.push(path.to_owned());
            }
        }
        if out.len() >= PREVIEW_PATHS_MAX {
            out.truncate(PREVIEW_PATHS_MAX);
            break;
        }
    }
    out
}

pub(crate) async fn preview(
    State(shared): State<Shared>,
    UrlPath(id): UrlPath<String>,
    Query(target): Query<Target>,
) -> Response {
    let session = match session_of(&id) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let rewind = match target.rewind() {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    let journal = shared.feed.journal().clone();
    let planned = blocking(move || {
        let head = head_of(&journal, session)?;
        let records = journal.all_records(session).map_err(internal)?;
        // The rewind would be proposed after everything there is now.
        let proposal = head + 1;
        let Some(goal) = rewind.target() else {
            return Err(internal("a checked target has one seq"));
        };
        let planned = aido_actors::rewind_cut(&records, goal, proposal)
            .and_then(|cut| aido_actors::rewind_plan(&records, cut, proposal));
        Ok(planned.map(|plan| {
            let undone: Vec<Value> = plan
                .undone
                .iter()
                .map(|(seq, primitive)| json!({"seq": seq, "primitive": primitive}))
                .collect();
            json!({
                "session": session.to_string(),
                "head": head,
                "cut": plan.cut,
                "undone": undone,
                "paths": step_paths(&plan.steps),
                "steps": plan.steps.len(),
                "snapshot": plan.snapshot,
                "method": if plan.snapshot.is_some() { "snapshot" } else { "undo" },
                "branch": plan.branch,
            })
        }))
    })
    .await;
    match planned {
        Ok(Ok(v)) => axum::Json(v).into_response(),
        Ok(Err(failure)) => coded(StatusCode::CONFLICT, &failure.code, failure.message),
        Err(r) => r.into_response(),
    }
}

pub(crate) async fn run(
    State(shared): State<Shared>,
    UrlPath(id): UrlPath<String>,
    body: axum::body::Bytes,
) -> Response {
    let session = match session_of(&id) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let target: Target = match serde_json::from_slice(&body) {
        Ok(t) => t,
        Err(e) => {
            return coded(
                StatusCode::BAD_REQUEST,
                "mc_rewind_invalid",
                format!("the body is {{\"to_seq\": N}} or {{\"before_seq\": N}}: {e}"),
            );
        }
    };
    let rewind = match target.rewind() {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    let journal = shared.feed.journal().clone();
    if let Err(r) = blocking(move || head_of(&journal, session)).await {
        return r.into_response();
    }
    let by: String = target
        .by
        .as_deref()
        .unwrap_or("a person")
        .chars()
        .filter(|c| !c.is_control())
        .take(BY_CHARS_MAX)
        .collect();
    let client = format!("{by}, through aido serve with the operator's token");
    let resumed = match shared.runtime.resume_session(session, client).await {
        Ok(s) => s,
        Err(e) => {
            let refusal = Refusal {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                code: e.code(),
                message: e.to_string(),
            };
            return refusal.into_response();
        }
    };
    let hooks = Hooks {
        cancel: shared.cancel.child_token(),
        transport: Some("tcp"),
        ..Hooks::default()
    };
    let result = resumed.run(Action::Rewind(rewind), hooks).await;
    resumed.leave("the rewind a person asked for finished");
    tracing::info!(%session, "a session was rewound through aido serve");
    axum::Json(crate::api::answer(&resumed, result)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_names_exactly_one_seq() {
        let target = |to_seq, before_seq| Target {
            to_seq,
            before_seq,
            by: None,
        };
        assert!(target(Some(3), None).rewind().is_ok());
        assert!(target(None, Some(3)).rewind().is_ok());
        assert!(target(None, None).rewind().is_err());
        assert!(target(Some(3), Some(4)).rewind().is_err());
    }

    #[test]
    fn step_paths_are_listed_once_in_order() {
        let steps = vec![
            json!({"step": "write", "path": "/a", "blob": "h"}),
            json!({"step": "move", "from": "/b", "to": "/a"}),
            json!({"step": "remove", "path": "/c"}),
        ];
        assert_eq!(step_paths(&steps), ["/a", "/b", "/c"]);
    }
}
