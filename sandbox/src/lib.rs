//! aido's confinement core: run one command in a sandbox that is never silently off.
//!
//! # Design
//!
//! One re-exec path. The parent (aido, multi-threaded, tokio) never forks by hand: it spawns
//! its own executable with `std::process::Command` and the reserved `argv[1]`
//! [`CHILD_ARG`], passing the resolved plan over a Unix socket on the child's standard input
//! (no secrets on argv or in the environment). That fresh, single-threaded child unshares the
//! user, mount, pid, ipc, uts and net namespaces and re-executes itself once more as the new
//! pid namespace's init, which builds the mount tree (the host read-only, the writable roots
//! read-write or overlaid, denied paths covered, private `/tmp`, minimal `/dev`, fresh
//! `/proc`), pivots into it, confines itself (setsid, rlimits, no capabilities,
//! no-new-privileges, Landlock with a hard ABI floor, a seccomp deny list) and starts the
//! command. Killing init kills the whole tree; the child does that at the timeout, and the
//! parent kills the child at a backstop. No layer is best effort: a missing kernel feature is
//! [`SpawnError::SandboxUnavailable`] naming it, and nothing runs.
//!
//! Denied paths that do not exist yet: under a read-only part of the host they cannot be
//! created. In overlay mode nothing reaches the host but what the caller applies from the
//! layer, and aido judges each change of the layer by the same deny globs, so nothing is
//! mounted for them. Under a writable root in direct mode, the first missing component gets an
//! empty placeholder directory with an empty read-only tmpfs over it; the parent removes it
//! afterwards if still empty. Globs are
//! expanded over existing entries at spawn time by a [`GlobIndex`] shared by clones of a
//! [`Sandbox`]: the first command walks each root (a few hundred thousand entries in a home
//! with a toolchain, about half a second), later ones `stat` each directory and read only the
//! ones that changed, with the same answer as a full walk. A glob match created by the
//! command itself is for the write judgement of the overlay layer (point 3 of issue 9).
//!
//! Four crates hold what is not the re-exec path itself: aido-confine the per-process layers
//! and cgroups, aido-egress the egress proxy, aido-globs the deny-glob index and aido-changes
//! the reading of an overlay run's layers. This crate re-exports what its callers use, so they
//! name `aido_sandbox::` paths only.
//!
//! # Layers and how each fails
//!
//! | layer | how | when the host lacks it |
//! |---|---|---|
//! | user, mount, pid, ipc, uts, net namespaces | `unshare` in the child; a one-uid map | `sandbox_unavailable` (`user_namespace`, `pid_namespace`, …) |
//! | read-only host | recursive bind of `/`, every mount remounted read-only (flags kept) | `sandbox_setup_failed` (`mount_readonly`) |
//! | writable roots | read-write bind, or overlayfs with an upper layer ([`WriteMode::Overlay`]) | `sandbox_setup_failed` (`mount_writable`) |
//! | denied paths | empty read-only tmpfs / empty file over them, ancestors pinned (no `mv`) | `sandbox_setup_failed` (`mount_deny`) |
//! | `/proc`, `/dev`, `/tmp` | fresh proc of the pid namespace; tmpfs `/dev` with six nodes; tmpfs `/tmp`, `/dev/shm` | `sandbox_setup_failed` |
//! | capabilities, no-new-privs | bounding set, securebits, capset; `PR_SET_NO_NEW_PRIVS` | `sandbox_setup_failed` |
//! | Landlock | read-only `/`, all rights on the roots, no TCP (ABI 4+), scoped signals and abstract sockets (ABI 6+) | `sandbox_unavailable` (`landlock_abi_vN`): a hard floor, never best effort |
//! | seccomp | EPERM deny list (ptrace, mount, namespaces, bpf, io_uring, keyrings, datagram Unix sockets …), `clone3` → ENOSYS, every x32 call (`__X32_SYSCALL_BIT`) → EPERM, another architecture's calls (i386 `int 0x80`) kill the process | `sandbox_unavailable` (`seccomp_filter`) |
//! | connects | the command's `connect` goes to init (a seccomp user notification), which connects it itself: a host Unix socket only when the profile names it ([`Profile::unix_sockets`]), the command's own always (see aido-confine's `connect`) | `sandbox_unavailable` (`seccomp_user_notification`) |
//! | rlimits | nproc, as, fsize, nofile, cpu, core | `sandbox_setup_failed` (`rlimit`) |
//! | cgroup | pids, memory, cpu per spawn: v2 subtree, or v1 on hybrid hosts | `sandbox_unavailable` (`cgroup_v2_pids`, …) when demanded |
//! | environment, fds, session | cleared + allowlist; fds ≥ 3 close-on-exec; `setsid` | — |
//!
//! `RLIMIT_NPROC` does not bind when aido runs as host root (the kernel exempts the init
//! user's processes), so there only [`Profile::cgroup`] bounds a fork bomb; a policy for a
//! root aido should demand it.
//!
//! # Example
//!
//! ```no_run
//! // In aido's main, before anything else (before tokio starts threads):
//! aido_sandbox::run_child_if_requested();
//!
//! let work = std::env::current_dir()?; // the writable root
//! let sandbox = aido_sandbox::Sandbox::new(std::env::current_exe()?);
//! let profile = aido_sandbox::Profile::new(vec![work.clone()]);
//! let request = aido_sandbox::Request::new(["sh", "-c", "echo hi > out.txt"], &work);
//! let outcome = sandbox.run(&profile, &request)?;
//! assert_eq!(outcome.exit, aido_sandbox::Exit::Code(0));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

