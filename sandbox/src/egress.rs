//! The egress proxy: a confined command's only way out of its network namespace.
//!
//! With [`Network::Proxy`], the sandbox child brings up the namespace's loopback, binds
//! `127.0.0.1:`[`EGRESS_PORT`] there and hands the listening socket to the parent over the
//! control socket (`SCM_RIGHTS`), before init starts. The namespace has no other interface, and
//! Landlock lets the command connect to that one TCP port only, so the proxy is not a
//! convention the command may ignore (`HTTP_PROXY` and friends only tell tools where it is):
//! there is no route around it. The parent serves the socket (a thread per connection) as an
//! HTTP proxy: `CONNECT host:port` for TLS and anything else, absolute-form requests for plain
//! HTTP. Each target is judged by the profile's host:port allowlist ([`aido_net::NetPolicy`]:
//! exact names and `*.suffix`), resolved by the parent, and every address judged again after
//! resolution (loopback, private, link-local, CGNAT and metadata ranges refused unless the
//! profile names them); the connection goes to the address that was judged, so a second DNS
//! answer cannot rebind it. Every attempt, admitted or refused, is an [`EgressRecord`] in the
//! command's [`crate::Outcome`], which the journal keeps.

use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aido_net::{Host, NetError, NetPolicy, Target};
use serde::{Deserialize, Serialize};

use crate::error::{SpawnError, Step};
use crate::protocol::Report;

/// The proxy's port on the namespace's loopback (the namespace is the command's own, so any
/// port is free; a fixed one lets the parent write the plan before the child binds it).
pub const EGRESS_PORT: u16 = 3128;
/// Attempts recorded per command; later ones are counted in [`EgressRecord`]-less totals.
pub const EGRESS_RECORDS_MAX: usize = 1000;
/// The largest request head the proxy reads.
const HEAD_BYTES_MAX: usize = 16 << 10;
/// How long a client may take to send its request head, and a connect may take.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long finishing waits for open connections to close after the command ended.
const FINISH_GRACE: Duration = Duration::from_millis(500);

/// A confined command's network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Network {
    /// No network at all: a namespace with a loopback that is down.
    #[default]
    None,
    /// Only aido's egress proxy, which admits the hosts of `allow` (`host:port`,
    /// `*.suffix:port`, ports as `443`, `80,443` or `*`) at addresses outside the refused ranges
    /// unless `allow_ranges` (CIDR blocks) opens them.
    Proxy {
        /// The host:port allowlist.
        allow: Vec<String>,
        /// Refused ranges opened anyway (e.g. `127.0.0.1/32` for a test server).
        #[serde(default)]
        allow_ranges: Vec<String>,
    },
}

impl Network {
    /// The parsed allowlist of a proxy network; `None` for no network.
    pub(crate) fn policy(&self) -> Result<Option<NetPolicy>, SpawnError> {
        match self {
            Network::None => Ok(None),
            Network::Proxy {
                allow,
                allow_ranges,
            } => NetPolicy::new(allow, allow_ranges)
                .map(Some)
                .map_err(|error| SpawnError::RequestInvalid {
                    reason: format!("network: {error}"),
                }),
        }
    }
}

/// One connection attempt through the proxy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressRecord {
    /// `CONNECT`, or the method of a plain-HTTP request.
    pub method: String,
    /// The host asked for, as the command wrote it.
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// The address connected to (after resolution and its check), when it got that far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Why it was refused (a stable code, e.g. `net_denied`, `net_address_refused`), or
    /// `None` when it was admitted and connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The refusal's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Bytes from the command to the host.
    pub bytes_up: u64,
    /// Bytes from the host to the command.
    pub bytes_down: u64,
}

// ---- The child's side -----------------------------------------------------------------------

/// In the sandbox child, inside the new network namespace: loopback up, the proxy's socket
/// bound on it and sent to the parent with a [`Report::Egress`] frame.
pub(crate) fn open(control: &UnixStream) -> Result<(), SpawnError> {
    loopback_up()?;
    let listener = TcpListener::bind(("127.0.0.1", EGRESS_PORT))
        .map_err(|error| SpawnError::setup_io(Step::Network, &error, "bind the egress port"))?;
    crate::protocol::write_json_with_fd(control, &Report::Egress, listener.as_fd())
        .map_err(|error| SpawnError::setup_io(Step::Network, &error, "send the egress socket"))?;
    Ok(())
}

fn errno_of(errno: rustix::io::Errno) -> nix::errno::Errno {
    nix::errno::Errno::from_raw(errno.raw_os_error())
}

