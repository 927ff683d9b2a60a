//! Attribute names. The MCP ones follow the semantic conventions' `docs/gen-ai/mcp.md`; the
//! GenAI ones moved out of `opentelemetry-semantic-conventions` (experimental, deprecated
//! there), so aido names them itself. aido's own start with `aido.`.

/// The JSON-RPC method (`tools/call`). Required on MCP spans.
pub const MCP_METHOD_NAME: &str = "mcp.method.name";
/// The MCP session: aido's session id (the one in the journal).
pub const MCP_SESSION_ID: &str = "mcp.session.id";
/// The tool called (the primitive).
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
/// `execute_tool` on tool calls.
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// `pipe` for stdio, `tcp` for HTTP.
pub const NETWORK_TRANSPORT: &str = "network.transport";
/// `tool_error` when the call's result is an error (MCP's isError).
pub const ERROR_TYPE: &str = "error.type";

/// The seq of the action's proposal record.
pub const AIDO_JOURNAL_SEQ: &str = "aido.journal.seq";
/// The hash of the record that closed the action (its outcome).
pub const AIDO_JOURNAL_HASH: &str = "aido.journal.hash";
/// A journal record's session (log records).
pub const AIDO_JOURNAL_SESSION: &str = "aido.journal.session";
/// A journal record's previous hash (log records).
pub const AIDO_JOURNAL_PREV_HASH: &str = "aido.journal.prev_hash";
/// A journal record's kind (`action_proposed`, ...).
pub const AIDO_JOURNAL_KIND: &str = "aido.journal.kind";
/// The primitive (metric label).
pub const AIDO_PRIMITIVE: &str = "aido.primitive";
/// A downstream call's server (`[[downstream]]` name).
pub const AIDO_DOWNSTREAM_SERVER: &str = "aido.downstream.server";
/// The side-effect class (`read_only`, `fs_write`, ...).
pub const AIDO_CLASS: &str = "aido.class";
/// The verdict (`allow`, `deny`, `confirm_approved`, ...).
pub const AIDO_VERDICT: &str = "aido.verdict";
/// The gate that refused (`path_walls`, ...).
pub const AIDO_GATE: &str = "aido.gate";
/// `ok` or `error`.
pub const AIDO_OUTCOME: &str = "aido.outcome";
/// The failure's code.
pub const AIDO_ERROR_CODE: &str = "aido.error.code";
/// Whether a journal write waited for the flush.
pub const AIDO_DURABLE: &str = "aido.journal.durable";

/// The span name's method and the value of [`MCP_METHOD_NAME`].
pub const TOOLS_CALL: &str = "tools/call";
/// The value of [`GEN_AI_OPERATION_NAME`].
pub const EXECUTE_TOOL: &str = "execute_tool";
/// The event name of journal log records.
pub const JOURNAL_RECORD_EVENT: &str = "aido.journal.record";
