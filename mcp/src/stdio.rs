//! The stdio transport: newline-delimited JSON-RPC between the client and rmcp, where every
//! request gets exactly one answer.
//!
//! rmcp's own stdio transport drops what it cannot read without a word: a line that is not
//! JSON, not UTF-8 or nested too deep, and any line over its 16 MiB cap; a client waiting on
//! that request's id waits forever. This transport reads stdin itself, one line at a time with
//! a bounded buffer ([`request_bytes_max`]), and looks at each line with the streaming
//! [`Scan`] before anything parses it. A line it cannot pass on is answered here with a
//! JSON-RPC error carrying a stable `data.code` and, whenever the scan recovered it, the
//! request's own id; a rejected `tools/call` is journaled when there is a session. Lines that
//! are well-formed messages go to rmcp already parsed, through a channel.
//!
//! Two rules rmcp does not keep are kept here, each answered with a coded error:
//! - a request before `initialize` (other than `ping`) gets `not_initialized`, naming the
//!   revisions this server offers; a notification or response before it is dropped (rmcp
//!   would end the connection on it);
//! - a request whose id is still being answered gets `request_id_in_flight` (rmcp would run
//!   both and drop one answer). An id is in flight from the line that asked until its answer
//!   is written, or until the client cancels it (rmcp then answers nothing).
//!
//! rmcp's responses and this module's error responses reach stdout through one writer, whole
//! lines under one lock, so they never interleave.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use aido_actors::Session;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientNotification, ClientRequest, GetMeta,
    InitializeRequestParams, JsonRpcMessage, PaginatedRequestParams, ProtocolVersion, RequestId,
    ServerJsonRpcMessage,
};
// Logging is part of protocol 2025-11-25, which aido speaks; rmcp marks it deprecated for a
// later revision (SEP-2577).
#[allow(deprecated)]
use rmcp::model::SetLevelRequestParams;
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{Mutex, OnceCell, mpsc};
use tokio::task::JoinHandle;

use crate::scan::{Found, Scan};

/// Room for the JSON-RPC envelope around a `tools/call`'s arguments, in bytes.
pub(crate) const REQUEST_ENVELOPE_BYTES_MAX: u64 = 64 * 1024;

/// How deeply a line may nest arrays and objects: the most serde_json parses (it refuses the
/// 128th level). Checking first, in the scan, turns deeper input into a coded error instead of
/// a parse error, and nothing recursive ever sees it.
pub(crate) const NESTING_DEPTH_MAX: u64 = 127;

/// Messages read but not yet taken by rmcp.
const INCOMING_MESSAGES_MAX: usize = 16;

/// The stdin read buffer, in bytes: big reads keep a 50 MB line from costing 6,000 wakeups.
const READ_BUFFER_BYTES_MAX: usize = 256 * 1024;

/// The longest line aido accepts, in bytes (its newline not counted).
///
/// Three times `argument_bytes_max` (which measures the arguments as compact JSON) plus
/// [`REQUEST_ENVELOPE_BYTES_MAX`]: a client that escapes all non-ASCII text as `\uXXXX` (Python's
/// `json.dumps` does by default) sends at most three times the bytes for the same text (six for
/// a two-byte character, twelve for a four-byte one), so no arguments that fit
/// `argument_bytes_max` are refused here; the exact arguments check still runs in `tools/call`.
pub fn request_bytes_max(argument_bytes_max: u64) -> u64 {
    argument_bytes_max
        .saturating_mul(3)
        .saturating_add(REQUEST_ENVELOPE_BYTES_MAX)
}

/// Why a line got an error response instead of reaching rmcp.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LineError {
    /// The line is longer than `request_bytes_max`; it was discarded as it arrived.
    #[error("the request is {bytes} bytes; the limit is {max} (request_bytes_max)")]
    TooLarge { bytes: u64, max: u64 },
    /// The line is not UTF-8.
    #[error("the request is not UTF-8: invalid byte at offset {offset}")]
    NotUtf8 { offset: usize },
    /// The line nests arrays and objects deeper than [`NESTING_DEPTH_MAX`].
    #[error("the request nests {depth} levels deep; the limit is {max}")]
    TooDeep { depth: u64, max: u64 },
    /// The line is not JSON.
    #[error("the request is not JSON: {source}")]
    NotJson { source: serde_json::Error },
    /// A JSON-RPC batch, which MCP 2025-11-25 removed.
    #[error("batches are not supported: send one JSON-RPC message per line")]
    Batch,
    /// JSON, but not an object.
    #[error("a JSON-RPC message is a JSON object")]
    NotObject,
    /// `"jsonrpc": "2.0"` is missing or says something else.
    #[error("the message lacks \"jsonrpc\": \"2.0\"")]
    NotJsonRpc,
    /// `method` is there but not a string.
    #[error("the method is not a string")]
    MethodNotString,
    /// `id` is there but neither a string nor an integer.
    #[error("the id is neither a string nor an integer")]
    IdInvalid,
    /// An object that is neither a request, a notification nor a response.
    #[error("the message is neither a request, a notification nor a response")]
    NotMessage,
    /// A request whose params do not fit its method.
    #[error("the params do not fit {method}: {reason}")]
    InvalidParams { method: String, reason: String },
    /// A request other than `initialize` or `ping` before `initialize`, and without a
    /// revision in its `_meta` (which would make it a 2026-07-28 request, served without one).
    /// It is told the revisions `initialize` negotiates.
    #[error(
        "{method} before initialize: send initialize first, with a protocolVersion this server offers ({})",
        revisions(offered)
    )]
    NotInitialized {
        method: String,
        offered: &'static [ProtocolVersion],
    },
    /// A request whose id belongs to a request still being answered.
    #[error(
        "request id {id} is still being answered: give each request in flight an id of its own"
    )]
    IdInFlight { id: String },
    /// A method 2026-07-28 removed, asked in that revision (404 over HTTP).
    #[error(
        "{method} does not exist in revision 2026-07-28 (it has no handshake and no logging/setLevel)"
    )]
    MethodRemoved { method: String },
}

