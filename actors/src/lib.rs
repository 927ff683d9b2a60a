//! The running side of aido: a ractor supervision tree that every action passes through.
//!
//! ```text
//! RuntimeActor (supervisor)
//!  ├── FsBody          the filesystem body: the only code that touches the agent's files
//!  ├── VmBody          the VM body: contained QEMU machines
//!  ├── MemoryBody      the memory body: AIDO_HOME/memory.sqlite, shared by every process
//!  ├── ProcessBody     commands confined by aido-sandbox
//!  ├── SearchBody      code search on aido-search, every entry judged by the walls
//!  ├── NetBody         HTTP and TCP to allowlisted hosts, every address and hop judged
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
//!
//! # Embedding aido in a program
//!
//! The runtime is a library: open a journal, start a [`Runtime`] over a policy, open a
//! [`Session`], run actions through it, and read what it journaled. This is everything
//! `aido mcp` and `aido serve` do around their transports (built and run by
//! `cargo test --doc -p aido-actors`):
//!
//! ```
//! use std::sync::Arc;
//! use aido_actions::Action;
//! use aido_actors::{Hooks, Runtime, RuntimeOptions, SystemClock};
//! use aido_journal::{CommitMode, Journal, Limits};
//! use aido_policy::{Environment, Layered, Source};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let (home, aido_home) = (dir.path().join("home"), dir.path().join("aido"));
//! std::fs::create_dir_all(&home)?;
//! // The policy: the defaults with the workdir set, as config.toml would say it.
//! let toml = format!("workdir = \"{}\"\n", home.display());
//! let config = Layered::from_layers(&[(Source::File("embedded".into()), &toml)])?.config;
//! let tokio = tokio::runtime::Runtime::new()?;
//! tokio.block_on(async {
//!     let journal = Journal::open(&aido_home.join("journal"), Limits::default(), CommitMode::Group)?;
//!     let runtime = Runtime::start(RuntimeOptions {
//!         config,
//!         env: Environment { home: home.clone(), aido_home: aido_home.clone() },
//!         journal: journal.clone(),
//!         clock: Arc::new(SystemClock::default()),
//!     })
//!     .await?;
//!     let session = runtime.open_session(Some("my-program".into())).await?;
//!
//!     // An action, exactly as an agent's tools/call would give it: judged, journaled, run.
//!     let write = Action::from_tool_call(
//!         "write_file",
//!         serde_json::json!({"path": "hello.txt", "content": "from a library\n"}),
//!     )?;
//!     let ran = session.run(write, Hooks::default()).await.map_err(|e| e.failure.message)?;
//!     assert_eq!(std::fs::read_to_string(home.join("hello.txt"))?, "from a library\n");
//!
//!     // A refusal is an error with its gate, journaled like the rest.
//!     let outside = Action::from_tool_call("read_file", serde_json::json!({"path": "/etc/shadow"}))?;
//!     let denied = session.run(outside, Hooks::default()).await.err().ok_or("not refused")?;
//!     assert!(denied.gate.is_some());
//!
//!     // The journal: the session's records, hash-chained, from its start.
//!     session.close("done").await;
//!     let records = journal.all_records(session.id())?;
//!     assert!(records.iter().any(|r| r.seq == ran.seq));
//!     assert_eq!(records.last().map(|r| r.event.kind()), Some("session_ended"));
//!     assert!(journal.verify(session.id())?.broken.is_none());
//!     runtime.shutdown().await;
//!     Ok::<_, Box<dyn std::error::Error>>(())
//! })?;
//! # Ok(())
//! # }
//! ```

