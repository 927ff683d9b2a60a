//! The search body through a real runtime: every entry judged by the walls and deny globs
//! before it is opened (a hit in a denied file is never returned, a root outside the walls is
//! refused), the bounds as coded results, and playback reproducing every search from what was
//! recorded, after the tree has changed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::path::{Path, PathBuf};

use aido_actions::Action;
use aido_actors::{Hooks, Runtime, Session};
use serde_json::{Value, json};

struct Aido {
    runtime: Runtime,
    session: Session,
}

/// A runtime on `base/aido` working in `base/home/project` (the walls are `base/home`).
async fn aido(base: &Path, name: &str, config: &str) -> Aido {
    let home = base.join("home");
    let text = format!("workdir = \"{}\"\n{config}", home.join("project").display());
    let aido_home = base.join("aido");
    let runtime = common::runtime(
        &text,
        &home,
        &aido_home,
        &aido_home.join("journal").join(name),
    )
    .await;
    let session = runtime.open_session(Some("search".into())).await.unwrap();
    Aido { runtime, session }
}

/// A project with hits in allowed files, in a denied file (`.env`), under a denied directory
/// (`secrets/`) and behind a symlink that leaves the walls.
fn project() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let project = base.join("home").join("project");
    let write = |relative: &str, text: &str| {
        let path = project.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "src/lib.rs",
        "pub struct Cache;\n\nimpl Cache {\n    pub fn lookup(&self, key: &str) -> Option<u64> {\n        let needle = key.len();\n        Some(needle as u64)\n    }\n}\n\nfn warm(cache: &Cache) {\n    cache.lookup(\"a\");\n}\n",
    );
    write("notes.md", "the needle is here\nand NEEDLE here\n");
    write(".env", "TOKEN=needle\n");
    write("secrets/key.txt", "needle\n");
    write(
        "py/app.py",
        "class Store:\n    def get(self, key):\n        return self.needle(key)\n\n\ndef main():\n    s = Store()\n    s.get(1)\n",
    );
    let outside = base.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("leak.txt"), "needle\n").unwrap();
    std::os::unix::fs::symlink(&outside, project.join("link")).unwrap();
    (dir, base)
}

impl Aido {
    async fn run(&self, primitive: &str, args: Value) -> Result<Value, String> {
        let action = Action::from_tool_call(primitive, args).unwrap();
        match self.session.run(action, Hooks::default()).await {
            Ok(ran) => Ok(ran.outcome.output),
            Err(e) => Err(e.failure.code),
        }
    }

    async fn ok(&self, primitive: &str, args: Value) -> Value {
        self.run(primitive, args)
            .await
            .unwrap_or_else(|code| panic!("{primitive} failed: {code}"))
    }

    async fn err(&self, primitive: &str, args: Value) -> String {
        match self.run(primitive, args).await {
            Ok(out) => panic!("{primitive} should fail but gave {out}"),
            Err(code) => code,
        }
    }

    fn playback(&self) -> aido_replay::playback::Playback {
        let journal = self.runtime.journal();
        let records = journal.all_records(self.session.id()).unwrap();
        aido_replay::playback::playback(journal, &records)
    }
}

