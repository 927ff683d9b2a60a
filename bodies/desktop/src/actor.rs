use std::sync::Arc;

use std::time::Duration;

use aido_actions::computer::ScrollDirection;
use aido_actions::desktop::{MouseButton, Scroll};
use aido_actions::process::RunCommand;
use aido_actions::{Action, DesktopAction, Failure, Verdict};
use aido_call::{Body, Calls, Reply};
use aido_desktop::gate::{AppRule, Rules};
use aido_desktop::session::{Server, SessionOptions};
use aido_desktop::{
    Button, Desktop, DesktopError, Direction, Gesture, Limits, Options, SessionMode,
};
use aido_policy::{DesktopSession, FsResolver, PolicyEngine, SessionContext};
use base64::Engine as _;
use serde_json::{Value, json};

use super::DesktopBodyError;

/// What it is built from; kept by the supervisor to build a fresh body after a crash.
#[derive(Clone)]
pub struct DesktopBodyArgs {
    /// The policy: its `[desktop]` config, and the judge of what is typed into terminals.
    pub policy: Arc<PolicyEngine>,
    /// Where an owned session's runtime directory is made.
    pub runtime_parent: std::path::PathBuf,
}

/// The desktop body: the desktop, once opened (taken out while a call works on it). A serial
/// body: one call at a time, its work off the async workers.
pub struct DesktopBody {
    args: DesktopBodyArgs,
    desktop: Option<Desktop>,
}

/// Messages to the desktop body.
pub enum DesktopMsg {
    /// Run one desktop primitive.
    Run {
        /// The action.
        action: Box<DesktopAction>,
        /// The caller's session (terminal input is judged in it).
        session: SessionContext,
        /// The body's answer (what the journal records and the result renders).
        reply: Reply<Value>,
    },
}

fn coded(e: DesktopError) -> Failure {
    Failure::from(e)
}

fn body_failure(e: DesktopBodyError) -> Failure {
    Failure::from(e)
}

fn rules(config: &aido_policy::Config) -> Result<Rules, DesktopError> {
    let convert = |r: &[aido_policy::AppRule]| -> Vec<AppRule> {
        r.iter()
            .map(|r| AppRule {
                class: r.class.clone(),
                title: r.title.clone(),
            })
            .collect()
    };
    let d = &config.desktop;
    Rules::new(&convert(&d.allow), &convert(&d.deny), &d.terminals)
}

/// How the desktop is opened, from `[desktop]`.
fn options(args: &DesktopBodyArgs) -> Result<Options, DesktopError> {
    let config = args.policy.config();
    let d = &config.desktop;
    let session = match d.session {
        DesktopSession::Owned => SessionMode::Owned(SessionOptions {
            server: server(d.server),
            width: d.width,
            height: d.height,
            window_manager: Some(d.window_manager.clone()).filter(|w| !w.is_empty()),
            autostart: d.autostart.clone(),
            runtime_parent: args.runtime_parent.clone(),
            ..SessionOptions::default()
        }),
        DesktopSession::Attach => SessionMode::Attach {
            display: d.display.clone(),
            bus: Some(d.bus.clone()).filter(|b| !b.is_empty()),
        },
    };
    Ok(Options {
        session,
        rules: rules(config)?,
        limits: Limits {
            text_chars_max: d.text_chars_max,
            clipboard_bytes_max: d.clipboard_bytes_max,
            events_per_second_max: d.events_per_second_max,
            ..Limits::default()
        },
    })
}

/// The owned session's server, from `desktop.server`.
pub fn server(s: aido_policy::DesktopServer) -> Server {
    match s {
        aido_policy::DesktopServer::Xvfb => Server::Xvfb,
        aido_policy::DesktopServer::Sway => Server::Sway,
    }
}

fn button(b: MouseButton) -> Button {
    match b {
        MouseButton::Left => Button::Left,
        MouseButton::Middle => Button::Middle,
        MouseButton::Right => Button::Right,
    }
}

