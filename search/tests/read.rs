//! `search_and_read` on small real sources in Rust, Python, JavaScript, TypeScript and Go.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use std::fs;
use std::path::Path;

use aido_search::{
    AllowAll, DefinitionKind, EntryKind, FoundBy, Language, Limits, ReadRequest, ReadResult,
    TextCut, Verdict, search_and_read,
};

const RUST: &str = r#"pub struct Cache { hits: u64 }

impl Cache {
    pub fn lookup(&mut self, key: &str) -> Option<u64> {
        self.hits += 1;
        let marker = "needle_rust";
        Some(key.len() as u64 + marker.len() as u64)
    }
}

fn warm(cache: &mut Cache) {
    cache.lookup("a");
}

fn main() {
    let mut cache = Cache { hits: 0 };
    warm(&mut cache);
    let _ = cache.lookup("b");
}
"#;

const PYTHON: &str = r#"import os


class Loader:
    def load(self, path):
        """Read a file."""
        marker = "needle_python"
        return os.path.exists(path)


def run(loader):
    return loader.load("x")


def main():
    run(Loader())
"#;

const JAVASCRIPT: &str = r#"export function parse(text) {
  const marker = "needle_js";
  return text.split(",");
}

const total = (text) => {
  return parse(text).length;
};

class Sheet {
  rows(text) {
    return parse(text);
  }
}
"#;

const TYPESCRIPT: &str = r#"export interface Shape {
  area(): number;
}

export function scale(shape: Shape, by: number): number {
  const marker: string = "needle_ts";
  return shape.area() * by;
}

export const double = (shape: Shape): number => {
  return scale(shape, 2);
};
"#;

const GO: &str = r#"package main

type Server struct {
	name string
}

func (s *Server) Start() error {
	marker := "needle_go"
	_ = marker
	return nil
}

func boot(s *Server) {
	if err := s.Start(); err != nil {
		panic(err)
	}
}

func main() {
	boot(&Server{})
}
"#;

fn fixtures() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in [
        ("src/cache.rs", RUST),
        ("py/loader.py", PYTHON),
        ("web/parse.js", JAVASCRIPT),
        ("web/shape.ts", TYPESCRIPT),
        ("go/main.go", GO),
    ] {
        let path = dir.path().join(name);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    }
    dir
}

fn read(root: &Path, pattern: &str) -> ReadResult {
    search_and_read(
        &ReadRequest::new(root, &[pattern]),
        &Limits::default(),
        &AllowAll,
    )
    .expect("reads")
}

/// (name, kind, start, end) of the one entry's definition, and (path, line, enclosing name) of its callers.
type Summary = (
    (String, DefinitionKind, u64, u64),
    Vec<(String, u64, Option<String>)>,
);

fn summary(result: &ReadResult) -> Summary {
    assert_eq!(result.entries.len(), 1, "{result:#?}");
    let entry = &result.entries[0];
    let definition = entry.definition.as_ref().expect("a definition");
    assert_eq!(
        definition.found_by,
        FoundBy::Heuristic,
        "v1 says it is a heuristic"
    );
    let callers = entry
        .callers
        .iter()
        .map(|caller| {
            (
                caller.path.clone(),
                caller.line.line,
                caller.definition.as_ref().map(|d| d.name.clone()),
            )
        })
        .collect();
    (
        (
            definition.name.clone(),
            definition.kind,
            definition.start_line,
            definition.end_line,
        ),
        callers,
    )
}

fn callers(list: &[(&str, u64, Option<&str>)]) -> Vec<(String, u64, Option<String>)> {
    list.iter()
        .map(|(path, line, name)| (path.to_string(), *line, name.map(str::to_string)))
        .collect()
}

