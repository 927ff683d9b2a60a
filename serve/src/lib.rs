//! `aido serve`: one HTTP listener (127.0.0.1 by default) with
//! - `/mcp`: MCP over streamable HTTP (rmcp's transport), the same [`aido_mcp::AidoServer`],
//!   primitives and journal as `aido mcp` on stdio, one aido session per MCP session;
//! - `/actions`: POST an action as JSON, get its result and seq (for frontends);
//! - `/events`: the journal as server-sent events, resumable by `Last-Event-ID`;
//! - `/metrics`: the runtime's metrics in the Prometheus text format, when telemetry gives
//!   them ([`Options::metrics`]), behind the same bearer token;
//! - `/mc/`: Mission Control, a page for people (its assets without the token, its data
//!   from `/mc/api/...` behind it; see [`mc`]);
//! - `/.well-known/oauth-protected-resource[/mcp]`: RFC 9728 metadata.
//!
//! Every connection is held to the listener's places and deadlines ([`listener`]: a whole
//! request within its deadline, a share per peer, slow clients give their places up first).
//! Every request passes, in order: its connection's phases and its body's deadline
//! ([`request`]: 408, or 400 for a body that cannot be read), the Host allowlist and the
//! Origin allowlist (403, against DNS rebinding and cross-site pages), the bearer token (401
//! with `WWW-Authenticate: Bearer resource_metadata=...`), a body-size cap (413). Every refusal is JSON with a stable `code`
//! ([`HttpError`]); rmcp's own plain-text refusals (unknown session 404, bad headers 400, ...)
//! are given codes on the way out. Shutdown is bounded: the streams are told to end, and
//! connections still open after `drain` are dropped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use aido_actors::Runtime;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// `/actions` and `/events`.
mod api;
/// The journal followed as it is written: the audit files and the event feed.
pub mod feed;
/// The connection places (a cap, a share per peer, slow clients give theirs up first) and
/// the deadlines of a request's phases.
pub mod listener;
/// Mission Control: the page at `/mc/` and its JSON endpoints.
pub mod mc;
/// The outermost request layer: phases, the body's deadline, a body that cannot be read.
mod request;
/// A person's rewind of a session: its preview and the rewind, under `/mc/api/sessions/ID`.
pub mod rewind;
/// The token file.
pub mod token;

pub use feed::Feed;

/// Why a request was refused before it reached a handler, or what a handler refused.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// No `Authorization: Bearer` token, or the wrong one.
    #[error("a valid bearer token is required (see the token file aido serve printed)")]
    Unauthorized,
    /// A capability grant's token that is not valid here: unknown, revoked or expired.
    #[error("the capability grant token is not valid: {0}")]
    GrantTokenInvalid(String),
    /// A grant's token on an endpoint only the operator's token may use.
    #[error(
        "{0} needs the operator's token (AIDO_HOME/serve/token); a capability grant's token reaches only /mcp and /actions"
    )]
    OperatorOnly(String),
    /// A session opened with another token (another grant, or the operator's).
    #[error(
        "session {0} was opened with another token; a grant's token reaches only its own sessions"
    )]
    SessionNotYours(String),
    /// The `Host` is not one this server answers to (DNS rebinding).
    #[error("the Host {0:?} is not allowed")]
    HostNotAllowed(String),
    /// A browser page from an origin that is not allowed.
    #[error("the Origin {0:?} is not allowed")]
    OriginNotAllowed(String),
    /// The body is larger than the cap.
    #[error("the request body is larger than {max} bytes")]
    TooLarge { max: usize },
    /// The request (head and body) did not arrive whole within the request deadline.
    #[error("the request did not arrive whole within {ms} ms of its first byte")]
    RequestTimeout { ms: u64 },
    /// The body could not be read: malformed chunking, or the connection broke.
    #[error("the request body could not be read: {0}")]
    BodyInvalid(String),
    /// `MCP-Protocol-Version` names a revision this server does not serve.
    #[error("MCP-Protocol-Version {0:?} is not served")]
    ProtocolVersion(String),
    /// The MCP session expired, was closed, or never existed: initialize again.
    #[error("{0}")]
    SessionNotFound(String),
    /// A request rmcp refused as malformed (a missing session id, a bad header, ...).
    #[error("{0}")]
    BadRequest(String),
    /// The `Accept` header does not allow what the endpoint sends.
    #[error("{0}")]
    NotAcceptable(String),
    /// The method is not served at this path.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// The body is not the media type the endpoint reads.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// Nothing is served at this path.
    #[error("nothing is served at {0}")]
    NotFound(String),
    /// The `/actions` body is not `{"primitive": ..., "arguments": {...}}`.
    #[error(
        "the action is not JSON of the form {{\"primitive\": NAME, \"arguments\": {{...}}}}: {0}"
    )]
    ActionInvalid(String),
    /// `/actions` named an API session this server does not hold.
    #[error("no API session {0} on this server (omit \"session\" to open one)")]
    ApiSessionUnknown(String),
    /// `/events?session=` is not a session id.
    #[error("{0:?} is not a session id (32 hex digits)")]
    SessionIdInvalid(String),
    /// `Last-Event-ID` is not an id this endpoint gives.
    #[error("Last-Event-ID {0:?} is not an id of this stream")]
    LastEventIdInvalid(String),
    /// Mission Control was asked for what this build has no family for.
    #[error("this aido was built without {0}")]
    NotBuilt(&'static str),
    /// `/mc/api/fleet/P/...` named no peer of `[fleet]`.
    #[error("no peer {0} in [fleet] (see /mc/api/fleet)")]
    PeerUnknown(usize),
    /// A peer could not be asked, or did not answer.
    #[error("{0}")]
    PeerFailed(String),
}

