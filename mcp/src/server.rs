// Logging notifications are part of protocol 2025-11-25, which aido speaks; rmcp marks them
// deprecated for a later protocol revision (SEP-2577).
#![allow(deprecated)]

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use aido_actions::Action;
use aido_actors::{
    Asker, ConfirmAnswer, Confirmer, Elicited, Hooks, Progress, Ran, RunError, Runtime, Session,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitationAction, ElicitationSchema, ErrorData as McpError, Implementation,
    InitializeRequestParams, InitializeResult, ListToolsResult, LoggingLevel,
    LoggingMessageNotificationParam, MetaObject, PaginatedRequestParams, ProgressNotificationParam,
    ProgressToken, ProtocolVersion, ServerConfig, SetLevelRequestParams, Tool,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

pub(crate) use crate::place::Place;
pub use crate::versions::{
    HTTP_PROTOCOL_VERSIONS, HTTP_SESSION_ENDED, STATELESS_FROM, STDIO_PROTOCOL_VERSIONS,
};

/// Whether the request is of revision 2026-07-28 or later (stateless, `_meta` per request).
pub(crate) fn modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= STATELESS_FROM)
}

/// How long a client may keep a tool list that nothing in this process can change (no defined
/// functions or custom primitives are given): an hour. The list is built once per process and
/// fixed per endpoint; only a restart with another config changes it, and a restarted stdio
/// server is a new connection whose client lists again.
pub const LIST_TTL_MS_FIXED: u64 = 3_600_000;

/// How long a client may keep a tool list that defined functions can change: a minute. A
/// client holding a `subscriptions/listen` stream hears of a change at once
/// (`tools_list_changed`); one that does not sees a new function within a minute, and can call
/// it by name before (a call of a defined function never depends on the list).
pub const LIST_TTL_MS_DEFINED: u64 = 60_000;

/// The aido MCP server for one connection.
#[derive(Clone)]
pub struct AidoServer {
    runtime: Arc<Runtime>,
    pub(crate) place: Arc<Place>,
    /// Over HTTP: the places of 2026-07-28 requests, by bearer and endpoint.
    stateless: Option<Arc<crate::place::Stateless>>,
    tools: Arc<Vec<Tool>>,
    level: Arc<Mutex<LoggingLevel>>,
    /// The protocol revisions this transport serves.
    versions: &'static [ProtocolVersion],
    /// Over HTTP: closes the aido session when the MCP session's last handle goes.
    closer: Option<Arc<Closer>>,
    /// The capability grant token the session runs under, if any.
    grant: Option<Arc<str>>,
    /// The transport's name in telemetry (OpenTelemetry `network.transport`).
    transport: &'static str,
    /// The primitives this server lists and accepts (`[mcp]`).
    enabled: Arc<std::collections::BTreeSet<&'static str>>,
    /// The downstream toolsets and tools `[mcp]` names (all of them when it gives
    /// `downstream_call`).
    downstream: Arc<std::collections::BTreeSet<String>>,
    /// Over HTTP, an endpoint `/mcp/x/TOOLSETS` narrows them for its session (at `initialize`;
    /// never wider than `enabled`).
    narrowed: Arc<std::sync::OnceLock<std::collections::BTreeSet<&'static str>>>,
    /// Set once the client's MCP roots were followed after `initialized` (or it has none):
    /// a call waits for it (at most [`ROOTS_WAIT`]), so it runs where the client is.
    roots_followed: Arc<tokio::sync::watch::Sender<bool>>,
    #[cfg(feature = "conformance")]
    fixture: crate::conformance::Fixture,
}

/// How long the client may take to list its roots, and a call to wait for that.
const ROOTS_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The local path of a `file://` root URI.
fn root_path(uri: &str) -> Option<std::path::PathBuf> {
    url::Url::parse(uri)
        .ok()
        .filter(|url| url.scheme() == "file")
        .and_then(|url| url.to_file_path().ok())
}

/// Ends an HTTP connection's aido session once rmcp drops its handler: the session expired,
/// the client sent DELETE, or the server is shutting down. The close is journaled on
/// `tracker`, which the server waits for before it stops the runtime.
struct Closer {
    session: Arc<OnceCell<Session>>,
    /// Why it ended, as the record says: set to the signal at shutdown.
    reason: Arc<Mutex<String>>,
    tracker: tokio_util::task::TaskTracker,
    /// Counts as a task of `tracker` while the handler lives, so waiting on the tracker
    /// waits for the sessions rmcp has not dropped yet, and for their closes.
    _alive: tokio_util::task::task_tracker::TaskTrackerToken,
}

impl Drop for Closer {
    fn drop(&mut self) {
        if let Some(session) = self.session.get().cloned() {
            let reason = self
                .reason
                .lock()
                .map(|r| r.clone())
                .unwrap_or_else(|_| HTTP_SESSION_ENDED.to_owned());
            self.tracker.spawn(async move {
                session.close(&reason).await;
            });
        }
    }
}

/// The tools the runtime's `[mcp]` gives a client, and their names: made once by a surface
/// that makes a server per session or per request (`aido serve`), not again for each.
pub(crate) struct Given {
    tools: Arc<Vec<Tool>>,
    enabled: Arc<std::collections::BTreeSet<&'static str>>,
    downstream: Arc<std::collections::BTreeSet<String>>,
}