/// The names of the revisions in `offered` that `initialize` negotiates, newest first.
fn newest_first(offered: &[ProtocolVersion]) -> Vec<&str> {
    let mut names: Vec<&str> = offered
        .iter()
        .filter(|revision| revision.has_initialize())
        .map(ProtocolVersion::as_str)
        .collect();
    names.sort_unstable_by(|a, b| b.cmp(a));
    names
}

/// The revisions in `offered`, newest first, as a message names them.
fn revisions(offered: &[ProtocolVersion]) -> String {
    newest_first(offered).join(", ")
}

// The stable codes in the error's `data.code`.
aido_actions::coded!(LineError {
    TooLarge => "request_too_large",
    NotUtf8 => "invalid_utf8",
    TooDeep => "nesting_too_deep",
    NotJson => "parse_error",
    Batch => "batch_not_supported",
    NotObject => "not_an_object",
    NotJsonRpc => "jsonrpc_version_invalid",
    MethodNotString => "method_not_string",
    IdInvalid => "id_invalid",
    NotMessage => "not_a_message",
    InvalidParams => "invalid_params",
    NotInitialized => "not_initialized",
    IdInFlight => "request_id_in_flight",
    MethodRemoved => "method_removed",
});

impl LineError {
    /// The JSON-RPC error code: -32700 for what does not parse, -32602 for params that do not
    /// fit, -32600 for the rest. An oversized line may well be valid JSON, so it is an invalid
    /// request rather than a parse error.
    fn rpc_code(&self) -> i32 {
        match self {
            Self::MethodRemoved { .. } => -32601,
            Self::NotUtf8 { .. } | Self::TooDeep { .. } | Self::NotJson { .. } => -32700,
            Self::InvalidParams { .. } => -32602,
            Self::TooLarge { .. }
            | Self::Batch
            | Self::NotObject
            | Self::NotJsonRpc
            | Self::MethodNotString
            | Self::IdInvalid
            | Self::NotMessage
            | Self::NotInitialized { .. }
            | Self::IdInFlight { .. } => -32600,
        }
    }

    /// `data`: the code and the numbers behind it.
    fn data(&self) -> Value {
        let mut data = json!({"code": self.code()});
        match self {
            Self::TooLarge { bytes, max } => {
                data["bytes"] = json!(bytes);
                data["max"] = json!(max);
            }
            Self::NotUtf8 { offset } => data["offset"] = json!(offset),
            Self::TooDeep { depth, max } => {
                data["depth"] = json!(depth);
                data["max"] = json!(max);
            }
            Self::NotJson { source } => {
                data["line"] = json!(source.line());
                data["column"] = json!(source.column());
            }
            Self::NotInitialized { offered, .. } => {
                data["supported"] = json!(newest_first(offered))
            }
            Self::Batch
            | Self::NotObject
            | Self::NotJsonRpc
            | Self::MethodNotString
            | Self::IdInvalid
            | Self::NotMessage
            | Self::InvalidParams { .. }
            | Self::IdInFlight { .. }
            | Self::MethodRemoved { .. } => {}
        }
        data
    }

    /// The whole error response, without a newline.
    fn body(&self, id: Option<&Value>) -> Vec<u8> {
        let response = json!({
            "jsonrpc": "2.0",
            "id": id.cloned().unwrap_or(Value::Null),
            "error": {"code": self.rpc_code(), "message": self.to_string(), "data": self.data()},
        });
        response.to_string().into_bytes()
    }

    /// The whole error response, newline included.
    fn response(&self, id: Option<&Value>) -> Vec<u8> {
        let mut line = self.body(id);
        line.push(b'\n');
        line
    }
}

/// The methods aido's server answers; rmcp answers any other with "method not found".
const SERVED_METHODS: [&str; 9] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "logging/setLevel",
    "server/discover",
    "subscriptions/listen",
    "resources/list",
    "resources/read",
];

/// The methods 2026-07-28 removed, which aido serves older revisions.
const REMOVED_IN_2026: [&str; 3] = ["initialize", "ping", "logging/setLevel"];

/// Whether `method` is one 2026-07-28 removed, asked in that revision (or a later one):
/// it is answered "method not found" (404 over HTTP), not as a misfit.
fn removed_in(method: &str, revision: Option<&str>) -> bool {
    REMOVED_IN_2026.contains(&method)
        && revision.is_some_and(|revision| revision >= crate::versions::STATELESS_FROM)
}

