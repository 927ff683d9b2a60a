//! The net body: `http_request`, `fetch_url`, `port_check` and `dns_lookup` (and the LLM
//! primitives, which reach their endpoints through it).
//!
//! The policy's net gate judged the target's host and port before the action ran. The body
//! judges again, hop by hop: it parses each URL as a browser does, admits its host and port
//! by the allowlist, resolves a name itself and judges every address it got (loopback,
//! private, link-local, CGNAT, metadata and reserved blocks are refused unless `[net]
//! allow_ranges` names them), and then lets the client connect only to those addresses (its
//! resolver answers from the judged set and never asks DNS again, so an answer that changes
//! between the check and the connect reaches nothing). Address literals never reach a
//! resolver, so they are judged before the request is built. Redirects are not followed by
//! the client: each `Location` is judged as a new hop. No proxy is used (the client is built
//! without the system-proxy feature and with `no_proxy`), so `HTTP_PROXY` cannot route a
//! request around the judge.
//!
//! What the network answered (the request as sent with secrets replaced by markers, each
//! hop, the response with its body cut at the size cap) is the action's recorded input; the
//! result is [`aido_walk::net::render`] of it, live and in playback.

/// The actor and its messages.
pub mod actor;
/// One HTTP exchange, hop by hop, over judged addresses.
pub mod http;
/// Model calls (llm_call, ollama_chat, ollama_api) as requests through the same client.
pub mod llm;

pub use actor::{NetBody, NetBodyArgs, NetMsg};

use aido_net::NetError;

/// Why the net body could not answer a call.
#[derive(Debug, thiserror::Error)]
pub enum NetBodyError {
    /// A hop's target or address was refused (the same codes as the net gate's).
    #[error("{0}")]
    Refused(#[from] NetError),
    /// A name did not resolve.
    #[error("{host} did not resolve: {why}")]
    DnsFailed {
        /// The name.
        host: String,
        /// The resolver's message.
        why: String,
    },
    /// The exchange took longer than its timeout.
    #[error("no answer from {url} within {timeout_ms} ms")]
    Timeout {
        /// The URL (redacted) or host:port.
        url: String,
        /// The bound.
        timeout_ms: u64,
    },
    /// No connection could be made to any judged address.
    #[error("cannot connect to {url}: {why}")]
    ConnectFailed {
        /// The URL (redacted) or host:port.
        url: String,
        /// Why.
        why: String,
    },
    /// The exchange failed after connecting (TLS, protocol, reading the body).
    #[error("the request to {url} failed: {why}")]
    RequestFailed {
        /// The URL (redacted).
        url: String,
        /// Why.
        why: String,
    },
    /// A request header name or value that HTTP does not allow.
    #[error("the header {name:?} is not a valid HTTP header")]
    HeaderInvalid {
        /// The name.
        name: String,
    },
    /// More redirects than allowed.
    #[error("more than {max} redirects (the last to {url})")]
    RedirectsExceeded {
        /// The bound.
        max: u32,
        /// Where the last one pointed (redacted).
        url: String,
    },
    /// A redirect without a usable Location.
    #[error("the redirect from {url} has no usable Location")]
    RedirectInvalid {
        /// The URL that redirected (redacted).
        url: String,
    },
    /// A bound of the call is over the policy's (`[net]`).
    #[error("{what} {asked} is over the policy's bound {max} ([net] {key})")]
    OverBound {
        /// What was asked for.
        what: &'static str,
        /// The value asked for.
        asked: u64,
        /// The bound.
        max: u64,
        /// The config key.
        key: &'static str,
    },
    /// llm_call names no model and `[llm] model` is empty.
    #[error("llm_call names no model and [llm] model is not set")]
    LlmModelMissing,
    /// The provider needs a key and neither `[llm] api_key` nor the variable `[llm]
    /// api_key_env` names holds one.
    #[error("no API key: [llm] api_key is empty and the environment variable {env:?} is not set")]
    LlmKeyMissing {
        /// The variable's name.
        env: String,
    },
    /// The model server answered with an error status.
    #[error("the model server answered {status}: {body}")]
    LlmStatus {
        /// The status.
        status: u64,
        /// The start of its answer (secrets scrubbed).
        body: String,
    },
    /// Too many port checks within a minute.
    #[error("more than {max} port checks within a minute ([net] port_checks_per_minute_max)")]
    PortChecksExceeded {
        /// The bound.
        max: u32,
    },
}

aido_actions::coded!(NetBodyError {
    @delegate {
        Self::Refused(e) => e.code(),
    }
    @also ["net_url_invalid", "net_scheme_refused", "net_denied", "net_address_refused"]
    DnsFailed => "net_dns_failed",
    Timeout => "net_timeout",
    ConnectFailed => "net_connect_failed",
    RequestFailed => "net_request_failed",
    HeaderInvalid => "net_header_invalid",
    RedirectsExceeded => "net_redirects_exceeded",
    RedirectInvalid => "net_redirect_invalid",
    OverBound => "net_over_bound",
    PortChecksExceeded => "net_port_checks_exceeded",
    LlmModelMissing => "llm_model_missing",
    LlmKeyMissing => "llm_key_missing",
    LlmStatus => "llm_http_error",
});

impl NetBodyError {
    pub(crate) fn into_failure(self) -> aido_actions::Failure {
        let details = match &self {
            Self::Refused(NetError::AddressRefused {
                host,
                address,
                range,
                block,
            }) => Some(serde_json::json!({
                "host": host, "address": address.to_string(), "range": range, "block": block,
            })),
            Self::Refused(NetError::HostDenied { host, port }) => {
                Some(serde_json::json!({"host": host, "port": port}))
            }
            _ => None,
        };
        let failure = aido_actions::Failure::new(self.code(), self.to_string());
        match details {
            Some(d) => failure.with_details(d),
            None => failure,
        }
    }
}
