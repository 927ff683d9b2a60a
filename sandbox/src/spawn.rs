//! The parent side: [`Sandbox::run`] resolves the plan, starts the sandbox child, feeds it the
//! plan over a Unix socket, collects the output within its caps and waits for the report.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};

use aido_confine::{Cgroup, CgroupLimits, Hierarchy};

use crate::deny::GlobIndex;
use crate::error::{SpawnError, Step};
use crate::plan::{self, Resolved};
use crate::profile::{Exit, Outcome, Profile, Request, Usage, WriteMode};
use crate::protocol::CHILD_ARG;
use crate::protocol::{
    Launch, Netns, Report, read_json, read_json_with_fd, write_frame, write_json,
    write_json_with_fd,
};

/// How long setup may take on top of the command's timeout before the parent kills the child
/// itself (the child enforces the timeout; this is the backstop if the child hangs).
pub const SETUP_GRACE_MS: u64 = 5_000;
/// How long the output pipes may stay open after the tree is gone.
pub const DRAIN_MS: u64 = 2_000;
/// Bytes read from an output pipe at a time.
const CHUNK_BYTES: usize = 64 << 10;

/// Runs commands confined; holds the path of the executable that serves the sandbox child
/// (one that calls [`crate::run_child_if_requested`] first thing in `main`).
#[derive(Clone, Debug)]
pub struct Sandbox {
    pub(crate) exe: PathBuf,
    pub(crate) home: Option<PathBuf>,
    pub(crate) globs: Arc<GlobIndex>,
    /// The network namespace commands join instead of one of their own (not with egress).
    pub(crate) network: Option<crate::netns::SharedNetwork>,
    /// The tmpfs commands get as `/tmp` instead of a private one (a session's).
    pub(crate) tmp: Option<crate::tmp::SharedTmp>,
}

/// A command's standard output and error, each read up to its cap on a thread of its own.
pub(crate) struct Outputs(mpsc::Receiver<(usize, Captured)>);

impl Outputs {
    /// Takes `child`'s output pipes and starts reading them.
    pub(crate) fn start(child: &mut Child, request: &Request) -> Self {
        let (sender, receiver) = mpsc::channel();
        let pipes = [
            child
                .stdout
                .take()
                .map(|pipe| Box::new(pipe) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|pipe| Box::new(pipe) as Box<dyn Read + Send>),
        ];
        let caps = [request.stdout_bytes_max, request.stderr_bytes_max];
        for (index, (pipe, cap)) in pipes.into_iter().zip(caps).enumerate() {
            let sender = sender.clone();
            std::thread::spawn(move || {
                let captured = pipe.map(|pipe| capture(pipe, cap)).unwrap_or_default();
                let _ = sender.send((index, captured));
            });
        }
        Outputs(receiver)
    }

    /// Standard output and error, once both pipes closed (within [`DRAIN_MS`] from now);
    /// `stuck` is the protocol error when one stays open.
    pub(crate) fn finish(self, stuck: &'static str) -> Result<[Captured; 2], SpawnError> {
        let mut outputs = [Captured::default(), Captured::default()];
        let deadline = Instant::now() + Duration::from_millis(DRAIN_MS);
        for _ in 0..2 {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match self.0.recv_timeout(remaining) {
                Ok((index, captured)) => outputs[index] = captured,
                Err(_) => return Err(SpawnError::protocol(stuck)),
            }
        }
        Ok(outputs)
    }
}

impl Outcome {
    /// A command's end and its two outputs, timed from `started`; no resource use, cgroup or
    /// egress (the sandbox adds its own).
    pub(crate) fn captured(exit: Exit, [stdout, stderr]: [Captured; 2], started: Instant) -> Self {
        Outcome {
            exit,
            stdout_truncated: stdout.total > stdout.kept.len() as u64,
            stderr_truncated: stderr.total > stderr.kept.len() as u64,
            stdout_bytes_total: stdout.total,
            stderr_bytes_total: stderr.total,
            stdout: stdout.kept,
            stderr: stderr.kept,
            usage: crate::profile::Usage::default(),
            cgroup: None,
            duration_ms: started.elapsed().as_millis() as u64,
            egress: Vec::new(),
            egress_totals: None,
        }
    }
}

