//! The MCP revisions aido speaks on each transport, and the words an HTTP session's end is
//! journaled with.

use rmcp::model::ProtocolVersion;

/// The first revision without an `initialize` handshake or sessions.
pub const STATELESS_FROM: &str = "2026-07-28";

/// The revisions `aido serve` speaks: 2025-03-26 to 2025-11-25 with an `initialize` handshake
/// and an `Mcp-Session-Id` (one aido session per MCP session), and 2026-07-28, which has
/// neither (SEP-2567/2575): its requests carry `_meta` and share an aido session per bearer and
/// endpoint. A client asking for 2026-07-28 at `initialize` is offered 2025-11-25.
pub const HTTP_PROTOCOL_VERSIONS: &[ProtocolVersion] = &[
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2026_07_28,
];

/// The revisions `aido mcp` speaks on stdio: 2024-11-05 to 2025-11-25 after an `initialize`
/// handshake, and 2026-07-28 when the first request is `server/discover` or carries its
/// `_meta` (rmcp picks the era from it). A client asking for 2026-07-28 at `initialize` is
/// offered 2025-11-25; any other request before either is refused (`not_initialized`) naming
/// these.
pub const STDIO_PROTOCOL_VERSIONS: &[ProtocolVersion] = &[
    ProtocolVersion::V_2024_11_05,
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2026_07_28,
];

/// Why an HTTP session ended, until shutdown says otherwise.
pub const HTTP_SESSION_ENDED: &str =
    "the MCP session ended (the client's DELETE, or idle past session_idle)";
