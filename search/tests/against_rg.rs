//! `search_code` against the real `rg` binary over real trees: aido's own source tree and a
//! crate source tree from the cargo registry. The same hits, files and counts, for several
//! patterns and options. `rg` must be installed (Debian's `ripgrep`); without it this fails.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use aido_search::{AllowAll, Case, Limits, Output, OutputMode, SearchRequest, search_code};

type Hits = BTreeSet<(String, u64)>;

/// The workspace root (aido's own tree) and the source of a crate this crate builds on.
fn trees() -> Vec<PathBuf> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf();
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cargo"));
    let mut registry = None;
    for index in std::fs::read_dir(home.join("registry/src")).expect("the cargo registry sources") {
        let candidate = index.expect("entry").path().join("regex-automata-0.4.19");
        if candidate.is_dir() {
            registry = Some(candidate);
        }
    }
    vec![
        workspace,
        registry.expect("regex-automata 0.4.19 in the registry (a dependency of this crate)"),
    ]
}

fn limits() -> Limits {
    Limits {
        hits_max: 1_000_000,
        matched_files_max: 1_000_000,
        files_max: 1_000_000,
        result_bytes_max: u64::MAX,
        ..Limits::default()
    }
}

/// rg with the same walk settings as `Scope`'s defaults: no config file, .gitignore outside
/// git too, no global git excludes, hidden files skipped.
fn rg(root: &Path, args: &[&str]) -> String {
    let output = Command::new("rg")
        .args([
            "--no-config",
            "--no-require-git",
            "--no-ignore-global",
            "--no-messages",
        ])
        .args(args)
        .arg(root)
        // rg matches globs against paths relative to its working directory, search_code
        // against paths relative to the root: run rg from the root.
        .current_dir(root)
        .output()
        .expect(
            "the rg binary must be installed (apt-get install ripgrep); this test does not skip",
        );
    // 0: matches, 1: none; anything else is a failure of the comparison itself.
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "rg {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 rg output")
}

fn strip(root: &Path, path: &str) -> String {
    Path::new(path)
        .strip_prefix(root)
        .expect("under the root")
        .to_string_lossy()
        .into_owned()
}

/// (path, line) of every match event in `rg --json`, leaving out files rg found binary after
/// printing matches (search_code drops those files whole and counts them as binary).
fn rg_hits(root: &Path, args: &[&str]) -> Hits {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let mut hits = Hits::new();
    let mut binary = BTreeSet::new();
    for line in rg(root, &all).lines() {
        let message: serde_json::Value = serde_json::from_str(line).expect("rg json");
        let path = || {
            strip(
                root,
                message["data"]["path"]["text"].as_str().expect("path"),
            )
        };
        match message["type"].as_str() {
            Some("match") => {
                hits.insert((
                    path(),
                    message["data"]["line_number"].as_u64().expect("line"),
                ));
            }
            Some("end") if !message["data"]["binary_offset"].is_null() => {
                binary.insert(path());
            }
            _ => {}
        }
    }
    hits.retain(|(path, _)| !binary.contains(path));
    hits
}

fn ours(request: &SearchRequest) -> aido_search::SearchResult {
    let result = search_code(request, &limits(), &AllowAll).expect("searches");
    assert!(!result.truncated, "{:?}", result.truncation);
    result
}

fn our_hits(request: &SearchRequest) -> (Hits, BTreeMap<(String, u64), Vec<usize>>) {
    let mut request = request.clone();
    request.mode = OutputMode::Content;
    let Output::Content { files } = ours(&request).output else {
        panic!("content")
    };
    let mut hits = Hits::new();
    let mut patterns = BTreeMap::new();
    let mut order = Vec::new();
    for file in files {
        for hit in file.hits {
            order.push((file.path.clone(), hit.line));
            hits.insert((file.path.clone(), hit.line));
            patterns.insert((file.path.clone(), hit.line), hit.patterns);
        }
    }
    let mut sorted = order.clone();
    sorted.sort_by(|a, b| Path::new(&a.0).cmp(Path::new(&b.0)).then(a.1.cmp(&b.1)));
    assert_eq!(order, sorted, "hits come sorted by path, then line");
    (hits, patterns)
}

fn request(root: &Path, patterns: &[&str]) -> SearchRequest {
    SearchRequest::new(root, patterns)
}

fn same_hits(root: &Path, request: &SearchRequest, rg_args: &[&str]) -> usize {
    let (hits, _) = our_hits(request);
    let theirs = rg_hits(root, rg_args);
    let missing: Vec<_> = theirs.difference(&hits).take(5).collect();
    let extra: Vec<_> = hits.difference(&theirs).take(5).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{rg_args:?} in {root:?}: missing {missing:?}, extra {extra:?}"
    );
    hits.len()
}

