//! The two processes on the sandbox side of the re-exec.
//!
//! **The sandbox child** (`aido __aido_sandbox`) is a fresh, single-threaded exec of the
//! parent's binary. It reads its launch frame from its standard input (a Unix socket; the plan
//! behind it is init's to read), enters the network namespace it was lent or makes a seed for
//! the pool ([`crate::netns`]) while it still has the host's capabilities, unshares the
//! user namespace (writing a one-uid map), then the mount, pid, ipc, uts and (unless it has
//! one already) net namespaces, and starts **init**, the first process of the new pid
//! namespace, again by re-executing itself, handing init the same control socket. The child
//! stays outside as init's supervisor: it watches init through a pidfd and enforces the
//! timeout by killing init, which makes the kernel kill everything else in the namespace. Init
//! reports to the parent directly; the child reports only what init cannot (a timeout, init's
//! death), and last that init is reaped ([`Report::Reaped`]).
//!
//! **Init** (pid 1) builds the mount tree and pivots into it, then confines itself (session,
//! rlimits, no capabilities, no-new-privileges, Landlock, seccomp) and starts the command,
//! which inherits all of it. When the command exits, init reports its status and exits, which
//! kills whatever the command left behind.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::error::{SpawnError, Step};
use crate::mounts;
use crate::profile::{Exit, Usage};
use crate::protocol::{
    CHILD_ARG, Launch, Netns, Plan, RELAY_ARG, Report, control_socket, read_frame,
    read_json_with_fd, write_json, write_json_with_fd,
};

/// `argv[2]` of the second re-exec, which becomes init.
const INIT_ARG: &str = "init";
/// `argv[2]` of a short-lived helper that only holds a new user namespace whose maps the child
/// writes: the idmapping of a command's walls.
const USERNS_ARG: &str = "userns";
/// `argv[1]` that makes a host of the child print [`BUILD_ID`] and exit.
pub const BUILD_ID_ARG: &str = "__aido_sandbox_build_id";
/// The version and a hash of this crate's sources: two executables with the same id run the
/// same child, frame for frame.
pub const BUILD_ID: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "+",
    env!("AIDO_SANDBOX_SOURCE_HASH")
);
/// The name of the small executable beside `aido` that hosts only the sandbox child.
pub const HELPER_NAME: &str = "aido-sandbox-child";

