//! Every `connect(2)` of a command is judged by init: a Unix socket by path is reached only
//! when it is one the command bound itself or one the policy names
//! (`aido_sandbox::Profile::unix_sockets`).
//!
//! Landlock (below ABI 9) does not check a connect to a pathname socket, and a read-only mount
//! does not stop one: only write permission on the socket's inode does. So the command's
//! `connect` goes to init through a seccomp user notification ([`program`]), and init does the
//! connect itself, on the command's own socket (`pidfd_getfd`) with a copy of the address it
//! judged: nothing the command changes after the check (the address in its memory, the
//! descriptor number, a symbolic link on the way) can steer it. A path is resolved once (as
//! the kernel would: from the command's working directory, following links) into a handle of
//! the socket's inode, judged, and connected through that handle (`/proc/self/fd/N`).
//!
//! The command's own sockets are those bound in its network namespace (its own, or its
//! session's), listed by the kernel (`sock_diag`, with their inodes); a host daemon's socket
//! never is. A socket of another family is connected as asked (its address cannot name a
//! path: the socket's family is fixed when it is made). Datagram Unix sockets are refused when
//! they are made (a datagram takes an address with every send), stream and seqpacket ones
//! ignore an address on `send`: connecting is the one way to a socket. Init connects with the
//! command's own credentials (the same user), so a daemon sees the command's user as its peer.
//!
//! A refusal is `EACCES` to the command, and a line on its standard error naming the socket
//! and the setting (`unix_socket_denied`).

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

/// The largest address `connect` takes (`sizeof(struct sockaddr_storage)`).
const ADDRESS_BYTES_MAX: usize = 128;

/// `sock_diag` (linux/sock_diag.h, linux/unix_diag.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const UDIAG_SHOW_VFS: u32 = 0x2;
const UNIX_DIAG_VFS: u16 = 1;
const TCP_LISTEN: u32 = 10;

/// The filter the command gets on top of init's (installed between fork and exec, with a
/// listener for init): `connect` goes to init; `pidfd_getfd` is refused (init needs it, the
/// command does not); so is a `seccomp` filter with a listener of its own, which would get the
/// command's connects before init and could let them through. Another architecture's calls are
/// allowed here: init's filters kill them.
pub fn program() -> Vec<libc::sock_filter> {
    use crate::layers::bpf::{DATA_ARCH, DATA_ARG1_LOW, DATA_NR, answer, jump, load};
    let refuse = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    [
        /* 0 */ load(DATA_ARCH),
        /* 1 */ jump(libc::BPF_JEQ, crate::layers::AUDIT_ARCH, 0, 9),
        /* 2 */ load(DATA_NR),
        /* 3 */ jump(libc::BPF_JEQ, libc::SYS_connect as u32, 0, 1),
        /* 4 */ answer(libc::SECCOMP_RET_USER_NOTIF),
        /* 5 */ jump(libc::BPF_JEQ, libc::SYS_pidfd_getfd as u32, 0, 1),
        /* 6 */ answer(refuse),
        /* 7 */ jump(libc::BPF_JEQ, libc::SYS_seccomp as u32, 0, 3),
        /* 8 */ load(DATA_ARG1_LOW),
        /* 9 */
        jump(
            libc::BPF_JSET,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32,
            0,
            1,
        ),
        /* 10 */ answer(refuse),
        /* 11 */ answer(libc::SECCOMP_RET_ALLOW),
    ]
    .into_iter()
    .map(|(code, jt, jf, k)| libc::sock_filter { code, jt, jf, k })
    .collect()
}

/// What init judges connects by.
pub struct Judge {
    /// The sockets the policy names, as this mount namespace resolves them.
    named: Vec<PathBuf>,
}

impl Judge {
    /// A judge that lets the command reach the host sockets `named` (canonical where they
    /// resolve) and its own.
    pub fn new(named: &[PathBuf]) -> Self {
        Self {
            named: named
                .iter()
                .map(|path| std::fs::canonicalize(path).unwrap_or_else(|_| path.clone()))
                .collect(),
        }
    }

