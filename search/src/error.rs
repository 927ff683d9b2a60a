//! The errors an agent can get back from a search, each with a stable code.

use std::path::PathBuf;

/// Why `search_code` refused or could not start a search.
///
/// A search that starts never fails half-way: unreadable files, binary files and files over a
/// bound are counted in [`crate::Skipped`], and a bound reached during the search is a
/// `truncated` result, not an error.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("no pattern was given")]
    PatternsEmpty,
    #[error("{count} patterns were given, more than the {max} allowed")]
    PatternsTooMany { count: usize, max: usize },
    #[error("pattern {index} is {bytes} bytes long, more than the {max} allowed")]
    PatternTooLong {
        index: usize,
        bytes: usize,
        max: usize,
    },
    /// `index` is `None` when the patterns are valid one by one but not together.
    #[error("{} not a valid regex: {message}", which_patterns(*.index, "is", "are"))]
    PatternInvalid {
        index: Option<usize>,
        message: String,
    },
    /// The compiled program would be larger than `Limits::regex_bytes_max`.
    #[error("{} more than {limit_bytes} bytes", which_patterns(*.index, "compiles to", "compile to"))]
    PatternTooLarge {
        index: Option<usize>,
        limit_bytes: usize,
    },
    #[error("glob {glob:?} is not valid: {message}")]
    GlobInvalid { glob: String, message: String },
    #[error("file type {name:?} is not known")]
    TypeUnknown { name: String },
    #[error("{lines} context lines were asked for, more than the {max} allowed")]
    ContextTooLarge { lines: u32, max: u32 },
    #[error("the search root {root:?} cannot be read")]
    RootUnreadable {
        root: PathBuf,
        source: std::io::Error,
    },
    #[error("the search root {root:?} is denied by the judge")]
    RootDenied { root: PathBuf },
}

aido_codes::coded!(SearchError {
    PatternsEmpty => "patterns_empty",
    PatternsTooMany => "patterns_too_many",
    PatternTooLong => "pattern_too_long",
    PatternInvalid => "pattern_invalid",
    PatternTooLarge => "pattern_too_large",
    GlobInvalid => "glob_invalid",
    TypeUnknown => "type_unknown",
    ContextTooLarge => "context_too_large",
    RootUnreadable => "root_unreadable",
    RootDenied => "root_denied",
});

/// Why `search_and_read` refused a request; search errors keep their own codes.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Search(#[from] SearchError),
    #[error("a budget of {chars} characters was asked for, more than the {max} allowed")]
    BudgetTooLarge { chars: usize, max: usize },
    #[error("{count} callers per definition were asked for, more than the {max} allowed")]
    CallersTooMany { count: usize, max: usize },
}

aido_codes::coded!(ReadError {
    @delegate {
        ReadError::Search(error) => error.code(),
    }
    BudgetTooLarge => "budget_too_large",
    CallersTooMany => "callers_too_many",
});

/// How an error names the pattern at fault, with its verb (one pattern, or all of them).
fn which_patterns(index: Option<usize>, one: &str, all: &str) -> String {
    match index {
        Some(index) => format!("pattern {index} (counting from 0) {one}"),
        None => format!("the patterns together {all}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole code table, pinned: changing a code breaks agents that match on it.
    #[test]
    fn code_table_is_pinned() {
        let io = || std::io::Error::other("gone");
        let search = [
            (SearchError::PatternsEmpty, "patterns_empty"),
            (
                SearchError::PatternsTooMany { count: 9, max: 8 },
                "patterns_too_many",
            ),
            (
                SearchError::PatternTooLong {
                    index: 0,
                    bytes: 9,
                    max: 8,
                },
                "pattern_too_long",
            ),
            (
                SearchError::PatternInvalid {
                    index: Some(0),
                    message: String::new(),
                },
                "pattern_invalid",
            ),
            (
                SearchError::PatternTooLarge {
                    index: None,
                    limit_bytes: 1,
                },
                "pattern_too_large",
            ),
            (
                SearchError::GlobInvalid {
                    glob: String::new(),
                    message: String::new(),
                },
                "glob_invalid",
            ),
            (
                SearchError::TypeUnknown {
                    name: String::new(),
                },
                "type_unknown",
            ),
            (
                SearchError::ContextTooLarge { lines: 9, max: 8 },
                "context_too_large",
            ),
            (
                SearchError::RootUnreadable {
                    root: PathBuf::new(),
                    source: io(),
                },
                "root_unreadable",
            ),
            (
                SearchError::RootDenied {
                    root: PathBuf::new(),
                },
                "root_denied",
            ),
        ];
        let mut codes: Vec<&str> = Vec::new();
        for (error, code) in search {
            assert_eq!(error.code(), code);
            assert_eq!(
                ReadError::Search(error).code(),
                code,
                "a wrapped search error keeps its code"
            );
            codes.push(code);
        }
        let read = [
            (
                ReadError::BudgetTooLarge { chars: 9, max: 8 },
                "budget_too_large",
            ),
            (
                ReadError::CallersTooMany { count: 9, max: 8 },
                "callers_too_many",
            ),
        ];
        for (error, code) in read {
            assert_eq!(error.code(), code);
            codes.push(code);
        }
        let mut listed: Vec<&str> = SearchError::CODES
            .iter()
            .chain(ReadError::CODES)
            .copied()
            .collect();
        listed.sort_unstable();
        let count = codes.len();
        codes.sort_unstable();
        assert_eq!(listed, codes, "CODES lists exactly the codes code() gives");
        codes.dedup();
        assert_eq!(codes.len(), count, "a code is never used twice");
    }
}
