//! Memory primitives: what an agent learned, kept across sessions, restarts and processes
//! (the memory body runs them on aido-memory's SQLite store in AIDO_HOME).
//!
//! The agent names a scope by its kind only; the runtime supplies the key (this session's id,
//! or a hash of this session's project root), so an agent can neither read nor write another
//! project's or session's memories by guessing a key. A recall or list that names no scope
//! sees what this session may see: global memories, this project's and this session's.
//!
//! Strings are bounded in the schema as in the store (`aido_memory::Limits::default()`), so a
//! flood is refused by the parser or the store with a code, never stored.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// Who may see a memory. The runtime fills in the key.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ScopeKind {
    /// Every session of every project.
    Global,
    /// Sessions working in this session's project (its root directory).
    #[default]
    Project,
    /// This session only.
    Session,
}

/// When a memory stops being returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Expiry {
    /// At this time, in milliseconds since the Unix epoch.
    AtMs(u64),
    /// This many milliseconds after it is remembered.
    AfterMs(u64),
}

/// Whether a recall needs every word of the query or any of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Terms {
    /// One matching word is enough; more rank higher (the default).
    #[default]
    Any,
    /// Every word must appear.
    All,
}

/// Remember a text: stored with its scope, tags, expiry and where it came from (this session
/// and the action's seq).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Remember {
    /// What to remember (at most 16 KiB of UTF-8).
    #[schemars(length(min = 1, max = 16384))]
    pub text: String,
    /// Who may recall it: `global`, `project` (the default) or `session`.
    #[serde(default)]
    pub scope: ScopeKind,
    /// Labels to filter on (at most 16, each 1 to 64 bytes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 64)))]
    pub tags: Vec<String>,
    /// When it stops being returned (`{"after_ms": N}` or `{"at_ms": T}`); absent keeps it
    /// until forgotten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry: Option<Expiry>,
}

/// Recall the memories that best match a query (bm25 ranking), best first, within a result
/// limit and a character budget, with a cursor for the next page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Recall {
    /// Plain words (at most 2 KiB and 32 words); quotes and operators are searched as text.
    #[schemars(length(min = 1, max = 2048))]
    pub query: String,
    /// Only these scopes; empty means every scope this session may see.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 3))]
    pub scopes: Vec<ScopeKind>,
    /// Only memories carrying every one of these tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 64)))]
    pub tags: Vec<String>,
    /// `any` word (the default) or `all` words.
    #[serde(default)]
    pub terms: Terms,
    /// Most results (default 10, at most 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<u32>,
    /// Most characters of text in all results together (default 8000, at most 200000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 200000))]
    pub budget_chars: Option<u32>,
    /// The `next_cursor` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub cursor: Option<String>,
}

/// List memories newest first, without a query, a page at a time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListMemory {
    /// Only these scopes; empty means every scope this session may see.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 3))]
    pub scopes: Vec<ScopeKind>,
    /// Only memories carrying every one of these tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 64)))]
    pub tags: Vec<String>,
    /// Most memories (default 50, at most 500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<u32>,
    /// Most characters of text in the page (default 16000, at most 200000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 200000))]
    pub budget_chars: Option<u32>,
    /// The `next_cursor` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub cursor: Option<String>,
}

/// Forget one memory by id, or every memory a filter matches (scopes, tags, and the session
/// and seq that remembered it). Give `id`, or at least one filter part, never both.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Forget {
    /// The memory's id (as remember, recall and list_memory show it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// Memories in these scopes (of this session and project).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 3))]
    pub scopes: Vec<ScopeKind>,
    /// Memories carrying every one of these tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 64)))]
    pub tags: Vec<String>,
    /// Memories remembered by this session (its id, as provenance shows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub session: Option<String>,
    /// Memories remembered at this seq or later (with `session`: what a rewind to seq - 1
    /// left behind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_min: Option<u64>,
}

impl Forget {
    /// Whether any filter part is given.
    pub fn has_filter(&self) -> bool {
        !self.scopes.is_empty()
            || !self.tags.is_empty()
            || self.session.is_some()
            || self.seq_min.is_some()
    }
}

// Memory lives outside the walls: no path is touched, so the path gates have nothing to
// judge; the class, mode, action and capability gates (and `[memory] enabled`) do.
impl Touches for Remember {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for Recall {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for ListMemory {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for Forget {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