/// Why `params` do not fit a served method, in serde's words.
#[allow(deprecated)]
fn params_misfit(method: &str, params: Option<Value>) -> String {
    let params = params.unwrap_or(Value::Null);
    let error = match method {
        "initialize" => serde_json::from_value::<InitializeRequestParams>(params).err(),
        "tools/list" => serde_json::from_value::<Option<PaginatedRequestParams>>(params).err(),
        "tools/call" => serde_json::from_value::<CallToolRequestParams>(params).err(),
        "logging/setLevel" => serde_json::from_value::<SetLevelRequestParams>(params).err(),
        _ => None,
    };
    error.map_or_else(
        || "they do not match its schema".to_owned(),
        |e| e.to_string(),
    )
}

/// What to do with one line.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// A message for rmcp.
    Forward(Box<ClientJsonRpcMessage>),
    /// Nothing to answer: an empty line, or a notification or response rmcp cannot read
    /// (JSON-RPC answers neither).
    Skip(&'static str),
    /// Answer with this error (and the id, if the scan found one).
    Reject(LineError),
}

/// Judge one line. `line` is empty when the line was too large to keep; `scan` saw all of it.
pub(crate) fn judge(line: &[u8], scan: &Scan, max: u64) -> Verdict {
    if scan.bytes() > max {
        return Verdict::Reject(LineError::TooLarge {
            bytes: scan.bytes(),
            max,
        });
    }
    // As rmcp does: a UTF-8 byte order mark and a `\r` before the newline are not content.
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Skip("an empty line");
    }
    if let Err(e) = std::str::from_utf8(line) {
        return Verdict::Reject(LineError::NotUtf8 {
            offset: e.valid_up_to(),
        });
    }
    if scan.depth_max() > NESTING_DEPTH_MAX {
        return Verdict::Reject(LineError::TooDeep {
            depth: scan.depth_max(),
            max: NESTING_DEPTH_MAX,
        });
    }
    let typed = match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
        Ok(JsonRpcMessage::Request(request)) => match &request.request {
            // rmcp reads a served method whose params do not fit as a custom request, and
            // would answer "method not found".
            ClientRequest::CustomRequest(custom)
                if SERVED_METHODS.contains(&custom.method.as_str()) =>
            {
                let revision = request.request.get_meta().protocol_version();
                if removed_in(&custom.method, revision.as_ref().map(|r| r.as_str())) {
                    return Verdict::Reject(LineError::MethodRemoved {
                        method: custom.method.clone(),
                    });
                }
                return Verdict::Reject(LineError::InvalidParams {
                    method: custom.method.clone(),
                    reason: params_misfit(&custom.method, custom.params.clone()),
                });
            }
            _ => return Verdict::Forward(Box::new(JsonRpcMessage::Request(request))),
        },
        Ok(message) => return Verdict::Forward(Box::new(message)),
        Err(e) => e,
    };
    // Not a message rmcp reads: find out why, to say so.
    let value = match serde_json::from_slice::<Value>(line) {
        Ok(value) => value,
        Err(source) => return Verdict::Reject(LineError::NotJson { source }),
    };
    let object = match value {
        Value::Object(object) => object,
        Value::Array(_) => return Verdict::Reject(LineError::Batch),
        _ => return Verdict::Reject(LineError::NotObject),
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Verdict::Reject(LineError::NotJsonRpc);
    }
    let id = object.get("id");
    if id.is_some_and(|id| !(id.is_string() || id.is_i64())) {
        return Verdict::Reject(LineError::IdInvalid);
    }
    match (object.get("method"), id) {
        (Some(Value::String(method)), Some(_))
            if removed_in(
                method,
                object["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"].as_str(),
            ) =>
        {
            Verdict::Reject(LineError::MethodRemoved {
                method: method.clone(),
            })
        }
        (Some(Value::String(method)), Some(_)) => Verdict::Reject(LineError::InvalidParams {
            method: method.clone(),
            reason: typed.to_string(),
        }),
        (Some(Value::String(_)), None) => Verdict::Skip("a notification rmcp cannot read"),
        (Some(_), _) => Verdict::Reject(LineError::MethodNotString),
        (None, Some(_)) if object.contains_key("result") != object.contains_key("error") => {
            Verdict::Skip("a response rmcp cannot read")
        }
        (None, _) => Verdict::Reject(LineError::NotMessage),
    }
}

/// Whether `request` belongs to revision 2026-07-28 or later on its own: `server/discover`,
/// or a request whose `_meta` names its protocol revision.
pub(crate) fn carries_revision(request: &ClientRequest) -> bool {
    matches!(request, ClientRequest::DiscoverRequest(_))
        || request.get_meta().protocol_version().is_some()
}

/// What `aido serve` does with a POSTed body, judged as a line is judged.
#[derive(Debug)]
pub enum BodyVerdict {
    /// A message rmcp reads (or one JSON-RPC never answers); `request` is the id and method
    /// when it is a request; `stateless` when it is a 2026-07-28 request, which belongs to no
    /// session ([`carries_revision`]).
    Pass {
        request: Option<(Value, String)>,
        stateless: bool,
    },
    /// Answer with this coded JSON-RPC error response instead (with the request's id when the
    /// scan recovered it), with this HTTP status (400; 404 for a method the request's revision
    /// removed). rmcp itself answers a body it cannot read with a bare 415.
    Reject { body: Vec<u8>, status: u16 },
}

