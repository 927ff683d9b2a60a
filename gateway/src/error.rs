//! The error enums and their codes: [`ConfigError`] for a `[[downstream]]` entry that cannot
//! be used, [`DownstreamError`] for everything that can go wrong while a downstream runs.

use std::path::PathBuf;

/// A `[[downstream]]` entry is not usable; nothing was started.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The name is empty, too long, or outside `[a-z0-9_-]` (or has `__`, or starts or ends
    /// with `_` or `-`, which would make a namespaced tool name ambiguous).
    #[error("the downstream name {name:?} is invalid: {why}")]
    NameInvalid {
        /// The name as written.
        name: String,
        /// Which rule it breaks.
        why: String,
    },
    /// Two entries have the same name.
    #[error("two downstreams are named {name:?}")]
    NameDuplicate {
        /// The name.
        name: String,
    },
    /// An entry is inconsistent (both or neither of `command` and `url`, an empty restart
    /// window, a tool pattern that is not a glob, ...).
    #[error("the downstream {server:?} is misconfigured: {why}")]
    Invalid {
        /// The entry's name.
        server: String,
        /// What is wrong.
        why: String,
    },
}

aido_codes::coded!(ConfigError {
    NameInvalid => "downstream_name_invalid",
    NameDuplicate => "downstream_name_duplicate",
    Invalid => "downstream_config_invalid",
});

/// Starting, listing or calling a downstream failed. Every variant names the downstream; none
/// of them means a tool call took effect unless its doc says so.
#[derive(Debug, thiserror::Error)]
pub enum DownstreamError {
    /// The configuration is not usable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The sandbox could not be built for the downstream's command: nothing ran (fail closed,
    /// a downstream never runs unconfined). `sandbox_code` is the sandbox's own code.
    #[error("the sandbox for downstream {server:?} could not be built ({sandbox_code}): {message}")]
    SandboxFailed {
        /// The downstream.
        server: String,
        /// The sandbox's code (`sandbox_unavailable`, `sandbox_setup_failed`, ...).
        sandbox_code: &'static str,
        /// The sandbox's message.
        message: String,
    },
    /// The downstream's command could not be executed inside the sandbox (not found there,
    /// or not executable).
    #[error("the command of downstream {server:?} cannot run: {message}")]
    CommandMissing {
        /// The downstream.
        server: String,
        /// The sandbox's message (the program and the errno).
        message: String,
    },
    /// The downstream started but the MCP handshake failed (it exited, printed something that
    /// is not MCP, or refused the initialization).
    #[error(
        "downstream {server:?} did not complete the MCP handshake: {why}{}",
        stderr_suffix(stderr)
    )]
    HandshakeFailed {
        /// The downstream.
        server: String,
        /// The client's error.
        why: String,
        /// The end of the downstream's standard error, if any.
        stderr: String,
    },
    /// A streamable HTTP downstream's token file cannot be read.
    #[error("the token file {path:?} of downstream {server:?} cannot be read: {why}")]
    TokenUnreadable {
        /// The downstream.
        server: String,
        /// The file.
        path: PathBuf,
        /// The I/O error, or why its content is not a token.
        why: String,
    },
    /// The downstream's process ended or its transport closed while a request was in
    /// flight: the request may or may not have taken effect. The next call restarts it
    /// within the restart budget.
    #[error("downstream {server:?} crashed: {why}{}", stderr_suffix(stderr))]
    Crashed {
        /// The downstream.
        server: String,
        /// How it ended.
        why: String,
        /// The end of its standard error, if any.
        stderr: String,
    },
    /// The downstream crashed more often than its restart budget allows; it is not restarted
    /// before the window has passed.
    #[error(
        "downstream {server:?} is unavailable: it crashed {crashes} times within {window_secs} s"
    )]
    Unavailable {
        /// The downstream.
        server: String,
        /// Crashes counted in the window.
        crashes: usize,
        /// The window.
        window_secs: u64,
    },
    /// A request did not answer within its deadline; it was cancelled downstream.
    #[error("downstream {server:?} did not answer {what} within {timeout_ms} ms")]
    Timeout {
        /// The downstream.
        server: String,
        /// The request (`tools/call git_status`, `tools/list`).
        what: String,
        /// The deadline.
        timeout_ms: u64,
    },
    /// The tool ran and reported an error (`isError: true`); its own message and the whole
    /// result are kept.
    #[error("tool {tool:?} of downstream {server:?} failed: {message}")]
    ToolFailed {
        /// The downstream.
        server: String,
        /// The downstream's own name of the tool.
        tool: String,
        /// The text of the result's content.
        message: String,
        /// The whole result, for the journal.
        result: Box<rmcp::model::CallToolResult>,
    },
    /// The downstream answered a request with a JSON-RPC error; its own code and message are
    /// kept.
    #[error("downstream {server:?} refused {what}: {message} (JSON-RPC {rpc_code})")]
    Refused {
        /// The downstream.
        server: String,
        /// The request.
        what: String,
        /// The JSON-RPC error code.
        rpc_code: i32,
        /// Its message.
        message: String,
        /// Its data, if any.
        data: Option<serde_json::Value>,
    },
    /// The downstream answered with something that is not the answer to the request.
    #[error("downstream {server:?} broke the protocol: {why}")]
    Protocol {
        /// The downstream.
        server: String,
        /// What it did.
        why: String,
    },
    /// No tool of the gateway has this (namespaced) name: not listed, filtered out by the
    /// entry's `tools`, or of another downstream.
    #[error("downstream {server:?} exposes no tool {name:?}")]
    ToolUnknown {
        /// The downstream.
        server: String,
        /// The name asked for.
        name: String,
    },
    /// The downstream lists more tools than the gateway keeps.
    #[error("downstream {server:?} lists more than {max} tools")]
    TooManyTools {
        /// The downstream.
        server: String,
        /// The bound.
        max: usize,
    },
    /// Two of the downstream's tools would get the same namespaced name.
    #[error(
        "downstream {server:?} has tools whose namespaced names collide: {first:?} and {second:?}"
    )]
    NamesCollide {
        /// The downstream.
        server: String,
        /// One tool.
        first: String,
        /// The other.
        second: String,
    },
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(" (its standard error ends: {stderr})")
    }
}