    /// Answers the command's connects until the listener closes (the command and all its
    /// processes gone). Each connect on a thread of its own: one that blocks (a full backlog,
    /// a slow TCP handshake) holds up no other.
    pub fn serve(self, listener: OwnedFd) {
        use std::os::fd::AsFd;
        let judge = std::sync::Arc::new(self);
        let listener = std::sync::Arc::new(listener);
        loop {
            let notification = match aido_sys::notify::receive(listener.as_fd()) {
                Ok(Some(notification)) => notification,
                Ok(None) => continue,
                Err(_) => return,
            };
            let (judge, theirs) = (judge.clone(), listener.clone());
            let spawned = std::thread::Builder::new()
                .name("aido-connect".into())
                .spawn(move || {
                    let answer = judge.connect(theirs.as_fd(), &notification);
                    let _ = aido_sys::notify::respond(
                        theirs.as_fd(),
                        notification.id,
                        answer.err().map(|errno| errno as i32),
                    );
                });
            if spawned.is_err() {
                let _ = aido_sys::notify::respond(
                    listener.as_fd(),
                    notification.id,
                    Some(libc::EAGAIN),
                );
            }
        }
    }

    /// Does the command's connect, or says why not.
    fn connect(
        &self,
        listener: std::os::fd::BorrowedFd<'_>,
        notification: &aido_sys::notify::Notification,
    ) -> Result<(), Errno> {
        let args = notification.args;
        let (fd, address, length) = (args[0] as RawFd, args[1], args[2] as u32 as usize);
        if length > ADDRESS_BYTES_MAX {
            return Err(Errno::EINVAL);
        }
        let tid = notification.tid;
        let mut bytes = vec![0u8; length];
        if length > 0 {
            read_memory(tid, address, &mut bytes)?;
        }
        // The thread that asked is still waiting (its id not reused since): what was read is
        // its own.
        if !aido_sys::notify::still_waiting(listener, notification.id) {
            return Err(Errno::ENOENT);
        }
        let socket = their_socket(tid, fd)?;
        let family = rustix::net::sockopt::socket_domain(&socket)
            .map_err(|errno| Errno::from_raw(errno.raw_os_error()))?;
        if family != rustix::net::AddressFamily::UNIX {
            return raw_connect(&socket, &bytes);
        }
        let family_bytes = std::mem::size_of::<libc::sa_family_t>();
        if bytes.len() <= family_bytes
            || u16::from_ne_bytes([bytes[0], bytes[1]]) != libc::AF_UNIX as u16
        {
            // The kernel's own answer for a short or foreign address.
            return raw_connect(&socket, &bytes);
        }
        let path = &bytes[family_bytes..];
        if path[0] == 0 {
            // An abstract name: the command's network namespace's own, and Landlock's scope
            // (init's domain is the command's) keeps it to sockets of the sandbox.
            return raw_connect(&socket, &bytes);
        }
        let path = &path[..path.iter().position(|&b| b == 0).unwrap_or(path.len())];
        let target = self.admit(tid, Path::new(OsStr::from_bytes(path)))?;
        let through = format!("/proc/self/fd/{}", target.as_raw_fd());
        let mut address = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        address.extend_from_slice(through.as_bytes());
        address.push(0);
        raw_connect(&socket, &address)
    }