/// Standard output or error as collected: at most the cap kept, everything counted.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    pub(crate) kept: Vec<u8>,
    pub(crate) total: u64,
}

impl Sandbox {
    /// A sandbox served by `exe` (`std::env::current_exe()` for aido itself).
    pub fn new(exe: impl Into<PathBuf>) -> Self {
        Sandbox {
            exe: exe.into(),
            home: std::env::var_os("HOME").map(PathBuf::from),
            globs: Arc::default(),
            network: None,
            tmp: None,
        }
    }

    /// Gives commands `tmp` as their `/tmp` instead of a private tmpfs (see
    /// [`crate::SharedTmp`]). Only for commands that run as an unprivileged host user
    /// ([`crate::Profile::run_as`]): the child clones it with the host's privileges.
    pub fn with_tmp(mut self, tmp: Option<crate::tmp::SharedTmp>) -> Self {
        self.tmp = tmp;
        self
    }

    /// The shared tmpfs to send with the launch, refused for a command without `run_as`.
    pub(crate) fn tmp_for(&self, resolved: &Resolved) -> Result<Option<OwnedFd>, SpawnError> {
        match (&self.tmp, &resolved.ids) {
            (None, _) => Ok(None),
            (Some(tmp), Some(_)) if resolved.plan.shared_tmp.is_none() => {
                tmp.fd().try_clone().map(Some).map_err(|error| {
                    SpawnError::setup_io(Step::MountTmp, &error, "the shared tmpfs")
                })
            }
            (Some(_), Some(_)) => Err(SpawnError::invalid(
                "a shared tmpfs and a shared /tmp directory at once",
            )),
            (Some(_), None) => Err(SpawnError::invalid(
                "a shared tmpfs needs run_as (the child clones it with the host's privileges)",
            )),
        }
    }

    /// Runs commands in `network` (a background command's, [`crate::Started::network`])
    /// instead of a namespace of their own, so they reach its servers on its loopback. A
    /// command with egress keeps a namespace of its own (its proxy is bound there).
    pub fn with_network(mut self, network: Option<crate::netns::SharedNetwork>) -> Self {
        self.network = network;
        self
    }

    /// The descriptors of the shared namespace a command joins ([`Sandbox::with_network`]):
    /// none for a command with egress, whose proxy is in a namespace of its own.
    pub(crate) fn join(
        &self,
        egress: bool,
    ) -> Result<Option<(OwnedFd, Option<OwnedFd>)>, SpawnError> {
        match &self.network {
            Some(network) if !egress => network.lend().map(Some).map_err(|error| {
                SpawnError::setup_io(Step::Network, &error, "the shared namespace")
            }),
            _ => Ok(None),
        }
    }

    /// The home directory `~/` deny patterns refer to (by default the parent's `$HOME`).
    pub fn with_home(mut self, home: Option<PathBuf>) -> Self {
        self.home = home;
        self
    }

    /// Shares `globs` (deny globs expanded by earlier commands) with this sandbox, so a large
    /// writable root is walked once and then only where it changed.
    pub fn with_globs(mut self, globs: Arc<GlobIndex>) -> Self {
        self.globs = globs;
        self
    }

    /// Expands `profile`'s deny globs into the shared index without running anything, so the
    /// first command does not pay the first walk of a large root (and its watches).
    /// In a single-command process ([`crate::set_single_command`]) the answer is kept for
    /// that command.
    pub fn warm(&self, profile: &Profile) -> Result<(), SpawnError> {
        self.globs.warm(profile, self.home.as_deref())
    }

    /// Starts a child for the next command ahead of it (spawned, in a cgroup with `limits`,
    /// waiting for its launch), on a thread of its own, so the first command of a process
    /// does not wait for the spawn and the cgroup join (a v1 join waits an RCU grace period:
    /// milliseconds). Later commands start the next one themselves. Returns at once; a child
    /// that cannot be made is no child, and the command meets the same error itself.
    pub fn prestart(&self, limits: Option<CgroupLimits>) {
        refill(self.exe.clone(), limits);
    }