// `events_gap` is the code of an `/events` gap event's data, not an HTTP error; `serve_busy`
// and `serve_peer_busy` are answered by the listener (listener.rs) before there is a request;
// the `mc_` codes are Mission Control's refusals made in place (mc.rs, rewind.rs).
aido_actions::coded!(HttpError {
    @also ["events_gap", "serve_busy", "serve_peer_busy", "mc_read_failed", "mc_session_unknown", "mc_thumbnail_failed", "mc_discovery_invalid", "mc_record_unknown", "mc_rewind_invalid"]
    Unauthorized => "unauthorized",
    GrantTokenInvalid => "serve_grant_token_invalid",
    OperatorOnly => "serve_operator_only",
    SessionNotYours => "serve_session_not_yours",
    HostNotAllowed => "host_not_allowed",
    OriginNotAllowed => "origin_not_allowed",
    TooLarge => "request_too_large",
    RequestTimeout => "request_timeout",
    BodyInvalid => "request_body_invalid",
    ProtocolVersion => "protocol_version_unsupported",
    SessionNotFound => "session_not_found",
    BadRequest => "bad_request",
    NotAcceptable => "not_acceptable",
    MethodNotAllowed => "method_not_allowed",
    UnsupportedMediaType => "unsupported_media_type",
    NotFound => "not_found",
    ActionInvalid => "action_invalid",
    ApiSessionUnknown => "api_session_unknown",
    SessionIdInvalid => "session_id_invalid",
    LastEventIdInvalid => "last_event_id_invalid",
    NotBuilt => "mc_not_built",
    PeerUnknown => "mc_peer_unknown",
    PeerFailed => "mc_peer_failed",
});

impl HttpError {
    /// The HTTP status it is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Unauthorized | Self::GrantTokenInvalid(_) => StatusCode::UNAUTHORIZED,
            Self::OperatorOnly(_) | Self::SessionNotYours(_) => StatusCode::FORBIDDEN,
            Self::HostNotAllowed(_) | Self::OriginNotAllowed(_) => StatusCode::FORBIDDEN,
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::RequestTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::ProtocolVersion(_)
            | Self::BodyInvalid(_)
            | Self::BadRequest(_)
            | Self::ActionInvalid(_)
            | Self::SessionIdInvalid(_)
            | Self::LastEventIdInvalid(_) => StatusCode::BAD_REQUEST,
            Self::SessionNotFound(_)
            | Self::NotFound(_)
            | Self::ApiSessionUnknown(_)
            | Self::NotBuilt(_)
            | Self::PeerUnknown(_) => StatusCode::NOT_FOUND,
            Self::PeerFailed(_) => StatusCode::BAD_GATEWAY,
            Self::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let mut body = json!({"code": self.code(), "message": self.to_string()});
        match &self {
            Self::TooLarge { max } => body["max"] = json!(max),
            Self::RequestTimeout { ms } => body["ms"] = json!(ms),
            Self::ProtocolVersion(_) => {
                body["supported"] = json!(
                    aido_mcp::HTTP_PROTOCOL_VERSIONS
                        .iter()
                        .map(|v| v.as_str())
                        .collect::<Vec<_>>()
                )
            }
            _ => {}
        }
        (self.status(), axum::Json(body)).into_response()
    }
}

