//! Network primitives: `http_request`, `fetch_url`, `port_check` and `dns_lookup`, run by the
//! net body. Every target is judged by the policy's allowlist (`[net] allow`, host and port)
//! before the action runs, and again by the body for every address a name resolves to and
//! every redirect hop; loopback, private, link-local, CGNAT and metadata addresses are refused
//! unless the policy names them (`[net] allow_ranges`). Secret headers and URL userinfo are
//! redacted in the journal. What the network answered is recorded, so playback reproduces the
//! result without it.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// An HTTP method.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    /// GET (the default).
    #[default]
    Get,
    /// HEAD.
    Head,
    /// POST.
    Post,
    /// PUT.
    Put,
    /// PATCH.
    Patch,
    /// DELETE.
    Delete,
    /// OPTIONS.
    Options,
}

impl Method {
    /// The method's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Head => "HEAD",
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Patch => "PATCH",
            Self::Delete => "DELETE",
            Self::Options => "OPTIONS",
        }
    }
}

/// Send one HTTP request to an allowlisted host and return the status, headers and body
/// (text, or base64 when it is not UTF-8), following redirects hop by hop (each judged again).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpRequest {
    /// An http or https URL.
    #[schemars(length(min = 1, max = 8192))]
    pub url: String,
    /// GET (the default), HEAD, POST, PUT, PATCH, DELETE or OPTIONS.
    #[serde(default)]
    pub method: Method,
    /// Request headers (at most 64). Authorization, Cookie and key- or token-named headers
    /// are sent but redacted in the journal.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(length(max = 64))]
    pub headers: BTreeMap<String, String>,
    /// The request body, as text (at most 1 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1048576))]
    pub body: Option<String>,
    /// Longest the whole exchange may take, redirects included, in milliseconds (default
    /// 30000; at most `[net] timeout_ms_max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
    /// Most bytes of response body kept (default 1 MiB; at most `[net] response_bytes_max`);
    /// a longer body is cut there and the result says `truncated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_bytes: Option<u64>,
    /// Follow redirects (the default), each hop judged like the first; false returns the
    /// redirect itself.
    #[serde(default = "yes")]
    pub follow_redirects: bool,
    /// Most redirects followed (default 5; at most `[net] redirects_max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 20))]
    pub max_redirects: Option<u32>,
}

fn yes() -> bool {
    true
}

/// How fetch_url hands a page to the agent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PageFormat {
    /// HTML as markdown (the default); other text as it is.
    #[default]
    Markdown,
    /// HTML as plain text.
    Text,
    /// The body as received.
    Raw,
}

/// Fetch a page (GET, redirects followed and judged hop by hop) and return it as markdown or
/// text, a window at a time: `length` characters from `offset`, with the next offset.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchUrl {
    /// An http or https URL.
    #[schemars(length(min = 1, max = 8192))]
    pub url: String,
    /// `markdown` (the default), `text` or `raw`.
    #[serde(default)]
    pub format: PageFormat,
    /// Where the window starts, in characters of the converted page (default 0).
    #[serde(default)]
    pub offset: u64,
    /// Most characters returned (default 5000, at most 100000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub length: Option<u32>,
    /// Longest the fetch may take, in milliseconds (default 30000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
}

/// Whether a TCP port on an allowlisted host accepts a connection (nothing is sent). Rate
/// limited: it is a scanner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PortCheck {
    /// A name or an address.
    #[schemars(length(min = 1, max = 253))]
    pub host: String,
    /// The port.
    #[schemars(range(min = 1))]
    pub port: u16,
    /// Longest the connection attempt may take, in milliseconds (default 3000, at most 30000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 30000))]
    pub timeout_ms: Option<u64>,
}

/// The addresses an allowlisted name resolves to, each with the refused range it falls in,
/// if any.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DnsLookup {
    /// A name on the allowlist.
    #[schemars(length(min = 1, max = 253))]
    pub host: String,
}

// The network touches no path: the net gate (allowlist and ranges) judges the target.
impl Touches for HttpRequest {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for FetchUrl {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for PortCheck {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for DnsLookup {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
