//! Definitions by heuristic: a definition regex per language, then the end of each definition
//! by brace matching (Rust, JavaScript/TypeScript, Go) or by indentation (Python).
//!
//! It is a heuristic and says so (`FoundBy::Heuristic`): braces in JavaScript regex literals,
//! macros that define functions, or a Python docstring dedented below its function can put an
//! end in the wrong place. A syntax tree (tree-sitter) would not; it is not built here yet.

use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// The languages whose definitions are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Language {
    Rust,
    Python,
    JavaScript,
    TypeScript,
    Go,
}

impl Language {
    /// The language of a file, by its extension.
    pub fn of(path: &Path) -> Option<Language> {
        let extension = path.extension()?.to_str()?;
        Some(match extension {
            "rs" => Language::Rust,
            "py" | "pyi" => Language::Python,
            "js" | "mjs" | "cjs" | "jsx" => Language::JavaScript,
            "ts" | "mts" | "cts" | "tsx" => Language::TypeScript,
            "go" => Language::Go,
            _ => return None,
        })
    }

    fn rules(self) -> &'static [Rule] {
        match self {
            Language::Rust => &RUST,
            Language::Python => &PYTHON,
            Language::JavaScript | Language::TypeScript => &SCRIPT,
            Language::Go => &GO,
        }
    }
}

/// What a definition is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DefinitionKind {
    Function,
    /// A function inside a class, `impl` or `trait`, or a Go function with a receiver.
    Method,
    Class,
    Struct,
    Enum,
    Trait,
    Impl,
    Module,
    Interface,
    Macro,
}

impl DefinitionKind {
    /// Whether `NAME(` is how this definition is used, so its call sites can be searched.
    pub(crate) fn callable(self) -> bool {
        matches!(
            self,
            DefinitionKind::Function | DefinitionKind::Method | DefinitionKind::Class
        )
    }
}

/// How a definition was found, so the agent knows how far to trust its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FoundBy {
    /// A definition regex, then brace matching or indentation.
    Heuristic,
    /// A parser's syntax tree (not built in this version).
    SyntaxTree,
}

/// One definition in a file; lines are 1-based and inclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) kind: DefinitionKind,
    pub(crate) name: String,
    /// The first line, decorators included.
    pub(crate) start_line: u64,
    /// The line with the name.
    pub(crate) name_line: u64,
    pub(crate) end_line: u64,
}

struct Rule {
    regex: Regex,
    kind: DefinitionKind,
}

fn rules(table: &[(&str, DefinitionKind)]) -> Vec<Rule> {
    // Every regex here is a constant checked by `every_rule_compiles`.
    table
        .iter()
        .filter_map(|(source, kind)| {
            Regex::new(source)
                .ok()
                .map(|regex| Rule { regex, kind: *kind })
        })
        .collect()
}

const RUST_RULES: &[(&str, DefinitionKind)] = &[
    (
        r#"^\s*(?:pub(?:\s*\([^)]*\))?\s+)?(?:(?:default|const|async|unsafe|safe)\s+)*(?:extern\s+(?:"[^"]*"\s+)?)?fn\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)"#,
        DefinitionKind::Function,
    ),
    (
        r"^\s*(?:pub(?:\s*\([^)]*\))?\s+)?(?:struct|union)\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)",
        DefinitionKind::Struct,
    ),
    (
        r"^\s*(?:pub(?:\s*\([^)]*\))?\s+)?enum\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)",
        DefinitionKind::Enum,
    ),
    (
        r"^\s*(?:pub(?:\s*\([^)]*\))?\s+)?(?:unsafe\s+)?(?:auto\s+)?trait\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)",
        DefinitionKind::Trait,
    ),
    (
        r"^\s*(?:unsafe\s+)?impl\b(?:\s*<.*?>)?\s+(?:.*?\bfor\s+)?&?(?:dyn\s+)?(?:[A-Za-z_][A-Za-z0-9_]*::)*(?P<name>[A-Za-z_][A-Za-z0-9_]*)",
        DefinitionKind::Impl,
    ),
    (
        r"^\s*(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)",
        DefinitionKind::Module,
    ),
    (
        r"^\s*macro_rules!\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)",
        DefinitionKind::Macro,
    ),
];

const PYTHON_RULES: &[(&str, DefinitionKind)] = &[
    (
        r"^[ \t]*(?:async\s+)?def\s+(?P<name>[A-Za-z_]\w*)",
        DefinitionKind::Function,
    ),
    (
        r"^[ \t]*class\s+(?P<name>[A-Za-z_]\w*)",
        DefinitionKind::Class,
    ),
];