/// How requests are authenticated.
///
/// Beside the operator's token, a capability grant's token (`aidog_...`, minted with
/// `grant_mint` or `aido grant mint`) is accepted on `/mcp` and `/actions`: the sessions it
/// opens run under that grant, it reaches no session opened with another token, and every
/// other endpoint refuses it (403 `serve_operator_only`). A revoked or expired grant's token
/// gets 401 like a wrong token.
#[derive(Clone, Debug)]
pub enum Auth {
    /// `Authorization: Bearer TOKEN` on every request but the RFC 9728 metadata.
    Token(String),
    /// No token (only for a loopback listener; the conformance suite sends none).
    Off,
}

/// What `aido serve` listens on and how.
#[derive(Clone, Debug)]
pub struct Options {
    /// The address to bind (`127.0.0.1:7411` by default; port 0 for any).
    pub listen: SocketAddr,
    /// `Host` names (or `name:port`) accepted beside the loopback names and the bound address.
    pub allowed_hosts: Vec<String>,
    /// Origins (`scheme://host:port`) accepted beside this server's own.
    pub allowed_origins: Vec<String>,
    /// The bearer token, or none.
    pub auth: Auth,
    /// An MCP session idle this long is closed (its id then gets 404).
    pub session_idle: Duration,
    /// The largest request body, in bytes.
    pub body_bytes_max: usize,
    /// How long shutdown waits for open connections before dropping them.
    pub drain: Duration,
    /// SSE keep-alive comments on open streams.
    pub keep_alive: Duration,
    /// What `/metrics` answers (the Prometheus text format); `None`: `/metrics` is not served.
    pub metrics: Option<Metrics>,
    /// Connections held at once, in all and per peer, and the deadlines of a request's
    /// phases (see [`listener`]).
    pub connections: listener::Limits,
    /// This runtime's `service.instance.id`, which Mission Control shows.
    pub instance: Option<String>,
    /// The other runtimes Mission Control shows.
    pub fleet: mc::Fleet,
}

/// Renders the metrics in the Prometheus text exposition format (aido-telemetry gives one).
#[derive(Clone)]
pub struct Metrics(pub Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Options {
    /// The defaults for `runtime`: 127.0.0.1:7411, a 300 s session idle, the stdio transport's
    /// request cap, a 3 s drain.
    pub fn new(runtime: &Runtime, auth: Auth) -> Self {
        let argument_bytes_max = runtime.policy().config().limits.argument_bytes_max;
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7411)),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            auth,
            session_idle: Duration::from_secs(300),
            body_bytes_max: usize::try_from(aido_mcp::request_bytes_max(argument_bytes_max))
                .unwrap_or(usize::MAX),
            drain: Duration::from_secs(3),
            keep_alive: Duration::from_secs(15),
            metrics: None,
            connections: listener::Limits::DEFAULT,
            instance: None,
            fleet: mc::Fleet::default(),
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// No token on a listener other processes can reach.
    #[error("--no-auth is only allowed on a loopback address, not {0}")]
    NoAuthNotLoopback(SocketAddr),
}

aido_actions::coded!(StartError {
    Bind => "serve_bind_failed",
    NoAuthNotLoopback => "serve_no_auth_not_loopback",
});

/// State every handler shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) feed: Feed,
    pub(crate) auth: Auth,
    pub(crate) hosts: Arc<Vec<String>>,
    pub(crate) origins: Arc<Vec<String>>,
    pub(crate) body_bytes_max: usize,
    pub(crate) base: Arc<String>,
    pub(crate) cancel: CancellationToken,
    pub(crate) keep_alive: Duration,
    pub(crate) api: Arc<api::ApiSessions>,
    pub(crate) metrics: Option<Metrics>,
    pub(crate) instance: Option<Arc<String>>,
    pub(crate) fleet: Arc<mc::Fleet>,
    /// Which grant (or the operator: `None`) opened each MCP session.
    pub(crate) owners: Arc<std::sync::Mutex<Owners>>,
    /// The MCP requests being answered (at most one per connection answering).
    pub(crate) in_flight: InFlightIds,
}

/// Who a request was authenticated as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Principal {
    /// The operator's token (or none, with `--no-auth`).
    Operator,
    /// A capability grant's token.
    Grant { id: String },
}

impl Principal {
    /// The grant id, `None` for the operator.
    pub(crate) fn grant(&self) -> Option<&str> {
        match self {
            Self::Operator => None,
            Self::Grant { id } => Some(id),
        }
    }

