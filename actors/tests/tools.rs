//! diff, render_template and read_logs through a real runtime: paths judged before they are
//! opened (a denied side, a denied or out-of-walls include), budgets, fuel, redaction, and
//! playback reproducing every result from the journal alone.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::path::{Path, PathBuf};

use aido_actions::Action;
use aido_actors::{Hooks, Runtime, Session};
use aido_journal::Event;
use serde_json::{Value, json};

struct Aido {
    runtime: Runtime,
    session: Session,
    /// The project (the session's working directory).
    project: PathBuf,
    /// AIDO_HOME.
    aido_home: PathBuf,
}

/// A runtime whose walls are `base/home` (AIDO_HOME is `base/aido`), working in
/// `base/home/project`.
async fn aido(base: &Path) -> Aido {
    let home = base.join("home");
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let aido_home = base.join("aido");
    let text = format!("workdir = \"{}\"\n", project.display());
    let runtime = common::runtime(
        &text,
        &home,
        &aido_home,
        &aido_home.join("journal").join("main"),
    )
    .await;
    let session = runtime.open_session(Some("tools".into())).await.unwrap();
    Aido {
        runtime,
        session,
        project,
        aido_home,
    }
}

fn base() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    (dir, base)
}

impl Aido {
    async fn run(&self, primitive: &str, args: Value) -> Result<(String, Value), Value> {
        let action = Action::from_tool_call(primitive, args).unwrap();
        match self.session.run(action, Hooks::default()).await {
            Ok(ran) => Ok((ran.outcome.text, ran.outcome.output)),
            Err(e) => Err(serde_json::to_value(&e.failure).unwrap()),
        }
    }

    async fn ok(&self, primitive: &str, args: Value) -> Value {
        match self.run(primitive, args).await {
            Ok((_, out)) => out,
            Err(f) => panic!("{primitive} failed: {f}"),
        }
    }