#[test]
fn rust_method_and_its_callers() {
    let dir = fixtures();
    let result = read(dir.path(), "needle_rust");
    assert_eq!(
        summary(&result),
        (
            ("lookup".into(), DefinitionKind::Method, 4, 8),
            callers(&[
                ("src/cache.rs", 12, Some("warm")),
                ("src/cache.rs", 18, Some("main"))
            ])
        )
    );
    let definition = result.entries[0].definition.as_ref().expect("definition");
    assert_eq!(definition.language, Language::Rust);
    assert!(
        definition.text.starts_with("    pub fn lookup") && definition.text.ends_with("    }"),
        "{}",
        definition.text
    );
    assert_eq!(result.entries[0].hits[0].line, 6);
}

#[test]
fn python_method_and_its_callers() {
    let dir = fixtures();
    assert_eq!(
        summary(&read(dir.path(), "needle_python")),
        (
            ("load".into(), DefinitionKind::Method, 5, 8),
            callers(&[("py/loader.py", 12, Some("run"))])
        )
    );
}

#[test]
fn javascript_function_and_its_callers() {
    let dir = fixtures();
    assert_eq!(
        summary(&read(dir.path(), "needle_js")),
        (
            ("parse".into(), DefinitionKind::Function, 1, 4),
            callers(&[
                ("web/parse.js", 7, Some("total")),
                ("web/parse.js", 12, Some("rows"))
            ])
        )
    );
}

#[test]
fn typescript_function_and_its_callers() {
    let dir = fixtures();
    assert_eq!(
        summary(&read(dir.path(), "needle_ts")),
        (
            ("scale".into(), DefinitionKind::Function, 5, 8),
            callers(&[("web/shape.ts", 11, Some("double"))])
        )
    );
}

#[test]
fn go_method_and_its_callers() {
    let dir = fixtures();
    assert_eq!(
        summary(&read(dir.path(), "needle_go")),
        (
            ("Start".into(), DefinitionKind::Method, 7, 11),
            callers(&[("go/main.go", 14, Some("boot"))])
        )
    );
}

#[test]
fn the_budget_bounds_every_text_and_repeats_are_not_shown_twice() {
    let dir = fixtures();
    // Two hits in the same definition make one entry; `warm` holds a caller of `lookup`.
    let mut request = ReadRequest::new(dir.path(), &["needle_rust", "hits"]);
    request.scope.types = vec!["rust".into()];
    let full = search_and_read(&request, &Limits::default(), &AllowAll).expect("reads");
    assert!(!full.budget_exhausted);
    let texts = |result: &ReadResult| -> usize {
        result
            .entries
            .iter()
            .map(|entry| {
                let definition = entry
                    .definition
                    .as_ref()
                    .map_or(0, |d| d.text.chars().count());
                let hits: usize = entry.hits.iter().map(|hit| hit.text.chars().count()).sum();
                let callers: usize = entry
                    .callers
                    .iter()
                    .map(|c| {
                        c.line.text.chars().count()
                            + c.definition.as_ref().map_or(0, |d| d.text.chars().count())
                    })
                    .sum();
                definition + hits + callers
            })
            .sum()
    };
    assert_eq!(texts(&full), full.chars_used);

    request.budget_chars = 120;
    let cut = search_and_read(&request, &Limits::default(), &AllowAll).expect("reads");
    assert!(cut.budget_exhausted);
    assert!(
        cut.chars_used <= 120 && texts(&cut) == cut.chars_used,
        "{} chars",
        cut.chars_used
    );
    let any_cut = cut.entries.iter().any(|entry| {
        entry
            .definition
            .as_ref()
            .is_some_and(|d| d.text_cut == Some(TextCut::Budget))
    });
    assert!(any_cut, "{cut:#?}");

    // `warm` (a hit) has `main` as its caller; `main` then holds hits too: its text is
    // shown once, as warm's caller, and the later entry says it is repeated.
    let request = ReadRequest::new(dir.path(), &["cache.lookup", "warm\\(&mut"]);
    let result = search_and_read(&request, &Limits::default(), &AllowAll).expect("reads");
    let names: Vec<_> = result
        .entries
        .iter()
        .filter_map(|e| e.definition.as_ref().map(|d| d.name.as_str()))
        .collect();
    assert_eq!(names, ["warm", "main"]);
    let main = result.entries[1].definition.as_ref().expect("main");
    assert_eq!(
        (main.text.as_str(), main.text_cut),
        ("", Some(TextCut::Repeated))
    );
    let mut shown = std::collections::HashSet::new();
    for entry in &result.entries {
        let definitions = entry
            .definition
            .iter()
            .chain(entry.callers.iter().filter_map(|c| c.definition.as_ref()));
        for definition in definitions {
            let key = (definition.path.clone(), definition.start_line);
            if shown.insert(key) {
                assert_eq!(definition.text_cut, None, "first time shown in full");
            } else {
                assert_eq!(
                    (definition.text.as_str(), definition.text_cut),
                    ("", Some(TextCut::Repeated))
                );
            }
        }
    }
}

