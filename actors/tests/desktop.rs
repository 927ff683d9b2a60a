//! The desktop body through a real runtime on the X11 lane: an owned Xvfb + openbox session
//! with real xterms and dunst, driven by the desktop primitives as an agent calls them; the
//! gates (desktop.enabled, deny rules, terminals judged as run_command, refused chords); and
//! playback reproducing every desktop result, screenshots included, from the journal alone.
//! When the lane cannot start it says why (and fails under CI=true, where .ci/run installs
//! it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aido_actions::Action;
use aido_actors::{Hooks, Runtime, Session};
use aido_desktop::session::installed;
use serde_json::{Value, json};

struct Aido {
    runtime: Runtime,
    session: Session,
}

fn lane_ready() -> bool {
    let missing: Vec<&str> = ["Xvfb", "openbox", "dbus-daemon", "xterm", "dunst"]
        .into_iter()
        .filter(|p| !installed(p))
        .collect();
    if missing.is_empty() {
        return true;
    }
    eprintln!(
        "X11 lane cannot start: {} not installed",
        missing.join(", ")
    );
    assert!(std::env::var("CI").is_err(), "CI must have the X11 lane");
    false
}

async fn aido(base: &Path, config: &str) -> Aido {
    let home = base.join("home");
    std::fs::create_dir_all(home.join("project")).unwrap();
    let aido_home = base.join("aido");
    let text = format!("workdir = \"{}\"\n{config}", home.join("project").display());
    let runtime = common::runtime(&text, &home, &aido_home, &aido_home.join("journal")).await;
    let session = runtime.open_session(Some("a".into())).await.unwrap();
    Aido { runtime, session }
}

fn base() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    (dir, base)
}

impl Aido {
    async fn run(&self, primitive: &str, args: Value) -> Result<aido_actors::Ran, String> {
        let action = Action::from_tool_call(primitive, args).unwrap();
        self.session
            .run(action, Hooks::default())
            .await
            .map_err(|e| e.failure.code)
    }

    async fn ok(&self, primitive: &str, args: Value) -> Value {
        match self.run(primitive, args).await {
            Ok(ran) => ran.outcome.output,
            Err(code) => panic!("{primitive} failed: {code}"),
        }
    }

    async fn err(&self, primitive: &str, args: Value) -> String {
        match self.run(primitive, args).await {
            Ok(ran) => panic!("{primitive} should fail but gave {}", ran.outcome.output),
            Err(code) => code,
        }
    }

