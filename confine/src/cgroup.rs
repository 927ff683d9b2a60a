//! Limits on the whole process tree through a cgroup the parent creates for each spawn.
//!
//! The preferred home is a delegated cgroup v2 subtree with the `pids`, `memory` and `cpu`
//! controllers. Many hosts (this one among them) run the hybrid layout instead: cgroup v2
//! mounted with no controllers and the controllers on v1 hierarchies; there, a root parent
//! uses the v1 `pids`, `memory` and `cpu` hierarchies. Where neither works, a profile that
//! demands cgroup limits is refused with `sandbox_unavailable` naming what is missing.
//!
//! The parent moves the sandbox child in before it sends the plan, so everything the child
//! starts is inside from its first instruction. Dropping the [`Cgroup`] kills what is left and
//! removes the directories.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{ConfineError, Layer};
use serde::{Deserialize, Serialize};

/// The controllers a [`CgroupLimits`] needs.
const CONTROLLERS: [&str; 3] = ["pids", "memory", "cpu"];
/// `cpu.max` / `cpu.cfs_period_us` period.
const CPU_PERIOD_US: u64 = 100_000;
/// Attempts to remove a cgroup whose last processes are still being reaped.
const REMOVE_ATTEMPTS_MAX: u32 = 50;

static NEXT: AtomicU64 = AtomicU64::new(0);

/// cgroup v2 limits on the whole tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CgroupLimits {
    /// `pids.max`.
    pub pids_max: u64,
    /// `memory.max` (and `memory.swap.max` = 0).
    pub memory_bytes_max: u64,
    /// `cpu.max` as a percentage of one CPU.
    pub cpu_percent_max: u32,
}

impl CgroupLimits {
    /// Whether a spawn's cgroup with these limits can be made here (one is made and removed).
    pub fn probe(&self) -> Result<(), ConfineError> {
        Cgroup::create(self).map(drop)
    }
}

/// Which hierarchy the spawn's cgroup lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hierarchy {
    V2,
    V1,
}

/// One spawn's cgroup: one directory on v2, one per controller on v1.
#[derive(Debug)]
pub struct Cgroup {
    hierarchy: Hierarchy,
    directories: Vec<PathBuf>,
}

fn membership() -> String {
    std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default()
}

/// Removes the empty cgroups under `parent` that an aido process which is gone left behind
/// (killed, or exited with a standby child waiting: `aido_sandbox`'s spawn). Once per directory per
/// process; a cgroup with anything in it is never removed (the kernel refuses).
fn sweep(parent: &Path) {
    static SWEPT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    match SWEPT.lock() {
        Ok(mut swept) if !swept.iter().any(|done| done == parent) => swept.push(parent.to_owned()),
        _ => return,
    }
    for left in leftovers_of_gone_processes(parent, "aido-sandbox-") {
        let _ = std::fs::remove_dir(left);
    }
}

/// The entries of `parent` named `PREFIX`, a pid, `-` and anything, whose process is gone
/// (never this process's): what an aido process that was killed left behind.
pub fn leftovers_of_gone_processes(parent: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .and_then(|name| name.strip_prefix(prefix))
                .and_then(|rest| rest.split_once('-'))
                .and_then(|(pid, _)| pid.parse::<u32>().ok())
                .is_some_and(|pid| {
                    pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
                })
        })
        .map(|entry| entry.path())
        .collect()
}