const SCRIPT_RULES: &[(&str, DefinitionKind)] = &[
    (
        r"^\s*(?:export\s+)?(?:default\s+)?(?:declare\s+)?(?:async\s+)?function\s*\*?\s*(?P<name>[A-Za-z_$][\w$]*)",
        DefinitionKind::Function,
    ),
    (
        r"^\s*(?:export\s+)?(?:default\s+)?(?:declare\s+)?(?:abstract\s+)?class\s+(?P<name>[A-Za-z_$][\w$]*)",
        DefinitionKind::Class,
    ),
    (
        r"^\s*(?:export\s+)?(?:declare\s+)?interface\s+(?P<name>[A-Za-z_$][\w$]*)",
        DefinitionKind::Interface,
    ),
    (
        r"^\s*(?:export\s+)?(?:const|let|var)\s+(?P<name>[A-Za-z_$][\w$]*)\s*(?::[^=]*)?=\s*(?:async\s+)?(?:function\b|(?:\([^)]*\)|[A-Za-z_$][\w$]*)\s*(?::\s*[^=]+)?=>)",
        DefinitionKind::Function,
    ),
    (
        r"^\s*(?:(?:public|private|protected|static|async|readonly|override|abstract|get|set)\s+)*\*?\s*(?P<name>[A-Za-z_$][\w$]*)\s*(?:<[^>]*>)?\s*\((?P<params>[^;]*)\)\s*(?::\s*[^;{]+)?\{\s*$",
        DefinitionKind::Method,
    ),
];

const GO_RULES: &[(&str, DefinitionKind)] = &[
    (
        r"^func\s+\([^)]*\)\s*(?P<name>[A-Za-z_]\w*)",
        DefinitionKind::Method,
    ),
    (r"^func\s+(?P<name>[A-Za-z_]\w*)", DefinitionKind::Function),
    (
        r"^type\s+(?P<name>[A-Za-z_]\w*)(?:\[[^\]]*\])?\s+struct\b",
        DefinitionKind::Struct,
    ),
    (
        r"^type\s+(?P<name>[A-Za-z_]\w*)(?:\[[^\]]*\])?\s+interface\b",
        DefinitionKind::Interface,
    ),
];

static RUST: LazyLock<Vec<Rule>> = LazyLock::new(|| rules(RUST_RULES));
static PYTHON: LazyLock<Vec<Rule>> = LazyLock::new(|| rules(PYTHON_RULES));
static SCRIPT: LazyLock<Vec<Rule>> = LazyLock::new(|| rules(SCRIPT_RULES));
static GO: LazyLock<Vec<Rule>> = LazyLock::new(|| rules(GO_RULES));

/// Words that look like a method definition in JavaScript (`if (x) {`) but are not.
const SCRIPT_KEYWORDS: &[&str] = &[
    "if",
    "for",
    "while",
    "switch",
    "catch",
    "function",
    "return",
    "with",
    "else",
    "do",
    "try",
    "new",
    "typeof",
    "await",
    "yield",
    "super",
    "constructor_call",
];

/// The definition a line starts, if any: (kind, name, byte offset just after the name).
fn definition_at(language: Language, line: &str) -> Option<(DefinitionKind, String, usize)> {
    for rule in language.rules() {
        let Some(captures) = rule.regex.captures(line) else {
            continue;
        };
        let Some(name) = captures.name("name") else {
            continue;
        };
        if rule.kind == DefinitionKind::Method
            && matches!(language, Language::JavaScript | Language::TypeScript)
            && (SCRIPT_KEYWORDS.contains(&name.as_str())
                || captures
                    .name("params")
                    .is_some_and(|params| passes_a_callback(params.as_str())))
        {
            continue;
        }
        return Some((rule.kind, name.as_str().to_string(), name.end()));
    }
    None
}

/// Whether what looks like a method's parameters is a call's arguments instead: a call that
/// passes a callback (`describe('x', () => {`, `patch(p, "f", function (a) {`) ends its line
/// with `{` too, but parameters hold no arrow, no `function` and no string literal.
fn passes_a_callback(params: &str) -> bool {
    params.contains("=>")
        || params.contains(['\'', '"', '`'])
        || params
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
            .any(|word| word == "function")
}