/// Judge one HTTP request body as a line is judged.
pub fn judge_body(body: &[u8], max: u64) -> BodyVerdict {
    let mut scan = Scan::default();
    scan.feed(body);
    scan.finish();
    match judge(body, &scan, max) {
        Verdict::Forward(message) => match *message {
            JsonRpcMessage::Request(request) => BodyVerdict::Pass {
                stateless: carries_revision(&request.request),
                request: Some((
                    request.id.into_json_value(),
                    request.request.method().to_owned(),
                )),
            },
            _ => BodyVerdict::Pass {
                request: None,
                stateless: false,
            },
        },
        Verdict::Skip(_) => BodyVerdict::Pass {
            request: None,
            stateless: false,
        },
        Verdict::Reject(error) => BodyVerdict::Reject {
            status: if matches!(error, LineError::MethodRemoved { .. }) {
                404
            } else {
                400
            },
            body: error.body(scan.found().id.as_ref()),
        },
    }
}

/// The coded JSON-RPC error for a request whose `id` is still being answered
/// (`request_id_in_flight`), as a body.
pub fn id_in_flight(id: &Value) -> Vec<u8> {
    LineError::IdInFlight { id: id.to_string() }.body(Some(id))
}

/// The coded JSON-RPC error for `method` asked before `initialize` (`not_initialized`),
/// naming the revisions `offered`, as a body.
pub fn not_initialized(id: &Value, method: &str, offered: &'static [ProtocolVersion]) -> Vec<u8> {
    LineError::NotInitialized {
        method: method.to_owned(),
        offered,
    }
    .body(Some(id))
}

/// stdin as the reader reads it. When stdin is a pipe (as it is under every MCP client), it is
/// read straight from the runtime's event loop, non-blocking; otherwise through tokio's stdin,
/// whose every read is a trip to the blocking pool and back (a thread hand-off per request).
pub(crate) enum Stdin {
    /// A pipe, polled by the runtime.
    Pipe(tokio::net::unix::pipe::Receiver),
    /// Anything else (a file, a terminal).
    Other(tokio::io::Stdin),
}

impl Stdin {
    /// This process's stdin. Must be called inside the runtime.
    pub(crate) fn open() -> Self {
        use std::os::fd::AsFd;
        let pipe = std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .and_then(tokio::net::unix::pipe::Receiver::from_owned_fd);
        match pipe {
            Ok(pipe) => Self::Pipe(pipe),
            Err(_) => Self::Other(tokio::io::stdin()),
        }
    }
}

impl AsyncRead for Stdin {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Pipe(pipe) => std::pin::Pin::new(pipe).poll_read(cx, buf),
            Self::Other(stdin) => std::pin::Pin::new(stdin).poll_read(cx, buf),
        }
    }
}

/// stdout as the one writer writes it: a pipe written from the runtime's event loop when
/// stdout is one (no blocking-pool hand-off per answer), else tokio's stdout.
pub(crate) enum Stdout {
    /// A pipe, polled by the runtime.
    Pipe(tokio::net::unix::pipe::Sender),
    /// Anything else (a file, a terminal).
    Other(tokio::io::Stdout),
}

impl Stdout {
    /// This process's stdout. Must be called inside the runtime.
    pub(crate) fn open() -> Self {
        use std::os::fd::AsFd;
        let pipe = std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .and_then(tokio::net::unix::pipe::Sender::from_owned_fd);
        match pipe {
            Ok(pipe) => Self::Pipe(pipe),
            Err(_) => Self::Other(tokio::io::stdout()),
        }
    }
}

impl AsyncWrite for Stdout {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Pipe(pipe) => std::pin::Pin::new(pipe).poll_write(cx, buf),
            Self::Other(stdout) => std::pin::Pin::new(stdout).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Pipe(pipe) => std::pin::Pin::new(pipe).poll_flush(cx),
            Self::Other(stdout) => std::pin::Pin::new(stdout).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Pipe(pipe) => std::pin::Pin::new(pipe).poll_shutdown(cx),
            Self::Other(stdout) => std::pin::Pin::new(stdout).poll_shutdown(cx),
        }
    }
}

/// stdout, shared by rmcp's messages and this module's error responses.
type Output<W> = Arc<Mutex<Option<W>>>;

/// Write one whole line and flush it.
async fn write_line<W: AsyncWrite + Unpin>(output: &Output<W>, line: &[u8]) -> std::io::Result<()> {
    let mut output = output.lock().await;
    let Some(output) = output.as_mut() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            "the transport is closed",
        ));
    };
    output.write_all(line).await?;
    output.flush().await
}

/// The ids of the client's requests passed to rmcp and not yet answered.
type InFlight = Arc<std::sync::Mutex<HashSet<RequestId>>>;

fn in_flight(ids: &InFlight) -> std::sync::MutexGuard<'_, HashSet<RequestId>> {
    ids.lock().unwrap_or_else(|p| p.into_inner())
}

/// The transport rmcp serves over: messages the reader task passed, and stdout.
pub(crate) struct StdioTransport<W> {
    incoming: mpsc::Receiver<ClientJsonRpcMessage>,
    output: Output<W>,
    in_flight: InFlight,
}