/// (path, line) of every hit of a content result.
fn hits(out: &Value) -> Vec<(String, u64)> {
    out["found"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|file| {
            let path = file["path"].as_str().unwrap().to_owned();
            file["hits"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |hit| (path.clone(), hit["line"].as_u64().unwrap()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_files_are_never_opened_or_returned_and_playback_reproduces_every_search() {
    let (_dir, base) = project();
    let a = aido(&base, "a", "[paths]\ndeny = [\"**/secrets/**\"]\n").await;

    // Hidden files searched too: `.env` is still never opened (the built-in `**/.env` deny).
    let found = a
        .ok(
            "search_code",
            json!({"patterns": ["needle", "NEEDLE"], "mode": "content", "hidden": true}),
        )
        .await;
    assert_eq!(
        hits(&found),
        [
            ("notes.md".to_string(), 1),
            ("notes.md".into(), 2),
            ("py/app.py".into(), 3),
            ("src/lib.rs".into(), 5),
            ("src/lib.rs".into(), 6),
        ]
    );
    let second = &found["found"]["files"][0]["hits"][1];
    assert_eq!(
        second["patterns"],
        json!([1]),
        "each hit says which pattern"
    );
    let skipped = &found["found"]["skipped"];
    assert_eq!(skipped["denied_files"], 1, "{skipped}");
    assert_eq!(skipped["denied_dirs"], 1, "{skipped}");
    assert_eq!(
        skipped["symlinks"], 1,
        "the link out of the walls is never followed"
    );
    assert!(!found.to_string().contains("TOKEN"));

    // Every mode, globs and types.
    let files = a
        .ok(
            "search_code",
            json!({"patterns": ["needle"], "types": ["rust", "py"]}),
        )
        .await;
    assert_eq!(files["found"]["files"], json!(["py/app.py", "src/lib.rs"]));
    let counts = a
        .ok(
            "search_code",
            json!({"patterns": ["(?i)needle"], "mode": "count", "globs": ["*.md"]}),
        )
        .await;
    assert_eq!(
        counts["found"]["files"],
        json!([{"path": "notes.md", "count": 2}])
    );

    // The function and its callers in one call, each definition saying how it was found.
    let read = a
        .ok(
            "search_and_read",
            json!({"patterns": ["let needle"], "types": ["rust"]}),
        )
        .await;
    let entry = &read["found"]["entries"][0];
    assert_eq!(entry["definition"]["name"], "lookup");
    assert_eq!(entry["definition"]["found_by"], "heuristic");
    assert_eq!(entry["definition"]["start_line"], 4);
    assert_eq!(entry["callers"][0]["line"]["line"], 11);
    assert_eq!(entry["callers"][0]["definition"]["name"], "warm");
    let python = a
        .ok(
            "search_and_read",
            json!({"patterns": ["self.needle"], "path": "py"}),
        )
        .await;
    let entry = &python["found"]["entries"][0];
    assert_eq!(entry["definition"]["name"], "get");
    assert_eq!(entry["callers"][0]["definition"]["name"], "main");

    // Searching the denied directory itself is refused before anything runs.
    assert_eq!(
        a.err("search_code", json!({"patterns": ["x"], "path": "secrets"}))
            .await,
        "path_denied_by_pattern"
    );

    // The tree changes; playback renders what the search found then, from the journal.
    std::fs::write(
        base.join("home/project/notes.md"),
        "nothing to find any more\n",
    )
    .unwrap();
    std::fs::remove_dir_all(base.join("home/project/src")).unwrap();
    let played = a.playback();
    assert!(played.mismatches.is_empty(), "{:?}", played.mismatches);
    assert!(
        played.not_reproducible.is_empty(),
        "{:?}",
        played.not_reproducible
    );
    assert_eq!(
        played.reproduced, 5,
        "every result (the refusal was never run)"
    );
    a.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_outside_the_walls_is_refused() {
    let (_dir, base) = project();
    let a = aido(&base, "a", "").await;
    let outside = base.join("outside").display().to_string();
    for path in [outside.as_str(), "link", "link/leak.txt", "/etc", "../.."] {
        assert_eq!(
            a.err("search_code", json!({"patterns": ["needle"], "path": path}))
                .await,
            "path_outside_walls",
            "{path}"
        );
        assert_eq!(
            a.err(
                "search_and_read",
                json!({"patterns": ["needle"], "path": path})
            )
            .await,
            "path_outside_walls",
            "{path}"
        );
    }
    a.runtime.shutdown().await;
    // AIDO_HOME is never searched either, even with walls around it.
    let home = aido(
        &base,
        "b",
        &format!("[paths]\nread = [\"{}\"]\n", base.display()),
    )
    .await;
    let journal = base.join("aido").display().to_string();
    assert_eq!(
        home.err("search_code", json!({"patterns": ["a"], "path": journal}))
            .await,
        "path_in_aido_home"
    );
    // A search of the walls' parent skips AIDO_HOME below it.
    let all = home
        .ok("search_code", json!({"patterns": ["session"], "path": base.display().to_string(), "hidden": true, "no_ignore": true}))
        .await;
    assert!(
        all["found"]["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|path| !path.as_str().unwrap().starts_with("aido/")),
        "{all}"
    );
    assert!(all["found"]["skipped"]["denied_dirs"].as_u64().unwrap() >= 1);
    home.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bound_is_a_coded_result_and_the_body_serves_on() {
    let (_dir, base) = project();
    let a = aido(&base, "a", "").await;
    for (args, code) in [
        (
            json!({"patterns": ["(a{1000}){1000}"]}),
            "pattern_too_large",
        ),
        (json!({"patterns": ["(unclosed"]}), "pattern_invalid"),
        (
            json!({"patterns": ["x"], "types": ["klingon"]}),
            "type_unknown",
        ),
        (json!({"patterns": ["x"], "globs": ["a{b"]}), "glob_invalid"),
        (
            json!({"patterns": ["x"], "context_before": 51}),
            "context_too_large",
        ),
        (json!({"patterns": []}), "patterns_empty"),
        (
            json!({"patterns": ["x"], "path": "missing"}),
            "root_unreadable",
        ),
    ] {
        assert_eq!(a.err("search_code", args.clone()).await, code, "{args}");
    }
    assert_eq!(
        a.err(
            "search_and_read",
            json!({"patterns": ["x"], "budget_chars": 199_000})
        )
        .await,
        "budget_too_large"
    );

    let limited = a
        .ok(
            "search_code",
            json!({"patterns": ["needle"], "mode": "content", "limit": 2}),
        )
        .await;
    assert_eq!(hits(&limited).len(), 2);
    assert_eq!(limited["found"]["truncation"], "limit");
    let budget = a
        .ok(
            "search_code",
            json!({"patterns": ["needle"], "mode": "content", "bytes_max": 100}),
        )
        .await;
    assert_eq!(hits(&budget), [("notes.md".to_string(), 1)]);
    assert_eq!(budget["found"]["truncation"], "budget");
    let tight = a
        .ok(
            "search_and_read",
            json!({"patterns": ["let needle"], "budget_chars": 40}),
        )
        .await;
    assert_eq!(tight["found"]["budget_exhausted"], true);
    assert!(tight["found"]["chars_used"].as_u64().unwrap() <= 40);

    // Still serving after every refusal.
    let found = a.ok("search_code", json!({"patterns": ["needle"]})).await;
    assert_eq!(found["found"]["files"].as_array().unwrap().len(), 4);
    let played = a.playback();
    assert!(played.mismatches.is_empty(), "{:?}", played.mismatches);
    assert_eq!(played.reproduced, 12, "4 results and 8 coded failures");
    a.runtime.shutdown().await;
}
