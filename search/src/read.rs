//! `search_and_read`: each hit's enclosing definition and that definition's call sites, with
//! their enclosing definitions, in one call and within a character budget.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::ReadError;
use crate::judge::{EntryKind, Judge, Verdict};
use crate::lang::{self, DefinitionKind, FoundBy, Language, Lines, Span};
use crate::request::{Case, Limits, OutputMode, Scope, SearchRequest};
use crate::result::{Output, Skipped};
use crate::search::{open_judged, search_code_until};

/// The arguments of `search_and_read`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadRequest {
    /// What to look for, as in `search_code` (each hit says which pattern matched).
    pub patterns: Vec<String>,
    pub scope: Scope,
    #[serde(default)]
    pub fixed_strings: bool,
    #[serde(default)]
    pub case: Case,
    /// Hits looked at, first in (path, line) order; clamped to `Limits::definitions_max`.
    #[serde(default)]
    pub limit: Option<u64>,
    /// Call sites shown per definition.
    #[serde(default = "callers_default")]
    pub callers_max: usize,
    /// Characters of source text (definitions and lines) in the whole result.
    #[serde(default = "budget_default")]
    pub budget_chars: usize,
}

fn callers_default() -> usize {
    5
}

fn budget_default() -> usize {
    20_000
}

impl ReadRequest {
    /// A request for `patterns` under `root`, everything else default.
    pub fn new(root: impl Into<PathBuf>, patterns: &[&str]) -> Self {
        ReadRequest {
            patterns: patterns.iter().map(|pattern| pattern.to_string()).collect(),
            scope: Scope::new(root),
            fixed_strings: false,
            case: Case::Sensitive,
            limit: None,
            callers_max: callers_default(),
            budget_chars: budget_default(),
        }
    }
}

/// The result of `search_and_read`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadResult {
    /// One entry per definition that holds hits (or per hit outside any definition), in
    /// (path, line) order of their first hit.
    pub entries: Vec<Entry>,
    /// There were more hits than were looked at.
    pub hits_truncated: bool,
    /// The budget ran out: some texts are cut or left out (`text_cut`).
    pub budget_exhausted: bool,
    pub chars_used: usize,
    pub budget_chars: usize,
    /// What the hit search skipped.
    pub skipped: Skipped,
}

/// A definition holding hits, and its callers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub path: String,
    pub hits: Vec<Line>,
    /// `None` when the hits are outside any definition or in a language not handled.
    pub definition: Option<Definition>,
    pub callers: Vec<Caller>,
    /// More call sites were found than `callers_max` (or than the caller search's limit).
    pub callers_truncated: bool,
}

/// One line of source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    pub line: u64,
    pub text: String,
    /// Patterns matched (hits only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patterns: Vec<usize>,
    pub text_cut: Option<TextCut>,
}

/// A definition and its source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Definition {
    pub path: String,
    pub name: String,
    pub kind: DefinitionKind,
    pub language: Language,
    pub start_line: u64,
    pub end_line: u64,
    /// How the bounds were found: trust a heuristic less.
    pub found_by: FoundBy,
    pub text: String,
    pub text_cut: Option<TextCut>,
}

/// Why a text is shorter than the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextCut {
    /// Cut (or left empty) because the budget ran out.
    Budget,
    /// Left empty: the same definition's text is shown earlier in this result.
    Repeated,
}

/// A call site of a definition's name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    pub path: String,
    pub line: Line,
    /// The definition the call is in, if any.
    pub definition: Option<Definition>,
}

/// A file read once, with its definitions.
struct Source {
    text: String,
    language: Option<Language>,
    spans: Vec<Span>,
}

/// The characters left; texts are cut at a line boundary when possible.
struct Budget {
    left: usize,
    used: usize,
    exhausted: bool,
}

impl Budget {
    fn take(&mut self, text: &str) -> (String, Option<TextCut>) {
        let chars = text.chars().count();
        if chars <= self.left {
            self.left -= chars;
            self.used += chars;
            return (text.to_string(), None);
        }
        self.exhausted = true;
        let end = text
            .char_indices()
            .nth(self.left)
            .map_or(text.len(), |(at, _)| at);
        let cut = &text[..end];
        let cut = match cut.rfind('\n') {
            Some(at) if at > 0 => &cut[..at],
            _ => cut,
        };
        let taken = cut.chars().count();
        self.left -= taken;
        self.used += taken;
        (cut.to_string(), Some(TextCut::Budget))
    }
}