#[test]
fn callers_in_a_denied_file_are_never_read_or_shown() {
    let dir = fixtures();
    let denied = dir.path().join("src/secret.rs");
    fs::write(
        &denied,
        "fn leak() { let c = Cache::new(); c.lookup(\"secret\"); }\n",
    )
    .expect("write");
    let judge = |path: &Path, _kind: EntryKind| {
        if path == denied {
            Verdict::Deny
        } else {
            Verdict::Allow
        }
    };
    let result = search_and_read(
        &ReadRequest::new(dir.path(), &["needle_rust"]),
        &Limits::default(),
        &judge,
    )
    .expect("reads");
    let shown = serde_json::to_string(&result).expect("json");
    assert!(
        !shown.contains("secret") && !shown.contains("leak"),
        "{shown}"
    );
    let result = read(dir.path(), "needle_rust");
    assert!(
        serde_json::to_string(&result)
            .expect("json")
            .contains("leak"),
        "the control: allowed, it is a caller"
    );
}

#[test]
fn fixed_strings_and_case_apply_to_the_hits_only() {
    let dir = fixtures();
    // As a regex `needle.rust` would match `needle_rust`; as text it matches nothing.
    let mut request = ReadRequest::new(dir.path(), &["needle.rust"]);
    let found = search_and_read(&request, &Limits::default(), &AllowAll).expect("reads");
    assert_eq!(found.entries.len(), 1);
    request.fixed_strings = true;
    let found = search_and_read(&request, &Limits::default(), &AllowAll).expect("reads");
    assert!(found.entries.is_empty());

    // A case-insensitive hit search does not make `Start(` callers match `start(`.
    fs::write(
        dir.path().join("go/other.go"),
        "package main\n\nfunc other() {\n\tstart()\n}\n",
    )
    .expect("write");
    let mut request = ReadRequest::new(dir.path(), &["NEEDLE_GO"]);
    request.case = aido_search::Case::Insensitive;
    let found = search_and_read(&request, &Limits::default(), &AllowAll).expect("reads");
    assert_eq!(
        summary(&found).1,
        callers(&[("go/main.go", 14, Some("boot"))])
    );
}

#[test]
fn limits_on_the_request_are_coded() {
    let dir = fixtures();
    let mut request = ReadRequest::new(dir.path(), &["x"]);
    request.budget_chars = Limits::default().read_chars_max + 1;
    let error = search_and_read(&request, &Limits::default(), &AllowAll).err();
    assert_eq!(error.map(|e| e.code()), Some("budget_too_large"));
    let mut request = ReadRequest::new(dir.path(), &["x"]);
    request.callers_max = Limits::default().callers_max + 1;
    let error = search_and_read(&request, &Limits::default(), &AllowAll).err();
    assert_eq!(error.map(|e| e.code()), Some("callers_too_many"));
    let error = search_and_read(
        &ReadRequest::new(dir.path(), &["(unclosed"]),
        &Limits::default(),
        &AllowAll,
    )
    .err();
    assert_eq!(error.map(|e| e.code()), Some("pattern_invalid"));
}
