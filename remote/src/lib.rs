//! aido's remote and container runners: the libraries behind `ssh_exec`, `run_in_sandbox`
//! and `run_container_group`. Plain async functions over tokio; no actors (the process body
//! in aido-actors wraps them, judges their targets by the policy and journals what they saw).
//!
//! # Design
//!
//! - **ssh** ([`ssh::exec`]): russh, with the host, port, user, pinned host key and private
//!   key file all given by the caller (the policy's `[[ssh.hosts]]`). Nothing is read from
//!   `~/.ssh` (no `config`, no `known_hosts`, no agent). The host key is checked against the
//!   pin (an OpenSSH public key line or a `SHA256:` fingerprint) during the key exchange, before
//!   any authentication: a different key fails closed with `ssh_host_key_mismatch`.
//! - **podman** ([`podman::run`], [`podman::run_group`]): the podman CLI, never its service
//!   socket. Every container runs with `--network=none` (a pod: its own loopback only),
//!   `--read-only`, `--cap-drop=all`, `--security-opt=no-new-privileges`, a pids and a memory
//!   limit, `--pull=never` (only images already on the host, named by the policy), its
//!   environment from a private env file (never on podman's argv), and is removed afterwards
//!   whatever happened. Missing podman is `sandbox_unavailable` naming it: nothing runs
//!   unconfined.
//! - **output** ([`output::Capture`]): both runners keep each stream up to a cap (the rest is
//!   counted) and a bounded list of frames `{seq, stream, t_ms, bytes}`, so the journal holds
//!   when each piece of output came, and playback serves the same result.
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() -> Result<(), aido_remote::ssh::SshError> {
//! let target = aido_remote::ssh::SshTarget {
//!     host: "127.0.0.1".into(),
//!     port: 2222,
//!     user: "ci".into(),
//!     host_key: "SHA256:4bq3...".into(),
//!     key_file: "/etc/aido/ci_ed25519".into(),
//! };
//! let request = aido_remote::ssh::SshRequest::new("uname -a");
//! let outcome = aido_remote::ssh::exec(&target, &request).await?;
//! println!("{:?} {}", outcome.exit, outcome.stdout);
//! # Ok(()) }
//! ```

/// Output caps and frames shared by both runners.
pub mod output;
/// OCI containers and pods through the podman CLI.
pub mod podman;
/// Commands on a policy-named host over SSH (russh).
pub mod ssh;

pub use output::{Capture, Exit, Frame, RemoteOutcome, Stream};
