//! The process body: commands run confined by `aido-sandbox`, one re-exec of the aido
//! executable per command. The profile comes from the policy (its write walls are the only
//! writable roots, its deny globs and the default secret paths are hidden, the journal too),
//! so a command can touch no more than the filesystem primitives can. A host that lacks a
//! layer refuses the call with `sandbox_unavailable`; nothing ever runs unconfined.
//!
//! Writes go to the write roots directly ([`aido_sandbox::WriteMode::Direct`]): a command's
//! file changes are NOT journaled as effects yet, so a rewind does not undo them. What is
//! journaled is the command, its profile and everything it answered (see
//! [`aido_walk::process`]), which is what playback renders the result from.

/// The actor and its messages.
#[cfg(feature = "prim-process")]
pub mod actor;
/// Dry runs: a copy-on-write layer, read back as a list of changes.
#[cfg(feature = "prim-process")]
mod dry;
/// Building the sandbox's profile and request from the policy and the action.
#[cfg(feature = "prim-process")]
mod profile;
/// Secret environment values kept out of the journaled proposal.
mod redact;

#[cfg(feature = "prim-process")]
pub use actor::{ProcessBody, ProcessBodyArgs, ProcessMsg};
#[cfg(feature = "prim-process")]
pub(crate) use dry::layers_base;
pub(crate) use redact::journaled;

/// Why the process body refused a call before the sandbox saw it.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// Neither or both of `argv` and `shell`, or a bound exceeded.
    #[error("{why}")]
    InvalidCommand {
        /// Why.
        why: String,
    },
    /// The aido executable (the sandbox's re-exec target) could not be found.
    #[error("the aido executable could not be found: {why}")]
    ExecutableMissing {
        /// Why.
        why: String,
    },
}

aido_actions::coded!(ProcessError {
    InvalidCommand => "command_invalid",
    ExecutableMissing => "sandbox_executable_missing",
});