impl Given {
    pub(crate) fn of(runtime: &Runtime) -> Self {
        // Checked when the config was loaded; were it not, nothing is given (never all).
        let config = runtime.policy().config();
        let (enabled, downstream) = config.mcp.given(&config.downstream).unwrap_or_default();
        let enabled: std::collections::BTreeSet<&'static str> = enabled.into_iter().collect();
        let tools = crate::tools::tools()
            .iter()
            .filter(|tool| enabled.contains(tool.name.as_ref()))
            .cloned()
            .collect();
        Self {
            tools: Arc::new(tools),
            enabled: Arc::new(enabled),
            downstream: Arc::new(downstream),
        }
    }
}

impl AidoServer {
    /// A server over a started runtime. The session opens at `initialize`.
    pub fn new(runtime: Arc<Runtime>) -> Self {
        let given = Given::of(&runtime);
        Self::with_given(runtime, &given)
    }

    fn with_given(runtime: Arc<Runtime>, given: &Given) -> Self {
        Self {
            place: Arc::new(Place::new(&runtime)),
            stateless: None,
            runtime,
            tools: given.tools.clone(),
            enabled: given.enabled.clone(),
            downstream: given.downstream.clone(),
            narrowed: Arc::default(),
            // Until the client sets a level, only refusals and failures are sent.
            level: Arc::new(Mutex::new(LoggingLevel::Notice)),
            versions: STDIO_PROTOCOL_VERSIONS,
            closer: None,
            grant: None,
            transport: "pipe",
            roots_followed: Arc::new(tokio::sync::watch::Sender::new(false)),
            #[cfg(feature = "conformance")]
            fixture: crate::conformance::Fixture::default(),
        }
    }

    /// This server's session runs under the capability grant `token` names.
    pub fn with_grant(mut self, token: Option<String>) -> Self {
        self.grant = token.map(Arc::from);
        self
    }

    /// A server for one MCP session over streamable HTTP: it serves
    /// [`HTTP_PROTOCOL_VERSIONS`] and journals the end of its aido session on `tracker`.
    /// `reason` is what the session's last record will say; the server changes it at shutdown.
    pub(crate) fn for_http(
        runtime: Arc<Runtime>,
        given: &Given,
        tracker: tokio_util::task::TaskTracker,
        reason: Arc<Mutex<String>>,
        stateless: Arc<crate::place::Stateless>,
    ) -> Self {
        let mut server = Self::with_given(runtime, given);
        server.versions = HTTP_PROTOCOL_VERSIONS;
        server.transport = "tcp";
        server.stateless = Some(stateless);
        server.closer = Some(Arc::new(Closer {
            session: server.place.session.clone(),
            reason,
            _alive: tracker.token(),
            tracker,
        }));
        server
    }

