//! The whole path of an action through a real runtime: sled journal on disk, the ractor tree,
//! the filesystem body on a temp home.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aido_actions::{Action, Effect};
use aido_actors::{ConfirmAnswer, Confirmer, Hooks, Progress, Runtime, Session};
use aido_journal::Event;
use serde_json::{Value, json};

struct World {
    _dir: tempfile::TempDir,
    home: PathBuf,
    runtime: Runtime,
    session: Session,
}

async fn world(config: &str) -> World {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let home = base.join("home");
    std::fs::create_dir_all(home.join("project")).unwrap();
    let aido_home = base.join("aido");
    let text = format!("workdir = \"{}\"\n{config}", home.join("project").display());
    let runtime = common::runtime(&text, &home, &aido_home, &aido_home.join("journal")).await;
    let session = runtime
        .open_session(Some("test-client".into()))
        .await
        .unwrap();
    World {
        _dir: dir,
        home,
        runtime,
        session,
    }
}

fn action(primitive: &str, args: Value) -> Action {
    Action::from_tool_call(primitive, args).unwrap()
}

impl World {
    fn p(&self, rel: &str) -> PathBuf {
        self.home.join("project").join(rel)
    }

    async fn ok(&self, primitive: &str, args: Value) -> Value {
        match self
            .session
            .run(action(primitive, args), Hooks::default())
            .await
        {
            Ok(ran) => ran.outcome.output,
            Err(e) => panic!("{primitive} failed: {:?}", e.failure),
        }
    }

    /// Run and return the seq the agent sees (the proposal's) with the output.
    async fn seq_ok(&self, primitive: &str, args: Value) -> (u64, Value) {
        match self
            .session
            .run(action(primitive, args), Hooks::default())
            .await
        {
            Ok(ran) => (ran.seq, ran.outcome.output),
            Err(e) => panic!("{primitive} failed: {:?}", e.failure),
        }
    }

    async fn err(&self, primitive: &str, args: Value) -> String {
        match self
            .session
            .run(action(primitive, args), Hooks::default())
            .await
        {
            Ok(ran) => panic!("{primitive} should fail but gave {:?}", ran.outcome.output),
            Err(e) => e.failure.code,
        }
    }

    fn events(&self) -> Vec<Event> {
        self.runtime
            .journal()
            .all_records(self.session.id())
            .unwrap()
            .into_iter()
            .map(|r| r.event)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
async fn file_primitives_change_real_files_and_journal_every_step() {
    let w = world("").await;
    let out = w
        .ok(
            "write_file",
            json!({"path": "src/a.txt", "content": "one\ntwo\nthree\n"}),
        )
        .await;
    assert_eq!(out["created"], true);
    assert_eq!(
        std::fs::read_to_string(w.p("src/a.txt")).unwrap(),
        "one\ntwo\nthree\n"
    );

    let out = w
        .ok(
            "read_file",
            json!({"path": "src/a.txt", "offset": 2, "limit": 1}),
        )
        .await;
    assert_eq!(out["content"], "two\n");
    assert_eq!(out["truncated"], true);

    let dry = w
        .ok(
            "edit_file",
            json!({"path": "src/a.txt", "old_string": "two", "new_string": "2", "dry_run": true}),
        )
        .await;
    assert!(dry["diff"].as_str().unwrap().contains("-two\n+2\n"));
    assert_eq!(
        std::fs::read_to_string(w.p("src/a.txt")).unwrap(),
        "one\ntwo\nthree\n",
        "dry run writes nothing"
    );
    w.ok(
        "edit_file",
        json!({"path": "src/a.txt", "old_string": "two", "new_string": "2"}),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(w.p("src/a.txt")).unwrap(),
        "one\n2\nthree\n"
    );

    std::fs::write(w.p("dup.txt"), "x x").unwrap();
    assert_eq!(
        w.err(
            "edit_file",
            json!({"path": "dup.txt", "old_string": "x", "new_string": "y"})
        )
        .await,
        "edit_ambiguous_match"
    );
    assert_eq!(
        w.err(
            "edit_file",
            json!({"path": "dup.txt", "old_string": "zz", "new_string": "y"})
        )
        .await,
        "edit_no_match"
    );
    w.ok(
        "edit_file",
        json!({"path": "dup.txt", "old_string": "x", "new_string": "y", "replace_all": true}),
    )
    .await;
    assert_eq!(std::fs::read_to_string(w.p("dup.txt")).unwrap(), "y y");

    let patch = "--- a/src/a.txt\n+++ b/src/a.txt\n@@ -1,3 +1,3 @@\n one\n-2\n+two again\n three\n";
    w.ok("apply_patch", json!({"path": "src/a.txt", "patch": patch}))
        .await;
    assert_eq!(
        std::fs::read_to_string(w.p("src/a.txt")).unwrap(),
        "one\ntwo again\nthree\n"
    );
    assert_eq!(
        w.err("apply_patch", json!({"path": "src/a.txt", "patch": patch}))
            .await,
        "patch_failed"
    );
    assert_eq!(
        w.err(
            "apply_patch",
            json!({"path": "src/a.txt", "patch": "nonsense"})
        )
        .await,
        "patch_invalid"
    );

    let sum = w
        .ok(
            "checksum",
            json!({"path": "src/a.txt", "algorithm": "sha256"}),
        )
        .await;
    use sha2_check::sha256_hex;
    assert_eq!(sum["digest"], sha256_hex(b"one\ntwo again\nthree\n"));
    let b3 = w.ok("checksum", json!({"path": "src/a.txt"})).await;
    assert_eq!(
        b3["digest"],
        blake3::hash(b"one\ntwo again\nthree\n")
            .to_hex()
            .to_string()
    );

    let info = w.ok("file_info", json!({"path": "src/a.txt"})).await;
    assert_eq!(
        (info["lines"].as_u64(), info["binary"].as_bool()),
        (Some(3), Some(false))
    );
    std::fs::write(w.p("bin.dat"), [0u8, 159, 146, 150]).unwrap();
    let info = w.ok("file_info", json!({"path": "bin.dat"})).await;
    assert_eq!(info["binary"], true);
    assert_eq!(
        w.err("read_file", json!({"path": "bin.dat"})).await,
        "binary_file"
    );
    let b64 = w
        .ok(
            "read_file",
            json!({"path": "bin.dat", "encoding": "base64"}),
        )
        .await;
    assert_eq!(b64["content"], "AJ+Slg==");

    let stat = w
        .ok("stat_files", json!({"paths": ["src/a.txt", "nope", "src"]}))
        .await;
    assert_eq!(stat["files"][0]["kind"], "file");
    assert_eq!(stat["files"][1]["exists"], false);
    assert_eq!(stat["files"][2]["kind"], "dir");

    let many = w
        .ok("read_files", json!({"paths": ["src/a.txt", "nope"]}))
        .await;
    assert_eq!(many["files"][0]["ok"], true);
    assert_eq!(many["files"][1]["code"], "file_not_found");

    std::fs::write(w.p("c.json"), "{\"a\": [1, 2,]}").unwrap();
    assert_eq!(
        w.err("validate", json!({"path": "c.json", "format": "json"}))
            .await,
        "validation_failed"
    );
    std::fs::write(w.p("c.toml"), "a = 1\n").unwrap();
    w.ok("validate", json!({"path": "c.toml", "format": "toml"}))
        .await;

    // The journal holds a proposal and a terminal record for each call, and the write's
    // contents (new and previous) as blobs.
    let events = w.events();
    let proposals = events
        .iter()
        .filter(|e| matches!(e, Event::ActionProposed { .. }))
        .count();
    let terminals = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::ActionCompleted { .. } | Event::ActionFailed { .. }
            )
        })
        .count();
    assert_eq!(proposals, terminals);
    let edit = events.iter().find_map(|e| match e {
        Event::ActionCompleted { outcome, .. }
            if !outcome.effects.is_empty() && outcome.output.get("replacements").is_some() =>
        {
            Some(outcome.effects.clone())
        }
        _ => None,
    });
    match edit.as_deref() {
        Some(
            [
                Effect::FileWritten {
                    blob,
                    before: aido_actions::Before::Kept(before),
                    ..
                },
            ],
        ) => {
            let j = w.runtime.journal();
            assert_eq!(j.blob(blob).unwrap().unwrap(), b"one\n2\nthree\n");
            assert_eq!(j.blob(before).unwrap().unwrap(), b"one\ntwo\nthree\n");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        w.runtime.journal().verify(w.session.id()).unwrap().broken,
        None
    );
}

