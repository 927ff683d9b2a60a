/// A desktop operation failed. Every variant has a stable code; none of them means the input
/// was delivered.
#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    /// A program the owned session needs (Xvfb, the window manager, dbus-daemon) is missing.
    #[error("{program} is not installed (needed for the owned desktop session)")]
    ProgramMissing {
        /// The program.
        program: String,
    },
    /// The owned session could not be started.
    #[error("the owned desktop session did not start: {why}")]
    SessionFailed {
        /// Why.
        why: String,
    },
    /// No display server answered.
    #[error("cannot connect to the display server {display:?}: {why}")]
    ConnectFailed {
        /// The display asked for.
        display: String,
        /// Why.
        why: String,
    },
    /// The display server lacks what the operation needs (an extension, EWMH, a bus).
    #[error("the display server lacks {feature}: {why}")]
    Unsupported {
        /// What is missing (`XTEST`, `_NET_ACTIVE_WINDOW`, `notifications`).
        feature: &'static str,
        /// What that means.
        why: String,
    },
    /// The X server is XWayland: XTEST input there can be dropped by the compositor and
    /// reported as done (the cua #2112 failure), so it is refused.
    #[error(
        "the X server is XWayland; XTEST input may be silently dropped by the compositor, so the x11 backend refuses to drive it"
    )]
    Xwayland,
    /// The display server broke the connection or refused a request.
    #[error("the display server failed {request}: {why}")]
    Protocol {
        /// The request.
        request: &'static str,
        /// Why.
        why: String,
    },
    /// A key name that is not known.
    #[error("unknown key {name:?}")]
    KeyUnknown {
        /// The name.
        name: String,
    },
    /// A character that cannot be typed (a control character other than tab and newline).
    #[error("character U+{code:04X} cannot be typed")]
    CharUntypable {
        /// Its code point.
        code: u32,
    },
    /// The keyboard has no free keycode for another Unicode character.
    #[error("no free keycode is left to type {count} distinct unmapped characters")]
    KeycodesExhausted {
        /// How many were needed.
        count: usize,
    },
    /// A chord that switches VTs, kills the server or exits the compositor.
    #[error("the chord {chord} is refused: {why}")]
    ChordRefused {
        /// The chord as given.
        chord: String,
        /// What it would do.
        why: &'static str,
    },
    /// The target window is not one the rules let the agent drive (or see).
    #[error("window {window} ({class:?}, title {title:?}) is not allowed: {why}")]
    WindowDenied {
        /// The window id.
        window: u64,
        /// Its WM_CLASS class.
        class: String,
        /// Its title.
        title: String,
        /// Which rule.
        why: String,
    },
    /// No window has the focus, and the rules need one to judge the input.
    #[error("no window has the input focus; input is refused when allow rules are set")]
    NoFocusedWindow,
    /// The focus moved while an input batch ran: the rest of the batch was not sent.
    #[error(
        "the focus moved from window {before} to {after} during the input; {sent} of {total} events were sent, the rest were not"
    )]
    FocusMoved {
        /// The window focused before.
        before: u64,
        /// The window focused after.
        after: u64,
        /// Events sent.
        sent: usize,
        /// Events in the batch.
        total: usize,
    },
    /// focus_window asked for a window that does not exist.
    #[error("no window {window}")]
    WindowMissing {
        /// The id.
        window: u64,
    },
    /// The window manager did not give the window the focus in time.
    #[error("window {window} did not take the focus within {timeout_ms} ms")]
    FocusNotTaken {
        /// The id.
        window: u64,
        /// The deadline.
        timeout_ms: u64,
    },
    /// A point outside the screen.
    #[error("({x}, {y}) is outside the {width}x{height} screen")]
    PointOutside {
        /// x.
        x: i64,
        /// y.
        y: i64,
        /// Screen width.
        width: u32,
        /// Screen height.
        height: u32,
    },
    /// A request exceeds a bound (text length, clipboard size, scroll clicks, ...).
    #[error("{what} is {size}, more than the {max} allowed")]
    TooLarge {
        /// What.
        what: &'static str,
        /// Its size.
        size: usize,
        /// The bound.
        max: usize,
    },
    /// The clipboard's owner did not answer in time.
    #[error("the clipboard's owner did not answer within {timeout_ms} ms")]
    ClipboardTimeout {
        /// The deadline.
        timeout_ms: u64,
    },
    /// The clipboard holds nothing that is text.
    #[error("the clipboard holds no text")]
    ClipboardEmpty,
    /// The notification server failed or is not there.
    #[error("the notification server failed: {why}")]
    NotifyFailed {
        /// Why.
        why: String,
    },
    /// A screenshot could not be encoded.
    #[error("cannot encode the screenshot: {why}")]
    Encode {
        /// Why.
        why: String,
    },
    /// A rule in the desktop config is invalid.
    #[error("desktop rule {rule:?} is invalid: {why}")]
    RuleInvalid {
        /// The rule.
        rule: String,
        /// Why.
        why: String,
    },
}

aido_actions::coded!(DesktopError {
    ProgramMissing => "desktop_program_missing",
    SessionFailed => "desktop_session_failed",
    ConnectFailed => "desktop_connect_failed",
    Unsupported => "desktop_unsupported",
    Xwayland => "desktop_xwayland_refused",
    Protocol => "desktop_protocol_error",
    KeyUnknown => "desktop_key_unknown",
    CharUntypable => "desktop_char_untypable",
    KeycodesExhausted => "desktop_keycodes_exhausted",
    ChordRefused => "desktop_chord_refused",
    WindowDenied => "desktop_window_denied",
    NoFocusedWindow => "desktop_no_focused_window",
    FocusMoved => "desktop_focus_moved",
    WindowMissing => "desktop_window_missing",
    FocusNotTaken => "desktop_focus_not_taken",
    PointOutside => "desktop_point_outside",
    TooLarge => "desktop_too_large",
    ClipboardTimeout => "desktop_clipboard_timeout",
    ClipboardEmpty => "desktop_clipboard_empty",
    NotifyFailed => "desktop_notify_failed",
    Encode => "desktop_encode_failed",
    RuleInvalid => "desktop_rule_invalid",
});

impl DesktopError {
    pub(crate) fn protocol(request: &'static str, e: impl std::fmt::Display) -> Self {
        Self::Protocol {
            request,
            why: e.to_string(),
        }
    }
}
