//! The desktop body per backend on owned headless sessions (sway, Xvfb + openbox), each with a
//! terminal: a screenshot beside grim / import, a keypress to pixels beside wtype / xdotool.

use std::process::Command;
use std::time::{Duration, Instant};

use aido_desktop::session::{Server, SessionOptions, installed};
use aido_desktop::{Desktop, Limits, Options, SessionMode, gate::Rules};

use crate::record::{Record, Section};

/// Screenshots timed per tool and lane.
pub const SHOTS: usize = 20;
/// Keypresses timed per tool and lane.
pub const KEYS: usize = 15;
/// The longest a keypress may take to show.
const KEY_TIMEOUT: Duration = Duration::from_secs(3);

/// What one lane measured.
struct Lane {
    /// What the server called itself.
    server: String,
    screen: [u32; 2],
    /// Desktop::screenshot.
    shot: Vec<Duration>,
    /// The peer tool's name and its times (or why it did not run).
    peer_shot: Peer,
    /// type_text of one character until the pixels changed.
    key: Vec<Duration>,
    /// The peer tool's keypress (or why it did not run).
    peer_key: Peer,
}

/// A backend's rows: id and description of the screenshot row, then of the keypress row.
fn rows(backend: &str) -> [(String, String); 2] {
    [
        (
            format!("desktop_screenshot_{backend}"),
            format!(
                "desktop screenshot ({backend} backend: capture, blackout, PNG) / the command-line tool on the same screen, time per screenshot"
            ),
        ),
        (
            format!("desktop_keypress_to_pixels_{backend}"),
            format!(
                "desktop keypress to pixels ({backend} backend: type_text of one character until the terminal's pixels change) / the same character from the command-line tool, time per keypress"
            ),
        ),
    ]
}

/// The section when it does not run, and why.
pub fn skipped(why: &str) -> Vec<Record> {
    let mut s = Section::new("desktop");
    for backend in ["wlr", "x11"] {
        for (id, what) in rows(backend) {
            s.not_run(&id, what, why);
        }
    }
    s.fact("lanes", "Not run.");
    s.numbers(&[("shots", SHOTS as f64), ("keys", KEYS as f64)]);
    s.finish()
}

/// Runs both lanes: per backend, a screenshot beside grim / import, and a keypress to pixels
/// beside wtype / xdotool; a line of the lanes table each.
pub fn run() -> Vec<Record> {
    if !installed("dbus-daemon") {
        return skipped("dbus-daemon is not installed");
    }
    let lanes = [
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
    let mut s = Section::new("desktop");
    let mut ran = 0;
    for (k, (backend, lane)) in lanes.into_iter().enumerate() {
        let mut line = vec![format!("`{backend}`")];
        match lane {
            Ok(l) => {
                ran += 1;
                for ((id, what), (ours, peer)) in rows(backend)
                    .into_iter()
                    .zip([(&l.shot, &l.peer_shot), (&l.key, &l.peer_key)])
                {
                    match peer {
                        Ok((name, times)) => s.versus(&id, what, ours, name, times),
                        Err(_) => {
                            s.times(&id, None, ours).what(what);
                        }
                    }
                }
                let said = |p: &Peer| match p {
                    Ok((name, _)) => name.clone(),
                    Err(e) => e.clone(),
                };
                let [w, h] = l.screen;
                line.extend([
                    l.server,
                    format!("{w}x{h}"),
                    said(&l.peer_shot),
                    said(&l.peer_key),
                ]);
            }
            Err(e) => {
                for (id, what) in rows(backend) {
                    if e.starts_with("not run") {
                        s.not_run(&id, what, &e);
                    } else {
                        s.failed(&id, what, &e);
                    }
                }
                line.push(e);
                line.resize(5, String::new());
            }
        }
        let columns = [
            "backend",
            "server",
            "screen",
            "screenshot peer",
            "keypress peer",
        ];
        let cells: Vec<(&str, String)> = columns.into_iter().zip(line).collect();
        s.line("lanes", k + 1, &cells);
    }
    s.fact("lanes", format!("{ran} lane(s) ran."));
    s.numbers(&[("shots", SHOTS as f64), ("keys", KEYS as f64)]);
    s.finish()
}

/// A peer's command line: the program and its arguments.
type Argv = (&'static str, Vec<&'static str>);

/// A lane's peer: its label and times, or why it did not run.
type Peer = Result<(String, Vec<Duration>), String>;

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
    let tool = |(program, args): &Argv| {
        let mut c = Command::new(program);
        c.args(args)
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .envs(env.iter().map(|(k, v)| (k, v)));
        c
    };
    let (shot, peer_shot) = screenshots(&mut desktop, shot_peer(server), &tool)?;
    let (key, peer_key) = keypresses(&mut desktop, term.rect, key_peer(server), &tool)?;
    Ok(Lane {
        server: desktop.capabilities().server.clone(),
        screen: desktop.capabilities().screen,
        shot,
        peer_shot,
        key,
        peer_key,
    })
}