    /// Whether it may use a session opened by `owner` (a grant id, or `None` for the
    /// operator): the operator may use any; a grant only its own.
    pub(crate) fn may_use(&self, owner: Option<&str>) -> bool {
        match self {
            Self::Operator => true,
            Self::Grant { id } => owner == Some(id.as_str()),
        }
    }
}

/// MCP session id -> (the grant that opened it, last seen).
#[derive(Default)]
pub(crate) struct Owners {
    map: std::collections::HashMap<String, (Option<String>, std::time::Instant)>,
}

/// More MCP sessions than this and the least recently seen owners are forgotten (their
/// sessions then serve only the operator).
const OWNERS_MAX: usize = 65_536;

impl Owners {
    fn owner(&mut self, session: &str) -> Option<Option<String>> {
        let entry = self.map.get_mut(session)?;
        entry.1 = std::time::Instant::now();
        Some(entry.0.clone())
    }

    fn insert(&mut self, session: String, owner: Option<String>) {
        if self.map.len() >= OWNERS_MAX
            && let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, (_, seen))| *seen)
                .map(|(k, _)| k.clone())
        {
            self.map.remove(&oldest);
        }
        self.map.insert(session, (owner, std::time::Instant::now()));
    }
}

/// A running server.
pub struct Serving {
    /// The bound address.
    pub addr: SocketAddr,
    /// `http://ADDR`.
    pub base: String,
    cancel: CancellationToken,
    tracker: TaskTracker,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    drain: Duration,
    api: Arc<api::ApiSessions>,
    end_reason: Arc<std::sync::Mutex<String>>,
}

impl Serving {
    /// `http://ADDR/mcp`.
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// Stop: end every stream and session, wait at most `drain` for connections, journal the
    /// end of every aido session it opened, with `reason`.
    pub async fn shutdown(self, reason: &str) {
        tracing::info!(%reason, "aido serve shutting down");
        if let Ok(mut r) = self.end_reason.lock() {
            *r = reason.to_owned();
        }
        self.cancel.cancel();
        let mut task = self.task;
        match tokio::time::timeout(self.drain, &mut task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "the listener failed"),
            Ok(Err(e)) => tracing::warn!(error = %e, "the server task failed"),
            Err(_) => {
                tracing::warn!(drain = ?self.drain, "connections still open after the drain; dropping them");
                task.abort();
            }
        }
        self.api.close_all(reason).await;
        self.tracker.close();
        if tokio::time::timeout(self.drain, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("some sessions' ends were not journaled within the drain");
        }
    }
}

