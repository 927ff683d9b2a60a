//! `search_code` against spawning the `rg` binary on the same tree, patterns and walk settings,
//! with a real judge on every entry (a root wall and deny globs, as aido plugs in).
//!
//! The tree is `AIDO_SEARCH_BENCH_TREE`, or else the cargo registry's sources (tens of
//! thousands of real files). The issue's goal: at least 0.8x rg's speed. Compare the
//! `aido/<case>` and `rg/<case>` times, e.g. from target/criterion/*/*/new/estimates.json.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench fails loudly

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use aido_search::{
    Case, EntryKind, Limits, Output, OutputMode, SearchRequest, Verdict, search_code,
};
use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use globset::{Glob, GlobSet, GlobSetBuilder};

fn tree() -> PathBuf {
    if let Some(tree) = std::env::var_os("AIDO_SEARCH_BENCH_TREE") {
        return PathBuf::from(tree);
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cargo"));
    let index = std::fs::read_dir(home.join("registry/src"))
        .expect("registry sources")
        .next()
        .expect("an index");
    index.expect("entry").path()
}

/// The judge aido would plug in: everything inside the wall, nothing matching a deny glob.
struct Walls {
    root: PathBuf,
    deny: GlobSet,
}

impl Walls {
    fn new(root: &Path) -> Self {
        let mut deny = GlobSetBuilder::new();
        for glob in [
            "**/.env",
            "**/*.pem",
            "**/id_rsa*",
            "**/.ssh/**",
            "**/secrets/**",
        ] {
            deny.add(Glob::new(glob).expect("glob"));
        }
        Walls {
            root: root.to_path_buf(),
            deny: deny.build().expect("globset"),
        }
    }

    fn judge(&self, path: &Path, _kind: EntryKind) -> Verdict {
        if path.starts_with(&self.root) && !self.deny.is_match(path) {
            Verdict::Allow
        } else {
            Verdict::Deny
        }
    }
}

struct Scenario {
    name: &'static str,
    patterns: &'static [&'static str],
    mode: OutputMode,
    insensitive: bool,
}

const CASES: &[Scenario] = &[
    Scenario {
        name: "content_two_patterns",
        patterns: &[r"fn \w+\(", "impl<"],
        mode: OutputMode::Content,
        insensitive: false,
    },
    Scenario {
        name: "files_with_matches",
        patterns: &["unsafe", "TODO"],
        mode: OutputMode::FilesWithMatches,
        insensitive: false,
    },
    Scenario {
        name: "count_insensitive",
        patterns: &["error"],
        mode: OutputMode::Count,
        insensitive: true,
    },
];

fn rg_args(case: &Scenario) -> Vec<&'static str> {
    let mut args = vec![
        "--no-config",
        "--no-require-git",
        "--no-ignore-global",
        "--no-messages",
    ];
    args.push(match case.mode {
        OutputMode::Content => "-n",
        OutputMode::FilesWithMatches => "-l",
        OutputMode::Count => "-c",
    });
    if case.insensitive {
        args.push("-i");
    }
    for pattern in case.patterns {
        args.extend(["-e", pattern]);
    }
    args
}

fn run_rg(root: &Path, case: &Scenario, stdout: Stdio) -> std::process::Output {
    let child = Command::new("rg")
        .args(rg_args(case))
        .arg(root)
        .current_dir(root)
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .expect("the rg binary (apt-get install ripgrep)");
    child.wait_with_output().expect("rg runs")
}

fn request(root: &Path, case: &Scenario) -> SearchRequest {
    let mut request = SearchRequest::new(root, case.patterns);
    request.mode = case.mode;
    if case.insensitive {
        request.case = Case::Insensitive;
    }
    request
}

fn limits() -> Limits {
    Limits {
        hits_max: u64::MAX / 2,
        matched_files_max: u64::MAX / 2,
        files_max: u64::MAX / 2,
        result_bytes_max: u64::MAX,
        ..Limits::default()
    }
}

/// The same work on both sides: rg's output lines equal the lines, files or counts we return.
fn check_same_work(root: &Path, walls: &Walls, case: &Scenario) {
    let theirs = String::from_utf8(run_rg(root, case, Stdio::piped()).stdout).expect("utf-8");
    let result = search_code(&request(root, case), &limits(), &|path: &Path, kind| {
        walls.judge(path, kind)
    })
    .expect("searches");
    assert!(!result.truncated);
    let ours = match &result.output {
        Output::Content { files } => files.iter().map(|file| file.hits.len()).sum::<usize>(),
        Output::FilesWithMatches { files } => files.len(),
        Output::Count { files } => files.len(),
    };
    // rg prints matches of files it later finds binary, search_code drops them: allow those.
    let lines = theirs.lines().count();
    assert!(
        ours <= lines && lines - ours <= lines / 100 + 50,
        "{}: ours {ours}, rg {lines}",
        case.name
    );
    eprintln!(
        "{}: {ours} results (rg {lines}), {} files searched, skipped {:?}",
        case.name, result.files_searched, result.skipped
    );
}

fn bench(c: &mut Criterion) {
    let root = tree();
    let walls = Walls::new(&root);
    let judge = |path: &Path, kind: EntryKind| walls.judge(path, kind);
    let mut group = c.benchmark_group("search_vs_rg");
    // Each run takes about a second on a large tree: ten runs a side, not criterion's 55.
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.warm_up_time(std::time::Duration::from_secs(1));
    group.measurement_time(std::time::Duration::from_secs(10));
    for case in CASES {
        check_same_work(&root, &walls, case);
        let asked = request(&root, case);
        let limits = limits();
        group.bench_function(format!("aido/{}", case.name), |b| {
            b.iter(|| search_code(&asked, &limits, &judge).expect("searches"))
        });
        group.bench_function(format!("rg/{}", case.name), |b| {
            b.iter(|| run_rg(&root, case, Stdio::null()))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
