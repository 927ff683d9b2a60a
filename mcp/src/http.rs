//! The MCP server on streamable HTTP (rmcp's transport), for `aido serve`: one [`AidoServer`]
//! (one aido session) per MCP session, the Host and Origin allowlists set explicitly (rmcp
//! checks no Origin unless told), sessions that expire after `session_idle` (then 404, and a
//! client that initializes again gets a new session), and request bodies capped.

use std::sync::Arc;
use std::time::Duration;

use aido_actors::Runtime;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::AidoServer;

/// The capability grant token a request was authenticated with, put in the request's
/// extensions by the server in front (`aido serve`): the MCP session that request opens runs
/// under that grant, and [`crate::AidoServer`] refuses the session to requests with another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantBearer(pub Arc<str>);

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
    /// What a session's end record says ([`crate::server::HTTP_SESSION_ENDED`] until the
    /// server sets the reason it is stopping).
    pub end_reason: Arc<std::sync::Mutex<String>>,
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
    StreamableHttpService::new(
        move || {
            Ok(AidoServer::for_http(
                runtime.clone(),
                tracker.clone(),
                reason.clone(),
            ))
        },
        Arc::new(sessions),
        config,
    )
}