    /// Resolves `path` as the command's connect would and returns a handle of the socket's
    /// inode when the command may reach it.
    fn admit(&self, tid: i32, path: &Path) -> Result<OwnedFd, Errno> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::PATH | OFlags::CLOEXEC;
        let opened = if path.is_absolute() {
            rustix::fs::open(path, flags, Mode::empty())
        } else {
            let cwd = rustix::fs::open(
                format!("/proc/{tid}/cwd"),
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(errno)?;
            rustix::fs::openat(&cwd, path, flags, Mode::empty())
        };
        let target = opened.map_err(errno)?;
        let stat = rustix::fs::fstat(&target).map_err(errno)?;
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::Socket {
            return Err(Errno::ECONNREFUSED);
        }
        let resolved = std::fs::read_link(format!("/proc/self/fd/{}", target.as_raw_fd()))
            .unwrap_or_else(|_| path.to_owned());
        if self.named.contains(&resolved) {
            return Ok(target);
        }
        let identity = (stat.st_dev, stat.st_ino as u32);
        if own_sockets().is_ok_and(|own| own.contains(&identity)) {
            return Ok(target);
        }
        refused(&resolved);
        Err(Errno::EACCES)
    }
}

fn errno(error: rustix::io::Errno) -> Errno {
    Errno::from_raw(error.raw_os_error())
}

/// Says on the command's standard error (init's, which the command shares) what was refused
/// and which setting would allow it.
fn refused(path: &Path) {
    let _ = writeln!(
        std::io::stderr(),
        "aido: connect to the Unix socket {} refused: not one the command bound, and \
         [processes] unix_sockets does not name it (unix_socket_denied)",
        path.display()
    );
}

/// Reads the command's memory (same user, init its ancestor: `/proc/PID/mem` is open to it).
fn read_memory(tid: i32, address: u64, into: &mut [u8]) -> Result<(), Errno> {
    use std::os::unix::fs::FileExt;
    let memory = std::fs::File::open(format!("/proc/{tid}/mem")).map_err(|_| Errno::EFAULT)?;
    memory
        .read_exact_at(into, address)
        .map_err(|_| Errno::EFAULT)
}

/// A duplicate of the command's descriptor `fd` (the same open socket).
fn their_socket(tid: i32, fd: RawFd) -> Result<OwnedFd, Errno> {
    use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags};
    let pid = Pid::from_raw(tid).ok_or(Errno::ESRCH)?;
    // PIDFD_THREAD (O_EXCL, Linux 6.9): the thread itself, which need not lead its group.
    // Before it, its group's leader: the same descriptor table unless the thread was cloned
    // without CLONE_FILES, and then the socket is not found (refused, never another's).
    let thread = PidfdFlags::from_bits_retain(libc::O_EXCL as _);
    let pidfd = match rustix::process::pidfd_open(pid, thread) {
        Ok(pidfd) => pidfd,
        Err(rustix::io::Errno::INVAL) => {
            let leader = thread_group(tid).ok_or(Errno::ESRCH)?;
            rustix::process::pidfd_open(leader, PidfdFlags::empty()).map_err(|_| Errno::ESRCH)?
        }
        Err(_) => return Err(Errno::ESRCH),
    };
    rustix::process::pidfd_getfd(&pidfd, fd, PidfdGetfdFlags::empty()).map_err(|error| match errno(
        error,
    ) {
        Errno::EBADF => Errno::EBADF,
        _ => Errno::ENOTSOCK,
    })
}

/// The leader of the thread's group (`Tgid:` of its status).
fn thread_group(tid: i32) -> Option<rustix::process::Pid> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let tgid = status
        .lines()
        .find_map(|line| line.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()?;
    rustix::process::Pid::from_raw(tgid)
}

fn raw_connect(socket: &OwnedFd, address: &[u8]) -> Result<(), Errno> {
    use std::os::fd::AsFd;
    aido_sys::notify::connect_raw(socket.as_fd(), address)
        .map_err(|error| Errno::from_raw(error.raw_os_error().unwrap_or(libc::EIO)))
}

