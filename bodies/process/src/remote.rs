//! ssh_exec, run_in_sandbox and run_container_group in the process body: the policy's entry
//! (host or images and limits) looked up again, the call's bounds checked, the runner of
//! `aido-remote` called, and everything it answered recorded as the call's input (see
//! [`aido_walk::remote`]), which is what the result and playback are rendered from.

use std::path::{Path, PathBuf};

use aido_actions::remote::{Container, RunContainerGroup, SshExec, WorkspaceMount};
use aido_actions::{AccessKind, Failure, Input};
use aido_policy::{FsResolver, PolicyEngine, SessionContext};
use aido_remote::podman::{ContainerOutcome, ContainerSpec, Mount, Podman};
use aido_remote::ssh::{SshRequest, SshTarget};
use aido_walk::process::{ANSWERED_BY, EnvValue};
use serde_json::{Value, json};

use super::actor::{Pending, ProcessBodyArgs, Ran, take_over};
use super::dry::Layers;
use aido_body_fs::Executed;
use aido_call::ticket::Ticket;

/// Why a remote or container call was refused before it ran.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// A bound exceeded, neither or both of argv and a command line, a bad limit.
    #[error("{why}")]
    Invalid {
        /// Why.
        why: String,
    },
    /// The workspace holds more entries than are examined for deny globs.
    #[error(
        "the workspace {path} holds more than {max} entries to examine for deny globs; mount a smaller directory"
    )]
    WorkspaceTooLarge {
        /// The workspace.
        path: String,
        /// The bound.
        max: usize,
    },
}

aido_actions::coded!(RemoteError {
    Invalid => "remote_call_invalid",
    WorkspaceTooLarge => "container_workspace_too_large",
});

impl RemoteError {
    fn into_failure(self) -> Failure {
        Failure::new(self.code(), self.to_string())
    }
}

fn invalid(why: impl Into<String>) -> Failure {
    RemoteError::Invalid { why: why.into() }.into_failure()
}

/// Where a workspace appears inside a container.
const WORKSPACE_IN_CONTAINER: &str = "/workspace";
/// Most workspace entries examined for deny-glob matches to hide.
const WORKSPACE_ENTRIES_MAX: usize = 200_000;
/// Default wall-clock bound.
const TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Largest wall-clock bound.
const TIMEOUT_MS_MAX: u64 = 600_000;
/// Largest standard input.
const STDIN_BYTES_MAX: usize = 64 << 10;

fn timeout_of(asked: Option<u64>) -> Result<u64, Failure> {
    let timeout_ms = asked.unwrap_or(TIMEOUT_MS_DEFAULT);
    if timeout_ms == 0 || timeout_ms > TIMEOUT_MS_MAX {
        return Err(invalid(format!("timeout_ms must be 1 to {TIMEOUT_MS_MAX}")));
    }
    Ok(timeout_ms)
}

fn stdin_of(text: &Option<String>) -> Result<Vec<u8>, Failure> {
    let bytes = text.clone().unwrap_or_default().into_bytes();
    if bytes.len() > STDIN_BYTES_MAX {
        return Err(invalid(format!("stdin is over {STDIN_BYTES_MAX} bytes")));
    }
    Ok(bytes)
}

fn committed(ticket: &Ticket) -> Result<(), Failure> {
    if ticket.commit() {
        Ok(())
    } else {
        Err(Failure::new(
            "body_timeout",
            "the call was abandoned before it ran",
        ))
    }
}

fn answered(outcome: aido_actions::Outcome, record: Value) -> Ran {
    let mut executed = Executed::new(outcome);
    executed.outcome.inputs.push(Input::Answer {
        from: ANSWERED_BY.into(),
        value: record,
    });
    Ran {
        executed,
        pending: None,
    }
}

fn merge(into: &mut Value, from: Value) {
    if let (Value::Object(into), Value::Object(from)) = (into, from) {
        into.extend(from);
    }
}