    /// The grant the request runs under: over HTTP the one it was authenticated with
    /// ([`crate::place::GrantBearer`]); over stdio, the one the process was started with.
    fn bearer(&self, context: &RequestContext<RoleServer>) -> Option<Arc<str>> {
        let bearer = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<crate::place::GrantBearer>())
            .map(|g| g.0.clone());
        self.grant.clone().or(bearer)
    }

    /// Where the request runs: the connection's own place, or over HTTP for a 2026-07-28
    /// request, the place of its bearer and endpoint.
    fn place(&self, context: &RequestContext<RoleServer>) -> Arc<Place> {
        match &self.stateless {
            Some(stateless) if modern(context) => {
                let endpoint = context
                    .extensions
                    .get::<http::request::Parts>()
                    .map(|parts| parts.uri.path().to_owned())
                    .unwrap_or_default();
                stateless.place(&self.runtime, self.bearer(context), endpoint)
            }
            _ => self.place.clone(),
        }
    }

    /// The session, opened on first use if the client skipped straight to a call (as a
    /// 2026-07-28 client always does: the client named is the request's `clientInfo`).
    async fn session(
        &self,
        client: Option<String>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Session, McpError> {
        let client = client.or_else(|| {
            context
                .meta
                .client_info()
                .map(|info| format!("{} {}", info.name, info.version))
        });
        self.place(context)
            .session
            .get_or_try_init(|| async {
                match self.bearer(context) {
                    Some(token) => {
                        let token = token.to_string();
                        self.runtime.open_session_granted(client, token).await
                    }
                    None => self.runtime.open_session(client).await,
                }
            })
            .await
            .cloned()
            .map_err(|e| McpError::internal_error(e.to_string(), Some(json!({"code": e.code()}))))
    }

    /// Whether this session may list and call `primitive`.
    /// Whether this server gives the downstream tool `name` (namespaced): all of them with
    /// `downstream_call`, else those `[mcp]` names by tool or by their entry's toolset. An
    /// endpoint that narrows the toolsets gives them only with `downstream_call`.
    fn gives_downstream(&self, name: &str) -> bool {
        if self.gives("downstream_call") {
            return true;
        }
        if self.narrowed.get().is_some() {
            return false;
        }
        let server = name.split_once("__").map_or("", |(server, _)| server);
        self.downstream.contains(name)
            || self
                .runtime
                .policy()
                .config()
                .downstream
                .iter()
                .any(|entry| entry.name == server && self.downstream.contains(entry.toolset()))
    }

    fn gives(&self, primitive: &str) -> bool {
        self.enabled.contains(primitive)
            && self
                .narrowed
                .get()
                .is_none_or(|narrowed| narrowed.contains(primitive))
    }

    /// Over HTTP, the toolsets `/mcp/x/TOOLSETS` (nested under `/mcp`, so `/x/...` here) gives
    /// within the server's own; `None` elsewhere. An unknown toolset is refused.
    fn endpoint_toolsets(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<std::collections::BTreeSet<&'static str>>, McpError> {
        let path = context
            .extensions
            .get::<http::request::Parts>()
            .map(|parts| parts.uri.path().to_owned());
        let Some(wanted) = path.as_deref().and_then(|path| path.strip_prefix("/x/")) else {
            return Ok(None);
        };
        let names = wanted.split(',').filter(|name| !name.is_empty());
        let asked = aido_actions::toolsets::resolve(names).map_err(|message| {
            McpError::invalid_params(
                message,
                Some(json!({"code": CallError::ToolNotEnabled.code()})),
            )
        })?;
        Ok(Some(
            asked
                .into_iter()
                .filter(|name| self.enabled.contains(name))
                .collect(),
        ))
    }

    /// A 2026-07-28 request carries its endpoint with it: this server (made for the one
    /// request) is narrowed to it. Legacy sessions were narrowed at `initialize`.
    fn narrow_stateless(&self, context: &RequestContext<RoleServer>) -> Result<(), McpError> {
        if modern(context)
            && self.narrowed.get().is_none()
            && let Some(narrowed) = self.endpoint_toolsets(context)?
        {
            let _ = self.narrowed.set(narrowed);
        }
        Ok(())
    }

    /// The cache hints of a list for a 2026-07-28 request (none for older revisions, whose
    /// lists stay as they were): see [`LIST_TTL_MS_FIXED`] and [`LIST_TTL_MS_DEFINED`]. The
    /// scope is private when the list can vary by who asks: over HTTP (a grant narrows it)
    /// and under a grant on stdio; public otherwise (a stdio server's list is its config's).
    fn cache_hints(&self, defined: bool) -> (u64, rmcp::model::CacheScope) {
        let ttl = if defined {
            LIST_TTL_MS_DEFINED
        } else {
            LIST_TTL_MS_FIXED
        };
        let scope = if self.stateless.is_some() || self.grant.is_some() {
            rmcp::model::CacheScope::Private
        } else {
            rmcp::model::CacheScope::Public
        };
        (ttl, scope)
    }

    /// Whether the client declared MCP roots at `initialize`.
    fn client_has_roots(peer: &Peer<RoleServer>) -> bool {
        peer.peer_info()
            .is_some_and(|info| info.capabilities.roots.is_some())
    }

    /// The client's first `file://` root becomes the session's working directory when it lies
    /// inside a write root (as the directory aido was started in would); otherwise the client
    /// is told why it was not taken. Journaled as `workdir_changed`.
    async fn follow_roots(&self, peer: &Peer<RoleServer>) {
        let Some(session) = self.place.session.get() else {
            return;
        };
        let roots = match tokio::time::timeout(ROOTS_WAIT, peer.list_roots()).await {
            Ok(Ok(listed)) => listed.roots,
            Ok(Err(error)) => {
                tracing::warn!(%error, "the client's roots could not be listed");
                return;
            }
            Err(_) => {
                tracing::warn!("the client did not list its roots in time");
                return;
            }
        };
        let Some(root) = roots.iter().find_map(|root| root_path(&root.uri)) else {
            return;
        };
        match session.set_workdir(&root, "mcp_roots").await {
            Ok(Some(dir)) => tracing::info!(dir = %dir.display(), "working directory from the client's roots"),
            Ok(None) => self.log(
                peer,
                LoggingLevel::Warning,
                json!({
                    "message": format!(
                        "the client's root {} is not a directory inside a write root ([paths] write): relative paths stay at {}",
                        root.display(),
                        session.cwd().display()
                    ),
                }),
            ),
            Err(failure) => tracing::error!(code = %failure.code, "the working directory change could not be journaled"),
        }
    }

    fn log(&self, peer: &Peer<RoleServer>, level: LoggingLevel, data: Value) {
        let wanted = self
            .level
            .lock()
            .map(|l| *l)
            .unwrap_or(LoggingLevel::Notice);
        if severity(level) < severity(wanted) {
            return;
        }
        send_log(peer, level, data);
    }

    /// The session's result as MCP content.
    fn to_result(result: Result<Ran, RunError>) -> CallToolResult {
        match result {
            Ok(ran) => {
                let structured = match ran.outcome.output {
                    Value::Object(_) => ran.outcome.output,
                    other => json!({"value": other}),
                };
                let mut content = vec![ContentBlock::text(ran.outcome.text)];
                content.extend(
                    ran.outcome
                        .images
                        .into_iter()
                        .map(|i| ContentBlock::image(i.base64, i.mime)),
                );
                // A command killed at its timeout ran (its output so far and the changes it
                // made are the result, journaled), but it did not finish: the agent is told
                // with an error result and a code, the rest of the result beside them.
                let timed_out = structured["timed_out"] == json!(true);
                let mut structured = structured;
                let mut r = if timed_out {
                    let message = "the command was killed at its timeout (timeout_ms); its \
                                   output so far and the file changes it made are in the result";
                    let code = ResultError::CommandTimedOut.code();
                    structured["code"] = json!(code);
                    structured["message"] = json!(message);
                    content.insert(0, ContentBlock::text(format!("[{code}] {message}")));
                    CallToolResult::error(content)
                } else {
                    CallToolResult::success(content)
                };
                r.structured_content = Some(structured);
                r.meta = Some(seq_meta(Some(ran.seq)));
                r
            }
            Err(e) => {
                let mut structured = json!({"code": e.failure.code, "message": e.failure.message});
                // A refusal names the setting that decides it.
                let setting = e
                    .gate
                    .and_then(|_| aido_actions::DenyCode::from_code(&e.failure.code))
                    .map(aido_actions::DenyCode::setting);
                if let Some(gate) = e.gate {
                    structured["gate"] = json!(gate);
                    structured["reason"] = json!(e.failure.message);
                }
                if let Some(setting) = setting {
                    structured["setting"] = json!(setting);
                }
                // Refusals name their leaf directly; a composite that failed while running
                // names it in its details. Either way the agent finds it at the top.
                let leaf = e.leaf.clone().or_else(|| {
                    e.failure
                        .details
                        .as_ref()
                        .and_then(|d| d["leaf"].as_str())
                        .map(str::to_owned)
                });
                if let Some(leaf) = leaf {
                    structured["leaf"] = json!(leaf);
                }
                // A refusal's details only repeat its gate and leaf.
                if let Some(details) = e.failure.details.filter(|_| e.gate.is_none()) {
                    structured["details"] = details;
                }
                let text = match e.gate {
                    Some(gate) => format!(
                        "denied by {gate} [{}]: {} (setting: {})",
                        e.failure.code,
                        e.failure.message,
                        setting.unwrap_or("none")
                    ),
                    None => format!("[{}] {}", e.failure.code, e.failure.message),
                };
                let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
                r.structured_content = Some(structured);
                r.meta = Some(seq_meta(e.seq));
                r
            }
        }
    }
}