/// The (device, inode) of every listening Unix socket bound in this network namespace, as
/// the kernel lists them (`sock_diag`; the inode number is 32 bits there).
pub(crate) fn own_sockets() -> std::io::Result<HashSet<(u64, u32)>> {
    use rustix::net::{AddressFamily, SocketType, netlink};
    let socket = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        rustix::net::SocketFlags::CLOEXEC,
        Some(netlink::SOCK_DIAG),
    )?;
    // struct nlmsghdr (16) + struct unix_diag_req (24).
    let mut request = Vec::with_capacity(40);
    request.extend_from_slice(&40u32.to_ne_bytes());
    request.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    request.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
    request.extend_from_slice(&1u32.to_ne_bytes()); // seq
    request.extend_from_slice(&0u32.to_ne_bytes()); // pid
    request.push(libc::AF_UNIX as u8);
    request.push(0); // protocol
    request.extend_from_slice(&0u16.to_ne_bytes());
    request.extend_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    request.extend_from_slice(&0u32.to_ne_bytes()); // any inode
    request.extend_from_slice(&UDIAG_SHOW_VFS.to_ne_bytes());
    request.extend_from_slice(&[0xff; 8]); // no cookie
    rustix::io::write(&socket, &request)?;
    let mut own = HashSet::new();
    let mut buffer = vec![0u8; 32 << 10];
    loop {
        let read = rustix::io::read(&socket, &mut buffer)?;
        let mut messages = &buffer[..read];
        if read == 0 {
            return Err(std::io::Error::other("sock_diag: no answer"));
        }
        while messages.len() >= 16 {
            let u32_at = |bytes: &[u8], at: usize| {
                u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap_or_default())
            };
            let u16_at = |bytes: &[u8], at: usize| {
                u16::from_ne_bytes(bytes[at..at + 2].try_into().unwrap_or_default())
            };
            let length = (u32_at(messages, 0) as usize).min(messages.len());
            let kind = u16_at(messages, 4);
            if length < 16 {
                return Err(std::io::Error::other("sock_diag: a short message"));
            }
            match kind as i32 {
                libc::NLMSG_DONE => return Ok(own),
                libc::NLMSG_ERROR => return Err(std::io::Error::other("sock_diag: an error")),
                _ => {}
            }
            // struct unix_diag_msg (16 bytes), then attributes, each aligned to 4.
            let mut attributes = &messages[(16 + 16).min(length)..length];
            while attributes.len() >= 4 {
                let size = u16_at(attributes, 0) as usize;
                let kind = u16_at(attributes, 2);
                if size < 4 || size > attributes.len() {
                    break;
                }
                if kind == UNIX_DIAG_VFS && size >= 12 {
                    let (inode, device) = (u32_at(attributes, 4), u32_at(attributes, 8));
                    // The kernel's dev_t (major << 20 | minor) as stat(2) encodes it.
                    own.insert((libc::makedev(device >> 20, device & 0xf_ffff), inode));
                }
                attributes = &attributes[((size + 3) & !3).min(attributes.len())..];
            }
            messages = &messages[((length + 3) & !3).min(messages.len())..];
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_kernel_lists_a_listening_socket_of_this_namespace_with_its_inode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("listening.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let own = super::own_sockets().unwrap();
        assert!(
            own.contains(&(meta.dev(), meta.ino() as u32)),
            "({}, {}) not in {own:?}",
            meta.dev(),
            meta.ino()
        );
        // A socket bound but not listening cannot be connected to, and is not listed.
        let bound = dir.path().join("bound.sock");
        let _datagram = std::os::unix::net::UnixDatagram::bind(&bound).unwrap();
        let meta = std::fs::metadata(&bound).unwrap();
        let own = super::own_sockets().unwrap();
        assert!(!own.contains(&(meta.dev(), meta.ino() as u32)));
    }

    #[test]
    fn a_threads_group_is_its_process() {
        let (tid, group) = std::thread::spawn(|| {
            let tid = rustix::thread::gettid().as_raw_nonzero().get();
            (
                tid,
                super::thread_group(tid).map(|pid| pid.as_raw_nonzero().get()),
            )
        })
        .join()
        .unwrap();
        assert_ne!(
            tid,
            std::process::id() as i32,
            "a thread that is not the leader"
        );
        assert_eq!(group, Some(std::process::id() as i32));
    }
}