/// What one call works with.
struct Reader<'a> {
    request: &'a ReadRequest,
    limits: &'a Limits,
    judge: &'a dyn Judge,
    deadline: Instant,
    sources: HashMap<String, Option<Rc<Source>>>,
    budget: Budget,
    /// Definitions whose text is already in the result, by (path, start line).
    shown: HashSet<(String, u64)>,
}

/// Finds the patterns, then for each hit its enclosing definition and up to `callers_max`
/// call sites of that definition's name (`\bNAME\s*\(`) with theirs.
///
/// Definitions are found by a labelled heuristic ([`FoundBy::Heuristic`]) for Rust, Python,
/// JavaScript/TypeScript and Go; other files give hits without a definition. Every file is
/// judged before it is opened, for the hit search, the caller searches and the reads alike.
pub fn search_and_read(
    request: &ReadRequest,
    limits: &Limits,
    judge: &dyn Judge,
) -> Result<ReadResult, ReadError> {
    if request.budget_chars > limits.read_chars_max {
        return Err(ReadError::BudgetTooLarge {
            chars: request.budget_chars,
            max: limits.read_chars_max,
        });
    }
    if request.callers_max > limits.callers_max {
        return Err(ReadError::CallersTooMany {
            count: request.callers_max,
            max: limits.callers_max,
        });
    }
    let deadline = Instant::now() + Duration::from_millis(limits.timeout_ms);
    let mut reader = Reader {
        request,
        limits,
        judge,
        deadline,
        sources: HashMap::new(),
        budget: Budget {
            left: request.budget_chars,
            used: 0,
            exhausted: false,
        },
        shown: HashSet::new(),
    };
    let limit = request.limit.map_or(limits.definitions_max, |asked| {
        asked.min(limits.definitions_max)
    });
    let found = search_code_until(
        &reader.search(
            request.patterns.clone(),
            request.fixed_strings,
            request.case,
            limit,
        ),
        limits,
        judge,
        deadline,
    )?;
    let Output::Content { files } = found.output else {
        unreachable!("a content search returns content");
    };

    // Group the hits by their enclosing definition, keeping the order of first hits.
    let mut groups: Vec<(String, Option<Span>, Vec<crate::Hit>)> = Vec::new();
    for file in files {
        let source = reader.source(&file.path);
        for hit in file.hits {
            let span = source
                .as_ref()
                .and_then(|source| lang::enclosing(&source.spans, hit.line).cloned());
            let same = |group: &&mut (String, Option<Span>, Vec<crate::Hit>)| {
                group.0 == file.path && span.is_some() && group.1 == span
            };
            match groups.iter_mut().find(|group| same(group)) {
                Some(group) => group.2.push(hit),
                None => groups.push((file.path.clone(), span, vec![hit])),
            }
        }
    }

    let mut entries = Vec::new();
    for (path, span, hits) in groups {
        let definition = span
            .as_ref()
            .and_then(|span| reader.definition(&path, span));
        let hits = hits
            .into_iter()
            .map(|hit| {
                let (text, text_cut) = reader.budget.take(&hit.text);
                Line {
                    line: hit.line,
                    text,
                    patterns: hit.patterns,
                    text_cut,
                }
            })
            .collect();
        let (callers, callers_truncated) = match &span {
            Some(span) if span.kind.callable() => reader.callers(&path, span)?,
            _ => (Vec::new(), false),
        };
        entries.push(Entry {
            path,
            hits,
            definition,
            callers,
            callers_truncated,
        });
    }
    Ok(ReadResult {
        entries,
        hits_truncated: found.truncated,
        budget_exhausted: reader.budget.exhausted,
        chars_used: reader.budget.used,
        budget_chars: request.budget_chars,
        skipped: found.skipped,
    })
}

