//! Host desktops for aido agents, with no actors: the desktop body (in aido-actors) drives one
//! [`Desktop`] on the blocking pool.
//!
//! The design decision: a backend is chosen by probing what the display server offers (its
//! Wayland globals and IPC socket for `wlr`, its X extensions for `x11`), never by
//! environment variables alone, because a variable can point at a server that accepts input and drops it (XWayland
//! under a compositor that ignores XTEST: the input "succeeds" and goes nowhere). A feature
//! the server lacks is a coded [`DesktopError`]; input the server did not accept is never
//! reported as done. By default aido drives a session of its own ([`session::OwnedSession`]:
//! Xvfb and a window manager, or a headless sway, and a D-Bus bus in a private runtime
//! directory); attaching to a live
//! display is an explicit opt-in ([`SessionMode::Attach`]).
//!
//! ```no_run
//! use aido_desktop::{Desktop, Options, SessionMode, Limits, gate::Rules, session::SessionOptions};
//! let mut desktop = Desktop::open(Options {
//!     session: SessionMode::Owned(SessionOptions::default()),
//!     rules: Rules::default(),
//!     limits: Limits::default(),
//! })?;
//! let shot = desktop.screenshot()?;
//! assert!(shot.png.starts_with(b"\x89PNG"));
//! # Ok::<(), aido_desktop::DesktopError>(())
//! ```

/// What every backend offers: windows, frames, events, capabilities.
pub mod backend;
/// The desktop the body drives: gates around every batch, the primitives.
pub mod desktop;
/// The error enum and its codes.
pub mod error;
/// Which windows may be driven or seen, and which are terminals.
pub mod gate;
/// Keys as keysyms, chords, and the chords never sent.
pub mod keys;
/// Notifications over D-Bus.
pub mod notify;
/// Owned headless sessions.
pub mod session;
/// The sway / i3 IPC (window tree and focus).
pub mod sway;
/// The wlr backend (wlroots Wayland compositors).
pub mod wlr;
/// The X11 backend.
pub mod x11;

pub use backend::{Button, Capabilities, Direction, Frame, Rect, Window};
pub use desktop::{
    Delivered, Desktop, Gesture, KeyTarget, Limits, Options, SessionMode, Shot, doctor,
};
pub use error::DesktopError;
