//! The process body: commands run confined by `aido-sandbox`, one re-exec of the aido
//! executable per command. The profile comes from the policy (its write walls are the only
//! writable roots, its deny globs and the default secret paths are hidden, the journal too),
//! so a command can touch no more than the filesystem primitives can. A host that lacks a
//! layer refuses the call with `sandbox_unavailable`; nothing ever runs unconfined.
//!
//! Every command writes into a copy-on-write layer of the write roots
//! ([`aido_sandbox::WriteMode::Overlay`]). A dry run returns what it changed; otherwise the
//! changes are judged here ([`actor::Ran`]) and applied by the filesystem body as journaled
//! effects with before-images (`crate::fs::apply`), so a rewind undoes a command. What is
//! journaled besides is the command, its profile and everything it answered (see
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
pub use actor::{Pending, ProcessBody, ProcessBodyArgs, ProcessMsg, Ran};
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
    /// The command ran, and some of its file changes cannot be taken over: none are applied.
    #[error(
        "the command ran, but {count} of its file changes are refused ({paths}); none were applied (details list each with its code)"
    )]
    ChangesRefused {
        /// How many were refused.
        count: usize,
        /// The first few paths.
        paths: String,
    },
    /// One change the journal cannot take over (listed in `ChangesRefused`'s details).
    #[error("{path}: a {what} cannot be taken over as a journaled change")]
    ChangeUnsupported {
        /// The path.
        path: String,
        /// What it is.
        what: String,
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
    ChangesRefused => "command_changes_refused",
    ChangeUnsupported => "command_change_unsupported",
    ExecutableMissing => "sandbox_executable_missing",
});
