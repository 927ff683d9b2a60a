//! Code search for aido agents: `search_code` (several regexes at once over a judged,
//! `.gitignore`-aware walk) and `search_and_read` (the definition around each hit and its
//! callers, in one call, within a character budget).
//!
//! Both become typed actions later; their requests and results are serde types for that, and
//! this crate knows nothing of actions, the journal or MCP.
//!
//! # Design
//!
//! * **Built on ripgrep's own crates**: `ignore` walks (in parallel), `grep-regex` compiles the
//!   patterns into one matcher, `grep-searcher` searches (binary files quit at the first NUL).
//!   A `regex::bytes::RegexSet` of the same patterns runs on matched lines only, so each hit
//!   says which patterns it matched; the one-alternation matcher cannot.
//! * **Judged before opened**: the caller's [`Judge`] sees every directory and regular file
//!   before it is opened; a denied file is never opened and never appears in a result.
//!   Symbolic links are never followed, files are opened `O_NOFOLLOW | O_NONBLOCK`.
//! * **Searched where found, returned in order**: as in rg, each walker thread searches the
//!   files it finds right after judging them. Outcomes are kept by path, the tail past a
//!   limit's cut is dropped (and no longer searched once known to be past it), and the walk
//!   keeps the first `files_max` paths in a bounded max-heap. So the result is the same as a
//!   search in (path, line) order whatever the threads did; only a result cut by the
//!   deadline (`Truncation::Timeout`) depends on timing.
//! * **Bounded**: every input and output has a named bound in [`Limits`] (patterns, pattern
//!   bytes, compiled regex bytes, files, file bytes, line bytes, hits, matched files, context
//!   lines, time, budget). A bound passed on input is a coded error ([`SearchError::code`]);
//!   one reached while searching is `truncated: true`.
//! * **Honest definitions**: `search_and_read` finds definitions with a labelled heuristic
//!   (a regex per language, then brace matching or indentation), and every definition says
//!   `found_by: "heuristic"`. A syntax-tree (tree-sitter) finder is not built yet.
//!
//! # Example
//!
//! ```
//! use aido_search::{search_code, EntryKind, Limits, Output, OutputMode, SearchRequest, Verdict};
//! use std::path::Path;
//!
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("main.rs"), "fn main() {\n    run();\n}\n")?;
//! std::fs::write(dir.path().join(".env"), "run()\n")?;
//!
//! let mut request = SearchRequest::new(dir.path(), &[r"\brun\(", "fn main"]);
//! request.mode = OutputMode::Content;
//! request.scope.hidden = true;
//! // The caller's walls: `.env` files are never opened.
//! let judge = |path: &Path, _kind: EntryKind| {
//!     if path.ends_with(".env") { Verdict::Deny } else { Verdict::Allow }
//! };
//! let result = search_code(&request, &Limits::default(), &judge)?;
//! let Output::Content { files } = &result.output else { unreachable!() };
//! assert_eq!(files.len(), 1);
//! assert_eq!(files[0].path, "main.rs");
//! assert_eq!((files[0].hits[0].line, files[0].hits[0].patterns.clone()), (1, vec![1]));
//! assert_eq!((files[0].hits[1].line, files[0].hits[1].patterns.clone()), (2, vec![0]));
//! assert_eq!(result.skipped.denied_files, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

/// Error enums with stable codes.
mod error;
/// The caller's judge, called before anything is opened.
mod judge;
/// Definitions by heuristic, per language.
mod lang;
/// Compiling the patterns: the matcher and the set that attributes hits.
mod pattern;
/// `search_and_read`.
mod read;
/// Requests and operator limits.
mod request;
/// Search results.
mod result;
/// `search_code`.
mod search;
/// The judged, bounded, deterministic walk.
mod walk;

pub use error::{ReadError, SearchError};
pub use judge::{AllowAll, EntryKind, Judge, Opened, Verdict};
pub use lang::{DefinitionKind, FoundBy, Language};
pub use read::{
    Caller, Definition, Entry, Line, ReadRequest, ReadResult, TextCut, search_and_read,
};
pub use request::{Case, Limits, OutputMode, Scope, SearchRequest};
pub use result::{
    ContextLine, FileCount, FileHits, Hit, Output, SearchResult, Skipped, Truncation,
};
pub use search::{search_code, search_code_until};