/// Bind and serve until [`Serving::shutdown`].
#[allow(clippy::too_many_lines)]
pub async fn start(
    runtime: Arc<Runtime>,
    feed: Feed,
    options: Options,
) -> Result<Serving, StartError> {
    if matches!(options.auth, Auth::Off) && !options.listen.ip().is_loopback() {
        return Err(StartError::NoAuthNotLoopback(options.listen));
    }
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: options.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: options.listen,
        source,
    })?;
    let base = format!("http://{addr}");
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    hosts.push(addr.ip().to_string());
    hosts.extend(options.allowed_hosts.iter().map(|h| h.to_ascii_lowercase()));
    let port = addr.port();
    let mut origins: Vec<String> = vec![
        format!("http://localhost:{port}"),
        format!("http://127.0.0.1:{port}"),
        format!("http://[::1]:{port}"),
        base.clone(),
    ];
    origins.extend(
        options
            .allowed_origins
            .iter()
            .map(|o| o.trim_end_matches('/').to_ascii_lowercase()),
    );
    origins.dedup();
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    let end_reason = Arc::new(std::sync::Mutex::new(
        aido_mcp::server::HTTP_SESSION_ENDED.to_owned(),
    ));
    let mcp = aido_mcp::http::service(
        runtime.clone(),
        &aido_mcp::http::McpHttp {
            allowed_hosts: hosts.clone(),
            allowed_origins: origins.clone(),
            session_idle: options.session_idle,
            body_bytes_max: options.body_bytes_max,
            sse_keep_alive: options.keep_alive,
            cancel: cancel.child_token(),
            tracker: tracker.clone(),
            end_reason: end_reason.clone(),
        },
    );
    let api_sessions = Arc::new(api::ApiSessions::default());
    let shared = Shared {
        runtime,
        feed,
        auth: options.auth.clone(),
        hosts: Arc::new(hosts),
        origins: Arc::new(origins),
        body_bytes_max: options.body_bytes_max,
        base: Arc::new(base.clone()),
        cancel: cancel.clone(),
        keep_alive: options.keep_alive,
        api: api_sessions.clone(),
        metrics: options.metrics.clone(),
        owners: Arc::new(std::sync::Mutex::new(Owners::default())),
        in_flight: InFlightIds::default(),
        instance: options.instance.clone().map(Arc::new),
        fleet: Arc::new(options.fleet.clone()),
    };
    let mcp_routes = Router::new()
        .nest_service("/mcp", mcp)
        .layer(middleware::from_fn_with_state(
            shared.clone(),
            judge_message,
        ))
        .layer(middleware::from_fn_with_state(
            shared.clone(),
            bind_mcp_session,
        ))
        .layer(middleware::from_fn(protocol_version))
        .layer(middleware::from_fn_with_state(
            shared.clone(),
            code_rmcp_refusals,
        ));
    let app = Router::new()
        .route(
            "/actions",
            axum::routing::post(api::post_action).fallback(method_not_allowed),
        )
        .route(
            "/events",
            axum::routing::get(api::get_events).fallback(method_not_allowed),
        )
        .route(
            "/metrics",
            axum::routing::get(metrics).fallback(method_not_allowed),
        )
        .merge(mc::api())
        .route(
            "/mc/api/sessions/{id}/rewind",
            axum::routing::get(rewind::preview).post(rewind::run),
        )
        .merge(mcp_routes)
        .layer(middleware::from_fn_with_state(shared.clone(), authenticate))
        .merge(mc::assets())
        .route(
            "/.well-known/oauth-protected-resource",
            axum::routing::get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            axum::routing::get(resource_metadata),
        )
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(shared.clone(), body_cap))
        .layer(middleware::from_fn_with_state(
            shared.clone(),
            host_and_origin,
        ))
        .layer(middleware::from_fn(request::phases))
        .with_state(shared);
    let stop = cancel.clone();
    let listener = listener::Bounded::new(listener, options.connections);
    let app = app.into_make_service_with_connect_info::<listener::Connection>();
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
    });
    tracing::info!(%base, "aido serve listening");
    Ok(Serving {
        addr,
        base,
        cancel,
        tracker,
        task,
        drain: options.drain,
        api: api_sessions,
        end_reason,
    })
}

/// The host part of a `Host` header (no port, no IPv6 brackets), lowercased.
fn host_name(host: &str) -> String {
    let host = host.trim().to_ascii_lowercase();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("").to_owned();
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name.to_owned(),
        _ => host,
    }
}

fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let lower = host.trim().to_ascii_lowercase();
    let name = host_name(host);
    allowed
        .iter()
        .any(|a| *a == name || *a == lower || a.trim_matches(['[', ']']) == name)
}

/// 403 for a Host or Origin that is not allowed. A request without Origin (not a browser)
/// passes the Origin check; one without Host is refused.
async fn host_and_origin(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.to_string()));
    match host {
        Some(h) if host_allowed(&h, &shared.hosts) => {}
        other => return closing(HttpError::HostNotAllowed(other.unwrap_or_default())),
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("").trim_end_matches('/');
        if !shared
            .origins
            .iter()
            .any(|o| o.eq_ignore_ascii_case(origin))
        {
            return closing(HttpError::OriginNotAllowed(origin.to_owned()));
        }
    }
    next.run(request).await
}

/// A refusal sent before the request's body was read: the connection closes after it (the
/// unread body would otherwise be taken for the next request, so hyper drops the connection
/// anyway), and `Connection: close` says so, so a client does not send its next request on
/// a connection that is going away.
fn closing(error: HttpError) -> Response {
    let mut response = error.into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// 413 for a declared `Content-Length` over the cap; bodies without one are capped as they
/// are read (by rmcp for `/mcp`, by `/actions` itself).
async fn body_cap(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > shared.body_bytes_max as u64) {
        let response = closing(HttpError::TooLarge {
            max: shared.body_bytes_max,
        });
        // Read (and drop) what the client is still sending, within bounds, so it reads this
        // answer instead of a reset; the connection is closed after it either way.
        if n <= DRAIN_BYTES_MAX {
            let _ = tokio::time::timeout(
                std::time::Duration::from_millis(DRAIN_MS),
                axum::body::to_bytes(request.into_body(), DRAIN_BYTES_MAX as usize),
            )
            .await;
        }
        return response;
    }
    next.run(request).await
}

