//! Background commands: [`Sandbox::start`] sets a command up exactly as [`Sandbox::run`]
//! does (the same plan, the same re-exec, every layer), returns once it runs, and hands back
//! its output streams, a [`Control`] to write its input and stop it, and a callback with its
//! end. The thread that started the sandbox child waits for it (the child dies with that
//! thread, init with the child), so a command never outlives aido.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use aido_confine::Cgroup;
use aido_egress::{EgressLog, EgressPolicy, EgressRecord, EgressTotals, Proxy};

use crate::error::{SpawnError, Step};
use crate::plan::{self, Resolved};
use crate::profile::{Exit, Profile, Request, Usage, WriteMode};
use crate::protocol::CHILD_ARG;
use crate::protocol::{
    Control as Frame, Launch, Live, Netns, Report, read_json, read_json_with_fd, write_frame,
    write_json,
};
use crate::spawn::{Placeholders, SETUP_GRACE_MS, Sandbox, kill_init};

/// How a background command is wired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StartOptions {
    /// Give the command a pseudo-terminal (its standard input, output and error, and its
    /// controlling terminal) of this many rows and columns, instead of pipes.
    pub pty: Option<(u16, u16)>,
    /// Make the command's network namespace one later commands can join
    /// ([`Started::network`]). Not with egress: that command's namespace holds its proxy.
    pub share_network: bool,
}

/// A background command's output, as the caller reads it (to their ends: they close when the
/// whole tree is gone).
pub enum Output {
    /// Separate pipes.
    Pipes {
        /// Standard output.
        stdout: ChildStdout,
        /// Standard error.
        stderr: ChildStderr,
    },
    /// The pty's master side: output and error together (reads end with EIO at the end).
    Pty {
        /// The master.
        master: std::fs::File,
    },
}

/// How a background command ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    /// Its exit (`Signal(9)` when [`Control::kill`] ended it).
    pub exit: Exit,
    /// What its tree used.
    pub usage: Usage,
    /// From the spawn to the end.
    pub duration_ms: u64,
    /// Every connection it tried through the egress proxy (when the profile gives it one).
    pub egress: Vec<EgressRecord>,
    /// Every connection to its egress proxy counted, recorded or not (`None` without one).
    pub egress_totals: Option<EgressTotals>,
}

/// The ways to reach a running background command; cheap to share between threads.
pub struct Control {
    socket: Mutex<UnixStream>,
    master: Option<Mutex<std::fs::File>>,
    child: OwnedFd,
    init_pid: Option<u32>,
    cgroup: Option<Arc<Cgroup>>,
    killed: Arc<AtomicBool>,
    egress: Option<EgressLog>,
}

impl Control {
    /// The connections it has tried through the egress proxy so far (none without one).
    pub fn egress(&self) -> Vec<EgressRecord> {
        self.egress
            .as_ref()
            .map(EgressLog::records)
            .unwrap_or_default()
    }

    /// Every connection to its egress proxy counted so far, recorded or not (`None` without
    /// one).
    pub fn egress_totals(&self) -> Option<EgressTotals> {
        self.egress.as_ref().map(EgressLog::totals)
    }

    /// The host pid of the sandbox's init (pid 1 of the command's namespace; the command is
    /// its child), once it reported running.
    pub fn init_pid(&self) -> Option<u32> {
        self.init_pid
    }

    /// Writes `bytes` to the command's standard input (through init, or into the pty).
    ///
    /// # Cancel safety
    /// Blocking: a command that does not read its input fills the pipe and this waits for it.
    pub fn write_stdin(&self, bytes: &[u8]) -> std::io::Result<()> {
        if let Some(master) = &self.master {
            let mut master = master.lock().map_err(|_| poisoned())?;
            return master.write_all(bytes).and_then(|()| master.flush());
        }
        let mut frame = Vec::with_capacity(1 + bytes.len());
        frame.push(Frame::STDIN);
        frame.extend_from_slice(bytes);
        self.send(&frame)
    }

    /// Closes the command's standard input (a pty sends end-of-file, `^D`, instead).
    pub fn close_stdin(&self) -> std::io::Result<()> {
        if self.master.is_some() {
            return self.write_stdin(&[4]);
        }
        self.send(&[Frame::CLOSE_STDIN])
    }

