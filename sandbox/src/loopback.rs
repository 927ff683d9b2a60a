//! In the sandbox child, inside the command's new network namespace, before init starts: the
//! loopback brought up and, with [`aido_egress::Network::Proxy`], the proxy's listening socket
//! bound there and sent to the parent (which serves it with [`aido_egress::Proxy`]).

use std::net::TcpListener;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

use aido_egress::EGRESS_PORT;

use crate::error::{SpawnError, Step};
use crate::protocol::Report;

/// In the sandbox child, inside the new network namespace (its loopback already up): the
/// proxy's socket bound on it and sent to the parent with a [`Report::Egress`] frame.
pub(crate) fn open(control: &UnixStream) -> Result<(), SpawnError> {
    let listener = TcpListener::bind(("127.0.0.1", EGRESS_PORT))
        .map_err(|error| SpawnError::setup_io(Step::Network, &error, "bind the egress port"))?;
    crate::protocol::write_json_with_fd(control, &Report::Egress, listener.as_fd())
        .map_err(|error| SpawnError::setup_io(Step::Network, &error, "send the egress socket"))?;
    Ok(())
}

fn errno_of(errno: rustix::io::Errno) -> nix::errno::Errno {
    nix::errno::Errno::from_raw(errno.raw_os_error())
}

/// `RTM_NEWLINK` on interface 1 (a new namespace's `lo`) with `IFF_UP`, acknowledged: every
/// command has a loopback of its own (a dev server and its tests talk over it), and nothing
/// else: the namespace has no other interface.
pub(crate) fn loopback_up() -> Result<(), SpawnError> {
    use rustix::net::{AddressFamily, SocketType, netlink::SocketAddrNetlink};
    let failed = |errno: rustix::io::Errno, what: &str| {
        SpawnError::setup(
            Step::Network,
            errno_of(errno),
            format!("loopback up: {what}"),
        )
    };
    let socket = rustix::net::socket(AddressFamily::NETLINK, SocketType::RAW, None)
        .map_err(|errno| failed(errno, "netlink socket"))?;
    const RTM_NEWLINK: u16 = 16;
    const NLM_F_REQUEST: u16 = 1;
    const NLM_F_ACK: u16 = 4;
    const IFF_UP: u32 = 1;
    let mut message = Vec::with_capacity(32);
    message.extend_from_slice(&32u32.to_ne_bytes()); // nlmsg_len
    message.extend_from_slice(&RTM_NEWLINK.to_ne_bytes());
    message.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    message.extend_from_slice(&1u32.to_ne_bytes()); // seq
    message.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel's
    message.extend_from_slice(&[0, 0]); // ifi_family AF_UNSPEC, pad
    message.extend_from_slice(&0u16.to_ne_bytes()); // ifi_type
    message.extend_from_slice(&1i32.to_ne_bytes()); // ifi_index: lo
    message.extend_from_slice(&IFF_UP.to_ne_bytes()); // ifi_flags
    message.extend_from_slice(&IFF_UP.to_ne_bytes()); // ifi_change
    rustix::net::sendto(
        &socket,
        &message,
        rustix::net::SendFlags::empty(),
        &SocketAddrNetlink::new(0, 0),
    )
    .map_err(|errno| failed(errno, "RTM_NEWLINK"))?;
    let mut answer = [0u8; 256];
    let (read, _) = rustix::net::recv(&socket, &mut answer[..], rustix::net::RecvFlags::empty())
        .map_err(|errno| failed(errno, "its answer"))?;
    // nlmsghdr (16 bytes), then NLMSG_ERROR's error: 0 is the acknowledgement.
    const NLMSG_ERROR: u16 = 2;
    let kind = u16::from_ne_bytes([answer[4], answer[5]]);
    let error = i32::from_ne_bytes([answer[16], answer[17], answer[18], answer[19]]);
    if read < 20 || kind != NLMSG_ERROR || error != 0 {
        return Err(SpawnError::setup(
            Step::Network,
            nix::errno::Errno::from_raw(-error),
            "loopback up: refused",
        ));
    }
    Ok(())
}