/// Most bytes of a refused body read before answering 413 (larger ones are cut off).
const DRAIN_BYTES_MAX: u64 = 16 << 20;
/// Longest a refused body is read for.
const DRAIN_MS: u64 = 5_000;

/// The RFC 9728 metadata URL for this server.
fn metadata_url(shared: &Shared) -> String {
    format!("{}/.well-known/oauth-protected-resource/mcp", shared.base)
}

/// 401 without a valid token, with where to read about it (RFC 9728 section 5.1). The
/// request goes on with its [`Principal`] (and, for a grant, the
/// [`aido_mcp::http::GrantBearer`] its MCP session opens under) in its extensions.
async fn authenticate(State(shared): State<Shared>, mut request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|v| v.trim().to_owned());
    let operator = match (&shared.auth, &given) {
        (Auth::Off, _) => true,
        (Auth::Token(token), Some(g)) => constant_time_eq(g.as_bytes(), token.as_bytes()),
        (Auth::Token(_), None) => false,
    };
    let is_grant = given
        .as_deref()
        .is_some_and(|g| g.starts_with(aido_actors::GRANT_TOKEN_PREFIX));
    let principal = if is_grant {
        let token = given.unwrap_or_default();
        match shared.runtime.grant_live(&token).await {
            Ok(id) => {
                request
                    .extensions_mut()
                    .insert(aido_mcp::http::GrantBearer(Arc::from(token.as_str())));
                Principal::Grant { id }
            }
            Err(e) => {
                return challenge(
                    &shared,
                    HttpError::GrantTokenInvalid(format!("[{}] {e}", e.code())),
                );
            }
        }
    } else if operator {
        Principal::Operator
    } else {
        return challenge(&shared, HttpError::Unauthorized);
    };
    if let Principal::Grant { .. } = principal {
        let path = request.uri().path();
        if !(path == "/mcp" || path.starts_with("/mcp/") || path == "/actions") {
            return HttpError::OperatorOnly(path.to_owned()).into_response();
        }
    }
    request.extensions_mut().insert(principal);
    next.run(request).await
}