mod sha2_check {
    pub fn sha256_hex(bytes: &[u8]) -> String {
        let out = std::process::Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(bytes)?;
                c.wait_with_output()
            })
            .unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_leaf_refuses_the_pipeline_before_anything_runs() {
    let w = world("").await;
    let steps = json!({"steps": [
        {"type": "write_file", "path": "first.txt", "content": "1"},
        {"type": "write_file", "path": "~/.ssh/authorized_keys", "content": "evil"},
    ]});
    let err = w
        .session
        .run(action("pipeline", steps), Hooks::default())
        .await
        .unwrap_err();
    assert_eq!(err.failure.code, "path_denied_by_pattern");
    assert_eq!(err.leaf.as_deref(), Some("steps[1]"));
    assert!(!w.p("first.txt").exists(), "the first step never ran");
    assert!(!w.home.join(".ssh").exists());
    // The denial is journaled with its verdict.
    match w.events().last() {
        Some(Event::ActionProposed { verdict, .. }) => assert!(verdict.is_deny()),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composites_run_their_branches_and_keep_partial_effects() {
    let w = world("").await;
    std::fs::write(w.p("flag"), "on").unwrap();
    let out = w
        .ok(
            "if",
            json!({"condition": {"kind": "file_contains", "path": "flag", "text": "on"},
                         "then": {"type": "write_file", "path": "then.txt", "content": "t"},
                         "else": {"type": "write_file", "path": "else.txt", "content": "e"}}),
        )
        .await;
    assert_eq!(out["branch"], "then");
    assert!(w.p("then.txt").exists() && !w.p("else.txt").exists());

    let out = w
        .ok("try", json!({"action": {"type": "read_file", "path": "missing"},
                          "fallback": {"type": "write_file", "path": "fallback.txt", "content": "f"}}))
        .await;
    assert_eq!(out["succeeded"], false);
    assert_eq!(out["error"]["code"], "file_not_found");
    assert!(w.p("fallback.txt").exists());

    assert_eq!(
        w.err(
            "assert",
            json!({"condition": {"kind": "file_exists", "path": "nope"}, "message": "need nope"})
        )
        .await,
        "assertion_failed"
    );

    // A pipeline that fails at step 2 keeps step 1's write, and the failure record says so.
    let code = w
        .err(
            "pipeline",
            json!({"steps": [
                {"type": "write_file", "path": "p1.txt", "content": "1"},
                {"type": "edit_file", "path": "p1.txt", "old_string": "zzz", "new_string": "y"},
                {"type": "write_file", "path": "p3.txt", "content": "3"},
            ]}),
        )
        .await;
    assert_eq!(code, "edit_no_match");
    assert!(w.p("p1.txt").exists() && !w.p("p3.txt").exists());
    match w.events().last() {
        Some(Event::ActionFailed {
            effects, failure, ..
        }) => {
            assert_eq!(effects.len(), 1);
            assert_eq!(failure.details.as_ref().unwrap()["leaf"], "steps[1]");
        }
        other => panic!("{other:?}"),
    }

    // patch_set is all or nothing.
    std::fs::write(w.p("x.txt"), "x\n").unwrap();
    std::fs::write(w.p("y.txt"), "y\n").unwrap();
    let good = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-x\n+X\n";
    let bad = "--- a/y\n+++ b/y\n@@ -1 +1 @@\n-nope\n+Y\n";
    let code = w
        .err(
            "patch_set",
            json!({"patches": [{"path": "x.txt", "patch": good}, {"path": "y.txt", "patch": bad}]}),
        )
        .await;
    assert_eq!(code, "patch_failed");
    assert_eq!(
        std::fs::read_to_string(w.p("x.txt")).unwrap(),
        "x\n",
        "nothing written"
    );
    let yes = "--- a/y\n+++ b/y\n@@ -1 +1 @@\n-y\n+Y\n";
    w.ok(
        "patch_set",
        json!({"patches": [{"path": "x.txt", "patch": good}, {"path": "y.txt", "patch": yes}]}),
    )
    .await;
    assert_eq!(
        // as_str: rhai's smartstring adds another `String + _` impl, so `&String` is ambiguous.
        std::fs::read_to_string(w.p("x.txt")).unwrap()
            + std::fs::read_to_string(w.p("y.txt")).unwrap().as_str(),
        "X\nY\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trash_follows_the_freedesktop_spec_and_restores() {
    let w = world("").await;
    std::fs::create_dir_all(w.p("dir/sub")).unwrap();
    std::fs::write(w.p("dir/sub/f.txt"), "keep me").unwrap();
    let out = w.ok("move_to_trash", json!({"path": "dir"})).await;
    assert!(!w.p("dir").exists());
    let trash = w.home.join(".local/share/Trash");
    assert_eq!(
        out["trashed_to"],
        trash.join("files/dir").display().to_string()
    );
    let info = std::fs::read_to_string(trash.join("info/dir.trashinfo")).unwrap();
    assert!(info.starts_with("[Trash Info]\nPath="));
    assert!(info.contains(&format!("Path={}\n", w.p("dir").display())));
    assert!(info.contains("DeletionDate="));
    assert_eq!(
        std::fs::read_to_string(trash.join("files/dir/sub/f.txt")).unwrap(),
        "keep me"
    );

    // A second item with the same name gets its own slot.
    std::fs::create_dir_all(w.p("dir")).unwrap();
    w.ok("move_to_trash", json!({"path": "dir"})).await;
    assert!(trash.join("files/dir.2").exists() && trash.join("info/dir.2.trashinfo").exists());

    w.ok("restore_from_trash", json!({"path": "dir"})).await;
    assert!(w.p("dir").exists());
    assert_eq!(
        w.err("restore_from_trash", json!({"path": "dir"})).await,
        "restore_target_exists"
    );
    assert_eq!(
        w.err("restore_from_trash", json!({"path": "never"})).await,
        "trash_item_not_found"
    );

    // A directory holding something denied cannot be trashed as a whole.
    std::fs::create_dir_all(w.p("app")).unwrap();
    std::fs::write(w.p("app/.env"), "SECRET=1").unwrap();
    assert_eq!(
        w.err("move_to_trash", json!({"path": "app"})).await,
        "path_denied_by_pattern"
    );
    assert!(w.p("app/.env").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_body_is_restarted_and_the_call_gets_an_error() {
    let w = world("").await;
    std::fs::write(w.p("a.txt"), "a").unwrap();
    w.runtime.inject_body_panic();
    let err = w
        .session
        .run(
            action("read_file", json!({"path": "a.txt"})),
            Hooks::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.failure.code, "body_crashed");
    // The restart is journaled in the runtime's session (by the supervisor, which may finish
    // a moment after the call's error arrives)...
    let restarted = wait_until(std::time::Duration::from_secs(10), || {
        w.runtime
            .journal()
            .all_records(w.runtime.runtime_session())
            .unwrap()
            .into_iter()
            .any(|r| matches!(r.event, Event::BodyRestarted { ref body, ref reason } if body == "filesystem" && reason.contains("injected fault")))
    })
    .await;
    assert!(restarted, "a body_restarted record naming the panic");
    // ...the failure in the agent's session, and the next call is served by the new body.
    match w.events().last() {
        Some(Event::ActionFailed { failure, .. }) => assert_eq!(failure.code, "body_crashed"),
        other => panic!("{other:?}"),
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match w
            .session
            .run(
                action("read_file", json!({"path": "a.txt"})),
                Hooks::default(),
            )
            .await
        {
            Ok(ran) => {
                assert_eq!(ran.outcome.output["content"], "a");
                break;
            }
            Err(e) if e.failure.code == "body_crashed" && std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            Err(e) => panic!("{:?}", e.failure),
        }
    }
}

struct Answer(ConfirmAnswer, Arc<AtomicU64>);

impl Confirmer for Answer {
    fn confirm(&self, prompt: String) -> Pin<Box<dyn Future<Output = ConfirmAnswer> + Send>> {
        assert!(prompt.contains("write_file"));
        self.1.fetch_add(1, Ordering::SeqCst);
        let a = self.0;
        Box::pin(async move { a })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_mode_asks_a_human_and_journals_the_answer() {
    let w = world("mode = \"confirm\"\n[limits]\nconfirm_timeout_ms = 500").await;
    let asked = Arc::new(AtomicU64::new(0));
    let hooks = |a| Hooks {
        confirmer: Some(Arc::new(Answer(a, asked.clone()))),
        ..Hooks::default()
    };
    let write = |name: &str| action("write_file", json!({"path": name, "content": "x"}));

    w.session
        .run(write("yes.txt"), hooks(ConfirmAnswer::Approved))
        .await
        .unwrap();
    assert!(w.p("yes.txt").exists());
    let err = w
        .session
        .run(write("no.txt"), hooks(ConfirmAnswer::Declined))
        .await
        .unwrap_err();
    assert_eq!(err.failure.code, "confirm_declined");
    assert!(!w.p("no.txt").exists());
    // A client that cannot ask: the question waits in the store for another surface, and
    // nobody answers it within confirm_timeout_ms.
    let err = w
        .session
        .run(write("nobody.txt"), Hooks::default())
        .await
        .unwrap_err();
    assert_eq!(err.failure.code, "confirm_declined");
    assert!(!w.p("nobody.txt").exists());
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    // Reads are not asked about.
    w.session
        .run(
            action("read_file", json!({"path": "yes.txt"})),
            hooks(ConfirmAnswer::Declined),
        )
        .await
        .unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 2);

    let answers: Vec<_> = w
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::ConfirmAnswered {
                approved, answer, ..
            } => Some((approved, answer)),
            _ => None,
        })
        .collect();
    assert_eq!(
        answers,
        vec![
            (true, "accepted".into()),
            (false, "declined".into()),
            (false, "timeout".into())
        ]
    );
}

struct Steps(std::sync::Mutex<Vec<(u64, u64)>>);

impl Progress for Steps {
    fn report(&self, done: u64, total: u64, _message: String) {
        self.0.lock().unwrap().push((done, total));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelines_report_progress_and_stop_when_cancelled() {
    let w = world("").await;
    let steps: Vec<_> = (0..3)
        .map(|i| json!({"type": "write_file", "path": format!("s{i}"), "content": ""}))
        .collect();
    let progress = Arc::new(Steps(Default::default()));
    let hooks = Hooks {
        progress: Some(progress.clone()),
        ..Hooks::default()
    };
    w.session
        .run(action("pipeline", json!({"steps": steps})), hooks)
        .await
        .unwrap();
    assert_eq!(
        *progress.0.lock().unwrap(),
        vec![(0, 3), (1, 3), (2, 3), (3, 3)]
    );

    let hooks = Hooks::default();
    hooks.cancel.cancel();
    let err = w
        .session
        .run(
            action(
                "pipeline",
                json!({"steps": [{"type": "write_file", "path": "never", "content": ""}]}),
            ),
            hooks,
        )
        .await
        .unwrap_err();
    assert_eq!(err.failure.code, "cancelled");
    assert!(!w.p("never").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_history_simulate_and_policy_check_answer_from_the_journal_and_policy() {
    let w = world("").await;
    w.ok("write_file", json!({"path": "h.txt", "content": "h"}))
        .await;
    w.err("read_file", json!({"path": "/etc/shadow"})).await;
    let sim = w
        .ok(
            "simulate",
            json!({"action": {"type": "pipeline", "steps": [
            {"type": "write_file", "path": "sim.txt", "content": "s"},
            {"type": "move_to_trash", "path": "h.txt"}]}}),
        )
        .await;
    assert_eq!(sim["would_execute"], true);
    assert_eq!(
        sim["leaves"][1]["deletes"][0],
        w.p("h.txt").display().to_string()
    );
    assert!(
        !w.p("sim.txt").exists() && w.p("h.txt").exists(),
        "simulate changed nothing"
    );
    let check = w
        .ok(
            "policy_check",
            json!({"action": {"type": "read_file", "path": "~/.ssh/id_rsa"}}),
        )
        .await;
    assert_eq!(check["verdict"]["code"], "path_denied_by_pattern");

    let history = w.ok("session_history", json!({"limit": 10})).await;
    let actions = history["actions"].as_array().unwrap();
    let summary: Vec<_> = actions
        .iter()
        .map(|a| {
            (
                a["primitive"].as_str().unwrap(),
                a["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("write_file", "completed"),
            ("read_file", "denied"),
            ("simulate", "completed"),
            ("policy_check", "completed"),
            ("session_history", "pending")
        ]
    );
    assert_eq!(actions[1]["code"], "path_outside_walls");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_give_coded_errors() {
    let w = world("[limits]\nread_bytes_max = 16\n").await;
    std::fs::write(w.p("big.txt"), "0123456789abcdefXYZ").unwrap();
    assert_eq!(
        w.err("read_file", json!({"path": "big.txt"})).await,
        "file_too_large"
    );
    let window = w
        .ok(
            "read_file",
            json!({"path": "big.txt", "offset": 1, "limit": 1}),
        )
        .await;
    assert_eq!(
        window["truncated"], true,
        "a window never exceeds the limit"
    );
    assert_eq!(
        w.err("read_file", json!({"path": "missing.txt"})).await,
        "file_not_found"
    );
    assert_eq!(
        w.err(
            "write_file",
            json!({"path": "b.bin", "content": "!!", "encoding": "base64"})
        )
        .await,
        "invalid_arguments"
    );
}

/// Poll `cond` until it holds or `timeout` passes.
async fn wait_until(timeout: std::time::Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    cond()
}

/// A write onto a full filesystem fails with `disk_full`, leaves the old contents and no
/// temporary file behind, and the session goes on. The full filesystem is a real 64 KiB tmpfs
/// (mounting needs root, which CI has).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_a_coded_error_that_loses_nothing() {
    let w = world("").await;
    let small = w.p("small");
    std::fs::create_dir_all(&small).unwrap();
    let mounted = std::process::Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=64k",
            "aido-test-full",
            small.to_str().unwrap(),
        ])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        mounted,
        "mounting a small tmpfs needs root; run the tests as root (CI does)"
    );
    eprintln!("full-disk test: a 64 KiB tmpfs at {}", small.display());
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(small.clone());

    w.ok(
        "write_file",
        json!({"path": "small/f.txt", "content": "before"}),
    )
    .await;
    let big = "x".repeat(256 * 1024);
    assert_eq!(
        w.err("write_file", json!({"path": "small/f.txt", "content": big}))
            .await,
        "disk_full"
    );
    assert_eq!(
        std::fs::read_to_string(small.join("f.txt")).unwrap(),
        "before"
    );
    let left: Vec<_> = std::fs::read_dir(&small)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("f.txt")],
        "no temporary file left behind"
    );
    w.ok("read_file", json!({"path": "small/f.txt"})).await;
}

fn tree(root: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if p.is_dir() {
                out.insert(rel, "<dir>".into());
                stack.push(p);
            } else {
                out.insert(
                    rel,
                    std::fs::read_to_string(&p).unwrap_or_else(|_| "<binary>".into()),
                );
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_restore_and_safe_change_undo_a_failed_change() {
    let w = world("").await;
    std::fs::write(w.p("keep.txt"), "v1").unwrap();
    let snap = w.ok("create_snapshot", json!({"label": "before"})).await;
    let id = snap["snapshot"].as_str().unwrap().to_owned();
    assert_eq!(snap["files"], 1);
    eprintln!("snapshot backend: {}", snap["backend"]);
    w.ok("write_file", json!({"path": "keep.txt", "content": "v2"}))
        .await;
    w.ok("write_file", json!({"path": "extra.txt", "content": "x"}))
        .await;
    let listed = w.ok("list_snapshots", json!({})).await;
    assert_eq!(listed["snapshots"][0]["id"], id.as_str());
    assert!(
        listed["snapshots"][0]["seq"].as_u64().is_some(),
        "tied to the journal seq it was taken at"
    );
    w.ok("restore_snapshot", json!({"snapshot": id})).await;
    assert_eq!(std::fs::read_to_string(w.p("keep.txt")).unwrap(), "v1");
    assert!(!w.p("extra.txt").exists());
    assert_eq!(
        w.err("restore_snapshot", json!({"snapshot": "nope"})).await,
        "snapshot_not_found"
    );

    // safe_change: the validation fails, so the change is undone.
    let code = w
        .err(
            "safe_change",
            json!({
            "steps": [{"type": "write_file", "path": "config.json", "content": "{broken"},
                      {"type": "write_file", "path": "keep.txt", "content": "v3"}],
            "validate": [{"type": "validate", "path": "config.json", "format": "json"}]}),
        )
        .await;
    assert_eq!(code, "validation_failed");
    assert!(!w.p("config.json").exists(), "restored");
    assert_eq!(std::fs::read_to_string(w.p("keep.txt")).unwrap(), "v1");
    // And when it passes, the change stays.
    let ok = w
        .ok(
            "safe_change",
            json!({
            "steps": [{"type": "write_file", "path": "config.json", "content": "{\"ok\": true}"}],
            "validate": [{"type": "validate", "path": "config.json", "format": "json"}]}),
        )
        .await;
    assert_eq!(ok["restored"], false);
    assert!(w.p("config.json").exists());
    w.ok("delete_snapshot", json!({"snapshot": id})).await;
    assert_eq!(
        w.ok("list_snapshots", json!({})).await["snapshots"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

/// What a mutating action leaves on disk for recovery (a write's intents, a restore's or a
/// rewind's marker) is gone once its outcome is journaled, and a read leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intents_and_markers_are_cleared_once_their_outcome_is_journaled() {
    let w = world("").await;
    let recovery = aido_journal::dir::recovery_dir(w.runtime.journal().path());
    let left = || -> Vec<String> {
        std::fs::read_dir(&recovery)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    w.ok("write_file", json!({"path": "a.txt", "content": "1"}))
        .await;
    assert_eq!(left(), Vec::<String>::new(), "after a write");
    let snap = w.ok("create_snapshot", json!({"label": "s"})).await;
    let after_snapshot = seq_of_last(&w).await;
    w.ok("write_file", json!({"path": "a.txt", "content": "2"}))
        .await;
    w.ok("restore_snapshot", json!({"snapshot": snap["snapshot"]}))
        .await;
    assert_eq!(left(), Vec::<String>::new(), "after a restore");
    w.ok("read_file", json!({"path": "a.txt"})).await;
    w.ok("write_file", json!({"path": "b.txt", "content": "3"}))
        .await;
    w.ok("rewind", json!({"to_seq": after_snapshot})).await;
    assert!(!w.p("b.txt").exists());
    assert_eq!(left(), Vec::<String>::new(), "after a read and a rewind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_bytes_are_recorded_as_inputs() {
    let w = world("").await;
    let out = w.ok("random_bytes", json!({"count": 16})).await;
    let hex = out["hex"].as_str().unwrap().to_owned();
    assert_eq!(hex.len(), 32);
    match w.events().last() {
        Some(Event::ActionCompleted { outcome, .. }) => {
            assert_eq!(outcome.inputs, vec![aido_actions::Input::Random { hex }]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        w.err("random_bytes", json!({"count": 0})).await,
        "invalid_arguments"
    );
}

async fn seq_of_last(w: &World) -> u64 {
    w.runtime.journal().head_seq(w.session.id()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_to_any_seq_with_and_without_snapshots() {
    let w = world("").await;
    // Without a snapshot: undo from the before-images.
    w.ok("write_file", json!({"path": "a.txt", "content": "a1"}))
        .await;
    let after_a1 = seq_of_last(&w).await;
    let state_a1 = tree(&w.p(""));
    w.ok("write_file", json!({"path": "a.txt", "content": "a2"}))
        .await;
    w.ok("write_file", json!({"path": "b.txt", "content": "b"}))
        .await;
    w.ok("move_to_trash", json!({"path": "a.txt"})).await;
    let out = w.ok("rewind", json!({"to_seq": after_a1})).await;
    assert_eq!(out["method"], "undo");
    assert_eq!(tree(&w.p("")), state_a1);

    // With a snapshot: restore it, then redo the changes up to the target.
    w.ok("create_snapshot", json!({})).await;
    w.ok("write_file", json!({"path": "c.txt", "content": "c"}))
        .await;
    w.ok(
        "edit_file",
        json!({"path": "a.txt", "old_string": "a1", "new_string": "a3"}),
    )
    .await;
    let middle = seq_of_last(&w).await;
    let state_middle = tree(&w.p(""));
    w.ok("write_file", json!({"path": "d.txt", "content": "d"}))
        .await;
    w.ok("write_file", json!({"path": "c.txt", "content": "c2"}))
        .await;
    let out = w.ok("rewind", json!({"to_seq": middle})).await;
    assert_eq!(out["method"], "snapshot");
    assert_eq!(out["branch"], 2);
    assert_eq!(tree(&w.p("")), state_middle);

    // The abandoned records are still there and the chain still verifies.
    let records = w.runtime.journal().all_records(w.session.id()).unwrap();
    let gone = aido_journal::timeline::abandoned(&records);
    assert!(
        gone.contains_key(&(middle + 1)),
        "the write of d.txt is on branch 2"
    );
    assert_eq!(
        w.runtime.journal().verify(w.session.id()).unwrap().broken,
        None
    );
    let history = w.ok("session_history", json!({"limit": 50})).await;
    let abandoned: Vec<_> = history["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a.get("abandoned_by_rewind").is_some())
        .collect();
    assert!(!abandoned.is_empty());
    assert_eq!(
        w.err("rewind", json!({"to_seq": middle + 1})).await,
        "rewind_target_abandoned"
    );
    assert_eq!(
        w.err("rewind", json!({"to_seq": 0})).await,
        "rewind_target_invalid"
    );
}

fn undone(out: &Value) -> Vec<u64> {
    out["undone"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["seq"].as_u64().unwrap())
        .collect()
}

/// Regression (issue 8, point 1): with `blob_bytes_max = 4096`, replacing a pre-existing
/// 10 KB file used to succeed without keeping it, and a rewind then deleted it. A write whose
/// previous contents the journal cannot keep is now refused before it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_previous_contents_cannot_be_kept_is_refused_before_it_runs() {
    let w = world("[limits]\nblob_bytes_max = 4096\n").await;
    let users = "u".repeat(10 * 1024);
    std::fs::write(w.p("users.txt"), &users).unwrap();
    assert_eq!(
        w.err(
            "write_file",
            json!({"path": "users.txt", "content": "agent"})
        )
        .await,
        "contents_too_large"
    );
    assert_eq!(std::fs::read_to_string(w.p("users.txt")).unwrap(), users);
    // Contents it can keep are fine, and a rewind before them gives the file back.
    std::fs::write(w.p("small.txt"), "mine").unwrap();
    let (seq, _) = w
        .seq_ok(
            "write_file",
            json!({"path": "small.txt", "content": "agent"}),
        )
        .await;
    let out = w.ok("rewind", json!({"before_seq": seq})).await;
    assert_eq!(undone(&out), vec![seq]);
    assert_eq!(std::fs::read_to_string(w.p("small.txt")).unwrap(), "mine");
    assert_eq!(std::fs::read_to_string(w.p("users.txt")).unwrap(), users);
}

/// Regression (issue 8, point 1): previous contents of any size are kept (large ones in
/// chunks), so a rewind gives back a big file byte for byte; verify and re-derivation agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_gives_back_a_large_file_a_write_replaced() {
    let w = world("").await;
    let big: Vec<u8> = (0..(5 << 20) + 12345u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(w.p("big.bin"), &big).unwrap();
    let (seq, out) = w
        .seq_ok(
            "write_file",
            json!({"path": "big.bin", "content": "now small"}),
        )
        .await;
    assert_eq!(out["created"], false);
    assert_eq!(std::fs::read(w.p("big.bin")).unwrap(), b"now small");
    let out = w.ok("rewind", json!({"before_seq": seq})).await;
    assert_eq!(undone(&out), vec![seq]);
    assert_eq!(std::fs::read(w.p("big.bin")).unwrap(), big);
    let journal = w.runtime.journal();
    assert_eq!(journal.verify(w.session.id()).unwrap().broken, None);
    let kept = w.events().into_iter().find_map(|e| match e {
        Event::ActionCompleted { outcome, .. } => {
            outcome.effects.into_iter().find_map(|e| match e {
                Effect::FileWritten { before, .. } => before.kept().map(str::to_owned),
                _ => None,
            })
        }
        _ => None,
    });
    let kept = kept.expect("the write kept what it replaced");
    assert_eq!(journal.blob(&kept).unwrap().unwrap(), big);
}

/// Regression (issue 8, point 2): rewinding to the seq a write's result carried used to undo
/// that very write. Like `git reset` to a commit, it keeps it; `before_seq` undoes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewinding_to_an_actions_seq_keeps_that_action() {
    let w = world("").await;
    let (a, _) = w
        .seq_ok("write_file", json!({"path": "a.txt", "content": "a"}))
        .await;
    let (b, _) = w
        .seq_ok("write_file", json!({"path": "b.txt", "content": "b"}))
        .await;
    let (c, _) = w
        .seq_ok(
            "edit_file",
            json!({"path": "a.txt", "old_string": "a", "new_string": "A"}),
        )
        .await;
    let (r1, out) = w.seq_ok("rewind", json!({"to_seq": b})).await;
    assert_eq!(undone(&out), vec![c], "{out}");
    assert_eq!(std::fs::read_to_string(w.p("a.txt")).unwrap(), "a");
    assert_eq!(std::fs::read_to_string(w.p("b.txt")).unwrap(), "b");
    let (r, out) = w.seq_ok("rewind", json!({"before_seq": b})).await;
    assert_eq!(
        undone(&out),
        vec![b, r1],
        "the first rewind is an action too: {out}"
    );
    assert!(!w.p("b.txt").exists());
    assert_eq!(std::fs::read_to_string(w.p("a.txt")).unwrap(), "a");
    // Keeping the very first action undoes the rewinds after it as actions too.
    let out = w.ok("rewind", json!({"to_seq": a})).await;
    assert_eq!(undone(&out), vec![r]);
    assert_eq!(std::fs::read_to_string(w.p("a.txt")).unwrap(), "a");
    assert_eq!(
        w.err("rewind", json!({"to_seq": a, "before_seq": a})).await,
        "rewind_target_invalid"
    );
    assert_eq!(w.err("rewind", json!({})).await, "rewind_target_invalid");
    let journal = w.runtime.journal();
    assert_eq!(journal.verify(w.session.id()).unwrap().broken, None);
}

/// Regression (issue 8, point 1): directories made by `create_parents` survived a rewind.
/// They are journaled and removed again; one that holds a file the journal does not know of
/// stays, with the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_a_write_creates_are_removed_by_a_rewind() {
    let w = world("").await;
    std::fs::create_dir_all(w.p("have")).unwrap();
    let (seq, _) = w
        .seq_ok(
            "write_file",
            json!({"path": "have/new1/new2/f.txt", "content": "x", "create_parents": true}),
        )
        .await;
    let made: Vec<String> = w
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::ActionCompleted { outcome, .. } => Some(outcome.effects),
            _ => None,
        })
        .flatten()
        .filter_map(|e| match e {
            Effect::DirCreated { path } => Some(path),
            _ => None,
        })
        .collect();
    assert_eq!(
        made,
        vec![
            w.p("have/new1").display().to_string(),
            w.p("have/new1/new2").display().to_string()
        ]
    );
    w.ok("rewind", json!({"before_seq": seq})).await;
    assert!(!w.p("have/new1").exists(), "the made directories are gone");
    assert!(w.p("have").is_dir(), "the one that was there stays");

    let (seq, _) = w
        .seq_ok(
            "write_file",
            json!({"path": "made/f.txt", "content": "x", "create_parents": true}),
        )
        .await;
    std::fs::write(w.p("made/users.txt"), "not the agent's").unwrap();
    w.ok("rewind", json!({"before_seq": seq})).await;
    assert!(!w.p("made/f.txt").exists());
    assert_eq!(
        std::fs::read_to_string(w.p("made/users.txt")).unwrap(),
        "not the agent's",
        "a rewind never destroys data the journal does not know of"
    );
}

/// Every proposal of the session has exactly one outcome record.
fn every_proposal_has_an_outcome(w: &World) {
    let events = w.events();
    let records = w.runtime.journal().all_records(w.session.id()).unwrap();
    for r in &records {
        if let Event::ActionProposed { verdict, .. } = &r.event {
            if verdict.is_deny() {
                continue;
            }
            let outcomes = events
                .iter()
                .filter(|e| match e {
                    Event::ActionCompleted { proposal, .. }
                    | Event::ActionFailed { proposal, .. } => *proposal == r.seq,
                    _ => false,
                })
                .count();
            assert_eq!(outcomes, 1, "proposal {} has {outcomes} outcomes", r.seq);
        }
    }
}

/// The journal and the tree agree: the chain verifies, re-derivation finds no damage and
/// playback reproduces every result.
fn journal_agrees(w: &World) {
    let journal = w.runtime.journal();
    let id = w.session.id();
    assert_eq!(journal.verify(id).unwrap().broken, None);
    let records = journal.all_records(id).unwrap();
    files_match_the_journal(journal, &records);
    every_proposal_has_an_outcome(w);
}

/// Every file the live timeline says was written last (and not moved away since) holds the
/// bytes the journal kept for it. (The full re-derivation is `aido_replay::derive`; this crate
/// cannot depend on it.)
fn files_match_the_journal(journal: &aido_journal::Journal, records: &[aido_journal::Record]) {
    let live = aido_journal::timeline::live(records);
    let mut last: std::collections::BTreeMap<String, String> = Default::default();
    for r in live {
        let effects = match &r.event {
            Event::ActionCompleted { outcome, .. } => outcome.effects.clone(),
            Event::ActionFailed { effects, .. } => effects.clone(),
            _ => Vec::new(),
        };
        for e in effects {
            match e {
                Effect::FileWritten { path, blob, .. } => {
                    last.insert(path, blob);
                }
                Effect::Moved { from, .. } => {
                    last.remove(&from);
                }
                _ => {}
            }
        }
    }
    for (path, blob) in &last {
        let on_disk = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(
            Some(on_disk),
            journal.blob(blob).unwrap(),
            "{path} holds what the journal says"
        );
    }
}

/// Regression (issue 8, point 3): a call that timed out used to stay queued in the body's
/// mailbox and run afterwards (reproduced with `create_snapshot` under
/// `action_timeout_ms = 30`: `body_timeout`, and the snapshot was there seconds later, with no
/// seq). A call whose deadline passed before the body took it never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_timed_out_never_runs_later() {
    let w = world("[limits]\naction_timeout_ms = 50\n").await;
    w.runtime
        .faults()
        .delay_before_start(std::time::Duration::from_millis(400));
    assert_eq!(w.err("create_snapshot", json!({})).await, "body_timeout");
    assert_eq!(
        w.err("write_file", json!({"path": "late.txt", "content": "x"}))
            .await,
        "body_timeout"
    );
    // Long after the delayed calls' turns came, nothing they would have done is there.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    w.runtime.faults().clear();
    assert!(!w.p("late.txt").exists(), "the timed-out write never ran");
    let listed = w.ok("list_snapshots", json!({})).await;
    assert_eq!(
        listed["snapshots"],
        json!([]),
        "the timed-out snapshot never ran"
    );
    journal_agrees(&w);
}

/// A call the body took and committed to is waited for past the deadline: the world changed,
/// so the journal records how.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_body_committed_to_is_waited_for_and_journaled() {
    let w = world("[limits]\naction_timeout_ms = 50\n").await;
    w.runtime
        .faults()
        .delay_after_start(std::time::Duration::from_millis(300));
    w.ok("write_file", json!({"path": "slow.txt", "content": "x"}))
        .await;
    let taken = w.ok("create_snapshot", json!({})).await;
    w.runtime.faults().clear();
    assert_eq!(std::fs::read_to_string(w.p("slow.txt")).unwrap(), "x");
    let listed = w.ok("list_snapshots", json!({})).await;
    assert_eq!(listed["snapshots"][0]["id"], taken["snapshot"]);
    journal_agrees(&w);
}

/// Regression (issue 8, point 4): more timeouts in a row than `in_flight_actions_max`, and the
/// session still serves; every proposal got its outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_timeouts_than_in_flight_actions_max_and_the_session_still_serves() {
    let w = world("[limits]\naction_timeout_ms = 30\nin_flight_actions_max = 2\n").await;
    std::fs::write(w.p("a.txt"), "a").unwrap();
    w.runtime
        .faults()
        .delay_before_start(std::time::Duration::from_millis(200));
    for _ in 0..5 {
        assert_eq!(
            w.err("read_file", json!({"path": "a.txt"})).await,
            "body_timeout"
        );
    }
    w.runtime.faults().clear();
    // Let the delayed calls' tasks drain; they run nothing.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let read = w.ok("read_file", json!({"path": "a.txt"})).await;
    assert_eq!(read["content"], "a");
    journal_agrees(&w);
}

/// Issue 8, point 11: restarts are bounded. A body that fails more than RESTARTS_MAX times
/// within the window is stopped for good and its calls get `body_failed`; the runtime goes on
/// serving everything else. A panic inside the body's blocking work counts like one in the
/// actor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_keeps_crashing_is_stopped_and_the_rest_serves() {
    let w = world("").await;
    std::fs::write(w.p("a.txt"), "a").unwrap();
    let runtime_records = |w: &World| {
        w.runtime
            .journal()
            .all_records(w.runtime.runtime_session())
            .unwrap_or_default()
    };
    let max = aido_actors::bodies::RESTARTS_MAX as usize;
    let mut codes = Vec::new();
    for n in 0..=max {
        if n % 2 == 0 {
            w.runtime.faults().panic_next();
        } else {
            w.runtime.faults().panic_in_work_next();
        }
        codes.push(w.err("read_file", json!({"path": "a.txt"})).await);
        // Wait for the supervisor to have dealt with this failure before the next one.
        let seen = wait_until(std::time::Duration::from_secs(10), || {
            runtime_records(&w)
                .iter()
                .filter(|r| {
                    matches!(
                        r.event,
                        Event::BodyRestarted { .. } | Event::BodyFailed { .. }
                    )
                })
                .count()
                == n + 1
        })
        .await;
        assert!(seen, "the supervisor journaled failure {}", n + 1);
    }
    assert!(codes.iter().all(|c| c == "body_crashed"), "{codes:?}");
    let records = runtime_records(&w);
    let restarted = records
        .iter()
        .filter(|r| matches!(r.event, Event::BodyRestarted { .. }))
        .count();
    assert_eq!(restarted, max);
    assert!(
        matches!(records.last().map(|r| &r.event), Some(Event::BodyFailed { body, restarts, .. }) if body == "filesystem" && *restarts as usize == max),
        "{:?}",
        records.last()
    );
    // The body is stopped: its calls get a coded error at once.
    assert_eq!(
        w.err("read_file", json!({"path": "a.txt"})).await,
        "body_failed"
    );
    // Everything else goes on: the runtime's own primitives, and new sessions.
    w.ok("random_bytes", json!({"count": 4})).await;
    w.ok("session_history", json!({"limit": 3})).await;
    let other = w.runtime.open_session(Some("other".into())).await.unwrap();
    let ran = other
        .run(
            action("random_bytes", json!({"count": 2})),
            Hooks::default(),
        )
        .await
        .unwrap();
    assert_eq!(ran.outcome.output["count"], 2);
}

/// Found by simulation seed 30: a rewind whose plan restores a snapshot and redoes a write,
/// its trashing and a later restore of the same snapshot must end as that restore did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_redoing_a_trash_and_a_restore_ends_as_the_restore_did() {
    let w = world("").await;
    let taken = w.ok("create_snapshot", json!({})).await;
    let id = taken["snapshot"].as_str().unwrap().to_owned();
    w.ok(
        "write_file",
        json!({"path": "n2/deep0/f.txt", "content": "deep\n", "create_parents": true}),
    )
    .await;
    w.ok("move_to_trash", json!({"path": "n2/deep0/f.txt"}))
        .await;
    w.ok("restore_snapshot", json!({"snapshot": id})).await;
    let after_restore = tree(&w.p(""));
    let (seq, _) = w.seq_ok("random_bytes", json!({"count": 1})).await;
    let out = w.ok("rewind", json!({"before_seq": seq})).await;
    assert_eq!(tree(&w.p("")), after_restore, "{out}");
}