/// `RTM_NEWLINK` on interface 1 (a new namespace's `lo`) with `IFF_UP`, acknowledged.
fn loopback_up() -> Result<(), SpawnError> {
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

// ---- The parent's side ----------------------------------------------------------------------

/// What the proxy has seen so far.
#[derive(Default)]
struct Log {
    records: Vec<EgressRecord>,
    dropped: u64,
}

/// A running proxy's records, read while it runs.
#[derive(Clone)]
pub(crate) struct EgressLog(Arc<Mutex<Log>>);

impl EgressLog {
    /// Every attempt recorded so far.
    pub(crate) fn records(&self) -> Vec<EgressRecord> {
        self.0
            .lock()
            .map(|log| log.records.clone())
            .unwrap_or_default()
    }
}

/// A running proxy for one command.
pub(crate) struct Proxy {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Log>>,
    acceptor: Option<JoinHandle<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    /// Serves `listener` (the socket the child bound) with `policy`.
    pub(crate) fn start(listener: OwnedFd, policy: NetPolicy) -> std::io::Result<Self> {
        let listener = TcpListener::from(listener);
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Log::default()));
        let policy = Arc::new(policy);
        let acceptor = {
            let (stop, log) = (stop.clone(), log.clone());
            std::thread::Builder::new()
                .name("aido-egress".into())
                .spawn(move || accept_loop(&listener, &policy, &stop, &log))?
        };
        Ok(Proxy {
            stop,
            log,
            acceptor: Some(acceptor),
        })
    }

    /// What it has recorded so far, readable while it runs (a background command's).
    pub(crate) fn log(&self) -> EgressLog {
        EgressLog(Arc::clone(&self.log))
    }

    /// Stops accepting, gives open connections a moment to close, and returns the log.
    pub(crate) fn finish(mut self) -> Vec<EgressRecord> {
        self.stop.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + FINISH_GRACE;
        if let Some(acceptor) = self.acceptor.take()
            && let Ok(connections) = acceptor.join()
        {
            for connection in connections {
                while !connection.is_finished() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        let log = self.log.lock().map(|mut l| std::mem::take(&mut *l));
        log.map(|l| l.records).unwrap_or_default()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn accept_loop(
    listener: &TcpListener,
    policy: &Arc<NetPolicy>,
    stop: &AtomicBool,
    log: &Arc<Mutex<Log>>,
) -> Vec<JoinHandle<()>> {
    let mut connections = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                let (policy, log) = (policy.clone(), log.clone());
                if let Ok(handle) = std::thread::Builder::new()
                    .name("aido-egress-conn".into())
                    .spawn(move || serve(client, &policy, &log))
                {
                    connections.push(handle);
                }
                connections.retain(|c| !c.is_finished());
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                let mut fds = [rustix::event::PollFd::new(
                    listener,
                    rustix::event::PollFlags::IN,
                )];
                let tick = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 20_000_000,
                };
                let _ = rustix::event::poll(&mut fds, Some(&tick));
            }
            Err(_) => break,
        }
    }
    connections
}

/// Appends a record; its index, to update the byte counts later.
fn record(log: &Mutex<Log>, entry: EgressRecord) -> Option<usize> {
    let mut log = log.lock().ok()?;
    if log.records.len() >= EGRESS_RECORDS_MAX {
        log.dropped += 1;
        return None;
    }
    log.records.push(entry);
    Some(log.records.len() - 1)
}

/// A refusal: a 403 to the command naming the code, and its record.
fn refuse(
    mut client: TcpStream,
    log: &Mutex<Log>,
    mut entry: EgressRecord,
    status: &str,
    code: &str,
    message: String,
) {
    let body = format!("aido egress proxy: {code}: {message}\n");
    // One write: a client that reads once sees the whole answer.
    let answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nX-Aido-Code: {code}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(answer.as_bytes());
    let _ = client.shutdown(Shutdown::Both);
    entry.code = Some(code.to_owned());
    entry.message = Some(message);
    record(log, entry);
}

/// One client connection: its request head, the judgement, then the relay.
fn serve(client: TcpStream, policy: &NetPolicy, log: &Mutex<Log>) {
    let _ = client.set_nonblocking(false);
    let _ = client.set_read_timeout(Some(HEAD_TIMEOUT));
    let mut entry = EgressRecord {
        method: String::new(),
        host: String::new(),
        port: 0,
        address: None,
        code: None,
        message: None,
        bytes_up: 0,
        bytes_down: 0,
    };
    let parsed = read_head(&client)
        .and_then(|(head, rest)| parse_head(&head).map(|request| (request, rest)));
    let (request, rest) = match parsed {
        Ok(parsed) => parsed,
        Err(why) => {
            return refuse(
                client,
                log,
                entry,
                "400 Bad Request",
                "egress_request_invalid",
                why,
            );
        }
    };
    entry.method = request.method.clone();
    entry.host = request.host.clone();
    entry.port = request.port;
    let addresses = match admit(policy, &request.host, request.port) {
        Ok(addresses) => addresses,
        Err((code, message)) => {
            return refuse(client, log, entry, "403 Forbidden", code, message);
        }
    };
    // Each address that passed, in the resolver's order, until one answers.
    let mut failures = Vec::new();
    let mut connected = None;
    for address in &addresses {
        match TcpStream::connect_timeout(address, HEAD_TIMEOUT) {
            Ok(upstream) => {
                connected = Some((*address, upstream));
                break;
            }
            Err(error) => failures.push(format!("{address}: {error}")),
        }
    }
    let Some((address, upstream)) = connected else {
        let message = format!("connecting to {}", failures.join("; "));
        return refuse(
            client,
            log,
            entry,
            "502 Bad Gateway",
            "egress_connect_failed",
            message,
        );
    };
    entry.address = Some(address.to_string());
    let _ = client.set_read_timeout(None);
    let index = record(log, entry);
    let mut client = client;
    let mut upstream_writer = match upstream.try_clone() {
        Ok(writer) => writer,
        Err(_) => return,
    };
    let mut up = 0u64;
    let greeting = match &request.forward {
        None => client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .map(|()| Vec::new()),
        Some(head) => Ok(head.clone()),
    };
    let Ok(first) = greeting else { return };
    if upstream_writer.write_all(&first).is_err() || upstream_writer.write_all(&rest).is_err() {
        return;
    }
    up += (first.len() + rest.len()) as u64;
    let (Ok(client_reader), Ok(client_writer)) = (client.try_clone(), client.try_clone()) else {
        return;
    };
    let upload = std::thread::spawn(move || copy(client_reader, upstream_writer));
    let down = copy(upstream, client_writer);
    up += upload.join().unwrap_or(0);
    if let Some(index) = index
        && let Ok(mut log) = log.lock()
        && let Some(entry) = log.records.get_mut(index)
    {
        entry.bytes_up = up;
        entry.bytes_down = down;
    }
}