    async fn err(&self, primitive: &str, args: Value) -> Value {
        match self.run(primitive, args).await {
            Ok((_, out)) => panic!("{primitive} should fail but gave {out}"),
            Err(f) => f,
        }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.project.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    fn records(&self) -> Vec<aido_journal::Record> {
        self.runtime
            .journal()
            .all_records(self.session.id())
            .unwrap()
    }

    fn playback(&self) -> aido_replay::playback::Playback {
        aido_replay::playback::playback(self.runtime.journal(), &self.records())
    }

    /// Every input the journal recorded for this session's results, as JSON.
    fn recorded_inputs(&self) -> String {
        let inputs: Vec<Value> = self
            .records()
            .into_iter()
            .filter_map(|r| match r.event {
                Event::ActionCompleted { outcome, .. } => {
                    Some(serde_json::to_value(outcome.inputs).unwrap())
                }
                Event::ActionFailed { inputs, .. } => Some(serde_json::to_value(inputs).unwrap()),
                _ => None,
            })
            .collect();
        serde_json::to_string(&inputs).unwrap()
    }
}

#[tokio::test]
async fn diff_two_files_a_file_and_text_binary_and_budgets_and_playback_reproduces_them() {
    let (_dir, base) = base();
    let a = aido(&base).await;
    a.write("old.txt", "one\ntwo\nthree\n");
    a.write("new.txt", "one\n2\nthree\n");
    let two = a
        .ok(
            "diff",
            json!({"path": "old.txt", "other_path": "new.txt", "context_lines": 0}),
        )
        .await;
    assert!(
        two["diff"]
            .as_str()
            .unwrap()
            .contains("@@ -2,1 +2,1 @@\n-two\n+2\n")
    );
    assert_eq!(
        (two["added"].as_u64(), two["removed"].as_u64()),
        (Some(1), Some(1))
    );
    let text = a
        .ok(
            "diff",
            json!({"path": "old.txt", "text": "one\ntwo\nthree\n"}),
        )
        .await;
    assert_eq!(text["identical"], true);
    std::fs::write(a.project.join("blob.bin"), [0u8, 1, 2, 3]).unwrap();
    let binary = a
        .ok("diff", json!({"path": "blob.bin", "other_path": "old.txt"}))
        .await;
    assert_eq!(binary["binary"], true);
    let long_old: String = (0..500).map(|i| format!("{i}\n")).collect();
    let long_new: String = (0..500).map(|i| format!("x{i}\n")).collect();
    a.write("long_old.txt", &long_old);
    a.write("long_new.txt", &long_new);
    let cut = a
        .ok(
            "diff",
            json!({"path": "long_old.txt", "other_path": "long_new.txt", "lines_max": 50}),
        )
        .await;
    assert_eq!(cut["truncated"], true);
    assert_eq!(cut["diff"].as_str().unwrap().lines().count(), 50);
    let bad = a.err("diff", json!({"path": "old.txt"})).await;
    assert_eq!(bad["code"], "tool_arguments_invalid");
    let played = a.playback();
    assert!(played.mismatches.is_empty(), "{:?}", played.mismatches);
    assert!(
        played.not_reproducible.is_empty(),
        "{:?}",
        played.not_reproducible
    );
    assert_eq!(played.reproduced, 5, "four diffs and one coded failure");
}

#[tokio::test]
async fn a_denied_side_is_refused_before_either_file_is_read() {
    let (_dir, base) = base();
    let a = aido(&base).await;
    a.write("ok.txt", "public\n");
    a.write(".env", "API_KEY=very-secret-value\n");
    std::fs::write(base.join("outside.txt"), "outside-the-walls\n").unwrap();
    let denied = a
        .err("diff", json!({"path": "ok.txt", "other_path": ".env"}))
        .await;
    assert_eq!(denied["code"], "path_denied_by_pattern");
    let outside = a
        .err(
            "diff",
            json!({"path": "ok.txt", "other_path": base.join("outside.txt").display().to_string()}),
        )
        .await;
    assert_eq!(outside["code"], "path_outside_walls");
    // Nothing of either file reached the journal: neither the denied one nor the allowed one.
    let inputs = a.recorded_inputs();
    assert!(!inputs.contains("very-secret-value") && !inputs.contains("outside-the-walls"));
    assert!(
        !inputs.contains("\"input\":\"file\""),
        "nothing was read: {inputs}"
    );
}

#[tokio::test]
async fn render_template_inline_and_from_a_file_with_includes_and_playback_reproduces_them() {
    let (_dir, base) = base();
    let a = aido(&base).await;
    a.write("tpl/page.j2", "{% include 'parts/head.j2' %}|{{ body }}|{% import 'parts/m.j2' as m %}{{ m.shout('hi') }}\n");
    a.write("tpl/parts/head.j2", "HEAD {{ title }}");
    a.write(
        "tpl/parts/m.j2",
        "{% macro shout(x) %}{{ x | upper }}!{% endmacro %}",
    );
    let page = a
        .ok(
            "render_template",
            json!({"path": "tpl/page.j2", "context": {"title": "T", "body": "B"}}),
        )
        .await;
    assert_eq!(page["rendered"], "HEAD T|B|HI!");
    assert_eq!(page["loaded"].as_array().unwrap().len(), 2);
    let inline = a
        .ok(
            "render_template",
            json!({"template": "{% for x in xs %}{{ x }},{% endfor %}", "context": {"xs": [1, 2, 3]}}),
        )
        .await;
    assert_eq!(inline["rendered"], "1,2,3,");
    let fuel = a
        .err(
            "render_template",
            json!({"template": "{% for a in range(100000) %}{% for b in range(100000) %}{{ a }}{% endfor %}{% endfor %}",
                   "output_bytes_max": 1048576}),
        )
        .await;
    assert_eq!(fuel["code"], "template_fuel_exhausted");
    let syntax = a
        .err("render_template", json!({"template": "ok\n{{ broken("}))
        .await;
    assert_eq!(syntax["code"], "template_syntax_error");
    assert_eq!(syntax["details"]["line"], 2);
    let big = a
        .err(
            "render_template",
            json!({"template": "{% for i in range(5000) %}0123456789{% endfor %}", "output_bytes_max": 1000}),
        )
        .await;
    assert_eq!(big["code"], "template_output_too_large");
    let strict = a
        .err(
            "render_template",
            json!({"template": "{{ nope }}", "strict": true}),
        )
        .await;
    assert_eq!(strict["code"], "template_undefined");
    // The runtime serves on after all of that.
    let again = a
        .ok("render_template", json!({"template": "still {{ 1 + 1 }}"}))
        .await;
    assert_eq!(again["rendered"], "still 2");
    // Playback renders from the journal, not the disk: change and remove the files it read.
    std::fs::write(a.project.join("tpl/parts/head.j2"), "CHANGED").unwrap();
    std::fs::remove_file(a.project.join("tpl/page.j2")).unwrap();
    let played = a.playback();
    assert!(played.mismatches.is_empty(), "{:?}", played.mismatches);
    assert!(
        played.not_reproducible.is_empty(),
        "{:?}",
        played.not_reproducible
    );
    assert_eq!(played.reproduced, 7);
}

#[tokio::test]
async fn an_include_outside_the_walls_or_denied_is_refused_and_not_read() {
    let (_dir, base) = base();
    let a = aido(&base).await;
    std::fs::write(base.join("outside.txt"), "outside-the-walls\n").unwrap();
    a.write(".env", "TOKEN=very-secret-value\n");
    let outside = a
        .err(
            "render_template",
            json!({"template": "{% include '../../outside.txt' %}"}),
        )
        .await;
    assert_eq!(outside["code"], "template_include_refused");
    assert_eq!(outside["details"]["refused"], "path_outside_walls");
    let denied = a
        .err(
            "render_template",
            json!({"template": "x{% include '.env' %}"}),
        )
        .await;
    assert_eq!(denied["code"], "template_include_refused");
    assert_eq!(denied["details"]["refused"], "path_denied_by_pattern");
    // A symlink inside the walls that leads out of them is judged where it leads.
    std::os::unix::fs::symlink(&base, a.project.join("escape")).unwrap();
    let linked = a
        .err(
            "render_template",
            json!({"template": "{% include 'escape/outside.txt' %}"}),
        )
        .await;
    assert_eq!(linked["details"]["refused"], "path_outside_walls");
    let inputs = a.recorded_inputs();
    assert!(!inputs.contains("very-secret-value") && !inputs.contains("outside-the-walls"));
    // A template file that is itself denied never runs.
    let file = a.err("render_template", json!({"path": ".env"})).await;
    assert_eq!(file["code"], "path_denied_by_pattern");
}

#[tokio::test]
#[allow(clippy::too_many_lines)]
async fn read_logs_of_a_file_activity_and_aidos_log_redacted_filtered_and_played_back() {
    let (_dir, base) = base();
    let a = aido(&base).await;
    let log = "\
2026-12-01T10:00:00Z INFO start
2026-12-01T11:00:00Z WARN retry with API_KEY=sk-abcdefghijklmnopqrstuvwx
2026-12-01T12:00:00Z ERROR connect failed password=hunter2
2026-12-01T13:00:00Z INFO done
";
    a.write("app.log", log);
    let all = a
        .ok("read_logs", json!({"source": "file", "path": "app.log"}))
        .await;
    assert_eq!(all["returned"], 4);
    let text = all["lines"].to_string();
    assert!(
        !text.contains("hunter2") && !text.contains("sk-abcdef"),
        "{text}"
    );
    assert_eq!(all["redacted"], 2);
    // grep runs on the redacted text: a secret cannot be probed by a pattern.
    let probe = a
        .ok(
            "read_logs",
            json!({"source": "file", "path": "app.log", "grep": "hunter"}),
        )
        .await;
    assert_eq!(probe["matched"], 0);
    let since = a
        .ok(
            "read_logs",
            json!({"source": "file", "path": "app.log", "since": "2026-12-01T11:30:00Z", "grep": "(?i)error|info"}),
        )
        .await;
    assert_eq!(since["returned"], 2);
    let tail = a
        .ok(
            "read_logs",
            json!({"source": "file", "path": "app.log", "tail": 1}),
        )
        .await;
    assert_eq!(tail["lines"][0], "2026-12-01T13:00:00Z INFO done");
    assert_eq!(tail["truncated"], true);
    let denied = a
        .err("read_logs", json!({"source": "file", "path": ".env"}))
        .await;
    assert_eq!(denied["code"], "path_denied_by_pattern");
    let bad = a
        .err(
            "read_logs",
            json!({"source": "file", "path": "app.log", "grep": "(unclosed"}),
        )
        .await;
    assert_eq!(bad["code"], "logs_grep_invalid");
    // This session's activity: what ran and how it ended.
    let activity = a
        .ok("read_logs", json!({"source": "activity", "grep": "failed"}))
        .await;
    let lines: Vec<&str> = activity["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("failed read_logs") && l.contains("code=logs_grep_invalid")),
        "{lines:?}"
    );
    // Another session's activity, by its id.
    let other = a.runtime.open_session(Some("other".into())).await.unwrap();
    let diff = Action::from_tool_call("diff", json!({"path": "app.log", "text": ""})).unwrap();
    other.run(diff, Hooks::default()).await.unwrap();
    let theirs = a
        .ok(
            "read_logs",
            json!({"source": "activity", "session": other.id().to_string()}),
        )
        .await;
    assert_eq!(theirs["path"], format!("journal:{}", other.id()));
    let theirs = theirs["lines"].to_string();
    assert!(
        theirs.contains("completed diff") && !theirs.contains("read_logs"),
        "{theirs}"
    );
    // aido's own log (none written by this in-process runtime yet: empty, not an error).
    std::fs::create_dir_all(a.aido_home.join("logs")).unwrap();
    std::fs::write(
        a.aido_home.join("logs/aido.log"),
        "2026-12-01T10:00:00.000000Z  WARN aido: body restarted token=abcdef123456\n",
    )
    .unwrap();
    let own = a.ok("read_logs", json!({})).await;
    assert_eq!(own["returned"], 1);
    assert!(!own["lines"][0].as_str().unwrap().contains("abcdef123456"));
    let played = a.playback();
    assert!(played.mismatches.is_empty(), "{:?}", played.mismatches);
    assert!(
        played.not_reproducible.is_empty(),
        "{:?}",
        played.not_reproducible
    );
    assert_eq!(
        played.reproduced, 8,
        "four file reads, the grep failure, two activities and aido's log; the denial ran nothing"
    );
    let inputs = a.recorded_inputs();
    assert!(
        !inputs.contains("hunter2"),
        "the journal holds only the redacted lines"
    );
}
