use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aido_actions::process::RunCommand;
use aido_policy::PolicyEngine;
use aido_sandbox::{CgroupLimits, Profile, Request, WriteMode};

use super::ProcessError;

/// The confinement every command gets under `policy`: the write walls are the only writable
/// roots (those that exist), the policy's deny globs and the default secret paths are hidden,
/// and so is aido's journal. Nothing of aido's environment passes but the sandbox's defaults.
pub fn profile_of(policy: &PolicyEngine, hidden: &[PathBuf]) -> Profile {
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
    profile.unix_sockets = policy.unix_sockets().to_vec();
    let processes = &policy.config().processes;
    // A file may be as large as a whole change set may be: the policy's cap, not a fixed one.
    profile.rlimits.file_size_bytes_max = processes.change_bytes_max;
    profile.bound_by(cgroup_of(processes));
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
/// The environment a command starts with, over the sandbox's defaults: the variables of
/// `parent` (aido's own environment: the client's, or the shell of `aido exec`) whose names
/// match one of the policy's `[processes] env_inherit` globs and do not look secret, then the
/// call's own `given`, where `~` and `$HOME` mean `home`.
pub fn env_of(
    inherit: &[String],
    parent: impl IntoIterator<Item = (String, String)>,
    given: &BTreeMap<String, String>,
    home: Option<&str>,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = parent
        .into_iter()
        .filter(|(name, _)| {
            !aido_walk::process::is_secret_name(name)
                && inherit.iter().any(|glob| name_matches(glob, name))
        })
        .collect();
    for (name, value) in given {
        let value = match home {
            Some(home) => expand_home(value, home),
            None => value.clone(),
        };
        env.insert(name.clone(), value);
    }
    env
}

/// Whether `name` matches `glob`, where `*` stands for any run of characters.
fn name_matches(glob: &str, name: &str) -> bool {
    let mut parts = glob.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// `value` with the user's home for `~` where a shell assignment expands it (the whole value,
/// or before a `/`, at the start or after a `:`) and for `$HOME` and `${HOME}` anywhere.
fn expand_home(value: &str, home: &str) -> String {
    let tilde = |part: &str| match part.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => format!("{home}{rest}"),
        _ => part.to_owned(),
    };
    let expanded: Vec<String> = value.split(':').map(tilde).collect();
    let mut out = expanded.join(":").replace("${HOME}", home);
    let mut at = 0;
    while let Some(found) = out[at..].find("$HOME") {
        let start = at + found;
        let end = start + "$HOME".len();
        let next = out[end..].chars().next();
        if next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            at = end;
            continue;
        }
        out.replace_range(start..end, home);
        at = start + home.len();
    }
    out
}

pub fn request_of(
    run: &RunCommand,
    cwd: &Path,
    output_bytes_max: usize,
    env: BTreeMap<String, String>,
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
    request.env = env;
    request.stdin = run.stdin.clone().unwrap_or_default().into_bytes();
    request.timeout_ms = timeout_ms;
    request.stdout_bytes_max = cap(run.stdout_bytes_max);
    request.stderr_bytes_max = cap(run.stderr_bytes_max);
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_users_toolchain_variables_pass_and_secret_looking_ones_never_do() {
        let inherit: Vec<String> = ["PATH", "HOME", "LC_*", "CARGO_HOME", "*_TOOLCHAIN"]
            .map(String::from)
            .to_vec();
        let parent = vars(&[
            ("PATH", "/fake-home/.cargo/bin:/usr/bin"),
            ("HOME", "/fake-home"),
            ("LC_ALL", "C.UTF-8"),
            ("LC_TIME", "en_GB.UTF-8"),
            ("CARGO_HOME", "/fake-home/.cargo"),
            ("RUSTUP_TOOLCHAIN", "stable"),
            ("LCX", "no"),
            ("GITHUB_TOKEN", "ghp_x"),
            ("PATH_TOKEN", "x"),
            ("EDITOR", "vi"),
        ]);
        let env = env_of(&inherit, parent, &BTreeMap::new(), Some("/fake-home"));
        let names: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "CARGO_HOME",
                "HOME",
                "LC_ALL",
                "LC_TIME",
                "PATH",
                "RUSTUP_TOOLCHAIN"
            ]
        );
        // What the call gives wins, its secret-looking names included: the agent chose them.
        let given: BTreeMap<String, String> = vars(&[("PATH", "/opt/bin"), ("API_KEY", "k")])
            .into_iter()
            .collect();
        let env = env_of(&inherit, vars(&[("PATH", "/usr/bin")]), &given, None);
        assert_eq!(env["PATH"], "/opt/bin");
        assert_eq!(env["API_KEY"], "k");
    }

    #[test]
    fn home_is_expanded_where_a_shell_assignment_would() {
        let home = "/fake-home";
        for (given, want) in [
            ("~", "/fake-home"),
            ("~/.cargo", "/fake-home/.cargo"),
            (
                "~/bin:~/.local/bin:/usr/bin",
                "/fake-home/bin:/fake-home/.local/bin:/usr/bin",
            ),
            ("$HOME/.rustup", "/fake-home/.rustup"),
            ("${HOME}/go", "/fake-home/go"),
            ("x=$HOME", "x=/fake-home"),
            ("$HOMEDIR/x", "$HOMEDIR/x"),
            ("~other/x", "~other/x"),
            ("a~/b", "a~/b"),
            ("$HOME:$HOME", "/fake-home:/fake-home"),
        ] {
            assert_eq!(expand_home(given, home), want, "{given}");
        }
    }

    #[test]
    fn globs_match_whole_names() {
        assert!(name_matches("LC_*", "LC_ALL"));
        assert!(name_matches("LC_*", "LC_"));
        assert!(!name_matches("LC_*", "XLC_ALL"));
        assert!(name_matches("*", "ANY"));
        assert!(name_matches("A*B*C", "AxxBxxC"));
        assert!(!name_matches("A*B*C", "AxxBxxCx"));
        assert!(!name_matches("PATH", "PATHS"));
        assert!(name_matches("*_HOME", "CARGO_HOME"));
        assert!(!name_matches("AB*BA", "ABA"));
    }
}
