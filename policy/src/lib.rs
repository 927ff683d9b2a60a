//! The policy chain: every action is judged here before anything runs.
//!
//! The chain is a single pass over gates in a fixed order, a table of one function per gate
//! (engine/chain.rs: built, grant_refused, always_allow, bodies, mode, action_enabled,
//! pipeline_preflight, path_walls with deny_patterns, net_allowlist, remote_allowlist,
//! capabilities). A denial from any gate wins over a confirmation from an earlier one, and
//! deny patterns win over every allow. The crate is pure apart from one narrow door: path
//! resolution reads file metadata (never contents) through the [`PathResolver`] trait, so
//! symlinks are judged by where they really point and tests or replay can substitute a
//! resolver of their own.
//!
//! ```
//! use aido_actions::Action;
//! use aido_policy::{Config, Environment, FsResolver, PolicyEngine, SessionContext};
//! let dir = tempfile::tempdir().unwrap();
//! let root = dir.path().canonicalize().unwrap();
//! let env = Environment { home: root.clone(), aido_home: root.join(".aido") };
//! let engine = PolicyEngine::new(&Config::default(), &env, &FsResolver).unwrap();
//! let ctx = SessionContext::new(root.clone());
//! let write = Action::from_tool_call("write_file", serde_json::json!({"path": "a.txt", "content": "x"})).unwrap();
//! assert!(engine.evaluate(&write, &ctx, &FsResolver).is_allow());
//! let secret = Action::from_tool_call("read_file", serde_json::json!({"path": "~/.ssh/id_ed25519"})).unwrap();
//! assert!(engine.evaluate(&secret, &ctx, &FsResolver).is_deny());
//! ```

/// Layered configuration: built-in defaults, `~/.aido/config.toml`, `--config`, with provenance.
pub mod config;
/// The engine: the chain of gates in order, and per-path checks reused by the bodies.
pub mod engine;
/// What a capability grant lets a session do (primitives, paths, hosts), and narrowing.
pub mod grant;
/// The net gate: a network action's target judged by `[net] allow` and, for an address, by
/// range.
pub mod net;
/// The remote_allowlist gate: ssh_exec hosts and container images.
pub mod remote;
/// Path resolution: `~`, relative paths, symlinks, `..`, targets that do not exist yet.
pub mod resolve;
/// Simulate: each leaf's verdict and projected side effects, without running anything.
pub mod simulate;

pub use config::{
    AppRule, Config, ConfigError, DesktopServer, DesktopSession, Layered, Limits, Llm, LlmProvider,
    Mode, Net, Ollama, Retention, Source,
};
pub use engine::{
    Admissions, Environment, PathCheck, PathCheckError, PolicyEngine, SessionContext, expand_tilde,
};
pub use resolve::{FsResolver, PathResolver, ResolveError};
pub use simulate::{LeafProjection, Simulation};
