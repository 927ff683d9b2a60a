//! Frames between the parent, the sandbox child and the namespace's init.
//!
//! Each frame is a little-endian `u32` length and that many bytes (JSON or raw stdin), written
//! with one `write` so frames from the child and from init never interleave. The control
//! channel is a Unix socket passed as the child's standard input (and from it to init's), so
//! no secret rides on argv or the environment and neither needs an extra descriptor.
//!
//! The parent writes [`Launch`] (read by the child), then the [`Plan`] and the stdin bytes
//! (read by init). Init reports [`Report::Running`] and its final report straight to the
//! parent; the child reports [`Report::Started`] and, only if init could not, the final one.

use std::io::{Read, Write};
use std::path::PathBuf;

use aido_confine::Rlimits;
use serde::{Deserialize, Serialize};

use crate::error::SpawnError;
use crate::profile::{Exit, Usage, WriteMode};

/// `argv[1]` that makes an executable act as the sandbox child instead of itself.
pub const CHILD_ARG: &str = "__aido_sandbox";
/// The second argument that makes the child a relay of an exposed port ([`crate::Exposed`]).
pub(crate) const RELAY_ARG: &str = "relay";

/// Our standard input (the control socket) as a socket we own: how every re-exec of the
/// sandbox (child, init, relay) reaches its parent.
pub(crate) fn control_socket() -> Option<std::os::unix::net::UnixStream> {
    use std::os::fd::AsFd;
    let fd = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    Some(std::os::unix::net::UnixStream::from(fd))
}

/// The largest frame either side accepts (the plan, or the stdin bytes).
pub(crate) const FRAME_BYTES_MAX: usize = 64 << 20;

/// Everything the child needs, resolved by the parent from the profile and the request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Plan {
    pub(crate) argv: Vec<String>,
    pub(crate) cwd: PathBuf,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) timeout_ms: u64,
    pub(crate) writable_roots: Vec<PathBuf>,
    pub(crate) writes: WriteMode,
    pub(crate) hidden: Vec<Hidden>,
    pub(crate) landlock_abi_min: u8,
    pub(crate) rlimits: Rlimits,
    pub(crate) tmp_bytes_max: u64,
    /// The seccomp filters, compiled by the parent.
    pub(crate) seccomp: Vec<Vec<aido_confine::Instruction>>,
    /// A background command: init keeps reading [`Control`] frames after the start.
    #[serde(default)]
    pub(crate) live: Option<Live>,
    /// With an unprivileged host user: the walls init attaches (idmapped, from the child's
    /// descriptors), in order.
    #[serde(default)]
    pub(crate) walls: Vec<Wall>,
    /// Directories on the way to a wall the unprivileged user cannot pass through (no search
    /// bit for others): each is covered by an empty read-only tmpfs that holds only the way to
    /// the walls below it.
    #[serde(default)]
    pub(crate) covers: Vec<PathBuf>,
    /// The host directory mounted at `/tmp` (see [`crate::Profile::shared_tmp`]); else a
    /// private tmpfs.
    #[serde(default)]
    pub(crate) shared_tmp: Option<PathBuf>,
    /// The host's Unix sockets the command may connect to (see
    /// [`crate::Profile::unix_sockets`]).
    #[serde(default)]
    pub(crate) unix_sockets: Vec<PathBuf>,
}

/// How a background command is wired.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub(crate) struct Live {
    /// The child's standard output is a terminal (the slave side of a pty the parent opened):
    /// the command gets it as its standard input, output and error, and as its controlling
    /// terminal. Otherwise its standard input is a pipe fed by [`Control::STDIN`] frames.
    pub(crate) pty: bool,
}

/// The first byte of a frame the parent sends init while a background command runs.
pub(crate) struct Control;

impl Control {
    /// The rest of the frame goes to the command's standard input.
    pub(crate) const STDIN: u8 = b'd';
    /// The command's standard input is closed.
    pub(crate) const CLOSE_STDIN: u8 = b'c';
    /// Init sends SIGTERM to every process of the namespace (all but itself).
    pub(crate) const TERMINATE: u8 = b't';
}

