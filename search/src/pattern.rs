//! Compiling the patterns: one grep matcher for the search, and each pattern alone to say which
//! matched a hit.

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use regex::bytes::{Regex, RegexBuilder};
use regex_syntax::ast::{self, Ast};

use crate::error::SearchError;
use crate::request::{Case, Limits, SearchRequest};

/// The compiled patterns of one request.
pub(crate) struct Patterns {
    /// The alternation of every pattern, what grep-searcher runs.
    pub(crate) matcher: RegexMatcher,
    /// The same patterns one by one, run only on matched lines to attribute a hit. One
    /// `is_match` per pattern (a literal prefilter each) is faster here than a `RegexSet`,
    /// which runs an overlapping search over the whole line.
    singles: Vec<Regex>,
}

impl Patterns {
    /// The indexes of the patterns that match `bytes`.
    pub(crate) fn which(&self, bytes: &[u8]) -> Vec<usize> {
        if self.singles.len() == 1 {
            return vec![0];
        }
        (0..self.singles.len())
            .filter(|index| self.singles[*index].is_match(bytes))
            .collect()
    }
}

/// Checks the bounds, then compiles. Each pattern is parsed alone first, so that wrapping it in
/// a group cannot change its meaning and an error can name the pattern.
pub(crate) fn compile(request: &SearchRequest, limits: &Limits) -> Result<Patterns, SearchError> {
    if request.patterns.is_empty() {
        return Err(SearchError::PatternsEmpty);
    }
    if request.patterns.len() > limits.patterns_max {
        return Err(SearchError::PatternsTooMany {
            count: request.patterns.len(),
            max: limits.patterns_max,
        });
    }
    let mut wrapped = Vec::with_capacity(request.patterns.len());
    let mut singles = Vec::with_capacity(request.patterns.len());
    for (index, pattern) in request.patterns.iter().enumerate() {
        if pattern.len() > limits.pattern_bytes_max {
            return Err(SearchError::PatternTooLong {
                index,
                bytes: pattern.len(),
                max: limits.pattern_bytes_max,
            });
        }
        let source = if request.fixed_strings {
            regex::escape(pattern)
        } else {
            pattern.clone()
        };
        let parsed = ast::parse::Parser::new().parse(&source).map_err(|error| {
            SearchError::PatternInvalid {
                index: Some(index),
                message: error.to_string(),
            }
        })?;
        let insensitive = match request.case {
            Case::Sensitive => false,
            Case::Insensitive => true,
            Case::Smart => {
                let mut letters = Letters::default();
                letters.visit(&parsed);
                letters.any_literal && !letters.any_uppercase
            }
        };
        let group = if insensitive {
            format!("(?i:{source})")
        } else {
            format!("(?:{source})")
        };
        let single = RegexBuilder::new(&group)
            .multi_line(true)
            .size_limit(limits.regex_bytes_max)
            .dfa_size_limit(limits.dfa_bytes_max)
            .build()
            .map_err(|error| regex_error(Some(index), error, limits))?;
        wrapped.push(group);
        singles.push(single);
    }
    let matcher = RegexMatcherBuilder::new()
        .multi_line(true)
        .size_limit(limits.regex_bytes_max)
        .dfa_size_limit(limits.dfa_bytes_max)
        .line_terminator(if request.multiline { None } else { Some(b'\n') })
        .build_many(&wrapped)
        .map_err(|error| matcher_error(error, limits))?;
    Ok(Patterns { matcher, singles })
}

fn regex_error(index: Option<usize>, error: regex::Error, limits: &Limits) -> SearchError {
    match error {
        regex::Error::CompiledTooBig(_) => SearchError::PatternTooLarge {
            index,
            limit_bytes: limits.regex_bytes_max,
        },
        other => SearchError::PatternInvalid {
            index,
            message: other.to_string(),
        },
    }
}

fn matcher_error(error: grep_regex::Error, limits: &Limits) -> SearchError {
    match error.kind() {
        grep_regex::ErrorKind::NotAllowed(literal) => SearchError::PatternInvalid {
            index: None,
            message: format!("{literal:?} cannot match without multiline"),
        },
        // Each pattern and the set compiled within the bound, so the alternation going over
        // it can only be a size error; grep-regex gives it as text only.
        grep_regex::ErrorKind::Regex(message) if message.contains("size limit") => {
            SearchError::PatternTooLarge {
                index: None,
                limit_bytes: limits.regex_bytes_max,
            }
        }
        _ => SearchError::PatternInvalid {
            index: None,
            message: error.to_string(),
        },
    }
}

/// Whether a pattern has literal letters, and uppercase ones, for smart case (ripgrep's rule:
/// escapes like `\W` and classes like `\p{Lu}` are not literals).
#[derive(Default)]
struct Letters {
    any_literal: bool,
    any_uppercase: bool,
}