    /// Runs `request` confined by `profile` and waits for it (blocking; call it from
    /// `spawn_blocking` in async code). Nothing runs unconfined: every failure to set up a
    /// layer is an error and the command never started.
    pub fn run(&self, profile: &Profile, request: &Request) -> Result<Outcome, SpawnError> {
        let egress = profile.network.policy()?;
        let started = Instant::now();
        let limits = profile.cgroup;
        // A child started ahead, already in its cgroup, if one waits for this executable and
        // these limits; then the next one is started while this command runs. A process's
        // first command starts none (`aido exec` runs one command and exits).
        let standby = take_standby(&self.exe, limits);
        if RUNS.fetch_add(1, Ordering::Relaxed) > 0 {
            refill(self.exe.clone(), limits);
        }
        // Otherwise the child starts (an exec and its loader) while the plan is resolved and
        // the layers are made: it does nothing before its launch frame, sent after all that.
        let (mut child, control, mut cgroup) = match standby {
            Some(standby) => (standby.child, standby.control, standby.cgroup),
            None => {
                let (child, control) = spawn_child(&self.exe)?;
                (child, control, None)
            }
        };
        let joined = cgroup.is_some();
        let prepared = self.prepare(profile, request).and_then(|prepared| {
            if !joined {
                cgroup = contain(&child, limits)?;
            }
            Ok(prepared)
        });
        let (resolved, placeholders) = match prepared {
            Ok(prepared) => prepared,
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                drop(cgroup);
                return Err(error);
            }
        };
        let outcome = self.launch(
            (child, control),
            started,
            &resolved,
            request,
            cgroup,
            egress,
        );
        drop(placeholders);
        outcome
    }

    /// The plan, the layer directories and the placeholders of one run.
    fn prepare(
        &self,
        profile: &Profile,
        request: &Request,
    ) -> Result<(Resolved, Placeholders), SpawnError> {
        let parent_env: BTreeMap<String, String> = std::env::vars().collect();
        let resolved = plan::resolve(
            profile,
            request,
            self.home.as_deref(),
            &parent_env,
            &self.globs,
        )?;
        if let WriteMode::Overlay { layers_dir } = &resolved.plan.writes {
            create_layers(
                layers_dir,
                resolved.plan.writable_roots.len(),
                resolved.ids.as_ref().map(|ids| (ids.uid, ids.gid)),
            )?;
        }
        let placeholders = Placeholders::create(&resolved)?;
        Ok((resolved, placeholders))
    }

    /// Runs the plan. When the child reports init reaped, nothing of the sandbox runs any
    /// more and its output and layers are final: the answer goes back at once, and the child's
    /// own exit (tearing down its namespaces, which takes milliseconds) is waited for on a
    /// thread of its own, which then removes the cgroup and returns the network namespace to
    /// the pool.
    fn launch(
        &self,
        (mut child, mut control): (Child, UnixStream),
        started: Instant,
        resolved: &Resolved,
        request: &Request,
        cgroup: Option<Cgroup>,
        egress: Option<aido_egress::EgressPolicy>,
    ) -> Result<Outcome, SpawnError> {
        let outputs = Outputs::start(&mut child, request);

        let (netns, lent, owner) = match (self.join(egress.is_some())?, &egress) {
            (Some((netns, owner)), _) => (Netns::Join, Some(netns), owner),
            (None, None) => {
                let (netns, lent) = crate::netns::lend();
                (netns, lent, None)
            }
            (None, Some(_)) => (Netns::Own, None, None),
        };
        // A shared namespace is the session's, never the pool's.
        let pooled = matches!(netns, Netns::Pooled | Netns::Seed);
        let mut talk = Talk {
            proxy: None,
            netns: lent,
            owner,
            tmp: self.tmp_for(resolved)?,
            reaped: false,
        };
        let result = converse(
            &mut control,
            &mut child,
            resolved,
            request,
            egress,
            netns,
            &mut talk,
        );
        let (egress, egress_totals) = match talk.proxy.take() {
            Some(proxy) => {
                let (records, totals) = proxy.finish();
                (records, Some(totals))
            }
            None => (Vec::new(), None),
        };
        let memory_peak_bytes = cgroup.as_ref().and_then(Cgroup::memory_peak_bytes);
        let hierarchy = cgroup.as_ref().map(|cgroup| match cgroup.hierarchy() {
            Hierarchy::V2 => "v2".to_string(),
            Hierarchy::V1 => "v1".to_string(),
        });
        if talk.reaped {
            // Only the child is left, and it is on its way out.
            let netns = talk.netns.take();
            let teardown = Teardown::begin();
            std::thread::spawn(move || {
                let _ = child.kill();
                let _ = child.wait();
                drop(cgroup);
                if let Some(netns) = netns.filter(|_| pooled) {
                    crate::netns::give_back(netns);
                }
                drop(teardown);
            });
        } else {
            // The child is dead or wedged: kill whatever is left; the namespace is not lent
            // again.
            if let Some(cgroup) = &cgroup {
                cgroup.kill();
            }
            let _ = child.kill();
            let _ = child.wait();
            drop(cgroup);
        }
        let outputs = outputs.finish("output pipes stayed open after the sandbox ended")?;
        let (exit, mut usage) = result?;
        usage.memory_peak_bytes = memory_peak_bytes;
        Ok(Outcome {
            usage,
            cgroup: hierarchy,
            egress,
            egress_totals,
            ..Outcome::captured(exit, outputs, started)
        })
    }
}