/// Background commands: started, fed, stopped and waited for apart.
mod background;
/// The sandbox child and init: the re-exec entry points.
mod child;
/// Deny globs of a profile: the index its sandboxes share, warmed ahead of a command.
mod deny;
/// Coded errors and setup steps.
mod error;
/// A background command's port exposed on the host's loopback.
mod expose;
/// What an overlay run changed, with the sandbox's errors.
mod layers;
/// The command's network namespace, in the child: its loopback, the egress proxy's socket.
mod loopback;
/// The mount tree init builds and pivots into.
mod mounts;
/// The pool of empty network namespaces lent to commands without network.
pub mod netns;
/// Resolving a profile and request into the child's plan, in the parent.
mod plan;
/// Profile, request and outcome: the API's data.
mod profile;
/// Frames between parent, child and init.
mod protocol;
/// The parent side: spawn, output caps, timeout backstop.
mod spawn;
/// A session's shared `/tmp` tmpfs.
mod tmp;
/// The explicit escape hatch: a command run without the sandbox (`[processes] unconfined`).
mod unconfined;

pub use aido_changes::{CHANGED_ENTRIES_MAX, Change, ChangeCaps, Upper};
pub use aido_confine::{CgroupLimits, Rlimits, leftovers_of_gone_processes};
/// The egress proxy (aido-egress): a confined command's only way out.
pub use aido_egress as egress;
pub use aido_egress::{EGRESS_PORT, EgressRecord, EgressTotals, Network, ProxyError};
pub use aido_globs::{ExpandStats, set_single_command, single_command};
pub use background::{Control, Ended, OnEnd, Output, StartOptions, Started};
pub use child::{
    BUILD_ID, BUILD_ID_ARG, HELPER_NAME, child_main, host_exe, run_child_if_requested,
};
pub use deny::GlobIndex;
pub use error::{SpawnError, Step};
pub use expose::Exposed;
pub use layers::{check_owned, collect_changes, open_layers};
pub use netns::SharedNetwork;
pub use profile::{
    Exit, LANDLOCK_ABI_KNOWN_MAX, Outcome, Profile, Request, RunAs, Usage, WriteMode,
};
pub use protocol::CHILD_ARG;
pub use spawn::{DRAIN_MS, SETUP_GRACE_MS, Sandbox, discard_standby, settle};
pub use tmp::SharedTmp;
pub use unconfined::run_unconfined;