    /// SIGTERM to every process of the command's pid namespace, the command and everything it
    /// started (double-forked or not), all but init.
    ///
    /// Never waits: while a write of input is blocked on a command that does not read it, the
    /// socket is busy and this fails (`WouldBlock`); [`Control::kill`] still works.
    pub fn terminate(&self) -> std::io::Result<()> {
        let mut socket = match self.socket.try_lock() {
            Ok(socket) => socket,
            Err(std::sync::TryLockError::WouldBlock) => {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            Err(std::sync::TryLockError::Poisoned(_)) => return Err(poisoned()),
        };
        write_frame(&mut *socket, &[Frame::TERMINATE])
    }

    /// SIGKILL to the whole tree: init (which takes every process of its namespace with it),
    /// the sandbox child and the cgroup. Its end is then reported as `Signal(9)`.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::SeqCst);
        if let Some(cgroup) = &self.cgroup {
            cgroup.kill();
        }
        if let Some(pid) = self.init_pid {
            kill_init(pid);
        }
        let _ = rustix::process::pidfd_send_signal(&self.child, rustix::process::Signal::KILL);
    }

    fn send(&self, frame: &[u8]) -> std::io::Result<()> {
        let mut socket = self.socket.lock().map_err(|_| poisoned())?;
        write_frame(&mut *socket, frame)
    }
}

fn poisoned() -> std::io::Error {
    std::io::Error::other("a writer of this command panicked")
}

/// What [`Sandbox::start`] hands back once the command runs.
pub struct Started {
    /// Its input and stop.
    pub control: Arc<Control>,
    /// Its output.
    pub output: Output,
    /// The layer directory holding its writes, for an overlay profile.
    pub layers_dir: Option<std::path::PathBuf>,
    /// Its network namespace, for its session's later commands
    /// ([`Sandbox::with_network`]): the one it joined, or the one it made when
    /// [`StartOptions::share_network`] asked for it (not with egress).
    pub network: Option<crate::netns::SharedNetwork>,
}

/// The end callback: called once, on the thread that waited for the command.
pub type OnEnd = Box<dyn FnOnce(Result<Ended, SpawnError>) + Send>;

impl Sandbox {
    /// Starts `request` confined by `profile` in the background and returns once it runs (or
    /// setup failed: nothing ran). `on_end` is called with its end, on the thread that started
    /// it; the sandbox child dies with that thread, so with aido. `request.timeout_ms` still
    /// bounds it; `request.stdin` is written first, and the input stays open for
    /// [`Control::write_stdin`]. The output caps of `request` do not apply: the caller reads
    /// the streams.
    pub fn start(
        &self,
        profile: &Profile,
        request: &Request,
        options: StartOptions,
        on_end: OnEnd,
    ) -> Result<Started, SpawnError> {
        // With network, the command gets a proxy of its own that lives as long as it does.
        let egress = profile.network.policy()?;
        let parent_env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
        let mut resolved = plan::resolve(
            profile,
            request,
            self.home.as_deref(),
            &parent_env,
            &self.globs,
        )?;
        resolved.plan.live = Some(Live {
            pty: options.pty.is_some(),
        });
        let layers_dir = match &resolved.plan.writes {
            WriteMode::Direct => None,
            WriteMode::Overlay { layers_dir } => Some(layers_dir.clone()),
        };
        if let Some(layers_dir) = &layers_dir {
            crate::spawn::create_layers(
                layers_dir,
                resolved.plan.writable_roots.len(),
                resolved.ids.as_ref().map(|ids| (ids.uid, ids.gid)),
            )?;
        }
        let cgroup = profile
            .cgroup
            .as_ref()
            .map(Cgroup::create)
            .transpose()?
            .map(Arc::new);
        let (sender, receiver) = mpsc::channel();
        let sandbox = self.clone();
        let request = request.clone();
        std::thread::Builder::new()
            .name("aido-handle".into())
            .spawn(move || {
                let placeholders = match Placeholders::create(&resolved) {
                    Ok(placeholders) => placeholders,
                    Err(error) => {
                        let _ = sender.send(Err(error));
                        return;
                    }
                };
                let killed = Arc::new(AtomicBool::new(false));
                let launched = sandbox.launch_background(
                    &resolved,
                    &request,
                    options,
                    (cgroup.clone(), egress),
                    Arc::clone(&killed),
                );
                let (mut child, mut reports, proxy) = match launched {
                    Ok((child, reports, started, proxy)) => {
                        let _ = sender.send(Ok(started));
                        (child, reports, proxy)
                    }
                    Err(error) => {
                        let _ = sender.send(Err(error));
                        return;
                    }
                };
                let begun = Instant::now();
                let end = wait_end(&mut reports, &mut child, &request, &killed);
                if let Some(cgroup) = &cgroup {
                    cgroup.kill();
                }
                let _ = child.kill();
                let _ = child.wait();
                drop(placeholders);
                let (egress, egress_totals) = match proxy.map(Proxy::finish) {
                    Some((records, totals)) => (records, Some(totals)),
                    None => (Vec::new(), None),
                };
                on_end(end.map(|(exit, mut usage)| {
                    usage.memory_peak_bytes = cgroup.as_deref().and_then(Cgroup::memory_peak_bytes);
                    Ended {
                        exit,
                        usage,
                        duration_ms: begun.elapsed().as_millis() as u64,
                        egress,
                        egress_totals,
                    }
                }));
            })
            .map_err(|error| SpawnError::LaunchFailed {
                exe: self.exe.display().to_string(),
                detail: error.to_string(),
            })?;
        let (control, output, network) = receiver
            .recv()
            .map_err(|_| SpawnError::protocol("the starting thread ended without an answer"))??;
        Ok(Started {
            control,
            output,
            layers_dir,
            network,
        })
    }