/// The executable that should host the sandbox child for this process: the helper
/// ([`HELPER_NAME`]) beside the current executable when it has this build's [`BUILD_ID`]
/// (it starts in about a millisecond, where aido itself, linked against tesseract, libvirt
/// and seventy other libraries, takes tens), else the current executable itself, which hosts
/// the same child. Decided once per process; the second value says which and why.
pub fn host_exe() -> std::io::Result<(std::path::PathBuf, &'static str)> {
    type Chosen = Result<(std::path::PathBuf, &'static str), (std::io::ErrorKind, String)>;
    // One check per process: callers that come while it runs wait for it.
    static CHOSEN: std::sync::OnceLock<Chosen> = std::sync::OnceLock::new();
    CHOSEN
        .get_or_init(|| choose_host().map_err(|error| (error.kind(), error.to_string())))
        .clone()
        .map_err(|(kind, message)| std::io::Error::new(kind, message))
}

fn choose_host() -> std::io::Result<(std::path::PathBuf, &'static str)> {
    let current = std::env::current_exe()?;
    let helper = current.with_file_name(HELPER_NAME);
    if !helper.is_file() {
        return Ok((current, "no helper beside this executable"));
    }
    let id = Command::new(&helper)
        .arg(BUILD_ID_ARG)
        .env_clear()
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    Ok(match id {
        Ok(out) if out.status.success() && out.stdout == BUILD_ID.as_bytes() => {
            (helper, "the helper beside this executable (same build)")
        }
        _ => (
            current,
            "the helper beside this executable is from another build",
        ),
    })
}

/// The hostname inside the sandbox.
const HOSTNAME: &str = "aido-sandbox";

/// If this process was started as the sandbox child, runs it and never returns; otherwise
/// returns at once. Call it first thing in `main`, before any thread is started (unsharing a
/// user namespace needs a single-threaded process).
pub fn run_child_if_requested() {
    let mut args = std::env::args_os().skip(1);
    let first = args.next();
    if first.as_deref() == Some(std::ffi::OsStr::new(BUILD_ID_ARG)) {
        print!("{BUILD_ID}");
        std::process::exit(0);
    }
    if first.as_deref() != Some(std::ffi::OsStr::new(CHILD_ARG)) {
        return;
    }
    match args.next() {
        Some(arg) if arg == INIT_ARG => init_main(),
        Some(arg) if arg == USERNS_ARG => userns_main(),
        Some(arg) if arg == RELAY_ARG => crate::expose::relay_main(),
        _ => child_main(),
    }
}

/// The sandbox child: see the module docs. Its exit code carries nothing; the reports do.
pub fn child_main() -> ! {
    let Some(mut control) = control_socket() else {
        std::process::exit(120);
    };
    let report = match supervise(&mut control) {
        Ok(report) => report,
        Err(error) => Some(Report::Failed { error }),
    };
    if let Some(report) = report {
        let _ = write_json(&mut control, &report);
    }
    // Every path out of `supervise` has reaped init (or never started it).
    let _ = write_json(&mut control, &Report::Reaped);
    std::process::exit(0)
}

/// Enters the lent namespace, or makes a seed and sends it to the parent; `true` when the
/// process is now in a network namespace of its own (else it unshares one later, inside its
/// user namespace).
fn network_namespace(
    control: &UnixStream,
    netns: Netns,
    lent: Option<OwnedFd>,
) -> Result<bool, SpawnError> {
    match netns {
        Netns::Own => Ok(false),
        Netns::Pooled | Netns::Join => {
            let lent = lent.ok_or_else(|| {
                SpawnError::protocol("a pooled network namespace without its descriptor")
            })?;
            // A shared namespace is owned by the user namespace of the command that made it:
            // an unprivileged child enters that one first (its owner has every capability
            // there), where it may enter the network namespace.
            let owner = match netns {
                Netns::Join => {
                    let ((), owner): ((), Option<OwnedFd>) =
                        read_json_with_fd(control).map_err(|error| {
                            SpawnError::setup_io(
                                Step::Network,
                                &error,
                                "the shared namespace's owner",
                            )
                        })?;
                    owner
                }
                _ => None,
            };
            // Never the host's own: a mix-up here would be the one way to real network.
            let ours = std::fs::metadata("/proc/self/ns/net").map_err(|error| {
                SpawnError::setup_io(Step::Network, &error, "/proc/self/ns/net")
            })?;
            let lent = std::fs::File::from(lent);
            let theirs = lent.metadata().map_err(|error| {
                SpawnError::setup_io(Step::Network, &error, "the pooled namespace")
            })?;
            if theirs.ino() == ours.ino() && theirs.dev() == ours.dev() {
                return Err(SpawnError::protocol(
                    "the pooled network namespace is this process's own",
                ));
            }
            if let Some(owner) = owner.filter(|_| !rustix::process::geteuid().is_root()) {
                nix::sched::setns(&owner, CloneFlags::CLONE_NEWUSER).map_err(|errno| {
                    SpawnError::unavailable("user_namespace", format!("setns: {errno}"))
                })?;
            }
            nix::sched::setns(&lent, CloneFlags::CLONE_NEWNET).map_err(|errno| {
                SpawnError::unavailable("net_namespace", format!("setns: {errno}"))
            })?;
            Ok(true)
        }
        Netns::Shared => Ok(false),
        Netns::Seed => {
            if unshare(CloneFlags::CLONE_NEWNET).is_err() {
                return Ok(false);
            }
            // Up before it is shared: a command in a pooled namespace cannot change it.
            crate::loopback::loopback_up()?;
            let seed = std::fs::File::open("/proc/self/ns/net").map_err(|error| {
                SpawnError::setup_io(Step::Network, &error, "/proc/self/ns/net")
            })?;
            write_json_with_fd(control, &Report::Netns, seed.as_fd()).map_err(|error| {
                SpawnError::setup_io(Step::Network, &error, "send the namespace")
            })?;
            Ok(true)
        }
    }
}

/// Returns the final report only when init could not send its own.
#[allow(clippy::too_many_lines)]
fn supervise(control: &mut UnixStream) -> Result<Option<Report>, SpawnError> {
    let (launch, lent): (Launch, Option<OwnedFd>) = read_json_with_fd(control)
        .map_err(|error| SpawnError::setup_io(Step::ReadRequest, &error, "launch"))?;
    let started = Instant::now();
    // A background command must not outlive aido: the child dies with the thread that started
    // it (aido keeps that thread until the child is reaped), init with the child.
    if launch.background {
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
            .map_err(|errno| SpawnError::setup(Step::SpawnInit, errno, "PR_SET_PDEATHSIG"))?;
    }
    // Descriptors a careless parent left inheritable must not reach the command.
    close_fds::set_fds_cloexec(3, &[]);

    // A pooled or seeded network namespace is entered while this process still has the
    // host's capabilities: once in its own user namespace it could not.
    let has_netns = network_namespace(control, launch.netns, lent)?;
    // The session's tmpfs, cloned below for init.
    let tmp = if launch.tmp {
        let ((), tmp): ((), Option<OwnedFd>) = read_json_with_fd(control)
            .map_err(|error| SpawnError::setup_io(Step::MountTmp, &error, "the shared tmpfs"))?;
        Some(tmp.ok_or_else(|| SpawnError::protocol("a shared tmpfs without its descriptor"))?)
    } else {
        None
    };

    // A command that runs as an unprivileged host user: what needs the host's privileges is
    // done now (the descriptors are inherited by init, which attaches them).
    let prepared = match &launch.ids {
        Some(ids) => Some(prepare_ids(ids, tmp.as_ref())?),
        None if tmp.is_some() => {
            return Err(SpawnError::protocol(
                "a shared tmpfs for a command without run_as",
            ));
        }
        None => None,
    };
    let (uid, gid) = match &launch.ids {
        Some(ids) => {
            // Become the unprivileged host user now, for good: the host's privileges were
            // needed only for what `prepare_ids` did. (The change of user makes the process
            // undumpable, which would leave its /proc files root's; it maps itself below.)
            let (uid, gid) = (
                nix::unistd::Uid::from_raw(ids.uid),
                nix::unistd::Gid::from_raw(ids.gid),
            );
            nix::unistd::setresgid(gid, gid, gid)
                .map_err(|errno| SpawnError::setup(Step::RunAs, errno, "setresgid"))?;
            nix::unistd::setresuid(uid, uid, uid)
                .map_err(|errno| SpawnError::setup(Step::RunAs, errno, "setresuid"))?;
            nix::sys::prctl::set_dumpable(true)
                .map_err(|errno| SpawnError::setup(Step::RunAs, errno, "PR_SET_DUMPABLE"))?;
            (ids.uid, ids.gid)
        }
        None => (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        ),
    };
    unshare(CloneFlags::CLONE_NEWUSER)
        .map_err(|errno| SpawnError::unavailable("user_namespace", format!("unshare: {errno}")))?;
    for (file, content) in [
        ("/proc/self/setgroups", "deny".to_string()),
        ("/proc/self/uid_map", format!("0 {uid} 1")),
        ("/proc/self/gid_map", format!("0 {gid} 1")),
    ] {
        std::fs::write(file, content)
            .map_err(|error| SpawnError::setup_io(Step::IdMap, &error, file))?;
    }
    // A change of user, and an unprivileged process entering a user namespace of its own,
    // clear the parent-death signal: a background command must still die with aido.
    if launch.background && launch.ids.is_some() {
        let parent = nix::unistd::getppid();
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
            .map_err(|errno| SpawnError::setup(Step::SpawnInit, errno, "PR_SET_PDEATHSIG"))?;
        if nix::unistd::getppid() != parent {
            return Err(SpawnError::protocol("aido ended while the command started"));
        }
    }
    for (flag, name) in [
        (CloneFlags::CLONE_NEWNS, "mount_namespace"),
        (CloneFlags::CLONE_NEWPID, "pid_namespace"),
        (CloneFlags::CLONE_NEWIPC, "ipc_namespace"),
        (CloneFlags::CLONE_NEWUTS, "uts_namespace"),
        (CloneFlags::CLONE_NEWNET, "net_namespace"),
    ] {
        if flag == CloneFlags::CLONE_NEWNET && has_netns {
            continue;
        }
        unshare(flag)
            .map_err(|errno| SpawnError::unavailable(name, format!("unshare: {errno}")))?;
    }
    if !has_netns {
        crate::loopback::loopback_up()?;
    }
    if launch.netns == Netns::Shared {
        // For the session's later commands: the namespace and the user namespace owning it.
        for (path, report) in [
            ("/proc/self/ns/net", Report::Netns),
            ("/proc/self/ns/user", Report::Userns),
        ] {
            let ns = std::fs::File::open(path)
                .map_err(|error| SpawnError::setup_io(Step::Network, &error, path))?;
            write_json_with_fd(control, &report, ns.as_fd()).map_err(|error| {
                SpawnError::setup_io(Step::Network, &error, "send the shared namespace")
            })?;
        }
    }
    if launch.egress {
        crate::loopback::open(control)?;
    }

    // Init reads the plan from the same socket and reports on it directly: no relay hop.
    let theirs = control
        .try_clone()
        .map_err(|error| SpawnError::setup_io(Step::SpawnInit, &error, "dup the control socket"))?;
    let mut init = Command::new("/proc/self/exe");
    init.arg(CHILD_ARG)
        .arg(INIT_ARG)
        .env_clear()
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    if let Some((fds, _held)) = &prepared {
        let text = serde_json::to_string(fds)
            .map_err(|error| SpawnError::protocol(format!("descriptors for init: {error}")))?;
        init.env(crate::protocol::FDS_ENV, text);
    }
    let mut init = init
        .spawn()
        .map_err(|error| SpawnError::setup_io(Step::SpawnInit, &error, "spawn init"))?;
    // Init has its own copies of the walls and layers now.
    drop(prepared);
    let _ = write_json(
        control,
        &Report::Started {
            init_pid: init.id(),
        },
    );
    // Init and the command hold the output pipes; this process lets go of them, so they close
    // when the sandbox's last process is gone and not when this one has torn the namespaces
    // down (which the parent does not wait for).
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
    }
    let pidfd = rustix::process::Pid::from_raw(init.id() as i32)
        .ok_or_else(|| SpawnError::protocol("init has pid 0"))
        .and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
                .map_err(|errno| SpawnError::unavailable("pidfd", format!("pidfd_open: {errno}")))
        });
    let pidfd = match pidfd {
        Ok(pidfd) => pidfd,
        Err(error) => {
            let _ = init.kill();
            let _ = init.wait();
            return Err(error);
        }
    };

    let deadline = started + Duration::from_millis(launch.timeout_ms);
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Ok(Some(kill_on_timeout(&mut init)));
        }
        let timeout = rustix::event::Timespec {
            tv_sec: remaining.as_secs() as i64,
            tv_nsec: i64::from(remaining.subsec_nanos()),
        };
        let mut fds = [rustix::event::PollFd::new(
            &pidfd,
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => break,
            Err(errno) => {
                let _ = init.kill();
                let _ = init.wait();
                return Err(SpawnError::protocol(format!("poll on init: {errno}")));
            }
        }
    }
    // Init exits 0 only after its final report is written.
    match init.wait() {
        Ok(status) if status.success() => Ok(None),
        status => Err(SpawnError::protocol(format!(
            "init ended without a report ({status:?})"
        ))),
    }
}

