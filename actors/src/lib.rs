//! The running side of aido: a ractor supervision tree that every action passes through.
//!
//! ```text
//! RuntimeActor (supervisor)
//!  ├── FsBody          the filesystem body: the only code that touches the agent's files
//!  ├── VmBody          the VM body: contained QEMU machines
//!  ├── MemoryBody      the memory body: AIDO_HOME/memory.sqlite, shared by every process
//!  ├── ProcessBody     commands confined by aido-sandbox
//!  ├── SearchBody      code search on aido-search, every entry judged by the walls
//!  ├── DesktopBody     a host display (an owned headless session by default), app rules
//!  └── SessionActor*   one per agent connection: admission, policy, proposal records
//! Journal writer       a dedicated thread owned by the Journal handle (group commit)
//! ```
//!
//! A [`Session::run`] call judges the action (in the session actor, which also journals the
//! proposal with its verdict in one group-committed write), asks a human if the verdict says
//! so, walks the action tree (composites here, leaves in the body), and journals the outcome.
//! The body is supervised: if it panics, the runtime journals a `body_restarted` record and
//! spawns a fresh one, and the call in flight gets a `body_crashed` error instead of hanging.
//!
//! Clock and ids come from [`clock::Clock`], so tests and replay can pin them.

/// The body table: supervision and restarts, generic over every body.
pub mod bodies;
/// The clock and id facade.
pub mod clock;
/// The desktop body: a host display through aido-desktop.
pub mod desktop;
/// Errors of the runtime itself (not of actions).
pub mod error;
/// Walking action trees: composites, meta primitives, progress and cancellation.
mod executor;
/// Fault injection for tests and the seeded simulation.
pub mod faults;
/// The filesystem body.
pub mod fs;
/// What a surface lends a call: asking a human, progress, cancellation.
pub mod hooks;
/// Asking a human: through the surface's form, or stored for `aido answer`
/// (AIDO_HOME/questions.sqlite, shared by every process).
pub mod human;
/// aido's own rotating log, and read_logs.
pub mod logs;
/// The memory body: the shared SQLite memory store in AIDO_HOME.
pub mod memory;
/// The process body: commands confined by aido-sandbox.
pub mod process;
/// Finishing restores and rewinds a crash interrupted.
mod recovery;
/// The runtime handle and its supervising actor.
pub mod runtime;
/// The search body: search_code and search_and_read over the walls.
pub mod search;
/// Session actors and the handle surfaces use.
pub mod session;
/// The state every actor of a runtime shares (the bottom layer).
mod shared;
/// A deadline that travels with a body call.
pub mod ticket;
/// The VM body: contained QEMU machines.
pub mod vm;

pub use aido_walk::render;
pub use aido_walk::tools::ToolError;
pub use aido_walk::{RewindPlan, rewind_cut, rewind_plan};
pub use clock::{Clock, SystemClock};
pub use error::{RewindError, RuntimeError, StartError};
pub use faults::{Faults, Plan as FaultPlan};
pub use hooks::{Asker, ConfirmAnswer, Confirmer, Elicited, Hooks, Progress};
pub use runtime::{Runtime, RuntimeOptions};
pub use session::{Ran, RunError, Session};
