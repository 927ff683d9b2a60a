//! What every backend offers, and the values they share: windows, screens, capabilities.

use serde::Serialize;

use crate::error::DesktopError;
use crate::keys::Keysym;

/// A rectangle on the screen, in pixels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Rect {
    /// Left edge.
    pub x: i32,
    /// Top edge.
    pub y: i32,
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
}

impl Rect {
    /// Whether the point is inside.
    pub fn contains(&self, x: i32, y: i32) -> bool {
        x >= self.x
            && y >= self.y
            && i64::from(x) < i64::from(self.x) + i64::from(self.width)
            && i64::from(y) < i64::from(self.y) + i64::from(self.height)
    }
}

/// A top-level window as the backend sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Window {
    /// The backend's id (an X window id, a sway con_id).
    pub id: u64,
    /// WM_CLASS instance (X11) or app_id (Wayland).
    pub instance: String,
    /// WM_CLASS class (X11) or app_id (Wayland).
    pub class: String,
    /// The title.
    pub title: String,
    /// The owning process, when the server says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Where it is, in root coordinates.
    pub rect: Rect,
    /// Whether it has the input focus.
    pub focused: bool,
}

/// A pointer button.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Button {
    /// The left button.
    Left,
    /// The middle button.
    Middle,
    /// The right button.
    Right,
}

/// A scroll direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Content moves down (wheel up).
    Up,
    /// Wheel down.
    Down,
    /// Wheel left.
    Left,
    /// Wheel right.
    Right,
}

/// One input event for a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Move the pointer to an absolute point.
    Motion {
        /// x.
        x: i32,
        /// y.
        y: i32,
    },
    /// Press or release a button.
    Button {
        /// Which.
        button: Button,
        /// Press (true) or release.
        press: bool,
    },
    /// One wheel click.
    Wheel {
        /// Which way.
        direction: Direction,
    },
    /// Press or release the key that types this keysym.
    Key {
        /// The keysym.
        keysym: Keysym,
        /// Press (true) or release.
        press: bool,
    },
}

/// What the display server offers, probed (never read from environment variables).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Capabilities {
    /// The backend (`x11`).
    pub backend: &'static str,
    /// What the server calls itself (vendor and release).
    pub server: String,
    /// The screen's size.
    pub screen: [u32; 2],
    /// Synthetic input (XTEST; Wayland: virtual pointer and keyboard).
    pub input: bool,
    /// Screenshots (GetImage; Wayland: screencopy).
    pub screenshot: bool,
    /// A window manager that names the active window (EWMH `_NET_ACTIVE_WINDOW`).
    pub window_manager: Option<String>,
    /// The window list (EWMH `_NET_CLIENT_LIST`); without it, top-level windows are found
    /// with QueryTree.
    pub client_list: bool,
    /// Focus through the window manager (`_NET_ACTIVE_WINDOW` requests).
    pub focus_by_wm: bool,
    /// The clipboard (selections; Wayland: data-control).
    pub clipboard: bool,
    /// The server is XWayland (input is refused there).
    pub xwayland: bool,
    /// Every X extension the server lists.
    pub extensions: Vec<String>,
}

/// An image of the screen: RGB, 3 bytes per pixel, row-major.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The pixels.
    pub rgb: Vec<u8>,
}

impl Frame {
    /// Paint a rectangle black (clipped to the frame).
    pub fn black_out(&mut self, rect: Rect) {
        let x0 = rect.x.max(0) as u32;
        let y0 = rect.y.max(0) as u32;
        let x1 = (i64::from(rect.x) + i64::from(rect.width)).clamp(0, i64::from(self.width)) as u32;
        let y1 =
            (i64::from(rect.y) + i64::from(rect.height)).clamp(0, i64::from(self.height)) as u32;
        for y in y0..y1 {
            let row = (y * self.width) as usize * 3;
            for x in x0..x1 {
                let at = row + x as usize * 3;
                self.rgb[at..at + 3].fill(0);
            }
        }
    }

    /// Encode as PNG.
    pub fn png(&self) -> Result<Vec<u8>, DesktopError> {
        let mut out = Vec::new();
        let encode = |out: &mut Vec<u8>| -> Result<(), png::EncodingError> {
            let mut encoder = png::Encoder::new(out, self.width, self.height);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            encoder.set_compression(png::Compression::Fast);
            let mut writer = encoder.write_header()?;
            writer.write_image_data(&self.rgb)?;
            writer.finish()
        };
        encode(&mut out).map_err(|e| DesktopError::Encode { why: e.to_string() })?;
        Ok(out)
    }
}

/// A display server as the desktop body drives it. Every method is blocking; the body calls
/// it on the blocking pool. A method that returns `Ok` did what it says: input was accepted by
/// the server (a round trip confirms it), a focus change was seen.
pub trait Backend: Send {
    /// What the server offers.
    fn capabilities(&self) -> &Capabilities;
    /// The screen's size.
    fn screen(&self) -> [u32; 2];
    /// The whole screen.
    fn capture(&mut self) -> Result<Frame, DesktopError>;
    /// The top-level windows, bottom of the stack first.
    fn windows(&mut self) -> Result<Vec<Window>, DesktopError>;
    /// The window with the input focus (a top-level window), if any.
    fn focused(&mut self) -> Result<Option<Window>, DesktopError>;
    /// Give a window the focus and raise it; returns once the server says it has it.
    fn focus(&mut self, id: u64, timeout_ms: u64) -> Result<Window, DesktopError>;
    /// Where the pointer is, in root coordinates.
    fn pointer(&mut self) -> Result<(i32, i32), DesktopError>;
    /// Send events in order, then wait until the server has processed them.
    fn send(&mut self, events: &[Event]) -> Result<(), DesktopError>;
    /// Prepare the keyboard for these keysyms (map the ones no key types), before `send`.
    fn prepare_keys(&mut self, keysyms: &[Keysym]) -> Result<(), DesktopError>;
    /// Undo what `prepare_keys` mapped.
    fn restore_keys(&mut self) -> Result<(), DesktopError>;
    /// The clipboard's text, at most `max` bytes.
    fn clipboard_get(&mut self, max: usize, timeout_ms: u64) -> Result<String, DesktopError>;
    /// Own the clipboard (and the primary selection) with this text.
    fn clipboard_set(&mut self, text: &str) -> Result<(), DesktopError>;
}