/// The sandbox child, started with the control socket as its standard input and the output
/// pipes as its standard output and error. It reads nothing but its launch frame until one
/// comes.
fn spawn_child(exe: &Path) -> Result<(Child, UnixStream), SpawnError> {
    let failed = |error: std::io::Error| SpawnError::LaunchFailed {
        exe: exe.display().to_string(),
        detail: error.to_string(),
    };
    let (control, theirs) = UnixStream::pair().map_err(failed)?;
    let child = Command::new(exe)
        .arg(CHILD_ARG)
        .env_clear()
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(failed)?;
    Ok((child, control))
}

/// The cgroup with `limits` (if any), `child` moved in. The child blocks on its launch frame
/// until then, so nothing it starts escapes the limits.
fn contain(child: &Child, limits: Option<CgroupLimits>) -> Result<Option<Cgroup>, SpawnError> {
    let cgroup = limits.as_ref().map(Cgroup::create).transpose()?;
    if let Some(cgroup) = &cgroup {
        cgroup.join(child.id())?;
    }
    Ok(cgroup)
}

/// Commands this process has run (the standby starts with the second).
static RUNS: AtomicU64 = AtomicU64::new(0);

/// A sandbox child started ahead of its command: spawned, its cgroup made and joined, blocked
/// on its launch frame. Joining a cgroup waits for an RCU grace period (milliseconds on a v1
/// hierarchy), and the exec of the child takes about one: both happen while the previous
/// command runs. It knows nothing of the command it will run (the plan, the namespaces and
/// everything else come with the launch), so it cannot go stale; a dead one is discarded.
struct Standby {
    exe: PathBuf,
    limits: Option<CgroupLimits>,
    child: Child,
    control: UnixStream,
    cgroup: Option<Cgroup>,
}

/// The standby, and whether one is being made.
struct Slot {
    ready: Option<Standby>,
    making: bool,
}

static STANDBY: Mutex<Slot> = Mutex::new(Slot {
    ready: None,
    making: false,
});
/// Signalled when a standby being made is ready (or could not be made).
static STANDBY_MADE: Condvar = Condvar::new();
/// How long a command waits for a standby being made before it starts its own child: making
/// one takes an exec and a cgroup join, and starting another would wait for the same.
const STANDBY_WAIT_MS: u64 = 100;

