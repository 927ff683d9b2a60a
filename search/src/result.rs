//! What a search returns (serde; it becomes an action result).

use serde::{Deserialize, Serialize};

/// The result of `search_code`, sorted by path, then line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchResult {
    #[serde(flatten)]
    pub output: Output,
    /// Some results were left out; `truncation` says why.
    pub truncated: bool,
    pub truncation: Option<Truncation>,
    /// Files opened and searched (among those the result covers).
    pub files_searched: u64,
    pub skipped: Skipped,
}

/// The listing, by mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Output {
    FilesWithMatches { files: Vec<String> },
    Content { files: Vec<FileHits> },
    Count { files: Vec<FileCount> },
}

/// The hits in one file. Paths are relative to the root, with `/` between components.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileHits {
    pub path: String,
    pub hits: Vec<Hit>,
}

/// One match: one line, or several lines in multiline mode (`text` then holds them all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hit {
    /// 1-based number of the (first) matched line.
    pub line: u64,
    /// The line without its terminator, cut to `line_bytes_max` bytes at a character boundary.
    pub text: String,
    pub text_truncated: bool,
    /// Indexes into the request's `patterns` of every pattern that matches these lines.
    pub patterns: Vec<usize>,
    pub before: Vec<ContextLine>,
    pub after: Vec<ContextLine>,
}

/// A context line around a hit; a line is shown once even when two hits share it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextLine {
    pub line: u64,
    pub text: String,
    pub text_truncated: bool,
}

/// How many hits (matched lines) one file has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileCount {
    pub path: String,
    pub count: u64,
}

/// Why a result is shorter than the full answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Truncation {
    /// More hits (content) or files (other modes) than the limit; the first ones in order are kept.
    Limit,
    /// The walk found more than `files_max` files; the first `files_max` paths were searched.
    FilesMax,
    /// The deadline passed; what was found before it is returned.
    Timeout,
    /// The result reached its byte budget (`bytes_max`); the first hits or files in order
    /// are kept.
    Budget,
}

/// Entries left out, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// Files the judge denied: never opened.
    pub denied_files: u64,
    /// Directories the judge denied: nothing below them was walked.
    pub denied_dirs: u64,
    /// Files with a NUL byte (their hits, if any were seen before it, are dropped).
    pub binary: u64,
    /// Files over `file_bytes_max`.
    pub too_large: u64,
    /// Entries that could not be read (permissions, vanished, not a regular file on open).
    pub unreadable: u64,
    /// Symbolic links: never followed.
    pub symlinks: u64,
}
