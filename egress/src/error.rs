//! Why the proxy refused a connection, with a stable code (the record's `code` and the
//! answer's `X-Aido-Code`) and the HTTP status the command gets.

use aido_net::NetError;

use super::{
    EGRESS_CONNECT_TIMEOUT_MS, EGRESS_HEAD_BYTES_MAX, EGRESS_HEAD_TIMEOUT_MS,
    EGRESS_RESOLVE_TIMEOUT_MS,
};

/// A [`crate::Network`] that cannot be served: a malformed allowlist or range, or a limit of
/// zero. The sandbox refuses the command with it (`sandbox_request_invalid`) before anything
/// runs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("network: {reason}")]
pub struct NetworkInvalid {
    /// What is wrong.
    pub reason: String,
}

/// One connection's refusal by the egress proxy.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    /// Not an HTTP/1.x proxy request (a malformed line, a scheme other than http, an overlong
    /// or unparsable host), or a connection closed before its head.
    #[error("{reason}")]
    RequestInvalid {
        /// What was wrong.
        reason: String,
    },
    /// The whole head did not arrive within [`EGRESS_HEAD_TIMEOUT_MS`] of the accept.
    #[error("the request head did not arrive within {EGRESS_HEAD_TIMEOUT_MS} ms")]
    HeadTimeout,
    /// The head grew past [`EGRESS_HEAD_BYTES_MAX`] without ending.
    #[error("a request head over {EGRESS_HEAD_BYTES_MAX} bytes")]
    HeadBytesMax,
    /// The command already had its most connections open.
    #[error(
        "{open} connections open, the most one command may have ([processes] egress_connections_max)"
    )]
    ConnectionsMax {
        /// Its limit.
        open: usize,
    },
    /// Every command of this aido process together already had the most connections open.
    #[error(
        "{open} connections open through aido's proxies, the most there may be ([processes] egress_connections_total_max)"
    )]
    ConnectionsTotalMax {
        /// The limit.
        open: usize,
    },
    /// The allowlist or the address ranges refused the target (named as the policy's
    /// `[processes]` settings, which are the proxy's).
    #[error("{}", .0.message_with("[processes] egress", "[processes] egress_allow_ranges"))]
    Net(NetError),
    /// The resolver answered with an error, or with no address.
    #[error("resolving {host}: {why}")]
    ResolveFailed {
        /// The name.
        host: String,
        /// The resolver's answer.
        why: String,
    },
    /// No answer within [`EGRESS_RESOLVE_TIMEOUT_MS`] (waiting for a free resolver included).
    #[error("resolving {host} took over {EGRESS_RESOLVE_TIMEOUT_MS} ms")]
    ResolveTimeout {
        /// The name.
        host: String,
    },
    /// Every address refused the connection.
    #[error("connecting to {tried}")]
    ConnectFailed {
        /// Each address tried, with its error.
        tried: String,
    },
    /// Connecting took over [`EGRESS_CONNECT_TIMEOUT_MS`], every address together.
    #[error("connecting to {host} took over {EGRESS_CONNECT_TIMEOUT_MS} ms{tried}")]
    ConnectTimeout {
        /// The target.
        host: String,
        /// The addresses that failed before, if any (`: a: error; b: error`).
        tried: String,
    },
    /// The command ended before the connection was judged.
    #[error("the command ended before the connection was judged")]
    CommandEnded,
    /// The allowlist admits the target, but the session's capability grant does not name it.
    #[error("{host}:{port} is not among the hosts the session's grant names")]
    NotGranted {
        /// The host asked for.
        host: String,
        /// The port.
        port: u16,
    },
}

