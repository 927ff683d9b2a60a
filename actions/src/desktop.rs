//! Host desktop primitives: the desktop body drives a display (by default a private headless
//! session aido starts; attaching to a live one is an explicit opt-in in `[desktop]`). All of
//! them answer to `desktop.enabled` (off by default), and every input is judged against the
//! app rules and the focused window before and after it is sent. The desktop cannot be
//! rewound: a desktop action that changes anything is irreversible (simulate says so).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// A pointer button.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MouseButton {
    /// The left button (the default).
    #[default]
    Left,
    /// The middle button.
    Middle,
    /// The right button.
    Right,
}

/// Which way to scroll.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scroll {
    /// Up.
    Up,
    /// Down.
    Down,
    /// Left.
    Left,
    /// Right.
    Right,
}

/// A PNG of the whole screen (an MCP image). Deny-listed windows are painted black before the
/// image leaves the body; what the screen shows is untrusted text.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Screenshot {}

/// Click a point of the screen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Click {
    /// x, in screen pixels.
    pub x: i64,
    /// y, in screen pixels.
    pub y: i64,
    /// `left` (the default), `middle` or `right`.
    #[serde(default)]
    pub button: MouseButton,
}

/// A point of the screen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Point {
    /// x, in screen pixels.
    pub x: i64,
    /// y, in screen pixels.
    pub y: i64,
}

/// Scroll the wheel at a point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScrollAt {
    /// x, in screen pixels.
    pub x: i64,
    /// y, in screen pixels.
    pub y: i64,
    /// `up`, `down`, `left` or `right`.
    pub direction: Scroll,
    /// Wheel clicks (default 3, at most 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clicks: Option<u32>,
}

/// Type text into the focused window (any Unicode; `\n` presses Return). Into a terminal it
/// is judged as the command it is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TypeText {
    /// The text (at most 4096 characters).
    #[schemars(length(max = 4096))]
    pub text: String,
}

/// Press a key or a chord given as one string: `Return`, `ctrl+c`, `ctrl+shift+t`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PressKey {
    /// The key or chord.
    #[schemars(length(min = 1, max = 128))]
    pub key: String,
    /// How many times (default 1, at most 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
}

/// Hold keys in order and release them in reverse: `["ctrl", "shift", "t"]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PressKeyCombination {
    /// The keys (1 to 8).
    #[schemars(length(min = 1, max = 8))]
    pub keys: Vec<String>,
}

/// Give a window the focus (and raise it), by the id get_window_tree shows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FocusWindow {
    /// The window's id.
    pub window: u64,
}

/// No arguments.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// Put text on the clipboard (and the primary selection).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetClipboard {
    /// The text (at most desktop.clipboard_bytes_max bytes).
    pub text: String,
}

/// Show a desktop notification (freedesktop notifications over D-Bus), as app "aido", with no
/// actions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendNotification {
    /// The summary line (1 to 256 bytes).
    #[schemars(length(min = 1, max = 256))]
    pub summary: String,
    /// The body (at most 4096 bytes).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 4096))]
    pub body: String,
    /// How long it shows, in ms (default: the server's choice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_ms: Option<u32>,
}

/// Find text on the screen by OCR (the screenshot as the agent would get it, deny-listed
/// windows blacked out): every match with its box and center.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FindText {
    /// The text to find (a word or a phrase; matched case-insensitively, tolerating OCR
    /// slips).
    #[schemars(length(min = 1, max = 256))]
    pub text: String,
}

/// Wait until text is on the screen (OCR, polling), then say where.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitForText {
    /// The text to wait for.
    #[schemars(length(min = 1, max = 256))]
    pub text: String,
    /// How long to wait (default 10000 ms, at most 120000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Find text on the screen (OCR) and click its center, behind the same gates as click.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClickText {
    /// The text to click.
    #[schemars(length(min = 1, max = 256))]
    pub text: String,
    /// The button (default left).
    #[serde(default)]
    pub button: MouseButton,
}

// The desktop is outside the walls: no path is touched; desktop.enabled, the class, mode,
// action and capability gates, and the body's own app rules judge these.
macro_rules! touches_nothing {
    ($($ty:ty),*) => {$(
        impl Touches for $ty {
            fn touches(&self, _out: &mut Vec<Access>) {}
        }
    )*};
}
touches_nothing!(
    Screenshot,
    Click,
    Point,
    ScrollAt,
    TypeText,
    PressKey,
    PressKeyCombination,
    FocusWindow,
    NoArgs,
    SetClipboard,
    SendNotification,
    FindText,
    WaitForText,
    ClickText
);
