//! The desktop as the body drives it: a backend chosen by probing, the owned session (or the
//! attached display), the gates on every input batch, and what each primitive returns.
//!
//! Every input batch runs the same way: the target is judged (the focused window for keys;
//! the window under the point, and the focused window, for the pointer), the events are sent
//! in chunks at a bounded rate, the focus is checked again between chunks and after the last
//! one, and a focus that moved aborts the batch with `desktop_focus_moved`, saying how much
//! was sent. Keys and buttons a batch pressed are released before it returns, also on error,
//! and [`Desktop::release_all`] releases whatever is still held (the body calls it on stop).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::backend::{Backend, Button, Capabilities, Direction, Event, Frame, Window};
use crate::error::DesktopError;
use crate::gate::Rules;
use crate::keys::{self, Keysym};
use crate::session::{OwnedSession, SessionOptions};
use crate::wlr::Wlr;
use crate::x11::X11;

/// Which session the desktop drives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionMode {
    /// A private headless session aido starts (the default).
    Owned(SessionOptions),
    /// A live display the user named (an explicit opt-in), with its bus address if any.
    Attach {
        /// The X display (`:0`), or a Wayland socket (`wayland-1` in XDG_RUNTIME_DIR, or a
        /// path).
        display: String,
        /// The D-Bus session bus address for notifications.
        bus: Option<String>,
    },
}

/// Bounds on what one call may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most characters one type_text sends.
    pub text_chars_max: usize,
    /// Largest clipboard text read or written, in bytes.
    pub clipboard_bytes_max: usize,
    /// Most input events per second (the rest wait).
    pub events_per_second_max: u32,
    /// Most wheel clicks or key repeats in one call.
    pub repeat_max: u32,
    /// How long focus_window waits for the focus, in ms.
    pub focus_timeout_ms: u64,
    /// How long the clipboard's owner may take to answer, in ms.
    pub clipboard_timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            text_chars_max: 4096,
            clipboard_bytes_max: 64 << 10,
            events_per_second_max: 1000,
            repeat_max: 100,
            focus_timeout_ms: 3000,
            clipboard_timeout_ms: 3000,
        }
    }
}

/// How a desktop is opened.
#[derive(Clone, Debug)]
pub struct Options {
    /// Owned or attached.
    pub session: SessionMode,
    /// The app rules.
    pub rules: Rules,
    /// The bounds.
    pub limits: Limits,
}

/// A screenshot, with the windows blacked out of it.
#[derive(Clone, Debug)]
pub struct Shot {
    /// The PNG.
    pub png: Vec<u8>,
    /// Its size.
    pub size: [u32; 2],
    /// Windows painted black before the image left the body (deny-listed).
    pub blacked_out: Vec<Window>,
}

/// What an input batch did.
#[derive(Clone, Debug, Serialize)]
pub struct Delivered {
    /// The window that had the focus (the target of keys).
    pub focused: Option<Window>,
    /// The window under the point (pointer input).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub under_pointer: Option<Window>,
    /// Events the server accepted.
    pub events: usize,
}

/// The target of keyboard input, judged.
#[derive(Clone, Debug, Serialize)]
pub struct KeyTarget {
    /// The focused window (None: nothing has the focus and no allow rules are set).
    pub window: Option<Window>,
    /// Whether it is a terminal (its input is a command).
    pub terminal: bool,
}

/// A desktop: its backend and, when owned, its session.
pub struct Desktop {
    backend: Box<dyn Backend>,
    session: Option<OwnedSession>,
    display: String,
    bus: Option<String>,
    rules: Rules,
    limits: Limits,
    held_keys: BTreeSet<Keysym>,
    held_buttons: BTreeSet<ButtonKey>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum ButtonKey {
    Left,
    Middle,
    Right,
}

impl From<Button> for ButtonKey {
    fn from(b: Button) -> Self {
        match b {
            Button::Left => Self::Left,
            Button::Middle => Self::Middle,
            Button::Right => Self::Right,
        }
    }
}

impl From<ButtonKey> for Button {
    fn from(b: ButtonKey) -> Self {
        match b {
            ButtonKey::Left => Self::Left,
            ButtonKey::Middle => Self::Middle,
            ButtonKey::Right => Self::Right,
        }
    }
}

/// Pointer input as the computer-use tools send it, at one point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gesture {
    /// Only move there.
    Move,
    /// Click `count` times (1 to 3).
    Click {
        /// Which button.
        button: Button,
        /// How many clicks.
        count: u32,
    },
    /// Press a button (and keep it pressed).
    Press {
        /// Which button.
        button: Button,
    },
    /// Release a button.
    Release {
        /// Which button.
        button: Button,
    },
    /// Wheel clicks.
    Scroll {
        /// Which way.
        direction: Direction,
        /// How many.
        clicks: u32,
    },
    /// Press the left button, move to `to`, release.
    Drag {
        /// Where the drag ends.
        to: (i64, i64),
    },
}