/// `error` with `WWW-Authenticate: Bearer resource_metadata=...`.
fn challenge(shared: &Shared, error: HttpError) -> Response {
    let mut response = error.into_response();
    let challenge = format!(
        "Bearer resource_metadata=\"{}\", error=\"invalid_token\"",
        metadata_url(shared)
    );
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// An MCP session serves only the token that opened it (the operator's serves all): the
/// owner is remembered from the `initialize` answer's `Mcp-Session-Id`. A grant's request on
/// a session whose owner is not known here is refused too (fail closed).
async fn bind_mcp_session(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    let principal = request
        .extensions()
        .get::<Principal>()
        .cloned()
        .unwrap_or(Principal::Operator);
    let session = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session {
        let owner = shared
            .owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .owner(id);
        let allowed = match &owner {
            Some(owner) => principal.may_use(owner.as_deref()),
            None => principal == Principal::Operator,
        };
        if !allowed {
            return HttpError::SessionNotYours(id.clone()).into_response();
        }
    }
    let response = next.run(request).await;
    if session.is_none()
        && let Some(id) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
    {
        shared
            .owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned(), principal.grant().map(str::to_owned));
    }
    response
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// RFC 9728 protected-resource metadata. aido is its own authority: the token comes from
/// the token file, so no `authorization_servers` are named.
async fn resource_metadata(State(shared): State<Shared>) -> Response {
    axum::Json(json!({
        "resource": format!("{}/mcp", shared.base),
        "resource_name": "aido",
        "bearer_methods_supported": ["header"],
    }))
    .into_response()
}

/// 400 for an `MCP-Protocol-Version` this server does not serve (rmcp would accept any
/// revision it knows). A POSTed JSON body is judged in [`judge_message`], which reads it: a
/// 2026-07-28 request names its revision in `_meta` too, and rmcp answers an unserved one
/// there with the revision's own error (-32022, the served revisions in `data.supported`).
async fn protocol_version(request: Request, next: Next) -> Response {
    let judged_later = request.method() == axum::http::Method::POST && is_json(&request);
    if !judged_later && let Some(refusal) = unserved_revision(request.headers()) {
        return refusal;
    }
    next.run(request).await
}

/// The refusal of a request whose `MCP-Protocol-Version` this server does not serve.
fn unserved_revision(headers: &axum::http::HeaderMap) -> Option<Response> {
    let v = headers.get("mcp-protocol-version")?;
    let v = v.to_str().unwrap_or("");
    let served = aido_mcp::HTTP_PROTOCOL_VERSIONS
        .iter()
        .any(|s| s.as_str() == v);
    (!served).then(|| HttpError::ProtocolVersion(v.to_owned()).into_response())
}

fn is_json(request: &Request) -> bool {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// A POSTed JSON body that is not a JSON-RPC message aido's server reads gets 400 and the
/// same coded JSON-RPC error as on stdio (`parse_error`, `batch_not_supported`,
/// `invalid_params`, ...), instead of rmcp's bare 415. A request whose id is still being
/// answered in its session gets 400 `request_id_in_flight` (rmcp would run both and leave one
/// stream without its answer): an id is in flight from its POST until its answer's stream
/// ends, or the client drops it.
async fn judge_message(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    if request.method() != axum::http::Method::POST || !is_json(&request) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, shared.body_bytes_max).await {
        Ok(b) => b,
        Err(_) => {
            return HttpError::TooLarge {
                max: shared.body_bytes_max,
            }
            .into_response();
        }
    };
    let (asked, stateless) = match aido_mcp::judge_body(&bytes, shared.body_bytes_max as u64) {
        aido_mcp::BodyVerdict::Pass { request, stateless } => (request, stateless),
        aido_mcp::BodyVerdict::Reject { body, status } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
            return rpc_refusal_with(status, body);
        }
    };
    // A 2026-07-28 request has no session: rmcp serves it on its own (and checks its `_meta`
    // and headers); the header alone says so for a request whose `_meta` is missing.
    let stateless = stateless
        || parts
            .headers
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v >= aido_mcp::server::STATELESS_FROM);
    if !stateless && let Some(refusal) = unserved_revision(&parts.headers) {
        return refusal;
    }
    let session = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let in_flight = match (asked, session) {
        (Some((id, _)), Some(session)) => {
            match InFlight::enter(&shared.in_flight, session, id.to_string()) {
                Some(guard) => Some(guard),
                None => return rpc_refusal(aido_mcp::id_in_flight(&id)),
            }
        }
        // Without a session only `initialize` (and `ping`) are served, and 2026-07-28
        // requests, which belong to none.
        (Some((id, method)), None) if method != "initialize" && method != "ping" && !stateless => {
            return rpc_refusal(aido_mcp::not_initialized(
                &id,
                &method,
                aido_mcp::HTTP_PROTOCOL_VERSIONS,
            ));
        }
        _ => None,
    };
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    match in_flight {
        Some(guard) => request::hold_while_sent(response, guard),
        None => response,
    }
}

/// 400 with a coded JSON-RPC error response as the body.
fn rpc_refusal(error: Vec<u8>) -> Response {
    rpc_refusal_with(StatusCode::BAD_REQUEST, error)
}

/// `status` with a coded JSON-RPC error response as the body.
fn rpc_refusal_with(status: StatusCode, error: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], error).into_response()
}

/// Requests being answered, by MCP session and JSON-RPC id (as JSON text).
pub(crate) type InFlightIds = Arc<std::sync::Mutex<std::collections::HashSet<(String, String)>>>;

/// One request's id held in flight until dropped.
struct InFlight {
    ids: InFlightIds,
    key: (String, String),
}

impl InFlight {
    /// Hold `id` in `session`, or `None` if it is already held.
    fn enter(ids: &InFlightIds, session: String, id: String) -> Option<Self> {
        let key = (session, id);
        let fresh = ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone());
        fresh.then(|| Self {
            ids: ids.clone(),
            key,
        })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
    }
}

/// rmcp refuses in plain text; give those refusals aido's codes (the status is kept).
async fn code_rmcp_refusals(
    State(shared): State<Shared>,
    request: Request,
    next: Next,
) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/event-stream"));
    if !status.is_client_error() || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = match axum::body::to_bytes(body, 64 * 1024).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => String::new(),
    };
    let error = match status {
        StatusCode::NOT_FOUND => HttpError::SessionNotFound(if text.is_empty() {
            "the MCP session is gone: initialize again".into()
        } else {
            format!("{text}: initialize again")
        }),
        StatusCode::PAYLOAD_TOO_LARGE => HttpError::TooLarge {
            max: shared.body_bytes_max,
        },
        StatusCode::FORBIDDEN => HttpError::OriginNotAllowed(text),
        StatusCode::NOT_ACCEPTABLE => HttpError::NotAcceptable(text),
        StatusCode::METHOD_NOT_ALLOWED => HttpError::MethodNotAllowed(text),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => HttpError::UnsupportedMediaType(text),
        StatusCode::UNAUTHORIZED => HttpError::Unauthorized,
        _ => HttpError::BadRequest(text),
    };
    let mut coded = error.into_response();
    *coded.status_mut() = status;
    for (name, value) in parts.headers.iter() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            coded.headers_mut().insert(name.clone(), value.clone());
        }
    }
    coded
}

