//! OCI containers through the podman CLI (never its service socket). Every container gets the
//! same confinement, whatever the caller asks: no network (`--network=none`; in a pod, the
//! pod's own loopback only), a read-only root, every capability dropped, no new privileges,
//! a pids and a memory limit, only images already on the host (`--pull=never`), the
//! environment from a private env file (never on podman's argv), and removal afterwards on
//! every path. podman itself runs with a cleared environment and a `containers.conf` of
//! aido's own (`CONTAINERS_CONF`): the OCI runtime the policy names and rlimits within the
//! host's hard limits, so the host's or the user's podman config cannot loosen any of this.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::output::{Capture, Exit, RemoteOutcome, Stream};

/// Why a container could not be run (its own failures are its exit status).
#[derive(Debug, thiserror::Error)]
pub enum PodmanError {
    /// podman (or a part it needs) is not on this host: nothing runs unconfined instead.
    #[error("containers are unavailable on this host: {what} ({why})")]
    Unavailable {
        /// What is missing (`podman`).
        what: String,
        /// Why.
        why: String,
    },
    /// The image is not on the host (aido never pulls).
    #[error("the image {image} is not on this host (aido never pulls: build or load it first)")]
    ImageMissing {
        /// The image.
        image: String,
    },
    /// A spec podman cannot be given (a variable with a newline, an empty argv, a bad mount).
    #[error("{why}")]
    SpecInvalid {
        /// Why.
        why: String,
    },
    /// podman itself failed (exit 125: its own error, not the command's), with what it said.
    #[error("podman failed: {stderr}")]
    Failed {
        /// podman's standard error (cut).
        stderr: String,
    },
}

aido_actions::coded!(PodmanError {
    Unavailable => "sandbox_unavailable",
    ImageMissing => "container_image_missing",
    SpecInvalid => "container_spec_invalid",
    Failed => "container_failed",
});

/// A host directory bound into the container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// The host directory (resolved).
    pub host: PathBuf,
    /// Where it appears inside.
    pub container: String,
    /// Bound read-only.
    pub read_only: bool,
    /// A read-write mount's copy-on-write layer: a directory holding `upper` and `work`. The
    /// container writes into `upper` (podman's `:O,upperdir=,workdir=` overlay) and the host
    /// directory is left as it was; the caller takes the changes over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<PathBuf>,
}

/// One container to run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerSpec {
    /// The image reference, exactly as the policy lists it.
    pub image: String,
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// Variables set inside (values never reach podman's argv).
    #[serde(skip)]
    pub env: BTreeMap<String, String>,
    /// The working directory inside.
    pub workdir: Option<String>,
    /// Bound host directories.
    pub mounts: Vec<Mount>,
    /// Most processes (`--pids-limit`).
    pub pids_max: u32,
    /// Most memory in bytes (`--memory`; swap the same, so none extra).
    pub memory_bytes: u64,
    /// Bytes written to standard input, which is then closed.
    #[serde(skip)]
    pub stdin: Vec<u8>,
    /// Wall-clock bound; past it the container is killed.
    pub timeout_ms: u64,
    /// Standard output kept.
    pub stdout_bytes_max: usize,
    /// Standard error kept.
    pub stderr_bytes_max: usize,
}

/// What one container did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerOutcome {
    /// Its podman name.
    pub name: String,
    /// Exit, output and frames.
    #[serde(flatten)]
    pub outcome: RemoteOutcome,
    /// Whether the kernel's OOM killer ended it (its memory limit), as podman saw it.
    pub oom_killed: bool,
}

/// The podman CLI, located, with aido's own containers.conf.
#[derive(Debug)]
pub struct Podman {
    program: PathBuf,
    version: String,
    conf: tempfile::TempDir,
}

/// Most bytes of podman's own error kept in a failure.
const PODMAN_STDERR_BYTES_MAX: usize = 4096;
/// Longest a podman housekeeping call (exists, inspect, kill, rm, pod create) may take.
const PODMAN_CALL_TIMEOUT_MS: u64 = 30_000;
/// Open files per container (within the host's hard limit: podman's default exceeds it).
pub const NOFILE_MAX: u64 = 1024;
/// Processes per container user by rlimit (the pids cgroup limit is the real bound).
pub const NPROC_MAX: u64 = 4096;
/// Most containers in one group.
pub const GROUP_CONTAINERS_MAX: usize = 8;