/// Why a tools/call never became an action, beside the parser's own errors.
#[derive(Debug)]
pub enum CallError {
    /// The arguments are larger than `argument_bytes_max`.
    ArgumentsTooLarge,
    /// A tool (or a step of a composite) outside the toolsets this server gives its client.
    ToolNotEnabled,
}

aido_actions::coded!(CallError {
    ArgumentsTooLarge => "arguments_too_large",
    ToolNotEnabled => "tool_not_enabled",
});

/// The refusal of a call of `tool` that names (or steps into) a tool outside the server's
/// toolsets, journaled as a rejected call.
async fn not_enabled(session: &Session, tool: &str, message: String) -> CallToolResponse {
    let code = CallError::ToolNotEnabled.code();
    let seq = session.reject(tool, code, &message).await;
    input_error(code, message, seq).into()
}

/// Why `name` may not be called here, naming its toolset and the settings.
fn not_enabled_message(name: &str, at: &str) -> String {
    let set = aido_actions::toolsets::toolset_of(name).unwrap_or("none");
    format!(
        "{name}{at} is not among the tools this server gives its client (it is in the {set} toolset; [mcp] toolsets and tools, or aido mcp --toolsets / --tools, give it)"
    )
}

/// Why an action that ran is still an `isError` result.
#[derive(Debug)]
pub enum ResultError {
    /// A command was killed at its timeout: its result is beside the code.
    CommandTimedOut,
}

aido_actions::coded!(ResultError {
    CommandTimedOut => "command_timed_out",
});

fn seq_meta(seq: Option<u64>) -> MetaObject {
    let mut meta = MetaObject::default();
    if let Some(seq) = seq {
        meta.0.insert("aido/seq".into(), json!(seq));
    }
    meta
}

/// Send one `notifications/message` (logger `aido`) without waiting for it.
fn send_log(peer: &Peer<RoleServer>, level: LoggingLevel, data: Value) {
    let peer = peer.clone();
    tokio::spawn(async move {
        let param = LoggingMessageNotificationParam::new(level, data).with_logger("aido");
        let _ = peer.notify_logging_message(param).await;
    });
}

fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

fn input_error(code: &str, message: String, seq: Option<u64>) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(format!("[{code}] {message}"))]);
    r.structured_content = Some(json!({"code": code, "message": message}));
    r.meta = Some(seq_meta(seq));
    r
}

/// Asks the human through MCP elicitation (form mode, one boolean).
struct Elicit(Peer<RoleServer>);

/// Ask `params` as a form elicitation, waiting at most `timeout` (rmcp then withdraws it).
///
/// # Cancel safety
/// Dropped before the answer (another surface answered the question first), the request is
/// withdrawn: the client is sent `notifications/cancelled`, and an answer it sends anyway finds
/// nobody waiting and is ignored.
async fn elicit_form(
    peer: &Peer<RoleServer>,
    params: ElicitRequestParams,
    timeout: Option<std::time::Duration>,
) -> Result<rmcp::model::ElicitResult, rmcp::ServiceError> {
    let request =
        rmcp::model::ServerRequest::ElicitRequest(rmcp::model::ElicitRequest::new(params));
    let mut options = rmcp::service::PeerRequestOptions::no_options();
    options.timeout = timeout;
    let handle = peer.send_request_with_option(request, options).await?;
    let mut withdraw = Withdraw(Some((peer.clone(), handle.id.clone())));
    let answered = handle.await_response().await;
    // Answered, timed out (rmcp withdrew it) or failed: nothing is left to withdraw.
    withdraw.0 = None;
    match answered? {
        rmcp::model::ClientResult::ElicitResult(result) => Ok(result),
        _ => Err(rmcp::ServiceError::UnexpectedResponse),
    }
}

/// Withdraws an elicitation request still waiting when it is dropped.
struct Withdraw(Option<(Peer<RoleServer>, rmcp::model::RequestId)>);

impl Drop for Withdraw {
    fn drop(&mut self) {
        let Some((peer, id)) = self.0.take() else {
            return;
        };
        tokio::spawn(async move {
            let reason = "the question was answered elsewhere, or is no longer waited for";
            let param = rmcp::model::CancelledNotificationParam::new(Some(id), Some(reason.into()));
            let _ = peer.notify_cancelled(param).await;
        });
    }
}

