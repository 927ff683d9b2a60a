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

/// The work of each call: commands, background handles, the change set a command left.
#[cfg(feature = "prim-process")]
pub mod actor;
/// The body: its messages, and each call on a task of its own.
#[cfg(feature = "prim-process")]
mod body;
/// Dry runs: a copy-on-write layer, read back as a list of changes.
#[cfg(feature = "prim-process")]
mod dry;
/// Subscriptions and reactions: file changes under the walls, delivered and reacted to.
#[cfg(feature = "prim-process")]
pub(crate) mod events;
/// Background commands: the handle table, output rings, lost handles.
#[cfg(feature = "prim-process")]
pub mod handles;
/// list_processes: the commands aido started and, when the policy allows, the host's.
#[cfg(feature = "prim-process")]
mod listing;
/// Building the sandbox's profile and request from the policy and the action.
#[cfg(feature = "prim-process")]
mod profile;
/// Secret environment values kept out of the journaled proposal.
mod redact;
/// ssh_exec, run_in_sandbox and run_container_group (aido-remote).
#[cfg(feature = "prim-process")]
pub mod remote;
/// The table of file-change subscriptions the shared state holds.
#[cfg(feature = "prim-process")]
pub(crate) mod subscriptions;
/// A session's shared `/tmp`.
#[cfg(feature = "prim-process")]
mod tmp;

#[cfg(feature = "prim-process")]
pub use actor::{Origin, Pending, ProcessBodyArgs, Ran};
#[cfg(feature = "prim-process")]
pub use body::{ProcessBody, ProcessMsg};
#[cfg(feature = "prim-process")]
pub(crate) use dry::layers_base;
#[cfg(feature = "prim-process")]
pub use handles::{HandleTable, LostHandle, recover_lost};
#[cfg(feature = "prim-process")]
pub use profile::expect_commands;
pub(crate) use redact::journaled;
#[cfg(feature = "prim-process")]
pub use tmp::SessionTmps;

/// Where the deny globs' expansion is kept between processes (under `AIDO_HOME`, which no
/// command sees), so `aido exec` and a restarted server check a large home by stamps instead
/// of reading it all again.
#[cfg(feature = "prim-process")]
pub(crate) const DENY_GLOBS_FILE: &str = "cache/deny-globs";
#[cfg(feature = "prim-process")]
pub use remote::RemoteError;

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
    /// A port a background command asked to expose on the host may not be, or could not be.
    #[error("port {port} is not exposed on the host: {why}")]
    ExposeRefused {
        /// The port.
        port: u16,
        /// Why, naming the setting.
        why: String,
    },
}

aido_actions::coded!(ProcessError {
    ExposeRefused => "expose_port_refused",
    InvalidCommand => "command_invalid",
    ChangesRefused => "command_changes_refused",
    ChangeUnsupported => "command_change_unsupported",
    ExecutableMissing => "sandbox_executable_missing",
});

/// Why a call about a background command's handle failed.
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    /// No handle of this aido has this id.
    #[error("no background command has the handle {handle:?}")]
    Unknown {
        /// The id asked for.
        handle: String,
    },
    /// The handle belonged to an earlier aido process, which ended (and its command with it);
    /// its file changes were never applied. The details hold its record.
    #[error(
        "the background command {handle} was lost when the aido process running it ended; its file changes were never applied"
    )]
    Lost {
        /// The id.
        handle: String,
    },
    /// As many background commands as allowed are alive.
    #[error("{max} background commands are alive; stop one first")]
    TooMany {
        /// The bound.
        max: usize,
    },
    /// Its command has ended: there is no input to write.
    #[error("the background command {handle} has ended")]
    Ended {
        /// The id.
        handle: String,
    },
    /// The command does not read its input: the write did not finish in time.
    #[error("the background command {handle} did not take its input within {waited_ms} ms")]
    StdinBlocked {
        /// The id.
        handle: String,
        /// How long it waited.
        waited_ms: u64,
    },
    /// The tree was still there after TERM, KILL and the wait for them.
    #[error("the background command {handle} was still running {waited_ms} ms after TERM and KILL")]
    StopFailed {
        /// The id.
        handle: String,
        /// How long it waited.
        waited_ms: u64,
    },
    /// The handle registry in AIDO_HOME could not be written.
    #[error("the handle registry could not be written: {why}")]
    Registry {
        /// Why.
        why: String,
    },
}

aido_actions::coded!(HandleError {
    Unknown => "handle_unknown",
    Lost => "handle_lost",
    TooMany => "handles_too_many",
    Ended => "handle_ended",
    StdinBlocked => "handle_stdin_blocked",
    StopFailed => "handle_stop_failed",
    Registry => "handle_registry_failed",
});

impl HandleError {
    #[cfg_attr(not(feature = "prim-process"), allow(dead_code))]
    pub(crate) fn into_failure(self) -> aido_actions::Failure {
        let details = match &self {
            HandleError::Unknown { handle }
            | HandleError::Lost { handle }
            | HandleError::Ended { handle }
            | HandleError::StdinBlocked { handle, .. }
            | HandleError::StopFailed { handle, .. } => Some(serde_json::json!({"handle": handle})),
            HandleError::TooMany { .. } | HandleError::Registry { .. } => None,
        };
        let failure = aido_actions::Failure::new(self.code(), self.to_string());
        match details {
            Some(details) => failure.with_details(details),
            None => failure,
        }
    }
}

/// Why a subscription, a reaction or list_processes was refused.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    /// Paths, globs, kinds or bounds out of range.
    #[error("{why}")]
    Invalid {
        /// Why.
        why: String,
    },
    /// The surface this call came over cannot send notifications.
    #[error(
        "this client connection cannot receive notifications, so a subscription could deliver nothing"
    )]
    Undeliverable,
    /// As many subscriptions as allowed are alive in this session.
    #[error("this session holds {max} subscriptions; unsubscribe one first")]
    TooMany {
        /// The bound.
        max: usize,
    },
    /// No subscription of this session has this id (they end with their session, and after
    /// a restart none are left).
    #[error("this session has no subscription {subscription:?}")]
    Unknown {
        /// The id asked for.
        subscription: String,
    },
    /// The watcher could not be started (inotify missing, its watch limit reached).
    #[error("the file watcher could not be started: {why}")]
    WatchFailed {
        /// Why.
        why: String,
    },
    /// A reaction that is not a primitive call that parses, or one that watches itself.
    #[error("the reaction is not valid: {why}")]
    ReactionInvalid {
        /// Why.
        why: String,
    },
    /// A change came over the reaction's rate: it was journaled and not run.
    #[error("over {per_minute} firings a minute")]
    RateLimited {
        /// The rate.
        per_minute: u32,
    },
    /// /proc could not be read for the host's processes.
    #[error("the host's processes could not be read: {why}")]
    ProcUnreadable {
        /// Why.
        why: String,
    },
}

aido_actions::coded!(EventsError {
    Invalid => "events_invalid",
    Undeliverable => "events_undeliverable",
    TooMany => "subscriptions_too_many",
    Unknown => "subscription_unknown",
    WatchFailed => "watch_failed",
    ReactionInvalid => "reaction_invalid",
    RateLimited => "watch_rate_limited",
    ProcUnreadable => "processes_unreadable",
});
