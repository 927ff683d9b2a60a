//! The egress proxy: a confined command's only way out of its network namespace.
//!
//! With [`Network::Proxy`], the sandbox child brings up the namespace's loopback, binds
//! `127.0.0.1:`[`EGRESS_PORT`] there and hands the listening socket to the parent over the
//! control socket (`SCM_RIGHTS`), before init starts. The namespace has no other interface, and
//! Landlock lets the command connect to that one TCP port only, so the proxy is not a
//! convention the command may ignore (`HTTP_PROXY` and friends only tell tools where it is):
//! there is no route around it. The parent serves the socket as an HTTP proxy: `CONNECT
//! host:port` for TLS and anything else, absolute-form requests for plain HTTP. Each target is
//! judged by the profile's host:port allowlist ([`aido_net::NetPolicy`]: exact names and
//! `*.suffix`), resolved by the parent, and every address judged again after resolution
//! (loopback, private, link-local, CGNAT and metadata ranges refused unless the profile names
//! them); the connection goes to the address that was judged, so a second DNS answer cannot
//! rebind it. Every attempt that names a target, admitted or refused, is an [`EgressRecord`]
//! in the command's outcome (`aido_sandbox::Outcome`), which the journal keeps; every connection is counted
//! in its [`EgressTotals`].
//!
//! # What a command's network costs aido
//!
//! The design decision: whatever a command does to its proxy costs the command, never the
//! host. Every proxy of the process is served by one small tokio runtime of its own
//! ([`EGRESS_WORKER_THREADS`] threads, and at most [`EGRESS_RESOLUTIONS_TOTAL_MAX`] more for
//! name resolution, whose C library call blocks): a connection is a task, not a thread, so
//! aido's thread count is at most [`EGRESS_THREADS_MAX`] more than without network, however
//! many commands and connections there are (a thread per connection gave 2,715 threads to a
//! command that opened 2,700 slow connections). Each bound below refuses with a code the
//! command sees (`X-Aido-Code`) and the totals count:
//!
//! | bound | default | past it |
//! |---|---|---|
//! | connections open per command ([`Network::Proxy`] `connections_max`) | [`EGRESS_CONNECTIONS_MAX_DEFAULT`] | `503`, `egress_connections_max` |
//! | connections open in the whole process (`connections_total_max`) | [`EGRESS_CONNECTIONS_TOTAL_MAX_DEFAULT`] | `503`, `egress_connections_total_max` |
//! | the whole request head, from the accept | [`EGRESS_HEAD_TIMEOUT_MS`] | `408`, `egress_head_timeout` |
//! | request head size | [`EGRESS_HEAD_BYTES_MAX`] | `431`, `egress_head_bytes_max` |
//! | resolutions per command, and in the process | [`EGRESS_RESOLUTIONS_MAX`], [`EGRESS_RESOLUTIONS_TOTAL_MAX`] | wait within the deadline |
//! | one name's resolution, the wait for a resolver included | [`EGRESS_RESOLVE_TIMEOUT_MS`] | `504`, `egress_resolve_timeout` |
//! | connecting, every address together | [`EGRESS_CONNECT_TIMEOUT_MS`] | `504`, `egress_connect_timeout` |
//! | host names, methods | 253 bytes (`aido_net::target::DOMAIN_BYTES_MAX`), [`EGRESS_METHOD_BYTES_MAX`] | `400`, `egress_request_invalid` |
//! | records | [`EGRESS_RECORDS_MAX`] per command, messages cut at [`EGRESS_MESSAGE_BYTES_MAX`] | counted in [`EgressTotals::records_dropped`] |
//!
//! A connection holds two of aido's descriptors and at most about 50 KiB (its head, then two
//! relay buffers of [`RELAY_BUFFER_BYTES`]), so the process-wide cap bounds both. A connection
//! over a cap is answered and closed by the accept loop at once, without a task. A refusal
//! before any target is known (over a cap, a late, large or malformed head, a connection cut
//! by the command's end) is recorded once per code and counted every time, so a flood cannot
//! fill the record list; the command's end cuts whatever is still open.
//!
//! # Example
//!
//! The sandbox parses a profile's network before anything is spawned, then serves the socket
//! its child bound with [`Proxy::start`] and ends it with [`Proxy::finish`]:
//!
//! ```
//! let network = aido_egress::Network::proxy(vec!["*.crates.io:443".into()], Vec::new());
//! assert!(network.policy()?.is_some());
//! assert!(aido_egress::Network::None.policy()?.is_none());
//! # Ok::<(), aido_egress::NetworkInvalid>(())
//! ```