static NAMES: AtomicU64 = AtomicU64::new(0);

/// A name no other aido container has: the process, a counter, the time.
fn fresh_name(kind: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!(
        "aido-{kind}-{}-{}-{nanos:08x}",
        std::process::id(),
        NAMES.fetch_add(1, Ordering::Relaxed)
    )
}

impl Podman {
    /// Find `program` (a path, or a name looked up in `PATH`) and check it answers
    /// `--version`. `runtime` is the OCI runtime (`runc`, `crun`; empty for podman's default).
    pub async fn locate(program: &str, runtime: &str) -> Result<Podman, PodmanError> {
        let unavailable = |why: String| PodmanError::Unavailable {
            what: program.to_owned(),
            why,
        };
        let path = find_program(program).ok_or_else(|| unavailable("not found in PATH".into()))?;
        let conf = tempfile::Builder::new()
            .prefix("aido-podman-")
            .tempdir()
            .map_err(|e| unavailable(format!("its private config directory: {e}")))?;
        let mut text = format!(
            "[containers]\ndefault_ulimits = [\"nofile={NOFILE_MAX}:{NOFILE_MAX}\", \"nproc={NPROC_MAX}:{NPROC_MAX}\"]\n"
        );
        if !runtime.is_empty() {
            if !runtime
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
            {
                return Err(unavailable(format!(
                    "the OCI runtime {runtime:?} is not a name"
                )));
            }
            text.push_str(&format!("[engine]\nruntime = \"{runtime}\"\n"));
        }
        std::fs::write(conf.path().join("containers.conf"), text)
            .map_err(|e| unavailable(format!("its private config: {e}")))?;
        let mut podman = Podman {
            program: path,
            version: String::new(),
            conf,
        };
        let out = podman
            .call(&["--version".into()])
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        if !out.0.success() {
            return Err(unavailable(format!("--version failed: {}", out.2)));
        }
        podman.version = out.1.trim().to_owned();
        Ok(podman)
    }

    /// What `podman --version` said.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// podman with a cleared environment and aido's containers.conf.
    fn command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.program);
        command
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("CONTAINERS_CONF", self.conf.path().join("containers.conf"))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some(home) = std::env::var_os("HOME") {
            command.env("HOME", home);
        }
        if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR") {
            command.env("XDG_RUNTIME_DIR", dir);
        }
        command
    }

    /// One housekeeping call: status, stdout, stderr (cut), bounded in time.
    async fn call(
        &self,
        args: &[String],
    ) -> Result<(std::process::ExitStatus, String, String), PodmanError> {
        let mut command = self.command();
        command
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let output = tokio::time::timeout(
            Duration::from_millis(PODMAN_CALL_TIMEOUT_MS),
            command.output(),
        )
        .await
        .map_err(|_| PodmanError::Failed {
            stderr: format!(
                "podman {} took over {PODMAN_CALL_TIMEOUT_MS} ms",
                args.join(" ")
            ),
        })?
        .map_err(|e| PodmanError::Unavailable {
            what: self.program.display().to_string(),
            why: e.to_string(),
        })?;
        Ok((
            output.status,
            String::from_utf8_lossy(&output.stdout).into_owned(),
            cut(&String::from_utf8_lossy(&output.stderr)),
        ))
    }

    /// Whether the image is on the host.
    pub async fn image_exists(&self, image: &str) -> Result<bool, PodmanError> {
        let (status, _, _) = self
            .call(&["image".into(), "exists".into(), image.into()])
            .await?;
        Ok(status.success())
    }
}

fn cut(text: &str) -> String {
    let mut end = text.len().min(PODMAN_STDERR_BYTES_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].trim_end().to_owned()
}