    /// Poll get_window_tree until a window of this class is there.
    async fn window(&self, class: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let tree = self.ok("get_window_tree", json!({})).await;
            if let Some(w) = tree["windows"]
                .as_array()
                .unwrap()
                .iter()
                .find(|w| w["class"] == class)
            {
                return w.clone();
            }
            assert!(Instant::now() < deadline, "no {class} window: {tree}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn playback(&self) -> aido_replay::playback::Playback {
        let journal = self.runtime.journal();
        let records = journal.all_records(self.session.id()).unwrap();
        aido_replay::playback::playback(journal, &records)
    }
}

fn config(extra: &str) -> String {
    format!(
        r#"
[desktop]
enabled = true
autostart = [
  ["dunst"],
  ["xterm", "-fa", "DejaVu Sans Mono", "-fs", "14", "-class", "Secret", "-title", "vault", "-geometry", "30x6+990+560"],
  ["xterm", "-fa", "DejaVu Sans Mono", "-fs", "14", "-geometry", "80x20+0+0"],
]
deny = [{{ class = "Secret" }}]
{extra}
"#
    )
}

#[tokio::test]
async fn desktop_primitives_are_off_unless_enabled() {
    let (_dir, base) = base();
    let a = aido(&base, "").await;
    for (primitive, args) in [
        ("screenshot", json!({})),
        ("get_clipboard", json!({})),
        ("type_text", json!({"text": "x"})),
        ("send_notification", json!({"summary": "s"})),
        ("find_text", json!({"text": "x"})),
        ("click_text", json!({"text": "x"})),
    ] {
        assert_eq!(
            a.err(primitive, args).await,
            "desktop_disabled",
            "{primitive}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
async fn an_agent_drives_the_owned_desktop_and_playback_reproduces_it() {
    if !lane_ready() {
        return;
    }
    let (_dir, base) = base();
    let a = aido(&base, &config("")).await;
    let term = a.window("XTerm").await;
    let secret = a.window("Secret").await;
    let focused = a.ok("focus_window", json!({"window": term["id"]})).await;
    assert_eq!(focused["window"]["id"], term["id"]);
    let got = a.ok("get_focused_window", json!({})).await;
    assert_eq!(got["window"]["id"], term["id"]);
    assert_eq!(got["backend"], "x11");

    // A command typed into the terminal runs (judged as run_command first).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = base.join("home/project/typed.txt");
    let typed = a
        .ok(
            "type_text",
            json!({"text": format!("echo aido-e2e > {}", out.display())}),
        )
        .await;
    assert_eq!(typed["terminal"], true);
    assert_eq!(typed["focused"]["id"], term["id"]);
    // The journal's answer holds the text's hash and length, not the text.
    assert!(typed["args"]["blake3"].is_string());
    assert!(!typed.to_string().contains("aido-e2e"));
    a.ok("press_key", json!({"key": "Return"})).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(&out).map_or(true, |s| s != "aido-e2e\n") {
        assert!(Instant::now() < deadline, "the typed command wrote no file");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The screenshot comes back as an image, the denied window blacked out.
    let shot = a.run("screenshot", json!({})).await.unwrap();
    assert_eq!(shot.outcome.images.len(), 1);
    assert_eq!(shot.outcome.images[0].mime, "image/png");
    let blacked = shot.outcome.output["blacked_out"].as_array().unwrap();
    assert_eq!(blacked.len(), 1);
    assert_eq!(blacked[0]["id"], secret["id"]);
    assert!(!blacked[0]["title"].as_str().unwrap().contains("vault"));

    // Gates: the denied app, the VT switch, a point off the screen.
    assert_eq!(
        a.err("focus_window", json!({"window": secret["id"]})).await,
        "desktop_window_denied"
    );
    let (sx, sy) = (
        secret["rect"]["x"].as_i64().unwrap() + 10,
        secret["rect"]["y"].as_i64().unwrap() + 10,
    );
    assert_eq!(
        a.err("click", json!({"x": sx, "y": sy})).await,
        "desktop_window_denied"
    );
    assert_eq!(
        a.err("press_key", json!({"key": "ctrl+alt+F1"})).await,
        "desktop_chord_refused"
    );
    assert_eq!(
        a.err("move_mouse", json!({"x": 99999, "y": 0})).await,
        "desktop_point_outside"
    );

    // The clipboard round trip, and the cap.
    a.ok("set_clipboard", json!({"text": "copied by aido"}))
        .await;
    let clip = a.ok("get_clipboard", json!({})).await;
    assert_eq!(clip["text"], "copied by aido");
    assert_eq!(
        a.err("set_clipboard", json!({"text": "x".repeat(70_000)}))
            .await,
        "desktop_too_large"
    );

    // A notification reaches dunst (the owned session's bus).
    let deadline = Instant::now() + Duration::from_secs(10);
    let shown = loop {
        match a
            .run(
                "send_notification",
                json!({"summary": "aido", "body": "done"}),
            )
            .await
        {
            Ok(ran) => break ran.outcome.output,
            Err(code) if Instant::now() < deadline => {
                assert_eq!(code, "desktop_notify_failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(code) => panic!("no notification server: {code}"),
        }
    };
    assert!(shown["id"].as_u64().unwrap() > 0);
    assert_eq!(shown["server"]["name"], "dunst");

    // The pointer primitives reach the allowed terminal.
    a.ok("move_mouse", json!({"x": 50, "y": 50})).await;
    a.ok(
        "scroll",
        json!({"x": 50, "y": 50, "direction": "down", "clicks": 2}),
    )
    .await;
    a.ok("double_click", json!({"x": 50, "y": 50})).await;
    a.ok("press_key_combination", json!({"keys": ["ctrl", "e"]}))
        .await;

    // Every desktop result, screenshot and failures included, is reproduced from the journal.
    let played = a.playback();
    assert!(played.mismatches.is_empty(), "{:?}", played.mismatches);
    assert!(
        played.not_reproducible.is_empty(),
        "{:?}",
        played.not_reproducible
    );
    assert!(played.reproduced >= 20, "{}", played.reproduced);
}

/// What is typed into a terminal is a command: with run_command off, typing into xterm is
/// refused and nothing reaches it, while a screenshot still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_into_a_terminal_is_judged_as_run_command() {
    if !lane_ready() {
        return;
    }
    let (_dir, base) = base();
    let a = aido(
        &base,
        &config("[actions]\nenabled = { run_command = false }"),
    )
    .await;
    // Both autostarted terminals mapped first: one mapped after the focus would take it.
    a.window("Secret").await;
    let term = a.window("XTerm").await;
    a.ok("focus_window", json!({"window": term["id"]})).await;
    assert_eq!(
        a.err("type_text", json!({"text": "rm -rf ~"})).await,
        "desktop_terminal_input_denied"
    );
    assert_eq!(
        a.err("press_key", json!({"key": "Return"})).await,
        "desktop_terminal_input_denied"
    );
    a.ok("screenshot", json!({})).await;
}