/// Longest wait for the window manager to settle the focus after pointer input, in ms.
const FOCUS_SETTLE_MS: u64 = 250;

/// Motion steps of a drag.
const DRAG_STEPS: i32 = 8;

/// Events per chunk: the focus is checked between chunks.
const CHUNK_EVENTS: usize = 32;

/// Whether a display names an X server (`:0`, `host:0.0`) rather than a Wayland socket.
pub fn is_x11_display(display: &str) -> bool {
    !display.starts_with('/') && display.contains(':')
}

/// Probe a display and say what it supports (no session is started): an X display is probed
/// for its extensions, a Wayland socket for its globals and sway IPC.
pub fn doctor(display: &str) -> Result<Capabilities, DesktopError> {
    if is_x11_display(display) {
        crate::x11::probe(display)
    } else {
        crate::wlr::probe(display)
    }
}

/// Connect the backend the display's server supports.
fn connect(display: &str) -> Result<Box<dyn Backend>, DesktopError> {
    Ok(if is_x11_display(display) {
        // XWayland is refused there (its input can be dropped silently).
        Box::new(X11::connect(display)?)
    } else {
        Box::new(Wlr::connect(display)?)
    })
}

impl Desktop {
    /// Start the owned session, or connect to the attached display, and probe it.
    pub fn open(options: Options) -> Result<Self, DesktopError> {
        let (session, display, bus) = match &options.session {
            SessionMode::Owned(o) => {
                let s = OwnedSession::start(o)?;
                let (display, bus) = (s.display.clone(), Some(s.bus.clone()));
                (Some(s), display, bus)
            }
            SessionMode::Attach { display, bus } => (None, display.clone(), bus.clone()),
        };
        let backend = connect(&display)?;
        Ok(Self {
            backend,
            session,
            display,
            bus,
            rules: options.rules,
            limits: options.limits,
            held_keys: BTreeSet::new(),
            held_buttons: BTreeSet::new(),
        })
    }