fn unique_name() -> String {
    format!(
        "aido-sandbox-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn write(path: &Path, value: &str) -> Result<(), ConfineError> {
    std::fs::write(path, value).map_err(|error| {
        ConfineError::setup_io(
            Layer::Cgroup,
            &error,
            format!("{} <- {value}", path.display()),
        )
    })
}

impl Cgroup {
    /// Creates the spawn's cgroup with `limits`, on v2 if it can, else on v1.
    pub fn create(limits: &CgroupLimits) -> Result<Self, ConfineError> {
        let membership = membership();
        let v2 = Self::create_v2(limits, &membership);
        match v2 {
            Ok(cgroup) => Ok(cgroup),
            Err(v2_missing) => Self::create_v1(limits, &membership).map_err(|v1_missing| {
                ConfineError::unavailable(
                    v2_missing.0,
                    format!(
                        "{}; cgroup v1: {} ({})",
                        v2_missing.1, v1_missing.0, v1_missing.1
                    ),
                )
            }),
        }
    }

    fn create_v2(limits: &CgroupLimits, membership: &str) -> Result<Self, (String, String)> {
        let own = membership
            .lines()
            .find_map(|line| line.strip_prefix("0::"))
            .map(|path| path.trim_start_matches('/'))
            .ok_or_else(|| {
                (
                    "cgroup_v2".to_string(),
                    "no cgroup v2 membership".to_string(),
                )
            })?;
        let directory = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .iter()
            .map(|mount| Path::new(mount).join(own))
            .find(|directory| directory.join("cgroup.controllers").exists())
            .ok_or_else(|| ("cgroup_v2".to_string(), "no cgroup v2 mount".to_string()))?;
        let controllers =
            std::fs::read_to_string(directory.join("cgroup.controllers")).unwrap_or_default();
        for controller in CONTROLLERS {
            if !controllers
                .split_whitespace()
                .any(|present| present == controller)
            {
                return Err((
                    format!("cgroup_v2_{controller}"),
                    format!("{} offers [{}]", directory.display(), controllers.trim()),
                ));
            }
        }
        let delegation =
            |error: ConfineError| ("cgroup_v2_delegation".to_string(), error.to_string());
        write(
            &directory.join("cgroup.subtree_control"),
            "+pids +memory +cpu",
        )
        .map_err(delegation)?;
        sweep(&directory);
        let child = directory.join(unique_name());
        std::fs::create_dir(&child).map_err(|error| {
            (
                "cgroup_v2_delegation".to_string(),
                format!("{}: {error}", child.display()),
            )
        })?;
        let cgroup = Cgroup {
            hierarchy: Hierarchy::V2,
            directories: vec![child.clone()],
        };
        let quota = u64::from(limits.cpu_percent_max) * CPU_PERIOD_US / 100;
        for (file, value) in [
            ("pids.max", limits.pids_max.to_string()),
            ("memory.max", limits.memory_bytes_max.to_string()),
            ("memory.swap.max", "0".to_string()),
            ("cpu.max", format!("{quota} {CPU_PERIOD_US}")),
        ] {
            let path = child.join(file);
            // Without swap there is no memory.swap.max, and nothing to limit.
            if file == "memory.swap.max" && !path.exists() {
                continue;
            }
            write(&path, &value).map_err(delegation)?;
        }
        Ok(cgroup)
    }

    fn create_v1(limits: &CgroupLimits, membership: &str) -> Result<Self, (String, String)> {
        let mut cgroup = Cgroup {
            hierarchy: Hierarchy::V1,
            directories: Vec::new(),
        };
        let name = unique_name();
        let quota = u64::from(limits.cpu_percent_max) * CPU_PERIOD_US / 100;
        for controller in CONTROLLERS {
            let missing = || format!("cgroup_v1_{controller}");
            let own = membership
                .lines()
                .filter_map(|line| {
                    let mut parts = line.splitn(3, ':');
                    let _hierarchy_id = parts.next()?;
                    Some((parts.next()?, parts.next()?))
                })
                .find(|(controllers, _)| {
                    controllers.split(',').any(|present| present == controller)
                })
                .map(|(_, path)| path.trim_start_matches('/').to_string())
                .ok_or_else(|| (missing(), "not in /proc/self/cgroup".to_string()))?;
            let mount = Path::new("/sys/fs/cgroup").join(controller);
            if !mount.join("cgroup.procs").exists() {
                return Err((
                    missing(),
                    format!("{} is not a v1 hierarchy", mount.display()),
                ));
            }
            sweep(&mount.join(&own));
            let child = mount.join(own).join(&name);
            std::fs::create_dir(&child)
                .map_err(|error| (missing(), format!("{}: {error}", child.display())))?;
            cgroup.directories.push(child.clone());
            let settings: Vec<(&str, String)> = match controller {
                "pids" => vec![("pids.max", limits.pids_max.to_string())],
                "memory" => vec![("memory.limit_in_bytes", limits.memory_bytes_max.to_string())],
                _ => vec![
                    ("cpu.cfs_period_us", CPU_PERIOD_US.to_string()),
                    ("cpu.cfs_quota_us", quota.to_string()),
                ],
            };
            for (file, value) in settings {
                write(&child.join(file), &value).map_err(|error| (missing(), error.to_string()))?;
            }
            // Swap accounting may be off; where it is on, no swap either.
            let memsw = child.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                let _ = std::fs::write(memsw, limits.memory_bytes_max.to_string());
            }
        }
        Ok(cgroup)
    }

    /// The hierarchy it lives in.
    pub fn hierarchy(&self) -> Hierarchy {
        self.hierarchy
    }

    /// Moves `pid` (the sandbox child, before it has started anything) in.
    pub fn join(&self, pid: u32) -> Result<(), ConfineError> {
        for directory in &self.directories {
            write(&directory.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// The tree's peak memory, where the kernel keeps it.
    pub fn memory_peak_bytes(&self) -> Option<u64> {
        let file = match self.hierarchy {
            Hierarchy::V2 => "memory.peak",
            Hierarchy::V1 => "memory.max_usage_in_bytes",
        };
        self.directories
            .iter()
            .find_map(|directory| std::fs::read_to_string(directory.join(file)).ok())
            .and_then(|text| text.trim().parse().ok())
    }

    /// Kills every process still inside.
    pub fn kill(&self) {
        match self.hierarchy {
            Hierarchy::V2 => {
                for directory in &self.directories {
                    let _ = std::fs::write(directory.join("cgroup.kill"), "1");
                }
            }
            Hierarchy::V1 => {
                for directory in &self.directories {
                    let procs =
                        std::fs::read_to_string(directory.join("cgroup.procs")).unwrap_or_default();
                    for pid in procs
                        .lines()
                        .filter_map(|line| line.trim().parse::<i32>().ok())
                    {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                }
            }
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for directory in &self.directories {
            for _ in 0..REMOVE_ATTEMPTS_MAX {
                match std::fs::remove_dir(directory) {
                    Ok(()) => break,
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => break,
                    Err(_) => {
                        self.kill();
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs on whatever this machine has and says which path it took; on a hybrid host the
    /// refusal of v2 must name the missing controller, never be a bare failure.
    #[test]
    fn v2_either_works_or_names_what_is_missing() {
        let limits = CgroupLimits {
            pids_max: 8,
            memory_bytes_max: 64 << 20,
            cpu_percent_max: 50,
        };
        match Cgroup::create_v2(&limits, &membership()) {
            Ok(cgroup) => {
                eprintln!("cgroup v2 delegated here: {:?}", cgroup.directories);
                assert_eq!(cgroup.hierarchy(), Hierarchy::V2);
            }
            Err((missing, detail)) => {
                eprintln!("cgroup v2 unavailable here: {missing} ({detail})");
                assert!(missing.starts_with("cgroup_v2"), "{missing}");
            }
        }
    }
}
