//! The MCP server on streamable HTTP (rmcp's transport), for `aido serve`: one [`AidoServer`]
//! (one aido session) per MCP session, the Host and Origin allowlists set explicitly (rmcp
//! checks no Origin unless told), sessions that expire after `session_idle` (then 404, and a
//! client that initializes again gets a new session), and request bodies capped.
//!
//! A 2026-07-28 request has no session: rmcp serves each with a server of its own. Its aido
//! session, the questions waiting for its client and its listen streams live in a place shared
//! by every request of the same bearer (the operator, or one capability grant) on the same
//! endpoint ([`Stateless`]), so a client's calls are one session in the journal, a question
//! asked in one request is answered in the next, and a subscription made by one call reaches
//! the listen stream another holds. A place idle for `session_idle` (no request, no question
//! waiting, no stream open) is closed, its end journaled as an MCP session's is.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aido_actors::Runtime;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::AidoServer;
use crate::place::{Stateless, close};

pub use crate::place::GrantBearer;

/// How the MCP endpoint is served.
#[derive(Clone, Debug)]
pub struct McpHttp {
    /// `Host` values accepted (`name` for any port, or `name:port`).
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted (`scheme://host:port`); a request without `Origin` passes.
    /// Validation is on even when this is empty (then every `Origin` is refused).
    pub allowed_origins: Vec<String>,
    /// A session idle this long is closed; its id then gets 404.
    pub session_idle: Duration,
    /// The largest request body, in bytes (413 above it).
    pub body_bytes_max: usize,
    /// SSE keep-alive comments on open streams.
    pub sse_keep_alive: Duration,
    /// Cancelled at shutdown: every session's streams end.
    pub cancel: CancellationToken,
    /// Where sessions journal their end; wait on it before stopping the runtime.
    pub tracker: TaskTracker,
    /// What a session's end record says ([`crate::versions::HTTP_SESSION_ENDED`] until the
    /// server sets the reason it is stopping).
    pub end_reason: Arc<Mutex<String>>,
}

/// The tower service to mount at `/mcp`.
pub fn service(
    runtime: Arc<Runtime>,
    options: &McpHttp,
) -> StreamableHttpService<AidoServer, LocalSessionManager> {
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(options.allowed_hosts.clone())
        .with_allowed_origins(options.allowed_origins.clone())
        .enforce_origin_validation()
        .with_sse_keep_alive(Some(options.sse_keep_alive));
    config.max_request_body_bytes = options.body_bytes_max;
    config.cancellation_token = options.cancel.clone();
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(options.session_idle);
    let tracker = options.tracker.clone();
    let reason = options.end_reason.clone();
    let stateless = Arc::new(Stateless {
        places: Mutex::default(),
        idle: options.session_idle,
        over: tokio::sync::Notify::new(),
    });
    // Sweeps idle places while the server runs; at shutdown closes every place left. It is a
    // task of the tracker, which the server waits for before it stops the runtime.
    let (sweeper, cancel, end) = (stateless.clone(), options.cancel.clone(), reason.clone());
    let every =
        (options.session_idle / 2).clamp(Duration::from_millis(100), Duration::from_secs(30));
    tracker.spawn(async move {
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(every) => close(sweeper.take_idle(false), &end).await,
                () = sweeper.over.notified() => close(sweeper.take_idle(false), &end).await,
            }
        }
        close(sweeper.take_idle(true), &end).await;
    });
    let given = crate::server::Given::of(&runtime);
    StreamableHttpService::new(
        move || {
            Ok(AidoServer::for_http(
                runtime.clone(),
                &given,
                tracker.clone(),
                reason.clone(),
                stateless.clone(),
            ))
        },
        Arc::new(sessions),
        config,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::place::{Place, STATELESS_PLACES_MAX};
    use std::time::Instant;

    fn place() -> Arc<Place> {
        Arc::new(Place {
            session: Arc::default(),
            pending: crate::mrtr::Pending::new([1; crate::mrtr::KEY_BYTES]),
            listeners: Arc::default(),
        })
    }

    /// A place idle past `session_idle` is taken (its session then closed), one a request
    /// still holds is kept, every one goes at shutdown, and past the bound the longest idle go.
    #[test]
    fn idle_places_are_swept_and_held_ones_kept() {
        let stateless = Stateless {
            places: Mutex::default(),
            idle: Duration::ZERO,
            over: tokio::sync::Notify::new(),
        };
        let held = place();
        {
            let mut places = stateless.places.lock().unwrap();
            places.insert((None, "/".into()), (place(), Instant::now()));
            places.insert(
                (Some(Arc::from("grant")), "/".into()),
                (held.clone(), Instant::now()),
            );
        }
        assert_eq!(stateless.take_idle(false).len(), 1);
        assert_eq!(
            stateless.places.lock().unwrap().len(),
            1,
            "the held place stays"
        );
        assert_eq!(stateless.take_idle(true).len(), 1, "shutdown takes it too");
        let stateless = Stateless {
            places: Mutex::default(),
            idle: Duration::from_secs(3600),
            over: tokio::sync::Notify::new(),
        };
        let kept: Vec<Arc<Place>> = (0..STATELESS_PLACES_MAX + 3).map(|_| place()).collect();
        {
            let mut places = stateless.places.lock().unwrap();
            let start = Instant::now();
            for (i, place) in kept.iter().enumerate() {
                let used = start + Duration::from_millis(i as u64);
                places.insert((None, format!("/x/{i}")), (place.clone(), used));
            }
        }
        // Every place is held here (by `kept`), yet the bound holds: the oldest three go.
        let gone = stateless.take_idle(false);
        assert_eq!(gone.len(), 3);
        assert!(
            gone.iter()
                .all(|g| kept[..3].iter().any(|k| Arc::ptr_eq(g, k)))
        );
    }
}