impl<W: AsyncWrite + Unpin + Send + 'static> Transport<RoleServer> for StdioTransport<W> {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let output = self.output.clone();
        let answered = match &item {
            JsonRpcMessage::Response(response) => Some(response.id.clone()),
            JsonRpcMessage::Error(error) => error.id.clone(),
            JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => None,
        };
        let in_flight = self.in_flight.clone();
        async move {
            let mut line = serde_json::to_vec(&item)?;
            line.push(b'\n');
            let written = write_line(&output, &line).await;
            // Answered (or never will be): the id is the client's again.
            if let Some(id) = answered {
                self::in_flight(&in_flight).remove(&id);
            }
            written
        }
    }

    // # Cancel safety
    // rmcp polls this in a `select!`; `mpsc::Receiver::recv` loses nothing when dropped.
    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        self.incoming.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        drop(self.output.lock().await.take());
        Ok(())
    }
}

/// Start reading `input` line by line in a task; the transport for rmcp and the task, to abort
/// once the session is over. `offered` is what a request before `initialize` is told.
pub(crate) fn start<R, W>(
    input: R,
    output: W,
    sessions: Arc<OnceCell<Session>>,
    max: u64,
    offered: &'static [ProtocolVersion],
) -> (StdioTransport<W>, JoinHandle<()>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (sender, incoming) = mpsc::channel(INCOMING_MESSAGES_MAX);
    let output = Arc::new(Mutex::new(Some(output)));
    let in_flight = InFlight::default();
    let reader = Reader {
        sender,
        output: output.clone(),
        sessions,
        max,
        in_flight: in_flight.clone(),
        offered,
        initialized: false,
    };
    let task = tokio::spawn(async move {
        match reader.run(input).await {
            Ok(()) => tracing::debug!("stdin closed"),
            Err(e) => tracing::warn!(error = %e, "reading stdin failed"),
        }
    });
    (
        StdioTransport {
            incoming,
            output,
            in_flight,
        },
        task,
    )
}

/// Splits a byte stream into lines and scans them, holding at most `max` bytes of any one:
/// past that a line's bytes only go through its [`Scan`] and are dropped.
struct Lines {
    line: Vec<u8>,
    scan: Scan,
    max: u64,
}

impl Lines {
    fn new(max: u64) -> Self {
        Self {
            line: Vec::new(),
            scan: Scan::default(),
            max,
        }
    }

    /// Take `chunk` up to and including its first newline: how many bytes were taken, and the
    /// line (empty if it was too large to keep) with its scan if it ended.
    fn push(&mut self, chunk: &[u8]) -> (usize, Option<(Vec<u8>, Scan)>) {
        let newline = chunk.iter().position(|b| *b == b'\n');
        let bytes = &chunk[..newline.unwrap_or(chunk.len())];
        self.scan.feed(bytes);
        if self.scan.bytes() <= self.max {
            self.line.extend_from_slice(bytes);
        } else if !self.line.is_empty() {
            // Too large: free what was kept and let the rest go by.
            self.line = Vec::new();
        }
        match newline {
            Some(i) => (i + 1, self.end()),
            None => (chunk.len(), None),
        }
    }

    /// The line so far, and a fresh start; none if nothing came since the last newline.
    fn end(&mut self) -> Option<(Vec<u8>, Scan)> {
        let scan = std::mem::take(&mut self.scan);
        let line = std::mem::take(&mut self.line);
        (scan.bytes() > 0).then_some((line, scan))
    }

    /// How many bytes of the current line are held.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.line.capacity()
    }
}

struct Reader<W> {
    sender: mpsc::Sender<ClientJsonRpcMessage>,
    output: Output<W>,
    sessions: Arc<OnceCell<Session>>,
    max: u64,
    in_flight: InFlight,
    offered: &'static [ProtocolVersion],
    /// Whether an `initialize` request was passed on.
    initialized: bool,
}

