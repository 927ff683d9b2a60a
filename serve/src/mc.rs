//! Mission Control: a page of `aido serve` for the people watching its agents, at `/mc/`.
//!
//! The page (plain HTML, CSS and JS in `serve/mc/`, built into the binary; nothing from a CDN)
//! is served without the token, since it holds no data; everything it shows comes from the
//! JSON endpoints under `/mc/api/`, behind the same bearer token as `/mcp`, which the page
//! sends as an `Authorization` header (it takes the token from a `#token=` fragment, which
//! browsers never send, or from a login field, and keeps it in the tab's sessionStorage;
//! never in a cookie or a URL a server logs). The live tail reads `/events`.
//!
//! - `GET /mc/api/runtime`: this runtime (its `service.instance.id`, version, counts);
//! - `GET /mc/api/sessions`, `GET /mc/api/sessions/ID[?before=SEQ|after=SEQ][&limit=N]`: the
//!   sessions of this runtime's journal and one session's timeline (primitive, verdict,
//!   duration, seq and hash, the paths a change touched, rewinds and the branches they
//!   abandoned), read from the journal a page at a time: the newest records, those before a
//!   seq (paging back) or after one (the live tail);
//! - `GET /mc/api/sessions/ID/records/SEQ`: one step in full (its outcome, and the contents
//!   before and after of each file it wrote or removed, for a diff);
//! - `GET|POST /mc/api/sessions/ID/rewind`: what a rewind would undo, and the rewind (see
//!   the `rewind` module, which builds on this one);
//! - `GET /mc/api/questions`, `POST /mc/api/questions/ID`: the questions waiting for a
//!   person, and a person's answer, through the same path as `aido answer`
//!   ([`aido_actors::human::answer_stored`]);
//! - `GET /mc/api/vms`, `GET /mc/api/vms/NAME/screen.png[?width=W]`: the machines and the
//!   warm pool, and a machine's screen (a thumbnail with `width`); looking is not journaled;
//! - `GET /mc/api/downstreams`: the gateway's downstream MCP servers (name, running, pid,
//!   tools);
//! - `GET /mc/api/browsers`, `GET /mc/api/browsers/SESSION/screen.png[?width=W]`: the open
//!   browsers (session, tabs) and a session's current tab; looking is not journaled;
//! - `GET /mc/api/recent?after=N`: the last records the feed saw (the live tail of a peer);
//! - `GET /mc/api/fleet`: this runtime and the others of `[fleet]` (a static list and a
//!   discovery file), each asked by this server with its own token; `/mc/api/fleet/P/...`
//!   passes one of the requests above to peer `P` (its place in that list).

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{HttpError, Shared};

const INDEX_HTML: &str = include_str!("../mc/index.html");
const APP_JS: &str = include_str!("../mc/app.js");
const APP_CSS: &str = include_str!("../mc/app.css");

/// Most sessions `/mc/api/sessions` lists (the newest).
pub const SESSIONS_MAX: usize = 200;
/// Most records a timeline shows (the newest).
pub const TIMELINE_RECORDS_MAX: usize = 2000;
/// Most entries `/mc/api/recent` gives at once.
pub const RECENT_MAX: usize = 200;
/// Longest a peer is waited for.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest answer of a peer read, in bytes.
pub const PEER_BYTES_MAX: u64 = 16 << 20;
/// Largest thumbnail width.
pub const THUMBNAIL_WIDTH_MAX: u32 = 1280;

/// The runtimes Mission Control shows beside its own.
#[derive(Clone, Debug, Default)]
pub struct Fleet {
    /// A static list.
    pub peers: Vec<Peer>,
    /// A discovery file: JSON lines `{"url", "token_file"}`, re-read on every look.
    pub discovery: Option<PathBuf>,
}

/// Another runtime's `aido serve`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// `http://HOST:PORT`.
    pub url: String,
    /// The file holding its bearer token.
    pub token_file: PathBuf,
}

