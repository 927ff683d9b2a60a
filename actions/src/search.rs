//! Code search primitives: `search_code` (several regexes at once over a `.gitignore`-aware
//! walk, like Claude Code's Grep) and `search_and_read` (each hit's enclosing definition and
//! its call sites in one call). The search body runs them on aido-search; every file is judged
//! by the walls and deny globs before it is opened.
//!
//! Bounds here are the schema's; the body holds a request to the operator's bounds too (the
//! result's bytes stay within a share of the journal's record bound).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// How letters are compared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SearchCase {
    /// Exactly (the default).
    #[default]
    Sensitive,
    /// Ignoring case.
    Insensitive,
    /// Insensitive for a pattern without uppercase letters, sensitive otherwise (rg's `-S`).
    Smart,
}

/// What a `search_code` result lists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// The paths of matching files (the default).
    #[default]
    FilesWithMatches,
    /// Every matching line with its number, the patterns it matched and its context.
    Content,
    /// How many matching lines each file has.
    Count,
}

/// Which files a search walks, as both primitives take it (their fields are flat, as in
/// Claude Code's Grep).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchScope {
    /// A directory or one file; `None` is the session's working directory.
    pub path: Option<String>,
    /// Include globs (rg's `-g`).
    pub globs: Vec<String>,
    /// Exclude globs.
    pub globs_exclude: Vec<String>,
    /// File types by rg's names.
    pub types: Vec<String>,
    /// File types left out.
    pub types_exclude: Vec<String>,
    /// Hidden files too.
    pub hidden: bool,
    /// Ignore files not honoured.
    pub no_ignore: bool,
}

/// Search files for several regexes at once (Rust regex syntax; each hit says which
/// patterns matched), `.gitignore`-aware, binary files skipped, sorted by path then line.
/// Files the walls or deny globs refuse are never opened and never listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchCode {
    /// The regexes (1 to 32, each at most 4096 bytes), searched at once.
    #[schemars(length(min = 1, max = 32), inner(length(min = 1, max = 4096)))]
    pub patterns: Vec<String>,
    /// A directory or one file (default the session's working directory); inside the walls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub path: Option<String>,
    /// Include globs relative to `path`, with rg's `-g` meaning (`*.rs`, `src/**`; a leading
    /// `!` excludes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 512)))]
    pub globs: Vec<String>,
    /// Exclude globs relative to `path`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 512)))]
    pub globs_exclude: Vec<String>,
    /// File types by rg's names (`rust`, `py`, `js`, `ts`, `go`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 64)))]
    pub types: Vec<String>,
    /// File types left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 64)))]
    pub types_exclude: Vec<String>,
    /// Search hidden files and directories too (off by default, as in rg).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
    /// Search files `.gitignore`, `.ignore` and `.git/info/exclude` leave out (rg's
    /// `--no-ignore`); off by default.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_ignore: bool,
    /// Take the patterns as literal text.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fixed_strings: bool,
    /// `sensitive` (default), `insensitive` or `smart`.
    #[serde(default)]
    pub case: SearchCase,
    /// Let a match span lines (`\n` may appear in a pattern), like rg's `-U`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub multiline: bool,
    /// Context lines before each hit (content mode; at most 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 50))]
    pub context_before: Option<u32>,
    /// Context lines after each hit (content mode; at most 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 50))]
    pub context_after: Option<u32>,
    /// `files_with_matches` (default), `content` or `count`.
    #[serde(default)]
    pub mode: SearchMode,
    /// Most hits (content) or files (other modes); default and most 2000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2000))]
    pub limit: Option<u64>,
    /// Most bytes of paths and line texts in the result (default 65536; the operator's bound
    /// is lower when the journal's record bound is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1048576))]
    pub bytes_max: Option<u64>,
}

