//! One downstream MCP server, supervised: started (inside the sandbox, or over HTTP), its
//! tools listed, its tools called, a crash detected and answered, restarts within a budget.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aido_sandbox::{Profile, Sandbox};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientNotification, ClientRequest, JsonObject, RequestId,
    ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, RunningService, ServiceError};
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::time::Instant;

use crate::config::{DownstreamConfig, ToolFilter, Transport};
use crate::error::DownstreamError;
use crate::process::Process;
use crate::relay::{Calls, Relay};
use crate::tools::{DownstreamTool, namespace};
use crate::upstream::Upstream;

/// The largest message a downstream may send (one line on stdio, one response or event over
/// HTTP); a longer one closes its connection, as a crash.
pub const MESSAGE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// How long a crashed process is given to report its end, for the error's message.
const END_REPORT_WAIT_MS: u64 = 500;

/// A downstream MCP server and its supervision. Calls run concurrently; a (re)start holds
/// the others back until it is done. Dropping it shuts the server down (input closed, then
/// the tree killed).
pub struct Downstream {
    config: DownstreamConfig,
    sandbox: Sandbox,
    profile: Profile,
    filter: ToolFilter,
    calls: Arc<Calls>,
    state: tokio::sync::Mutex<State>,
}

#[derive(Default)]
struct State {
    connection: Option<Arc<Connection>>,
    /// Connections made so far.
    generation: u64,
    /// When it crashed (or failed to restart), within the budget's window.
    crashes: VecDeque<Instant>,
}

/// One live connection: the MCP client, the process behind it (stdio), its tools.
struct Connection {
    generation: u64,
    service: RunningService<RoleClient, Relay>,
    process: Option<Process>,
    /// The last list, filtered and namespaced.
    tools: Mutex<Arc<Vec<DownstreamTool>>>,
    /// Set when the downstream says its list changed: the next look at it lists again.
    tools_changed: Arc<AtomicBool>,
}

impl Connection {
    fn alive(&self) -> bool {
        !self.service.is_closed()
            && !self.service.peer().is_transport_closed()
            && self.process.as_ref().is_none_or(|p| p.ended().is_none())
    }
}