impl Reader<'_> {
    fn search(
        &self,
        patterns: Vec<String>,
        fixed_strings: bool,
        case: Case,
        limit: u64,
    ) -> SearchRequest {
        SearchRequest {
            patterns,
            scope: self.request.scope.clone(),
            fixed_strings,
            case,
            multiline: false,
            context_before: 0,
            context_after: 0,
            mode: OutputMode::Content,
            limit: Some(limit),
            bytes_max: None,
        }
    }

    /// The file at `relative` (as a search result names it), read once; `None` when the
    /// judge denies it now or it cannot be read within the bounds.
    fn source(&mut self, relative: &str) -> Option<Rc<Source>> {
        if let Some(source) = self.sources.get(relative) {
            return source.clone();
        }
        let source = self.load(&self.full_path(relative)).map(Rc::new);
        self.sources.insert(relative.to_string(), source.clone());
        source
    }

    fn full_path(&self, relative: &str) -> PathBuf {
        let root = &self.request.scope.root;
        if root.is_dir() {
            root.join(relative)
        } else {
            root.clone()
        }
    }

    fn load(&self, path: &Path) -> Option<Source> {
        if self.judge.judge(path, EntryKind::File) == Verdict::Deny {
            return None;
        }
        let mut file = open_judged(path, self.limits.file_bytes_max, self.judge).ok()?;
        let mut bytes = Vec::new();
        // The size was checked on open; `take` bounds a file that grew since.
        file.by_ref()
            .take(self.limits.file_bytes_max)
            .read_to_end(&mut bytes)
            .ok()?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let language = Language::of(path);
        let spans = language.map_or_else(Vec::new, |language| {
            lang::definitions(language, &Lines::new(&text))
        });
        Some(Source {
            text,
            language,
            spans,
        })
    }

    /// The definition `span` of the file at `path`, its text taken from the budget.
    fn definition(&mut self, path: &str, span: &Span) -> Option<Definition> {
        let source = self.source(path)?;
        let language = source.language?;
        let (text, text_cut) = if self.shown.insert((path.to_string(), span.start_line)) {
            self.budget
                .take(&Lines::new(&source.text).text_of(span.start_line, span.end_line))
        } else {
            (String::new(), Some(TextCut::Repeated))
        };
        Some(Definition {
            path: path.to_string(),
            name: span.name.clone(),
            kind: span.kind,
            language,
            start_line: span.start_line,
            end_line: span.end_line,
            found_by: FoundBy::Heuristic,
            text,
            text_cut,
        })
    }

    /// Up to `callers_max` call sites of `span`'s name, leaving out definitions of that name.
    fn callers(&mut self, path: &str, span: &Span) -> Result<(Vec<Caller>, bool), ReadError> {
        let wanted = self.request.callers_max;
        if wanted == 0 {
            return Ok((Vec::new(), false));
        }
        let pattern = format!(r"\b{}\s*\(", regex::escape(&span.name));
        // Slack for the definition lines of the same name that the search also finds.
        let limit = (wanted as u64).saturating_mul(2).saturating_add(8);
        let found = search_code_until(
            &self.search(vec![pattern], false, Case::Sensitive, limit),
            self.limits,
            self.judge,
            self.deadline,
        )?;
        let Output::Content { files } = found.output else {
            unreachable!("a content search returns content");
        };
        let mut callers = Vec::new();
        let mut more = found.truncated;
        'files: for file in files {
            let source = self.source(&file.path);
            for hit in file.hits {
                let own = file.path == path && hit.line == span.name_line;
                let language = source.as_ref().and_then(|source| source.language);
                let not_a_call = language.is_some_and(|language| {
                    lang::defines(language, &hit.text, &span.name)
                        || !lang::calls(language, &hit.text, &span.name)
                });
                if own || not_a_call {
                    continue;
                }
                if callers.len() == wanted {
                    more = true;
                    break 'files;
                }
                let enclosing = source
                    .as_ref()
                    .and_then(|source| lang::enclosing(&source.spans, hit.line).cloned());
                let definition =
                    enclosing.and_then(|enclosing| self.definition(&file.path, &enclosing));
                let (text, text_cut) = self.budget.take(&hit.text);
                callers.push(Caller {
                    path: file.path.clone(),
                    line: Line {
                        line: hit.line,
                        text,
                        patterns: Vec::new(),
                        text_cut,
                    },
                    definition,
                });
            }
        }
        Ok((callers, more))
    }
}
