//! The desktop body, per backend, on an owned headless session of each kind (Xvfb + openbox
//! for x11, sway for wlr), each with a real terminal (xterm, foot) running `cat`:
//!
//! - screenshot latency: `Desktop::screenshot` (the window list, the capture, the blackout,
//!   the PNG encode) beside the usual command-line tool on the same screen writing a PNG to
//!   stdout (`grim -` on sway, ImageMagick's `import -window root png:-` on Xvfb, or `scrot`);
//! - keypress to pixels: one character typed into the focused terminal until the terminal's
//!   pixels change (polled with the backend's capture, no encode), beside the same character
//!   sent by `wtype` / `xdotool type` and polled the same way.

use std::process::Command;
use std::time::{Duration, Instant};

use aido_desktop::session::{Server, SessionOptions, installed};
use aido_desktop::{Desktop, Limits, Options, SessionMode, gate::Rules};

/// Screenshots timed per tool and lane.
pub const SHOTS: usize = 20;
/// Keypresses timed per tool and lane.
pub const KEYS: usize = 15;
/// The longest a keypress may take to show.
const KEY_TIMEOUT: Duration = Duration::from_secs(3);

/// How the section ran, per lane.
pub enum DesktopSection {
    /// Not run, and why.
    Skipped(String),
    /// The lanes (each may have failed or been skipped on its own).
    Ran(Vec<(&'static str, Result<Lane, String>)>),
}

/// What one lane measured.
pub struct Lane {
    /// What the server called itself.
    pub server: String,
    /// The screen.
    pub screen: [u32; 2],
    /// Desktop::screenshot.
    pub shot: Vec<Duration>,
    /// The peer tool's name and its times (or why it did not run).
    pub peer_shot: Result<(String, Vec<Duration>), String>,
    /// type_text of one character until the pixels changed.
    pub key: Vec<Duration>,
    /// The peer tool's keypress (or why it did not run).
    pub peer_key: Result<(String, Vec<Duration>), String>,
}

/// Runs both lanes.
pub fn run() -> DesktopSection {
    if !installed("dbus-daemon") {
        return DesktopSection::Skipped("dbus-daemon is not installed".into());
    }
    let lanes = vec![
        (
            "wlr",
            lane(
                Server::Sway,
                &["sway", "foot"],
                vec![
                    "env".into(),
                    "LC_ALL=C.UTF-8".into(),
                    "foot".into(),
                    "-a".into(),
                    "bench".into(),
                    "cat".into(),
                ],
            ),
        ),
        (
            "x11",
            lane(
                Server::Xvfb,
                &["Xvfb", "openbox", "xterm"],
                vec![
                    "xterm".into(),
                    "-class".into(),
                    "bench".into(),
                    "-geometry".into(),
                    "80x24+0+0".into(),
                    "-e".into(),
                    "cat".into(),
                ],
            ),
        ),
    ];
    DesktopSection::Ran(lanes)
}

#[allow(clippy::too_many_lines)]
fn lane(server: Server, need: &[&str], terminal: Vec<String>) -> Result<Lane, String> {
    let missing: Vec<&str> = need.iter().copied().filter(|p| !installed(p)).collect();
    if !missing.is_empty() {
        return Err(format!("not run: {} not installed", missing.join(", ")));
    }
    let mut desktop = Desktop::open(Options {
        session: SessionMode::Owned(SessionOptions {
            server,
            autostart: vec![terminal],
            ..SessionOptions::default()
        }),
        rules: Rules::default(),
        limits: Limits::default(),
    })
    .map_err(|e| format!("the owned session did not open: {e}"))?;
    let term = desktop
        .wait_for_window("bench", 10_000)
        .map_err(|e| format!("the terminal did not map: {e}"))?;
    desktop
        .focus(term.id)
        .map_err(|e| format!("cannot focus the terminal: {e}"))?;
    std::thread::sleep(Duration::from_millis(500));
    let env = desktop
        .session()
        .map(aido_desktop::session::OwnedSession::env)
        .unwrap_or_default();
    let tool = |program: &str| {
        let mut c = Command::new(program);
        c.env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .envs(env.iter().map(|(k, v)| (k, v)));
        c
    };

    // Screenshots.
    let mut shot = Vec::with_capacity(SHOTS);
    for _ in 0..SHOTS + 2 {
        let start = Instant::now();
        desktop
            .screenshot()
            .map_err(|e| format!("screenshot: {e}"))?;
        shot.push(start.elapsed());
    }
    shot.drain(..2);
    let peer_argv: Option<(&str, Vec<&str>)> = match server {
        Server::Sway => installed("grim").then(|| ("grim", vec!["-"])),
        Server::Xvfb => {
            if installed("import") {
                Some(("import", vec!["-window", "root", "png:-"]))
            } else if installed("scrot") {
                Some(("scrot", vec!["-"]))
            } else {
                None
            }
        }
    };
    let peer_shot = match peer_argv {
        None => Err("not run: neither grim nor import/scrot is installed".into()),
        Some((program, args)) => (|| {
            let mut times = Vec::with_capacity(SHOTS);
            for _ in 0..SHOTS + 2 {
                let start = Instant::now();
                let out = tool(program)
                    .args(&args)
                    .output()
                    .map_err(|e| format!("{program}: {e}"))?;
                times.push(start.elapsed());
                if !out.status.success() || !out.stdout.starts_with(b"\x89PNG") {
                    return Err(format!(
                        "{program} failed: {}",
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
            }
            times.drain(..2);
            Ok((format!("`{program} {}`", args.join(" ")), times))
        })(),
    };

    // Keypress to pixels: alternate characters so every press changes the terminal.
    let region = term.rect;
    let pixels = move |desktop: &mut Desktop| -> Result<Vec<u8>, String> {
        let (frame, _) = desktop.frame().map_err(|e| format!("capture: {e}"))?;
        let mut out = Vec::new();
        let x0 = region.x.max(0) as u32;
        let y0 = region.y.max(0) as u32;
        let x1 = (x0 + region.width).min(frame.width);
        let y1 = (y0 + region.height).min(frame.height);
        for y in y0..y1 {
            let row = (y * frame.width) as usize * 3;
            out.extend_from_slice(&frame.rgb[row + x0 as usize * 3..row + x1 as usize * 3]);
        }
        Ok(out)
    };
    let wait_change =
        |desktop: &mut Desktop, before: &[u8], start: Instant| -> Result<Duration, String> {
            loop {
                if pixels(desktop)? != before {
                    return Ok(start.elapsed());
                }
                if start.elapsed() > KEY_TIMEOUT {
                    return Err("the keypress never showed on the screen".into());
                }
            }
        };
    let mut key = Vec::with_capacity(KEYS);
    for i in 0..KEYS {
        let before = pixels(&mut desktop)?;
        let c = if i % 2 == 0 { "a" } else { "b" };
        let start = Instant::now();
        desktop
            .type_text(c, None)
            .map_err(|e| format!("type_text: {e}"))?;
        key.push(wait_change(&mut desktop, &before, start)?);
    }
    let peer_key_argv: Option<(&str, Vec<&str>)> = match server {
        Server::Sway => installed("wtype").then(|| ("wtype", vec!["--"])),
        Server::Xvfb => installed("xdotool").then(|| ("xdotool", vec!["type", "--"])),
    };
    let peer_key = match peer_key_argv {
        None => Err("not run: neither wtype nor xdotool is installed".into()),
        Some((program, args)) => (|| {
            let mut times = Vec::with_capacity(KEYS);
            for i in 0..KEYS {
                let before = pixels(&mut desktop)?;
                let c = if i % 2 == 0 { "c" } else { "d" };
                let start = Instant::now();
                let status = tool(program)
                    .args(&args)
                    .arg(c)
                    .status()
                    .map_err(|e| format!("{program}: {e}"))?;
                if !status.success() {
                    return Err(format!("{program} failed ({status})"));
                }
                times.push(wait_change(&mut desktop, &before, start)?);
            }
            Ok((format!("`{program} {} c`", args.join(" ")), times))
        })(),
    };
    Ok(Lane {
        server: desktop.capabilities().server.clone(),
        screen: desktop.capabilities().screen,
        shot,
        peer_shot,
        key,
        peer_key,
    })
}