/// The static, unauthenticated part: the page and its assets.
pub(crate) fn assets() -> Router<Shared> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/mc/") }))
        .route("/mc", get(|| async { Redirect::to("/mc/") }))
        .route(
            "/mc/",
            get(|| async { asset(INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/mc/app.js",
            get(|| async { asset(APP_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/mc/app.css",
            get(|| async { asset(APP_CSS, "text/css; charset=utf-8") }),
        )
}

/// The JSON endpoints (mounted behind the token).
pub(crate) fn api() -> Router<Shared> {
    Router::new()
        .route("/mc/api/runtime", get(runtime))
        .route("/mc/api/sessions", get(sessions))
        .route("/mc/api/sessions/{id}", get(timeline))
        .route("/mc/api/sessions/{id}/records/{seq}", get(step))
        .route("/mc/api/questions", get(questions))
        .route(
            "/mc/api/questions/{id}",
            axum::routing::post(answer_question),
        )
        .route("/mc/api/vms", get(vms))
        .route("/mc/api/vms/{name}/screen.png", get(screen))
        .route("/mc/api/downstreams", get(downstreams))
        .route("/mc/api/browsers", get(browsers))
        .route("/mc/api/browsers/{session}/screen.png", get(browser_screen))
        .route("/mc/api/recent", get(recent))
        .route("/mc/api/fleet", get(fleet))
        .route("/mc/api/fleet/{peer}/{*rest}", get(to_peer).post(to_peer))
}

fn asset(body: &'static str, kind: &'static str) -> Response {
    let mut response = ([(header::CONTENT_TYPE, kind)], body).into_response();
    let headers = response.headers_mut();
    // Only this server's own script, styles, images (and the blob: URLs the page makes of the
    // screens it fetched) and requests; never framed.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; \
             connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A coded JSON refusal with any status.
pub(crate) fn coded(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(json!({"code": code, "message": message.into()})),
    )
        .into_response()
}

/// A refusal made where a `Response` is too large to carry (the blocking pool's results).
pub(crate) struct Refusal {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        coded(self.status, self.code, self.message)
    }
}

pub(crate) fn internal(e: impl std::fmt::Display) -> Refusal {
    Refusal {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        code: "mc_read_failed",
        message: e.to_string(),
    }
}

/// Run blocking `f` (journal and SQLite reads) on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Refusal> + Send + 'static,
) -> Result<T, Refusal> {
    tokio::task::spawn_blocking(f).await.map_err(internal)?
}

// --- this runtime ------------------------------------------------------------------------

async fn runtime_info(shared: &Shared) -> Value {
    let journal = shared.feed.journal().clone();
    let sessions = tokio::task::spawn_blocking(move || journal.sessions().map(|s| s.len()))
        .await
        .ok()
        .and_then(Result::ok);
    let questions = pending(shared).await.ok().map(|q| q.len());
    let machines = machine_names(shared).await;
    json!({
        "instance": shared.instance.as_deref(),
        "version": env!("CARGO_PKG_VERSION"),
        "url": shared.base.as_str(),
        "pid": std::process::id(),
        "sessions": sessions,
        "questions": questions,
        "machines": machines,
        "built": {"vm": cfg!(feature = "prim-vm"), "human": cfg!(feature = "prim-human")},
    })
}

async fn runtime(State(shared): State<Shared>) -> Response {
    axum::Json(runtime_info(&shared).await).into_response()
}

// --- sessions and timelines --------------------------------------------------------------

async fn sessions(State(shared): State<Shared>) -> Response {
    let journal = shared.feed.journal().clone();
    let own = shared.runtime.runtime_session();
    let listed = blocking(move || {
        let mut all = journal.sessions().map_err(internal)?;
        let total = all.len();
        all.sort_by_key(|s| std::cmp::Reverse((s.started_ms, s.id)));
        all.truncate(SESSIONS_MAX);
        let mut out = Vec::with_capacity(all.len());
        for s in all {
            let last = journal
                .records(s.id, 1, None, 1, true)
                .map_err(internal)?
                .pop();
            let ended = last.as_ref().and_then(|r| match &r.event {
                aido_journal::Event::SessionEnded { reason } => Some(reason.clone()),
                _ => None,
            });
            out.push(json!({
                "id": s.id.to_string(),
                "started_ms": s.started_ms,
                "client": s.client,
                "cwd": s.cwd,
                "records": s.records,
                "last_ms": last.as_ref().map(|r| r.time_ms),
                "last": last.as_ref().map(|r| r.event.kind()),
                "ended": ended,
                "runtime": s.id == own,
            }));
        }
        Ok(json!({"sessions": out, "total": total}))
    })
    .await;
    match listed {
        Ok(v) => axum::Json(v).into_response(),
        Err(r) => r.into_response(),
    }
}

fn short(text: &str, max: usize) -> String {
    let one_line = text.replace('\n', " ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        format!("{}…", one_line.chars().take(max).collect::<String>())
    }
}

/// Most paths a timeline row lists of what an action changed.
pub const ROW_PATHS_MAX: usize = 20;

/// The paths a change set touched (each once, in order), at most [`ROW_PATHS_MAX`].
fn touched(effects: &[aido_actions::Effect]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for effect in effects {
        let value = serde_json::to_value(effect).unwrap_or(Value::Null);
        let path = ["path", "to"]
            .iter()
            .find_map(|key| value.get(*key).and_then(Value::as_str));
        if let Some(path) = path
            && !out.iter().any(|p| p == path)
        {
            out.push(path.to_owned());
            if out.len() == ROW_PATHS_MAX {
                break;
            }
        }
    }
    out
}

/// One record as a timeline row.
#[allow(clippy::too_many_lines)]
fn row(r: &aido_journal::Record, branch: Option<u32>) -> Value {
    use aido_actions::Verdict;
    use aido_journal::Event;
    let mut v = json!({
        "seq": r.seq, "time_ms": r.time_ms, "kind": r.event.kind(),
        "hash": r.hash, "prev": r.prev, "abandoned_by_branch": branch,
    });
    match &r.event {
        Event::ActionProposed {
            action,
            verdict,
            parent,
        } => {
            let args = serde_json::to_value(action)
                .map(|mut a| {
                    if let Some(o) = a.as_object_mut() {
                        o.remove("type");
                    }
                    a.to_string()
                })
                .unwrap_or_default();
            v["primitive"] = json!(action.primitive());
            v["class"] = json!(action.class().to_string());
            v["arguments"] = json!(short(&args, 160));
            v["parent"] = json!(parent);
            let (word, why) = match verdict {
                Verdict::Allow => ("allow", None),
                Verdict::Confirm { gate, reason, .. } => {
                    ("confirm", Some(format!("{gate}: {reason}")))
                }
                Verdict::Deny {
                    gate, code, reason, ..
                } => ("deny", Some(format!("{} by {gate}: {reason}", code.code()))),
            };
            v["verdict"] = json!(word);
            v["why"] = json!(why);
        }
        Event::ActionCompleted {
            proposal,
            outcome,
            duration_ms,
        } => {
            v["proposal"] = json!(proposal);
            v["status"] = json!("completed");
            v["duration_ms"] = json!(duration_ms);
            v["text"] = json!(short(&outcome.text, 160));
            v["changes"] = json!(outcome.effects.len());
            v["paths"] = json!(touched(&outcome.effects));
        }
        Event::ActionFailed {
            proposal,
            failure,
            duration_ms,
            effects,
            ..
        } => {
            v["proposal"] = json!(proposal);
            v["status"] = json!("failed");
            v["changes"] = json!(effects.len());
            v["paths"] = json!(touched(effects));
            v["duration_ms"] = json!(duration_ms);
            v["code"] = json!(failure.code);
            v["text"] = json!(short(&failure.message, 160));
        }
        Event::EventsDelivered {
            subscription,
            proposal,
            changes,
            lagged,
            refused,
        } => {
            v["proposal"] = json!(proposal);
            v["text"] = json!(format!(
                "{subscription}: {} change(s) delivered{}{}",
                changes.len(),
                if *lagged > 0 {
                    format!(", {lagged} dropped")
                } else {
                    String::new()
                },
                refused
                    .as_deref()
                    .map(|r| format!(", reaction refused: {r}"))
                    .unwrap_or_default()
            ));
        }
        Event::ConfirmAnswered {
            proposal,
            approved,
            answer,
            question,
            by,
        } => {
            v["proposal"] = json!(proposal);
            let verdict = if *approved { "approved" } else { "refused" };
            v["text"] = json!(match by {
                Some(by) => format!("{} answered {answer} ({verdict})", by.words()),
                None => format!("nobody answered: {answer} ({verdict})"),
            });
            v["question"] = json!(question);
            v["by"] = json!(by);
        }
        Event::Rewound {
            to_seq,
            proposal,
            branch,
            method,
            undo_target,
            ..
        } => {
            let to = if *undo_target {
                format!("before #{to_seq}")
            } else {
                format!("to #{to_seq}")
            };
            v["text"] = json!(format!(
                "rewound {to} ({method}): #{}–#{} are now branch {branch}",
                r.event.rewound_cut().unwrap_or(*to_seq) + 1,
                proposal.saturating_sub(1)
            ));
            v["to_seq"] = json!(to_seq);
            v["cut"] = json!(r.event.rewound_cut());
            v["proposal"] = json!(proposal);
            v["branch"] = json!(branch);
            v["method"] = json!(method);
        }
        Event::WorkdirChanged { cwd, source } => {
            v["cwd"] = json!(cwd);
            v["text"] = json!(format!("working directory now {cwd} (from {source})"));
        }
        Event::CallRejected {
            tool,
            code,
            message,
        } => {
            v["primitive"] = json!(tool);
            v["verdict"] = json!("rejected");
            v["code"] = json!(code);
            v["text"] = json!(short(message, 160));
        }
        Event::SessionStarted {
            client, runtime, ..
        } => {
            v["text"] = json!(format!(
                "started by {} ({runtime})",
                client.as_deref().unwrap_or("an unknown client")
            ));
        }
        Event::SessionResumed { client } => v["text"] = json!(format!("resumed by {client}")),
        Event::SessionEnded { reason } => v["text"] = json!(format!("ended: {reason}")),
        Event::SnapshotTaken {
            snapshot,
            workspace,
            ..
        } => v["text"] = json!(format!("snapshot {snapshot} of {workspace}")),
        Event::BodyRestarted { body, reason } => {
            v["text"] = json!(format!("{body} body restarted: {}", short(reason, 120)))
        }
        Event::BodyFailed { body, why, .. } => {
            v["text"] = json!(format!("{body} body stopped: {}", short(why, 120)))
        }
        Event::HandleLost { handle, .. } => {
            v["text"] = json!(format!("background command {handle} was lost"))
        }
        Event::Pruned {
            through_seq,
            reason,
            ..
        } => {
            v["text"] = json!(format!(
                "retention removed the records up to #{through_seq} ({reason})"
            ));
            v["pruned_through"] = json!(through_seq);
        }
        Event::Collected { trigger, summary } => {
            v["text"] = json!(format!(
                "retention ({trigger}) removed {} session(s), cut {}, freed {} bytes",
                summary.sessions_removed, summary.sessions_cut, summary.bytes_freed
            ))
        }
    }
    v
}

/// A session's timeline: one row per action (its outcome folded in as `done`, who answered its
/// confirmation as `answered_by`), and a row for every other record (rewinds and
/// confirmations among them); rows a rewind abandoned say by which branch.
fn timeline_of(records: &[aido_journal::Record], total: u64) -> Value {
    let gone = aido_journal::timeline::abandoned(records);
    let mut rows: Vec<Value> = Vec::new();
    let mut at: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    let mut branches = 0u32;
    for r in records {
        let mut v = row(r, gone.get(&r.seq).copied());
        if let aido_journal::Event::Rewound { branch, .. } = &r.event {
            branches = branches.max(*branch);
        }
        let is_outcome = matches!(
            r.event,
            aido_journal::Event::ActionCompleted { .. } | aido_journal::Event::ActionFailed { .. }
        );
        if is_outcome
            && let Some(i) = v["proposal"].as_u64().and_then(|p| at.get(&p).copied())
            && let Some(o) = v.as_object_mut()
        {
            o.remove("abandoned_by_branch");
            rows[i]["done"] = v;
            continue;
        }
        if matches!(r.event, aido_journal::Event::ActionProposed { .. }) {
            at.insert(r.seq, rows.len());
        }
        // A confirmation keeps its own row, and its action's row says who answered.
        if let aido_journal::Event::ConfirmAnswered { proposal, by, .. } = &r.event
            && let Some(i) = at.get(proposal).copied()
        {
            rows[i]["answered_by"] = json!(
                by.as_ref()
                    .map_or_else(|| "nobody".to_owned(), |b| b.words())
            );
        }
        rows.push(v);
    }
    json!({
        "records": total,
        "shown_from": records.first().map(|r| r.seq),
        "branches": branches,
        "rows": rows,
    })
}

/// Which records a timeline shows: the newest (no bound), those before a seq (paging back)
/// or those after one (the live tail); at most `limit` (and [`TIMELINE_RECORDS_MAX`]).
#[derive(Deserialize)]
struct Page {
    before: Option<u64>,
    after: Option<u64>,
    limit: Option<usize>,
}

/// A session id, or the refusal.
pub(crate) fn session_of(id: &str) -> Result<aido_journal::SessionId, HttpError> {
    aido_journal::SessionId::parse(id).ok_or_else(|| HttpError::SessionIdInvalid(id.to_owned()))
}

/// The head seq of a session the journal holds; `mc_session_unknown` when it holds none.
pub(crate) fn head_of(
    journal: &aido_journal::Journal,
    session: aido_journal::SessionId,
) -> Result<u64, Refusal> {
    let head = journal.head_seq(session).map_err(internal)?;
    if head == 0 {
        return Err(Refusal {
            status: StatusCode::NOT_FOUND,
            code: "mc_session_unknown",
            message: format!("no session {session} in this runtime's journal"),
        });
    }
    Ok(head)
}

async fn timeline(
    State(shared): State<Shared>,
    UrlPath(id): UrlPath<String>,
    Query(page): Query<Page>,
) -> Response {
    let session = match session_of(&id) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let journal = shared.feed.journal().clone();
    let read = blocking(move || {
        let total = head_of(&journal, session)?;
        let limit = page
            .limit
            .unwrap_or(TIMELINE_RECORDS_MAX)
            .clamp(1, TIMELINE_RECORDS_MAX);
        let records = match (page.before, page.after) {
            (_, Some(after)) => {
                journal.records(session, after.saturating_add(1), page.before, limit, false)
            }
            (Some(before), None) => journal.records(session, 1, Some(before), limit, true),
            (None, None) => journal.records(session, 1, None, limit, true),
        }
        .map_err(internal)?;
        let mut v = timeline_of(&records, total);
        v["session"] = json!(session.to_string());
        Ok(v)
    })
    .await;
    match read {
        Ok(v) => axum::Json(v).into_response(),
        Err(r) => r.into_response(),
    }
}

/// Largest file contents a step's detail gives (before or after), in bytes; larger ones are
/// named, not given.
pub const DETAIL_CONTENT_BYTES_MAX: usize = 256 * 1024;
/// Most records after a proposal read to find its outcome.
pub const DETAIL_OUTCOME_SCAN_MAX: usize = 4096;

/// One file an action changed, with what it held before and after when the journal kept both
/// as text: what a diff is made of.
fn file_change(journal: &aido_journal::Journal, effect: &aido_actions::Effect) -> Option<Value> {
    use aido_actions::Effect;
    let text = |hash: Option<&str>| -> Value {
        let Some(hash) = hash else {
            return Value::Null;
        };
        match journal.blob(hash) {
            Ok(Some(bytes)) if bytes.len() > DETAIL_CONTENT_BYTES_MAX => {
                json!({"omitted": "too_large", "bytes": bytes.len()})
            }
            Ok(Some(bytes)) => match String::from_utf8(bytes) {
                Ok(text) => json!(text),
                Err(e) => json!({"omitted": "binary", "bytes": e.as_bytes().len()}),
            },
            Ok(None) | Err(_) => json!({"omitted": "not_kept"}),
        }
    };
    let (path, before, after) = match effect {
        Effect::FileWritten {
            path, blob, before, ..
        } => (path, before, Some(blob.as_str())),
        Effect::FileRemoved { path, before, .. } => (path, before, None),
        _ => return None,
    };
    let before_text = match before {
        aido_actions::Before::Absent => json!(""),
        aido_actions::Before::Kept(hash) => text(Some(hash)),
        aido_actions::Before::NotKept => json!({"omitted": "not_kept"}),
    };
    let after_text = match after {
        Some(hash) => text(Some(hash)),
        None => json!(""),
    };
    Some(json!({
        "path": path,
        "effect": serde_json::to_value(effect).ok().and_then(|v| v.get("effect").cloned()),
        "created": matches!(before, aido_actions::Before::Absent),
        "before": before_text,
        "after": after_text,
    }))
}

/// One step of a timeline in full: the record at `seq` (with the action's whole arguments),
/// its outcome when `seq` is a proposal (and the `confirm_answered` record naming who
/// approved or refused it, when a person was asked), and each file it wrote or removed with its contents
/// before and after (when the journal kept them as text, at most
/// [`DETAIL_CONTENT_BYTES_MAX`] each).
async fn step(
    State(shared): State<Shared>,
    UrlPath((id, seq)): UrlPath<(String, u64)>,
) -> Response {
    let session = match session_of(&id) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let journal = shared.feed.journal().clone();
    let read = blocking(move || {
        head_of(&journal, session)?;
        let record = journal
            .records(session, seq, Some(seq.saturating_add(1)), 1, false)
            .map_err(internal)?
            .pop()
            .ok_or_else(|| Refusal {
                status: StatusCode::NOT_FOUND,
                code: "mc_record_unknown",
                message: format!("session {session} has no record {seq}"),
            })?;
        // The outcome, and the answer of a person who was asked to confirm it (it comes
        // between the proposal and the outcome).
        let (outcome, confirmation) = match &record.event {
            aido_journal::Event::ActionProposed { .. } => {
                let later = journal
                    .records(session, seq + 1, None, DETAIL_OUTCOME_SCAN_MAX, false)
                    .map_err(internal)?;
                let confirmation = later
                    .iter()
                    .find(|r| {
                        matches!(&r.event, aido_journal::Event::ConfirmAnswered { proposal, .. } if *proposal == seq)
                    })
                    .cloned();
                let outcome = later.into_iter().find(|r| match &r.event {
                    aido_journal::Event::ActionCompleted { proposal, .. }
                    | aido_journal::Event::ActionFailed { proposal, .. } => *proposal == seq,
                    _ => false,
                });
                (outcome, confirmation)
            }
            _ => (None, None),
        };
        let effects = match outcome.as_ref().map(|o| &o.event) {
            Some(aido_journal::Event::ActionCompleted { outcome, .. }) => outcome.effects.clone(),
            Some(aido_journal::Event::ActionFailed { effects, .. }) => effects.clone(),
            _ => Vec::new(),
        };
        let files: Vec<Value> = effects
            .iter()
            .filter_map(|e| file_change(&journal, e))
            .take(ROW_PATHS_MAX)
            .collect();
        Ok(json!({
            "session": session.to_string(),
            "record": crate::record_json(&record),
            "outcome": outcome.as_ref().map(crate::record_json),
            "confirmation": confirmation.as_ref().map(crate::record_json),
            "files": files,
        }))
    })
    .await;
    match read {
        Ok(v) => axum::Json(v).into_response(),
        Err(r) => r.into_response(),
    }
}

// --- questions ---------------------------------------------------------------------------

#[cfg(feature = "prim-human")]
async fn pending(shared: &Shared) -> Result<Vec<Value>, Refusal> {
    let path = shared.runtime.questions_file().to_owned();
    blocking(move || {
        if !path.exists() {
            return Ok(Vec::new());
        }
        let store = aido_actors::human::Questions::open(&path).map_err(human)?;
        let pending = store.pending().map_err(human)?;
        Ok(pending
            .into_iter()
            .map(|q| serde_json::to_value(q).unwrap_or(Value::Null))
            .collect())
    })
    .await
}

#[cfg(not(feature = "prim-human"))]
async fn pending(_shared: &Shared) -> Result<Vec<Value>, Refusal> {
    let e = HttpError::NotBuilt("prim-human");
    Err(Refusal {
        status: e.status(),
        code: e.code(),
        message: e.to_string(),
    })
}

#[cfg(feature = "prim-human")]
fn human(e: aido_actors::human::HumanError) -> Refusal {
    use aido_actors::human::HumanError as H;
    let status = match &e {
        H::QuestionNotFound { .. } => StatusCode::NOT_FOUND,
        H::AlreadyAnswered { .. } | H::QuestionClosed { .. } => StatusCode::CONFLICT,
        H::AnswerInvalid { .. } => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    Refusal {
        status,
        code: e.code(),
        message: e.to_string(),
    }
}

async fn questions(State(shared): State<Shared>) -> Response {
    match pending(&shared).await {
        Ok(q) => axum::Json(json!({"questions": q})).into_response(),
        Err(r) => r.into_response(),
    }
}

/// A person's answer: the form content the question's elicitation would take (`{"answer":
/// TEXT}`, `{"approve": true|false}`, `{"choice": C}` or `{"choices": [..]}`), or
/// `{"decline": true}`; with `who`, the surface answering (`mission_control`, the default, or
/// `watch`), and `by`, the person in the surface's words. The journal names the surface and
/// the person: `by`, and the token and address the request came with. The first answer from
/// any surface wins; a later one is 409 `question_already_answered` (or `question_closed`).
#[cfg(feature = "prim-human")]
async fn answer_question(
    State(shared): State<Shared>,
    UrlPath(id): UrlPath<String>,
    extensions: axum::http::Extensions,
    body: axum::body::Bytes,
) -> Response {
    use aido_actors::human::{Answerer, HumanError, Surface};
    let mut content: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return human(HumanError::AnswerInvalid {
                why: "the answer is a JSON object: {\"answer\"}, {\"approve\"}, {\"choice\"}, {\"choices\"} or {\"decline\": true}, with \"who\": \"mission_control\" or \"watch\"".into(),
            })
            .into_response();
        }
    };
    let (who, by) = match content.as_object_mut() {
        Some(fields) => (fields.remove("who"), fields.remove("by")),
        None => (None, None),
    };
    let surface = match who.as_ref().map(|w| w.as_str().and_then(Surface::named)) {
        None => Surface::MissionControl,
        Some(Some(s @ (Surface::MissionControl | Surface::Watch))) => s,
        Some(_) => {
            return human(HumanError::AnswerInvalid {
                why: format!(
                    "who is {}: an answer over HTTP comes from \"mission_control\" or \"watch\"",
                    who.unwrap_or_default()
                ),
            })
            .into_response();
        }
    };
    let token = match shared.auth {
        crate::Auth::Token(_) => "the operator's token",
        crate::Auth::Off => "no token",
    };
    let from = extensions
        .get::<axum::extract::ConnectInfo<crate::listener::Connection>>()
        .map(|c| format!(" from {}", c.0.0.peer()))
        .unwrap_or_default();
    let person = match by.as_ref().and_then(Value::as_str) {
        Some(by) => format!("{by}, with {token}{from}"),
        None => format!("with {token}{from}"),
    };
    let by = Answerer::new(surface, Some(&person));
    let decline = content["decline"] == Value::Bool(true);
    let path = shared.runtime.questions_file().to_owned();
    let now_ms = shared.runtime.clock().now_ms();
    let done = blocking(move || {
        aido_actors::human::answer_stored(&path, &id, (!decline).then_some(&content), now_ms, &by)
            .map_err(human)
    })
    .await;
    match done {
        Ok(stored) => {
            tracing::info!(id = %stored.id, state = %stored.state, by = ?stored.by, "a question was answered over HTTP");
            axum::Json(json!({"ok": true, "question": stored})).into_response()
        }
        Err(r) => r.into_response(),
    }
}

#[cfg(not(feature = "prim-human"))]
async fn answer_question() -> Response {
    HttpError::NotBuilt("prim-human").into_response()
}

// --- machines ----------------------------------------------------------------------------

#[cfg(feature = "prim-vm")]
async fn machine_names(shared: &Shared) -> Option<Vec<String>> {
    Some(shared.runtime.vm_names().await)
}

#[cfg(not(feature = "prim-vm"))]
async fn machine_names(_shared: &Shared) -> Option<Vec<String>> {
    None
}

#[cfg(feature = "prim-vm")]
async fn vms(State(shared): State<Shared>) -> Response {
    let machines = shared.runtime.vm_names().await;
    let pool = shared.runtime.vm_pool_status().await;
    axum::Json(json!({"machines": machines, "pool": pool})).into_response()
}

#[cfg(not(feature = "prim-vm"))]
async fn vms() -> Response {
    HttpError::NotBuilt("prim-vm").into_response()
}

#[derive(Deserialize)]
struct ScreenQuery {
    width: Option<u32>,
}

/// A PNG `width` pixels wide (at most the screen's own), the aspect kept.
#[cfg(feature = "prim-vm")]
fn thumbnail(png: &[u8], width: u32) -> Result<Vec<u8>, String> {
    let image = image::load_from_memory_with_format(png, image::ImageFormat::Png)
        .map_err(|e| e.to_string())?;
    if width >= image.width() {
        return Ok(png.to_vec());
    }
    let height = (u64::from(image.height()) * u64::from(width) / u64::from(image.width().max(1)))
        .max(1) as u32;
    let small = image.resize_exact(width, height, image::imageops::FilterType::Triangle);
    let mut out = std::io::Cursor::new(Vec::new());
    small
        .write_to(&mut out, image::ImageFormat::Png)
        .map_err(|e| e.to_string())?;
    Ok(out.into_inner())
}

#[cfg(feature = "prim-vm")]
async fn screen(
    State(shared): State<Shared>,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<ScreenQuery>,
) -> Response {
    let png = shared.runtime.vm_peek(&name).await.map(|(png, _)| png);
    png_response(png, "vm_not_found", q.width).await
}

/// A screen as a PNG answer (a thumbnail `width` wide, when asked and this build has prim-vm's
/// image decoder; the whole screen otherwise), or the failure to take it: `not_found` is the
/// code that is a 404.
async fn png_response(
    png: Result<Vec<u8>, aido_actions::Failure>,
    not_found: &str,
    width: Option<u32>,
) -> Response {
    let png = match png {
        Ok(png) => png,
        Err(f) => {
            let status = if f.code == not_found {
                StatusCode::NOT_FOUND
            } else {
                StatusCode::BAD_GATEWAY
            };
            return coded(status, &f.code, f.message);
        }
    };
    #[cfg(feature = "prim-vm")]
    let png = match width {
        Some(w) => {
            let w = w.clamp(16, THUMBNAIL_WIDTH_MAX);
            match tokio::task::spawn_blocking(move || thumbnail(&png, w)).await {
                Ok(Ok(small)) => small,
                Ok(Err(e)) => return coded(StatusCode::BAD_GATEWAY, "mc_thumbnail_failed", e),
                Err(e) => return internal(e).into_response(),
            }
        }
        None => png,
    };
    #[cfg(not(feature = "prim-vm"))]
    let _ = width;
    (
        [
            (header::CONTENT_TYPE, "image/png"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        png,
    )
        .into_response()
}

// --- downstream servers and browsers ------------------------------------------------------

async fn downstreams(State(shared): State<Shared>) -> Response {
    axum::Json(json!({"servers": shared.runtime.downstream_status().await})).into_response()
}

async fn browsers(State(shared): State<Shared>) -> Response {
    axum::Json(json!({"browsers": shared.runtime.browser_sessions().await})).into_response()
}

/// A browser's current tab as a PNG (see [`png_response`]).
async fn browser_screen(
    State(shared): State<Shared>,
    UrlPath(session): UrlPath<String>,
    Query(q): Query<ScreenQuery>,
) -> Response {
    let png = shared.runtime.browser_peek(&session).await;
    png_response(png, "browser_not_open", q.width).await
}

#[cfg(not(feature = "prim-vm"))]
async fn screen() -> Response {
    HttpError::NotBuilt("prim-vm").into_response()
}

// --- the live tail of a peer -------------------------------------------------------------

#[derive(Deserialize)]
struct RecentQuery {
    after: Option<u64>,
}

async fn recent(State(shared): State<Shared>, Query(q): Query<RecentQuery>) -> Response {
    let (entries, gap) = shared.feed.recent(q.after.unwrap_or(0), RECENT_MAX);
    let last = entries.last().map(|e| e.n).or(q.after);
    let records: Vec<Value> = entries
        .iter()
        .map(|e| {
            let record: Value = serde_json::from_str(&e.json).unwrap_or(Value::Null);
            json!({"n": e.n, "record": record})
        })
        .collect();
    axum::Json(json!({
        "epoch": shared.feed.epoch(), "entries": records, "last": last, "gap": gap,
    }))
    .into_response()
}

// --- the fleet ---------------------------------------------------------------------------

/// One line of a discovery file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Discovered {
    url: String,
    token_file: PathBuf,
}

/// The peers: the static list, then the discovery file's; what was wrong with its lines.
pub fn peers(fleet: &Fleet) -> (Vec<Peer>, Vec<Value>) {
    let mut out = fleet.peers.clone();
    let mut problems = Vec::new();
    if let Some(file) = &fleet.discovery {
        match std::fs::read_to_string(file) {
            Ok(text) => {
                let dir = file.parent().unwrap_or(Path::new("."));
                for (i, line) in text.lines().enumerate() {
                    let line = line.trim();
                    if line.is_empty() || line.starts_with('#') {
                        continue;
                    }
                    match serde_json::from_str::<Discovered>(line) {
                        Ok(d) => out.push(Peer {
                            url: d.url.trim_end_matches('/').to_owned(),
                            token_file: dir.join(d.token_file),
                        }),
                        Err(e) => problems.push(json!({
                            "code": "mc_discovery_invalid",
                            "message": format!("{} line {}: {e}", file.display(), i + 1),
                        })),
                    }
                }
            }
            Err(e) => problems.push(json!({
                "code": "mc_discovery_invalid",
                "message": format!("{}: {e}", file.display()),
            })),
        }
    }
    (out, problems)
}

/// What a peer answered: status, content type, body.
type PeerAnswer = (u16, String, Vec<u8>);

fn ask_peer(
    peer: &Peer,
    method: &Method,
    path_and_query: &str,
    body: Option<Vec<u8>>,
) -> Result<PeerAnswer, String> {
    let token = std::fs::read_to_string(&peer.token_file)
        .map_err(|e| format!("its token file {}: {e}", peer.token_file.display()))?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(PEER_TIMEOUT))
        .build()
        .into();
    let url = format!("{}{path_and_query}", peer.url.trim_end_matches('/'));
    let bearer = format!("Bearer {}", token.trim());
    let response = if *method == Method::POST {
        agent
            .post(&url)
            .header("Authorization", &bearer)
            .header("Content-Type", "application/json")
            .send(body.unwrap_or_default())
    } else {
        agent.get(&url).header("Authorization", &bearer).call()
    };
    let mut response = response.map_err(|e| format!("{url}: {e}"))?;
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream")
        .to_owned();
    let bytes = response
        .body_mut()
        .with_config()
        .limit(PEER_BYTES_MAX)
        .read_to_vec()
        .map_err(|e| format!("{url}: {e}"))?;
    Ok((status, kind, bytes))
}

async fn peer_call(
    peer: Peer,
    method: Method,
    path_and_query: String,
    body: Option<Vec<u8>>,
) -> Result<PeerAnswer, String> {
    tokio::task::spawn_blocking(move || ask_peer(&peer, &method, &path_and_query, body))
        .await
        .map_err(|e| e.to_string())?
}

async fn fleet(State(shared): State<Shared>) -> Response {
    let fleet = shared.fleet.clone();
    let (list, problems) = match tokio::task::spawn_blocking(move || peers(&fleet)).await {
        Ok(p) => p,
        Err(e) => return internal(e).into_response(),
    };
    let mut me = runtime_info(&shared).await;
    me["peer"] = Value::Null;
    me["self"] = json!(true);
    me["ok"] = json!(true);
    let asks = list
        .iter()
        .cloned()
        .map(|p| peer_call(p, Method::GET, "/mc/api/runtime".into(), None));
    let answers = futures::future::join_all(asks).await;
    let mut runtimes = vec![me];
    for (i, (peer, answer)) in list.iter().zip(answers).enumerate() {
        let mut v = match answer {
            Ok((200, _, bytes)) => serde_json::from_slice::<Value>(&bytes)
                .map(|mut v| {
                    v["ok"] = json!(true);
                    v
                })
                .unwrap_or_else(|e| {
                    json!({"ok": false, "code": "mc_peer_failed", "message": format!("not JSON: {e}")})
                }),
            Ok((status, _, bytes)) => {
                let said: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                json!({"ok": false, "code": "mc_peer_failed",
                       "message": format!("it answered {status}: {}", said["code"].as_str().unwrap_or("?")),
                       "status": status})
            }
            Err(e) => json!({"ok": false, "code": "mc_peer_failed", "message": e}),
        };
        v["peer"] = json!(i);
        v["self"] = json!(false);
        // Where this server reaches it (its own `url` may be a name only it knows).
        v["reached_at"] = json!(peer.url);
        runtimes.push(v);
    }
    axum::Json(json!({"runtimes": runtimes, "problems": problems})).into_response()
}

/// The requests a peer is asked on the page's behalf.
fn passable(method: &Method, rest: &str) -> bool {
    let parts: Vec<&str> = rest.split('/').collect();
    let get = *method == Method::GET;
    match parts.as_slice() {
        ["runtime"] | ["sessions"] | ["questions"] | ["vms"] | ["recent"] => get,
        ["sessions", _] | ["sessions", _, "records", _] => get,
        ["sessions", _, "rewind"] => true,
        ["vms", _, "screen.png"] => get,
        ["downstreams"] | ["browsers"] | ["browsers", _, "screen.png"] => get,
        ["questions", _] => *method == Method::POST,
        _ => false,
    }
}

async fn to_peer(
    State(shared): State<Shared>,
    UrlPath((peer, rest)): UrlPath<(usize, String)>,
    request: Request,
) -> Response {
    let method = request.method().clone();
    if !passable(&method, &rest) {
        return HttpError::NotFound(request.uri().path().to_owned()).into_response();
    }
    let query = request
        .uri()
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let body = if method == Method::POST {
        match axum::body::to_bytes(request.into_body(), 64 * 1024).await {
            Ok(b) => Some(b.to_vec()),
            Err(_) => return HttpError::TooLarge { max: 64 * 1024 }.into_response(),
        }
    } else {
        None
    };
    let fleet = shared.fleet.clone();
    let list = match tokio::task::spawn_blocking(move || peers(&fleet).0).await {
        Ok(l) => l,
        Err(e) => return internal(e).into_response(),
    };
    let Some(target) = list.get(peer).cloned() else {
        return HttpError::PeerUnknown(peer).into_response();
    };
    let url = target.url.clone();
    match peer_call(target, method, format!("/mc/api/{rest}{query}"), body).await {
        Ok((status, kind, bytes)) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            let kind = HeaderValue::from_str(&kind)
                .unwrap_or(HeaderValue::from_static("application/octet-stream"));
            (
                status,
                [
                    (header::CONTENT_TYPE, kind),
                    (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
                ],
                bytes,
            )
                .into_response()
        }
        Err(e) => HttpError::PeerFailed(format!("peer {peer} ({url}): {e}")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_page_requests_pass_to_a_peer() {
        assert!(passable(&Method::GET, "runtime"));
        assert!(passable(&Method::GET, "sessions/abc"));
        assert!(passable(&Method::GET, "vms/box/screen.png"));
        assert!(passable(&Method::POST, "questions/q-1"));
        assert!(passable(&Method::GET, "sessions/abc/records/4"));
        assert!(passable(&Method::GET, "sessions/abc/rewind"));
        assert!(passable(&Method::POST, "sessions/abc/rewind"));
        assert!(!passable(&Method::POST, "sessions/abc/records/4"));
        assert!(!passable(&Method::GET, "questions/q-1"));
        assert!(!passable(&Method::POST, "sessions"));
        assert!(!passable(&Method::GET, "fleet"));
        assert!(!passable(&Method::GET, "fleet/0/runtime"));
        assert!(!passable(&Method::GET, "../actions"));
    }

    fn record(seq: u64, event: aido_journal::Event) -> aido_journal::Record {
        aido_journal::Record {
            v: 1,
            session: aido_journal::SessionId::from_bytes([7; 16]),
            seq,
            time_ms: 1000 + seq,
            prev: format!("prev{seq}"),
            event,
            hash: format!("hash{seq}"),
        }
    }

    fn proposed(seq: u64, primitive: &str, args: Value) -> aido_journal::Record {
        record(
            seq,
            aido_journal::Event::ActionProposed {
                action: aido_actions::Action::from_tool_call(primitive, args).unwrap(),
                verdict: aido_actions::Verdict::Allow,
                parent: None,
            },
        )
    }

    fn completed(seq: u64, proposal: u64, ms: u64) -> aido_journal::Record {
        record(
            seq,
            aido_journal::Event::ActionCompleted {
                proposal,
                outcome: aido_actions::Outcome::from_output(json!({"ok": true})),
                duration_ms: ms,
            },
        )
    }

    #[test]
    fn a_timeline_folds_outcomes_into_actions_and_marks_what_a_rewind_abandoned() {
        use aido_journal::Event;
        let write = |p: &str| json!({"path": p, "content": "x"});
        let records = vec![
            record(
                1,
                Event::SessionStarted {
                    client: Some("t".into()),
                    cwd: "/".into(),
                    runtime: "aido".into(),
                    grant: None,
                },
            ),
            proposed(2, "write_file", write("a")),
            completed(3, 2, 4),
            proposed(4, "write_file", write("b")),
            completed(5, 4, 6),
            proposed(6, "rewind", json!({"before_seq": 4})),
            record(
                7,
                Event::Rewound {
                    to_seq: 4,
                    cut: Some(3),
                    undo_target: true,
                    proposal: 6,
                    branch: 1,
                    method: "undo".into(),
                    snapshot: None,
                    recovered: false,
                },
            ),
            completed(8, 6, 9),
        ];
        let t = timeline_of(&records, 8);
        let rows = t["rows"].as_array().unwrap();
        let seqs: Vec<u64> = rows.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, [1, 2, 4, 6, 7]);
        assert_eq!(t["branches"], 1);
        assert_eq!(rows[1]["primitive"], "write_file");
        assert_eq!(rows[1]["verdict"], "allow");
        assert_eq!(rows[1]["hash"], "hash2");
        assert_eq!(rows[1]["done"]["seq"], 3);
        assert_eq!(rows[1]["done"]["duration_ms"], 4);
        assert_eq!(rows[1]["abandoned_by_branch"], Value::Null);
        assert_eq!(rows[2]["abandoned_by_branch"], 1);
        assert_eq!(rows[2]["done"]["status"], "completed");
        assert_eq!(rows[3]["done"]["seq"], 8);
        assert_eq!(rows[4]["kind"], "rewound");
        assert_eq!(rows[4]["branch"], 1);
        assert!(
            rows[4]["text"].as_str().unwrap().contains("before #4"),
            "{}",
            rows[4]["text"]
        );
    }

    #[test]
    fn discovery_lines_are_read_and_bad_ones_reported() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("peers.jsonl");
        std::fs::write(
            &file,
            "# the fleet\n{\"url\": \"http://127.0.0.1:1/\", \"token_file\": \"a/token\"}\n\nnot json\n{\"url\": \"http://h:2\", \"token_file\": \"/abs/token\"}\n",
        )
        .unwrap();
        let fleet = Fleet {
            peers: vec![Peer {
                url: "http://static:3".into(),
                token_file: "/t".into(),
            }],
            discovery: Some(file),
        };
        let (list, problems) = peers(&fleet);
        assert_eq!(list.len(), 3);
        assert_eq!(list[0].url, "http://static:3");
        assert_eq!(list[1].url, "http://127.0.0.1:1");
        assert_eq!(list[1].token_file, dir.path().join("a/token"));
        assert_eq!(list[2].token_file, PathBuf::from("/abs/token"));
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0]["code"], "mc_discovery_invalid");
        assert!(problems[0]["message"].as_str().unwrap().contains("line 4"));
    }
}