#[test]
fn content_hits_match_rg_for_patterns_and_options() {
    for root in trees() {
        let mut counted = Vec::new();

        let plain = request(&root, &[r"pub fn \w+", r"impl<"]);
        counted.push(same_hits(
            &root,
            &plain,
            &["-e", r"pub fn \w+", "-e", "impl<"],
        ));

        let mut insensitive = request(&root, &["unsafe"]);
        insensitive.case = Case::Insensitive;
        counted.push(same_hits(&root, &insensitive, &["-i", "-e", "unsafe"]));

        let mut smart = request(&root, &["regex"]);
        smart.case = Case::Smart;
        counted.push(same_hits(&root, &smart, &["-S", "-e", "regex"]));

        let mut globbed = request(&root, &["match"]);
        globbed.scope.globs = vec!["*.rs".into()];
        globbed.scope.globs_exclude = vec!["**/tests/**".into()];
        counted.push(same_hits(
            &root,
            &globbed,
            &["-g", "*.rs", "-g", "!**/tests/**", "-e", "match"],
        ));

        let mut typed = request(&root, &["TODO|FIXME", r"XXX"]);
        typed.scope.types = vec!["rust".into()];
        counted.push(same_hits(
            &root,
            &typed,
            &["-t", "rust", "-e", "TODO|FIXME", "-e", "XXX"],
        ));

        let mut untyped = request(&root, &[r"\bthe\b"]);
        untyped.scope.types_exclude = vec!["rust".into()];
        counted.push(same_hits(
            &root,
            &untyped,
            &["-T", "rust", "-e", r"\bthe\b"],
        ));

        let mut multiline = request(&root, &[r"fn \w+\(\n\s+\w+"]);
        multiline.multiline = true;
        counted.push(same_hits(
            &root,
            &multiline,
            &["-U", "-e", r"fn \w+\(\n\s+\w+"],
        ));

        let mut fixed = request(&root, &["Result<(", "a.b"]);
        fixed.fixed_strings = true;
        counted.push(same_hits(
            &root,
            &fixed,
            &["-F", "-e", "Result<(", "-e", "a.b"],
        ));

        let mut hidden = request(&root, &["name"]);
        hidden.scope.hidden = true;
        hidden.scope.ignore_files = false;
        hidden.scope.globs_exclude = vec!["/target".into(), ".git".into()];
        counted.push(same_hits(
            &root,
            &hidden,
            &[
                "--hidden",
                "--no-ignore",
                "-g",
                "!/target",
                "-g",
                "!.git",
                "-e",
                "name",
            ],
        ));

        // A comparison of empty sets proves nothing: every case must find something.
        assert!(
            counted.iter().all(|count| *count > 0),
            "{root:?}: hits per case {counted:?}"
        );
    }
}

#[test]
fn each_hit_names_exactly_the_patterns_rg_finds_on_that_line() {
    let patterns = [r"pub fn \w+", r"impl<", r"Option<"];
    for root in trees() {
        let (hits, attributed) = our_hits(&request(&root, &patterns));
        for (index, pattern) in patterns.iter().enumerate() {
            let alone = rg_hits(&root, &["-e", pattern]);
            let ours: Hits = hits
                .iter()
                .filter(|hit| attributed[*hit].contains(&index))
                .cloned()
                .collect();
            assert_eq!(ours, alone, "pattern {index} {pattern:?} in {root:?}");
            assert!(!alone.is_empty());
        }
    }
}

#[test]
fn files_with_matches_and_counts_match_rg() {
    for root in trees() {
        let mut listed = request(&root, &["unicode", r"fn new\("]);
        listed.mode = OutputMode::FilesWithMatches;
        let Output::FilesWithMatches { files } = ours(&listed).output else {
            panic!("files")
        };
        let theirs: BTreeSet<String> = rg(&root, &["-l", "-e", "unicode", "-e", r"fn new\("])
            .lines()
            .map(|line| strip(&root, line))
            .collect();
        assert_eq!(
            files.iter().cloned().collect::<BTreeSet<_>>(),
            theirs,
            "{root:?}"
        );
        assert!(!theirs.is_empty());

        let mut counted = request(&root, &["Error"]);
        counted.mode = OutputMode::Count;
        counted.case = Case::Insensitive;
        let Output::Count { files } = ours(&counted).output else {
            panic!("count")
        };
        let ours: BTreeMap<String, u64> = files
            .into_iter()
            .map(|file| (file.path, file.count))
            .collect();
        let theirs: BTreeMap<String, u64> =
            rg(&root, &["--count", "--with-filename", "-i", "-e", "Error"])
                .lines()
                .map(|line| {
                    let (path, count) = line.rsplit_once(':').expect("path:count");
                    (strip(&root, path), count.parse().expect("count"))
                })
                .collect();
        assert_eq!(ours, theirs, "{root:?}");
        assert!(!theirs.is_empty());
    }
}
