//! Remote and container primitives, run by the process body: `ssh_exec` (a command on a host
//! the policy names, over SSH with a pinned host key), `run_in_sandbox` (a command in an OCI
//! image through podman, confined) and `run_container_group` (several containers in one pod
//! sharing only its loopback). What they answered is recorded, so playback reproduces each
//! result without connecting or spawning anything.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// Run one command on a host named in the policy's `[[ssh.hosts]]`, over SSH: the host key
/// must be the pinned one and the key is the one the policy names (nothing is read from
/// ~/.ssh). Give `argv` (each word quoted for the remote shell) or `command` (a command line
/// as the remote shell reads it), not both. The remote exit status passes through.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SshExec {
    /// The host's name in the policy (`[[ssh.hosts]] name`, or its `host` when it has no name).
    #[schemars(length(min = 1, max = 253))]
    pub host: String,
    /// The program and its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<String>,
    /// A command line for the remote shell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Text written to the command's standard input, which is then closed (at most 64 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// Wall-clock bound in ms, connection included (default 10000, at most 600000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Standard output kept, in bytes (default and most 64 KiB; the rest is counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_bytes_max: Option<usize>,
    /// Standard error kept, in bytes (default and most 64 KiB; the rest is counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_bytes_max: Option<usize>,
}

impl SshExec {
    /// Largest standard input.
    pub const STDIN_BYTES_MAX: usize = 64 << 10;
}

/// How the workspace is mounted into a container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceMount {
    /// Not mounted.
    None,
    /// Mounted read-only at /workspace (the default); it must be inside the read walls.
    #[default]
    ReadOnly,
    /// Mounted read-write at /workspace; it must be inside the write walls. Writes land on
    /// the host directly: they are not journaled, and a rewind does not undo them.
    ReadWrite,
}

/// One container: an image the policy allows, a command, its environment and limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Container {
    /// The image, exactly as `[containers] images` lists it; it must already be on the host
    /// (aido never pulls).
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// The program and its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<String>,
    /// A shell command line, run with `/bin/sh -c` inside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    /// Variables set inside (secret-looking values are journaled as their blake3 only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Text written to standard input, which is then closed (at most 64 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// The host directory mounted at /workspace (default the session's working directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// `read_only` (the default), `read_write` or `none`.
    #[serde(default)]
    pub mount: WorkspaceMount,
    /// Most processes inside (default and most `[containers] pids_max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub pids_max: Option<u32>,
    /// Most memory inside, in MiB (default and most `[containers] memory_mb_max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 6))]
    pub memory_mb: Option<u32>,
    /// Standard output kept, in bytes (default and most 64 KiB; the rest is counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_bytes_max: Option<usize>,
    /// Standard error kept, in bytes (default and most 64 KiB; the rest is counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_bytes_max: Option<usize>,
    /// Wall-clock bound in ms (default 10000, at most 600000); past it the container is killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

impl Container {
    /// The argv to run: `argv`, or `/bin/sh -c shell`. None when both or neither are given.
    pub fn command_line(&self) -> Option<Vec<String>> {
        match (&self.shell, self.argv.is_empty()) {
            (Some(shell), true) => Some(vec!["/bin/sh".into(), "-c".into(), shell.clone()]),
            (None, false) => Some(self.argv.clone()),
            _ => None,
        }
    }

    /// The workspace as given (`.` is the session's working directory).
    pub fn workspace_given(&self) -> &str {
        self.workspace.as_deref().unwrap_or(".")
    }
}

impl Touches for Container {
    fn touches(&self, out: &mut Vec<Access>) {
        match self.mount {
            WorkspaceMount::None => {}
            WorkspaceMount::ReadOnly => out.push(Access::read(self.workspace_given())),
            WorkspaceMount::ReadWrite => out.push(Access::write(self.workspace_given())),
        }
    }
}

/// Run one command in an OCI image through podman, confined whatever is asked: no network,
/// a read-only root (a private /tmp), every capability dropped, no new privileges, pids and
/// memory limits, the workspace mounted at /workspace only as the walls allow (deny globs
/// inside it hidden), and the container removed afterwards. One container's arguments.
pub type RunInSandbox = Container;

/// Run several containers at once in one podman pod whose network is its own loopback only:
/// they reach each other on 127.0.0.1 and nothing else. Each is confined as run_in_sandbox's
/// is; one result per container, in order; the pod is always removed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunContainerGroup {
    /// The containers (1 to 8), each with its own command, limits and timeout.
    #[schemars(length(min = 1, max = 8))]
    pub containers: Vec<Container>,
}

impl Touches for RunContainerGroup {
    fn touches(&self, out: &mut Vec<Access>) {
        for container in &self.containers {
            container.touches(out);
        }
    }
}

// A remote host is judged by the remote gate (`[[ssh.hosts]]`), not by path walls.
impl Touches for SshExec {
    fn touches(&self, _out: &mut Vec<Access>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_touches_the_workspace_as_its_mode_says() {
        let ro: RunInSandbox =
            serde_json::from_value(serde_json::json!({"image": "i", "argv": ["true"]})).unwrap();
        assert_eq!(ro.mount, WorkspaceMount::ReadOnly);
        let mut out = Vec::new();
        ro.touches(&mut out);
        assert_eq!(out, vec![Access::read(".")]);
        let rw: RunInSandbox = serde_json::from_value(serde_json::json!(
            {"image": "i", "shell": "true", "workspace": "/w", "mount": "read_write"}
        ))
        .unwrap();
        let mut out = Vec::new();
        rw.touches(&mut out);
        assert_eq!(out, vec![Access::write("/w")]);
        assert_eq!(rw.command_line().unwrap(), ["/bin/sh", "-c", "true"]);
    }
}