async fn not_found(request: Request<Body>) -> Response {
    HttpError::NotFound(request.uri().path().to_owned()).into_response()
}

async fn method_not_allowed(request: Request<Body>) -> Response {
    HttpError::MethodNotAllowed(format!(
        "{} is not served at {}",
        request.method(),
        request.uri().path()
    ))
    .into_response()
}

/// `/metrics`: the Prometheus text format, or 404 when telemetry gives no metrics.
async fn metrics(State(shared): State<Shared>, request: Request) -> Response {
    match &shared.metrics {
        Some(render) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            )],
            (render.0)(),
        )
            .into_response(),
        None => HttpError::NotFound(request.uri().path().to_owned()).into_response(),
    }
}

/// The JSON value of a record, its hash included.
pub fn record_json(record: &aido_journal::Record) -> Value {
    let mut value = serde_json::to_value(record).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.insert("hash".into(), Value::String(record.hash.clone()));
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole table: each error's code and status, and the codes given outside it.
    #[test]
    #[allow(clippy::too_many_lines)]
    fn http_error_codes_are_stable() {
        let table = [
            (HttpError::Unauthorized, "unauthorized", 401),
            (
                HttpError::GrantTokenInvalid(String::new()),
                "serve_grant_token_invalid",
                401,
            ),
            (
                HttpError::OperatorOnly(String::new()),
                "serve_operator_only",
                403,
            ),
            (
                HttpError::SessionNotYours(String::new()),
                "serve_session_not_yours",
                403,
            ),
            (
                HttpError::HostNotAllowed(String::new()),
                "host_not_allowed",
                403,
            ),
            (
                HttpError::OriginNotAllowed(String::new()),
                "origin_not_allowed",
                403,
            ),
            (HttpError::TooLarge { max: 1 }, "request_too_large", 413),
            (HttpError::RequestTimeout { ms: 1 }, "request_timeout", 408),
            (
                HttpError::BodyInvalid(String::new()),
                "request_body_invalid",
                400,
            ),
            (
                HttpError::ProtocolVersion(String::new()),
                "protocol_version_unsupported",
                400,
            ),
            (
                HttpError::SessionNotFound(String::new()),
                "session_not_found",
                404,
            ),
            (HttpError::BadRequest(String::new()), "bad_request", 400),
            (
                HttpError::NotAcceptable(String::new()),
                "not_acceptable",
                406,
            ),
            (
                HttpError::MethodNotAllowed(String::new()),
                "method_not_allowed",
                405,
            ),
            (
                HttpError::UnsupportedMediaType(String::new()),
                "unsupported_media_type",
                415,
            ),
            (HttpError::NotFound(String::new()), "not_found", 404),
            (
                HttpError::ActionInvalid(String::new()),
                "action_invalid",
                400,
            ),
            (
                HttpError::ApiSessionUnknown(String::new()),
                "api_session_unknown",
                404,
            ),
            (
                HttpError::SessionIdInvalid(String::new()),
                "session_id_invalid",
                400,
            ),
            (
                HttpError::LastEventIdInvalid(String::new()),
                "last_event_id_invalid",
                400,
            ),
            (HttpError::NotBuilt("x"), "mc_not_built", 404),
            (HttpError::PeerUnknown(0), "mc_peer_unknown", 404),
            (HttpError::PeerFailed(String::new()), "mc_peer_failed", 502),
        ];
        for (error, code, status) in &table {
            assert_eq!((error.code(), error.status().as_u16()), (*code, *status));
        }
        let given_elsewhere = [
            "events_gap",
            listener::BUSY_CODE,
            listener::PEER_BUSY_CODE,
            "mc_read_failed",
            "mc_session_unknown",
            "mc_thumbnail_failed",
            "mc_discovery_invalid",
            "mc_record_unknown",
            "mc_rewind_invalid",
        ];
        let all: Vec<&str> = table
            .iter()
            .map(|(_, code, _)| *code)
            .chain(given_elsewhere)
            .collect();
        assert_eq!(HttpError::CODES, all.as_slice());
    }
}