    #[allow(clippy::too_many_lines)]
    fn launch_background(
        &self,
        resolved: &Resolved,
        request: &Request,
        options: StartOptions,
        (cgroup, mut egress): (Option<Arc<Cgroup>>, Option<EgressPolicy>),
        killed: Arc<AtomicBool>,
    ) -> Result<Launched, SpawnError> {
        let launch_failed = |detail: String| SpawnError::LaunchFailed {
            exe: self.exe.display().to_string(),
            detail,
        };
        let (control, theirs) =
            UnixStream::pair().map_err(|error| launch_failed(error.to_string()))?;
        let mut command = Command::new(&self.exe);
        command
            .arg(CHILD_ARG)
            .env_clear()
            .stdin(Stdio::from(OwnedFd::from(theirs)));
        let master = match options.pty {
            Some((rows, cols)) => {
                let (master, slave) = open_pty(rows, cols).map_err(launch_failed)?;
                let copy = slave
                    .try_clone()
                    .map_err(|error| launch_failed(error.to_string()))?;
                command.stdout(Stdio::from(slave)).stderr(Stdio::from(copy));
                Some(master)
            }
            None => {
                command.stdout(Stdio::piped()).stderr(Stdio::piped());
                None
            }
        };
        let mut child = command
            .spawn()
            .map_err(|error| launch_failed(error.to_string()))?;
        // The slave's copies in this process go with the command; the master reads EIO once
        // the tree is gone.
        drop(command);
        let fail = |child: &mut Child, error: SpawnError| {
            let _ = child.kill();
            let _ = child.wait();
            error
        };
        if let Some(cgroup) = &cgroup
            && let Err(error) = cgroup.join(child.id())
        {
            return Err(fail(&mut child, error.into()));
        }
        let pidfd = rustix::process::Pid::from_raw(child.id() as i32)
            .ok_or_else(|| SpawnError::protocol("the sandbox child has pid 0"))
            .and_then(|pid| {
                rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).map_err(
                    |errno| SpawnError::unavailable("pidfd", format!("pidfd_open: {errno}")),
                )
            });
        let pidfd = match pidfd {
            Ok(pidfd) => pidfd,
            Err(error) => return Err(fail(&mut child, error)),
        };
        let mut reports = match control.try_clone() {
            Ok(reports) => reports,
            Err(error) => return Err(fail(&mut child, launch_failed(error.to_string()))),
        };
        let mut writer = control;
        // Without egress, a background command joins its session's namespace, or makes one
        // for its session's later commands; with egress it has its own (its proxy is there).
        let joined = match self.join(egress.is_some()) {
            Ok(joined) => joined,
            Err(error) => return Err(fail(&mut child, error)),
        };
        let netns = match (&joined, &egress, options.share_network) {
            (Some(_), _, _) => Netns::Join,
            (None, None, true) => Netns::Shared,
            _ => Netns::Own,
        };
        let tmp = match self.tmp_for(resolved) {
            Ok(tmp) => tmp,
            Err(error) => return Err(fail(&mut child, error)),
        };
        let launch = Launch {
            timeout_ms: request.timeout_ms,
            background: true,
            egress: egress.is_some(),
            netns,
            ids: resolved.ids.clone(),
            tmp: tmp.is_some(),
        };
        let (lent, owner) = match &joined {
            Some((netns, owner)) => (Some(netns), owner.as_ref()),
            None => (None, None),
        };
        let launched = crate::spawn::send_launch(&writer, &launch, (lent, owner), tmp.as_ref());
        let mut shared: (Option<OwnedFd>, Option<OwnedFd>) = (None, None);
        let sent = launched
            .and_then(|()| write_json(&mut writer, &resolved.plan))
            .and_then(|()| {
                // On a pty the first input goes through the terminal like every later one.
                let first: &[u8] = if master.is_some() {
                    &[]
                } else {
                    &request.stdin
                };
                write_frame(&mut writer, first)
            });
        if let Err(error) = sent {
            let _ = reports.set_read_timeout(Some(Duration::from_millis(SETUP_GRACE_MS)));
            if let Ok(Report::Failed { error }) = read_json::<Report>(&mut reports) {
                return Err(fail(&mut child, error));
            }
            return Err(fail(
                &mut child,
                SpawnError::protocol(format!("sending the plan: {error}")),
            ));
        }
        // Setup is bounded; the command's own run is not, but for its timeout.
        let deadline = Instant::now() + Duration::from_millis(SETUP_GRACE_MS);
        let mut init_pid = None;
        let mut proxy = None;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                if let Some(pid) = init_pid {
                    kill_init(pid);
                }
                return Err(fail(
                    &mut child,
                    SpawnError::protocol("the sandbox did not start within its setup grace"),
                ));
            }
            let _ = reports.set_read_timeout(Some(remaining));
            match read_json_with_fd::<Report>(&reports) {
                Ok((Report::Started { init_pid: pid }, _)) => init_pid = Some(pid),
                Ok((Report::Running, _)) => break,
                Ok((Report::Egress, fd)) => {
                    let (Some(fd), Some(policy)) = (fd, egress.take()) else {
                        return Err(fail(
                            &mut child,
                            SpawnError::protocol(
                                "an egress frame without its socket, or one not asked for",
                            ),
                        ));
                    };
                    match Proxy::start(fd, policy) {
                        Ok(started) => proxy = Some(started),
                        Err(error) => {
                            let error = SpawnError::setup_io(
                                Step::Network,
                                &error,
                                "start the egress proxy",
                            );
                            return Err(fail(&mut child, error));
                        }
                    }
                }
                Ok((Report::Netns, fd)) if launch.netns == Netns::Shared && shared.0.is_none() => {
                    shared.0 = fd;
                }
                Ok((Report::Userns, fd)) if launch.netns == Netns::Shared && shared.1.is_none() => {
                    shared.1 = fd;
                }
                Ok((Report::Netns | Report::Userns, _)) => {
                    return Err(fail(
                        &mut child,
                        SpawnError::protocol("a namespace frame not asked for"),
                    ));
                }
                Ok((Report::Reaped, _)) => {
                    return Err(fail(
                        &mut child,
                        SpawnError::protocol("the sandbox ended before it was reported running"),
                    ));
                }
                Ok((Report::Failed { error }, _)) => return Err(fail(&mut child, error)),
                Ok((Report::Exited { .. }, _)) => {
                    return Err(fail(
                        &mut child,
                        SpawnError::protocol("the command ended before it was reported running"),
                    ));
                }
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(error) => {
                    return Err(fail(
                        &mut child,
                        SpawnError::protocol(format!("the sandbox child ended: {error}")),
                    ));
                }
            }
        }
        let output = match master {
            Some(master) => {
                let reader = match master.try_clone() {
                    Ok(reader) => reader,
                    Err(error) => return Err(fail(&mut child, launch_failed(error.to_string()))),
                };
                Output::Pty { master: reader }
            }
            None => match (child.stdout.take(), child.stderr.take()) {
                (Some(stdout), Some(stderr)) => Output::Pipes { stdout, stderr },
                _ => return Err(fail(&mut child, launch_failed("no output pipes".into()))),
            },
        };
        let control = Control {
            socket: Mutex::new(writer),
            master: match &output {
                Output::Pty { master } => match master.try_clone() {
                    Ok(writer) => Some(Mutex::new(writer)),
                    Err(error) => return Err(fail(&mut child, launch_failed(error.to_string()))),
                },
                Output::Pipes { .. } => None,
            },
            child: pidfd,
            init_pid,
            cgroup,
            killed,
            egress: proxy.as_ref().map(Proxy::log),
        };
        let network = match (netns, shared) {
            (Netns::Join, _) => self.network.clone(),
            (Netns::Shared, (Some(netns), owner)) => {
                Some(crate::netns::SharedNetwork::new(netns, owner))
            }
            (Netns::Shared, (None, _)) => {
                return Err(fail(
                    &mut child,
                    SpawnError::protocol("a shared namespace that was never sent"),
                ));
            }
            _ => None,
        };
        Ok((child, reports, (Arc::new(control), output, network), proxy))
    }
}