/// `ssh_exec`: the host as the policy names it, the command, its output and exit.
pub async fn ssh_exec(
    args: &ProcessBodyArgs,
    ssh: &SshExec,
    ticket: &Ticket,
    output_bytes_max: usize,
) -> Result<Ran, Failure> {
    // The gate admitted the name; the entry is read again from the same policy.
    let Some(host) = aido_policy::remote::ssh_host(args.policy.config(), &ssh.host) else {
        return Err(Failure::new(
            aido_actions::DenyCode::SshHostNotAllowed.code(),
            format!("no [ssh] hosts entry is named {}", ssh.host),
        ));
    };
    let command = match (&ssh.command, ssh.argv.is_empty()) {
        (Some(command), true) if !command.is_empty() => command.clone(),
        (None, false) => aido_remote::ssh::shell_join(&ssh.argv),
        _ => return Err(invalid("give exactly one of argv (non-empty) and command")),
    };
    let cap = |asked: Option<usize>| asked.unwrap_or(output_bytes_max).min(output_bytes_max);
    let request = SshRequest {
        command,
        stdin: stdin_of(&ssh.stdin)?,
        timeout_ms: timeout_of(ssh.timeout_ms)?,
        stdout_bytes_max: cap(ssh.stdout_bytes_max),
        stderr_bytes_max: cap(ssh.stderr_bytes_max),
    };
    let target = SshTarget {
        host: host.host.clone(),
        port: host.port,
        user: host.user.clone(),
        host_key: host.host_key.clone(),
        key_file: PathBuf::from(&host.key_file),
    };
    let pinned =
        aido_remote::ssh::pin_fingerprint(host.called(), &host.host_key).map_err(Failure::from)?;
    committed(ticket)?;
    let outcome = aido_remote::ssh::exec(&target, &request)
        .await
        .map_err(Failure::from)?;
    let mut record = json!({
        "host": host.called(),
        "address": host.host,
        "port": host.port,
        "user": host.user,
        "host_key": pinned,
        "key_file": host.key_file,
        "command": request.command,
        "stdin_bytes": request.stdin.len(),
        "timeout_ms": request.timeout_ms,
    });
    merge(
        &mut record,
        serde_json::to_value(&outcome).unwrap_or_default(),
    );
    Ok(answered(aido_walk::remote::ssh_ran(&record), record))
}