impl Standby {
    fn make(exe: PathBuf, limits: Option<CgroupLimits>) -> Result<Self, SpawnError> {
        let (mut child, control) = spawn_child(&exe)?;
        match contain(&child, limits) {
            Ok(cgroup) => Ok(Standby {
                exe,
                limits,
                child,
                control,
                cgroup,
            }),
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(error)
            }
        }
    }

    fn discard(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        drop(self.cgroup);
    }
}

/// The standby for `exe` and `limits`, alive, if there is one (waiting a little for one
/// being made).
fn take_standby(exe: &Path, limits: Option<CgroupLimits>) -> Option<Standby> {
    let mut slot = STANDBY.lock().ok()?;
    let until = Instant::now() + Duration::from_millis(STANDBY_WAIT_MS);
    while slot.making && slot.ready.is_none() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        slot = STANDBY_MADE.wait_timeout(slot, left).ok()?.0;
    }
    let mut taken = slot.ready.take()?;
    drop(slot);
    if taken.exe == exe && taken.limits == limits && matches!(taken.child.try_wait(), Ok(None)) {
        return Some(taken);
    }
    std::thread::spawn(move || taken.discard());
    None
}

/// Starts the next standby on a thread of its own (one at a time). A standby that cannot be
/// made is no standby: the next command starts its own child and meets the same error there.
fn refill(exe: PathBuf, limits: Option<CgroupLimits>) {
    match STANDBY.lock() {
        Ok(mut slot) if !slot.making => slot.making = true,
        _ => return,
    }
    std::thread::spawn(move || {
        let made = Standby::make(exe, limits).ok();
        let previous = match STANDBY.lock() {
            Ok(mut slot) => {
                slot.making = false;
                match made {
                    Some(standby) => slot.ready.replace(standby),
                    None => None,
                }
            }
            Err(_) => made,
        };
        STANDBY_MADE.notify_all();
        if let Some(previous) = previous {
            previous.discard();
        }
    });
}

/// Sandboxes whose teardown (the child's exit, its cgroup's removal, the namespace's return to
/// the pool) still runs on a thread of its own, after their command was answered.
static TEARDOWNS: Mutex<usize> = Mutex::new(0);
/// Signalled when one ends.
static TORN_DOWN: Condvar = Condvar::new();

/// One teardown in flight, counted until dropped.
struct Teardown;

impl Teardown {
    fn begin() -> Self {
        if let Ok(mut running) = TEARDOWNS.lock() {
            *running += 1;
        }
        Self
    }
}

impl Drop for Teardown {
    fn drop(&mut self) {
        if let Ok(mut running) = TEARDOWNS.lock() {
            *running = running.saturating_sub(1);
        }
        TORN_DOWN.notify_all();
    }
}

/// Waits, at most `wait`, until every answered command's sandbox is torn down; `false` if
/// some still is. A process about to exit (`aido exec`) calls it so it leaves no cgroup.
pub fn settle(wait: Duration) -> bool {
    let until = Instant::now() + wait;
    let Ok(mut running) = TEARDOWNS.lock() else {
        return false;
    };
    while *running > 0 {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        match TORN_DOWN.wait_timeout(running, left) {
            Ok((guard, _)) => running = guard,
            Err(_) => return false,
        }
    }
    true
}

/// Kills the child waiting for the next command, if any, and removes its cgroup (at a
/// runtime's end: an exiting process would leave its cgroup for the next one to sweep).
pub fn discard_standby() {
    let taken = STANDBY.lock().ok().and_then(|mut slot| slot.ready.take());
    if let Some(standby) = taken {
        standby.discard();
    }
}

/// The upper and work directories of `roots` overlays under `layers_dir`, owned by `owner`
/// (the unprivileged user a command runs as, whose overlay writes there) when given.
pub(crate) fn create_layers(
    layers_dir: &Path,
    roots: usize,
    owner: Option<(u32, u32)>,
) -> Result<(), SpawnError> {
    for index in 0..roots {
        for part in ["", "upper", "work"] {
            let directory = layers_dir.join(index.to_string()).join(part);
            let failed = |error: std::io::Error| {
                SpawnError::setup_io(Step::MountWritable, &error, directory.display().to_string())
            };
            std::fs::create_dir_all(&directory).map_err(failed)?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::lchown(&directory, Some(uid), Some(gid)).map_err(failed)?;
            }
        }
    }
    Ok(())
}

