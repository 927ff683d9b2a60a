//! The desktop body: one actor owning an [`aido_desktop::Desktop`], opened on the first call
//! (by default an owned headless session: Xvfb, the window manager, a D-Bus bus, the
//! configured programs, in a private runtime dir; `desktop.session = "attach"` drives a live
//! display instead). The policy has already judged the action (desktop.enabled, mode, class,
//! capabilities); the body adds the desktop's own gates: the app rules, the focused window
//! before, during and after each input batch, terminals (what is typed into one is judged as
//! the `run_command` it amounts to, and refused unless that would be allowed), refused chords,
//! the clipboard cap, and deny-listed windows blacked out of screenshots.
//!
//! `find_text`, `wait_for_text` and `click_text` read the screen with the VM body's OCR
//! (tesseract, in builds with the `prim-vm` family; without it they are
//! `desktop_ocr_unavailable`), on the screenshot as the agent would get it: deny-listed
//! windows are blacked out before OCR sees them.
//!
//! Its work is blocking display-server I/O (X11 or Wayland), so it runs on the blocking pool with the desktop moved in
//! and back, like the memory body's store. If it panics, the desktop is dropped (its Drop
//! releases every key and button it holds and stops the owned session) and the supervisor
//! restarts the body; the next call opens a fresh session. A desktop that cannot open costs
//! the desktop primitives a coded failure, never the rest of the runtime.
//!
//! The answer (backend, target window, redacted arguments, the screenshot's PNG) is the
//! action's recorded input; the result is [`aido_walk::desktop::render`] of it, live and in
//! playback.

/// The actor and its messages.
pub mod actor;

pub use actor::{DesktopBody, DesktopBodyArgs, DesktopMsg};

/// Why the desktop body refused a call (the desktop's own refusals keep their codes:
/// `desktop_window_denied`, `desktop_focus_moved`, ...).
#[derive(Debug, thiserror::Error)]
pub enum DesktopBodyError {
    /// Input into a terminal amounts to a command the policy would not run.
    #[error(
        "typing into terminal {class:?} is a command, and run_command of it is refused: {reason}"
    )]
    TerminalInputDenied {
        /// The terminal's class.
        class: String,
        /// The policy's reason.
        reason: String,
    },
    /// Input into a terminal amounts to a command the policy would ask about first.
    #[error(
        "typing into terminal {class:?} is a command that needs a confirmation ({reason}); put this desktop primitive in actions.confirm to be asked"
    )]
    TerminalInputNeedsConfirmation {
        /// The terminal's class.
        class: String,
        /// The policy's reason.
        reason: String,
    },
    /// No session bus is known (attach mode without desktop.bus).
    #[error("no session bus is configured for notifications (desktop.bus)")]
    NoBus,
    /// Reading the screen needs OCR, and this build has none (or tesseract did not start).
    #[error("OCR of the desktop is unavailable: {why}")]
    OcrUnavailable {
        /// Why.
        why: String,
    },
    /// OCR did not find the text on the screen (in time, for wait_for_text).
    #[error("{text:?} is not on the screen{waited}")]
    TextNotFound {
        /// The text.
        text: String,
        /// How long it was waited for, if at all.
        waited: String,
    },
}

aido_actions::coded!(DesktopBodyError {
    TerminalInputDenied => "desktop_terminal_input_denied",
    TerminalInputNeedsConfirmation => "desktop_terminal_input_needs_confirmation",
    NoBus => "desktop_no_bus",
    OcrUnavailable => "desktop_ocr_unavailable",
    TextNotFound => "desktop_text_not_found",
});
