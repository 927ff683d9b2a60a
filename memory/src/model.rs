//! The requests and results of the four operations: serde data, so they can become action
//! arguments and results unchanged.

use serde::{Deserialize, Serialize};

/// A memory's id: SQLite's AUTOINCREMENT rowid, so ids only grow and a forgotten id is
/// never given out again, even by another process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemoryId(pub u64);

impl std::fmt::Display for MemoryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Who may see a memory: everyone, one project, or one session.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Scope {
    /// Every session of every project.
    Global,
    /// Sessions working on one project; the key is the caller's (aido uses a hash of the
    /// project root).
    Project {
        /// The project key.
        key: String,
    },
    /// One session only.
    Session {
        /// The session id.
        id: String,
    },
}

impl Scope {
    /// The kind column: `global`, `project` or `session`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Global => "global",
            Self::Project { .. } => "project",
            Self::Session { .. } => "session",
        }
    }

    /// The key column: empty for global.
    pub(crate) fn key(&self) -> &str {
        match self {
            Self::Global => "",
            Self::Project { key } => key,
            Self::Session { id } => id,
        }
    }

    /// The scope stored as `kind` and `key`, or `None` for a kind this code does not know.
    pub(crate) fn from_columns(kind: &str, key: String) -> Option<Self> {
        match kind {
            "global" => Some(Self::Global),
            "project" => Some(Self::Project { key }),
            "session" => Some(Self::Session { id: key }),
            _ => None,
        }
    }
}

/// Where a memory came from, so a later session knows how far to trust it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// The session that remembered it.
    pub session: String,
    /// The journal seq of the `remember` action in that session.
    pub seq: u64,
    /// Whether the text was derived from untrusted input (a fetched page, command output),
    /// so it may carry injected instructions.
    pub untrusted: bool,
}

/// When a memory stops being returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expiry {
    /// At this time, in milliseconds since the Unix epoch (on the caller's clock).
    AtMs(u64),
    /// This many milliseconds after it was remembered.
    AfterMs(u64),
}

/// `remember`: store one memory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RememberRequest {
    /// What to remember.
    pub text: String,
    /// Who may recall it.
    pub scope: Scope,
    /// Labels to filter on; duplicates are dropped and the rest kept sorted.
    #[serde(default)]
    pub tags: Vec<String>,
    /// When it stops being returned; `None` keeps it until forgotten.
    #[serde(default)]
    pub expiry: Option<Expiry>,
    /// Where it came from.
    pub provenance: Provenance,
}

/// What `remember` stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remembered {
    /// Its id.
    pub id: MemoryId,
    /// When it was stored (the caller's `now_ms`).
    pub created_ms: u64,
    /// When it expires, if it does.
    pub expires_ms: Option<u64>,
}

/// A stored memory, as recall and list show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// Its id.
    pub id: MemoryId,
    /// Its text.
    pub text: String,
    /// Who may recall it.
    pub scope: Scope,
    /// Its tags, sorted.
    pub tags: Vec<String>,
    /// When it was stored.
    pub created_ms: u64,
    /// When it expires, if it does.
    pub expires_ms: Option<u64>,
    /// Where it came from; `provenance.untrusted` is the warning to show.
    pub provenance: Provenance,
}

/// Whether a recall needs every word of the query or any of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Terms {
    /// A memory matching more words ranks higher, but one word is enough (the default:
    /// an agent's question rarely uses the memory's exact words).
    #[default]
    Any,
    /// Every word must appear.
    All,
}

/// `recall`: the memories that best match a query.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecallRequest {
    /// Plain words. Quotes, `AND`, `*`, `NEAR(` and parentheses are just text: every word is
    /// searched for literally (stemmed, case and accents folded).
    pub query: String,
    /// Only memories in one of these scopes; empty means every scope.
    #[serde(default)]
    pub scopes: Vec<Scope>,
    /// Only memories carrying every one of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Any word or every word.
    #[serde(default)]
    pub terms: Terms,
    /// The most results; `recall_results_default` when absent.
    #[serde(default)]
    pub limit: Option<u32>,
    /// The most characters of text in all results together; `recall_chars_default` when
    /// absent.
    #[serde(default)]
    pub budget_chars: Option<u32>,
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
}

impl RecallRequest {
    /// A recall of `query` over every scope with the default limit and budget.
    pub fn new(query: impl Into<String>) -> Self {
        Self {
            query: query.into(),
            scopes: Vec::new(),
            tags: Vec::new(),
            terms: Terms::Any,
            limit: None,
            budget_chars: None,
            cursor: None,
        }
    }
}

/// One recalled memory and how well it matched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recalled {
    /// The memory.
    pub memory: Memory,
    /// How well it matched: SQLite's bm25 negated, so higher is better.
    pub score: f64,
}

/// What `recall` found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recall {
    /// Best first; ties broken by id.
    pub results: Vec<Recalled>,
    /// Characters of text in `results`.
    pub chars: u32,
    /// The character budget stopped the page before `limit`: the next result would not fit.
    pub truncated: bool,
    /// More results follow; pass this back as `cursor`.
    pub next_cursor: Option<String>,
}

/// `list_memory`: memories newest first, without a query.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListRequest {
    /// Only memories in one of these scopes; empty means every scope.
    #[serde(default)]
    pub scopes: Vec<Scope>,
    /// Only memories carrying every one of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The most memories; `list_results_default` when absent.
    #[serde(default)]
    pub limit: Option<u32>,
    /// The most characters of text in the page; `list_chars_default` when absent.
    #[serde(default)]
    pub budget_chars: Option<u32>,
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// One page of `list_memory`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListPage {
    /// Newest (highest id) first.
    pub memories: Vec<Memory>,
    /// Characters of text in `memories`.
    pub chars: u32,
    /// The character budget stopped the page before `limit`: the next memory would not fit.
    pub truncated: bool,
    /// More memories follow; pass this back as `cursor`. Stable: memories written after the
    /// first page never appear in later pages, and none is repeated or skipped.
    pub next_cursor: Option<String>,
}

/// `forget`: one memory by id, or every memory a filter matches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ForgetRequest {
    /// The memory with this id; `memory_not_found` if it is not live.
    Id(MemoryId),
    /// Every live memory matching all the filter's parts.
    Filter(ForgetFilter),
}

/// Which memories to forget. At least one part must be given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgetFilter {
    /// Memories in one of these scopes.
    #[serde(default)]
    pub scopes: Vec<Scope>,
    /// Memories carrying every one of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Memories remembered by this session.
    #[serde(default)]
    pub session: Option<String>,
    /// Memories remembered at this journal seq or later (with `session`, what a rewind to
    /// seq - 1 would drop).
    #[serde(default)]
    pub seq_min: Option<u64>,
}

/// What `forget` did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forgotten {
    /// How many memories were deleted.
    pub count: u64,
}
