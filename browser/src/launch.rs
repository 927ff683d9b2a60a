//! Starting Chromium: its flags, its process group, and the DevTools endpoint it prints.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};

use crate::error::BrowserError;

/// Debian's Chromium.
pub const CHROMIUM_PATH: &str = "/usr/bin/chromium";

/// Lines of Chromium's standard error kept to explain a failed start.
const STDERR_LINES_KEPT: usize = 20;
/// Lines of Chromium's standard error read while waiting for the DevTools endpoint.
const STDERR_LINES_MAX: usize = 10_000;

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
    /// From spawning Chromium to its DevTools endpoint answering.
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
    group: Pid,
}

impl Process {
    /// Spawn Chromium and wait for the DevTools WebSocket URL it prints.
    pub(crate) async fn spawn(options: &Options) -> Result<(Self, String), BrowserError> {
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
        let mut command = Command::new(&options.executable);
        command
            .args(flags(options, proxy))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Chromium forks (zygote, renderers, GPU and network services): a group of its
            // own lets drop kill all of them, and none of the caller's.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| BrowserError::LaunchFailed {
            why: format!("cannot run {:?}: {e}", options.executable),
        })?;
        let group = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw)
            .ok_or_else(|| BrowserError::LaunchFailed {
                why: "Chromium exited at once".to_owned(),
            })?;
        let stderr = child.stderr.take();
        let process = Self { child, group };
        let timeout = Duration::from_millis(options.limits.launch_timeout_ms);
        let url = match stderr {
            Some(stderr) => tokio::time::timeout(timeout, endpoint(stderr))
                .await
                .map_err(|_| BrowserError::Timeout {
                    what: "Chromium's DevTools endpoint",
                    timeout_ms: options.limits.launch_timeout_ms,
                })??,
            None => {
                return Err(BrowserError::LaunchFailed {
                    why: "no standard error to read the DevTools endpoint from".to_owned(),
                });
            }
        };
        Ok((process, url))
    }

    /// Whether Chromium is still running.
    pub(crate) fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // The group is ours alone (process_group(0) above): killing it cannot reach another
        // Chromium. The child itself is reaped by tokio (kill_on_drop).
        let _ = killpg(self.group, Signal::SIGKILL);
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
        format!(
            "--window-size={},{}",
            options.viewport_width, options.viewport_height
        ),
        "--remote-debugging-address=127.0.0.1".to_owned(),
        "--remote-debugging-port=0".to_owned(),
        "about:blank".to_owned(),
    ]
}

/// Read standard error until Chromium prints `DevTools listening on ws://...`; the rest of it
/// is drained in the background so the pipe never fills.
async fn endpoint(stderr: ChildStderr) -> Result<String, BrowserError> {
    let mut lines = BufReader::new(stderr).lines();
    let mut kept: Vec<String> = Vec::new();
    for _ in 0..STDERR_LINES_MAX {
        let Ok(Some(line)) = lines.next_line().await else {
            break;
        };
        if let Some(url) = line.strip_prefix("DevTools listening on ") {
            let url = url.trim().to_owned();
            tokio::spawn(async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::trace!(target: "aido_browser::chromium", "{line}");
                }
            });
            return Ok(url);
        }
        if kept.len() == STDERR_LINES_KEPT {
            kept.remove(0);
        }
        kept.push(line);
    }
    Err(BrowserError::LaunchFailed {
        why: format!(
            "Chromium exited before offering DevTools: {}",
            kept.join(" | ")
        ),
    })
}