fn direction(d: Scroll) -> Direction {
    match d {
        Scroll::Up => Direction::Up,
        Scroll::Down => Direction::Down,
        Scroll::Left => Direction::Left,
        Scroll::Right => Direction::Right,
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// A text as the journal's answer keeps it: its hash and length, never the text.
fn redacted(text: &str) -> Value {
    json!({
        "blake3": blake3::hash(text.as_bytes()).to_hex().to_string(),
        "bytes": text.len(),
        "chars": text.chars().count(),
    })
}

/// Judge keyboard input into the focused window: a terminal's input is the command it
/// types, judged as `run_command` of it. Returns whether the target is a terminal.
fn judge_keys(
    desktop: &mut Desktop,
    policy: &PolicyEngine,
    session: &SessionContext,
    typed: &str,
) -> Result<(Option<u64>, bool), Failure> {
    let target = desktop.key_target().map_err(coded)?;
    let window = target.window.as_ref().map(|w| w.id);
    if target.terminal {
        let class = target
            .window
            .as_ref()
            .map(|w| w.class.clone())
            .unwrap_or_default();
        let command = Action::RunCommand(RunCommand {
            argv: Vec::new(),
            shell: Some(typed.to_owned()),
            cwd: None,
            env: Default::default(),
            stdin: None,
            timeout_ms: None,
            stdout_bytes_max: None,
            stderr_bytes_max: None,
            dry_run: false,
            background: false,
            pty: false,
            private_tmp: false,
            expose_ports: Vec::new(),
        });
        match policy.evaluate(&command, session, &FsResolver) {
            Verdict::Allow => {}
            Verdict::Deny { reason, .. } => {
                return Err(body_failure(DesktopBodyError::TerminalInputDenied {
                    class,
                    reason,
                }));
            }
            Verdict::Confirm { reason, .. } => {
                return Err(body_failure(
                    DesktopBodyError::TerminalInputNeedsConfirmation { class, reason },
                ));
            }
        }
    }
    Ok((window, target.terminal))
}

/// The desktop as a screen for the computer-use tools: every input goes through the same
/// gates as the desktop primitives (what is typed or pressed into a terminal is judged as
/// the command it amounts to). It runs on the blocking pool, so its waits block.
struct DesktopScreen<'a> {
    desktop: &'a mut Desktop,
    policy: &'a PolicyEngine,
    session: &'a SessionContext,
}

impl DesktopScreen<'_> {
    fn keys_delivered(
        &mut self,
        typed: &str,
        send: impl FnOnce(&mut Desktop, Option<u64>) -> Result<aido_desktop::Delivered, DesktopError>,
    ) -> Result<Value, Failure> {
        let (window, terminal) = judge_keys(self.desktop, self.policy, self.session, typed)?;
        let mut v = to_json(&send(self.desktop, window).map_err(coded)?);
        v["terminal"] = json!(terminal);
        Ok(v)
    }
}

impl aido_computer::Screen for DesktopScreen<'_> {
    fn backend(&self) -> &'static str {
        self.desktop.backend_name()
    }

    async fn size(&mut self) -> Result<[u32; 2], Failure> {
        Ok(self.desktop.capabilities().screen)
    }

    async fn capture(&mut self) -> Result<Vec<u8>, Failure> {
        Ok(self.desktop.screenshot().map_err(coded)?.png)
    }

    async fn cursor(&mut self) -> Result<[u32; 2], Failure> {
        let (x, y) = self.desktop.cursor().map_err(coded)?;
        Ok([x.max(0) as u32, y.max(0) as u32])
    }

    async fn pointer(
        &mut self,
        at: Option<[u32; 2]>,
        gesture: aido_computer::Gesture,
        held: Option<&str>,
    ) -> Result<Value, Failure> {
        use aido_computer::{Button as B, Gesture as G};
        let button = |b| match b {
            B::Left => Button::Left,
            B::Middle => Button::Middle,
            B::Right => Button::Right,
        };
        let gesture = match gesture {
            G::Move => Gesture::Move,
            G::Click { button: b, count } => Gesture::Click {
                button: button(b),
                count,
            },
            G::Press => Gesture::Press {
                button: Button::Left,
            },
            G::Release => Gesture::Release {
                button: Button::Left,
            },
            G::Scroll {
                direction: d,
                clicks,
            } => Gesture::Scroll {
                direction: match d {
                    ScrollDirection::Up => Direction::Up,
                    ScrollDirection::Down => Direction::Down,
                    ScrollDirection::Left => Direction::Left,
                    ScrollDirection::Right => Direction::Right,
                },
                clicks,
            },
            G::Drag { to: [x, y] } => Gesture::Drag {
                to: (i64::from(x), i64::from(y)),
            },
        };
        let held = held
            .map(aido_desktop::keys::split_chord)
            .unwrap_or_default();
        let at = at.map(|[x, y]| (i64::from(x), i64::from(y)));
        Ok(to_json(
            &self.desktop.gesture(at, gesture, &held).map_err(coded)?,
        ))
    }

    async fn key(&mut self, keys: &str, repeat: u32) -> Result<Value, Failure> {
        self.keys_delivered(keys, |d, window| d.press_key(keys, repeat, window))
    }

    async fn hold_key(&mut self, keys: &str, hold: Duration) -> Result<Value, Failure> {
        self.keys_delivered(keys, |d, window| d.hold_chord(keys, hold, window))
    }

    async fn type_text(&mut self, text: &str) -> Result<Value, Failure> {
        let mut v = self.keys_delivered(text, |d, window| d.type_text(text, window))?;
        v["args"] = redacted(text);
        Ok(v)
    }

    async fn sleep(&mut self, wait: Duration) {
        std::thread::sleep(wait);
    }
}