impl Downstream {
    /// Starts the downstream of `config` and lists its tools: a stdio server inside
    /// `sandbox`, confined by `profile` (by [`DownstreamConfig::profile`] when `None`); an
    /// HTTP server over rmcp's streamable HTTP client (the sandbox is not used).
    ///
    /// Fails closed: a sandbox that cannot be built is `downstream_sandbox_failed`, a
    /// command it cannot run `downstream_command_missing`; nothing ever runs unconfined.
    pub async fn start(
        config: DownstreamConfig,
        sandbox: Sandbox,
        profile: Option<Profile>,
    ) -> Result<Downstream, DownstreamError> {
        config.validate()?;
        let filter = config.tool_filter()?;
        let profile = profile.unwrap_or_else(|| config.profile());
        let downstream = Downstream {
            config,
            sandbox,
            profile,
            filter,
            calls: Arc::default(),
            state: tokio::sync::Mutex::default(),
        };
        let mut connection = downstream.connect().await?;
        connection.generation = 1;
        let mut state = downstream.state.lock().await;
        state.generation = 1;
        state.connection = Some(Arc::new(connection));
        drop(state);
        Ok(downstream)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Its configuration.
    pub fn config(&self) -> &DownstreamConfig {
        &self.config
    }

    /// Its tools as exposed (filtered by the entry's `tools`, namespaced), as listed by the
    /// current connection; restarts it first if it crashed (within the budget).
    pub async fn tools(&self) -> Result<Vec<DownstreamTool>, DownstreamError> {
        let connection = self.connection().await?;
        Ok(self.listed(&connection).await?.to_vec())
    }

    /// The host pid of the sandbox init its server runs under (`None` over HTTP, or while
    /// it is down). Killing it ends the server's whole tree.
    pub async fn pid(&self) -> Option<u32> {
        let state = self.state.lock().await;
        state.connection.as_ref()?.process.as_ref()?.pid()
    }

    /// Whether its server runs and its connection is open (a crash not yet seen by a call
    /// shows here as soon as the process has ended or the transport has closed).
    pub async fn running(&self) -> bool {
        let state = self.state.lock().await;
        state.connection.as_ref().is_some_and(|c| c.alive())
    }

    /// Shuts the server down now (its connection closed, its input closed, its tree killed
    /// after a grace); calls in flight end with `downstream_crashed`. The next call starts
    /// it again, not counted against the restart budget.
    pub async fn stop(&self) {
        let mut state = self.state.lock().await;
        if let Some(connection) = state.connection.take() {
            connection.service.cancellation_token().cancel();
        }
    }

    /// Calls the tool named `name` (its namespaced name) with `arguments`, within the entry's
    /// `call_timeout_ms`. The call's progress and elicitations go to `upstream`.
    ///
    /// The result is the downstream's whole `CallToolResult`, serializable for the journal.
    /// A result with `isError: true` is `downstream_tool_failed` (its text and the whole
    /// result kept); a JSON-RPC error is `downstream_refused` with its own code and message.
    /// A crash while the call runs is `downstream_crashed` (the call may or may not have
    /// taken effect) and the next call restarts the server, up to its restart budget
    /// (`downstream_unavailable` past it).
    ///
    /// # Cancel safety
    /// Dropping the future drops the request; the downstream is told to cancel it.
    pub async fn call(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        upstream: Arc<dyn Upstream>,
    ) -> Result<CallToolResult, DownstreamError> {
        let timeout = Duration::from_millis(self.config.call_timeout_ms);
        self.call_within(name, arguments, upstream, timeout).await
    }

    /// [`Downstream::call`] with a deadline of the caller's.
    pub async fn call_within(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        upstream: Arc<dyn Upstream>,
        timeout: Duration,
    ) -> Result<CallToolResult, DownstreamError> {
        let connection = self.connection().await?;
        let tools = self.listed(&connection).await?;
        let tool = tools.iter().find(|tool| tool.name == name).ok_or_else(|| {
            DownstreamError::ToolUnknown {
                server: self.config.name.clone(),
                name: name.to_owned(),
            }
        })?;
        let what = format!("tools/call {}", tool.original());
        let mut params = CallToolRequestParams::new(tool.original().to_owned());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let options = PeerRequestOptions::with_timeout(timeout);
        let peer = connection.service.peer().clone();
        let sent = self
            .calls
            .register(
                upstream,
                peer.send_request_with_option(request, options),
                |handle| handle.progress_token.clone(),
            )
            .await;
        let (handle, registered) = match sent {
            Ok(sent) => sent,
            Err(error) => return Err(self.failed(&connection, error, &what, timeout).await),
        };
        let mut abandoned = Abandoned {
            peer: Some(peer),
            id: handle.id.clone(),
        };
        let answer = handle.await_response().await;
        abandoned.peer = None;
        // rmcp hands each notification to a task of its own and the answer straight to us, so
        // the progress the downstream sent just before its answer may still be on its way:
        // one yield lets it through most of the time. What comes after the registration is
        // gone is dropped (the answer supersedes it).
        tokio::task::yield_now().await;
        drop(registered);
        match answer {
            Ok(ServerResult::CallToolResult(result)) => self.tool_result(tool, result),
            Ok(_) => Err(DownstreamError::Protocol {
                server: self.config.name.clone(),
                why: format!("{what} was not answered with a tool result"),
            }),
            Err(error) => Err(self.failed(&connection, error, &what, timeout).await),
        }
    }

    fn tool_result(
        &self,
        tool: &DownstreamTool,
        result: CallToolResult,
    ) -> Result<CallToolResult, DownstreamError> {
        if result.is_error != Some(true) {
            return Ok(result);
        }
        let message: Vec<&str> = result
            .content
            .iter()
            .filter_map(|content| content.as_text().map(|text| text.text.as_str()))
            .collect();
        Err(DownstreamError::ToolFailed {
            server: self.config.name.clone(),
            tool: tool.original().to_owned(),
            message: message.join("\n"),
            result: Box::new(result),
        })
    }

    /// The live connection, or a new one: a crash found here (between calls) is counted,
    /// and a restart must fit the budget.
    async fn connection(&self) -> Result<Arc<Connection>, DownstreamError> {
        let mut state = self.state.lock().await;
        if let Some(connection) = &state.connection {
            if connection.alive() {
                return Ok(Arc::clone(connection));
            }
            let why = connection.process.as_ref().and_then(Process::ended);
            let why = why.unwrap_or_else(|| "its connection closed".into());
            tracing::warn!(server = %self.config.name, %why, "downstream ended between calls");
            state.connection = None;
            state.crashes.push_back(Instant::now());
        }
        if !state.crashes.is_empty() {
            self.within_budget(&mut state)?;
        }
        state.generation += 1;
        match self.connect().await {
            Ok(mut connection) => {
                tracing::info!(
                    server = %self.config.name,
                    generation = state.generation,
                    crashes = state.crashes.len(),
                    "downstream restarted"
                );
                connection.generation = state.generation;
                let connection = Arc::new(connection);
                state.connection = Some(Arc::clone(&connection));
                Ok(connection)
            }
            Err(error) => {
                tracing::warn!(server = %self.config.name, code = error.code(), %error, "downstream restart failed");
                state.crashes.push_back(Instant::now());
                Err(error)
            }
        }
    }

    /// `downstream_unavailable` when the crashes within the window outnumber the restarts
    /// the budget allows.
    fn within_budget(&self, state: &mut State) -> Result<(), DownstreamError> {
        let budget = self.config.restarts;
        let window = Duration::from_secs(budget.window_secs);
        let now = Instant::now();
        while state
            .crashes
            .front()
            .is_some_and(|crash| now.duration_since(*crash) >= window)
        {
            state.crashes.pop_front();
        }
        if state.crashes.len() > budget.count as usize {
            return Err(DownstreamError::Unavailable {
                server: self.config.name.clone(),
                crashes: state.crashes.len(),
                window_secs: budget.window_secs,
            });
        }
        Ok(())
    }

    /// The error for a request that failed; a closed transport marks the connection crashed
    /// (once, whoever sees it first).
    async fn failed(
        &self,
        connection: &Connection,
        error: ServiceError,
        what: &str,
        timeout: Duration,
    ) -> DownstreamError {
        let server = self.config.name.clone();
        match error {
            ServiceError::McpError(error) => DownstreamError::Refused {
                server,
                what: what.to_owned(),
                rpc_code: error.code.0,
                message: error.message.into_owned(),
                data: error.data,
            },
            ServiceError::Timeout { .. } => DownstreamError::Timeout {
                server,
                what: what.to_owned(),
                timeout_ms: timeout.as_millis() as u64,
            },
            ServiceError::TransportClosed
            | ServiceError::TransportSend(_)
            | ServiceError::Cancelled { .. } => self.crashed(connection).await,
            error => DownstreamError::Protocol {
                server,
                why: format!("{what}: {error}"),
            },
        }
    }

    async fn crashed(&self, connection: &Connection) -> DownstreamError {
        let (why, stderr) = match &connection.process {
            Some(process) => (
                process
                    .wait_end(Duration::from_millis(END_REPORT_WAIT_MS))
                    .await,
                process.stderr_tail(),
            ),
            None => ("its connection closed".to_owned(), String::new()),
        };
        let mut state = self.state.lock().await;
        let current = state
            .connection
            .as_ref()
            .is_some_and(|live| live.generation == connection.generation);
        if current {
            tracing::warn!(server = %self.config.name, %why, %stderr, "downstream crashed");
            state.connection = None;
            state.crashes.push_back(Instant::now());
        }
        DownstreamError::Crashed {
            server: self.config.name.clone(),
            why,
            stderr,
        }
    }

    /// A new connection: the process or the HTTP transport, the handshake and the tool list,
    /// all within `start_timeout_ms`.
    async fn connect(&self) -> Result<Connection, DownstreamError> {
        let server = self.config.name.as_str();
        let tools_changed = Arc::new(AtomicBool::new(false));
        let relay = Relay {
            server: server.to_owned(),
            calls: Arc::clone(&self.calls),
            tools_changed: Arc::clone(&tools_changed),
        };
        let deadline = Duration::from_millis(self.config.start_timeout_ms);
        let (service, process) = match self.config.transport()? {
            Transport::Stdio { .. } => {
                let (service, process) = self.connect_stdio(relay, deadline).await?;
                (service, Some(process))
            }
            Transport::Http { url, token_file } => {
                let transport = crate::http::transport(server, url, token_file, MESSAGE_BYTES_MAX)?;
                let served = tokio::time::timeout(deadline, relay.serve(transport)).await;
                (self.served(served, None)?, None)
            }
        };
        let connection = Connection {
            generation: 0,
            service,
            process,
            tools: Mutex::default(),
            tools_changed,
        };
        // Not through `failed`: the state is held while a connection is made.
        let tools = self.list(&connection, deadline).await.map_err(|error| {
            DownstreamError::HandshakeFailed {
                server: server.to_owned(),
                why: format!("tools/list: {error}"),
                stderr: connection
                    .process
                    .as_ref()
                    .map(Process::stderr_tail)
                    .unwrap_or_default(),
            }
        })?;
        *lock(&connection.tools) = Arc::new(tools?);
        Ok(connection)
    }

    /// The process in the sandbox and the handshake over its standard output and input.
    async fn connect_stdio(
        &self,
        relay: Relay,
        deadline: Duration,
    ) -> Result<(RunningService<RoleClient, Relay>, Process), DownstreamError> {
        let server = self.config.name.as_str();
        let request = self
            .config
            .request()
            .ok_or_else(|| DownstreamError::Protocol {
                server: server.to_owned(),
                why: "a stdio downstream without a command".into(),
            })?;
        let (process, (stdout, stdin)) =
            Process::start(server, &self.sandbox, &self.profile, &request).await?;
        let transport = AsyncRwTransport::<RoleClient, _, _>::new(stdout, stdin)
            .with_max_line_length(MESSAGE_BYTES_MAX);
        let served = tokio::time::timeout(deadline, relay.serve(transport)).await;
        if let Ok(Err(_)) = &served {
            // Its standard error says why; give it a moment to be read.
            process
                .wait_end(Duration::from_millis(END_REPORT_WAIT_MS))
                .await;
        }
        let service = self.served(served, Some(&process))?;
        Ok((service, process))
    }

    /// The handshake's outcome as a service or a coded error.
    fn served<E: std::fmt::Display>(
        &self,
        served: Result<Result<RunningService<RoleClient, Relay>, E>, tokio::time::error::Elapsed>,
        process: Option<&Process>,
    ) -> Result<RunningService<RoleClient, Relay>, DownstreamError> {
        match served {
            Ok(Ok(service)) => Ok(service),
            Ok(Err(error)) => Err(DownstreamError::HandshakeFailed {
                server: self.config.name.clone(),
                why: error.to_string(),
                stderr: process.map(Process::stderr_tail).unwrap_or_default(),
            }),
            Err(_) => Err(DownstreamError::Timeout {
                server: self.config.name.clone(),
                what: "the MCP handshake".into(),
                timeout_ms: self.config.start_timeout_ms,
            }),
        }
    }

    /// The connection's tools, listed again first when the downstream said they changed.
    async fn listed(
        &self,
        connection: &Connection,
    ) -> Result<Arc<Vec<DownstreamTool>>, DownstreamError> {
        if connection.tools_changed.swap(false, Ordering::SeqCst) {
            let deadline = Duration::from_millis(self.config.start_timeout_ms);
            let listed = match self.list(connection, deadline).await {
                Ok(listed) => listed,
                Err(error) => {
                    connection.tools_changed.store(true, Ordering::SeqCst);
                    return Err(self.failed(connection, error, "tools/list", deadline).await);
                }
            };
            *lock(&connection.tools) = Arc::new(listed?);
        }
        Ok(Arc::clone(&lock(&connection.tools)))
    }

    /// The downstream's tools, filtered and namespaced (the outer error is the request's,
    /// the inner one the namespacing's).
    async fn list(
        &self,
        connection: &Connection,
        deadline: Duration,
    ) -> Result<Result<Vec<DownstreamTool>, DownstreamError>, ServiceError> {
        let listed = tokio::time::timeout(deadline, connection.service.peer().list_all_tools())
            .await
            .map_err(|_| ServiceError::Timeout { timeout: deadline })??;
        let admitted = listed
            .into_iter()
            .filter(|tool| self.filter.admits(&tool.name))
            .collect();
        Ok(namespace(
            &self.config.name,
            self.config.toolset(),
            admitted,
        ))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Tells the downstream to cancel a request whose caller went away (the call's future was
/// dropped before the answer came); disarmed by taking `peer` once the answer is in.
struct Abandoned {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let reason = Some("the caller abandoned the call".to_owned());
        let cancelled = CancelledNotificationParam::new(Some(self.id.clone()), reason);
        let notification =
            ClientNotification::CancelledNotification(CancelledNotification::new(cancelled));
        runtime.spawn(async move {
            let _ = peer.send_notification(notification).await;
        });
    }
}