fn details(error: &DownstreamError) -> Option<serde_json::Value> {
    match error {
        DownstreamError::SandboxFailed { sandbox_code, .. } => {
            Some(serde_json::json!({ "sandbox_code": sandbox_code }))
        }
        DownstreamError::Refused { rpc_code, data, .. } => {
            Some(serde_json::json!({ "rpc_code": rpc_code, "data": data }))
        }
        DownstreamError::ToolFailed { result, .. } => serde_json::to_value(result)
            .ok()
            .map(|result| serde_json::json!({ "result": result })),
        _ => None,
    }
}

aido_codes::coded!(DownstreamError {
    @details details;
    @delegate { Self::Config(error) => error.code() }
    @also ["downstream_name_invalid", "downstream_name_duplicate", "downstream_config_invalid"]
    SandboxFailed => "downstream_sandbox_failed",
    CommandMissing => "downstream_command_missing",
    HandshakeFailed => "downstream_handshake_failed",
    TokenUnreadable => "downstream_token_unreadable",
    Crashed => "downstream_crashed",
    Unavailable => "downstream_unavailable",
    Timeout => "downstream_timeout",
    ToolFailed => "downstream_tool_failed",
    Refused => "downstream_refused",
    Protocol => "downstream_protocol_error",
    ToolUnknown => "downstream_tool_unknown",
    TooManyTools => "downstream_too_many_tools",
    NamesCollide => "downstream_tool_names_collide",
});

impl DownstreamError {
    /// The downstream the error is about (`None` for a configuration error about a list).
    pub fn server(&self) -> Option<&str> {
        match self {
            Self::Config(
                ConfigError::NameInvalid { name, .. } | ConfigError::NameDuplicate { name },
            ) => Some(name),
            Self::Config(ConfigError::Invalid { server, .. })
            | Self::SandboxFailed { server, .. }
            | Self::CommandMissing { server, .. }
            | Self::HandshakeFailed { server, .. }
            | Self::TokenUnreadable { server, .. }
            | Self::Crashed { server, .. }
            | Self::Unavailable { server, .. }
            | Self::Timeout { server, .. }
            | Self::ToolFailed { server, .. }
            | Self::Refused { server, .. }
            | Self::Protocol { server, .. }
            | Self::ToolUnknown { server, .. }
            | Self::TooManyTools { server, .. }
            | Self::NamesCollide { server, .. } => Some(server),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole code table, pinned: codes are never reused or renamed.
    #[test]
    fn the_code_tables() {
        assert_eq!(
            ConfigError::CODES,
            &[
                "downstream_name_invalid",
                "downstream_name_duplicate",
                "downstream_config_invalid"
            ]
        );
        assert_eq!(
            DownstreamError::CODES,
            &[
                "downstream_sandbox_failed",
                "downstream_command_missing",
                "downstream_handshake_failed",
                "downstream_token_unreadable",
                "downstream_crashed",
                "downstream_unavailable",
                "downstream_timeout",
                "downstream_tool_failed",
                "downstream_refused",
                "downstream_protocol_error",
                "downstream_tool_unknown",
                "downstream_too_many_tools",
                "downstream_tool_names_collide",
                "downstream_name_invalid",
                "downstream_name_duplicate",
                "downstream_config_invalid",
            ]
        );
    }

    #[test]
    fn a_configuration_error_keeps_its_own_code() {
        let error = DownstreamError::from(ConfigError::NameDuplicate { name: "git".into() });
        assert_eq!(error.code(), "downstream_name_duplicate");
        assert_eq!(error.server(), Some("git"));
    }
}