/// One connection: its head, its judgement, its relay.
mod connection;
/// Why a connection was refused, with stable codes; why a network is malformed.
mod error;
/// The allowlist, bounded name resolution, the range check and the connect.
mod judge;
/// The parent's side: the runtime and a command's proxy.
mod proxy;
/// Reading and parsing a request head.
mod request;
/// What a command's proxy shares with its connections: its phase, its log, its slots.
mod shared;

use std::collections::BTreeMap;

use aido_net::NetPolicy;
use serde::{Deserialize, Serialize};

pub use error::{NetworkInvalid, ProxyError};
pub use proxy::{EgressLog, Proxy};

/// The proxy's port on the namespace's loopback (the namespace is the command's own, so any
/// port is free; a fixed one lets the parent write the plan before the child binds it).
pub const EGRESS_PORT: u16 = 3128;
/// Attempts recorded per command; later ones are counted in [`EgressTotals::records_dropped`].
pub const EGRESS_RECORDS_MAX: usize = 1000;
/// Connections one command may have open through its proxy, unless its profile says otherwise.
pub const EGRESS_CONNECTIONS_MAX_DEFAULT: u32 = 64;
/// Connections every command of the process may have open through their proxies together,
/// unless a profile says otherwise. Each holds two of aido's descriptors: keep twice this
/// under aido's `RLIMIT_NOFILE`.
pub const EGRESS_CONNECTIONS_TOTAL_MAX_DEFAULT: u32 = 256;
/// The largest request head the proxy reads.
pub const EGRESS_HEAD_BYTES_MAX: usize = 16 << 10;
/// How long a client may take to send its whole request head, from the accept: one deadline
/// for the head, not for each read, so trickling a byte at a time does not extend it.
pub const EGRESS_HEAD_TIMEOUT_MS: u64 = 10_000;
/// How long connecting to a target may take, every address of it together.
pub const EGRESS_CONNECT_TIMEOUT_MS: u64 = 10_000;
/// How long resolving a name may take, the wait for a free resolver included.
pub const EGRESS_RESOLVE_TIMEOUT_MS: u64 = 5_000;
/// Names one command's proxy resolves at once (each holds a host thread in the C library's
/// resolver until it answers, even after the deadline gave up on it).
pub const EGRESS_RESOLUTIONS_MAX: usize = 2;
/// Names every proxy of the process resolves at once: the most resolver threads there are.
pub const EGRESS_RESOLUTIONS_TOTAL_MAX: usize = 8;
/// The threads that serve every proxy's connections.
pub const EGRESS_WORKER_THREADS: usize = 2;
/// The most threads the egress proxies of one process ever have.
pub const EGRESS_THREADS_MAX: usize = EGRESS_WORKER_THREADS + EGRESS_RESOLUTIONS_TOTAL_MAX;
/// The longest method a request may name (a method is recorded with its attempt).
pub const EGRESS_METHOD_BYTES_MAX: usize = 32;
/// The longest refusal message recorded (a message may quote what the command sent).
pub const EGRESS_MESSAGE_BYTES_MAX: usize = 512;
/// Addresses of one name tried in turn, within [`EGRESS_CONNECT_TIMEOUT_MS`].
pub const EGRESS_ADDRESSES_TRIED_MAX: usize = 8;
/// Each direction of a relayed connection copies through a buffer of this size.
pub const RELAY_BUFFER_BYTES: usize = 16 << 10;

/// A confined command's network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Network {
    /// No network but the command's own: a namespace with only its loopback, up.
    #[default]
    None,
    /// Only aido's egress proxy, which admits the hosts of `allow` (`host:port`,
    /// `*.suffix:port`, ports as `443`, `80,443` or `*`) at addresses outside the refused ranges
    /// unless `allow_ranges` (CIDR blocks) opens them.
    Proxy {
        /// The host:port allowlist.
        allow: Vec<String>,
        /// Refused ranges opened anyway (e.g. `127.0.0.1/32` for a test server).
        #[serde(default)]
        allow_ranges: Vec<String>,
        /// Connections the command may have open through the proxy at once; past it a new
        /// one is answered `503` and closed (`egress_connections_max`).
        #[serde(default = "connections_max_default")]
        connections_max: u32,
        /// Connections every command of this process may have open through their proxies
        /// together; past it a new one is answered `503` and closed
        /// (`egress_connections_total_max`).
        #[serde(default = "connections_total_max_default")]
        connections_total_max: u32,
    },
}

