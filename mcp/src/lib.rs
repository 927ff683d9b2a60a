//! The MCP server: how agents reach aido.
//!
//! `tools/list` is generated from the Action table in aido-actions, so a new primitive appears
//! here with no code in this crate; its annotations (readOnlyHint, destructiveHint,
//! idempotentHint, openWorldHint) come from its side-effect class. `tools/call` parses the
//! arguments into an `Action` (size-capped, schema-checked) and runs it through the session:
//! policy, journal, body, journal. A refusal or failure is an `isError` result whose
//! `structuredContent` carries the stable `code` (and for refusals the `gate` and `reason`),
//! so the model can read it and correct itself. Confirmations are asked through MCP
//! elicitation (in 2026-07-28, `input_required` and the request's retry); long actions send
//! progress notifications; cancellation reaches the executor.
//!
//! Revisions: up to 2025-11-25 after an `initialize` handshake, one aido session per
//! connection; 2026-07-28 stateless, every request carrying its `_meta`, `server/discover`
//! answered, lists carrying deliberate cache hints ([`server::LIST_TTL_MS_FIXED`]), and
//! subscription batches reaching `subscriptions/listen` streams ([`listen`]).
//!
//! Over stdio every request gets exactly one answer: aido reads the lines itself, bounded by
//! `request_bytes_max`, and answers what rmcp would drop (not JSON, not UTF-8, nested too deep,
//! too large, not a JSON-RPC message) with a coded JSON-RPC error carrying the request's id.
//!
//! This crate must never print: stdout is the protocol. Logs go through `tracing` to stderr.
#![deny(clippy::print_stdout, clippy::print_stderr)]

/// The conformance suite's fixtures (the `conformance` feature; tests/conformance only).
#[cfg(feature = "conformance")]
pub(crate) mod conformance;
/// The server mounted on streamable HTTP, for `aido serve`.
pub mod http;
/// `subscriptions/listen` (2026-07-28): subscription batches and list changes for listeners.
pub mod listen;
/// `input_required` (2026-07-28): asking a person through the request's retry.
pub(crate) mod mrtr;
/// Where a connection's calls run, and the places of 2026-07-28 HTTP requests.
pub(crate) mod place;
/// The bounded streaming scan that recovers a line's id, method and tool.
pub(crate) mod scan;
/// `aido mcp` over stdin/stdout.
mod serve_stdio;
/// The server: a `ServerHandler` over one aido session per connection.
pub mod server;
/// The stdio transport: bounded lines, every request answered, one writer to stdout.
pub(crate) mod stdio;
/// Tool definitions from the Action table.
pub mod tools;
/// The MCP revisions each transport speaks.
pub mod versions;

pub use serve_stdio::{serve_stdio, shutdown_signal};
pub use server::AidoServer;
pub use stdio::{BodyVerdict, id_in_flight, judge_body, not_initialized, request_bytes_max};
pub use versions::{HTTP_PROTOCOL_VERSIONS, STDIO_PROTOCOL_VERSIONS};