/// What the sandbox child itself needs; the rest is for init.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Launch {
    pub(crate) timeout_ms: u64,
    /// A background command: the child dies with the parent thread that started it (aido),
    /// and with it init and the whole namespace.
    #[serde(default)]
    pub(crate) background: bool,
    /// Bring up the namespace's loopback and send the parent the egress proxy's socket.
    #[serde(default)]
    pub(crate) egress: bool,
    /// Where the command's network namespace comes from.
    #[serde(default)]
    pub(crate) netns: Netns,
    /// Run as an unprivileged host user, with the walls idmapped (see [`crate::RunAs`]).
    #[serde(default)]
    pub(crate) ids: Option<Ids>,
    /// The session's tmpfs follows on a frame of its own (see [`crate::SharedTmp`]).
    #[serde(default)]
    pub(crate) tmp: bool,
}

/// What the child prepares, while it still has the host's privileges, for a command that runs
/// as an unprivileged host user: idmapped mounts of the walls and handles of the layers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Ids {
    /// The host uid and gid the command's root maps to.
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// The walls to idmap, in the plan's order ([`Plan::walls`]).
    pub(crate) walls: Vec<Wall>,
    /// The overlay layers' directory and the number of writable roots (`i/upper`, `i/work`).
    pub(crate) layers: Option<(PathBuf, usize)>,
    /// The shared `/tmp` (see [`Plan::shared_tmp`]), reached by the child for init.
    #[serde(default)]
    pub(crate) shared_tmp: Option<PathBuf>,
}

/// One idmapped wall: a host directory the command sees as its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Wall {
    /// The host directory (canonical).
    pub(crate) path: PathBuf,
    /// Mounted writable (a writable root written directly); otherwise read-only (a read wall,
    /// or the lower layer of a writable root's overlay).
    pub(crate) writable: bool,
}

/// The descriptors the child hands init for a command that runs as an unprivileged user, by
/// number, in the environment variable [`FDS_ENV`].
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Fds {
    /// A detached idmapped mount per [`Ids::walls`] entry.
    pub(crate) walls: Vec<i32>,
    /// A detached mount of each writable root's layer directory (`i`, holding `upper` and
    /// `work`): attached in init's mount namespace, overlayfs may use it.
    pub(crate) layers: Vec<i32>,
    /// A detached `nosuid,nodev` mount of the shared `/tmp`.
    #[serde(default)]
    pub(crate) shared_tmp: Option<i32>,
}

/// The environment variable that carries [`Fds`] from the child to init (never to the
/// command: init builds the command's environment from the plan).
pub(crate) const FDS_ENV: &str = "AIDO_SANDBOX_FDS";

/// The network namespace of a command without network: its own, or one of aido's pool.
///
/// A pooled namespace is empty (its `lo` down, no address, no route) and owned by the host's
/// user namespace, so the command, whose capabilities live in its own user namespace, can
/// change nothing in it; it is lent to one command at a time and only after every process of
/// the last one is gone. Creating and destroying a namespace per command costs milliseconds;
/// lending one costs a `setns`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Netns {
    /// A new namespace inside the command's user namespace (egress needs this: the child
    /// brings its loopback up).
    #[default]
    Own,
    /// A new namespace made before the user namespace, sent back to the parent
    /// ([`Report::Netns`]) for the pool; a child that may not make one there falls back to
    /// [`Netns::Own`].
    Seed,
    /// The namespace whose descriptor rides on the launch frame (`SCM_RIGHTS`).
    Pooled,
    /// Like [`Netns::Own`], and sent back with the user namespace that owns it
    /// ([`Report::Netns`], then [`Report::Userns`]) so later commands can join it: a
    /// background command's namespace, shared with its session's later commands.
    Shared,
    /// A shared namespace, riding on the launch frame; the frame after it carries the user
    /// namespace that owns it (joined first when aido is not root, since only there may an
    /// unprivileged process enter the network namespace).
    Join,
}

/// One denied path as the child must hide it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "path", rename_all = "snake_case")]
pub(crate) enum Hidden {
    /// An existing directory (or a placeholder the parent created): an empty read-only tmpfs.
    Dir(PathBuf),
    /// An existing non-directory: an empty read-only file bound over it.
    File(PathBuf),
}

