//! The HTTP API for frontends, behind the same auth as `/mcp`.
//!
//! `POST /actions` with `{"primitive": NAME, "arguments": {...}, "session": ID?}` runs one
//! action through the same path as an MCP `tools/call` (policy, journal, body, journal) in an
//! API session: the one named, or a new one (client `aido serve /actions`) whose id comes back.
//! The answer is `{"ok", "session", "seq", ...}`: `output` and `text` when it ran, `code`,
//! `message` (and `gate`) when it was refused or failed; HTTP errors are for requests that
//! are not actions at all.
//!
//! `GET /events` is the journal as server-sent events (`event: record`, `data:` the record
//! with its hash). Without `?session=` it is every record this server's journal writes from
//! now on, ids `EPOCH-N`; a client that reconnects with `Last-Event-ID` gets what it missed
//! from the records the feed's ring holds ([`RingLimits`](crate::feed::RingLimits)), or an
//! `event: gap` first when some are gone (or the server restarted). With `?session=ID` it is
//! that session from its first record (or after `Last-Event-ID`, a seq), read from the
//! journal, then live: resumable across restarts. A client that stops reading costs nothing:
//! the broadcast carries only numbers, its stream falls behind them and reads what it missed
//! from the ring (or, per session, from the journal) when it reads again.

use std::collections::BTreeMap;
use std::convert::Infallible;