    /// The backend's name.
    pub fn backend_name(&self) -> &'static str {
        self.backend.capabilities().backend
    }

    /// What the server offers.
    pub fn capabilities(&self) -> &Capabilities {
        self.backend.capabilities()
    }

    /// The display driven.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// The session bus for notifications.
    pub fn bus(&self) -> Option<&str> {
        self.bus.as_deref()
    }

    /// The owned session, if any.
    pub fn session(&self) -> Option<&OwnedSession> {
        self.session.as_ref()
    }

    /// The bounds.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The screen, with deny-listed windows painted black before it leaves.
    pub fn screenshot(&mut self) -> Result<Shot, DesktopError> {
        let (frame, blacked_out) = self.frame()?;
        Ok(Shot {
            png: frame.png()?,
            size: [frame.width, frame.height],
            blacked_out,
        })
    }

    /// The screen's pixels (not encoded), deny-listed windows already black, and those
    /// windows.
    pub fn frame(&mut self) -> Result<(Frame, Vec<Window>), DesktopError> {
        let windows = self.backend.windows()?;
        let mut frame = self.backend.capture()?;
        let blacked_out: Vec<Window> = windows
            .into_iter()
            .filter(|w| self.rules.deny_listed(w))
            .map(|w| {
                frame.black_out(w.rect);
                redact(w)
            })
            .collect();
        Ok((frame, blacked_out))
    }

    /// Every top-level window, bottom first; deny-listed ones have their title hidden.
    pub fn windows(&mut self) -> Result<Vec<Window>, DesktopError> {
        Ok(self
            .backend
            .windows()?
            .into_iter()
            .map(|w| {
                if self.rules.deny_listed(&w) {
                    redact(w)
                } else {
                    w
                }
            })
            .collect())
    }

    /// The focused window (title hidden when deny-listed).
    pub fn focused(&mut self) -> Result<Option<Window>, DesktopError> {
        Ok(self.backend.focused()?.map(|w| {
            if self.rules.deny_listed(&w) {
                redact(w)
            } else {
                w
            }
        }))
    }

    /// Focus a window the rules allow.
    pub fn focus(&mut self, id: u64) -> Result<Window, DesktopError> {
        let target = self
            .backend
            .windows()?
            .into_iter()
            .find(|w| w.id == id)
            .ok_or(DesktopError::WindowMissing { window: id })?;
        self.rules.check(&target)?;
        self.backend.focus(id, self.limits.focus_timeout_ms)
    }

    /// The judged target of keyboard input.
    pub fn key_target(&mut self) -> Result<KeyTarget, DesktopError> {
        let window = self.backend.focused()?;
        match &window {
            Some(w) => self.rules.check(w)?,
            None if self.rules.restricts() => return Err(DesktopError::NoFocusedWindow),
            None => {}
        }
        let terminal = window.as_ref().is_some_and(|w| self.rules.is_terminal(w));
        Ok(KeyTarget { window, terminal })
    }

    fn check_point(&self, x: i64, y: i64) -> Result<(i32, i32), DesktopError> {
        let [width, height] = self.backend.screen();
        if x < 0 || y < 0 || x >= i64::from(width) || y >= i64::from(height) {
            return Err(DesktopError::PointOutside {
                x,
                y,
                width,
                height,
            });
        }
        Ok((x as i32, y as i32))
    }

    /// The topmost window under a point, judged.
    fn pointer_target(&mut self, x: i32, y: i32) -> Result<Option<Window>, DesktopError> {
        let under = self
            .backend
            .windows()?
            .into_iter()
            .rev()
            .find(|w| w.rect.contains(x, y));
        match &under {
            Some(w) => self.rules.check(w)?,
            None if self.rules.restricts() => {
                return Err(DesktopError::WindowDenied {
                    window: 0,
                    class: String::new(),
                    title: String::new(),
                    why: format!("no window is under ({x}, {y}) and desktop.allow rules are set"),
                });
            }
            None => {}
        }
        Ok(under)
    }

    /// Send a batch, judging the focus before, between chunks and after. `also_ok` is a
    /// window the focus may move to legitimately (the window a click lands on); `pinned` is
    /// the window the caller judged (keys into a terminal): if the focus is elsewhere by the
    /// time the batch starts, nothing is sent.
    fn batch(
        &mut self,
        events: &[Event],
        also_ok: Option<u64>,
        pinned: Option<u64>,
    ) -> Result<Delivered, DesktopError> {
        let before = self.backend.focused()?;
        if let Some(id) = pinned
            && before.as_ref().map(|w| w.id) != Some(id)
        {
            return Err(DesktopError::FocusMoved {
                before: id,
                after: before.map_or(0, |w| w.id),
                sent: 0,
                total: events.len(),
            });
        }
        if let Some(w) = &before {
            self.rules.check(w)?;
        } else if self.rules.restricts() && also_ok.is_none() {
            return Err(DesktopError::NoFocusedWindow);
        }
        let before_id = before.as_ref().map(|w| w.id);
        let interval =
            Duration::from_micros(1_000_000 / u64::from(self.limits.events_per_second_max.max(1)));
        let mut sent = 0;
        let result = (|| {
            for chunk in events.chunks(CHUNK_EVENTS) {
                let started = Instant::now();
                self.track(chunk);
                self.backend.send(chunk)?;
                sent += chunk.len();
                let mut now = self.backend.focused()?.map(|w| w.id);
                // A click hands the focus over through the window manager, which leaves no
                // window focused for a moment: wait (bounded) for where it lands.
                let settle = Instant::now() + Duration::from_millis(FOCUS_SETTLE_MS);
                while now.is_none() && also_ok.is_some() && Instant::now() < settle {
                    std::thread::sleep(Duration::from_millis(5));
                    now = self.backend.focused()?.map(|w| w.id);
                }
                if now != before_id && (now.is_none() || now != also_ok) {
                    return Err(DesktopError::FocusMoved {
                        before: before_id.unwrap_or(0),
                        after: now.unwrap_or(0),
                        sent,
                        total: events.len(),
                    });
                }
                let budget = interval * chunk.len() as u32;
                if let Some(rest) = budget.checked_sub(started.elapsed()) {
                    std::thread::sleep(rest);
                }
            }
            Ok(())
        })();
        if result.is_err() {
            self.release_all();
        }
        result?;
        Ok(Delivered {
            focused: before.map(|w| {
                if self.rules.deny_listed(&w) {
                    redact(w)
                } else {
                    w
                }
            }),
            under_pointer: None,
            events: sent,
        })
    }

    fn track(&mut self, events: &[Event]) {
        for e in events {
            match *e {
                Event::Key {
                    keysym,
                    press: true,
                } => {
                    self.held_keys.insert(keysym);
                }
                Event::Key {
                    keysym,
                    press: false,
                } => {
                    self.held_keys.remove(&keysym);
                }
                Event::Button {
                    button,
                    press: true,
                } => {
                    self.held_buttons.insert(button.into());
                }
                Event::Button {
                    button,
                    press: false,
                } => {
                    self.held_buttons.remove(&button.into());
                }
                Event::Motion { .. } | Event::Wheel { .. } => {}
            }
        }
    }

    /// Release every key and button aido holds (after a failed batch, on stop, on restart).
    pub fn release_all(&mut self) {
        let mut events: Vec<Event> = std::mem::take(&mut self.held_keys)
            .into_iter()
            .rev()
            .map(|keysym| Event::Key {
                keysym,
                press: false,
            })
            .collect();
        events.extend(
            std::mem::take(&mut self.held_buttons)
                .into_iter()
                .map(|b| Event::Button {
                    button: b.into(),
                    press: false,
                }),
        );
        if !events.is_empty() {
            let _ = self.backend.send(&events);
        }
        let _ = self.backend.restore_keys();
    }

    /// Keys and buttons held now (for tests and the stop path).
    pub fn held(&self) -> usize {
        self.held_keys.len() + self.held_buttons.len()
    }

    /// Move the pointer, then click `count` times.
    pub fn click(
        &mut self,
        x: i64,
        y: i64,
        button: Button,
        count: u32,
    ) -> Result<Delivered, DesktopError> {
        let (x, y) = self.check_point(x, y)?;
        if count == 0 || count > 3 {
            return Err(DesktopError::TooLarge {
                what: "the click count",
                size: count as usize,
                max: 3,
            });
        }
        let under = self.pointer_target(x, y)?;
        let mut events = vec![Event::Motion { x, y }];
        for _ in 0..count {
            events.push(Event::Button {
                button,
                press: true,
            });
            events.push(Event::Button {
                button,
                press: false,
            });
        }
        let mut done = self.batch(&events, under.as_ref().map(|w| w.id), None)?;
        done.under_pointer = under;
        Ok(done)
    }

    /// Move the pointer.
    pub fn move_mouse(&mut self, x: i64, y: i64) -> Result<Delivered, DesktopError> {
        let (x, y) = self.check_point(x, y)?;
        let under = self.pointer_target(x, y)?;
        let mut done = self.batch(
            &[Event::Motion { x, y }],
            under.as_ref().map(|w| w.id),
            None,
        )?;
        done.under_pointer = under;
        Ok(done)
    }

    /// Scroll at a point.
    pub fn scroll(
        &mut self,
        x: i64,
        y: i64,
        direction: Direction,
        clicks: u32,
    ) -> Result<Delivered, DesktopError> {
        let (x, y) = self.check_point(x, y)?;
        self.repeat_ok("the scroll clicks", clicks)?;
        let under = self.pointer_target(x, y)?;
        let mut events = vec![Event::Motion { x, y }];
        events.extend((0..clicks).map(|_| Event::Wheel { direction }));
        let mut done = self.batch(&events, under.as_ref().map(|w| w.id), None)?;
        done.under_pointer = under;
        Ok(done)
    }

    fn repeat_ok(&self, what: &'static str, n: u32) -> Result<(), DesktopError> {
        if n == 0 || n > self.limits.repeat_max {
            return Err(DesktopError::TooLarge {
                what,
                size: n as usize,
                max: self.limits.repeat_max as usize,
            });
        }
        Ok(())
    }

    /// Type Unicode text into the focused window (`pinned`: only if it is still this one).
    pub fn type_text(
        &mut self,
        text: &str,
        pinned: Option<u64>,
    ) -> Result<Delivered, DesktopError> {
        let chars = text.chars().count();
        if chars > self.limits.text_chars_max {
            return Err(DesktopError::TooLarge {
                what: "the text",
                size: chars,
                max: self.limits.text_chars_max,
            });
        }
        let syms = text
            .chars()
            .map(keys::char_keysym)
            .collect::<Result<Vec<_>, _>>()?;
        self.backend.prepare_keys(&syms)?;
        let events: Vec<Event> = syms
            .iter()
            .flat_map(|&keysym| {
                [
                    Event::Key {
                        keysym,
                        press: true,
                    },
                    Event::Key {
                        keysym,
                        press: false,
                    },
                ]
            })
            .collect();
        let done = self.batch(&events, None, pinned);
        let restored = self.backend.restore_keys();
        let done = done?;
        restored?;
        Ok(done)
    }

    /// Press a chord (`ctrl+c`, `Return`) `count` times.
    pub fn press_key(
        &mut self,
        spec: &str,
        count: u32,
        pinned: Option<u64>,
    ) -> Result<Delivered, DesktopError> {
        self.repeat_ok("the key repeats", count)?;
        self.press_chord(&keys::split_chord(spec), count, pinned)
    }

    /// Hold the keys in order, then release them in reverse.
    pub fn press_chord(
        &mut self,
        names: &[String],
        count: u32,
        pinned: Option<u64>,
    ) -> Result<Delivered, DesktopError> {
        if names.is_empty() || names.len() > 8 {
            return Err(DesktopError::TooLarge {
                what: "the chord's keys",
                size: names.len(),
                max: 8,
            });
        }
        let syms = keys::chord(names)?;
        self.backend.prepare_keys(&syms)?;
        let mut events = Vec::new();
        for _ in 0..count {
            events.extend(syms.iter().map(|&keysym| Event::Key {
                keysym,
                press: true,
            }));
            events.extend(syms.iter().rev().map(|&keysym| Event::Key {
                keysym,
                press: false,
            }));
        }
        let done = self.batch(&events, None, pinned);
        let restored = self.backend.restore_keys();
        let done = done?;
        restored?;
        Ok(done)
    }

    /// Where the pointer is.
    pub fn cursor(&mut self) -> Result<(i32, i32), DesktopError> {
        self.backend.pointer()
    }

    /// Pointer input at a point (or where the pointer is) with keys held around it, as the
    /// computer-use tools send it. The window under the point is judged (for a drag, the one
    /// under its end too), the held keys are a chord like any other (the refused ones are
    /// never pressed), and they are pressed first and released last, also on error.
    pub fn gesture(
        &mut self,
        at: Option<(i64, i64)>,
        gesture: Gesture,
        held: &[String],
    ) -> Result<Delivered, DesktopError> {
        let (x, y) = match at {
            Some((x, y)) => self.check_point(x, y)?,
            None => self.backend.pointer()?,
        };
        let under = self.pointer_target(x, y)?;
        // Everything is judged before a key is mapped or an event is sent.
        let mut end = (x, y);
        match gesture {
            Gesture::Click { count, .. } if count == 0 || count > 3 => {
                return Err(DesktopError::TooLarge {
                    what: "the click count",
                    size: count as usize,
                    max: 3,
                });
            }
            Gesture::Scroll { clicks, .. } => self.repeat_ok("the scroll clicks", clicks)?,
            Gesture::Drag { to } => {
                end = self.check_point(to.0, to.1)?;
                self.pointer_target(end.0, end.1)?;
            }
            Gesture::Move
            | Gesture::Click { .. }
            | Gesture::Press { .. }
            | Gesture::Release { .. } => {}
        }
        let mut events = Vec::new();
        let held = if held.is_empty() {
            Vec::new()
        } else {
            let syms = keys::chord(held)?;
            self.backend.prepare_keys(&syms)?;
            syms
        };
        events.extend(held.iter().map(|&keysym| Event::Key {
            keysym,
            press: true,
        }));
        events.push(Event::Motion { x, y });
        let press = |button, press| Event::Button { button, press };
        match gesture {
            Gesture::Move => {}
            Gesture::Click { button, count } => {
                for _ in 0..count {
                    events.extend([press(button, true), press(button, false)]);
                }
            }
            Gesture::Press { button } => events.push(press(button, true)),
            Gesture::Release { button } => events.push(press(button, false)),
            Gesture::Scroll { direction, clicks } => {
                events.extend((0..clicks).map(|_| Event::Wheel { direction }));
            }
            Gesture::Drag { .. } => {
                let (tx, ty) = end;
                events.push(press(Button::Left, true));
                // Moves in steps, so programs that look for motion with the button held see it.
                for step in 1..=DRAG_STEPS {
                    let along = |from: i32, to: i32| from + (to - from) * step / DRAG_STEPS;
                    events.push(Event::Motion {
                        x: along(x, tx),
                        y: along(y, ty),
                    });
                }
                events.push(press(Button::Left, false));
            }
        }
        events.extend(held.iter().rev().map(|&keysym| Event::Key {
            keysym,
            press: false,
        }));
        let done = self.batch(&events, under.as_ref().map(|w| w.id), None);
        let restored = if held.is_empty() {
            Ok(())
        } else {
            self.backend.restore_keys()
        };
        let mut done = done?;
        restored?;
        done.under_pointer = under;
        Ok(done)
    }

    /// Hold a chord's keys for a while, then release them (in reverse); the focus is judged
    /// before the press and again at the release (`pinned`: only while it is this window).
    pub fn hold_chord(
        &mut self,
        spec: &str,
        hold: Duration,
        pinned: Option<u64>,
    ) -> Result<Delivered, DesktopError> {
        let names = keys::split_chord(spec);
        if names.is_empty() || names.len() > 8 {
            return Err(DesktopError::TooLarge {
                what: "the chord's keys",
                size: names.len(),
                max: 8,
            });
        }
        let syms = keys::chord(&names)?;
        self.backend.prepare_keys(&syms)?;
        let down: Vec<Event> = syms
            .iter()
            .map(|&keysym| Event::Key {
                keysym,
                press: true,
            })
            .collect();
        let up: Vec<Event> = syms
            .iter()
            .rev()
            .map(|&keysym| Event::Key {
                keysym,
                press: false,
            })
            .collect();
        let done = self.batch(&down, None, pinned).and_then(|done| {
            std::thread::sleep(hold);
            let focused = done.focused.as_ref().map(|w| w.id);
            self.batch(&up, None, focused.or(pinned)).map(|_| done)
        });
        if done.is_err() {
            self.release_all();
        }
        let restored = self.backend.restore_keys();
        let done = done?;
        restored?;
        Ok(done)
    }

    /// The clipboard's text, within the size cap.
    pub fn clipboard_get(&mut self) -> Result<String, DesktopError> {
        self.backend.clipboard_get(
            self.limits.clipboard_bytes_max,
            self.limits.clipboard_timeout_ms,
        )
    }

    /// Put text on the clipboard (and the primary selection), within the size cap.
    pub fn clipboard_set(&mut self, text: &str) -> Result<(), DesktopError> {
        if text.len() > self.limits.clipboard_bytes_max {
            return Err(DesktopError::TooLarge {
                what: "the clipboard text",
                size: text.len(),
                max: self.limits.clipboard_bytes_max,
            });
        }
        self.backend.clipboard_set(text)
    }

    /// Wait until a window of this class is mapped (for autostarted programs).
    pub fn wait_for_window(
        &mut self,
        class: &str,
        timeout_ms: u64,
    ) -> Result<Window, DesktopError> {
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        loop {
            if let Some(w) = self.backend.windows()?.into_iter().find(|w| {
                w.class.eq_ignore_ascii_case(class) || w.instance.eq_ignore_ascii_case(class)
            }) {
                return Ok(w);
            }
            if Instant::now() >= deadline {
                return Err(DesktopError::WindowMissing { window: 0 });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Desktop {
    fn drop(&mut self) {
        self.release_all();
    }
}

/// A deny-listed window as the agent may see it: where it is and what it is, not its title.
fn redact(mut w: Window) -> Window {
    w.title = "(hidden: deny-listed window)".into();
    w
}
