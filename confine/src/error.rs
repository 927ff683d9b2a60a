//! Why a layer could not be put in place. The sandbox reports each as its own coded error
//! (`sandbox_unavailable`, or `sandbox_setup_failed` naming the step), so these are plain data
//! with the errno as a number.

/// The layer a [`ConfineError::SetupFailed`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// Setting resource limits.
    Rlimit,
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
}

/// A layer that is missing here or failed to set up. There is no variant that means "confined
/// less": every failure refuses the command.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfineError {
    /// The kernel or this machine lacks something the profile requires.
    #[error("sandbox unavailable: {missing} ({detail})")]
    Unavailable {
        /// What is missing, e.g. `landlock_abi_v6`, `seccomp_filter`, `cgroup_v2_pids`.
        missing: String,
        /// What was observed.
        detail: String,
    },
    /// A layer failed for a reason other than a missing feature.
    #[error("sandbox setup failed at {layer:?}: {detail} (errno {errno})")]
    SetupFailed {
        /// The layer that failed.
        layer: Layer,
        /// The errno, or 0 when there is none.
        errno: i32,
        /// What was being done (a path, a value).
        detail: String,
    },
}

impl ConfineError {
    pub(crate) fn setup(layer: Layer, errno: nix::errno::Errno, detail: impl Into<String>) -> Self {
        ConfineError::SetupFailed {
            layer,
            errno: errno as i32,
            detail: detail.into(),
        }
    }

    pub(crate) fn setup_io(
        layer: Layer,
        error: &std::io::Error,
        detail: impl Into<String>,
    ) -> Self {
        ConfineError::SetupFailed {
            layer,
            errno: error.raw_os_error().unwrap_or(0),
            detail: format!("{}: {error}", detail.into()),
        }
    }

    pub(crate) fn unavailable(missing: impl Into<String>, detail: impl Into<String>) -> Self {
        ConfineError::Unavailable {
            missing: missing.into(),
            detail: detail.into(),
        }
    }
}