/// Whether `line` is itself a definition named `name` (so it is not one of its call sites).
pub(crate) fn defines(language: Language, line: &str, name: &str) -> bool {
    definition_at(language, line).is_some_and(|(_, found, _)| found == name)
}

/// Whether `line` calls `name` in code: some `name(` on it stands outside string literals and
/// comments (`"connect() failed"` and `// see connect()` are not call sites).
pub(crate) fn calls(language: Language, line: &str, name: &str) -> bool {
    let bytes = line.as_bytes();
    let quotes: &[u8] = match language {
        // In Rust `'` starts lifetimes as often as chars; a char cannot hold a call.
        Language::Rust => b"\"",
        Language::Python => b"\"'",
        Language::JavaScript | Language::TypeScript | Language::Go => b"\"'`",
    };
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    let mut at = 0;
    while at < bytes.len() {
        let b = bytes[at];
        if quotes.contains(&b) {
            at = skip_quoted(bytes, at, b) + 1;
            continue;
        }
        let comment = match language {
            Language::Python => b == b'#',
            _ => bytes[at..].starts_with(b"//") || bytes[at..].starts_with(b"/*"),
        };
        if comment {
            return false;
        }
        if bytes[at..].starts_with(name.as_bytes()) && (at == 0 || !word(bytes[at - 1])) {
            let after = &bytes[at + name.len()..];
            if after.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'(') {
                return true;
            }
        }
        at += 1;
    }
    false
}