impl Confirmer for Elicit {
    fn confirm(&self, prompt: String) -> Pin<Box<dyn Future<Output = ConfirmAnswer> + Send>> {
        let peer = self.0.clone();
        Box::pin(async move {
            let can_ask = peer
                .peer_info()
                .is_some_and(|info| info.capabilities.elicitation.is_some());
            if !can_ask {
                return ConfirmAnswer::Unavailable;
            }
            let schema = match ElicitationSchema::builder()
                .required_bool("approve")
                .build()
            {
                Ok(s) => s,
                Err(_) => return ConfirmAnswer::Unavailable,
            };
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: prompt,
                requested_schema: schema,
            };
            match elicit_form(&peer, params, None).await {
                Ok(result) => match result.action {
                    ElicitationAction::Accept => {
                        let approve = result
                            .content
                            .as_ref()
                            .and_then(|c| c.get("approve"))
                            .and_then(Value::as_bool);
                        if approve == Some(true) {
                            ConfirmAnswer::Approved
                        } else {
                            ConfirmAnswer::Declined
                        }
                    }
                    ElicitationAction::Decline => ConfirmAnswer::Declined,
                    ElicitationAction::Cancel => ConfirmAnswer::Cancelled,
                    // An answer this version does not know is not an approval.
                    _ => ConfirmAnswer::Declined,
                },
                Err(e) => {
                    tracing::warn!(error = %e, "elicitation failed");
                    ConfirmAnswer::Unavailable
                }
            }
        })
    }
}

/// Asks the ask primitives' questions through MCP elicitation (form mode). The request is
/// sent with the question's timeout, so rmcp withdraws it (`notifications/cancelled`) when
/// nobody answers in time.
impl Asker for Elicit {
    fn can_ask(&self) -> bool {
        self.0
            .supported_elicitation_modes()
            .contains(&rmcp::service::ElicitationMode::Form)
    }

    fn ask(
        &self,
        message: String,
        schema: Value,
        timeout: std::time::Duration,
    ) -> Pin<Box<dyn Future<Output = Elicited> + Send>> {
        let peer = self.0.clone();
        Box::pin(async move {
            let requested_schema = match schema {
                Value::Object(object) => match ElicitationSchema::from_json_schema(object) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "a question's form is not an elicitation schema");
                        return Elicited::Unavailable;
                    }
                },
                _ => return Elicited::Unavailable,
            };
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema,
            };
            match elicit_form(&peer, params, Some(timeout)).await {
                Ok(result) => match result.action {
                    ElicitationAction::Accept => {
                        Elicited::Accepted(result.content.unwrap_or(Value::Null))
                    }
                    ElicitationAction::Decline => Elicited::Declined,
                    ElicitationAction::Cancel => Elicited::Cancelled,
                    // An answer this version does not know is not an answer.
                    _ => Elicited::Declined,
                },
                Err(rmcp::ServiceError::Timeout { .. }) => Elicited::TimedOut,
                Err(e) => {
                    tracing::warn!(error = %e, "elicitation failed");
                    Elicited::Unavailable
                }
            }
        })
    }
}

/// Delivers a subscription's file changes as `notifications/message` (logger
/// `aido/events`, level info), whatever level the client set: subscribing asked for them.
/// Every client that takes server notifications shows these, and the batch travels in the
/// notification itself (`resources/updated` would carry only a URI to read back).
struct Events(Peer<RoleServer>);

/// The logger name of subscription notifications.
pub const EVENTS_LOGGER: &str = "aido/events";

impl aido_actors::Notifier for Events {
    fn notify(&self, batch: Value) {
        let peer = self.0.clone();
        tokio::spawn(async move {
            let param = LoggingMessageNotificationParam::new(LoggingLevel::Info, batch)
                .with_logger(EVENTS_LOGGER);
            // A client that went away has no one to tell; its session ends with it.
            let _ = peer.notify_logging_message(param).await;
        });
    }
}

/// Sends `notifications/progress` for the request's progress token.
struct Notify {
    peer: Peer<RoleServer>,
    token: ProgressToken,
}

impl Progress for Notify {
    fn report(&self, done: u64, total: u64, message: String) {
        let peer = self.peer.clone();
        let mut param = ProgressNotificationParam::new(self.token.clone(), done as f64);
        param.total = Some(total as f64);
        param.message = Some(message);
        tokio::spawn(async move {
            let _ = peer.notify_progress(param).await;
        });
    }
}