/// Copies until either side ends, then shuts both directions; the bytes copied.
fn copy(mut from: TcpStream, mut to: TcpStream) -> u64 {
    let mut total = 0u64;
    let mut buffer = vec![0u8; 32 << 10];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
                total += n as u64;
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
    total
}

/// The request head (through the blank line) and whatever followed it in the same reads.
fn read_head(mut client: &TcpStream) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buffer.split_off(end + 4);
            return Ok((buffer, rest));
        }
        if buffer.len() > HEAD_BYTES_MAX {
            return Err(format!("a request head over {HEAD_BYTES_MAX} bytes"));
        }
        match client.read(&mut chunk) {
            Ok(0) => return Err("the connection closed before a request head".into()),
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            Err(error) => return Err(format!("reading the request head: {error}")),
        }
    }
}

/// A parsed proxy request.
struct ProxyRequest {
    method: String,
    host: String,
    port: u16,
    /// For plain HTTP: the head to send upstream (origin-form, `Connection: close`, no proxy
    /// headers). `None` for `CONNECT`.
    forward: Option<Vec<u8>>,
}

fn parse_head(head: &[u8]) -> Result<ProxyRequest, String> {
    let text = std::str::from_utf8(head).map_err(|_| "a request head that is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("a malformed request line {line:?}"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(format!("{version} (only HTTP/1.x)"));
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = target
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
            .ok_or_else(|| format!("CONNECT {target:?} names no host:port"))?;
        let target = Target::tcp(host, port).map_err(|e| e.to_string())?;
        return Ok(ProxyRequest {
            method: "CONNECT".into(),
            host: target.host.to_string(),
            port: target.port,
            forward: None,
        });
    }
    let (url, target) = Target::from_url(target).map_err(|e| e.to_string())?;
    if url.scheme() != "http" {
        return Err(format!(
            "{} through the proxy (plain http only; use CONNECT for the rest)",
            url.scheme()
        ));
    }
    let mut path = url.path().to_owned();
    if let Some(query) = url.query() {
        path.push('?');
        path.push_str(query);
    }
    let mut forward = format!("{method} {path} {version}\r\n");
    for header in lines.filter(|l| !l.is_empty()) {
        let name = header.split(':').next().unwrap_or_default().trim();
        let drop = [
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h));
        if !drop {
            forward.push_str(header);
            forward.push_str("\r\n");
        }
    }
    forward.push_str("Connection: close\r\n\r\n");
    Ok(ProxyRequest {
        method: method.to_owned(),
        host: target.host.to_string(),
        port: target.port,
        forward: Some(forward.into_bytes()),
    })
}

/// Judges `host:port` by the allowlist, resolves it and judges each address: the addresses
/// that passed, or the refusal's code and message.
fn admit(
    policy: &NetPolicy,
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, (&'static str, String)> {
    let coded = |error: NetError| (error.code(), error.to_string());
    let target = Target::tcp(host, port).map_err(coded)?;
    let admitted = policy.admit(&target).map_err(coded)?;
    let addresses: Vec<IpAddr> = match &admitted.target.host {
        Host::Ip(ip) => return Ok(vec![SocketAddr::new(*ip, port)]),
        Host::Domain(name) => (name.as_str(), port)
            .to_socket_addrs()
            .map(|found| found.map(|a| a.ip()).collect())
            .map_err(|error| {
                (
                    "egress_resolve_failed",
                    format!("resolving {name}: {error}"),
                )
            })?,
    };
    let mut passed = Vec::new();
    let mut refusal = None;
    for ip in addresses {
        match policy.check_address(host, ip) {
            Ok(()) => passed.push(SocketAddr::new(ip, port)),
            Err(error) => refusal = Some(coded(error)),
        }
    }
    if passed.is_empty() {
        return Err(refusal.unwrap_or(("egress_resolve_failed", format!("{host} has no address"))));
    }
    Ok(passed)
}
