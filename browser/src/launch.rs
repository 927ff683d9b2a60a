//! Starting Chromium: its flags, its process group, and the pipes DevTools speaks on.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use command_fds::CommandFdExt as _;
use command_fds::FdMapping;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::unix::pipe;
use tokio::process::{Child, ChildStderr, Command};

use crate::cdp::Cdp;
use crate::error::BrowserError;

/// Debian's Chromium.
pub const CHROMIUM_PATH: &str = "/usr/bin/chromium";

/// Lines of Chromium's standard error kept to explain a failed start.
const STDERR_LINES_KEPT: usize = 20;
/// How long a failed start waits for the end of Chromium's standard error.
const STDERR_END_WAIT_MS: u64 = 1_000;

/// How to start the browser.
#[derive(Clone, Debug)]
pub struct Options {
    /// The Chromium executable.
    pub executable: PathBuf,
    /// The egress proxy every request goes through, loopback included. Required: `None`
    /// is refused with `browser_proxy_missing` before anything starts.
    pub proxy: Option<SocketAddr>,
    /// The private profile (`--user-data-dir`): a directory of this session's own, which the
    /// caller creates and removes.
    pub profile_dir: PathBuf,
    /// Where downloads land (created if missing). `None`: downloads are refused.
    pub download_dir: Option<PathBuf>,
    /// Directories Chromium may read beyond the system's ([`SYSTEM_READABLE`]), its profile
    /// and its temporary directory: where the files a page may be given to upload are. Home
    /// directories, aido's own home and the rest of the machine stay unreadable to it.
    pub readable: Vec<PathBuf>,
    /// Whether `evaluate` may run the agent's JavaScript in the page.
    pub allow_script: bool,
    /// The viewport every tab gets, in CSS pixels.
    pub viewport_width: u32,
    /// The viewport's height.
    pub viewport_height: u32,
    /// The bounds.
    pub limits: Limits,
}

impl Options {
    /// Debian's Chromium, through `proxy`, with a profile in `profile_dir`, defaults elsewhere.
    pub fn new(proxy: SocketAddr, profile_dir: impl Into<PathBuf>) -> Self {
        Self {
            executable: PathBuf::from(CHROMIUM_PATH),
            proxy: Some(proxy),
            profile_dir: profile_dir.into(),
            download_dir: None,
            readable: Vec::new(),
            allow_script: false,
            viewport_width: 1280,
            viewport_height: 800,
            limits: Limits::default(),
        }
    }
}

/// Every bound the browser keeps.
#[derive(Clone, Debug)]
pub struct Limits {
    /// From spawning Chromium to its first DevTools answer.
    pub launch_timeout_ms: u64,
    /// One DevTools command.
    pub call_timeout_ms: u64,
    /// A navigation (open, navigate, back, forward) until the page has loaded.
    pub navigation_timeout_ms: u64,
    /// The longest `wait_for` / `wait_for_text` / download wait a caller may ask for.
    pub wait_timeout_max_ms: u64,
    /// How often a wait looks at the page again.
    pub wait_poll_ms: u64,
    /// One DevTools message (a screenshot is the largest).
    pub message_bytes_max: usize,
    /// Text returned by `text` (longer text is cut, and says so).
    pub text_bytes_max: usize,
    /// Nodes in one snapshot (more are cut, and it says so).
    pub snapshot_nodes_max: usize,
    /// Characters `type_text` / `fill` send at once.
    pub type_chars_max: usize,
    /// A script given to `evaluate`.
    pub script_bytes_max: usize,
    /// Tabs open at once.
    pub tabs_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            launch_timeout_ms: 20_000,
            call_timeout_ms: 15_000,
            navigation_timeout_ms: 30_000,
            wait_timeout_max_ms: 120_000,
            wait_poll_ms: 50,
            message_bytes_max: 64 << 20,
            text_bytes_max: 1 << 20,
            snapshot_nodes_max: 5_000,
            type_chars_max: 10_000,
            script_bytes_max: 64 << 10,
            tabs_max: 32,
        }
    }
}

/// The running Chromium: its whole process group is killed when this drops.
pub(crate) struct Process {
    child: Child,
    /// Chromium's TMPDIR, removed with it.
    _tmp: tempfile::TempDir,
    group: Pid,
    stderr: Arc<Mutex<VecDeque<String>>>,
    stderr_reader: Option<tokio::task::JoinHandle<()>>,
}