/// wait_for_text's default and largest wait, and its polling interval, in ms.
const WAIT_FOR_TEXT_MS_DEFAULT: u64 = 10_000;
const WAIT_FOR_TEXT_MS_MAX: u64 = 120_000;
const WAIT_FOR_TEXT_POLL_MS: u64 = 250;

/// OCR of the screen as the agent would see it (deny-listed windows blacked out first): the
/// matches of `text`, and what was read (the screenshot's hash and size, the windows hidden).
fn read_screen(desktop: &mut Desktop, text: &str) -> Result<(Vec<Value>, Value), Failure> {
    let shot = desktop.screenshot().map_err(coded)?;
    let seen = json!({
        "size": shot.size,
        "blake3": blake3::hash(&shot.png).to_hex().to_string(),
        "blacked_out": shot.blacked_out.len(),
    });
    Ok((ocr_find(&shot.png, text)?, seen))
}

#[cfg(feature = "ocr")]
fn ocr_find(png: &[u8], text: &str) -> Result<Vec<Value>, Failure> {
    // One tesseract worker for every desktop body of the process, started on first use.
    static OCR: std::sync::Mutex<Option<aido_vm::ocr::Ocr>> = std::sync::Mutex::new(None);
    let ocr = {
        let mut slot = OCR
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match slot.as_ref() {
            Some(o) => o.clone(),
            None => {
                let o = aido_vm::ocr::Ocr::start().map_err(|e| {
                    body_failure(DesktopBodyError::OcrUnavailable { why: e.to_string() })
                })?;
                *slot = Some(o.clone());
                o
            }
        }
    };
    let words = ocr
        .words(png)
        .map_err(|e| body_failure(DesktopBodyError::OcrUnavailable { why: e.to_string() }))?;
    Ok(aido_vm::ocr::find(&words, text)
        .iter()
        .map(to_json)
        .collect())
}

#[cfg(not(feature = "ocr"))]
fn ocr_find(_png: &[u8], _text: &str) -> Result<Vec<Value>, Failure> {
    Err(body_failure(DesktopBodyError::OcrUnavailable {
        why: "this aido is built without the prim-vm family, which brings tesseract".into(),
    }))
}

