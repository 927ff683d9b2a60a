//! The Wayland lane against real programs: an owned headless sway (wlroots), real foot
//! terminals, wl-copy / wl-paste, mako and tesseract. When the lane cannot start (sway or foot
//! missing) each test says why on stderr and fails under CI=true (where .ci/run installs
//! them); it never passes by skipping silently.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use aido_desktop::gate::{AppRule, Rules, TERMINALS_DEFAULT};
use aido_desktop::session::{Server, SessionOptions, installed};
use aido_desktop::{Button, Desktop, Limits, Options, SessionMode};

fn lane_ready(also: &[&str]) -> bool {
    let missing: Vec<&str> = ["sway", "dbus-daemon", "foot"]
        .iter()
        .chain(also)
        .copied()
        .filter(|p| !installed(p))
        .collect();
    if missing.is_empty() {
        return true;
    }
    eprintln!(
        "Wayland lane cannot start: {} not installed",
        missing.join(", ")
    );
    assert!(
        std::env::var("CI").is_err(),
        "CI must have the Wayland lane (.ci/run installs it)"
    );
    false
}

/// A foot terminal with this app_id and title, running `command` (or a shell).
fn foot(app_id: &str, title: &str, command: Option<&str>) -> Vec<String> {
    let mut argv: Vec<String> = [
        "env",
        "LC_ALL=C.UTF-8",
        "foot",
        "-o",
        "font=DejaVu Sans Mono:size=14",
        "-a",
        app_id,
        "-T",
        title,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    match command {
        Some(c) => argv.extend(["sh".to_owned(), "-c".into(), c.into()]),
        None => argv.push("sh".into()),
    }
    argv
}

fn open(autostart: Vec<Vec<String>>, rules: Rules) -> Desktop {
    Desktop::open(Options {
        session: SessionMode::Owned(SessionOptions {
            server: Server::Sway,
            autostart,
            ..SessionOptions::default()
        }),
        rules,
        limits: Limits::default(),
    })
    .expect("the owned sway session starts")
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn terminals() -> Vec<String> {
    TERMINALS_DEFAULT.iter().map(|s| (*s).to_owned()).collect()
}

fn in_session(desktop: &Desktop, program: &str) -> Command {
    let mut c = Command::new(program);
    c.env_remove("DISPLAY")
        .envs(desktop.session().unwrap().env());
    c
}

#[test]
fn doctor_probes_the_owned_sway() {
    if !lane_ready(&[]) {
        return;
    }
    let desktop = open(vec![], Rules::default());
    let caps = desktop.capabilities().clone();
    assert_eq!(caps.backend, "wlr");
    assert!(caps.input, "virtual pointer and keyboard are probed");
    assert!(caps.screenshot && caps.clipboard, "{caps:?}");
    assert!(
        caps.focus_by_wm && caps.client_list,
        "sway IPC found: {caps:?}"
    );
    assert!(
        caps.window_manager
            .as_deref()
            .unwrap()
            .starts_with("sway 1."),
        "{caps:?}"
    );
    for global in [
        "zwlr_virtual_pointer_manager_v1",
        "zwp_virtual_keyboard_manager_v1",
        "zwlr_screencopy_manager_v1",
        "zwlr_data_control_manager_v1",
    ] {
        assert!(
            caps.extensions.iter().any(|e| e.starts_with(global)),
            "{global} in {:?}",
            caps.extensions
        );
    }
    assert_eq!(caps.screen, [1280, 800]);
    let dir = desktop.session().unwrap().runtime_dir().to_owned();
    let mode = std::fs::metadata(&dir).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o700
    );
    let display = desktop.display().to_owned();
    assert!(
        aido_desktop::doctor(&display).is_ok_and(|c| c.backend == "wlr"),
        "probing the socket picks the wlr backend"
    );
    drop(desktop);
    assert!(!dir.exists(), "the runtime dir is removed");
    assert_eq!(
        aido_desktop::doctor(&display).unwrap_err().code(),
        "desktop_connect_failed",
        "the owned sway is stopped with the session"
    );
}

/// A command typed into a real foot runs (the file appears), its text is on the screen (OCR
/// finds it), and Unicode arrives intact through the generated keymap.
#[test]
fn typing_into_foot_runs_the_command_and_ocr_reads_it() {
    if !lane_ready(&[]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let mut desktop = open(
        vec![foot("foot", "shell", None)],
        Rules::new(&[], &[], &terminals()).unwrap(),
    );
    let term = desktop.wait_for_window("foot", 10_000).unwrap();
    desktop.focus(term.id).unwrap();
    let target = desktop.key_target().unwrap();
    assert!(target.terminal, "foot is classified as a terminal");
    // Wait until the terminal's shell reads what is typed (on a loaded machine it can take
    // seconds to start): type a command that leaves a file, again each second, until it does.
    let ready = dir.path().join("ready");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready.exists() {
        assert!(
            Instant::now() < deadline,
            "foot's shell never ran a typed command"
        );
        desktop
            .type_text(&format!(": > {}\n", ready.display()), None)
            .unwrap();
        let until = Instant::now() + Duration::from_secs(1);
        while !ready.exists() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let token = "aido-w4yl";
    let command = format!("echo {token} héllo € Ωk > {}", out.display());
    let done = desktop.type_text(&command, None).unwrap();
    assert_eq!(done.events, command.chars().count() * 2);
    desktop.press_key("Return", 1, None).unwrap();
    wait_until(
        "the file written by the typed command",
        Duration::from_secs(15),
        || std::fs::read_to_string(&out).is_ok_and(|s| s.ends_with('\n')),
    );
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        format!("{token} héllo € Ωk\n")
    );
    // A chord with a modifier: ctrl+u erases the line typed so far, so only `echo ok` runs.
    let second = dir.path().join("second.txt");
    desktop.type_text("echo wrong", None).unwrap();
    desktop.press_key("ctrl+u", 1, None).unwrap();
    desktop
        .type_text(&format!("echo ok > {}\n", second.display()), None)
        .unwrap();
    wait_until("the second command", Duration::from_secs(15), || {
        std::fs::read_to_string(&second).is_ok_and(|s| s == "ok\n")
    });
    assert_eq!(desktop.held(), 0, "nothing is left held");

    let shot = desktop.screenshot().unwrap();
    assert_eq!(shot.size, [1280, 800]);
    let ocr = aido_vm::ocr::Ocr::start().unwrap();
    let words = ocr.words(&shot.png).unwrap();
    let found = aido_vm::ocr::find(&words, token);
    assert!(
        !found.is_empty(),
        "OCR finds {token}: {:?}",
        words.iter().map(|w| &w.text).collect::<Vec<_>>()
    );
    assert!(
        term.rect
            .contains(found[0].center[0] as i32, found[0].center[1] as i32)
    );
    // grim (the same protocol, another client) sees the same screen size.
    if installed("grim") {
        let grim = in_session(&desktop, "grim").arg("-").output().unwrap();
        assert!(grim.status.success(), "{grim:?}");
        let image = image::load_from_memory(&grim.stdout).unwrap();
        assert_eq!((image.width(), image.height()), (1280, 800));
    }
}

#[test]
fn clipboard_round_trips_with_wl_clipboard() {
    if !lane_ready(&["wl-copy", "wl-paste"]) {
        return;
    }
    let mut desktop = open(vec![], Rules::default());
    assert_eq!(
        desktop.clipboard_get().unwrap_err().code(),
        "desktop_clipboard_empty"
    );
    // aido → wl-paste.
    let text = "from aido: ünïcode ✓ line\nsecond";
    desktop.clipboard_set(text).unwrap();
    let read = in_session(&desktop, "wl-paste")
        .arg("--no-newline")
        .output()
        .unwrap();
    assert!(read.status.success(), "{read:?}");
    assert_eq!(String::from_utf8(read.stdout).unwrap(), text);
    let primary = in_session(&desktop, "wl-paste")
        .args(["--primary", "--no-newline"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(primary.stdout).unwrap(), text);
    // aido reads back what it set (its own serving thread answers).
    assert_eq!(desktop.clipboard_get().unwrap(), text);
    // wl-copy → aido.
    let copied = in_session(&desktop, "wl-copy")
        .arg("from wl-copy ✓")
        .status()
        .unwrap();
    assert!(copied.success());
    wait_until(
        "wl-copy to own the clipboard",
        Duration::from_secs(15),
        || desktop.clipboard_get().is_ok_and(|t| t == "from wl-copy ✓"),
    );
    let huge = "x".repeat(desktop.limits().clipboard_bytes_max + 1);
    assert_eq!(
        desktop.clipboard_set(&huge).unwrap_err().code(),
        "desktop_too_large"
    );
    // Reading is capped too: a larger clipboard is refused, not truncated.
    let mut big = in_session(&desktop, "wl-copy")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    big.stdin
        .take()
        .unwrap()
        .write_all(huge.as_bytes())
        .unwrap();
    big.wait().unwrap();
    wait_until("the large clipboard", Duration::from_secs(15), || {
        desktop
            .clipboard_get()
            .is_err_and(|e| e.code() == "desktop_too_large")
    });
}

#[test]
fn notification_reaches_mako() {
    if !lane_ready(&["mako", "makoctl", "busctl"]) {
        return;
    }
    let desktop = open(vec![vec!["mako".into()]], Rules::default());
    let bus = desktop.bus().unwrap().to_owned();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let info = rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match aido_desktop::notify::server_info(&bus).await {
                Ok(info) => break info,
                Err(e) if Instant::now() > deadline => panic!("mako never answered: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    });
    assert_eq!(info.name, "mako");
    let id = rt
        .block_on(aido_desktop::notify::notify(
            &bus,
            "aido says",
            "build finished ✓",
            60_000,
        ))
        .unwrap();
    assert!(id > 0);
    let mut listed = String::new();
    wait_until("makoctl to list it", Duration::from_secs(15), || {
        let out = in_session(&desktop, "makoctl")
            .arg("list")
            .output()
            .unwrap();
        listed = String::from_utf8_lossy(&out.stdout).into_owned();
        listed.contains("aido says")
    });
    assert!(listed.contains("build finished ✓"), "{listed}");
    assert!(listed.contains("\"aido\""), "sent as app aido: {listed}");
}

#[test]
fn focus_one_of_two_windows_and_read_it_back() {
    if !lane_ready(&[]) {
        return;
    }
    let mut desktop = open(
        vec![
            foot("Left", "left", Some("sleep 600")),
            foot("Right", "right", Some("sleep 600")),
        ],
        Rules::default(),
    );
    let left = desktop.wait_for_window("Left", 10_000).unwrap();
    let right = desktop.wait_for_window("Right", 10_000).unwrap();
    // Both are mapped: the tiles settle once the second one is in.
    wait_until("both tiles", Duration::from_secs(15), || {
        let w = desktop.windows().unwrap();
        w.len() == 2 && w.iter().all(|w| w.rect.width < 1280)
    });
    let tree = desktop.windows().unwrap();
    let right = tree.iter().find(|w| w.id == right.id).unwrap().clone();
    for target in [&left, &right, &left] {
        let focused = desktop.focus(target.id).unwrap();
        assert_eq!(focused.id, target.id);
        let got = desktop.focused().unwrap().unwrap();
        assert_eq!(
            (got.id, got.class.as_str()),
            (target.id, target.class.as_str())
        );
        assert!(got.pid.is_some(), "sway names the pid");
    }
    let tree = desktop.windows().unwrap();
    assert_eq!(tree.iter().filter(|w| w.focused).count(), 1);
    assert!(tree.iter().any(|w| w.id == right.id && w.title == "right"));
    assert_eq!(
        desktop.focus(0x7fff_fff0).unwrap_err().code(),
        "desktop_window_missing"
    );
    // A click on the other window moves the focus there (the virtual pointer is real input).
    let (cx, cy) = (
        right.rect.x + right.rect.width as i32 / 2,
        right.rect.y + right.rect.height as i32 / 2,
    );
    desktop
        .click(cx.into(), cy.into(), Button::Left, 1)
        .unwrap();
    wait_until(
        "the click to focus the right window",
        Duration::from_secs(3),
        || desktop.focused().unwrap().is_some_and(|w| w.id == right.id),
    );
    assert_eq!(desktop.cursor().unwrap(), (cx, cy));
}

/// A denied app is refused (focus, clicks on it) and blacked out of screenshots, and its title
/// is hidden from the window tree.
#[test]
fn a_denied_app_is_refused_and_blacked_out() {
    if !lane_ready(&[]) {
        return;
    }
    let deny = [AppRule {
        class: Some("Secret".into()),
        title: None,
    }];
    let mut desktop = open(
        vec![
            foot(
                "Secret",
                "bank password",
                Some("echo SECRET-TEXT; sleep 600"),
            ),
            foot("Open", "open", Some("echo OPEN-TEXT; sleep 600")),
        ],
        Rules::new(&[], &deny, &[]).unwrap(),
    );
    desktop.wait_for_window("Secret", 10_000).unwrap();
    let open_window = desktop.wait_for_window("Open", 10_000).unwrap();
    wait_until("both tiles", Duration::from_secs(15), || {
        let w = desktop.windows().unwrap();
        w.len() == 2 && w.iter().all(|w| w.rect.width < 1280)
    });
    let tree = desktop.windows().unwrap();
    let secret = tree.iter().find(|w| w.class == "Secret").unwrap().clone();
    let open_window = tree
        .iter()
        .find(|w| w.id == open_window.id)
        .unwrap()
        .clone();
    assert!(!secret.title.contains("bank"), "the title is hidden");
    assert_eq!(
        desktop.focus(secret.id).unwrap_err().code(),
        "desktop_window_denied"
    );
    let (sx, sy) = (secret.rect.x + 40, secret.rect.y + 40);
    assert_eq!(
        desktop
            .click(sx.into(), sy.into(), Button::Left, 1)
            .unwrap_err()
            .code(),
        "desktop_window_denied"
    );
    desktop.focus(open_window.id).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let shot = desktop.screenshot().unwrap();
    assert_eq!(shot.blacked_out.len(), 1);
    assert_eq!(shot.blacked_out[0].id, secret.id);
    let image = image::load_from_memory(&shot.png).unwrap().to_rgb8();
    let r = secret.rect;
    let lit: Vec<(i32, i32)> = (r.y..r.y + r.height as i32)
        .flat_map(|y| (r.x..r.x + r.width as i32).map(move |x| (x, y)))
        .filter(|&(x, y)| image.get_pixel(x as u32, y as u32).0 != [0, 0, 0])
        .collect();
    assert!(
        lit.is_empty(),
        "every pixel of the denied window {r:?} is black (blacked out {:?}); lit: {} e.g. {:?}",
        shot.blacked_out[0].rect,
        lit.len(),
        &lit[..lit.len().min(5)]
    );
    let ocr = aido_vm::ocr::Ocr::start().unwrap();
    let words = ocr.words(&shot.png).unwrap();
    assert!(
        !aido_vm::ocr::find(&words, "OPEN-TEXT").is_empty(),
        "{words:?}"
    );
    assert!(
        aido_vm::ocr::find(&words, "SECRET-TEXT").is_empty(),
        "the secret is not readable"
    );
}