impl Letters {
    fn visit(&mut self, ast: &Ast) {
        match ast {
            Ast::Empty(_)
            | Ast::Flags(_)
            | Ast::Dot(_)
            | Ast::Assertion(_)
            | Ast::ClassUnicode(_)
            | Ast::ClassPerl(_) => {}
            Ast::Literal(literal) => self.literal(literal),
            Ast::ClassBracketed(class) => self.class_set(&class.kind),
            Ast::Repetition(repetition) => self.visit(&repetition.ast),
            Ast::Group(group) => self.visit(&group.ast),
            Ast::Alternation(alternation) => alternation.asts.iter().for_each(|a| self.visit(a)),
            Ast::Concat(concat) => concat.asts.iter().for_each(|a| self.visit(a)),
        }
    }

    fn class_set(&mut self, set: &ast::ClassSet) {
        match set {
            ast::ClassSet::Item(item) => self.class_item(item),
            ast::ClassSet::BinaryOp(op) => {
                self.class_set(&op.lhs);
                self.class_set(&op.rhs);
            }
        }
    }

    fn class_item(&mut self, item: &ast::ClassSetItem) {
        match item {
            ast::ClassSetItem::Empty(_)
            | ast::ClassSetItem::Ascii(_)
            | ast::ClassSetItem::Unicode(_)
            | ast::ClassSetItem::Perl(_) => {}
            ast::ClassSetItem::Literal(literal) => self.literal(literal),
            ast::ClassSetItem::Range(range) => {
                self.literal(&range.start);
                self.literal(&range.end);
            }
            ast::ClassSetItem::Bracketed(class) => self.class_set(&class.kind),
            ast::ClassSetItem::Union(union) => union.items.iter().for_each(|i| self.class_item(i)),
        }
    }

    fn literal(&mut self, literal: &ast::Literal) {
        self.any_literal = true;
        self.any_uppercase |= literal.c.is_uppercase();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(patterns: &[&str]) -> SearchRequest {
        SearchRequest::new("/", patterns)
    }

    fn code(request: &SearchRequest, limits: &Limits) -> &'static str {
        match compile(request, limits) {
            Ok(_) => "ok",
            Err(error) => error.code(),
        }
    }

    #[test]
    fn bounds_and_syntax_are_coded() {
        let limits = Limits {
            patterns_max: 2,
            pattern_bytes_max: 8,
            ..Limits::default()
        };
        assert_eq!(code(&request(&[]), &limits), "patterns_empty");
        assert_eq!(
            code(&request(&["a", "b", "c"]), &limits),
            "patterns_too_many"
        );
        assert_eq!(
            code(&request(&["a", "123456789"]), &limits),
            "pattern_too_long"
        );
        assert_eq!(code(&request(&["a", "(b"]), &limits), "pattern_invalid");
        assert!(matches!(
            compile(&request(&["a", "(b"]), &limits),
            Err(SearchError::PatternInvalid { index: Some(1), .. })
        ));
        // Alone each is unbalanced; wrapped together they would parse: they must not.
        assert_eq!(code(&request(&["a)|(b"]), &limits), "pattern_invalid");
        assert_eq!(code(&request(&["a", "b"]), &limits), "ok");
    }

    #[test]
    fn a_newline_needs_multiline() {
        let mut asked = request(&[r"a\nb"]);
        assert_eq!(code(&asked, &Limits::default()), "pattern_invalid");
        asked.multiline = true;
        assert_eq!(code(&asked, &Limits::default()), "ok");
    }

    #[test]
    fn a_huge_program_is_too_large_not_slow() {
        let started = std::time::Instant::now();
        let asked = request(&[r"\w{1000}\w{1000}\w{1000}"]);
        assert!(matches!(
            compile(&asked, &Limits::default()),
            Err(SearchError::PatternTooLarge { index: Some(0), .. })
        ));
        // A guard against a hang, not a benchmark: the bound must stop compilation early.
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
    }

    #[test]
    fn smart_case_is_decided_per_pattern() {
        let mut asked = request(&["hello", "World", r"\Whi"]);
        asked.case = Case::Smart;
        let patterns = compile(&asked, &Limits::default()).expect("compiles");
        let matched = |text: &str| patterns.which(text.as_bytes());
        assert_eq!(matched("HELLO"), vec![0]);
        assert_eq!(matched("world"), Vec::<usize>::new());
        assert_eq!(matched("World"), vec![1]);
        assert_eq!(matched(" HI"), vec![2], r"\W is not an uppercase literal");
    }

    #[test]
    fn fixed_strings_are_literal() {
        let mut asked = request(&["a.b(", "[x]"]);
        asked.fixed_strings = true;
        let patterns = compile(&asked, &Limits::default()).expect("compiles");
        assert_eq!(patterns.which(b"a.b( [x]"), [0, 1]);
        assert_eq!(patterns.which(b"axb( x"), Vec::<usize>::new());
    }
}