/// For a command that runs as an unprivileged host user, while this process still has the
/// host's privileges: no supplementary groups (root's would follow the command), a user
/// namespace whose maps make the walls' owner the command's user, a detached idmapped mount
/// of every wall, and handles of the overlay layers (init reaches them through these, since
/// the unprivileged user may not pass through the directories above them). The descriptors
/// are left inheritable for init; the numbers go to init in [`crate::protocol::FDS_ENV`].
fn prepare_ids(
    ids: &crate::protocol::Ids,
    tmp: Option<&OwnedFd>,
) -> Result<(crate::protocol::Fds, Vec<OwnedFd>), SpawnError> {
    use rustix::mount::{OpenTreeFlags, open_tree};
    nix::unistd::setgroups(&[])
        .map_err(|errno| SpawnError::setup(Step::RunAs, errno, "setgroups"))?;
    let userns = idmap_userns(ids.uid, ids.gid)?;
    let mut fds = crate::protocol::Fds::default();
    let mut held = Vec::new();
    let inheritable = |fd: OwnedFd, held: &mut Vec<OwnedFd>| -> Result<i32, SpawnError> {
        rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::empty()).map_err(|errno| {
            SpawnError::setup_io(Step::RunAs, &errno.into(), "keep a descriptor for init")
        })?;
        let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
        held.push(fd);
        Ok(raw)
    };
    for wall in &ids.walls {
        let shown = wall.path.display().to_string();
        let attrs = |recursive| aido_sys::Attrs {
            recursive,
            read_only: !wall.writable,
        };
        // The wall and every mount below it; where a mount below cannot be idmapped (a file
        // system without idmapping), the wall alone.
        let recursive = open_tree(
            rustix::fs::CWD,
            &wall.path,
            OpenTreeFlags::OPEN_TREE_CLONE
                | OpenTreeFlags::AT_RECURSIVE
                | OpenTreeFlags::OPEN_TREE_CLOEXEC,
        )
        .and_then(|tree| {
            aido_sys::idmap_mount(tree.as_fd(), userns.as_fd(), attrs(true))
                .map(|()| tree)
                .map_err(|e| {
                    rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::INVAL)
                })
        });
        let tree = match recursive {
            Ok(tree) => tree,
            Err(_) => {
                let tree = open_tree(
                    rustix::fs::CWD,
                    &wall.path,
                    OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
                )
                .map_err(|errno| SpawnError::setup_io(Step::RunAs, &errno.into(), &shown))?;
                aido_sys::idmap_mount(tree.as_fd(), userns.as_fd(), attrs(false)).map_err(
                    |error| {
                        SpawnError::unavailable(
                            "idmapped_mounts",
                            format!("an idmapped mount of {shown}: {error}"),
                        )
                    },
                )?;
                tree
            }
        };
        fds.walls.push(inheritable(tree, &mut held)?);
    }
    if let Some((layers, roots)) = &ids.layers {
        for index in 0..*roots {
            let path = layers.join(index.to_string());
            let tree = open_tree(
                rustix::fs::CWD,
                &path,
                OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
            )
            .map_err(|errno| {
                SpawnError::setup_io(Step::RunAs, &errno.into(), path.display().to_string())
            })?;
            fds.layers.push(inheritable(tree, &mut held)?);
        }
    }
    if let Some(tmp) = tmp {
        // A clone of the session's detached tmpfs, for init to attach.
        let tree = open_tree(
            tmp,
            "",
            OpenTreeFlags::OPEN_TREE_CLONE
                | OpenTreeFlags::AT_EMPTY_PATH
                | OpenTreeFlags::OPEN_TREE_CLOEXEC,
        )
        .map_err(|errno| {
            SpawnError::setup_io(Step::MountTmp, &errno.into(), "clone the shared tmpfs")
        })?;
        fds.shared_tmp = Some(inheritable(tree, &mut held)?);
    } else if let Some(dir) = &ids.shared_tmp {
        let tree = crate::mounts::sealed_clone(dir).map_err(|error| {
            SpawnError::setup_io(Step::RunAs, &error, dir.display().to_string())
        })?;
        fds.shared_tmp = Some(inheritable(tree, &mut held)?);
    }
    Ok((fds, held))
}