/// `program` if it is a path to a file, else the first match in `PATH`.
fn find_program(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        let path = PathBuf::from(program);
        return path.is_file().then_some(path);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// The arguments of `podman run` for `spec` (after `run`): the confinement first, then what
/// the spec asks. Pure, so a test can pin every flag.
pub fn run_args(
    spec: &ContainerSpec,
    name: &str,
    pod: Option<&str>,
    env_file: &Path,
) -> Result<Vec<String>, PodmanError> {
    if spec.argv.is_empty() {
        return Err(PodmanError::SpecInvalid {
            why: "the command (argv) is empty".into(),
        });
    }
    let mut args: Vec<String> = vec![
        "--name".into(),
        name.into(),
        "--pull=never".into(),
        "--read-only".into(),
        "--cap-drop=all".into(),
        "--security-opt=no-new-privileges".into(),
        format!("--pids-limit={}", spec.pids_max),
        format!("--memory={}", spec.memory_bytes),
        format!("--memory-swap={}", spec.memory_bytes),
        "--log-driver=none".into(),
        "--interactive".into(),
        format!("--env-file={}", env_file.display()),
    ];
    match pod {
        // A pod's containers share its network namespace, which has only loopback.
        Some(pod) => args.push(format!("--pod={pod}")),
        None => args.push("--network=none".into()),
    }
    if let Some(dir) = &spec.workdir {
        args.push(format!("--workdir={dir}"));
    }
    for mount in &spec.mounts {
        let host = mount.host.display().to_string();
        if host.contains(',') || host.contains(':') || mount.container.contains(':') {
            return Err(PodmanError::SpecInvalid {
                why: format!("a mount path holds ':' or ',': {host}"),
            });
        }
        let mode = match (&mount.layer, mount.read_only) {
            (_, true) => "ro".to_owned(),
            (Some(layer), false) => {
                let layer = layer.display().to_string();
                if layer.contains(',') || layer.contains(':') {
                    return Err(PodmanError::SpecInvalid {
                        why: format!("a layer path holds ':' or ',': {layer}"),
                    });
                }
                format!("O,upperdir={layer}/upper,workdir={layer}/work")
            }
            (None, false) => "rw".to_owned(),
        };
        args.push(format!("--volume={host}:{}:{mode}", mount.container));
    }
    args.push(spec.image.clone());
    args.extend(spec.argv.iter().cloned());
    Ok(args)
}

/// The env file's text: `NAME=VALUE` lines. podman's env files cannot hold a newline in a value.
fn env_text(env: &BTreeMap<String, String>) -> Result<String, PodmanError> {
    let mut text = String::new();
    for (name, value) in env {
        let name_ok = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !name.as_bytes()[0].is_ascii_digit();
        if !name_ok {
            return Err(PodmanError::SpecInvalid {
                why: format!("{name:?} is not a variable name"),
            });
        }
        if value.contains('\n') || value.contains('\0') {
            return Err(PodmanError::SpecInvalid {
                why: format!("the value of {name} holds a newline or NUL"),
            });
        }
        text.push_str(&format!("{name}={value}\n"));
    }
    Ok(text)
}

/// Removes a container or a pod when dropped, whatever path the run took.
struct Removal<'a> {
    podman: &'a Podman,
    args: Vec<String>,
    done: bool,
}

impl Removal<'_> {
    async fn now(mut self) {
        self.done = true;
        let _ = self.podman.call(&self.args).await;
    }
}

impl Drop for Removal<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Cancelled mid-run: remove it synchronously (a short call), never leave it behind.
        let mut command = std::process::Command::new(&self.podman.program);
        command
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env(
                "CONTAINERS_CONF",
                self.podman.conf.path().join("containers.conf"),
            )
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let _ = command.status();
    }
}

/// Run one container to its end (or its timeout), then remove it.
///
/// # Cancel safety
///
/// Dropping the future kills podman's client and removes the container (synchronously).
pub async fn run(podman: &Podman, spec: &ContainerSpec) -> Result<ContainerOutcome, PodmanError> {
    if !podman.image_exists(&spec.image).await? {
        return Err(PodmanError::ImageMissing {
            image: spec.image.clone(),
        });
    }
    let name = fresh_name("ctr");
    let removal = Removal {
        podman,
        args: vec![
            "rm".into(),
            "--force".into(),
            "--time=0".into(),
            name.clone(),
        ],
        done: false,
    };
    let result = run_one(podman, spec, &name, None).await;
    removal.now().await;
    result
}

