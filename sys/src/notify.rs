//! Seccomp user notifications (Linux 5.0; `SECCOMP_FILTER_FLAG_NEW_LISTENER`): a filter that
//! hands chosen system calls of a process to a supervisor, which answers them. The sandbox
//! uses it so that init judges, and performs, every `connect` of a confined command.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::process::Command;

/// `_IOC(dir, '!', nr, size)` of linux/seccomp.h.
const fn seccomp_ioctl(dir: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | (0x21 << 8) | nr
}
const IOC_WRITE: u64 = 1;
const IOC_READ_WRITE: u64 = 3;
const NOTIF_RECV: u64 = seccomp_ioctl(
    IOC_READ_WRITE,
    0,
    std::mem::size_of::<libc::seccomp_notif>(),
);
const NOTIF_SEND: u64 = seccomp_ioctl(
    IOC_READ_WRITE,
    1,
    std::mem::size_of::<libc::seccomp_notif_resp>(),
);
const NOTIF_ID_VALID: u64 = seccomp_ioctl(IOC_WRITE, 2, std::mem::size_of::<u64>());

/// The byte that says a listener rides on the frame, and the one that says there is none.
pub const LISTENER_SENT: u8 = b'l';
/// See [`LISTENER_SENT`].
pub const LISTENER_NONE: u8 = b'n';

/// Makes `command`, between its fork and its exec, install `program` (a classic BPF seccomp
/// filter, on top of any it has) with a listener, and send the listener over `to` (a byte
/// [`LISTENER_SENT`] with the descriptor, `SCM_RIGHTS`), or the byte [`LISTENER_NONE`] when
/// the kernel refused (the spawn then fails with that error). Needs no-new-privileges set
/// before (inherited). Only system calls run after the fork, on memory made before it.
pub fn listener_on_exec(command: &mut Command, program: Vec<libc::sock_filter>, to: RawFd) {
    use std::os::unix::process::CommandExt;
    let run = move || -> io::Result<()> {
        let fprog = libc::sock_fprog {
            len: program.len() as u16,
            filter: program.as_ptr().cast_mut(),
        };
        #[allow(unsafe_code)]
        // SAFETY: `fprog` points at `program`'s instructions, alive for the call; the kernel
        // only reads them.
        let listener = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &fprog as *const libc::sock_fprog,
            )
        };
        if listener < 0 {
            let error = io::Error::last_os_error();
            let _ = send_byte(to, LISTENER_NONE, None);
            return Err(error);
        }
        let sent = send_byte(to, LISTENER_SENT, Some(listener as RawFd));
        #[allow(unsafe_code)]
        // SAFETY: the listener is ours, closed once; the exec would close it anyway.
        unsafe {
            libc::close(listener as RawFd);
        }
        sent
    };
    #[allow(unsafe_code)]
    // SAFETY: the closure allocates nothing and takes no lock: it makes system calls on
    // memory that was made before the fork (the program, a stack buffer).
    unsafe {
        command.pre_exec(run);
    }
}

/// One byte on `socket`, with `fd` riding on it when given (`SCM_RIGHTS`, in a buffer on the
/// stack: no allocation).
fn send_byte(socket: RawFd, byte: u8, fd: Option<RawFd>) -> io::Result<()> {
    use std::mem::MaybeUninit;
    #[allow(unsafe_code)]
    // SAFETY: both descriptors are open for the call (the caller's, and the listener it just
    // got), and only borrowed for it.
    let (socket, fd) = unsafe {
        (
            BorrowedFd::borrow_raw(socket),
            fd.map(|fd| BorrowedFd::borrow_raw(fd)),
        )
    };
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = rustix::net::SendAncillaryBuffer::new(&mut space);
    let fds: &[BorrowedFd<'_>] = match &fd {
        Some(fd) => std::slice::from_ref(fd),
        None => &[],
    };
    if !fds.is_empty() && !ancillary.push(rustix::net::SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("no room for the descriptor"));
    }
    rustix::net::sendmsg(
        socket,
        &[io::IoSlice::new(&[byte])],
        &mut ancillary,
        rustix::net::SendFlags::NOSIGNAL,
    )?;
    Ok(())
}

/// A system call waiting for the supervisor.
#[derive(Clone, Copy, Debug)]
pub struct Notification {
    /// Its id, for [`respond`] and [`still_waiting`].
    pub id: u64,
    /// The thread that made it, in the listener's pid namespace.
    pub tid: i32,
    /// The system call's number.
    pub nr: i32,
    /// Its arguments.
    pub args: [u64; 6],
}

/// Waits for the next notification. `Ok(None)`: one went away before it was read (its
/// thread killed), or a signal interrupted the wait: wait again. An error: the listener is
/// done (every process of the filter gone).
pub fn receive(listener: BorrowedFd<'_>) -> io::Result<Option<Notification>> {
    #[allow(unsafe_code)]
    // SAFETY: an all-zero seccomp_notif is valid, and RECV requires it zeroed.
    let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    #[allow(unsafe_code)]
    // SAFETY: RECV writes one seccomp_notif into `notif`, which is live and of that size.
    let done = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            NOTIF_RECV as _,
            &mut notif as *mut libc::seccomp_notif,
        )
    };
    if done < 0 {
        let error = io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(libc::EINTR) | Some(libc::ENOENT) => Ok(None),
            _ => Err(error),
        };
    }
    Ok(Some(Notification {
        id: notif.id,
        tid: notif.pid as i32,
        nr: notif.data.nr,
        args: notif.data.args,
    }))
}

/// The notification's thread still waits for it: what was read of its memory since it was
/// received is its own (its pid not reused).
pub fn still_waiting(listener: BorrowedFd<'_>, id: u64) -> bool {
    #[allow(unsafe_code)]
    // SAFETY: ID_VALID reads the u64 behind the pointer, alive for the call.
    let done = unsafe { libc::ioctl(listener.as_raw_fd(), NOTIF_ID_VALID as _, &id as *const u64) };
    done == 0
}

/// Answers notification `id`: the system call returns 0, or fails with `errno`. An error
/// means its thread is gone.
pub fn respond(listener: BorrowedFd<'_>, id: u64, errno: Option<i32>) -> io::Result<()> {
    let response = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: errno.map_or(0, |errno| -errno),
        flags: 0,
    };
    #[allow(unsafe_code)]
    // SAFETY: SEND reads one seccomp_notif_resp from `response`, alive for the call.
    let done = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            NOTIF_SEND as _,
            &response as *const libc::seccomp_notif_resp,
        )
    };
    if done < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `connect(2)` with an address as raw bytes (`struct sockaddr_*`, at most 128), as another
/// process passed it.
pub fn connect_raw(socket: BorrowedFd<'_>, address: &[u8]) -> io::Result<()> {
    if address.len() > std::mem::size_of::<libc::sockaddr_storage>() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    #[allow(unsafe_code)]
    // SAFETY: the kernel reads `address.len()` bytes from `address`, all live.
    let done = unsafe {
        libc::connect(
            socket.as_raw_fd(),
            address.as_ptr().cast(),
            address.len() as libc::socklen_t,
        )
    };
    if done < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_ioctl_numbers_are_the_kernels() {
        assert_eq!(super::NOTIF_RECV, 0xc050_2100);
        assert_eq!(super::NOTIF_SEND, 0xc018_2101);
        assert_eq!(super::NOTIF_ID_VALID, 0x4008_2102);
    }
}