fn connections_max_default() -> u32 {
    EGRESS_CONNECTIONS_MAX_DEFAULT
}

fn connections_total_max_default() -> u32 {
    EGRESS_CONNECTIONS_TOTAL_MAX_DEFAULT
}

impl Network {
    /// A proxy network with the default connection limits.
    pub fn proxy(allow: Vec<String>, allow_ranges: Vec<String>) -> Self {
        Network::Proxy {
            allow,
            allow_ranges,
            connections_max: EGRESS_CONNECTIONS_MAX_DEFAULT,
            connections_total_max: EGRESS_CONNECTIONS_TOTAL_MAX_DEFAULT,
        }
    }

    /// The parsed allowlist and limits of a proxy network; `None` for no network.
    pub fn policy(&self) -> Result<Option<EgressPolicy>, NetworkInvalid> {
        let invalid = |reason: String| NetworkInvalid { reason };
        match self {
            Network::None => Ok(None),
            Network::Proxy {
                allow,
                allow_ranges,
                connections_max,
                connections_total_max,
            } => {
                if *connections_max == 0 || *connections_total_max == 0 {
                    return Err(invalid(
                        "connections_max and connections_total_max must be at least 1".into(),
                    ));
                }
                let net = NetPolicy::new(allow, allow_ranges)
                    .map_err(|error| invalid(error.to_string()))?;
                Ok(Some(EgressPolicy {
                    net,
                    grant: None,
                    connections_max: *connections_max as usize,
                    connections_total_max: *connections_total_max as usize,
                }))
            }
        }
    }
}

/// What one command's proxy judges by: the allowlist and ranges, and its connection limits
/// (made by [`Network::policy`]).
#[derive(Clone, Debug)]
pub struct EgressPolicy {
    pub(crate) net: NetPolicy,
    /// A session's capability grant, narrowing the allowlist: a target must be named by both.
    pub(crate) grant: Option<NetPolicy>,
    pub(crate) connections_max: usize,
    pub(crate) connections_total_max: usize,
}

impl EgressPolicy {
    /// This policy narrowed by a capability grant's hosts (`host`, `host:port`, `*.suffix`):
    /// a target the allowlist admits is refused `egress_not_granted` unless the grant names it
    /// too. Addresses are judged by the allowlist's ranges alone.
    pub fn narrowed_by(mut self, hosts: &[String]) -> Result<Self, NetworkInvalid> {
        let grant = NetPolicy::new(hosts, &[]).map_err(|error| NetworkInvalid {
            reason: format!("the grant's hosts: {error}"),
        })?;
        self.grant = Some(grant);
        Ok(self)
    }
}

/// One connection attempt through the proxy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressRecord {
    /// `CONNECT`, or the method of a plain-HTTP request (empty when refused before its head).
    pub method: String,
    /// The host asked for, as the command wrote it.
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// The address connected to (after resolution and its check), when it got that far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Why it was refused (a stable code, e.g. `net_denied`, `net_address_refused`,
    /// `egress_connections_max`), or `None` when it was admitted and connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The refusal's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Bytes from the command to the host.
    pub bytes_up: u64,
    /// Bytes from the host to the command.
    pub bytes_down: u64,
}

impl EgressRecord {
    /// A record of a connection whose head is not read yet.
    pub(crate) fn anonymous() -> Self {
        EgressRecord {
            method: String::new(),
            host: String::new(),
            port: 0,
            address: None,
            code: None,
            message: None,
            bytes_up: 0,
            bytes_down: 0,
        }
    }
}

/// Every connection a command opened to its proxy, counted whether or not it has a record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressTotals {
    /// Connections accepted from the command.
    pub connections: u64,
    /// Of those, judged, admitted and connected to their host.
    pub admitted: u64,
    /// Of those, refused, by code (`egress_connections_max`, `net_denied`, …);
    /// `egress_command_ended` counts the ones the command's end cut before their judgement.
    pub refused: BTreeMap<String, u64>,
    /// Attempts without a record: past [`EGRESS_RECORDS_MAX`], or a refusal before any
    /// target was known whose code already has one.
    pub records_dropped: u64,
}

/// Connections open through every egress proxy of this process (what
/// `connections_total_max` bounds).
pub fn connections_open() -> usize {
    shared::connections_open()
}