/// A launched background command: the sandbox child, the socket its reports come on, what
/// the caller gets, and its egress proxy (when it has network).
type Launched = (
    Child,
    UnixStream,
    (Arc<Control>, Output, Option<crate::netns::SharedNetwork>),
    Option<Proxy>,
);

/// Waits for the final report; past the timeout and the grace the tree is killed here.
fn wait_end(
    reports: &mut UnixStream,
    child: &mut Child,
    request: &Request,
    killed: &AtomicBool,
) -> Result<(Exit, Usage), SpawnError> {
    let deadline = Instant::now() + Duration::from_millis(request.timeout_ms + SETUP_GRACE_MS);
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            let _ = child.kill();
            return Ok((Exit::TimedOut, Usage::default()));
        }
        let _ = reports.set_read_timeout(Some(remaining));
        match read_json::<Report>(reports) {
            Ok(Report::Exited { exit, usage }) => return Ok((exit, usage)),
            Ok(
                Report::Started { .. }
                | Report::Running
                | Report::Egress
                | Report::Netns
                | Report::Userns
                | Report::Reaped,
            ) => {}
            Ok(Report::Failed { .. }) | Err(_) if killed.load(Ordering::SeqCst) => {
                return Ok((Exit::Signal(libc::SIGKILL), Usage::default()));
            }
            Ok(Report::Failed { error }) => return Err(error),
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(error) => {
                return Err(SpawnError::protocol(format!(
                    "the sandbox child ended without a report ({error})"
                )));
            }
        }
    }
}

/// A new pseudo-terminal of `rows` × `cols`: the master, and the slave opened from it (no path
/// lookup, so no `/dev/pts` race).
fn open_pty(rows: u16, cols: u16) -> Result<(std::fs::File, OwnedFd), String> {
    use rustix::pty::OpenptFlags;
    let master =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)
            .map_err(|errno| format!("posix_openpt: {errno}"))?;
    rustix::pty::grantpt(&master).map_err(|errno| format!("grantpt: {errno}"))?;
    rustix::pty::unlockpt(&master).map_err(|errno| format!("unlockpt: {errno}"))?;
    let slave = rustix::pty::ioctl_tiocgptpeer(&master, OpenptFlags::RDWR | OpenptFlags::NOCTTY)
        .map_err(|errno| format!("TIOCGPTPEER: {errno}"))?;
    let size = rustix::termios::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    rustix::termios::tcsetwinsize(&slave, size).map_err(|errno| format!("TIOCSWINSZ: {errno}"))?;
    Ok((std::fs::File::from(master), slave))
}
