//! The toolbelt's results as pure functions of their arguments and what was read: `diff`,
//! `render_template` and `read_logs`. The filesystem body and the executor read (judging each
//! path first) and record; playback calls the same functions with the recorded inputs.
//! `aido-walk` re-exports it as `aido_walk::tools`.

/// diff.
pub mod diff;
/// The toolbelt's error codes.
pub mod error;
/// read_logs, the activity lines and RFC 3339 times.
pub mod logs;
/// Secrets out of log text.
pub mod redact;
/// render_template on MiniJinja, sandboxed.
pub mod template;

pub use error::ToolError;