/// Run one primitive on the desktop (blocking, on a thread of the blocking pool: `tokio`
/// runs the computer-use tools' adapter, whose desktop never waits on the runtime);
/// notifications are sent by the caller.
fn run(
    desktop: &mut Desktop,
    action: &DesktopAction,
    policy: &PolicyEngine,
    session: &SessionContext,
    tokio: &tokio::runtime::Handle,
) -> Result<Value, Failure> {
    let backend = desktop.backend_name();
    let delivered = |d: aido_desktop::Delivered| to_json(&d);
    let mut answer = match action {
        DesktopAction::Screenshot(_) => {
            let shot = desktop.screenshot().map_err(coded)?;
            json!({
                "size": shot.size,
                "blake3": blake3::hash(&shot.png).to_hex().to_string(),
                "blacked_out": to_json(&shot.blacked_out),
                aido_walk::desktop::PNG_KEY:
                    base64::engine::general_purpose::STANDARD.encode(&shot.png),
            })
        }
        DesktopAction::Click(a) => delivered(
            desktop
                .click(a.x, a.y, button(a.button), 1)
                .map_err(coded)?,
        ),
        DesktopAction::DoubleClick(a) => delivered(
            desktop
                .click(a.x, a.y, button(a.button), 2)
                .map_err(coded)?,
        ),
        DesktopAction::MoveMouse(a) => delivered(desktop.move_mouse(a.x, a.y).map_err(coded)?),
        DesktopAction::ScrollMouse(a) => {
            let clicks = a.clicks.unwrap_or(3);
            let mut v = delivered(
                desktop
                    .scroll(a.x, a.y, direction(a.direction), clicks)
                    .map_err(coded)?,
            );
            v["clicks"] = json!(clicks);
            v
        }
        DesktopAction::TypeText(a) => {
            let (window, terminal) = judge_keys(desktop, policy, session, &a.text)?;
            let mut v = delivered(desktop.type_text(&a.text, window).map_err(coded)?);
            v["terminal"] = json!(terminal);
            v["args"] = redacted(&a.text);
            v
        }
        DesktopAction::PressKey(a) => {
            let (window, terminal) = judge_keys(desktop, policy, session, &a.key)?;
            let mut v = delivered(
                desktop
                    .press_key(&a.key, a.count.unwrap_or(1), window)
                    .map_err(coded)?,
            );
            v["terminal"] = json!(terminal);
            v
        }
        DesktopAction::PressKeyCombination(a) => {
            let (window, terminal) = judge_keys(desktop, policy, session, &a.keys.join("+"))?;
            let mut v = delivered(desktop.press_chord(&a.keys, 1, window).map_err(coded)?);
            v["terminal"] = json!(terminal);
            v
        }
        DesktopAction::FocusWindow(a) => {
            json!({"window": to_json(&desktop.focus(a.window).map_err(coded)?)})
        }
        DesktopAction::GetWindowTree(_) => {
            json!({"windows": to_json(&desktop.windows().map_err(coded)?)})
        }
        DesktopAction::GetFocusedWindow(_) => {
            json!({"window": to_json(&desktop.focused().map_err(coded)?)})
        }
        DesktopAction::GetClipboard(_) => {
            let text = desktop.clipboard_get().map_err(coded)?;
            json!({"text": text, "bytes": text.len(), "untrusted": true})
        }
        DesktopAction::SetClipboard(a) => {
            desktop.clipboard_set(&a.text).map_err(coded)?;
            json!({"args": redacted(&a.text)})
        }
        // Sent on the async side (zbus); never reaches here.
        DesktopAction::SendNotification(_) => json!({}),
        DesktopAction::FindText(a) => {
            let (matches, seen) = read_screen(desktop, &a.text)?;
            json!({"text": a.text, "found": !matches.is_empty(), "matches": matches, "screen": seen})
        }
        DesktopAction::WaitForText(a) => {
            let timeout = a
                .timeout_ms
                .unwrap_or(WAIT_FOR_TEXT_MS_DEFAULT)
                .min(WAIT_FOR_TEXT_MS_MAX);
            let deadline = std::time::Instant::now() + Duration::from_millis(timeout);
            loop {
                let (matches, seen) = read_screen(desktop, &a.text)?;
                if let Some(first) = matches.first() {
                    break json!({"text": a.text, "match": first, "screen": seen});
                }
                if std::time::Instant::now() >= deadline {
                    return Err(body_failure(DesktopBodyError::TextNotFound {
                        text: a.text.clone(),
                        waited: format!(" after {timeout} ms"),
                    }));
                }
                std::thread::sleep(Duration::from_millis(WAIT_FOR_TEXT_POLL_MS));
            }
        }
        DesktopAction::ClickText(a) => {
            let (matches, seen) = read_screen(desktop, &a.text)?;
            let Some(first) = matches.first().cloned() else {
                return Err(body_failure(DesktopBodyError::TextNotFound {
                    text: a.text.clone(),
                    waited: String::new(),
                }));
            };
            let (x, y) = (
                first["center"][0].as_i64().unwrap_or(-1),
                first["center"][1].as_i64().unwrap_or(-1),
            );
            let mut v = delivered(desktop.click(x, y, button(a.button), 1).map_err(coded)?);
            v["text"] = json!(a.text);
            v["clicked"] = json!([x, y]);
            v["match"] = first;
            v["screen"] = seen;
            v
        }
        DesktopAction::DesktopComputer(c) => {
            let sizing = aido_computer::Sizing::of(&policy.config().computer);
            let mut screen = DesktopScreen {
                desktop,
                policy,
                session,
            };
            tokio.block_on(aido_computer::legacy(
                &mut screen,
                c.action,
                &c.input,
                sizing,
            ))?
        }
        DesktopAction::DesktopComputerToolset(batch) => {
            let sizing = aido_computer::Sizing::of(&policy.config().computer);
            let mut screen = DesktopScreen {
                desktop,
                policy,
                session,
            };
            tokio.block_on(aido_computer::toolset(&mut screen, batch, sizing))?
        }
    };
    answer["backend"] = json!(backend);
    Ok(answer)
}