impl<W: AsyncWrite + Unpin + Send + 'static> Reader<W> {
    /// Read lines until stdin ends or rmcp stops listening.
    async fn run<R: AsyncRead + Unpin>(mut self, input: R) -> std::io::Result<()> {
        let mut input = BufReader::with_capacity(READ_BUFFER_BYTES_MAX, input);
        let mut lines = Lines::new(self.max);
        loop {
            let (taken, line) = {
                let available = input.fill_buf().await?;
                if available.is_empty() {
                    if let Some((line, scan)) = lines.end() {
                        self.handle(&line, scan).await;
                    }
                    return Ok(());
                }
                lines.push(available)
            };
            input.consume(taken);
            if let Some((line, scan)) = line
                && !self.handle(&line, scan).await
            {
                return Ok(());
            }
        }
    }

    /// Whether a well-formed message may reach rmcp now: the lifecycle and in-flight rules.
    fn admit(&mut self, message: ClientJsonRpcMessage) -> Verdict {
        match &message {
            JsonRpcMessage::Request(request) => {
                let initialize = matches!(request.request, ClientRequest::InitializeRequest(_));
                let ping = matches!(request.request, ClientRequest::PingRequest(_));
                // 2026-07-28 has no handshake: `server/discover`, or a request naming its
                // revision in `_meta` (rmcp checks the rest of it), opens the connection.
                let stateless = carries_revision(&request.request);
                if !(self.initialized || initialize || ping || stateless) {
                    return Verdict::Reject(LineError::NotInitialized {
                        method: request.request.method().to_owned(),
                        offered: self.offered,
                    });
                }
                if !in_flight(&self.in_flight).insert(request.id.clone()) {
                    return Verdict::Reject(LineError::IdInFlight {
                        id: request.id.to_string(),
                    });
                }
                self.initialized |= initialize
                    || stateless && !matches!(request.request, ClientRequest::DiscoverRequest(_));
            }
            JsonRpcMessage::Notification(_)
            | JsonRpcMessage::Response(_)
            | JsonRpcMessage::Error(_)
                if !self.initialized =>
            {
                return Verdict::Skip("a notification or response before initialize");
            }
            JsonRpcMessage::Notification(notification) => {
                // rmcp answers a cancelled request with nothing: its id is free again.
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    in_flight(&self.in_flight).remove(id);
                }
            }
            JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {}
        }
        Verdict::Forward(Box::new(message))
    }

    /// Pass one line on or answer it; false once rmcp is gone.
    async fn handle(&mut self, line: &[u8], mut scan: Scan) -> bool {
        scan.finish();
        let verdict = match judge(line, &scan, self.max) {
            Verdict::Forward(message) => self.admit(*message),
            other => other,
        };
        let error = match verdict {
            Verdict::Forward(message) => return self.sender.send(*message).await.is_ok(),
            Verdict::Skip(what) => {
                tracing::debug!("skipped {what}");
                return true;
            }
            Verdict::Reject(error) => error,
        };
        // The scan keeps only ids MCP allows, so an unusable one is never echoed back.
        let Found { id, method, tool } = scan.found();
        tracing::warn!(code = error.code(), ?id, ?method, %error, "answered a bad line");
        // The journal shows every tool call an agent tried. A call whose tool name the scan
        // could not recover (not there, not a string, or past FIELD_BYTES_MAX) has nothing to
        // file the rejection under, and is answered without a record.
        if let (Some("tools/call"), Some(tool), Some(session)) =
            (method.as_deref(), tool.as_deref(), self.sessions.get())
        {
            session.reject(tool, error.code(), &error.to_string()).await;
        }
        match write_line(&self.output, &error.response(id.as_ref())).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "cannot answer a bad line");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(line: &[u8]) -> Verdict {
        let mut scan = Scan::default();
        scan.feed(line);
        scan.finish();
        judge(line, &scan, 1 << 20)
    }

    fn code(line: &[u8]) -> &'static str {
        match verdict(line) {
            Verdict::Forward(_) => "forward",
            Verdict::Skip(_) => "skip",
            Verdict::Reject(e) => e.code(),
        }
    }

    #[test]
    #[allow(clippy::too_many_lines)]
    fn every_line_has_a_verdict() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes();
        let big = format!(r#"{{"id":1,"x":"{}"}}"#, "x".repeat(1 << 20)).into_bytes();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "ping",
                br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_vec(),
                "forward",
            ),
            (
                "unknown method",
                br#"{"jsonrpc":"2.0","id":1,"method":"no/such"}"#.to_vec(),
                "forward",
            ),
            (
                "with a BOM and CR",
                b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r".to_vec(),
                "forward",
            ),
            (
                "a response",
                br#"{"jsonrpc":"2.0","id":1,"result":{"action":"accept"}}"#.to_vec(),
                "forward",
            ),
            ("empty", b"".to_vec(), "skip"),
            ("blank", b"  \r".to_vec(), "skip"),
            ("too large", big, "request_too_large"),
            (
                "not UTF-8",
                b"{\"id\":1,\"x\":\"\xff\"}".to_vec(),
                "invalid_utf8",
            ),
            ("deep", deep(100_000), "nesting_too_deep"),
            (
                "just deep enough",
                deep(NESTING_DEPTH_MAX as usize),
                "batch_not_supported",
            ),
            (
                "just too deep",
                deep(NESTING_DEPTH_MAX as usize + 1),
                "nesting_too_deep",
            ),
            ("not JSON", b"{this is not json".to_vec(), "parse_error"),
            ("a batch", b"[1,2]".to_vec(), "batch_not_supported"),
            ("a number", b"42".to_vec(), "not_an_object"),
            (
                "no jsonrpc",
                br#"{"id":1,"method":"ping"}"#.to_vec(),
                "jsonrpc_version_invalid",
            ),
            (
                "jsonrpc 1.0",
                br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#.to_vec(),
                "jsonrpc_version_invalid",
            ),
            (
                "method a number",
                br#"{"jsonrpc":"2.0","id":1,"method":5}"#.to_vec(),
                "method_not_string",
            ),
            (
                "id fractional",
                br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#.to_vec(),
                "id_invalid",
            ),
            (
                "id null",
                br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#.to_vec(),
                "id_invalid",
            ),
            (
                "params not an object",
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":7}"#.to_vec(),
                "invalid_params",
            ),
            (
                "arguments not an object",
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":"~/x"}}"#.to_vec(),
                "invalid_params",
            ),
            (
                "an unserved standard method",
                br#"{"jsonrpc":"2.0","id":1,"method":"resources/list","params":{"cursor":5}}"#.to_vec(),
                "forward",
            ),
            (
                "a bad notification",
                br#"{"jsonrpc":"2.0","method":"notifications/progress","params":7}"#.to_vec(),
                "skip",
            ),
            (
                "an object and nothing more",
                br#"{"jsonrpc":"2.0"}"#.to_vec(),
                "not_a_message",
            ),
            (
                "both result and error",
                br#"{"jsonrpc":"2.0","id":1,"result":{},"error":{}}"#.to_vec(),
                "not_a_message",
            ),
        ];
        for (name, line, expected) in cases {
            assert_eq!(code(&line), expected, "{name}");
        }
    }

    #[test]
    fn error_codes_are_stable() {
        let json_error = || serde_json::from_slice::<Value>(b"{").unwrap_err();
        let table = [
            (
                LineError::TooLarge { bytes: 2, max: 1 },
                "request_too_large",
                -32600,
            ),
            (LineError::NotUtf8 { offset: 0 }, "invalid_utf8", -32700),
            (
                LineError::TooDeep { depth: 2, max: 1 },
                "nesting_too_deep",
                -32700,
            ),
            (
                LineError::NotJson {
                    source: json_error(),
                },
                "parse_error",
                -32700,
            ),
            (LineError::Batch, "batch_not_supported", -32600),
            (LineError::NotObject, "not_an_object", -32600),
            (LineError::NotJsonRpc, "jsonrpc_version_invalid", -32600),
            (LineError::MethodNotString, "method_not_string", -32600),
            (LineError::IdInvalid, "id_invalid", -32600),
            (LineError::NotMessage, "not_a_message", -32600),
            (
                LineError::InvalidParams {
                    method: "m".into(),
                    reason: "r".into(),
                },
                "invalid_params",
                -32602,
            ),
            (
                LineError::NotInitialized {
                    method: "m".into(),
                    offered: crate::versions::STDIO_PROTOCOL_VERSIONS,
                },
                "not_initialized",
                -32600,
            ),
            (
                LineError::IdInFlight { id: "1".into() },
                "request_id_in_flight",
                -32600,
            ),
            (
                LineError::MethodRemoved {
                    method: "ping".into(),
                },
                "method_removed",
                -32601,
            ),
        ];
        let codes: Vec<&str> = table.iter().map(|(error, _, _)| error.code()).collect();
        assert_eq!(codes, LineError::CODES, "the table lists every code");
        for (error, code, rpc) in table {
            assert_eq!((error.code(), error.rpc_code()), (code, rpc));
        }
    }

    /// A reader of stdio lines as `serve` makes one, writing to `out`.
    fn test_reader(
        sender: mpsc::Sender<ClientJsonRpcMessage>,
        out: tokio::io::DuplexStream,
        in_flight: InFlight,
    ) -> Reader<tokio::io::DuplexStream> {
        Reader {
            sender,
            output: Arc::new(Mutex::new(Some(out))),
            sessions: Arc::new(OnceCell::new()),
            max: 1 << 20,
            in_flight,
            offered: crate::versions::STDIO_PROTOCOL_VERSIONS,
            initialized: false,
        }
    }

    /// What the reader does with one line: `forward`, `skip`, or the refusal's code.
    fn admitted(reader: &mut Reader<tokio::io::DuplexStream>, line: &str) -> &'static str {
        let message = serde_json::from_str::<ClientJsonRpcMessage>(line).unwrap();
        match reader.admit(message) {
            Verdict::Forward(_) => "forward",
            Verdict::Skip(_) => "skip",
            Verdict::Reject(error) => error.code(),
        }
    }

    /// Before `initialize` only `initialize` and `ping` reach rmcp (a notification or
    /// response is dropped); a request whose id is in flight is refused until its answer is
    /// written or the client cancels it.
    #[tokio::test]
    async fn the_lifecycle_and_in_flight_rules() {
        let (out_write, _out_read) = tokio::io::duplex(1 << 16);
        let (sender, mut incoming) = mpsc::channel(16);
        let in_flight = InFlight::default();
        let mut reader = test_reader(sender, out_write, in_flight.clone());
        let mut admit = |line: &str| admitted(&mut reader, line);
        let call = |id: u64| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"read_file","arguments":{{}}}}}}"#
            )
        };
        let initialize = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
        assert_eq!(admit(&call(1)), "not_initialized");
        assert_eq!(
            admit(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            "skip"
        );
        assert_eq!(admit(r#"{"jsonrpc":"2.0","id":9,"result":{}}"#), "skip");
        assert_eq!(
            admit(r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#),
            "forward"
        );
        assert_eq!(admit(initialize), "forward");
        assert_eq!(admit(&call(1)), "forward");
        assert_eq!(admit(&call(1)), "request_id_in_flight");
        assert_eq!(admit(&call(2)), "forward");
        // Cancelled: rmcp answers nothing, and the id may be used again.
        assert_eq!(
            admit(
                r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#
            ),
            "forward"
        );
        assert_eq!(admit(&call(2)), "forward");
        // Answered: the transport frees the id once the answer is written.
        let (_peer, output) = tokio::io::duplex(1 << 16);
        let mut transport = StdioTransport {
            incoming: mpsc::channel(1).1,
            output: Arc::new(Mutex::new(Some(output))),
            in_flight: in_flight.clone(),
        };
        let answer: ServerJsonRpcMessage =
            serde_json::from_value(json!({"jsonrpc": "2.0", "id": 1, "result": {}})).unwrap();
        transport.send(answer).await.unwrap();
        assert!(!self::in_flight(&in_flight).contains(&RequestId::Number(1)));
        assert_eq!(admit(&call(1)), "forward");
        incoming.close();
    }

    /// 2026-07-28 has no handshake: `server/discover` is answered before anything (and opens
    /// nothing), a request naming the revision in `_meta` opens the connection, and a method
    /// the revision removed is `method_removed` whatever its params.
    #[tokio::test]
    async fn a_2026_07_28_request_needs_no_initialize() {
        let (out_write, _out_read) = tokio::io::duplex(1 << 16);
        let (sender, mut incoming) = mpsc::channel(16);
        let mut reader = test_reader(sender, out_write, InFlight::default());
        let mut admit = |line: &str| admitted(&mut reader, line);
        let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
        let discover =
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{{{meta}}}}}"#);
        let list = |id: u64, meta: &str| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list","params":{{{meta}}}}}"#)
        };
        assert_eq!(admit(&discover), "forward");
        // Discovery opens nothing: a request without the revision is still refused.
        assert_eq!(admit(&list(2, r#""_meta":{}"#)), "not_initialized");
        assert_eq!(admit(&list(3, meta)), "forward");
        assert_eq!(
            admit(&list(4, r#""_meta":{}"#)),
            "forward",
            "rmcp checks the rest"
        );
        incoming.close();
        for (method, expected) in [
            ("initialize", "method_removed"),
            ("logging/setLevel", "method_removed"),
            ("tools/call", "invalid_params"),
        ] {
            let line =
                format!(r#"{{"jsonrpc":"2.0","id":5,"method":"{method}","params":{{{meta}}}}}"#);
            assert_eq!(code(line.as_bytes()), expected, "{method}");
        }
    }

    #[test]
    fn an_error_response_carries_the_id_and_the_numbers() {
        let error = LineError::TooLarge { bytes: 50, max: 10 };
        let line = error.response(Some(&json!("req-7")));
        assert_eq!(line.last(), Some(&b'\n'));
        let response: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(response["id"], "req-7");
        assert_eq!(response["error"]["code"], -32600);
        assert_eq!(
            response["error"]["data"],
            json!({"code": "request_too_large", "bytes": 50, "max": 10})
        );
        let response: Value = serde_json::from_slice(&LineError::NotObject.response(None)).unwrap();
        assert_eq!(response["id"], Value::Null);
    }

    #[test]
    fn a_line_over_the_limit_is_never_held() {
        let max = 1000;
        let mut lines = Lines::new(max);
        let head = br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"write_file","arguments":{"content":""#;
        let chunk = vec![b'x'; 64 * 1024];
        let tail = br#""}},"id":"big-1"}"#;
        assert!(lines.push(head).1.is_none());
        for _ in 0..800 {
            let (taken, ended) = lines.push(&chunk);
            assert!(taken == chunk.len() && ended.is_none());
            assert!(lines.held() <= max as usize, "{} bytes held", lines.held());
        }
        let mut end = tail.to_vec();
        end.extend_from_slice(b"\n{\"next\":1}");
        let (taken, ended) = lines.push(&end);
        assert_eq!(taken, tail.len() + 1, "the next line stays in the buffer");
        let (line, scan) = ended.unwrap();
        assert!(line.is_empty());
        let bytes = (head.len() + 800 * chunk.len() + tail.len()) as u64;
        assert_eq!(scan.bytes(), bytes);
        assert_eq!(scan.found().id, Some(json!("big-1")));
        assert_eq!(scan.found().tool.as_deref(), Some("write_file"));
        match judge(&line, &scan, max) {
            Verdict::Reject(LineError::TooLarge { bytes: b, max: m }) => {
                assert_eq!((b, m), (bytes, max))
            }
            other => panic!("{other:?}"),
        }
        // A line that fits is kept whole; a last line without a newline still counts.
        assert_eq!(lines.push(b"{\"id\":2}\n").1.unwrap().0, b"{\"id\":2}");
        assert!(lines.push(b"{\"id\":3}").1.is_none());
        assert_eq!(lines.end().unwrap().0, b"{\"id\":3}");
        assert!(lines.end().is_none());
    }

    /// The reader over an in-memory pipe: bad lines answered in order, good ones forwarded,
    /// a line over the limit never kept.
    #[tokio::test]
    async fn the_reader_answers_bad_lines_and_forwards_good_ones() {
        let (mut client_write, server_read) = tokio::io::duplex(1 << 16);
        let (out_write, mut out_read) = tokio::io::duplex(1 << 16);
        let (mut transport, task) = start(
            server_read,
            out_write,
            Arc::new(OnceCell::new()),
            1000,
            crate::versions::STDIO_PROTOCOL_VERSIONS,
        );
        let big = format!(
            r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"x":"{}"}},"id":9}}"#,
            "y".repeat(5000)
        );
        let input =
            format!("not json\n{big}\n{{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}}\n");
        client_write.write_all(input.as_bytes()).await.unwrap();
        let message = transport.receive().await.unwrap();
        assert_eq!(serde_json::to_value(&message).unwrap()["id"], 3);
        drop(client_write);
        assert!(
            transport.receive().await.is_none(),
            "stdin closed ends the stream"
        );
        task.await.unwrap();
        drop(transport);
        let mut output = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut out_read, &mut output)
            .await
            .unwrap();
        let answers: Vec<Value> = output
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(answers.len(), 2, "{output}");
        assert_eq!(answers[0]["id"], Value::Null);
        assert_eq!(answers[0]["error"]["data"]["code"], "parse_error");
        assert_eq!(answers[1]["id"], 9);
        assert_eq!(answers[1]["error"]["data"]["code"], "request_too_large");
        assert_eq!(answers[1]["error"]["data"]["bytes"], big.len());
    }
}