/// One container's spec and its journaled start (image, argv, env with secret values hashed,
/// the mount, the confinement), the workspace judged by the walls again and its deny-glob
/// matches hidden. A `read_write` workspace is mounted over the copy-on-write `layer` (made
/// here): the container's writes land there, and the workspace it returns (the third value)
/// is the host directory they are taken over into.
#[allow(clippy::too_many_lines)]
fn container_of(
    args: &ProcessBodyArgs,
    container: &Container,
    session: &SessionContext,
    output_bytes_max: usize,
    (empty_dir, layer): (&Path, &Path),
) -> Result<(ContainerSpec, Value, Option<PathBuf>), Failure> {
    let config = &args.policy.config().containers;
    if !config.images.iter().any(|image| image == &container.image) {
        return Err(Failure::new(
            aido_actions::DenyCode::ContainerImageNotAllowed.code(),
            format!(
                "the image {} is not listed in [containers] images",
                container.image
            ),
        ));
    }
    let argv = container
        .command_line()
        .ok_or_else(|| invalid("give exactly one of argv (non-empty) and shell"))?;
    let pids_max = container.pids_max.unwrap_or(config.pids_max);
    let memory_mb = container.memory_mb.unwrap_or(config.memory_mb_max);
    if pids_max == 0 || pids_max > config.pids_max {
        return Err(invalid(format!(
            "pids_max must be 1 to {}",
            config.pids_max
        )));
    }
    if !(6..=config.memory_mb_max).contains(&memory_mb) {
        return Err(invalid(format!(
            "memory_mb must be 6 to {}",
            config.memory_mb_max
        )));
    }
    let mut mounts = Vec::new();
    let mut workspace = Value::Null;
    let mut hidden = Vec::new();
    let mut written = None;
    if container.mount != WorkspaceMount::None {
        let kind = match container.mount {
            WorkspaceMount::ReadWrite => AccessKind::Write,
            _ => AccessKind::Read,
        };
        let resolved = args
            .policy
            .check_path(container.workspace_given(), kind, session, &FsResolver)
            .map_err(|refusal| Failure::new(refusal.code().code(), refusal.to_string()))?
            .resolved;
        if !resolved.is_dir() {
            return Err(invalid(format!(
                "the workspace {} is not a directory",
                resolved.display()
            )));
        }
        let read_only = container.mount != WorkspaceMount::ReadWrite;
        if !read_only {
            for part in ["upper", "work"] {
                std::fs::create_dir_all(layer.join(part)).map_err(|e| {
                    Failure::new(
                        "sandbox_setup_failed",
                        format!("the workspace's layer {}: {e}", layer.display()),
                    )
                })?;
            }
            written = Some(resolved.clone());
        }
        mounts.push(Mount {
            host: resolved.clone(),
            container: WORKSPACE_IN_CONTAINER.into(),
            read_only,
            layer: (!read_only).then(|| layer.to_owned()),
        });
        for (path, is_dir) in hidden_within(&args.policy, &args.hidden, &resolved)? {
            let inside = format!(
                "{WORKSPACE_IN_CONTAINER}/{}",
                path.strip_prefix(&resolved).unwrap_or(&path).display()
            );
            hidden.push(inside.clone());
            mounts.push(Mount {
                host: if is_dir {
                    empty_dir.to_owned()
                } else {
                    PathBuf::from("/dev/null")
                },
                container: inside,
                read_only: true,
                layer: None,
            });
        }
        workspace = json!(resolved);
    }
    let cap = |asked: Option<usize>| asked.unwrap_or(output_bytes_max).min(output_bytes_max);
    let spec = ContainerSpec {
        image: container.image.clone(),
        argv,
        env: container.env.clone(),
        workdir: (container.mount != WorkspaceMount::None)
            .then(|| WORKSPACE_IN_CONTAINER.to_owned()),
        mounts,
        pids_max,
        memory_bytes: u64::from(memory_mb) << 20,
        stdin: stdin_of(&container.stdin)?,
        timeout_ms: timeout_of(container.timeout_ms)?,
        stdout_bytes_max: cap(container.stdout_bytes_max),
        stderr_bytes_max: cap(container.stderr_bytes_max),
    };
    // Kept as a command's record keeps its environment: secret-looking values as their blake3.
    let env: std::collections::BTreeMap<&String, EnvValue> = spec
        .env
        .iter()
        .map(|(name, value)| (name, EnvValue::journaled(name, value)))
        .collect();
    let record = json!({
        "image": spec.image,
        "argv": spec.argv,
        "env": env,
        "workspace": workspace,
        "mount": container.mount,
        "stdin_bytes": spec.stdin.len(),
        "timeout_ms": spec.timeout_ms,
        "profile": {
            "network": "none",
            "read_only_root": true,
            "cap_drop": "all",
            "no_new_privileges": true,
            "pull": "never",
            "pids_max": spec.pids_max,
            "memory_bytes": spec.memory_bytes,
            "runtime": config.runtime,
            "hidden": hidden,
            // A read-write workspace's writes go to a layer and are applied after the run as
            // journaled effects (file_changes_journaled in the result).
            "workspace_writes": if written.is_some() { "layer" } else { "none" },
        },
    });
    Ok((spec, record, written))
}

/// The changes the containers of a run made to their read-write workspaces (the layer of
/// `roots[i]` in `layers/i`), taken over for the executor to apply; none without one. A
/// refusal's details show the run's result, as `render` makes it from `record`.
async fn taken_over(
    args: &ProcessBodyArgs,
    session: &SessionContext,
    (layers, roots): (Layers, Vec<PathBuf>),
    record: &mut Value,
    render: fn(&Value) -> aido_actions::Outcome,
) -> Result<Option<Pending>, Failure> {
    if roots.iter().all(|root| root.as_os_str().is_empty()) {
        return Ok(None);
    }
    record["file_changes_journaled"] = json!(true);
    let (args, session, shown) = (args.clone(), session.clone(), render(record).output);
    tokio::task::spawn_blocking(move || take_over(&args, &session, layers, &roots, &shown))
        .await
        .map_err(|error| Failure::from(aido_sandbox::SpawnError::protocol(error.to_string())))?
        .map(Some)
}

fn layers_of(args: &ProcessBodyArgs) -> Result<Layers, Failure> {
    Layers::new(&args.layers).map_err(|error| Layers::failure(&args.layers, error))
}

