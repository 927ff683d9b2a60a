use std::path::{Path, PathBuf};

use aido_actions::process::RunCommand;
use aido_policy::PolicyEngine;
use aido_sandbox::{CgroupLimits, Profile, Request, WriteMode};

use super::ProcessError;

/// The confinement every command gets under `policy`: the write walls are the only writable
/// roots (those that exist), the policy's deny globs and the default secret paths are hidden,
/// and so is aido's journal. Nothing of aido's environment passes but the sandbox's defaults.
pub(crate) fn profile_of(policy: &PolicyEngine, hidden: &[PathBuf]) -> Profile {
    let writable_roots: Vec<PathBuf> = policy
        .write_roots()
        .iter()
        .filter(|root| root.is_dir())
        .cloned()
        .collect();
    let mut profile = Profile::new(writable_roots);
    profile.readable_roots = policy
        .read_roots()
        .filter(|root| root.is_dir())
        .cloned()
        .collect();
    // aido as root: commands run as an unprivileged host user, their walls idmapped.
    if rustix::process::geteuid().is_root() {
        let processes = &policy.config().processes;
        profile.run_as = Some(aido_sandbox::RunAs {
            uid: processes.sandbox_uid,
            gid: processes.sandbox_gid,
        });
    }
    for pattern in &policy.config().paths.deny {
        // `dir/**` hides the directory itself, which hides everything below it and costs one
        // mount instead of one per entry.
        let pattern = pattern.strip_suffix("/**").unwrap_or(pattern);
        if !profile.deny.iter().any(|known| known == pattern) {
            profile.deny.push(pattern.to_owned());
        }
    }
    for path in hidden {
        let path = path.display().to_string();
        if !profile.deny.contains(&path) {
            profile.deny.push(path);
        }
    }
    profile.writes = WriteMode::Direct;
    let processes = &policy.config().processes;
    profile.cgroup = cgroup_of(processes);
    if !processes.egress.is_empty() {
        profile.network = aido_sandbox::Network::Proxy {
            allow: processes.egress.clone(),
            allow_ranges: processes.egress_allow_ranges.clone(),
            connections_max: processes.egress_connections_max,
            connections_total_max: processes.egress_connections_total_max,
        };
    }
    profile
}

/// Say that a command is expected soon (`aido exec`, a runtime that serves agents): its
/// sandbox child is started now, on a thread of its own, so the first command does not wait
/// for the spawn and the cgroup join. Call it as early as the config is known; it returns at
/// once.
pub fn expect_commands(config: &aido_policy::Config) {
    let limits = cgroup_of(&config.processes);
    std::thread::spawn(move || {
        if let Ok((exe, _)) = aido_sandbox::host_exe() {
            aido_sandbox::Sandbox::new(exe).prestart(limits);
        }
    });
}

/// The tree limits under `[processes] cgroup`: always with `required`; with `auto`, always
/// when aido runs as root (where `RLIMIT_NPROC` does not bind, so only a cgroup bounds a fork
/// bomb, and a missing one is `sandbox_unavailable`), otherwise when this host can make one
/// (probed once per process; the journaled profile shows which it was).
fn cgroup_of(processes: &aido_policy::config::Processes) -> Option<CgroupLimits> {
    static PROBED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let limits = CgroupLimits {
        pids_max: processes.pids_max,
        memory_bytes_max: processes.memory_mb.saturating_mul(1 << 20),
        cpu_percent_max: processes.cpu_percent,
    };
    match processes.cgroup.as_str() {
        "off" => None,
        "auto" if !rustix::process::getuid().is_root() => {
            let available = *PROBED.get_or_init(|| match limits.probe() {
                Ok(()) => true,
                Err(error) => {
                    tracing::warn!(
                        "run_command without a cgroup ({error}); RLIMIT_NPROC bounds a fork bomb"
                    );
                    false
                }
            });
            available.then_some(limits)
        }
        _ => Some(limits),
    }
}

/// The sandbox request for `run` started in the resolved `cwd`.
pub(crate) fn request_of(
    run: &RunCommand,
    cwd: &Path,
    output_bytes_max: usize,
) -> Result<Request, ProcessError> {
    let argv = run
        .command_line()
        .ok_or_else(|| ProcessError::InvalidCommand {
            why: "give exactly one of argv (non-empty) and shell".into(),
        })?;
    if run.pty && !run.background {
        return Err(ProcessError::InvalidCommand {
            why: "pty needs background (a terminal is driven with write_stdin)".into(),
        });
    }
    let (default, max) = if run.background {
        (
            RunCommand::BACKGROUND_TIMEOUT_MS_DEFAULT,
            RunCommand::BACKGROUND_TIMEOUT_MS_MAX,
        )
    } else {
        (RunCommand::TIMEOUT_MS_DEFAULT, RunCommand::TIMEOUT_MS_MAX)
    };
    let timeout_ms = run.timeout_ms.unwrap_or(default);
    if timeout_ms == 0 || timeout_ms > max {
        return Err(ProcessError::InvalidCommand {
            why: format!("timeout_ms must be 1 to {max}"),
        });
    }
    let cap = |asked: Option<usize>| asked.unwrap_or(output_bytes_max).min(output_bytes_max);
    let mut request = Request::new(argv, cwd);
    request.env = run.env.clone();
    request.stdin = run.stdin.clone().unwrap_or_default().into_bytes();
    request.timeout_ms = timeout_ms;
    request.stdout_bytes_max = cap(run.stdout_bytes_max);
    request.stderr_bytes_max = cap(run.stderr_bytes_max);
    Ok(request)
}
