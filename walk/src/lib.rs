//! What live execution and playback share, and nothing that touches the world: no tokio,
//! ractor, QEMU or filesystem.
//!
//! aido's claim is that the journal is the truth, so replaying a session must reproduce every
//! result it recorded. That holds only if both sides run the same code. Here is that code:
//!
//! - [`walk()`] walks an action tree over a [`World`]: the live runtime's bodies (in
//!   `aido-actors`), or the inputs a journal recorded (`aido-replay`'s playback). Composites,
//!   their order, what a failure leaves behind and how a composite's result is built from its
//!   children's are decided once, here.
//! - [`render`] and [`fs::render`] build each primitive's result from its arguments and the
//!   inputs it read; the bodies record those inputs and call these, playback calls them with
//!   the recorded ones.
//! - [`rewind`] plans a rewind from the records alone (the cut, the actions undone, the steps),
//!   for a live rewind, the recovery of an interrupted one, and its playback.
//!
//! ```
//! use aido_walk::walk::join;
//! assert_eq!(join(&join("", "steps[1]"), "then"), "steps[1].then");
//! ```

/// The artifact primitives' results from the artifact body's recorded answer.
pub mod artifact;
/// The browser primitives' results, rendered from the browser body's recorded answers.
pub mod browser;
/// Anthropic's browser toolset: member contracts, page texts, a batch's result.
pub mod browser_toolset;
/// Anthropic's computer-use tools: parameters, coordinate scaling, results from the answer.
pub mod computer;
/// Desktop primitives' results from the desktop body's recorded answer.
pub mod desktop;
/// A downstream tool's result, rendered from the server's recorded answer.
pub mod downstream;
/// The runtime's own failures and a rewind's.
pub mod error;
/// The filesystem primitives' errors and results.
pub mod fs;
/// Asking a human: questions, the no-secrets rule, forms, and results from recorded answers.
pub mod human;
/// The model calls' results (llm_call, ollama_chat, ollama_api), from the recorded exchange.
pub mod llm;
/// Memory primitives' results from the store's recorded answer.
pub mod memory;
/// The network primitives' results, from the recorded exchange (pages converted here).
pub mod net;
/// The result of run_command from what the process body recorded.
pub mod process;
/// ssh_exec, run_in_sandbox and run_container_group results, from what the process body recorded.
pub mod remote;
/// Results of runtime primitives as pure functions of recorded inputs.
pub mod render;
/// Rewind plans from the records.
pub mod rewind;
/// The composite functions' results from the script body's recorded answer.
pub mod script;
/// The results of search_code and search_and_read from what the search body found.
pub mod search;
/// The filesystem body's answers to the workspace's snapshot operations, typed.
pub mod snapshot;
/// diff, render_template and read_logs: results from what was read (`aido-toolbelt`).
pub use aido_toolbelt as tools;
/// The composite walk over a world.
pub mod walk;

pub use error::{RewindError, RuntimeError};
pub use rewind::{RewindPlan, Step, rewind_cut, rewind_plan};
pub use walk::{Answer, Executed, Failed, Walked, World, walk};
