//! Owned sessions: a private headless display server (Xvfb with a window manager, or sway
//! with its headless backend), a D-Bus session bus and the configured programs, in a runtime
//! directory of its own (mode 0700) that is removed with the session. Nothing of the user's
//! session is reached: the display, the bus address and XDG_RUNTIME_DIR, XDG_CONFIG_HOME and
//! XDG_CACHE_HOME all point inside it, and the other server's variables (WAYLAND_DISPLAY and
//! SWAYSOCK for Xvfb, DISPLAY for sway) are removed from the programs' environment.
//!
//! sway runs with `WLR_BACKENDS=headless WLR_RENDERER=pixman` (no GPU, no seat, no logind)
//! and a config aido writes (no XWayland, the output at the configured size, keyboards not
//! grouped, focus not following the mouse). sway refuses to run as root, so when aido is root
//! sway runs as `nobody` (65534) and the runtime directory is handed to it; aido (root) still
//! reaches its sockets. sway is ready when its Wayland and IPC sockets answer.
//!
//! Xvfb picks a free display itself (`-displayfd 1`) and says which once it accepts
//! connections; dbus-daemon prints its address once it listens; the window manager is ready
//! when it sets `_NET_SUPPORTING_WM_CHECK`. Each wait has a deadline, and a session that does
//! not come up is an error that names the program and its log, never a hang.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::error::DesktopError;

/// Which headless display server an owned session runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Server {
    /// Xvfb with the window manager (the x11 backend drives it).
    #[default]
    Xvfb,
    /// sway with the headless backend (the wlr backend drives it).
    Sway,
}

/// How an owned session is made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionOptions {
    /// The display server.
    pub server: Server,
    /// Screen width in pixels.
    pub width: u32,
    /// Screen height in pixels.
    pub height: u32,
    /// The window manager's program (`openbox`), or None for none.
    pub window_manager: Option<String>,
    /// Programs started in the session once it is up, each an argv.
    pub autostart: Vec<Vec<String>>,
    /// Where the runtime directory is made.
    pub runtime_parent: PathBuf,
    /// How long each part may take to come up, in ms.
    pub start_timeout_ms: u64,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            server: Server::Xvfb,
            width: 1280,
            height: 800,
            window_manager: Some("openbox".into()),
            autostart: Vec::new(),
            runtime_parent: std::env::temp_dir(),
            start_timeout_ms: 10_000,
        }
    }
}

/// A running owned session. Dropping it stops every program it started (last first) and
/// removes its runtime directory.
pub struct OwnedSession {
    /// The display: an X display (`:42`), or the path of sway's Wayland socket.
    pub display: String,
    /// The server.
    pub server: Server,
    /// The D-Bus session bus address.
    pub bus: String,
    runtime: tempfile::TempDir,
    children: Vec<(String, Child)>,
}

/// Whether `program` is on PATH.
pub fn installed(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            let path = dir.join(program);
            path.is_file()
        })
    })
}

fn need(program: &str) -> Result<(), DesktopError> {
    if installed(program) {
        Ok(())
    } else {
        Err(DesktopError::ProgramMissing {
            program: program.to_owned(),
        })
    }
}

/// Read the first line a child prints on stdout, within a deadline.
fn first_line(child: &mut Child, timeout_ms: u64) -> Option<String> {
    let stdout = child.stdout.take()?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    rx.recv_timeout(Duration::from_millis(timeout_ms))
        .ok()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
}