impl ServerHandler for AidoServer {
    fn get_info(&self) -> ServerConfig {
        #[cfg(not(feature = "conformance"))]
        let capabilities = rmcp::model::ServerCapabilities::builder()
            .enable_tools()
            // Defined functions and custom primitives come and go as tools.
            .enable_tool_list_changed()
            .enable_logging()
            // One resource, a place's subscription batches, for `subscriptions/listen`
            // (2026-07-28; `initialize` does not show it).
            .enable_resources()
            .enable_resources_subscribe()
            .build();
        #[cfg(feature = "conformance")]
        let capabilities = crate::conformance::capabilities();
        let mut info = InitializeResult::new(capabilities);
        info.protocol_version = ProtocolVersion::V_2025_11_25;
        info.server_info = Implementation::new("aido", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(
            "aido runs every action through a policy and an append-only journal. Denials come back as \
             isError results with a stable code, gate and reason: read them and adjust. Use simulate or \
             policy_check to look before leaping, pipeline to run several steps judged as one, and \
             session_history to see what you did."
                .into(),
        );
        info
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(self.versions)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        // `/mcp/x/coding` gives this session those toolsets, within the server's own.
        if let Some(narrowed) = self.endpoint_toolsets(&context)? {
            let _ = self.narrowed.set(narrowed);
        }
        let client = format!(
            "{} {}",
            request.client_info.name, request.client_info.version
        );
        self.session(Some(client), &context).await?;
        let result = self.negotiate_initialize(&request)?;
        // The events resource is read through 2026-07-28's `subscriptions/listen` only: a
        // client of an older revision is shown the capabilities it always was.
        #[cfg(not(feature = "conformance"))]
        let result = {
            let mut result = result;
            result.capabilities.resources = None;
            result
        };
        Ok(result)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if Self::client_has_roots(&context.peer) {
            self.follow_roots(&context.peer).await;
        }
        self.roots_followed.send_replace(true);
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.follow_roots(&context.peer).await;
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.narrow_stateless(&context)?;
        #[allow(unused_mut)]
        let mut tools = self.tools.as_ref().clone();
        // Defined functions and primitives are calls of call_function and call_primitive.
        let defined = self.gives("call_function") || self.gives("call_primitive");
        if defined {
            tools.extend(crate::tools::defined(&self.runtime));
        }
        // The downstream servers' tools, under their namespaced names: calls of downstream_call.
        if self.gives("downstream_call") || !self.downstream.is_empty() {
            tools.extend(
                self.runtime
                    .downstream_tools()
                    .await
                    .into_iter()
                    .filter_map(|tool| serde_json::from_value::<rmcp::model::Tool>(tool).ok())
                    .filter(|tool| self.gives_downstream(&tool.name)),
            );
        }
        if self.narrowed.get().is_some() {
            tools.retain(|tool| Action::class_of(&tool.name).is_none() || self.gives(&tool.name));
        }
        // A session under a capability grant is shown only the primitives the grant allows
        // (calling another is still refused by the policy's capabilities gate). A 2026-07-28
        // request opens its place's session to know the grant's scope.
        let session = if modern(&context) {
            Some(self.session(None, &context).await?)
        } else {
            self.place.session.get().cloned()
        };
        if let Some(scope) = session.as_ref().and_then(Session::capabilities) {
            let policy = self.runtime.policy();
            tools.retain(|tool| match Action::class_of(&tool.name) {
                Some(class) => scope.allows_primitive(&tool.name, class),
                // A downstream tool: as the capabilities gate judges its call.
                None if tool.name.contains("__") => {
                    let class = policy.downstream_class(&tool.name);
                    scope.allows_primitive("downstream_call", class)
                        || scope.allows_primitive(&tool.name, class)
                }
                None => true,
            });
        }
        #[cfg(feature = "conformance")]
        tools.extend(crate::conformance::tools());
        let listed = ListToolsResult::with_all_items(tools);
        if !modern(&context) {
            return Ok(listed);
        }
        let (ttl, scope) = self.cache_hints(defined);
        Ok(listed.with_ttl_ms(ttl).with_cache_scope(scope))
    }

    #[cfg(not(feature = "conformance"))]
    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, McpError> {
        let events = rmcp::model::Resource::new(crate::listen::EVENTS_URI, "events")
            .with_description(
                "this session's subscription batches (subscribe, watch_and_react), newest last; \
                 subscriptions/listen with this URI hears of each",
            )
            .with_mime_type("application/json");
        let listed = rmcp::model::ListResourcesResult::with_all_items(vec![events]);
        let (ttl, scope) = self.cache_hints(false);
        Ok(if modern(&context) {
            listed.with_ttl_ms(ttl).with_cache_scope(scope)
        } else {
            listed
        })
    }

    #[cfg(not(feature = "conformance"))]
    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
        self.read_events(request, &context).map(Into::into)
    }

    #[cfg(feature = "conformance")]
    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, McpError> {
        Ok(self.fixture.list_resources())
    }

    #[cfg(feature = "conformance")]
    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, McpError> {
        Ok(self.fixture.list_resource_templates())
    }