/// A user namespace whose uid and gid maps make host `uid`/`gid` its root: made by a helper
/// process (this one must keep the host's privileges to use it), held by descriptor, and the
/// helper let go.
fn idmap_userns(uid: u32, gid: u32) -> Result<std::fs::File, SpawnError> {
    use std::io::Read;
    let failed =
        |error: std::io::Error, what: &str| SpawnError::setup_io(Step::RunAs, &error, what);
    let mut helper = Command::new("/proc/self/exe")
        .arg(CHILD_ARG)
        .arg(USERNS_ARG)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|error| failed(error, "spawn the idmapping's helper"))?;
    let result = (|| {
        let mut ready = [0u8; 1];
        helper
            .stdout
            .as_mut()
            .ok_or_else(|| SpawnError::protocol("the idmapping's helper has no output"))?
            .read_exact(&mut ready)
            .map_err(|error| failed(error, "the idmapping's helper did not start"))?;
        if ready[0] != b'u' {
            return Err(SpawnError::unavailable(
                "user_namespace",
                "the idmapping's helper could not make a user namespace",
            ));
        }
        let pid = helper.id();
        for (file, content) in [
            ("uid_map", format!("0 {uid} 1")),
            ("setgroups", "deny".to_string()),
            ("gid_map", format!("0 {gid} 1")),
        ] {
            let path = format!("/proc/{pid}/{file}");
            std::fs::write(&path, content).map_err(|error| failed(error, &path))?;
        }
        std::fs::File::open(format!("/proc/{pid}/ns/user"))
            .map_err(|error| failed(error, "the idmapping's user namespace"))
    })();
    drop(helper.stdin.take());
    let _ = helper.kill();
    let _ = helper.wait();
    result
}