/// The function and its callers in one call: search like `search_code`, then for each hit the
/// definition that encloses it (Rust, Python, JavaScript/TypeScript, Go) and up to
/// `callers_max` call sites of that definition with their own enclosing definitions, within a
/// character budget. Each definition says how it was found (`found_by`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchAndRead {
    /// The regexes (1 to 32), searched at once.
    #[schemars(length(min = 1, max = 32), inner(length(min = 1, max = 4096)))]
    pub patterns: Vec<String>,
    /// A directory or one file (default the session's working directory); inside the walls;
    /// callers are searched in the same scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub path: Option<String>,
    /// Include globs relative to `path`, with rg's `-g` meaning (`*.rs`, `src/**`; a leading
    /// `!` excludes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 512)))]
    pub globs: Vec<String>,
    /// Exclude globs relative to `path`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 512)))]
    pub globs_exclude: Vec<String>,
    /// File types by rg's names (`rust`, `py`, `js`, `ts`, `go`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 64)))]
    pub types: Vec<String>,
    /// File types left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 64)))]
    pub types_exclude: Vec<String>,
    /// Search hidden files and directories too (off by default, as in rg).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
    /// Search files `.gitignore`, `.ignore` and `.git/info/exclude` leave out (rg's
    /// `--no-ignore`); off by default.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_ignore: bool,
    /// Take the patterns as literal text.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fixed_strings: bool,
    /// `sensitive` (default), `insensitive` or `smart`; call sites are matched exactly.
    #[serde(default)]
    pub case: SearchCase,
    /// Most hits looked at, first in path order (default and most 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50))]
    pub limit: Option<u64>,
    /// Call sites shown per definition (default 5, at most 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 50))]
    pub callers_max: Option<usize>,
    /// Characters of source text in the whole result (default 20000; the operator's bound is
    /// lower when the journal's record bound is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 200000))]
    pub budget_chars: Option<usize>,
}

impl SearchAndRead {
    /// Call sites per definition when the request names none.
    pub const CALLERS_DEFAULT: usize = 5;
    /// The character budget when the request names none.
    pub const BUDGET_CHARS_DEFAULT: usize = 20_000;
}

macro_rules! scoped {
    ($($ty:ty),*) => {$(
        impl $ty {
            /// The root as given (`.` is the session's working directory).
            pub fn path_given(&self) -> &str {
                self.path.as_deref().unwrap_or(".")
            }

            /// Which files the search walks.
            pub fn scope(&self) -> SearchScope {
                SearchScope {
                    path: self.path.clone(),
                    globs: self.globs.clone(),
                    globs_exclude: self.globs_exclude.clone(),
                    types: self.types.clone(),
                    types_exclude: self.types_exclude.clone(),
                    hidden: self.hidden,
                    no_ignore: self.no_ignore,
                }
            }
        }

        // The root is read (the path walls and deny globs judge it before anything runs);
        // every file below it is judged again by the search body before it is opened.
        impl Touches for $ty {
            fn touches(&self, out: &mut Vec<Access>) {
                out.push(Access::read(self.path_given()));
            }
        }
    )*};
}

scoped!(SearchCode, SearchAndRead);

impl SearchCode {
    /// The result's byte budget when the request names none.
    pub const BYTES_MAX_DEFAULT: u64 = 64 << 10;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Action;
    use serde_json::json;

    #[test]
    fn the_scope_is_flat_and_the_root_is_read() {
        let action = Action::from_tool_call(
            "search_code",
            json!({"patterns": ["fn main"], "path": "src", "globs": ["*.rs"], "mode": "content"}),
        )
        .unwrap();
        assert_eq!(action.touches(), vec![Access::read("src")]);
        let Action::SearchCode(search) = &action else {
            panic!("search_code")
        };
        assert_eq!(search.scope().globs, ["*.rs"]);
        assert_eq!(search.mode, SearchMode::Content);
        let read = Action::from_tool_call("search_and_read", json!({"patterns": ["x"]})).unwrap();
        assert_eq!(read.touches(), vec![Access::read(".")]);
        for bad in [
            json!({"patterns": ["x"], "nope": 1}),
            json!({"patterns": ["x"], "mode": "lines"}),
            json!({"path": "src"}),
        ] {
            let error = Action::from_tool_call("search_code", bad).unwrap_err();
            assert_eq!(error.code(), "invalid_arguments");
        }
    }
}