    #[cfg(feature = "conformance")]
    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
        self.fixture.read_resource(request).map(Into::into)
    }

    #[cfg(feature = "conformance")]
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.fixture.subscribe(request);
        Ok(())
    }

    #[cfg(feature = "conformance")]
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.fixture.unsubscribe(request);
        Ok(())
    }

    #[cfg(feature = "conformance")]
    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, McpError> {
        Ok(self.fixture.list_prompts())
    }

    #[cfg(feature = "conformance")]
    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, McpError> {
        self.fixture.get_prompt(request)
    }

    #[cfg(feature = "conformance")]
    async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, McpError> {
        self.fixture.complete(request)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if let Ok(mut level) = self.level.lock() {
            *level = request.level;
        }
        Ok(())
    }

    #[allow(clippy::too_many_lines)]
    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        #[cfg(feature = "conformance")]
        if crate::conformance::is_fixture_tool(&request.name) {
            let listeners = self.place(&context).listeners.clone();
            return self.fixture.call_tool(request, context, &listeners).await;
        }
        self.narrow_stateless(&context)?;
        let arguments = Value::Object(request.arguments.take().unwrap_or_default());
        // 2026-07-28: what a question's requestState is bound to (the grant, the tool, the
        // arguments), made once, before the arguments go to the action.
        let bound = modern(&context).then(|| {
            crate::mrtr::bound(self.bearer(&context).as_deref(), &request.name, &arguments)
        });
        if let (Some(bound), Some(state)) = (&bound, &request.request_state) {
            // A retry with the client's answer: the action that asked goes on.
            let place = self.place(&context);
            let outcome = place
                .pending
                .resume(state, request.input_responses.as_ref(), bound)
                .await?;
            return Ok(outcome.into());
        }
        let session = self.session(None, &context).await?;
        if Self::client_has_roots(&context.peer) {
            let mut followed = self.roots_followed.subscribe();
            let _ = tokio::time::timeout(ROOTS_WAIT, followed.wait_for(|done| *done)).await;
        }
        let limits = &self.runtime.policy().config().limits;
        let size = serde_json::to_vec(&arguments).map_or(0, |b| b.len()) as u64;
        if size > limits.argument_bytes_max {
            let message = format!(
                "the arguments are {size} bytes; the limit is {} (argument_bytes_max)",
                limits.argument_bytes_max
            );
            let code = CallError::ArgumentsTooLarge.code();
            let seq = session.reject(&request.name, code, &message).await;
            return Ok(input_error(code, message, seq).into());
        }
        // A tool outside the toolsets is refused by name, whatever its arguments.
        if Action::class_of(&request.name).is_some() && !self.gives(&request.name) {
            let message = not_enabled_message(&request.name, "");
            return Ok(not_enabled(&session, &request.name, message).await);
        }
        // A defined function or custom primitive is a tool of its own name (never a
        // built-in's: define refuses those names).
        // A downstream server's tool is one of its namespaced name (`server__tool`; no built-in
        // name holds `__`).
        let defined = match &arguments {
            Value::Object(args) if Action::class_of(&request.name).is_none() => self
                .runtime
                .defined_call(&request.name, args.clone())
                .or_else(|| self.runtime.downstream_call(&request.name, args)),
            _ => None,
        };
        let parsed = match defined {
            Some(action) => Ok(action),
            None => Action::from_tool_call(&request.name, arguments),
        };
        let action = match parsed {
            Ok(a) => a,
            Err(e) => {
                let seq = session
                    .reject(&request.name, e.code(), &e.to_string())
                    .await;
                if e.code() == "unknown_primitive" {
                    // MCP: an unknown tool is a protocol error, not a tool result.
                    return Err(McpError::invalid_params(
                        e.to_string(),
                        Some(json!({"code": e.code()})),
                    ));
                }
                return Ok(input_error(e.code(), e.to_string(), seq).into());
            }
        };
        // Nor can a composite's step (or a defined function) reach one.
        let outside = std::iter::once((String::new(), &action))
            .chain(action.leaves())
            .find(|(_, leaf)| match leaf {
                Action::DownstreamCall(call) => !self.gives_downstream(&call.tool),
                _ => !self.gives(leaf.primitive()),
            })
            .map(|(at, leaf)| {
                let at = if at.is_empty() {
                    at
                } else {
                    format!(" (at {at})")
                };
                not_enabled_message(leaf.primitive(), &at)
            });
        if let Some(message) = outside {
            return Ok(not_enabled(&session, &request.name, message).await);
        }
        let progress = context.meta.get_progress_token().map(|token| {
            Arc::new(Notify {
                peer: context.peer.clone(),
                token,
            }) as Arc<dyn Progress>
        });
        let hooks = Hooks {
            confirmer: Some(Arc::new(Elicit(context.peer.clone()))),
            asker: Some(Arc::new(Elicit(context.peer.clone()))),
            progress,
            cancel: context.ct.clone(),
            // W3C trace context (MCP `_meta.traceparent`): the parent of the action's span.
            trace_parent: context.meta.get_traceparent().map(str::to_owned),
            transport: Some(self.transport),
            notifier: Some(Arc::new(Events(context.peer.clone()))),
        };
        if let Some(bound) = bound {
            return self
                .run_modern(session, action, hooks, &context, &bound)
                .await;
        }
        let primitive = action.primitive();
        let result = session.run(action, hooks).await;
        let reply = Reply::Legacy(context.peer.clone());
        Ok(self.finish(primitive, result, &reply).into())
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, McpError> {
        // What it says (the revisions, the capabilities, the instructions) cannot change while
        // the process runs, and is the same for every bearer.
        Ok(rmcp::model::DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        )
        .with_ttl_ms(LIST_TTL_MS_FIXED)
        .with_cache_scope(rmcp::model::CacheScope::Public))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        let mut accepted = rmcp::model::SubscriptionFilter::default();
        accepted.tools_list_changed = requested.tools_list_changed;
        #[cfg(feature = "conformance")]
        {
            accepted.prompts_list_changed = requested.prompts_list_changed;
            accepted.resources_list_changed = requested.resources_list_changed;
        }
        accepted.resource_subscriptions = requested.resource_subscriptions.as_ref().map(|uris| {
            uris.iter()
                .filter(|uri| {
                    *uri == crate::listen::EVENTS_URI
                        || cfg!(feature = "conformance") && uri.starts_with("test://")
                })
                .cloned()
                .collect()
        });
        Some(accepted)
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), McpError> {
        let place = self.place(context.request_context());
        let id = context.sink().id().clone();
        if !place.listeners.add(context.sink().clone()) {
            return Err(McpError::invalid_request(
                format!(
                    "{} listen streams are open here already",
                    crate::listen::STREAMS_MAX
                ),
                None,
            ));
        }
        // The stream stays until the client cancels it or the server stops.
        context.cancelled().await;
        place.listeners.remove(&id);
        Ok(())
    }
}