/// What a run's conversation leaves besides its result.
struct Talk {
    /// The egress proxy, when the command has network.
    proxy: Option<aido_egress::Proxy>,
    /// The network namespace lent to the run or seeded by it.
    netns: Option<OwnedFd>,
    /// The user namespace owning a shared namespace the run joins.
    owner: Option<OwnedFd>,
    /// The session's tmpfs, sent with the launch.
    tmp: Option<OwnedFd>,
    /// The child reported init reaped ([`Report::Reaped`]).
    reaped: bool,
}

/// Sends the plan and waits for the final report, killing the child at the backstop; then,
/// briefly, for the child's word that init is reaped.
fn converse(
    control: &mut UnixStream,
    child: &mut Child,
    resolved: &Resolved,
    request: &Request,
    egress: Option<aido_egress::EgressPolicy>,
    netns: Netns,
    talk: &mut Talk,
) -> Result<(Exit, Usage), SpawnError> {
    let result = converse_until_report(control, child, resolved, request, egress, netns, talk);
    let reaped_by = Instant::now() + Duration::from_millis(DRAIN_MS);
    while !talk.reaped {
        let remaining = reaped_by.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            break;
        }
        let _ = control.set_read_timeout(Some(remaining));
        match read_json_with_fd::<Report>(control) {
            Ok((Report::Reaped, _)) => {
                talk.reaped = true;
                break;
            }
            Ok(_) => continue,
            Err(_) => break,
        }
    }
    result
}

/// Sends `launch` with the namespace it names riding on it: a pooled one, or a shared one
/// with the user namespace owning it on the frame after (empty when there is none); then,
/// when `launch.tmp`, the session's tmpfs on a frame of its own.
pub(crate) fn send_launch(
    control: &UnixStream,
    launch: &Launch,
    (lent, owner): (Option<&OwnedFd>, Option<&OwnedFd>),
    tmp: Option<&OwnedFd>,
) -> std::io::Result<()> {
    match (launch.netns, lent) {
        (Netns::Pooled, Some(fd)) => write_json_with_fd(control, launch, fd.as_fd())?,
        (Netns::Join, Some(fd)) => {
            write_json_with_fd(control, launch, fd.as_fd())?;
            match owner {
                Some(owner) => write_json_with_fd(control, &(), owner.as_fd())?,
                None => write_json(&mut &*control, &())?,
            }
        }
        _ => write_json(&mut &*control, launch)?,
    }
    match (launch.tmp, tmp) {
        (true, Some(tmp)) => write_json_with_fd(control, &(), tmp.as_fd()),
        (false, None) => Ok(()),
        _ => Err(std::io::Error::other(
            "a launch's tmpfs and its flag disagree",
        )),
    }
}

