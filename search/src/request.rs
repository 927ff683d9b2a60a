//! What a caller asks for (agent-facing, serde) and the bounds the operator sets (not agent-facing).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How letters are compared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Case {
    #[default]
    Sensitive,
    Insensitive,
    /// Insensitive for a pattern that has no uppercase letter, sensitive otherwise; decided for
    /// each pattern on its own (ripgrep 14's rule).
    Smart,
}

/// What the result lists, like Claude Code's Grep `output_mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    /// The paths of the files that match (the search of a file stops at its first hit).
    #[default]
    FilesWithMatches,
    /// Every hit with its line, the patterns it matched and its context lines.
    Content,
    /// How many hits each matching file has.
    Count,
}

/// The walk's scope, shared by `search_code` and `search_and_read`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    /// A directory or one file; the caller has resolved it against the walls.
    pub root: PathBuf,
    /// Include globs with ripgrep's `-g` meaning (relative to `root`; a leading `!` excludes).
    #[serde(default)]
    pub globs: Vec<String>,
    /// Exclude globs, relative to `root`.
    #[serde(default)]
    pub globs_exclude: Vec<String>,
    /// File types to search, by ripgrep's names (`rust`, `py`, `js`, `ts`, `go`, ...).
    #[serde(default)]
    pub types: Vec<String>,
    /// File types not to search.
    #[serde(default)]
    pub types_exclude: Vec<String>,
    /// Search hidden files and directories (names starting with `.`); off by default, as in rg.
    #[serde(default)]
    pub hidden: bool,
    /// Honour `.gitignore`, `.ignore` and `.git/info/exclude`, also outside a git repository.
    /// The user's global git excludes are never read: they differ between machines.
    #[serde(default = "yes")]
    pub ignore_files: bool,
}

fn yes() -> bool {
    true
}

impl Scope {
    /// A scope over `root` with the defaults: ignore files honoured, hidden files skipped.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Scope {
            root: root.into(),
            globs: Vec::new(),
            globs_exclude: Vec::new(),
            types: Vec::new(),
            types_exclude: Vec::new(),
            hidden: false,
            ignore_files: true,
        }
    }
}

/// The arguments of `search_code`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// Regexes (Rust `regex` syntax, `(?m)`: `^`/`$` match at line ends), searched at once.
    pub patterns: Vec<String>,
    pub scope: Scope,
    /// Take the patterns as literal text.
    #[serde(default)]
    pub fixed_strings: bool,
    #[serde(default)]
    pub case: Case,
    /// Let a match span lines (`\n` may then appear in a pattern), like `rg -U`.
    #[serde(default)]
    pub multiline: bool,
    /// Context lines before each hit (content mode).
    #[serde(default)]
    pub context_before: u32,
    /// Context lines after each hit (content mode).
    #[serde(default)]
    pub context_after: u32,
    #[serde(default)]
    pub mode: OutputMode,
    /// At most this many hits (content mode) or files (the other modes); clamped to the limits.
    #[serde(default)]
    pub limit: Option<u64>,
    /// At most about this many bytes of paths and line texts in the result; clamped to
    /// `Limits::result_bytes_max`.
    #[serde(default)]
    pub bytes_max: Option<u64>,
}

impl SearchRequest {
    /// A files-with-matches search for `patterns` under `root`, everything else default.
    pub fn new(root: impl Into<PathBuf>, patterns: &[&str]) -> Self {
        SearchRequest {
            patterns: patterns.iter().map(|pattern| pattern.to_string()).collect(),
            scope: Scope::new(root),
            fixed_strings: false,
            case: Case::Sensitive,
            multiline: false,
            context_before: 0,
            context_after: 0,
            mode: OutputMode::FilesWithMatches,
            limit: None,
            bytes_max: None,
        }
    }
}

/// The operator's bounds; a request can only ask for less.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub patterns_max: usize,
    /// The length of one pattern's source text.
    pub pattern_bytes_max: usize,
    /// The compiled size of the patterns (regex `size_limit`).
    pub regex_bytes_max: usize,
    /// The lazy DFA's cache (regex `dfa_size_limit`).
    pub dfa_bytes_max: usize,
    /// Files searched: the walk keeps the `files_max` first paths in sorted order.
    pub files_max: u64,
    /// A larger file is skipped and counted as too large, never read.
    pub file_bytes_max: u64,
    /// A longer line is cut in a result (`text_truncated`).
    pub line_bytes_max: usize,
    /// Hits in a content result.
    pub hits_max: u64,
    /// Files in a files-with-matches or count result.
    pub matched_files_max: u64,
    /// Bytes of paths and line texts (hits and context) in one result, each counted with a
    /// small overhead for its framing; past it the result is cut (`Truncation::Budget`).
    pub result_bytes_max: u64,
    pub context_lines_max: u32,
    /// The whole search, walk and reads, checked at every entry and every hit.
    pub timeout_ms: u64,
    /// Walker and searcher threads.
    pub threads: usize,
    /// `search_and_read`: the largest character budget a request may ask for.
    pub read_chars_max: usize,
    /// `search_and_read`: the most call sites per definition a request may ask for.
    pub callers_max: usize,
    /// `search_and_read`: definitions (distinct hits) looked at.
    pub definitions_max: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            patterns_max: 32,
            pattern_bytes_max: 4096,
            regex_bytes_max: 10 << 20,
            dfa_bytes_max: 10 << 20,
            files_max: 200_000,
            file_bytes_max: 16 << 20,
            line_bytes_max: 2000,
            hits_max: 2000,
            matched_files_max: 2000,
            result_bytes_max: 256 << 10,
            context_lines_max: 50,
            timeout_ms: 30_000,
            threads: 2,
            read_chars_max: 200_000,
            callers_max: 50,
            definitions_max: 50,
        }
    }
}