/// Where a call's aftermath (its log line, a changed tool list) goes.
enum Reply {
    /// The legacy session's peer: `notifications/message` at the level the client set, and
    /// `tools/list_changed`.
    Legacy(Peer<RoleServer>),
    /// A 2026-07-28 request: log lines only when it asked (`_meta` logLevel), list changes to
    /// the place's listen streams.
    Modern {
        peer: Peer<RoleServer>,
        level: Option<LoggingLevel>,
        listeners: Arc<crate::listen::Listeners>,
    },
}

impl AidoServer {
    /// A call's result as MCP content, after its log line and, when a defined function came
    /// or went, the tool list's change.
    fn finish(
        &self,
        primitive: &'static str,
        result: Result<Ran, RunError>,
        reply: &Reply,
    ) -> CallToolResult {
        let (level, data) = match &result {
            Ok(ran) => (
                LoggingLevel::Info,
                json!({"seq": ran.seq, "primitive": primitive, "status": "completed"}),
            ),
            Err(e) => (
                LoggingLevel::Warning,
                json!({"seq": e.seq, "primitive": primitive, "status": if e.gate.is_some() { "denied" } else { "failed" }, "code": e.failure.code}),
            ),
        };
        let changed = result.is_ok() && crate::tools::changes_tools(primitive);
        match reply {
            Reply::Legacy(peer) => {
                self.log(peer, level, data);
                if changed {
                    // The tool list changed: clients that listen list it again (the static
                    // call_function and call_primitive stay for those that do not).
                    let peer = peer.clone();
                    tokio::spawn(async move {
                        if let Err(e) = peer.notify_tool_list_changed().await {
                            tracing::warn!(error = %e, "cannot send tools/list_changed");
                        }
                    });
                }
            }
            Reply::Modern {
                peer,
                level: wanted,
                listeners,
            } => {
                if wanted.is_some_and(|wanted| severity(level) >= severity(wanted)) {
                    send_log(peer, level, data);
                }
                if changed {
                    listeners.tools_changed();
                }
            }
        }
        Self::to_result(result)
    }

    /// Run a 2026-07-28 call in a task of its own, whose questions come back as
    /// `input_required` (see [`crate::mrtr`]); its subscription batches go to the place's
    /// listen streams.
    async fn run_modern(
        &self,
        session: Session,
        action: Action,
        mut hooks: Hooks,
        context: &RequestContext<RoleServer>,
        bound: &[u8],
    ) -> Result<CallToolResponse, McpError> {
        let place = self.place(context);
        let (steps_tx, steps) = tokio::sync::mpsc::channel(4);
        let can_ask = context
            .client_capabilities()
            .is_some_and(|caps| caps.elicitation.is_some());
        let asker = Arc::new(crate::mrtr::RoundAsker {
            steps: steps_tx.clone(),
            can_ask,
            confirm_wait: std::time::Duration::from_millis(
                self.runtime.policy().config().limits.confirm_timeout_ms,
            ),
        });
        hooks.confirmer = Some(asker.clone());
        hooks.asker = Some(asker);
        hooks.notifier = Some(Arc::new(crate::listen::ToListeners(
            place.listeners.clone(),
        )));
        // The action outlives this request when it asks: only the wait for its first step
        // ends with the request (then the action is cancelled too).
        let cancel = tokio_util::sync::CancellationToken::new();
        hooks.cancel = cancel.clone();
        let reply = Reply::Modern {
            peer: context.peer.clone(),
            level: context.meta.log_level(),
            listeners: place.listeners.clone(),
        };
        let server = self.clone();
        let primitive = action.primitive();
        tokio::spawn(async move {
            let result = session.run(action, hooks).await;
            let result = server.finish(primitive, result, &reply);
            // The request waiting on it may be gone (its client will find the round gone).
            let _ = steps_tx
                .send(crate::mrtr::Step::Done(Box::new(result)))
                .await;
        });
        tokio::select! {
            outcome = place.pending.next(steps, bound) => Ok(outcome?.into()),
            () = context.ct.cancelled() => {
                cancel.cancel();
                Err(McpError::internal_error("the request was cancelled", None))
            }
        }
    }
}

impl AidoServer {
    /// `resources/read` of [`crate::listen::EVENTS_URI`]: the batches the place kept. They
    /// change with every batch, so a 2026-07-28 client is told never to reuse the answer.
    #[cfg_attr(feature = "conformance", allow(dead_code))]
    fn read_events(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResult, McpError> {
        if request.uri != crate::listen::EVENTS_URI {
            return Err(McpError::resource_not_found(
                format!(
                    "no resource {}; aido serves {}",
                    request.uri,
                    crate::listen::EVENTS_URI
                ),
                Some(json!({"uri": request.uri})),
            ));
        }
        let kept = self.place(context).listeners.kept();
        let contents = rmcp::model::ResourceContents::TextResourceContents {
            uri: request.uri,
            mime_type: Some("application/json".into()),
            text: kept.to_string(),
            meta: None,
        };
        let read = rmcp::model::ReadResourceResult::new(vec![contents]);
        Ok(if modern(context) {
            read.with_ttl_ms(0)
                .with_cache_scope(rmcp::model::CacheScope::Private)
        } else {
            read
        })
    }
}

impl From<crate::mrtr::Outcome> for CallToolResponse {
    fn from(outcome: crate::mrtr::Outcome) -> Self {
        match outcome {
            crate::mrtr::Outcome::Done(result) => (*result).into(),
            crate::mrtr::Outcome::Asked(required) => required.into(),
        }
    }
}