/// The artifact body: pages an agent made, kept in AIDO_HOME/artifacts and served on
/// 127.0.0.1 behind a sandboxing CSP.
#[cfg(feature = "prim-artifact")]
pub mod artifact;
/// The body table: supervision and restarts, generic over every body (`aido-context`'s).
pub use aido_context::bodies;
/// One call's context, and the way it starts child actions (`aido-context`'s).
pub(crate) use aido_context::call;
/// A page's downloads, landed in the walls as a journaled change set.
#[cfg(feature = "prim-browser")]
mod browser_downloads;
/// A change set applied as part of an action: staged, marked, applied.
#[cfg(any(
    feature = "prim-process",
    feature = "prim-artifact",
    feature = "prim-browser"
))]
mod change_sets;
/// The browser body: one headless Chromium per session through aido-browser.
#[cfg(feature = "prim-browser")]
pub use aido_body_browser as browser;
/// The desktop body: a host display through aido-desktop.
#[cfg(feature = "prim-desktop")]
pub use aido_body_desktop as desktop;
/// The gateway body: the downstream MCP servers of `[[downstream]]`.
#[cfg(feature = "prim-gateway")]
pub use aido_body_gateway as gateway;
/// The clock and id facade (`aido-call`'s).
pub use aido_call::clock;
/// Errors of the runtime itself (not of actions) (`aido-context`'s).
pub use aido_context::error;
/// Walking action trees: composites, meta primitives, progress and cancellation.
mod executor;
/// Which primitive families (cargo features `prim-*`) this build holds.
pub mod families;
/// A downstream call's progress and questions, relayed to the call's surface.
#[cfg(feature = "prim-gateway")]
mod gateway_relay;
/// The filesystem body (`aido-body-fs`).
pub use aido_body_fs as fs;
/// Fault injection for tests and the seeded simulation (`aido-call`'s).
pub use aido_call::faults;
/// Capability grants: the store, a use per action of a granted session, the grant primitives.
pub mod grants;
/// What a surface lends a call: asking a human, progress, cancellation (`aido-context`'s).
pub use aido_context::hooks;
/// Asking a human: through the surface's form, or stored for `aido answer`
/// (AIDO_HOME/questions.sqlite, shared by every process) (`aido-human`).
#[cfg(feature = "prim-human")]
pub use aido_human as human;
/// aido's own rotating log, and read_logs.
pub mod logs;
/// The memory body: the shared SQLite memory store in AIDO_HOME (`aido-body-memory`).
#[cfg(feature = "prim-memory")]
pub use aido_body_memory as memory;
/// The net body: http_request, fetch_url, port_check, dns_lookup, every address judged
/// (`aido-body-net`).
#[cfg(feature = "prim-net")]
pub use aido_body_net as net;
/// The process body: commands confined by aido-sandbox (`aido-body-process`).
#[cfg(feature = "prim-process")]
pub use aido_body_process as process;
/// What the runtime tells an observer (telemetry) about each action and journal write
/// (`aido-context`'s).
pub use aido_context::observe;
/// Subscriptions and reactions: file changes under the walls, delivered and reacted to
/// (`aido-events`).
#[cfg(feature = "prim-process")]
use aido_events as events;
/// Finishing restores and rewinds a crash interrupted.
mod recovery;
/// Secret environment values kept out of the journaled proposal.
mod redact;
/// The runtime handle and its supervising actor.
pub mod runtime;
/// The search body: search_code and search_and_read over the walls (`aido-body-search`).
#[cfg(feature = "prim-search")]
pub use aido_body_search as search;
/// The script body: composite functions and custom primitives (Rhai), their host calls
/// child actions; definitions in AIDO_HOME/scripts (`aido-script`).
#[cfg(feature = "prim-script")]
pub use aido_script as script;
/// Session actors and the handle surfaces use.
pub mod session;
/// The VM body: contained QEMU machines.
#[cfg(feature = "prim-vm")]
pub use aido_body_vm as vm;
/// A deadline that travels with a body call (`aido-call`'s).
pub use aido_call::ticket;
/// The state every actor of a runtime shares (`aido-context`'s).
pub(crate) use aido_context::shared;

pub use aido_grants::TOKEN_PREFIX as GRANT_TOKEN_PREFIX;
pub use aido_walk::computer::ComputerError;
pub use aido_walk::render;
pub use aido_walk::tools::ToolError;
pub use aido_walk::{RewindPlan, rewind_cut, rewind_plan};
pub use clock::{Clock, SystemClock};
pub use error::{RewindError, RuntimeError, StartError};
pub use faults::{Faults, Plan as FaultPlan};
pub use hooks::{Asker, ConfirmAnswer, Confirmer, Elicited, Hooks, Notifier, Progress};
pub use observe::{ActionReport, CommitReport, Judged, Observer};
pub use runtime::{Runtime, RuntimeOptions};
pub use session::{Ran, RunError, Session};