/// The idmapping's helper: a new user namespace, then wait until the child has its descriptor.
fn userns_main() -> ! {
    use std::io::Read;
    let made = unshare(CloneFlags::CLONE_NEWUSER).is_ok();
    let mut out = std::io::stdout();
    let _ = out.write_all(if made { b"u" } else { b"x" });
    let _ = out.flush();
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    std::process::exit(0)
}

/// Killing init kills every process of its pid namespace.
fn kill_on_timeout(init: &mut std::process::Child) -> Report {
    let _ = init.kill();
    let _ = init.wait();
    Report::Exited {
        exit: Exit::TimedOut,
        usage: Usage::default(),
    }
}

/// The `PATH` of an environment, empty when it has none.
fn env_path(env: &[(String, String)]) -> String {
    env.iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.clone())
        .unwrap_or_default()
}

/// The program's path, searched in the command's `PATH` in the sandbox's own tree. std would
/// do the search itself, but only by forking (it cannot hand a changed `PATH` to
/// `posix_spawnp`), and a fork costs milliseconds where `posix_spawn` costs microseconds.
fn resolve_program(program: &str, plan: &Plan) -> Result<std::path::PathBuf, SpawnError> {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        return Ok(program.into());
    }
    let path = plan
        .env
        .iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.as_str())
        .unwrap_or_default();
    path.split(':')
        .filter(|directory| !directory.is_empty())
        .map(|directory| std::path::Path::new(directory).join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .map(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
        .ok_or_else(|| SpawnError::ExecFailed {
            program: program.to_string(),
            errno: libc::ENOENT,
            path: path.to_owned(),
        })
}

/// A background command's control frames, relayed until the parent closes the socket (or
/// init exits): input to the command's standard input, its close, and SIGTERM to every process
/// of the namespace (`kill(-1)` from pid 1 reaches all but init itself).
fn relay(mut frames: UnixStream, mut stdin: Option<std::process::ChildStdin>, first: Vec<u8>) {
    use crate::protocol::Control;
    if let Some(pipe) = stdin.as_mut()
        && !first.is_empty()
        && pipe.write_all(&first).is_err()
    {
        stdin = None;
    }
    while let Ok(frame) = read_frame(&mut frames) {
        match frame.split_first() {
            Some((&Control::STDIN, bytes)) => {
                if let Some(pipe) = stdin.as_mut()
                    && pipe.write_all(bytes).is_err()
                {
                    stdin = None;
                }
            }
            Some((&Control::CLOSE_STDIN, _)) => stdin = None,
            Some((&Control::TERMINATE, _)) => {
                let _ = nix::sys::signal::kill(Pid::from_raw(-1), Signal::SIGTERM);
            }
            _ => {}
        }
    }
}

/// What `aido_sys::notify::listener_on_exec` sent: the listener, or `None` when the command's
/// side had none.
fn receive_listener(socket: &UnixStream) -> std::io::Result<Option<OwnedFd>> {
    use std::mem::MaybeUninit;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = rustix::net::RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let received = rustix::net::recvmsg(
        socket,
        &mut [std::io::IoSliceMut::new(&mut byte)],
        &mut ancillary,
        rustix::net::RecvFlags::DONTWAIT | rustix::net::RecvFlags::CMSG_CLOEXEC,
    )?;
    if received.bytes != 1 {
        return Err(std::io::Error::other("no listener frame"));
    }
    let listener = ancillary.drain().find_map(|message| match message {
        rustix::net::RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
        _ => None,
    });
    Ok(if byte[0] == aido_sys::notify::LISTENER_SENT {
        listener
    } else {
        None
    })
}

fn init_main() -> ! {
    // If the supervising child dies, so does init, and with it the namespace. (Were the
    // child killed in the microseconds before this line, the parent's backstop kills init by
    // the pid the child reported, or the cgroup with everything in it.)
    let deathsig = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let Some(mut control) = control_socket() else {
        std::process::exit(121);
    };
    if let Err(errno) = deathsig {
        let error = SpawnError::setup(Step::SpawnInit, errno, "PR_SET_PDEATHSIG");
        let _ = write_json(&mut control, &Report::Failed { error });
        std::process::exit(0);
    }
    let received = read_frame(&mut control).and_then(|plan| Ok((plan, read_frame(&mut control)?)));
    let Ok((plan_bytes, stdin_bytes)) = received else {
        std::process::exit(122);
    };
    // The child's descriptors for a command that runs as an unprivileged user (none else).
    let fds: crate::protocol::Fds = std::env::var(crate::protocol::FDS_ENV)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    let report = match serde_json::from_slice::<Plan>(&plan_bytes) {
        Ok(plan) => match run_init(&plan, &fds, stdin_bytes, &mut control) {
            Ok(report) => report,
            Err(error) => Report::Failed { error },
        },
        Err(error) => Report::Failed {
            error: SpawnError::protocol(format!("plan: {error}")),
        },
    };
    // The child reads this exit code: 0 means the report is on its way to the parent.
    let written = write_json(&mut control, &report).is_ok();
    std::process::exit(if written { 0 } else { 123 })
}

#[allow(clippy::too_many_lines)]
fn run_init(
    plan: &Plan,
    fds: &crate::protocol::Fds,
    stdin_bytes: Vec<u8>,
    control: &mut UnixStream,
) -> Result<Report, SpawnError> {
    mounts::build(plan, fds)?;
    // The child's descriptors (detached walls and layers) are attached now: none of them
    // reaches the command.
    close_fds::set_fds_cloexec(3, &[]);
    nix::unistd::sethostname(HOSTNAME)
        .map_err(|errno| SpawnError::setup(Step::Hostname, errno, HOSTNAME))?;
    nix::unistd::chdir(&plan.cwd)
        .map_err(|errno| SpawnError::setup(Step::Chdir, errno, plan.cwd.display().to_string()))?;
    nix::unistd::setsid().map_err(|errno| SpawnError::setup(Step::Setsid, errno, "setsid"))?;
    // A terminal command: the pty on init's standard output becomes the session's controlling
    // terminal, so the command (in init's process group, the foreground one) gets its ^C.
    let terminal = match plan.live {
        Some(live) if live.pty => {
            let fd = std::io::stdout()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|error| SpawnError::setup_io(Step::Setsid, &error, "dup the pty"))?;
            rustix::process::ioctl_tiocsctty(&fd).map_err(|errno| {
                SpawnError::setup(
                    Step::Setsid,
                    nix::errno::Errno::from_raw(errno.raw_os_error()),
                    "TIOCSCTTY",
                )
            })?;
            Some(fd)
        }
        _ => None,
    };
    // Init's /proc entries (its memory, its descriptors: the control socket) stay closed to the
    // command, which runs as the same uid: a non-dumpable process is only traceable with
    // CAP_SYS_PTRACE. The command itself is dumpable again after its exec.
    nix::sys::prctl::set_dumpable(false)
        .map_err(|errno| SpawnError::setup(Step::Capabilities, errno, "PR_SET_DUMPABLE"))?;
    aido_confine::set_rlimits(&plan.rlimits)?;
    aido_confine::drop_capabilities()?;
    aido_confine::no_new_privs()?;
    aido_confine::landlock(plan.landlock_abi_min, &plan.writable_roots)?;
    aido_confine::seccomp(&plan.seccomp)?;
    // The command's connects come to init (see aido-confine's `connect`): its filter goes on
    // between fork and exec, and its listener comes back over this pair.
    let (listener_ours, listener_theirs) = UnixStream::pair()
        .map_err(|error| SpawnError::setup_io(Step::Seccomp, &error, "a socket pair"))?;
    let connect_filter = aido_confine::connect_program();

    let program = plan.argv[0].clone();
    let mut command = Command::new(resolve_program(&program, plan)?);
    command
        .arg0(&program)
        .args(&plan.argv[1..])
        .env_clear()
        .envs(plan.env.iter().map(|(name, value)| (name, value)))
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .stdin(if stdin_bytes.is_empty() && plan.live.is_none() {
            Stdio::null()
        } else {
            Stdio::piped()
        });
    if let Some(fd) = &terminal {
        let dup = |fd: &OwnedFd| {
            fd.try_clone()
                .map_err(|error| SpawnError::setup_io(Step::Setsid, &error, "dup the pty"))
        };
        command.stdin(Stdio::from(dup(fd)?));
    }
    {
        use std::os::fd::AsRawFd;
        aido_sys::notify::listener_on_exec(
            &mut command,
            connect_filter,
            listener_theirs.as_raw_fd(),
        );
    }
    let spawned = command.spawn();
    drop(listener_theirs);
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            // The filter could not be installed: the kernel lacks the listener, not the program.
            if let Ok(None) = receive_listener(&listener_ours) {
                return Err(SpawnError::unavailable(
                    "seccomp_user_notification",
                    error.to_string(),
                ));
            }
            return Err(SpawnError::ExecFailed {
                program: program.clone(),
                errno: error.raw_os_error().unwrap_or(0),
                path: env_path(&plan.env),
            });
        }
    };
    let listener = match receive_listener(&listener_ours) {
        Ok(Some(listener)) => listener,
        _ => {
            let _ = child.kill();
            return Err(SpawnError::unavailable(
                "seccomp_user_notification",
                "the command's connect filter sent no listener",
            ));
        }
    };
    let judge = aido_confine::Judge::new(&plan.unix_sockets);
    std::thread::Builder::new()
        .name("aido-connects".into())
        .spawn(move || judge.serve(listener))
        .map_err(|error| SpawnError::setup_io(Step::Seccomp, &error, "the connect judge"))?;
    let _ = write_json(control, &Report::Running);
    let command_pid = Pid::from_raw(child.id() as i32);
    drop(terminal);
    let feeder = match plan.live {
        // A background command: its input comes in frames for as long as it runs.
        Some(_) => {
            let frames = control.try_clone().map_err(|error| {
                SpawnError::setup_io(Step::SpawnInit, &error, "dup the control socket")
            })?;
            let stdin = child.stdin.take();
            Some(std::thread::spawn(move || {
                relay(frames, stdin, stdin_bytes)
            }))
        }
        None => child.stdin.take().map(|mut stdin| {
            std::thread::spawn(move || {
                // A command that does not read its input gets EPIPE here, which is its business.
                let _ = stdin.write_all(&stdin_bytes);
            })
        }),
    };

    // As pid 1, init reaps every orphan of the namespace; it waits for the command only.
    let exit = loop {
        match waitpid(None::<Pid>, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == command_pid => break Exit::Code(code),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == command_pid => {
                break Exit::Signal(signal as i32);
            }
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(errno) => {
                return Err(SpawnError::protocol(format!("waitpid: {errno}")));
            }
        }
    };
    // A relay blocked on the control socket ends with init; a feeder is never waited for.
    drop(feeder);
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .map(|usage| {
            let millis = |time: nix::sys::time::TimeVal| {
                (time.tv_sec() as u64) * 1000 + (time.tv_usec() as u64) / 1000
            };
            Usage {
                user_ms: millis(usage.user_time()),
                system_ms: millis(usage.system_time()),
                max_rss_kib: usage.max_rss() as u64,
                memory_peak_bytes: None,
            }
        })
        .unwrap_or_default();
    Ok(Report::Exited { exit, usage })
}