fn converse_until_report(
    control: &mut UnixStream,
    child: &mut Child,
    resolved: &Resolved,
    request: &Request,
    mut egress: Option<aido_egress::EgressPolicy>,
    netns: Netns,
    talk: &mut Talk,
) -> Result<(Exit, Usage), SpawnError> {
    let proxy = &mut talk.proxy;
    let launch = Launch {
        timeout_ms: request.timeout_ms,
        background: false,
        egress: egress.is_some(),
        netns,
        ids: resolved.ids.clone(),
        tmp: talk.tmp.is_some(),
    };
    let sent = send_launch(
        control,
        &launch,
        (talk.netns.as_ref(), talk.owner.as_ref()),
        talk.tmp.as_ref(),
    )
    .and_then(|()| write_json(control, &resolved.plan))
    .and_then(|()| write_frame(control, &request.stdin));
    if let Err(error) = sent {
        // The child may have refused before init took the plan (and closed the socket on
        // a large stdin): its report says why, better than the broken pipe.
        let _ = control.set_read_timeout(Some(Duration::from_millis(DRAIN_MS)));
        if let Ok(Report::Failed { error }) = read_json::<Report>(control) {
            return Err(error);
        }
        return Err(SpawnError::protocol(format!("sending the plan: {error}")));
    }
    let mut init_pid = None;
    let deadline = Instant::now() + Duration::from_millis(request.timeout_ms + SETUP_GRACE_MS);
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            // The child should have killed init at the timeout; it did not, so kill both.
            let _ = child.kill();
            if let Some(pid) = init_pid {
                kill_init(pid);
            }
            return Ok((Exit::TimedOut, Usage::default()));
        }
        let _ = control.set_read_timeout(Some(remaining));
        match read_json_with_fd::<Report>(control) {
            Ok((Report::Egress, fd)) => {
                let (Some(fd), Some(policy)) = (fd, egress.take()) else {
                    let _ = child.kill();
                    return Err(SpawnError::protocol(
                        "an egress frame without its socket, or one not asked for",
                    ));
                };
                match aido_egress::Proxy::start(fd, policy) {
                    Ok(started) => *proxy = Some(started),
                    Err(error) => {
                        let _ = child.kill();
                        return Err(SpawnError::setup_io(
                            Step::Network,
                            &error,
                            "start the egress proxy",
                        ));
                    }
                }
            }
            Ok((Report::Netns, fd)) => {
                // A seed for the pool (one per run, and only when asked for).
                if netns == Netns::Seed && talk.netns.is_none() {
                    talk.netns = fd;
                }
            }
            // Only a background command shares its namespace.
            Ok((Report::Userns, _)) => {}
            Ok((Report::Started { init_pid: pid }, _)) => init_pid = Some(pid),
            Ok((Report::Running, _)) => continue,
            Ok((Report::Exited { exit, usage }, _)) => return Ok((exit, usage)),
            Ok((Report::Failed { error }, _)) => return Err(error),
            Ok((Report::Reaped, _)) => {
                // Init is gone without its final report: the child's came first, or none.
                talk.reaped = true;
                return Err(SpawnError::protocol(
                    "the sandbox ended without a final report",
                ));
            }
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(error) => {
                let status = child.wait();
                return Err(SpawnError::protocol(format!(
                    "the sandbox child ended without a report ({error}; {status:?})"
                )));
            }
        }
    }
}

/// Kills a sandbox's init by its host pid, after checking the pid still names one (the
/// backstop runs only when something is already wrong; a reused pid must not be hit).
pub(crate) fn kill_init(pid: u32) {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    if String::from_utf8_lossy(&cmdline).contains(CHILD_ARG) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Reads a pipe to its end in fixed chunks, keeping at most `cap` bytes: memory stays flat
/// however much the command writes.
pub(crate) fn capture(mut pipe: impl Read, cap: usize) -> Captured {
    let mut captured = Captured::default();
    let mut chunk = vec![0u8; CHUNK_BYTES];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(count) => {
                captured.total += count as u64;
                let room = cap.saturating_sub(captured.kept.len());
                captured.kept.extend_from_slice(&chunk[..count.min(room)]);
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    captured
}

/// The empty directories standing in for denied paths that did not exist yet; removed when
/// the run ends (only if still empty, so nothing of the command's is ever deleted).
pub(crate) struct Placeholders {
    created: Vec<PathBuf>,
}

impl Placeholders {
    pub(crate) fn create(resolved: &Resolved) -> Result<Self, SpawnError> {
        let mut placeholders = Placeholders {
            created: Vec::new(),
        };
        for path in &resolved.placeholders {
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            match std::fs::create_dir(path) {
                Ok(()) => placeholders.created.push(path.clone()),
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(error) => {
                    return Err(SpawnError::setup_io(
                        Step::Placeholder,
                        &error,
                        path.display().to_string(),
                    ));
                }
            }
        }
        Ok(placeholders)
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        for path in self.created.iter().rev() {
            let _ = std::fs::remove_dir(Path::new(path));
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn capture_keeps_the_cap_and_counts_the_rest() {
        let input = vec![7u8; 300_000];
        let captured = super::capture(&input[..], 1000);
        assert_eq!(captured.kept.len(), 1000);
        assert_eq!(captured.total, 300_000);
    }
}