/// Run several containers at once in a fresh pod whose network is its own loopback only
/// (they reach each other on 127.0.0.1, nothing else), one outcome per container in the
/// order given; the pod and its containers are removed afterwards on every path.
///
/// # Cancel safety
///
/// Dropping the future removes the pod (synchronously).
pub async fn run_group(
    podman: &Podman,
    specs: &[ContainerSpec],
) -> Result<Vec<ContainerOutcome>, PodmanError> {
    if specs.is_empty() || specs.len() > GROUP_CONTAINERS_MAX {
        return Err(PodmanError::SpecInvalid {
            why: format!("a group holds 1 to {GROUP_CONTAINERS_MAX} containers"),
        });
    }
    for spec in specs {
        if !podman.image_exists(&spec.image).await? {
            return Err(PodmanError::ImageMissing {
                image: spec.image.clone(),
            });
        }
    }
    let pod = fresh_name("pod");
    let (status, _, stderr) = podman
        .call(&[
            "pod".into(),
            "create".into(),
            format!("--name={pod}"),
            "--network=none".into(),
        ])
        .await?;
    if !status.success() {
        return Err(PodmanError::Failed { stderr });
    }
    let removal = Removal {
        podman,
        args: vec![
            "pod".into(),
            "rm".into(),
            "--force".into(),
            "--time=0".into(),
            pod.clone(),
        ],
        done: false,
    };
    let names: Vec<String> = specs.iter().map(|_| fresh_name("ctr")).collect();
    let runs = specs
        .iter()
        .zip(&names)
        .map(|(spec, name)| run_one(podman, spec, name, Some(&pod)));
    let results = futures::future::join_all(runs).await;
    removal.now().await;
    results.into_iter().collect()
}