impl OwnedSession {
    /// Start the server (Xvfb and the window manager, or sway), dbus-daemon and the
    /// autostart programs.
    pub fn start(options: &SessionOptions) -> Result<Self, DesktopError> {
        match options.server {
            Server::Xvfb => {
                need("Xvfb")?;
                if let Some(wm) = &options.window_manager {
                    need(wm)?;
                }
            }
            Server::Sway => need("sway")?,
        }
        need("dbus-daemon")?;
        let failed = |why: String| DesktopError::SessionFailed { why };
        // A unix socket path has at most 107 bytes (sun_path); the bus socket is in here.
        let longest = options.runtime_parent.as_os_str().len() + "/aido-desktop-XXXXXX/bus".len();
        if longest > 100 {
            return Err(failed(format!(
                "the runtime directory's parent {} is too long for the bus socket's path",
                options.runtime_parent.display()
            )));
        }
        std::fs::create_dir_all(&options.runtime_parent).map_err(|e| {
            failed(format!(
                "cannot create {}: {e}",
                options.runtime_parent.display()
            ))
        })?;
        let runtime = tempfile::Builder::new()
            .prefix("aido-desktop-")
            .tempdir_in(&options.runtime_parent)
            .map_err(|e| failed(format!("cannot make the runtime directory: {e}")))?;
        // Private to this user, whatever the umask made it.
        std::fs::set_permissions(
            runtime.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .map_err(|e| failed(format!("cannot make the runtime directory private: {e}")))?;
        let mut session = Self {
            display: String::new(),
            server: options.server,
            bus: String::new(),
            runtime,
            children: Vec::new(),
        };
        let timeout = options.start_timeout_ms;
        if options.server == Server::Sway {
            session.start_bus(timeout)?;
            session.start_sway(options)?;
            for argv in &options.autostart {
                let child = session.spawn(argv)?;
                session.children.push((argv.join(" "), child));
            }
            return Ok(session);
        }

        let mut xvfb = Command::new("Xvfb")
            .args([
                "-displayfd",
                "1",
                "-nolisten",
                "tcp",
                "-noreset",
                "-screen",
                "0",
            ])
            .arg(format!("{}x{}x24", options.width, options.height))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(session.log("Xvfb")?)
            .spawn()
            .map_err(|e| failed(format!("cannot start Xvfb: {e}")))?;
        let number = first_line(&mut xvfb, timeout);
        session.children.push(("Xvfb".into(), xvfb));
        let number = number.ok_or_else(|| {
            failed(format!(
                "Xvfb named no display within {timeout} ms (see {})",
                session.log_path("Xvfb").display()
            ))
        })?;
        session.display = format!(":{number}");
        session.start_bus(timeout)?;

        if let Some(wm) = &options.window_manager {
            let child = session.spawn(std::slice::from_ref(wm))?;
            session.children.push((wm.clone(), child));
            session.wait_for_window_manager(wm, timeout)?;
        }
        for argv in &options.autostart {
            let child = session.spawn(argv)?;
            session.children.push((argv.join(" "), child));
        }
        Ok(session)
    }

    fn start_bus(&mut self, timeout: u64) -> Result<(), DesktopError> {
        let failed = |why: String| DesktopError::SessionFailed { why };
        let session = self;
        // A bus of its own with no service directories: nothing is activated behind the
        // session's back (the system's dunst or mako would race the configured one), so a
        // notification server is the one autostart names, or none.
        let socket = session.runtime.path().join("bus");
        let config = session.runtime.path().join("bus.conf");
        std::fs::write(&config, bus_config(&socket))
            .map_err(|e| failed(format!("cannot write the bus config: {e}")))?;
        let mut dbus = Command::new("dbus-daemon")
            .args(["--nofork", "--nopidfile", "--print-address=1"])
            .arg(format!("--config-file={}", config.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(session.log("dbus-daemon")?)
            .spawn()
            .map_err(|e| failed(format!("cannot start dbus-daemon: {e}")))?;
        let address = first_line(&mut dbus, timeout);
        session.children.push(("dbus-daemon".into(), dbus));
        session.bus = address.ok_or_else(|| {
            failed(format!(
                "dbus-daemon printed no address within {timeout} ms (see {})",
                session.log_path("dbus-daemon").display()
            ))
        })?;
        Ok(())
    }

    fn start_sway(&mut self, options: &SessionOptions) -> Result<(), DesktopError> {
        let failed = |why: String| DesktopError::SessionFailed { why };
        let dir = self.runtime.path().to_owned();
        let config = dir.join("sway.conf");
        std::fs::write(&config, sway_config(options.width, options.height))
            .map_err(|e| failed(format!("cannot write the sway config: {e}")))?;
        let mut command = Command::new("sway");
        command
            .arg("--config")
            .arg(&config)
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .env_remove("SWAYSOCK")
            .env_remove("I3SOCK")
            .envs(self.env())
            .env("HOME", &dir)
            .env("WLR_BACKENDS", "headless")
            .env("WLR_RENDERER", "pixman")
            .env("WLR_LIBINPUT_NO_DEVICES", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.log("sway")?);
        if running_as_root() {
            // sway refuses to start as root (it checks it cannot regain it): run it as nobody,
            // in a runtime directory it owns.
            std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY))
                .map_err(|e| failed(format!("cannot hand the runtime dir to uid {NOBODY}: {e}")))?;
            std::os::unix::process::CommandExt::uid(&mut command, NOBODY);
            std::os::unix::process::CommandExt::gid(&mut command, NOBODY);
        }
        let child = command
            .spawn()
            .map_err(|e| failed(format!("cannot start sway: {e}")))?;
        self.children.push(("sway".into(), child));
        let timeout_ms = options.start_timeout_ms;
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        loop {
            let socket = std::fs::read_dir(&dir).ok().and_then(|entries| {
                entries.flatten().find_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    (name.starts_with("wayland-") && !name.ends_with(".lock")).then(|| e.path())
                })
            });
            if let Some(socket) = socket {
                let display = socket.display().to_string();
                if let Ok(w) = crate::wlr::Wlr::connect(&display)
                    && w.ipc_socket().is_some()
                {
                    self.display = display;
                    return Ok(());
                }
            }
            if let Some((_, child)) = self.children.last_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(failed(format!(
                    "sway exited ({status}) before it listened (see {})",
                    self.log_path("sway").display()
                )));
            }
            if Instant::now() >= deadline {
                return Err(failed(format!(
                    "sway's Wayland and IPC sockets did not answer within {timeout_ms} ms (see {})",
                    self.log_path("sway").display()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The runtime directory.
    pub fn runtime_dir(&self) -> &Path {
        self.runtime.path()
    }

    fn log_path(&self, name: &str) -> PathBuf {
        let name: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(32)
            .collect();
        self.runtime.path().join(format!("{name}.log"))
    }

    fn log(&self, name: &str) -> Result<std::fs::File, DesktopError> {
        std::fs::File::create(self.log_path(name)).map_err(|e| DesktopError::SessionFailed {
            why: format!("cannot create the log of {name}: {e}"),
        })
    }

    /// The environment every program of the session gets.
    pub fn env(&self) -> Vec<(String, String)> {
        let dir = self.runtime.path();
        let display = match self.server {
            Server::Xvfb => ("DISPLAY".to_owned(), self.display.clone()),
            Server::Sway => ("WAYLAND_DISPLAY".to_owned(), self.display.clone()),
        };
        let mut env = vec![display];
        if self.server == Server::Sway
            && let Some(ipc) = crate::sway::socket_of_any(dir)
        {
            env.push(("SWAYSOCK".into(), ipc.display().to_string()));
        }
        env.extend([
            ("DBUS_SESSION_BUS_ADDRESS".into(), self.bus.clone()),
            ("XDG_RUNTIME_DIR".into(), dir.display().to_string()),
            (
                "XDG_CONFIG_HOME".into(),
                dir.join("config").display().to_string(),
            ),
            (
                "XDG_CACHE_HOME".into(),
                dir.join("cache").display().to_string(),
            ),
        ]);
        env
    }

    /// Start a program in the session (its output goes to a log in the runtime directory).
    pub fn spawn(&self, argv: &[String]) -> Result<Child, DesktopError> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| DesktopError::SessionFailed {
                why: "an autostart command is empty".into(),
            })?;
        need(program)?;
        let log = self.log(program)?;
        let err = log.try_clone().map_err(|e| DesktopError::SessionFailed {
            why: format!("cannot open the log of {program}: {e}"),
        })?;
        Command::new(program)
            .args(args)
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .env_remove("SWAYSOCK")
            .env_remove("I3SOCK")
            .envs(self.env())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| DesktopError::SessionFailed {
                why: format!("cannot start {program}: {e}"),
            })
    }

    fn wait_for_window_manager(&mut self, wm: &str, timeout_ms: u64) -> Result<(), DesktopError> {
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        loop {
            if let Ok(caps) = crate::x11::probe(&self.display)
                && caps.window_manager.is_some()
            {
                return Ok(());
            }
            if let Some((_, child)) = self.children.last_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(DesktopError::SessionFailed {
                    why: format!(
                        "{wm} exited ({status}) before it managed the screen (see {})",
                        self.log_path(wm).display()
                    ),
                });
            }
            if Instant::now() >= deadline {
                return Err(DesktopError::SessionFailed {
                    why: format!(
                        "{wm} did not set _NET_SUPPORTING_WM_CHECK within {timeout_ms} ms"
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The uid and gid sway runs as when aido is root.
const NOBODY: u32 = 65534;

/// Whether this process runs as root (the owner of /proc/self is the effective uid).
fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

/// The config of an owned sway: headless output at the size, no XWayland, no bar.
fn sway_config(width: u32, height: u32) -> String {
    format!(
        "xwayland disable\n\
         output HEADLESS-1 mode {width}x{height} position 0 0\n\
         seat * keyboard_grouping none\n\
         focus_follows_mouse no\n\
         mouse_warping none\n\
         default_border normal 2\n"
    )
}

/// A session bus listening on `socket`, with no service activation.
fn bus_config(socket: &Path) -> String {
    format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"#,
        socket.display()
    )
}

impl Drop for OwnedSession {
    fn drop(&mut self) {
        for (_, child) in self.children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
