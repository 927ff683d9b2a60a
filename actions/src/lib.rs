//! The vocabulary of aido: every request an agent can make is a variant of [`Action`].
//!
//! Actions are plain data. This crate does no I/O, reads no clock and spawns nothing, so the
//! same values can be judged by the policy, journaled, simulated and replayed deterministically.
//! Every primitive is declared once, in the `actions!` table in [`action`]; its class, its JSON
//! schema, its MCP tool and its parser all come from that one line.
//!
//! ```
//! use aido_actions::{Action, SideEffectClass};
//! let action = Action::from_tool_call("read_file", serde_json::json!({"path": "notes.txt"})).unwrap();
//! assert_eq!(action.class(), SideEffectClass::ReadOnly);
//! assert_eq!(action.primitive(), "read_file");
//! ```

/// What an action touches: paths read, written and deleted, for the policy and simulate.
pub mod access;
/// The `Action` enum, the primitive table and tool-call parsing.
pub mod action;
/// Artifact primitives: artifact_create, artifact_list, artifact_serve, artifact_save,
/// artifact_stop, artifact_destroy.
pub mod artifact;
/// Browser primitives: navigate, tabs, click, type, fill, wait, snapshot, text, screenshot.
pub mod browser;
/// Change sets: what a command changed, path by path, before and after.
pub mod changes;
/// Side-effect classes and the MCP hints derived from them.
pub mod class;
/// Stable error codes, declared once per error enum (`coded!`): `aido-codes`.
pub use aido_codes as codes;
pub use aido_codes::{Coded, coded};
/// Anthropic's computer-use tools (the legacy `computer` tool and the 2026 toolset), shared by
/// every screen.
pub mod computer;
/// Conditions used by `if` and `assert`.
pub mod condition;
/// Host desktop primitives: screenshot, click, type_text, windows, clipboard, notifications.
pub mod desktop;
/// Calls of downstream MCP servers' tools through the gateway.
pub mod downstream;
/// Events and processes: subscribe, unsubscribe, list_subscriptions, watch_and_react,
/// list_processes.
pub mod events;
/// Filesystem primitives.
pub mod fs;
/// Asking a human: ask_human, confirm, ask_multiple_choice, check_answer.
pub mod human;
/// Memory primitives: remember, recall, forget, list_memory.
pub mod memory;
/// Meta primitives: questions an agent asks about its own session.
pub mod meta;
/// Network primitives: http_request, fetch_url, port_check, dns_lookup.
pub mod net;
/// What a finished action returns: output, effects and the nondeterministic inputs it saw.
pub mod outcome;
/// Process primitives: confined commands.
pub mod process;
/// Secrets out of an action before it is journaled: a typed step that cannot fail open.
pub mod redact;
/// ssh_exec, run_in_sandbox, run_container_group: remote hosts and containers.
pub mod remote;
/// Safety primitives: simulate, policy_check, pipeline, try, if, assert, validate, safe_change.
pub mod safety;
/// Composite functions: define_function, call_function, ... and the custom primitives.
pub mod script;
/// Code search primitives: search_code, search_and_read.
pub mod search;
/// Snapshots, rewind and recorded randomness.
pub mod snapshot;
/// The toolbelt: diff, render_template, read_logs.
pub mod tools;
/// Toolsets and profiles: which primitives a client is given.
pub mod toolsets;
/// The policy chain's answer, shared by the policy, the journal and every surface.
pub mod verdict;
/// Machine (QEMU) primitives.
pub mod vm;

pub use access::{Access, AccessKind};
pub use action::{
    Action, ArtifactAction, Body, BrowserAction, DesktopAction, FsAction, GatewayAction,
    HumanAction, MemoryAction, NetAction, ParseError, PrimitiveSpec, ProcessAction, Routed,
    RuntimeAction, ScriptAction, SearchAction, TreeAction, VmAction, primitives,
};
pub use class::SideEffectClass;
pub use condition::Condition;
pub use outcome::{Before, Effect, Failure, Image, Input, Meta, Outcome};
pub use verdict::{DenyCode, Verdict};