/// The entries under `root` a container must not see: every one a deny glob matches (a
/// directory's match hides all below it) and aido's own directories. Links are not followed
/// (inside the container a link resolves within the container).
fn hidden_within(
    policy: &PolicyEngine,
    aido_dirs: &[PathBuf],
    root: &Path,
) -> Result<Vec<(PathBuf, bool)>, Failure> {
    let mut out: Vec<(PathBuf, bool)> = aido_dirs
        .iter()
        .filter_map(|dir| dir.canonicalize().ok())
        .filter(|dir| dir.starts_with(root) && dir != root)
        .map(|dir| (dir, true))
        .collect();
    let mut stack = vec![root.to_owned()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > WORKSPACE_ENTRIES_MAX {
                return Err(RemoteError::WorkspaceTooLarge {
                    path: root.display().to_string(),
                    max: WORKSPACE_ENTRIES_MAX,
                }
                .into_failure());
            }
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if out.iter().any(|(hidden, _)| path.starts_with(hidden)) {
                continue;
            }
            if policy.denied_by_pattern(&path).is_some() {
                out.push((path, kind.is_dir()));
            } else if kind.is_dir() {
                stack.push(path);
            }
        }
    }
    Ok(out)
}

async fn podman_of(args: &ProcessBodyArgs) -> Result<Podman, Failure> {
    let config = &args.policy.config().containers;
    Podman::locate(&config.podman, &config.runtime)
        .await
        .map_err(Failure::from)
}

fn ended(record: &mut Value, outcome: &ContainerOutcome, podman: &Podman) {
    merge(record, serde_json::to_value(outcome).unwrap_or_default());
    record["profile"]["podman"] = json!(podman.version());
}

/// `run_in_sandbox`.
pub async fn run_in_sandbox(
    args: &ProcessBodyArgs,
    container: &Container,
    session: &SessionContext,
    ticket: &Ticket,
    output_bytes_max: usize,
) -> Result<Ran, Failure> {
    let empty = tempfile::Builder::new()
        .prefix("aido-hide-")
        .tempdir()
        .map_err(|e| invalid(format!("a private directory: {e}")))?;
    let layers = layers_of(args)?;
    let (spec, mut record, written) = container_of(
        args,
        container,
        session,
        output_bytes_max,
        (empty.path(), &layers.dir.join("0")),
    )?;
    let podman = podman_of(args).await?;
    committed(ticket)?;
    let outcome = aido_remote::podman::run(&podman, &spec)
        .await
        .map_err(Failure::from)?;
    ended(&mut record, &outcome, &podman);
    let roots = vec![written.unwrap_or_default()];
    let render = aido_walk::remote::container_ran;
    let pending = taken_over(args, session, (layers, roots), &mut record, render).await?;
    let mut ran = answered(render(&record), record);
    ran.pending = pending;
    Ok(ran)
}

/// `run_container_group`.
pub async fn run_container_group(
    args: &ProcessBodyArgs,
    group: &RunContainerGroup,
    session: &SessionContext,
    ticket: &Ticket,
    output_bytes_max: usize,
) -> Result<Ran, Failure> {
    if group.containers.is_empty()
        || group.containers.len() > aido_remote::podman::GROUP_CONTAINERS_MAX
    {
        return Err(invalid(format!(
            "a group holds 1 to {} containers",
            aido_remote::podman::GROUP_CONTAINERS_MAX
        )));
    }
    let empty = tempfile::Builder::new()
        .prefix("aido-hide-")
        .tempdir()
        .map_err(|e| invalid(format!("a private directory: {e}")))?;
    // The group's output shares one record: each container keeps its share of the cap.
    let share = output_bytes_max / group.containers.len();
    let layers = layers_of(args)?;
    let mut specs = Vec::new();
    let mut records = Vec::new();
    let mut roots = Vec::new();
    for (index, container) in group.containers.iter().enumerate() {
        let layer = layers.dir.join(index.to_string());
        let (spec, record, written) =
            container_of(args, container, session, share, (empty.path(), &layer))?;
        specs.push(spec);
        records.push(record);
        roots.push(written.unwrap_or_default());
    }
    let podman = podman_of(args).await?;
    committed(ticket)?;
    let outcomes = aido_remote::podman::run_group(&podman, &specs)
        .await
        .map_err(Failure::from)?;
    for (record, outcome) in records.iter_mut().zip(&outcomes) {
        ended(record, outcome, &podman);
    }
    let mut record = json!({"pod": true, "containers": records});
    let render = aido_walk::remote::group_ran;
    let pending = taken_over(args, session, (layers, roots), &mut record, render).await?;
    let mut ran = answered(render(&record), record);
    ran.pending = pending;
    Ok(ran)
}
