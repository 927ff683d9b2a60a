//! Every way a confined spawn can fail, each with a stable code.
//!
//! The errors cross the process boundary (the sandbox child reports them to the parent over its
//! control socket), so they are plain data: serde, no `io::Error` sources, the errno as a number.

use serde::{Deserialize, Serialize};

/// One step of the sandbox setup, named in [`SpawnError::SetupFailed`] so a failure says where.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Reading the request from the control socket.
    ReadRequest,
    /// Marking inherited descriptors close-on-exec.
    FdHygiene,
    /// `unshare` of the mount, pid, ipc, uts and net namespaces.
    Unshare,
    /// Writing `/proc/self/{setgroups,uid_map,gid_map}`.
    IdMap,
    /// Preparing a command that runs as an unprivileged host user: its supplementary groups
    /// dropped, the idmapping's user namespace, the idmapped walls, the layers' handles.
    RunAs,
    /// Attaching an idmapped wall (or a cover on the way to one).
    MountWall,
    /// Starting the namespace's init (the sandbox's pid 1).
    SpawnInit,
    /// Making the inherited mount tree private.
    MountPrivate,
    /// The scaffolding tmpfs and the first `pivot_root` onto it.
    MountScaffold,
    /// The recursive bind of the host root.
    MountRoot,
    /// Remounting every bound mount read-only.
    MountReadonly,
    /// The private `/tmp` and `/dev/shm`.
    MountTmp,
    /// The minimal `/dev`.
    MountDev,
    /// The fresh `/proc` of the new pid namespace.
    MountProc,
    /// Binding a writable root (or its overlay).
    MountWritable,
    /// Hiding a denied path.
    MountDeny,
    /// The final `pivot_root` and detach of the host tree.
    PivotRoot,
    /// Entering the command's working directory.
    Chdir,
    /// Setting the UTS hostname.
    Hostname,
    /// Setting resource limits.
    Rlimit,
    /// Starting a new session.
    Setsid,
    /// Dropping every capability.
    Capabilities,
    /// `PR_SET_NO_NEW_PRIVS`.
    NoNewPrivs,
    /// Building or enforcing the Landlock ruleset.
    Landlock,
    /// Building or loading the seccomp filter.
    Seccomp,
    /// Creating or joining the cgroup.
    Cgroup,
    /// Feeding the command's standard input.
    Stdin,
    /// Creating a placeholder for a denied path that does not exist yet.
    Placeholder,
    /// The network namespace's loopback and the egress proxy's socket.
    Network,
}

