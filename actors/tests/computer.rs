//! Anthropic's computer-use tools on the desktop body, on the X11 lane: an owned Xvfb +
//! openbox session (1280x800) whose screenshots the agent gets at 640x400 (`[computer]`), a
//! real X client (`tests/e2e/x11_probe.py`, a tk window that writes down every X event it
//! receives, in root coordinates) and a real xterm. Every member of
//! `computer_toolset_20260801` is run and its outcome checked where it landed: the probe's
//! events (a click at a screenshot coordinate lands on the real pixel it shows), the file a
//! command typed into xterm writes, the size of the images. Batches stop at the first failure;
//! the desktop's gates hold; playback reproduces every result from the journal alone. When
//! the lane cannot start it says why (and fails under CI=true, where .ci/run installs it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aido_actions::Action;
use aido_actors::{Hooks, Runtime, Session};
use aido_desktop::session::installed;
use base64::Engine as _;
use serde_json::{Value, json};

const PROBE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/e2e/x11_probe.py");

struct Aido {
    runtime: Runtime,
    session: Session,
    log: PathBuf,
}

fn lane_ready() -> bool {
    let missing: Vec<&str> = ["Xvfb", "openbox", "dbus-daemon", "xterm", "python3"]
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

async fn aido(base: &Path, extra: &str) -> Aido {
    let home = base.join("home");
    std::fs::create_dir_all(home.join("project")).unwrap();
    let log = base.join("probe.log");
    let aido_home = base.join("aido");
    let text = format!(
        r#"workdir = "{}"
[desktop]
enabled = true
autostart = [
  ["python3", "{PROBE}", "{}", "600x400+0+0"],
  ["xterm", "-fa", "DejaVu Sans Mono", "-fs", "14", "-geometry", "60x10+700+0"],
  ["xterm", "-class", "Secret", "-geometry", "20x4+700+600"],
]
deny = [{{ class = "Secret" }}]
[computer]
width = 640
height = 400
{extra}
"#,
        home.join("project").display(),
        log.display(),
    );
    let runtime = common::runtime(&text, &home, &aido_home, &aido_home.join("journal")).await;
    let session = runtime.open_session(Some("a".into())).await.unwrap();
    Aido {
        runtime,
        session,
        log,
    }
}

fn png_size(image: &aido_actions::Image) -> (u32, u32) {
    let png = base64::engine::general_purpose::STANDARD
        .decode(&image.base64)
        .unwrap();
    let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(png[20..24].try_into().unwrap());
    (w, h)
}

impl Aido {
    async fn run(&self, primitive: &str, args: Value) -> Result<aido_actors::Ran, String> {
        let action = Action::from_tool_call(primitive, args).unwrap();
        self.session
            .run(action, Hooks::default())
            .await
            .map_err(|e| e.failure.code)
    }

    async fn ok(&self, primitive: &str, args: Value) -> aido_actors::Ran {
        match self.run(primitive, args).await {
            Ok(ran) => ran,
            Err(code) => panic!("{primitive} failed: {code}"),
        }
    }

    /// Run a toolset batch of `(name, input)` members; every member must succeed.
    async fn batch(&self, members: &[(&str, Value)]) -> aido_actors::Ran {
        let actions: Vec<Value> = members
            .iter()
            .enumerate()
            .map(|(i, (name, input))| json!({"id": format!("toolu_{i}"), "name": name, "input": input}))
            .collect();
        let ran = self
            .ok(
                "desktop_computer_toolset",
                json!({"version": "computer_toolset_20260801", "actions": actions}),
            )
            .await;
        assert!(
            ran.outcome.output["failed_at"].is_null(),
            "{}",
            ran.outcome.text
        );
        ran
    }

    /// The probe's log lines (after `from` lines), once `want` holds for them.
    async fn events(&self, from: usize, want: impl Fn(&[String]) -> bool) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let lines: Vec<String> = std::fs::read_to_string(&self.log)
                .unwrap_or_default()
                .lines()
                .skip(from)
                .map(str::to_owned)
                .collect();
            if want(&lines) {
                return lines;
            }
            assert!(Instant::now() < deadline, "the probe saw only {lines:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn seen(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .count()
    }

    async fn window(&self, class: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let tree = self.ok("get_window_tree", json!({})).await.outcome.output;
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
}

fn base() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    (dir, base)
}

fn has(lines: &[String], prefix: &str) -> bool {
    lines.iter().any(|l| l.starts_with(prefix))
}

fn count(lines: &[String], prefix: &str) -> usize {
    lines.iter().filter(|l| l.starts_with(prefix)).count()
}

/// Every toolset member, on the desktop, with its real outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
async fn every_toolset_member_lands_where_the_agent_pointed() {
    if !lane_ready() {
        return;
    }
    let (_dir, base) = base();
    let a = aido(&base, "").await;
    a.window("Probe").await;
    let term = a.window("XTerm").await;
    a.events(0, |l| has(l, "ready")).await;

    // screenshot: at the agent's size; cursor_position and mouse_move in its pixels, the
    // probe seeing the motion at the real pixel the screenshot pixel shows (x2 + 1).
    let ran = a
        .batch(&[
            ("screenshot", json!({})),
            ("mouse_move", json!({"coordinate": [100, 60]})),
            ("cursor_position", json!({})),
        ])
        .await;
    assert_eq!(ran.outcome.images.len(), 1);
    assert_eq!(png_size(&ran.outcome.images[0]), (640, 400));
    let results = ran.outcome.output["results"].as_array().unwrap().clone();
    assert_eq!(results[0]["images"], json!([0]));
    assert_eq!(results[1]["text"], "Moved the mouse.");
    assert_eq!(results[2]["text"], "X=100,Y=60");
    assert_eq!(ran.outcome.output["screen"], json!([1280, 800]));
    assert_eq!(ran.outcome.output["screenshot_size"], json!([640, 400]));
    a.events(0, |l| l.iter().any(|e| e.starts_with("motion 201 121 ")))
        .await;

    // left_click with shift held; right, middle, double and triple clicks.
    let from = a.seen();
    a.batch(&[
        (
            "left_click",
            json!({"coordinate": [50, 40], "text": "shift"}),
        ),
        ("right_click", json!({"coordinate": [60, 40]})),
        ("middle_click", json!({"coordinate": [70, 40]})),
        ("double_click", json!({"coordinate": [80, 40]})),
        ("triple_click", json!({"coordinate": [90, 40]})),
    ])
    .await;
    let lines = a.events(from, |l| count(l, "release") >= 8).await;
    let shifted = lines
        .iter()
        .find(|l| l.starts_with("press 1 101 81 "))
        .expect("the left click at the real pixel");
    let state: u32 = shifted.rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(state & 1, 1, "shift was held during the click: {shifted}");
    assert!(has(&lines, "press 3 121 81 "), "{lines:?}");
    assert!(has(&lines, "press 2 141 81 "), "{lines:?}");
    assert_eq!(count(&lines, "press 1 161 81 "), 2, "{lines:?}");
    assert_eq!(count(&lines, "press 1 181 81 "), 3, "{lines:?}");

    // left_mouse_down, a move with the button held, left_mouse_up; then left_click_drag.
    let from = a.seen();
    a.batch(&[
        ("mouse_move", json!({"coordinate": [20, 20]})),
        ("left_mouse_down", json!({})),
        ("mouse_move", json!({"coordinate": [30, 30]})),
        ("left_mouse_up", json!({})),
        (
            "left_click_drag",
            json!({"start_coordinate": [40, 100], "coordinate": [140, 150]}),
        ),
    ])
    .await;
    let lines = a.events(from, |l| count(l, "release 1") >= 2).await;
    let at = |p: &str| lines.iter().position(|l| l.starts_with(p));
    let down = at("press 1 41 41 ").expect("left_mouse_down");
    let held = at("motion 61 61 ").expect("the move with the button held");
    let up = at("release 1 61 61 ").expect("left_mouse_up");
    assert!(down < held && held < up, "{lines:?}");
    let state: u32 = lines[held].rsplit(' ').next().unwrap().parse().unwrap();
    assert_ne!(state & 256, 0, "button 1 held during the move");
    let start = at("press 1 81 201 ").expect("the drag's start");
    let end = at("release 1 281 301 ").expect("the drag's end");
    assert!(start < end);

    // scroll: three wheel clicks down, then one up, at a point of the probe.
    let from = a.seen();
    a.batch(&[
        (
            "scroll",
            json!({"coordinate": [100, 100], "scroll_direction": "down", "scroll_amount": 3}),
        ),
        (
            "scroll",
            json!({"coordinate": [100, 100], "scroll_direction": "up", "scroll_amount": 1}),
        ),
    ])
    .await;
    let lines = a
        .events(from, |l| {
            count(l, "press 5 201 201") >= 3 && has(l, "press 4 201 201")
        })
        .await;
    assert_eq!(count(&lines, "press 5 "), 3, "{lines:?}");

    // key with repeat, and hold_key for half a second, into the focused probe.
    let from = a.seen();
    a.batch(&[
        ("left_click", json!({"coordinate": [200, 150]})),
        ("key", json!({"text": "a", "repeat": 2})),
        ("hold_key", json!({"text": "shift", "duration": 0.5})),
        ("wait", json!({"duration": 0.2})),
    ])
    .await;
    let lines = a
        .events(from, |l| count(l, "key a ") >= 2 && has(l, "keyup Shift_L"))
        .await;
    let time = |l: &str| -> f64 { l.rsplit(' ').next().unwrap().parse().unwrap() };
    let pressed = lines.iter().find(|l| l.starts_with("key Shift_L")).unwrap();
    let released = lines
        .iter()
        .find(|l| l.starts_with("keyup Shift_L"))
        .unwrap();
    let held = time(released) - time(pressed);
    assert!((0.4..2.0).contains(&held), "shift held {held}s");

    // type: into the xterm, where it is a command (judged as run_command), which writes a file.
    let out = base.join("home/project/typed.txt");
    let tx = term["rect"]["x"].as_u64().unwrap() / 2 + 20;
    let ty = term["rect"]["y"].as_u64().unwrap() / 2 + 20;
    let ran = a
        .batch(&[
            ("left_click", json!({"coordinate": [tx, ty]})),
            (
                "type",
                json!({"text": format!("echo from-toolset > {}\n", out.display())}),
            ),
        ])
        .await;
    assert_eq!(ran.outcome.output["results"][1]["target"]["terminal"], true);
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(&out).map_or(true, |s| s != "from-toolset\n") {
        assert!(Instant::now() < deadline, "the typed command wrote no file");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // zoom: a 64x40 region of the screenshot is 128x80 real pixels, scaled up to fill the
    // image budget (1568 px long edge, 1.15 MP).
    let ran = a
        .batch(&[("zoom", json!({"region": [0, 0, 64, 40]}))])
        .await;
    assert_eq!(png_size(&ran.outcome.images[0]), (1356, 847));

    // A batch stops at its first failure: the point outside the screenshot is refused, the
    // click after it never runs.
    let from = a.seen();
    let ran = a
        .ok(
            "desktop_computer_toolset",
            json!({"actions": [
                {"id": "toolu_a", "name": "mouse_move", "input": {"coordinate": [700, 10]}},
                {"id": "toolu_b", "name": "left_click", "input": {"coordinate": [10, 10]}},
            ]}),
        )
        .await;
    let results = ran.outcome.output["results"].as_array().unwrap();
    assert_eq!(ran.outcome.output["failed_at"], 0);
    assert_eq!(results[0]["code"], "computer_point_outside");
    assert_eq!(results[1]["code"], "computer_not_executed");
    assert_eq!(
        results[1]["text"],
        "Not executed: an earlier computer action in this turn failed."
    );
    assert_eq!(results[1]["id"], "toolu_b");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!has(&a.events(from, |_| true).await, "press 1 21 21 "));

    // The desktop's gates hold: the deny-listed window is refused, a VT switch is refused.
    let secret = a.window("Secret").await;
    let sx = secret["rect"]["x"].as_u64().unwrap() / 2 + 5;
    let sy = secret["rect"]["y"].as_u64().unwrap() / 2 + 5;
    let ran = a
        .ok(
            "desktop_computer_toolset",
            json!({"actions": [
                {"name": "left_click", "input": {"coordinate": [sx, sy]}},
            ]}),
        )
        .await;
    assert_eq!(
        ran.outcome.output["results"][0]["code"],
        "desktop_window_denied"
    );
    let ran = a
        .ok(
            "desktop_computer_toolset",
            json!({"actions": [{"name": "key", "input": {"text": "ctrl+alt+F1"}}]}),
        )
        .await;
    assert_eq!(
        ran.outcome.output["results"][0]["code"],
        "desktop_chord_refused"
    );
    // A malformed batch fails whole, before anything runs.
    assert_eq!(
        a.run("desktop_computer_toolset", json!({"actions": []}))
            .await
            .unwrap_err(),
        "computer_batch_empty"
    );

    // The legacy tool: a screenshot at the agent's size follows the action.
    let ran = a
        .ok(
            "desktop_computer",
            json!({"action": "left_click", "coordinate": [200, 150]}),
        )
        .await;
    assert_eq!(ran.outcome.text, "Clicked.");
    assert_eq!(ran.outcome.images.len(), 1);
    assert_eq!(png_size(&ran.outcome.images[0]), (640, 400));
    assert_eq!(
        a.run(
            "desktop_computer",
            json!({"action": "left_click_drag", "coordinate": [5, 5]})
        )
        .await
        .unwrap_err(),
        "computer_input_missing"
    );

    // Every result, screenshots, zooms and failures included, is reproduced from the journal.
    let journal = a.runtime.journal();
    let records = journal.all_records(a.session.id()).unwrap();
    let played = aido_replay::playback::playback(journal, &records);
    assert!(played.mismatches.is_empty(), "{:?}", played.mismatches);
    assert!(
        played.not_reproducible.is_empty(),
        "{:?}",
        played.not_reproducible
    );
    assert!(played.reproduced >= 14, "{}", played.reproduced);
}
