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

/// Who wrote a chat message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions (sent as Anthropic's top-level `system`).
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
}

/// One chat message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: Role,
    /// The text (at most 256 KiB).
    #[schemars(length(max = 262144))]
    pub content: String,
}

/// Call the configured model (`[llm]`: an OpenAI-compatible chat completions endpoint or
/// Anthropic's messages API) with a conversation; the key comes from aido's config or
/// environment, never from the agent, and is never journaled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LlmCall {
    /// The conversation, oldest first (1 to 256 messages).
    #[schemars(length(min = 1, max = 256))]
    pub messages: Vec<ChatMessage>,
    /// Instructions, sent before the messages (Anthropic: the top-level `system`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 262144))]
    pub system: Option<String>,
    /// The model; default `[llm] model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub model: Option<String>,
    /// Most tokens to generate (default `[llm] max_tokens_default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000000))]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 2.0))]
    pub temperature: Option<f64>,
    /// Longest the call may take, in milliseconds (default 120000, within `[net] timeout_ms_max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
}

/// Ollama's generation options.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OllamaOptions {
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Most tokens to generate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_predict: Option<i64>,
    /// The sampling seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// The context window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_ctx: Option<u32>,
}

/// Chat with a model on the configured Ollama server (`[ollama] base_url`, `/api/chat`);
/// streamed by default, as Ollama does, and assembled into one message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OllamaChat {
    /// The model (`llama3.2`, `smollm2:135m`).
    #[schemars(length(min = 1, max = 256))]
    pub model: String,
    /// The conversation, oldest first (1 to 256 messages).
    #[schemars(length(min = 1, max = 256))]
    pub messages: Vec<ChatMessage>,
    /// Generation options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<OllamaOptions>,
    /// Stream the answer (the default, as in Ollama); aido reads every chunk and returns the
    /// whole message with the number of chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Longest the call may take, in milliseconds (default 120000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
}

/// Which Ollama endpoint ollama_api calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OllamaEndpoint {
    /// `POST /api/chat`.
    Chat,
    /// `POST /api/generate`.
    Generate,
    /// `GET /api/tags`: the local models.
    Tags,
    /// `POST /api/show`: one model's details.
    Show,
}

impl OllamaEndpoint {
    /// The method and path.
    pub fn route(self) -> (&'static str, &'static str) {
        match self {
            Self::Chat => ("POST", "api/chat"),
            Self::Generate => ("POST", "api/generate"),
            Self::Tags => ("GET", "api/tags"),
            Self::Show => ("POST", "api/show"),
        }
    }
}

/// Call one endpoint of Ollama's API on the configured server with a JSON body as Ollama
/// documents it (streamed answers are read whole and assembled).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OllamaApi {
    /// `chat`, `generate`, `tags` or `show`.
    pub endpoint: OllamaEndpoint,
    /// The request body (a JSON object; none for `tags`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Map<String, serde_json::Value>>,
    /// Longest the call may take, in milliseconds (default 120000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
}

impl Touches for LlmCall {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for OllamaChat {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for OllamaApi {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