impl Process {
    /// Spawn Chromium with its DevTools on two pipes of ours (never a TCP port: a port on
    /// loopback would let any local process, the agent's own commands included, drive the
    /// browser around the policy).
    pub(crate) fn spawn(options: &Options) -> Result<(Self, Cdp), BrowserError> {
        let proxy = options.proxy.ok_or(BrowserError::ProxyMissing)?;
        if !options.executable.is_file() {
            return Err(BrowserError::Unavailable {
                path: options.executable.clone(),
            });
        }
        if !options.profile_dir.is_dir() {
            return Err(BrowserError::OptionsInvalid {
                why: format!(
                    "the profile directory {:?} is not a directory",
                    options.profile_dir
                ),
            });
        }
        let failed = |what: &str, e: std::io::Error| BrowserError::LaunchFailed {
            why: format!("{what}: {e}"),
        };
        let confine = Confinement::new(options, proxy.port())?;
        let (chromium_reads, commands) = std::io::pipe().map_err(|e| failed("pipe", e))?;
        let (replies, chromium_writes) = std::io::pipe().map_err(|e| failed("pipe", e))?;
        let mut command = Command::new(&options.executable);
        let tmp = confine.apply(&mut command);
        command
            .args(flags(options, proxy))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Chromium forks (zygote, renderers, GPU and network services): a group of its
            // own lets drop kill all of them, and none of the caller's.
            .process_group(0)
            .kill_on_drop(true)
            .fd_mappings(vec![
                FdMapping {
                    parent_fd: OwnedFd::from(chromium_reads),
                    child_fd: 3,
                },
                FdMapping {
                    parent_fd: OwnedFd::from(chromium_writes),
                    child_fd: 4,
                },
            ])
            .map_err(|e| BrowserError::LaunchFailed { why: e.to_string() })?;
        let mut child = command
            .spawn()
            .map_err(|e| failed(&format!("cannot run {:?}", options.executable), e))?;
        // Our copies of Chromium's ends close with the command, so its exit ends the pipes.
        drop(command);
        let group = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw)
            .ok_or_else(|| BrowserError::LaunchFailed {
                why: "Chromium exited at once".to_owned(),
            })?;
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let stderr_reader = child
            .stderr
            .take()
            .map(|pipe| tokio::spawn(keep_stderr(pipe, stderr.clone())));
        let process = Self {
            _tmp: tmp,
            child,
            group,
            stderr,
            stderr_reader,
        };
        let commands = pipe::Sender::from_owned_fd(OwnedFd::from(commands))
            .map_err(|e| failed("the command pipe", e))?;
        let replies = pipe::Receiver::from_owned_fd(OwnedFd::from(replies))
            .map_err(|e| failed("the reply pipe", e))?;
        let cdp = Cdp::over_pipes(
            commands,
            replies,
            options.limits.message_bytes_max,
            Duration::from_millis(options.limits.call_timeout_ms),
        );
        Ok((process, cdp))
    }

    /// The last lines Chromium wrote to its standard error (to explain a failed start),
    /// read to its end (for at most `STDERR_END_WAIT_MS`).
    pub(crate) async fn stderr_tail(&mut self) -> String {
        if let Some(reader) = self.stderr_reader.take() {
            let _ = tokio::time::timeout(Duration::from_millis(STDERR_END_WAIT_MS), reader).await;
        }
        self.stderr
            .lock()
            .map(|lines| lines.iter().cloned().collect::<Vec<_>>().join(" | "))
            .unwrap_or_default()
    }

    /// Chromium's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.group.as_raw().unsigned_abs()
    }

    /// Whether Chromium is still running.
    pub(crate) fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Wait up to `timeout` for Chromium to exit; whether it did.
    pub(crate) async fn exited(&mut self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .is_ok()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // The group is ours alone (process_group(0) above): killing it cannot reach another
        // Chromium. The child itself is reaped by tokio (kill_on_drop). Should aido die
        // without dropping this, Chromium still goes: it exits, every process of it, when
        // its DevTools pipe closes (measured on 156: 0.13 s).
        let _ = killpg(self.group, Signal::SIGKILL);
    }
}

/// What Chromium runs in, made before the fork: a Landlock domain (read-only everywhere but
/// its profile and download directory, TCP connect only to the proxy's port, no TCP bind, no
/// abstract sockets or signals outside it), no capabilities when aido runs as root, and an
/// environment of its own (HOME and the XDG directories inside the profile, TMPDIR a short
/// directory of its own in the system temp dir), since
/// Chromium's own sandbox is off (`--no-sandbox`: it needs privileges aido does not give it).
/// What Chromium reads of the system: its program and libraries, configuration (fonts, TLS
/// roots, locales), the kernel's views and the device files. Not `/home`, `/root`, `/tmp`,
/// `/var` beyond the font cache, or anything else.
pub const SYSTEM_READABLE: &[&str] = &[
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/bin",
    "/sbin",
    "/etc",
    "/opt/google",
    "/proc",
    "/sys",
    "/dev",
    "/var/cache/fontconfig",
    "/run/systemd/resolve",
];