use aido_actions::Action;
use aido_actors::{Hooks, Ran, RunError, Session};
use aido_journal::SessionId;
use axum::extract::{Query, Request, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{Mutex, broadcast, mpsc};

use crate::feed::{Entry, Notice};
use crate::{HttpError, Principal, Shared};

/// API sessions held at once; opening one more closes the oldest.
const API_SESSIONS_MAX: usize = 64;

/// The sessions `/actions` opened, by id, oldest first.
#[derive(Default)]
pub(crate) struct ApiSessions {
    open: Mutex<BTreeMap<u64, (String, Session)>>,
    next: std::sync::atomic::AtomicU64,
}

impl ApiSessions {
    async fn get(&self, id: &str) -> Option<Session> {
        let open = self.open.lock().await;
        open.values().find(|(i, _)| i == id).map(|(_, s)| s.clone())
    }

    async fn add(&self, session: Session) {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let evicted = {
            let mut open = self.open.lock().await;
            open.insert(n, (session.id().to_string(), session));
            if open.len() > API_SESSIONS_MAX {
                open.pop_first()
            } else {
                None
            }
        };
        if let Some((_, (_, old))) = evicted {
            old.close("more API sessions were opened than aido serve holds")
                .await;
        }
    }

    pub(crate) async fn close_all(&self, reason: &str) {
        let all = std::mem::take(&mut *self.open.lock().await);
        for (_, (_, session)) in all {
            session.close(reason).await;
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionBody {
    primitive: String,
    #[serde(default)]
    arguments: Option<Value>,
    #[serde(default)]
    session: Option<String>,
}

/// What an action's run answers, as `/actions` gives it.
pub(crate) fn answer(session: &Session, result: Result<Ran, RunError>) -> Value {
    let id = session.id().to_string();
    match result {
        Ok(ran) => json!({
            "ok": true, "session": id, "seq": ran.seq,
            "output": ran.outcome.output, "text": ran.outcome.text,
        }),
        Err(e) => {
            let mut v = json!({
                "ok": false, "session": id, "seq": e.seq,
                "code": e.failure.code, "message": e.failure.message,
            });
            if let Some(gate) = e.gate {
                v["gate"] = json!(gate);
                if let Some(code) = aido_actions::DenyCode::from_code(&e.failure.code) {
                    v["setting"] = json!(code.setting());
                }
            }
            if let Some(leaf) = e.leaf {
                v["leaf"] = json!(leaf);
            }
            if let Some(details) = e.failure.details {
                v["details"] = details;
            }
            v
        }
    }
}

pub(crate) async fn post_action(State(shared): State<Shared>, request: Request) -> Response {
    let principal = request
        .extensions()
        .get::<Principal>()
        .cloned()
        .unwrap_or(Principal::Operator);
    let grant = request
        .extensions()
        .get::<aido_mcp::http::GrantBearer>()
        .map(|g| g.0.to_string());
    let trace_parent = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = match axum::body::to_bytes(request.into_body(), shared.body_bytes_max).await {
        Ok(b) => b,
        Err(_) => {
            return HttpError::TooLarge {
                max: shared.body_bytes_max,
            }
            .into_response();
        }
    };
    let body: ActionBody = match serde_json::from_slice(&bytes) {
        Ok(b) => b,
        Err(e) => return HttpError::ActionInvalid(e.to_string()).into_response(),
    };
    let session = match &body.session {
        Some(id) => match shared.api.get(id).await {
            Some(s) if principal.may_use(s.grant_id()) => s,
            Some(_) => return HttpError::SessionNotYours(id.clone()).into_response(),
            None => return HttpError::ApiSessionUnknown(id.clone()).into_response(),
        },
        None => match match grant {
            Some(token) => {
                shared
                    .runtime
                    .open_session_granted(Some("aido serve /actions".into()), token)
                    .await
            }
            None => {
                shared
                    .runtime
                    .open_session(Some("aido serve /actions".into()))
                    .await
            }
        } {
            Ok(s) => {
                shared.api.add(s.clone()).await;
                s
            }
            Err(e) => {
                return (
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    axum::Json(json!({"code": e.code(), "message": e.to_string()})),
                )
                    .into_response();
            }
        },
    };
    let arguments = body.arguments.unwrap_or_else(|| json!({}));
    let limits = &shared.runtime.policy().config().limits;
    let size = serde_json::to_vec(&arguments).map_or(0, |b| b.len()) as u64;
    if size > limits.argument_bytes_max {
        let message = format!(
            "the arguments are {size} bytes; the limit is {} (argument_bytes_max)",
            limits.argument_bytes_max
        );
        let code = aido_mcp::server::CallError::ArgumentsTooLarge.code();
        return refused(&session, &body.primitive, code, message).await;
    }
    let action = match Action::from_tool_call(&body.primitive, arguments) {
        Ok(a) => a,
        Err(e) => return refused(&session, &body.primitive, e.code(), e.to_string()).await,
    };
    let hooks = Hooks {
        cancel: shared.cancel.child_token(),
        // W3C trace context: the caller's span is the parent of the action's.
        trace_parent,
        transport: Some("tcp"),
        ..Hooks::default()
    };
    let result = session.run(action, hooks).await;
    axum::Json(answer(&session, result)).into_response()
}

/// A call that never became an action: journaled as rejected, answered with its code.
async fn refused(session: &Session, primitive: &str, code: &str, message: String) -> Response {
    let seq = session.reject(primitive, code, &message).await;
    axum::Json(json!({
        "ok": false, "session": session.id().to_string(), "seq": seq,
        "code": code, "message": message,
    }))
    .into_response()
}

#[derive(Deserialize)]
pub(crate) struct EventsQuery {
    session: Option<String>,
}

fn record_event(id: String, json: &str) -> Event {
    Event::default().id(id).event("record").data(json)
}

pub(crate) async fn get_events(
    State(shared): State<Shared>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Response {
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned);
    let (tx, rx) = mpsc::channel::<Event>(32);
    // Subscribed before the backlog is read, so nothing falls between the two.
    let live = shared.feed.subscribe();
    match query.session {
        Some(text) => {
            let Some(session) = SessionId::parse(&text) else {
                return HttpError::SessionIdInvalid(text).into_response();
            };
            let after = match last.as_deref().map(str::parse::<u64>) {
                None => 0,
                Some(Ok(seq)) => seq,
                Some(Err(_)) => {
                    return HttpError::LastEventIdInvalid(last.unwrap_or_default()).into_response();
                }
            };
            tokio::spawn(one_session(shared.clone(), session, after, live, tx));
        }
        None => {
            let resume = match last.as_deref() {
                None => None,
                Some(id) => match id
                    .split_once('-')
                    .and_then(|(e, n)| Some((e.to_owned(), n.parse::<u64>().ok()?)))
                {
                    Some(parsed) => Some(parsed),
                    None => return HttpError::LastEventIdInvalid(id.to_owned()).into_response(),
                },
            };
            tokio::spawn(everything(shared.clone(), resume, live, tx));
        }
    }
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(shared.keep_alive))
        .into_response()
}

/// Every record from now on (or after a resumed id). Notices only say that something new
/// is in the ring; the entries are read from it, so a stream that falls behind further than
/// the ring reaches gets `event: gap` and goes on from the newest entry.
async fn everything(
    shared: Shared,
    resume: Option<(String, u64)>,
    mut live: broadcast::Receiver<Notice>,
    tx: mpsc::Sender<Event>,
) {
    let feed = shared.feed.clone();
    let epoch = feed.epoch().to_owned();
    let id = |e: &Entry| format!("{epoch}-{}", e.n);
    let gap = |message: &str| {
        let data = json!({"code": "events_gap", "message": message});
        Event::default().event("gap").data(data.to_string())
    };
    let mut sent = feed.last();
    if let Some((their_epoch, n)) = resume {
        match (their_epoch == epoch).then(|| feed.since(n)).flatten() {
            Some(entries) => {
                sent = n;
                for e in entries {
                    sent = e.n;
                    if tx.send(record_event(id(&e), &e.json)).await.is_err() {
                        return;
                    }
                }
            }
            None => {
                let message = "records were written that this stream can no longer replay: read the sessions you follow with /events?session=ID";
                if tx.send(gap(message)).await.is_err() {
                    return;
                }
            }
        }
    }
    loop {
        let next = tokio::select! {
            next = live.recv() => next,
            () = shared.cancel.cancelled() => return,
        };
        match next {
            Ok(notice) if notice.n <= sent => {}
            // A new entry, or notices missed (a client that stopped reading): what the ring
            // holds after the last one sent.
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => match feed.since(sent) {
                Some(entries) => {
                    for e in entries {
                        sent = e.n;
                        if tx.send(record_event(id(&e), &e.json)).await.is_err() {
                            return;
                        }
                    }
                }
                None => {
                    sent = feed.last();
                    if tx
                        .send(gap("this stream fell too far behind"))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            },
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Read `session` from the journal after `after`, sending each record; the last seq sent.
async fn catch_up(
    shared: &Shared,
    session: SessionId,
    mut after: u64,
    tx: &mpsc::Sender<Event>,
) -> Option<u64> {
    loop {
        let journal = shared.feed.journal().clone();
        let batch = tokio::task::spawn_blocking(move || {
            journal.records(session, after + 1, None, 256, false)
        })
        .await
        .ok()?;
        let records = match batch {
            Ok(r) => r,
            Err(e) => {
                let error = json!({"code": e.code(), "message": e.to_string()});
                let _ = tx
                    .send(Event::default().event("error").data(error.to_string()))
                    .await;
                return None;
            }
        };
        if records.is_empty() {
            return Some(after);
        }
        for r in records {
            after = r.seq;
            let json = crate::record_json(&r).to_string();
            tx.send(record_event(r.seq.to_string(), &json)).await.ok()?;
        }
    }
}

async fn one_session(
    shared: Shared,
    session: SessionId,
    after: u64,
    mut live: broadcast::Receiver<Notice>,
    tx: mpsc::Sender<Event>,
) {
    let Some(mut sent) = catch_up(&shared, session, after, &tx).await else {
        return;
    };
    loop {
        let next = tokio::select! {
            next = live.recv() => next,
            () = shared.cancel.cancelled() => return,
        };
        match next {
            Ok(notice) if notice.session == session && notice.seq > sent => {
                // The next record, while the ring still holds it; else (something between
                // was inserted before this stream subscribed, or the ring moved on) from the
                // journal, in order.
                let entry = (notice.seq == sent + 1)
                    .then(|| shared.feed.entry(notice.n))
                    .flatten();
                let Some(entry) = entry else {
                    match catch_up(&shared, session, sent, &tx).await {
                        Some(s) => sent = s,
                        None => return,
                    }
                    continue;
                };
                sent = entry.seq;
                if tx
                    .send(record_event(entry.seq.to_string(), &entry.json))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => {
                match catch_up(&shared, session, sent, &tx).await {
                    Some(s) => sent = s,
                    None => return,
                }
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}