/// What the child tells the parent, and init tells the child.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Report {
    /// The child started init (its host pid, for the parent's backstop).
    Started { init_pid: u32 },
    /// The egress proxy's listening socket rides on this frame (`SCM_RIGHTS`).
    Egress,
    /// The command is running.
    Running,
    /// Setup failed; nothing ran.
    Failed { error: SpawnError },
    /// The command's tree is gone.
    Exited { exit: Exit, usage: Usage },
    /// A [`Netns::Seed`] or [`Netns::Shared`] namespace rides on this frame (`SCM_RIGHTS`).
    Netns,
    /// The user namespace owning a [`Netns::Shared`] namespace rides on this frame.
    Userns,
    /// The child reaped init: no process of the sandbox is left but the child, which only
    /// tears its namespaces down and exits. Sent last, after any final report.
    Reaped,
}

/// Writes `value` as one frame with `fd` riding on it (`SCM_RIGHTS`).
pub(crate) fn write_json_with_fd<T: Serialize>(
    control: &std::os::unix::net::UnixStream,
    value: &T,
    fd: std::os::fd::BorrowedFd<'_>,
) -> std::io::Result<()> {
    use std::mem::MaybeUninit;
    let body = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let length =
        u32::try_from(body.len()).map_err(|_| std::io::Error::other("frame larger than u32"))?;
    let mut frame = length.to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = rustix::net::SendAncillaryBuffer::new(&mut space);
    if !ancillary.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("no room for the descriptor"));
    }
    let sent = rustix::net::sendmsg(
        control,
        &[std::io::IoSlice::new(&frame)],
        &mut ancillary,
        rustix::net::SendFlags::empty(),
    )
    .map_err(std::io::Error::from)?;
    if sent != frame.len() {
        // A stream socket takes a small frame whole; the rest would need a second write
        // without the descriptor.
        let rest = &frame[sent..];
        let mut writer = control;
        writer.write_all(rest)?;
    }
    Ok(())
}

/// Reads one frame as `T`, with the descriptor riding on it if any (received close-on-exec).
/// Honors the socket's read timeout like a plain read.
pub(crate) fn read_json_with_fd<T: for<'de> Deserialize<'de>>(
    control: &std::os::unix::net::UnixStream,
) -> std::io::Result<(T, Option<std::os::fd::OwnedFd>)> {
    use std::mem::MaybeUninit;
    let mut header = [0u8; 4];
    let mut got = 0;
    let mut fd = None;
    while got < 4 {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut ancillary = rustix::net::RecvAncillaryBuffer::new(&mut space);
        let received = rustix::net::recvmsg(
            control,
            &mut [std::io::IoSliceMut::new(&mut header[got..])],
            &mut ancillary,
            rustix::net::RecvFlags::CMSG_CLOEXEC,
        )
        .map_err(std::io::Error::from)?;
        for message in ancillary.drain() {
            if let rustix::net::RecvAncillaryMessage::ScmRights(fds) = message {
                for owned in fds {
                    fd.get_or_insert(owned);
                }
            }
        }
        if received.bytes == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        got += received.bytes;
    }
    let length = u32::from_le_bytes(header) as usize;
    if length > FRAME_BYTES_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a {length}-byte frame"),
        ));
    }
    let mut body = vec![0u8; length];
    let mut reader = control;
    reader.read_exact(&mut body)?;
    let value = serde_json::from_slice(&body)
        .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidData, error))?;
    Ok((value, fd))
}

pub(crate) fn write_frame(target: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    let length =
        u32::try_from(bytes.len()).map_err(|_| std::io::Error::other("frame larger than u32"))?;
    let mut frame = Vec::with_capacity(4 + bytes.len());
    frame.extend_from_slice(&length.to_le_bytes());
    frame.extend_from_slice(bytes);
    target.write_all(&frame)?;
    target.flush()
}

pub(crate) fn read_frame(source: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut length = [0u8; 4];
    source.read_exact(&mut length)?;
    let length = u32::from_le_bytes(length) as usize;
    if length > FRAME_BYTES_MAX {
        return Err(std::io::Error::other(format!(
            "frame of {length} bytes exceeds {FRAME_BYTES_MAX}"
        )));
    }
    let mut bytes = vec![0u8; length];
    source.read_exact(&mut bytes)?;
    Ok(bytes)
}

pub(crate) fn write_json<T: Serialize>(target: &mut impl Write, value: &T) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    write_frame(target, &bytes)
}

pub(crate) fn read_json<T: for<'de> Deserialize<'de>>(
    source: &mut impl Read,
) -> std::io::Result<T> {
    let bytes = read_frame(source)?;
    serde_json::from_slice(&bytes).map_err(std::io::Error::other)
}