/// A file's text split into lines, with their byte offsets.
pub(crate) struct Lines<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(
            text.match_indices('\n')
                .map(|(at, _)| at + 1)
                .filter(|at| *at < text.len()),
        );
        Lines { text, starts }
    }

    pub(crate) fn count(&self) -> usize {
        if self.text.is_empty() {
            0
        } else {
            self.starts.len()
        }
    }

    /// Line `index` (0-based) without its terminator.
    pub(crate) fn get(&self, index: usize) -> &'a str {
        let start = self.starts[index];
        let end = self
            .starts
            .get(index + 1)
            .copied()
            .unwrap_or(self.text.len());
        let line = &self.text[start..end];
        let line = line.strip_suffix('\n').unwrap_or(line);
        line.strip_suffix('\r').unwrap_or(line)
    }

    /// The 0-based line holding byte `offset`.
    fn line_of(&self, offset: usize) -> usize {
        self.starts
            .partition_point(|start| *start <= offset)
            .saturating_sub(1)
    }

    /// Lines `first..=last` (1-based) joined with `\n`.
    pub(crate) fn text_of(&self, first: u64, last: u64) -> String {
        let first = usize::try_from(first.max(1) - 1).unwrap_or(usize::MAX);
        let last = usize::try_from(last)
            .unwrap_or(usize::MAX)
            .min(self.count());
        (first..last)
            .map(|index| self.get(index))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Every definition in a file, in order of their first line.
pub(crate) fn definitions(language: Language, lines: &Lines<'_>) -> Vec<Span> {
    let mut found = Vec::new();
    for index in 0..lines.count() {
        if let Some((kind, name, name_end)) = definition_at(language, lines.get(index)) {
            found.push((index, kind, name, lines.starts[index] + name_end));
        }
    }
    let mut spans: Vec<Span> = match language {
        Language::Python => {
            let strings = python_string_lines(lines);
            found
                .into_iter()
                .map(|(index, kind, name, _)| {
                    let (start, end) = python_extent(lines, &strings, index);
                    Span {
                        kind,
                        name,
                        start_line: start as u64 + 1,
                        name_line: index as u64 + 1,
                        end_line: end as u64 + 1,
                    }
                })
                .collect()
        }
        Language::Rust | Language::JavaScript | Language::TypeScript | Language::Go => {
            let tokens = Tokens::new(language, lines.text);
            let next_starts: Vec<usize> = found
                .iter()
                .skip(1)
                .map(|(index, ..)| lines.starts[*index])
                .chain([lines.text.len()])
                .collect();
            found
                .into_iter()
                .zip(next_starts)
                .map(|((index, kind, name, name_end), next)| {
                    let end = tokens
                        .extent_end(name_end, next)
                        .map_or(index, |offset| lines.line_of(offset));
                    Span {
                        kind,
                        name,
                        start_line: index as u64 + 1,
                        name_line: index as u64 + 1,
                        end_line: end as u64 + 1,
                    }
                })
                .collect()
        }
    };
    // A function inside a class, impl or trait is a method.
    for index in 0..spans.len() {
        if spans[index].kind != DefinitionKind::Function {
            continue;
        }
        let inside = enclosing_index(&spans[..index], spans[index].start_line)
            .map(|outer| spans[outer].kind);
        if matches!(
            inside,
            Some(DefinitionKind::Class | DefinitionKind::Impl | DefinitionKind::Trait)
        ) {
            spans[index].kind = DefinitionKind::Method;
        }
    }
    spans
}

/// The innermost definition holding `line`.
pub(crate) fn enclosing(spans: &[Span], line: u64) -> Option<&Span> {
    enclosing_index(spans, line).map(|index| &spans[index])
}

fn enclosing_index(spans: &[Span], line: u64) -> Option<usize> {
    spans
        .iter()
        .enumerate()
        .filter(|(_, span)| span.start_line <= line && line <= span.end_line)
        .max_by_key(|(_, span)| (span.start_line, std::cmp::Reverse(span.end_line)))
        .map(|(index, _)| index)
}

/// The brackets and semicolons of a file outside strings and comments, with the matching
/// close of every `{`.
struct Tokens {
    /// (byte offset, byte) of each `{ } ( ) [ ] ;`.
    tokens: Vec<(usize, u8)>,
    /// For a `{` token, the index of its `}` token.
    close: Vec<Option<usize>>,
}

impl Tokens {
    fn new(language: Language, text: &str) -> Self {
        let bytes = text.as_bytes();
        let mut tokens = Vec::new();
        let mut at = 0;
        let ident = |byte: u8| byte.is_ascii_alphanumeric() || byte == b'_';
        while at < bytes.len() {
            let byte = bytes[at];
            let next = bytes.get(at + 1).copied();
            match byte {
                b'/' if next == Some(b'/') => at = find(bytes, at, b"\n"),
                b'/' if next == Some(b'*') => at = find(bytes, at + 2, b"*/") + 1,
                b'"' => at = skip_quoted(bytes, at, b'"'),
                b'`' if language != Language::Rust => at = skip_quoted(bytes, at, b'`'),
                b'\'' if language == Language::Rust => at = skip_rust_quote(bytes, at),
                b'\'' => at = skip_quoted(bytes, at, b'\''),
                b'r' if language == Language::Rust
                    && (at == 0
                        || !ident(bytes[at - 1])
                        || (bytes[at - 1] == b'b' && (at < 2 || !ident(bytes[at - 2])))) =>
                {
                    let hashes = bytes[at + 1..]
                        .iter()
                        .take_while(|byte| **byte == b'#')
                        .count();
                    if bytes.get(at + 1 + hashes) == Some(&b'"') {
                        let mut end = vec![b'"'];
                        end.extend(std::iter::repeat_n(b'#', hashes));
                        at = find(bytes, at + 2 + hashes, &end) + end.len() - 1;
                    }
                }
                b'{' | b'}' | b'(' | b')' | b'[' | b']' | b';' => tokens.push((at, byte)),
                _ => {}
            }
            at += 1;
        }
        let mut close = vec![None; tokens.len()];
        let mut open = Vec::new();
        for (index, (_, byte)) in tokens.iter().enumerate() {
            match byte {
                b'{' => open.push(index),
                b'}' => {
                    if let Some(opened) = open.pop() {
                        close[opened] = Some(index);
                    }
                }
                _ => {}
            }
        }
        Tokens { tokens, close }
    }

    /// The offset where the definition whose name ends at `from` ends: its body's `}`, or the
    /// `;` of a declaration. `None` when neither comes before `limit` (the next definition).
    fn extent_end(&self, from: usize, limit: usize) -> Option<usize> {
        let first = self.tokens.partition_point(|(at, _)| *at < from);
        let mut depth = 0i64;
        for index in first..self.tokens.len() {
            let (at, byte) = self.tokens[index];
            if at >= limit {
                return None;
            }
            match byte {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth <= 0 => return Some(at),
                b'{' if depth <= 0 => {
                    return Some(match self.close[index] {
                        Some(closed) => self.tokens[closed].0,
                        None => self.tokens.last().map_or(at, |(last, _)| *last),
                    });
                }
                _ => {}
            }
        }
        None
    }
}

/// The offset of `needle` at or after `from`, or the end of `bytes`.
fn find(bytes: &[u8], from: usize, needle: &[u8]) -> usize {
    if from >= bytes.len() {
        return bytes.len();
    }
    bytes[from..]
        .windows(needle.len())
        .position(|window| window == needle)
        .map_or(bytes.len(), |at| from + at)
}

/// The offset of the quote closing the one at `at`, honouring backslash escapes.
fn skip_quoted(bytes: &[u8], at: usize, quote: u8) -> usize {
    let mut index = at + 1;
    while index < bytes.len() {
        match bytes[index] {
            b'\\' => index += 2,
            byte if byte == quote => return index,
            _ => index += 1,
        }
    }
    bytes.len()
}

/// A Rust `'`: a char literal (`'x'`, `'\n'`, `'{'`) is skipped, a lifetime (`'a`) is not.
fn skip_rust_quote(bytes: &[u8], at: usize) -> usize {
    match bytes.get(at + 1) {
        Some(b'\\') => skip_quoted(bytes, at, b'\''),
        Some(_) => {
            // A char is one UTF-8 scalar then `'`.
            let width = bytes[at + 1..]
                .iter()
                .skip(1)
                .take_while(|byte| (**byte & 0xC0) == 0x80)
                .count()
                + 1;
            if bytes.get(at + 1 + width) == Some(&b'\'') {
                at + 1 + width
            } else {
                at
            }
        }
        None => at,
    }
}

/// For each line, whether it starts inside a triple-quoted Python string.
fn python_string_lines(lines: &Lines<'_>) -> Vec<bool> {
    let mut inside: Option<&str> = None;
    let mut starts_inside = Vec::with_capacity(lines.count());
    for index in 0..lines.count() {
        starts_inside.push(inside.is_some());
        let mut rest = lines.get(index);
        loop {
            match inside {
                Some(quote) => match rest.find(quote) {
                    Some(at) => {
                        rest = &rest[at + 3..];
                        inside = None;
                    }
                    None => break,
                },
                None => {
                    let code = rest.split('#').next().unwrap_or("");
                    let found = ["\"\"\"", "'''"]
                        .into_iter()
                        .filter_map(|quote| code.find(quote).map(|at| (at, quote)))
                        .min();
                    match found {
                        Some((at, quote)) => {
                            rest = &rest[at + 3..];
                            inside = Some(quote);
                        }
                        None => break,
                    }
                }
            }
        }
    }
    starts_inside
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The 0-based (first, last) lines of the Python definition named on line `index`.
fn python_extent(lines: &Lines<'_>, strings: &[bool], index: usize) -> (usize, usize) {
    let own = indent(lines.get(index));
    let mut start = index;
    while start > 0
        && lines.get(start - 1).trim_start().starts_with('@')
        && indent(lines.get(start - 1)) == own
    {
        start -= 1;
    }
    // The signature may span lines: it ends at the `:` that closes the brackets.
    let mut depth = 0i64;
    let mut signature_end = index;
    for line in index..lines.count().min(index + 64) {
        let code = lines.get(line).split('#').next().unwrap_or("");
        for byte in code.bytes() {
            match byte {
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => depth -= 1,
                _ => {}
            }
        }
        if depth <= 0 && code.trim_end().ends_with(':') {
            signature_end = line;
            break;
        }
        if depth <= 0 && line == index {
            // `def f(): return 1` closes on its own line without ending in `:`.
            signature_end = line;
            if code.contains(':') {
                return (start, line);
            }
        }
    }
    let mut end = signature_end;
    for (line, in_string) in strings.iter().enumerate().skip(signature_end + 1) {
        let text = lines.get(line);
        if *in_string {
            end = line;
            continue;
        }
        let trimmed = text.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if indent(text) <= own {
            break;
        }
        end = line;
    }
    (start, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_compiles() {
        assert_eq!(RUST.len(), RUST_RULES.len());
        assert_eq!(PYTHON.len(), PYTHON_RULES.len());
        assert_eq!(SCRIPT.len(), SCRIPT_RULES.len());
        assert_eq!(GO.len(), GO_RULES.len());
    }

    fn spans(language: Language, text: &str) -> Vec<(DefinitionKind, String, u64, u64)> {
        let lines = Lines::new(text);
        definitions(language, &lines)
            .into_iter()
            .map(|span| (span.kind, span.name, span.start_line, span.end_line))
            .collect()
    }

    use DefinitionKind::*;

    #[test]
    fn rust_braces_skip_strings_chars_lifetimes_and_comments() {
        let text = r##"pub struct Point { x: i32 }
impl<'a> Show for Point {
    fn show(&self) -> &'a str {
        let open = '{'; // a { in a comment
        let s = "}";
        let raw = r#"}"#;
        s
    }
}
pub(crate) async fn free<T: Into<u8>>(t: T) -> u8
where
    T: Copy,
{
    t.into()
}
trait Named {
    fn name(&self) -> String;
}
struct Unit;
"##;
        assert_eq!(
            spans(Language::Rust, text),
            [
                (Struct, "Point".into(), 1, 1),
                (Impl, "Point".into(), 2, 9),
                (Method, "show".into(), 3, 8),
                (Function, "free".into(), 10, 15),
                (Trait, "Named".into(), 16, 18),
                (Method, "name".into(), 17, 17),
                (Struct, "Unit".into(), 19, 19),
            ]
        );
    }

    #[test]
    fn python_indentation_with_decorators_signatures_and_docstrings() {
        let text = r#"import os

@cache
def load(
    path,
):
    """Load.
Dedented docstring line.
    """
    if path:

        return os.path.exists(path)
    return None

class Store:
    def get(self, key): return key

    async def put(self, key):
        pass
x = 1
"#;
        assert_eq!(
            spans(Language::Python, text),
            [
                (Function, "load".into(), 3, 13),
                (Class, "Store".into(), 15, 19),
                (Method, "get".into(), 16, 16),
                (Method, "put".into(), 18, 19),
            ]
        );
    }

    #[test]
    fn script_functions_arrows_classes_and_methods_but_not_control_flow() {
        let text = "export function outer(a) {\n  if (a) {\n    return `}${a}`;\n  }\n}\nconst arrow = (x) => x + 1;\nconst block = async (x) => {\n  return x;\n};\nclass Box {\n  get(key) {\n    while (key) {\n    }\n  }\n}\npatch(proto, 'free', function (original) {\n  return 1;\n});\ndescribe(\"box\", () => {\n  it(\"gets\", async () => {\n  });\n});\n";
        assert_eq!(
            spans(Language::JavaScript, text),
            [
                (Function, "outer".into(), 1, 5),
                (Function, "arrow".into(), 6, 6),
                (Function, "block".into(), 7, 9),
                (Class, "Box".into(), 10, 15),
                (Method, "get".into(), 11, 14),
            ]
        );
    }

    #[test]
    fn go_functions_methods_and_types() {
        let text = "package main\n\ntype Server struct {\n\tname string\n}\n\nfunc (s *Server) Start() error {\n\tif s.name == \"}\" {\n\t\treturn nil\n\t}\n\treturn nil\n}\n\nfunc main() {\n\tNew().Start()\n}\n";
        assert_eq!(
            spans(Language::Go, text),
            [
                (Struct, "Server".into(), 3, 5),
                (Method, "Start".into(), 7, 12),
                (Function, "main".into(), 14, 16)
            ]
        );
    }

    #[test]
    fn a_call_in_a_string_or_a_comment_is_not_a_call_site() {
        let go = Language::Go;
        assert!(calls(go, "\tuconn, err := c.connect()", "connect"));
        assert!(!calls(
            go,
            "\treturn fmt.Errorf(\"connect() got error: %v\", err)",
            "connect"
        ));
        assert!(!calls(go, "\t// connect() dials", "connect"));
        assert!(calls(go, "\tlog(\"a \\\" b\", connect())", "connect"));
        assert!(!calls(go, "\treconnect()", "connect"));
        assert!(!calls(Language::Python, "    x = 1  # f(x)", "f"));
        assert!(calls(Language::Python, "    y = f (x)  # f", "f"));
        assert!(!calls(Language::JavaScript, "  s = `f(${x})`;", "f"));
        assert!(calls(Language::Rust, "    let r: &'a str = f(s);", "f"));
    }

    #[test]
    fn the_innermost_definition_encloses() {
        let text = "impl A {\n    fn f() {\n        g();\n    }\n    const X: u8 = 1;\n}\n";
        let lines = Lines::new(text);
        let found = definitions(Language::Rust, &lines);
        assert_eq!(
            enclosing(&found, 3).map(|span| span.name.as_str()),
            Some("f")
        );
        assert_eq!(
            enclosing(&found, 5).map(|span| span.name.as_str()),
            Some("A")
        );
        assert_eq!(enclosing(&found, 7), None);
        assert!(defines(Language::Rust, "    pub fn g() {", "g"));
        assert!(!defines(Language::Rust, "    g();", "g"));
    }
}