/// Why [`crate::Sandbox::run`] could not run a command confined.
///
/// There is deliberately no variant that means "ran anyway": every failure refuses the command.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "code")]
pub enum SpawnError {
    /// The kernel or this machine lacks something the profile requires.
    #[error("sandbox unavailable: {missing} ({detail})")]
    #[serde(rename = "sandbox_unavailable")]
    SandboxUnavailable {
        /// What is missing, e.g. `user_namespace`, `landlock_abi_v6`, `cgroup_v2_pids`.
        missing: String,
        /// What was observed.
        detail: String,
    },
    /// A setup step failed for a reason other than a missing feature.
    #[error("sandbox setup failed at {step:?}: {detail} (errno {errno})")]
    #[serde(rename = "sandbox_setup_failed")]
    SetupFailed {
        /// The step that failed.
        step: Step,
        /// The errno, or 0 when there is none.
        errno: i32,
        /// What was being done (a path, a value).
        detail: String,
    },
    /// The request or profile is malformed or exceeds a bound.
    #[error("sandbox request invalid: {reason}")]
    #[serde(rename = "sandbox_request_invalid")]
    RequestInvalid {
        /// What is wrong.
        reason: String,
    },
    /// The sandbox was set up but the command could not be executed.
    #[error("{}", exec_failed(program, *errno, path))]
    #[serde(rename = "sandbox_exec_failed")]
    ExecFailed {
        /// `argv[0]`.
        program: String,
        /// The errno of the failed exec (2 = not found, 13 = denied).
        errno: i32,
        /// The `PATH` the command had (searched when `program` has no `/`).
        #[serde(default)]
        path: String,
    },
    /// The sandbox executable could not be started.
    #[error("could not start the sandbox executable {exe}: {detail}")]
    #[serde(rename = "sandbox_launch_failed")]
    LaunchFailed {
        /// The executable that was spawned.
        exe: String,
        /// The error.
        detail: String,
    },
    /// The changes an overlay run left in its upper layer could not be read.
    #[error("the command's changes could not be read at {path}: {detail}")]
    #[serde(rename = "sandbox_changes_unreadable")]
    ChangesUnreadable {
        /// The upper-layer (or host) path.
        path: String,
        /// The error.
        detail: String,
    },
    /// An overlay run changed more than one command's change set may hold (the policy's
    /// caps): nothing of it is applied.
    #[error("the command changed more than {max} {what} ({key}); none of its changes were applied")]
    #[serde(rename = "command_changes_too_large")]
    ChangesTooLarge {
        /// `entries` or `bytes of new contents`.
        what: String,
        /// The cap.
        max: u64,
        /// The setting that sets it.
        key: String,
    },
    /// A layer directory aido did not make exclusively for itself (another owner, or others
    /// may enter it): nothing is read from it or mounted from it.
    #[error("the layer directory {path} is not aido's own: {detail}")]
    #[serde(rename = "sandbox_layers_unsafe")]
    LayersUnsafe {
        /// The directory.
        path: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The sandbox child broke the protocol or died without reporting.
    #[error("sandbox child protocol failure: {detail}")]
    #[serde(rename = "sandbox_protocol_failed")]
    ProtocolFailed {
        /// What went wrong.
        detail: String,
    },
}

impl SpawnError {
    pub(crate) fn setup(step: Step, errno: nix::errno::Errno, detail: impl Into<String>) -> Self {
        SpawnError::SetupFailed {
            step,
            errno: errno as i32,
            detail: detail.into(),
        }
    }

    pub(crate) fn setup_io(step: Step, error: &std::io::Error, detail: impl Into<String>) -> Self {
        SpawnError::SetupFailed {
            step,
            errno: error.raw_os_error().unwrap_or(0),
            detail: format!("{}: {error}", detail.into()),
        }
    }

    pub(crate) fn unavailable(missing: impl Into<String>, detail: impl Into<String>) -> Self {
        SpawnError::SandboxUnavailable {
            missing: missing.into(),
            detail: detail.into(),
        }
    }

    pub(crate) fn invalid(reason: impl Into<String>) -> Self {
        SpawnError::RequestInvalid {
            reason: reason.into(),
        }
    }

