//! The gateway to other MCP servers, with no actors: it starts, confines, supervises and
//! talks to the downstream servers of aido's `[[downstream]]` entries, so that their tools
//! can be offered to agents beside aido's own (the runtime wires them to its policy, its
//! journal and its tool list; this crate does not).
//!
//! The design decisions:
//! - **Confined, or not at all.** A stdio downstream runs inside aido's sandbox
//!   ([`aido_sandbox::Sandbox::start`]) with the profile the caller passes, or one built from
//!   its entry ([`DownstreamConfig::profile`]): its `writable` roots as the only writable
//!   walls, the secrets every profile hides plus its own `deny` globs, and an egress proxy
//!   admitting only its own `network` hosts (no network at all when the list is empty). A
//!   sandbox that cannot be built is `downstream_sandbox_failed` and nothing runs; there is
//!   no unconfined fallback. MCP is spoken with rmcp's client over the process's standard
//!   output and input (written through the sandbox's control socket).
//! - **Names the clients accept.** A tool is exposed as `<server>__<tool>`: server names are
//!   `[a-z0-9_-]` without `__`, so the first `__` splits a name unambiguously
//!   ([`server_of`]). A name that would pass [`config::TOOL_NAME_LEN_MAX`] (64 characters
//!   with Claude Code's `mcp__aido__` prefix), or holds other characters, is cut and ends
//!   with 8 hex digits of a hash of the original: deterministic, and checked unique. Each
//!   [`DownstreamTool`] keeps the downstream's own tool (name, description, schemas,
//!   annotations) and a [`ToolClass`] from its annotations, with the protocol's cautious
//!   defaults (destructive, open-world) for missing hints; a policy may override it. The
//!   list is taken at each connection, and again when the downstream says it changed
//!   (`notifications/tools/list_changed`).
//! - **Typed results for playback.** A call answers with rmcp's whole `CallToolResult`
//!   (serde), so the runtime can journal it as the call's input and play it back without
//!   the server. The downstream's own failures keep their words: an `isError` result is
//!   `downstream_tool_failed` with its text and the whole result, a JSON-RPC error
//!   `downstream_refused` with its code and message.
//! - **The caller's side of a call is a trait.** Progress notifications and elicitation
//!   requests of the downstream go to the [`Upstream`] passed with the call (progress by
//!   the call's progress token; an elicitation, which over stdio names no call, to the call
//!   that started last). Progress is forwarded while the call runs and in order: a
//!   notification overtaken by a later one, or by the call's answer, is dropped.
//! - **Supervision without actors.** A crash (the process ended, the transport closed)
//!   answers the calls in flight with `downstream_crashed`; the next call restarts the
//!   server, as long as the crashes within the entry's `restarts.window_secs` do not
//!   outnumber `restarts.count`, and is `downstream_unavailable` past that. A failed restart
//!   counts as a crash. Dropping a [`Downstream`] closes the server's input and kills its
//!   tree after a grace.
//! - **Bounds.** A message of a downstream is at most [`downstream::MESSAGE_BYTES_MAX`]
//!   (16 MiB; longer closes its connection, as a crash), a list at most
//!   [`tools::TOOLS_MAX`] tools, a call and a start within their entry's deadlines
//!   (`call_timeout_ms`, `start_timeout_ms`), a stdio server's life within the sandbox's
//!   one-day request bound ([`config::LIFETIME_MS_MAX`]), of its standard error only kept
//!   for messages its last 4 KiB.
//!
//! ```no_run
//! # async fn demo() -> Result<(), aido_gateway::DownstreamError> {
//! use std::sync::Arc;
//! use aido_gateway::{Declining, Downstream, DownstreamConfig};
//! // In aido's main, before anything else: aido_sandbox::run_child_if_requested();
//! let sandbox = aido_sandbox::Sandbox::new(std::env::current_exe().unwrap_or_default());
//! let mut config = DownstreamConfig::stdio("git", "mcp-server-git", ["--repository", "/srv/repo"]);
//! config.writable = vec!["/srv/repo".into()];
//! let git = Downstream::start(config, sandbox, None).await?;
//! for tool in git.tools().await? {
//!     println!("{} ({:?}): {:?}", tool.name, tool.class, tool.tool.description);
//! }
//! let arguments = serde_json::json!({ "repo_path": "/srv/repo" });
//! let result = git
//!     .call("git__git_status", arguments.as_object().cloned(), Arc::new(Declining))
//!     .await?;
//! println!("{}", serde_json::to_string(&result).unwrap_or_default());
//! # Ok(()) }
//! ```

/// `[[downstream]]` entries: validation, tool filter, sandbox profile and request.
pub mod config;
/// One supervised downstream: start, tools, calls, crashes and restarts.
pub mod downstream;
/// The error enums and their codes.
pub mod error;
/// Several downstreams behind one name space, routed by namespaced tool name.
pub mod gateway;
/// The streamable HTTP transport and its token file.
pub(crate) mod http;
/// A stdio downstream's sandboxed process and its streams.
pub(crate) mod process;
/// The MCP client handler: capabilities, progress and elicitations relayed.
pub(crate) mod relay;
/// Namespaced tools, their annotations and classes.
pub mod tools;
/// The caller's side of a call: progress and elicitations.
pub mod upstream;

pub use config::{DownstreamConfig, RestartBudget, ToolFilter, Transport, validate_all};
pub use downstream::Downstream;
pub use error::{ConfigError, DownstreamError};
pub use gateway::Gateway;
pub use tools::{DownstreamTool, ToolClass, classify, server_of};
pub use upstream::{BoxFuture, Declining, Progress, Upstream, declined};

/// rmcp's types the API speaks in (results, elicitations, JSON objects).
pub use rmcp::model::{CallToolResult, ElicitRequestParams, ElicitResult, JsonObject};