impl ProxyError {
    /// The status line of the answer.
    pub(crate) fn status(&self) -> &'static str {
        match self {
            Self::RequestInvalid { .. } => "400 Bad Request",
            Self::HeadTimeout => "408 Request Timeout",
            Self::HeadBytesMax => "431 Request Header Fields Too Large",
            Self::ConnectionsMax { .. } | Self::ConnectionsTotalMax { .. } => {
                "503 Service Unavailable"
            }
            Self::Net(_) | Self::NotGranted { .. } => "403 Forbidden",
            Self::ResolveFailed { .. } | Self::ConnectFailed { .. } => "502 Bad Gateway",
            Self::ResolveTimeout { .. } | Self::ConnectTimeout { .. } => "504 Gateway Timeout",
            Self::CommandEnded => "503 Service Unavailable",
        }
    }

    /// The whole answer: a status, the code in `X-Aido-Code`, and the message.
    pub(crate) fn answer(&self) -> String {
        let code = self.code();
        let body = format!("aido egress proxy: {code}: {self}\n");
        format!(
            "HTTP/1.1 {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nX-Aido-Code: {code}\r\nConnection: close\r\n\r\n{body}",
            self.status(),
            body.len()
        )
    }
}

aido_codes::coded!(ProxyError {
    @delegate {
        Self::Net(error) => error.code(),
    }
    RequestInvalid => "egress_request_invalid",
    HeadTimeout => "egress_head_timeout",
    HeadBytesMax => "egress_head_bytes_max",
    ConnectionsMax => "egress_connections_max",
    ConnectionsTotalMax => "egress_connections_total_max",
    ResolveFailed => "egress_resolve_failed",
    ResolveTimeout => "egress_resolve_timeout",
    ConnectFailed => "egress_connect_failed",
    ConnectTimeout => "egress_connect_timeout",
    CommandEnded => "egress_command_ended",
    NotGranted => "egress_not_granted",
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_table() {
        let table = [
            (
                ProxyError::RequestInvalid {
                    reason: String::new(),
                },
                "egress_request_invalid",
                "400",
            ),
            (ProxyError::HeadTimeout, "egress_head_timeout", "408"),
            (ProxyError::HeadBytesMax, "egress_head_bytes_max", "431"),
            (
                ProxyError::ConnectionsMax { open: 1 },
                "egress_connections_max",
                "503",
            ),
            (
                ProxyError::ConnectionsTotalMax { open: 1 },
                "egress_connections_total_max",
                "503",
            ),
            (
                ProxyError::ResolveFailed {
                    host: String::new(),
                    why: String::new(),
                },
                "egress_resolve_failed",
                "502",
            ),
            (
                ProxyError::ResolveTimeout {
                    host: String::new(),
                },
                "egress_resolve_timeout",
                "504",
            ),
            (
                ProxyError::ConnectFailed {
                    tried: String::new(),
                },
                "egress_connect_failed",
                "502",
            ),
            (
                ProxyError::ConnectTimeout {
                    host: String::new(),
                    tried: String::new(),
                },
                "egress_connect_timeout",
                "504",
            ),
            (ProxyError::CommandEnded, "egress_command_ended", "503"),
            (
                ProxyError::NotGranted {
                    host: String::new(),
                    port: 1,
                },
                "egress_not_granted",
                "403",
            ),
        ];
        for (error, code, status) in &table {
            assert_eq!(error.code(), *code);
            assert!(error.status().starts_with(status), "{code}");
            assert!(
                error
                    .answer()
                    .contains(&format!("\r\nX-Aido-Code: {code}\r\n")),
                "{code}"
            );
        }
        let codes: Vec<_> = table.iter().map(|(_, code, _)| *code).collect();
        assert_eq!(
            codes,
            ProxyError::CODES,
            "CODES lists exactly these, in order"
        );
        let net = ProxyError::Net(NetError::HostDenied {
            host: "example.com".into(),
            port: 443,
        });
        assert_eq!((net.code(), net.status()), ("net_denied", "403 Forbidden"));
        for code in ProxyError::CODES {
            assert!(!NetError::CODES.contains(code), "{code} is reused");
        }
    }
}