/// One attached `podman run`: output captured within caps, killed at the timeout, then its
/// OOM flag read. The caller removes it.
#[allow(clippy::too_many_lines)]
async fn run_one(
    podman: &Podman,
    spec: &ContainerSpec,
    name: &str,
    pod: Option<&str>,
) -> Result<ContainerOutcome, PodmanError> {
    let dir = tempfile::Builder::new()
        .prefix("aido-ctr-")
        .tempdir()
        .map_err(|e| PodmanError::Unavailable {
            what: "a private temporary directory".into(),
            why: e.to_string(),
        })?;
    let env_file = dir.path().join("env");
    std::fs::write(&env_file, env_text(&spec.env)?).map_err(|e| PodmanError::Unavailable {
        what: "a private env file".into(),
        why: e.to_string(),
    })?;
    let mut args = vec!["run".to_owned()];
    args.extend(run_args(spec, name, pod, &env_file)?);
    let mut command = podman.command();
    command
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = command.spawn().map_err(|e| PodmanError::Unavailable {
        what: podman.program.display().to_string(),
        why: e.to_string(),
    })?;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(spec.timeout_ms);
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let input = spec.stdin.clone();
    // The input is written on its own task (a container that never reads it must not block
    // the output), then closed.
    let writer = tokio::spawn(async move {
        if let Some(mut pipe) = stdin.take() {
            let _ = pipe.write_all(&input).await;
            let _ = pipe.shutdown().await;
        }
    });
    let mut capture = Capture::new(started, spec.stdout_bytes_max, spec.stderr_bytes_max);
    let (mut out_buf, mut err_buf) = (vec![0u8; 16 << 10], vec![0u8; 16 << 10]);
    let mut timed_out = false;
    while stdout.is_some() || stderr.is_some() {
        tokio::select! {
            read = async { match stdout.as_mut() { Some(p) => p.read(&mut out_buf).await, None => std::future::pending().await } } => {
                match read {
                    Ok(0) | Err(_) => stdout = None,
                    Ok(n) => capture.push(Stream::Stdout, &out_buf[..n]),
                }
            }
            read = async { match stderr.as_mut() { Some(p) => p.read(&mut err_buf).await, None => std::future::pending().await } } => {
                match read {
                    Ok(0) | Err(_) => stderr = None,
                    Ok(n) => capture.push(Stream::Stderr, &err_buf[..n]),
                }
            }
            () = tokio::time::sleep_until(deadline) => {
                timed_out = true;
                break;
            }
        }
    }
    if timed_out {
        let _ = podman
            .call(&["kill".into(), "--signal=KILL".into(), name.into()])
            .await;
    }
    writer.abort();
    let status =
        match tokio::time::timeout(Duration::from_millis(PODMAN_CALL_TIMEOUT_MS), child.wait())
            .await
        {
            Ok(Ok(status)) => status.code(),
            _ => {
                let _ = child.kill().await;
                None
            }
        };
    let (_, inspected, _) = podman
        .call(&[
            "inspect".into(),
            "--type=container".into(),
            "--format={{.State.OOMKilled}} {{.State.ExitCode}}".into(),
            name.into(),
        ])
        .await?;
    let mut words = inspected.split_whitespace();
    let oom_killed = words.next() == Some("true");
    let state_code: Option<i64> = words.next().and_then(|w| w.parse().ok());
    let exit = match (timed_out, status) {
        (true, _) => Exit::TimedOut,
        // 125 is podman's own failure: the container never ran its command.
        (false, Some(125)) if state_code.is_none() => {
            let outcome = capture.finish(Exit::Unknown);
            return Err(PodmanError::Failed {
                stderr: cut(&outcome.stderr),
            });
        }
        (false, Some(code)) => Exit::Code(state_code.unwrap_or(i64::from(code))),
        (false, None) => state_code.map_or(Exit::Unknown, Exit::Code),
    };
    Ok(ContainerOutcome {
        name: name.to_owned(),
        outcome: capture.finish(exit),
        oom_killed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ContainerSpec {
        ContainerSpec {
            image: "localhost/aido-test:latest".into(),
            argv: vec!["sh".into(), "-c".into(), "echo hi".into()],
            env: BTreeMap::from([("TOKEN".into(), "s3cret".into())]),
            workdir: Some("/workspace".into()),
            mounts: vec![Mount {
                host: "/srv/work".into(),
                container: "/workspace".into(),
                read_only: true,
                layer: None,
            }],
            pids_max: 64,
            memory_bytes: 256 << 20,
            stdin: Vec::new(),
            timeout_ms: 1000,
            stdout_bytes_max: 100,
            stderr_bytes_max: 100,
        }
    }

    /// Every container gets the whole confinement, and no secret reaches podman's argv.
    #[test]
    fn run_args_always_confine() {
        let args = run_args(&spec(), "n", None, Path::new("/tmp/x/env")).unwrap();
        for flag in [
            "--network=none",
            "--read-only",
            "--cap-drop=all",
            "--security-opt=no-new-privileges",
            "--pids-limit=64",
            "--memory=268435456",
            "--memory-swap=268435456",
            "--pull=never",
            "--volume=/srv/work:/workspace:ro",
        ] {
            assert!(args.iter().any(|a| a == flag), "{flag} in {args:?}");
        }
        assert!(!args.join(" ").contains("s3cret"));
        let image = args.iter().position(|a| a == "localhost/aido-test:latest");
        assert_eq!(
            image,
            Some(args.len() - 4),
            "the image comes just before the command"
        );
        // A read-write mount with a layer writes into it, never to the host directory.
        let mut layered = spec();
        layered.mounts[0].read_only = false;
        layered.mounts[0].layer = Some("/srv/layers/0".into());
        let args = run_args(&layered, "n", None, Path::new("/e")).unwrap();
        assert!(
            args.iter().any(|a| a
                == "--volume=/srv/work:/workspace:O,upperdir=/srv/layers/0/upper,workdir=/srv/layers/0/work"),
            "{args:?}"
        );
        let in_pod = run_args(&spec(), "n", Some("p"), Path::new("/e")).unwrap();
        assert!(in_pod.iter().any(|a| a == "--pod=p"));
        assert!(!in_pod.iter().any(|a| a.starts_with("--network")));
    }

    #[test]
    fn bad_specs_are_coded() {
        let mut empty = spec();
        empty.argv.clear();
        assert_eq!(
            run_args(&empty, "n", None, Path::new("/e"))
                .unwrap_err()
                .code(),
            "container_spec_invalid"
        );
        let newline = BTreeMap::from([("A".into(), "x\ny".into())]);
        assert_eq!(
            env_text(&newline).unwrap_err().code(),
            "container_spec_invalid"
        );
        let bad_name = BTreeMap::from([("1A".into(), "x".into())]);
        assert_eq!(
            env_text(&bad_name).unwrap_err().code(),
            "container_spec_invalid"
        );
        assert_eq!(
            env_text(&BTreeMap::from([("A".into(), "b c".into())])).unwrap(),
            "A=b c\n"
        );
    }

    #[tokio::test]
    async fn missing_podman_is_unavailable_naming_it() {
        let err = Podman::locate("/nonexistent/podman", "runc")
            .await
            .unwrap_err();
        assert_eq!(err.code(), "sandbox_unavailable");
        assert!(err.to_string().contains("/nonexistent/podman"));
    }
}