impl Body for DesktopBody {
    const NAME: &'static str = "desktop";
    type Args = DesktopBodyArgs;
    type Msg = DesktopMsg;

    async fn build(args: DesktopBodyArgs) -> Result<Self, String> {
        Ok(Self {
            args,
            desktop: None,
        })
    }

    async fn stop(&mut self) {
        // Release whatever is held and stop the owned session, off the async threads.
        if let Some(mut desktop) = self.desktop.take() {
            let _ = tokio::task::spawn_blocking(move || {
                desktop.release_all();
                drop(desktop);
            })
            .await;
        }
    }

    async fn handle(&mut self, msg: DesktopMsg, _calls: &Calls) {
        let DesktopMsg::Run {
            action,
            session,
            reply,
        } = msg;
        // Input commits first, so its caller waits for the answer.
        let Some(reply) = reply.take(action.class().mutates()) else {
            return;
        };
        let desktop = self.desktop.take();
        let args = self.args.clone();
        let tokio = tokio::runtime::Handle::current();
        let joined = tokio::task::spawn_blocking(move || {
            let mut desktop = match desktop {
                Some(d) => d,
                None => match options(&args).and_then(Desktop::open) {
                    Ok(d) => d,
                    Err(e) => return (None, Err(coded(e))),
                },
            };
            let answer = if matches!(*action, DesktopAction::SendNotification(_)) {
                Ok(json!({"bus": desktop.bus()}))
            } else {
                run(&mut desktop, &action, &args.policy, &session, &tokio)
            };
            (Some((desktop, action)), answer)
        })
        .await;
        match joined {
            Ok((Some((desktop, action)), answer)) => {
                let answer = match (&*action, answer) {
                    (DesktopAction::SendNotification(n), Ok(found)) => {
                        notify(found["bus"].as_str(), n).await
                    }
                    (_, answer) => answer,
                };
                self.desktop = Some(desktop);
                reply.send(answer);
            }
            Ok((None, answer)) => reply.send(answer),
            // The desktop was dropped with the task (keys released); the body is restarted.
            Err(e) => reply.crash(e),
        }
    }
}

/// Send a notification on the session's bus and ask the server what it is.
async fn notify(
    bus: Option<&str>,
    n: &aido_actions::desktop::SendNotification,
) -> Result<Value, Failure> {
    let bus = bus.ok_or_else(|| body_failure(DesktopBodyError::NoBus))?;
    let expire = n
        .expire_ms
        .map_or(-1, |ms| i32::try_from(ms).unwrap_or(i32::MAX));
    let id = aido_desktop::notify::notify(bus, &n.summary, &n.body, expire)
        .await
        .map_err(coded)?;
    let server = aido_desktop::notify::server_info(bus).await.ok();
    Ok(json!({
        "backend": "dbus",
        "id": id,
        "server": to_json(&server),
        "args": {"summary": redacted(&n.summary), "body": redacted(&n.body)},
    }))
}