    /// The protocol between aido and the sandbox's child failed (or its task did).
    pub fn protocol(detail: impl Into<String>) -> Self {
        SpawnError::ProtocolFailed {
            detail: detail.into(),
        }
    }
}

/// A malformed network is a malformed request.
impl From<aido_egress::NetworkInvalid> for SpawnError {
    fn from(error: aido_egress::NetworkInvalid) -> Self {
        SpawnError::invalid(error.to_string())
    }
}

/// Deny globs that cannot be expanded refuse the request.
impl From<aido_globs::ExpandError> for SpawnError {
    fn from(error: aido_globs::ExpandError) -> Self {
        SpawnError::invalid(error.reason)
    }
}

/// Each way a change set cannot be taken is a code of its own, with the same fields.
impl From<aido_changes::ChangesError> for SpawnError {
    fn from(error: aido_changes::ChangesError) -> Self {
        use aido_changes::ChangesError;
        match error {
            ChangesError::Unreadable { path, detail } => {
                SpawnError::ChangesUnreadable { path, detail }
            }
            ChangesError::TooLarge { what, max, key } => {
                SpawnError::ChangesTooLarge { what, max, key }
            }
            ChangesError::LayersUnsafe { path, detail } => {
                SpawnError::LayersUnsafe { path, detail }
            }
        }
    }
}

/// A missing layer is `sandbox_unavailable`; a failed one `sandbox_setup_failed` at its step.
impl From<aido_confine::ConfineError> for SpawnError {
    fn from(error: aido_confine::ConfineError) -> Self {
        use aido_confine::{ConfineError, Layer};
        match error {
            ConfineError::Unavailable { missing, detail } => {
                SpawnError::SandboxUnavailable { missing, detail }
            }
            ConfineError::SetupFailed {
                layer,
                errno,
                detail,
            } => SpawnError::SetupFailed {
                step: match layer {
                    Layer::Rlimit => Step::Rlimit,
                    Layer::Capabilities => Step::Capabilities,
                    Layer::NoNewPrivs => Step::NoNewPrivs,
                    Layer::Landlock => Step::Landlock,
                    Layer::Seccomp => Step::Seccomp,
                    Layer::Cgroup => Step::Cgroup,
                },
                errno,
                detail,
            },
        }
    }
}

/// A refusal carries the whole error, as the journal and the agent read it.
fn details(error: &SpawnError) -> Option<serde_json::Value> {
    serde_json::to_value(error).ok()
}

aido_codes::coded!(SpawnError {
    @details details;
    SandboxUnavailable => "sandbox_unavailable",
    SetupFailed => "sandbox_setup_failed",
    RequestInvalid => "sandbox_request_invalid",
    ExecFailed => "sandbox_exec_failed",
    LaunchFailed => "sandbox_launch_failed",
    ProtocolFailed => "sandbox_protocol_failed",
    ChangesUnreadable => "sandbox_changes_unreadable",
    ChangesTooLarge => "command_changes_too_large",
    LayersUnsafe => "sandbox_layers_unsafe",
});

/// What a failed exec says: what was run, why it failed, and what to change.
fn exec_failed(program: &str, errno: i32, path: &str) -> String {
    let searched = !program.contains('/');
    match errno {
        libc::ENOENT if searched => format!(
            "command not found: {program} is in no directory of the command's PATH ({path}); \
             the PATH is the user's as [processes] env_inherit passes it, or give one in the \
             call's env, or run the program by its full path"
        ),
        libc::ENOENT => format!(
            "command not found: {program} does not exist in the sandbox (or its interpreter \
             does not); a path outside the walls of [paths] read and write is not visible"
        ),
        libc::EACCES => format!(
            "permission denied executing {program}: not executable, or on a path the sandbox \
             hides ([paths] deny) or does not show ([paths] read)"
        ),
        errno => format!(
            "command could not be executed: {program} ({})",
            std::io::Error::from_raw_os_error(errno)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_table() {
        let table = [
            (
                SpawnError::unavailable("user_namespace", ""),
                "sandbox_unavailable",
            ),
            (
                SpawnError::setup(Step::MountProc, nix::errno::Errno::EPERM, ""),
                "sandbox_setup_failed",
            ),
            (SpawnError::invalid(""), "sandbox_request_invalid"),
            (
                SpawnError::ExecFailed {
                    program: String::new(),
                    errno: 2,
                    path: String::new(),
                },
                "sandbox_exec_failed",
            ),
            (
                SpawnError::LaunchFailed {
                    exe: String::new(),
                    detail: String::new(),
                },
                "sandbox_launch_failed",
            ),
            (SpawnError::protocol(""), "sandbox_protocol_failed"),
            (
                SpawnError::ChangesUnreadable {
                    path: String::new(),
                    detail: String::new(),
                },
                "sandbox_changes_unreadable",
            ),
            (
                SpawnError::ChangesTooLarge {
                    what: String::new(),
                    max: 1,
                    key: String::new(),
                },
                "command_changes_too_large",
            ),
            (
                SpawnError::LayersUnsafe {
                    path: String::new(),
                    detail: String::new(),
                },
                "sandbox_layers_unsafe",
            ),
        ];
        for (error, code) in &table {
            assert_eq!(error.code(), *code);
            // The serialized tag is the code too, so a report read by another process agrees.
            let json = serde_json::to_value(error).unwrap();
            assert_eq!(json["code"], *code);
        }
        let mut codes: Vec<_> = table.iter().map(|(_, code)| *code).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), table.len(), "codes are never reused");
        let mut listed = SpawnError::CODES.to_vec();
        listed.sort_unstable();
        assert_eq!(listed, codes, "CODES lists exactly the codes code() gives");
    }
}
