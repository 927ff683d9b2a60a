//! The layers of confinement the kernel enforces on a sandboxed command: what its init applies
//! to itself before it starts the command, which inherits them (resource limits, no
//! capabilities, no-new-privileges, Landlock, a seccomp deny list), the seccomp user
//! notification through which init judges every `connect` of the command, and the cgroup that
//! bounds the whole tree.
//!
//! # Design
//!
//! No layer is best effort. A layer the kernel lacks is [`ConfineError::Unavailable`] naming
//! it (`landlock_abi_v6`, `seccomp_filter`, `cgroup_v2_pids`), one that fails is
//! [`ConfineError::SetupFailed`] naming the [`Layer`], and the sandbox (aido-sandbox, which
//! runs these in its child and init) refuses the command either way: nothing runs less
//! confined than its profile says. The seccomp filters are compiled once per parent process
//! ([`seccomp_wire`]) and travel to init in the plan, so init only loads them.
//!
//! # Example
//!
//! ```no_run
//! // In init, after the mount tree and before exec; each call is irreversible.
//! aido_confine::set_rlimits(&aido_confine::Rlimits::default())?;
//! aido_confine::drop_capabilities()?;
//! aido_confine::no_new_privs()?;
//! aido_confine::landlock(6, &[std::path::PathBuf::from("/work")])?;
//! aido_confine::seccomp(&aido_confine::seccomp_wire()?)?;
//! # Ok::<(), aido_confine::ConfineError>(())
//! ```

/// cgroup v1/v2 limits on the whole tree, one cgroup per spawn.
mod cgroup;
/// Every connect of a command judged by init: host Unix sockets only when the policy names them.
mod connect;
/// Why a layer could not be put in place.
mod error;
/// Per-process layers: rlimits, capabilities, no-new-privileges, Landlock, seccomp.
mod layers;

pub use cgroup::{Cgroup, CgroupLimits, Hierarchy, leftovers_of_gone_processes};
pub use connect::{Judge, program as connect_program};
pub use error::{ConfineError, Layer};
pub use layers::{
    Instruction, PreparedLandlock, RLIMIT_UNLIMITED, Rlimits, drop_capabilities, landlock,
    no_new_privs, seccomp, seccomp_wire, set_rlimits,
};