/// The command-line screenshot tool for `server`, if one is installed.
fn shot_peer(server: Server) -> Result<Argv, String> {
    match server {
        Server::Sway if installed("grim") => Ok(("grim", vec!["-"])),
        Server::Xvfb if installed("import") => Ok(("import", vec!["-window", "root", "png:-"])),
        Server::Xvfb if installed("scrot") => Ok(("scrot", vec!["-"])),
        _ => Err("not run: neither grim nor import/scrot is installed".into()),
    }
}

/// The command-line typing tool for `server`, if one is installed.
fn key_peer(server: Server) -> Result<Argv, String> {
    match server {
        Server::Sway if installed("wtype") => Ok(("wtype", vec!["--"])),
        Server::Xvfb if installed("xdotool") => Ok(("xdotool", vec!["type", "--"])),
        _ => Err("not run: neither wtype nor xdotool is installed".into()),
    }
}

/// Two warm-ups and [`SHOTS`] timed screenshots, aido and the peer alternating.
fn screenshots(
    desktop: &mut Desktop,
    peer: Result<Argv, String>,
    tool: &dyn Fn(&Argv) -> Command,
) -> Result<(Vec<Duration>, Peer), String> {
    let (mut ours, mut theirs) = (
        Vec::new(),
        peer.as_ref().map(|_| Vec::new()).map_err(Clone::clone),
    );
    for i in 0..SHOTS + 2 {
        for lane in crate::harness::alternate(i, 2) {
            let start = Instant::now();
            if lane == 0 {
                desktop
                    .screenshot()
                    .map_err(|e| format!("screenshot: {e}"))?;
                ours.push(start.elapsed());
            } else if let (Ok(argv), Ok(times)) = (&peer, &mut theirs) {
                let out = tool(argv)
                    .output()
                    .map_err(|e| format!("{}: {e}", argv.0))?;
                times.push(start.elapsed());
                if !out.status.success() || !out.stdout.starts_with(b"\x89PNG") {
                    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                    theirs = Err(format!("{} failed: {stderr}", argv.0));
                }
            }
        }
    }
    ours.drain(..2);
    let theirs = theirs.and_then(|mut times| {
        times.drain(..2);
        let (program, args) = peer?;
        Ok((format!("`{program} {}`", args.join(" ")), times))
    });
    Ok((ours, theirs))
}

/// [`KEYS`] keypresses each, aido's `type_text` and the peer's alternating, each timed until
/// the terminal's pixels change (the characters alternate, so every press changes them).
fn keypresses(
    desktop: &mut Desktop,
    region: aido_desktop::Rect,
    peer: Result<Argv, String>,
    tool: &dyn Fn(&Argv) -> Command,
) -> Result<(Vec<Duration>, Peer), String> {
    let (mut ours, mut theirs) = (
        Vec::new(),
        peer.as_ref().map(|_| Vec::new()).map_err(Clone::clone),
    );
    for i in 0..KEYS {
        for lane in crate::harness::alternate(i, 2) {
            let before = pixels(desktop, region)?;
            let start = Instant::now();
            if lane == 0 {
                let c = if i % 2 == 0 { "a" } else { "b" };
                desktop
                    .type_text(c, None)
                    .map_err(|e| format!("type_text: {e}"))?;
                ours.push(wait_change(desktop, region, &before, start)?);
            } else if let (Ok(argv), Ok(times)) = (&peer, &mut theirs) {
                let c = if i % 2 == 0 { "c" } else { "d" };
                let status = tool(argv)
                    .arg(c)
                    .status()
                    .map_err(|e| format!("{}: {e}", argv.0))?;
                if status.success() {
                    times.push(wait_change(desktop, region, &before, start)?);
                } else {
                    theirs = Err(format!("{} failed ({status})", argv.0));
                }
            }
        }
    }
    let theirs = theirs.and_then(|times| {
        let (program, args) = peer?;
        Ok((format!("`{program} {} c`", args.join(" ")), times))
    });
    Ok((ours, theirs))
}

/// The terminal's pixels, from the backend's capture (no encode).
fn pixels(desktop: &mut Desktop, region: aido_desktop::Rect) -> Result<Vec<u8>, String> {
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
}

/// How long from `start` until the terminal's pixels differ from `before`.
fn wait_change(
    desktop: &mut Desktop,
    region: aido_desktop::Rect,
    before: &[u8],
    start: Instant,
) -> Result<Duration, String> {
    loop {
        if pixels(desktop, region)? != before {
            return Ok(start.elapsed());
        }
        if start.elapsed() > KEY_TIMEOUT {
            return Err("the keypress never showed on the screen".into());
        }
    }
}