struct Confinement {
    walls: aido_confine::PreparedLandlock,
    root: bool,
    env: Vec<(&'static str, PathBuf)>,
    tmp: tempfile::TempDir,
}

impl Confinement {
    fn new(options: &Options, proxy_port: u16) -> Result<Self, BrowserError> {
        let unconfined = |why: String| BrowserError::Unconfined { why };
        let profile = &options.profile_dir;
        // A short path of its own: Chromium's singleton socket goes there, and a Unix socket's
        // path has at most 107 bytes (a profile deep in AIDO_HOME is longer).
        let tmp = tempfile::Builder::new()
            .prefix("aido-browser-")
            .tempdir()
            .map_err(|e| unconfined(format!("a temporary directory: {e}")))?;
        let env = vec![
            ("HOME", profile.clone()),
            ("TMPDIR", tmp.path().to_owned()),
            ("XDG_CONFIG_HOME", profile.join("config")),
            ("XDG_CACHE_HOME", profile.join("cache")),
            ("XDG_DATA_HOME", profile.join("data")),
        ];
        for (_, dir) in &env {
            std::fs::create_dir_all(dir).map_err(|e| unconfined(format!("{dir:?}: {e}")))?;
        }
        let mut writable = vec![profile.clone(), tmp.path().to_owned()];
        if let Some(downloads) = &options.download_dir {
            std::fs::create_dir_all(downloads)
                .map_err(|e| unconfined(format!("{downloads:?}: {e}")))?;
            writable.push(downloads.clone());
        }
        let readable: Vec<PathBuf> = SYSTEM_READABLE
            .iter()
            .map(PathBuf::from)
            .chain(options.executable.parent().map(Path::to_path_buf))
            .chain(options.readable.iter().cloned())
            .collect();
        let walls = aido_confine::PreparedLandlock::reading(6, &readable, &writable, &[proxy_port])
            .map_err(|e| unconfined(e.to_string()))?;
        Ok(Self {
            walls,
            root: nix::unistd::geteuid().is_root(),
            env,
            tmp,
        })
    }

    /// Set the environment, and enter the confinement in the child before Chromium runs; the
    /// temporary directory is the caller's to keep while Chromium runs.
    fn apply(self, command: &mut Command) -> tempfile::TempDir {
        let Self {
            walls,
            root,
            env,
            tmp,
        } = self;
        command
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("LANG", "C.UTF-8");
        for (name, value) in env {
            command.env(name, value);
        }
        let mut walls = walls;
        // Between fork and exec the hook makes system calls only (capset, prctl,
        // landlock_restrict_self; an error's text is made only on the way out); the ruleset
        // was built, and its memory allocated, before the fork.
        aido_sys::before_exec(command.as_std_mut(), move || {
            if root {
                aido_confine::drop_capabilities()
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
            }
            walls.enter()
        });
        tmp
    }
}

/// The command line: FLEET-NOTES' headless flags, the private profile, and the proxy with
/// loopback not bypassed (Chromium bypasses it by default; `<-loopback>` removes that rule).
fn flags(options: &Options, proxy: SocketAddr) -> Vec<String> {
    vec![
        "--headless".to_owned(),
        "--no-sandbox".to_owned(),
        "--disable-gpu".to_owned(),
        "--disable-quic".to_owned(),
        "--no-first-run".to_owned(),
        "--no-default-browser-check".to_owned(),
        "--disable-background-networking".to_owned(),
        "--disable-component-update".to_owned(),
        "--disable-sync".to_owned(),
        "--disable-breakpad".to_owned(),
        "--disable-dev-shm-usage".to_owned(),
        "--mute-audio".to_owned(),
        "--hide-scrollbars".to_owned(),
        // A restore from the back/forward cache fires no load event; every history step is
        // then a real load, seen by the proxy and waited for the same way.
        "--disable-features=BackForwardCache".to_owned(),
        format!("--user-data-dir={}", options.profile_dir.display()),
        format!("--proxy-server=http://{proxy}"),
        "--proxy-bypass-list=<-loopback>".to_owned(),
        // WebRTC's UDP (STUN, peer connections) cannot go through an HTTP proxy: none at all.
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp".to_owned(),
        format!(
            "--window-size={},{}",
            options.viewport_width, options.viewport_height
        ),
        "--remote-debugging-pipe".to_owned(),
        "about:blank".to_owned(),
    ]
}

/// Keep the last lines of Chromium's standard error; the pipe is drained to its end so it
/// never fills.
async fn keep_stderr(pipe: ChildStderr, kept: Arc<Mutex<VecDeque<String>>>) {
    let mut lines = BufReader::new(pipe).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::trace!(target: "aido_browser::chromium", "{line}");
        if let Ok(mut kept) = kept.lock() {
            if kept.len() == STDERR_LINES_KEPT {
                kept.pop_front();
            }
            kept.push_back(line);
        }
    }
}
