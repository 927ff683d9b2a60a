//! A background command's server reached from the host: [`Exposed::start`] binds
//! `127.0.0.1:PORT` on the host (never another address) and starts a relay, a re-exec of the
//! host executable that enters the command's network namespace (through the user namespace
//! owning it, when there is one) and, for each connection the host's listener accepts,
//! connects to `127.0.0.1:PORT` inside and copies bytes both ways. The relay holds nothing of
//! the command but its namespace; it dies with aido (`PR_SET_PDEATHSIG`) and when the
//! [`Exposed`] is dropped.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{SpawnError, Step};
use crate::protocol::{read_json, read_json_with_fd, write_json, write_json_with_fd};

/// How long the relay may take to enter the namespace and say so.
const READY_WAIT: Duration = Duration::from_secs(5);

/// What the relay is told on its first frame (the host's listener rides on it).
#[derive(Debug, Serialize, Deserialize)]
struct Relay {
    port: u16,
    connections_max: usize,
    /// The user namespace owning the network namespace follows on a frame of its own.
    owner: bool,
}

/// A port of a background command exposed on the host's loopback; the relay ends when this
/// is dropped.
#[derive(Debug)]
pub struct Exposed {
    /// The host address it is reached at (`127.0.0.1:PORT`).
    pub host: std::net::SocketAddr,
    child: Child,
    _control: UnixStream,
}

impl Drop for Exposed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Exposed {
    /// Binds `127.0.0.1:port` on the host and starts the relay into `network`, with at most
    /// `connections_max` connections at once (more wait in the listener's backlog). A port
    /// already taken on the host is `sandbox_setup_failed` naming it.
    pub fn start(
        exe: &Path,
        network: &crate::netns::SharedNetwork,
        port: u16,
        connections_max: usize,
    ) -> Result<Self, SpawnError> {
        let failed = |error: &std::io::Error, what: &str| {
            SpawnError::setup_io(Step::Network, error, format!("expose port {port}: {what}"))
        };
        let listener = TcpListener::bind(("127.0.0.1", port))
            .map_err(|error| failed(&error, "bind 127.0.0.1 on the host"))?;
        let host = listener
            .local_addr()
            .map_err(|error| failed(&error, "the listener's address"))?;
        let (netns, owner) = network
            .lend()
            .map_err(|error| failed(&error, "the namespace's descriptors"))?;
        let (control, theirs) =
            UnixStream::pair().map_err(|error| failed(&error, "a control socket"))?;
        let mut child = Command::new(exe)
            .arg(crate::protocol::CHILD_ARG)
            .arg(crate::protocol::RELAY_ARG)
            .env_clear()
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|error| failed(&error, "start the relay"))?;
        let relay = Relay {
            port,
            connections_max,
            owner: owner.is_some(),
        };
        let sent = write_json_with_fd(&control, &relay, listener.as_fd())
            .and_then(|()| write_json_with_fd(&control, &(), netns.as_fd()))
            .and_then(|()| match &owner {
                Some(owner) => write_json_with_fd(&control, &(), owner.as_fd()),
                None => Ok(()),
            });
        drop(listener);
        let ready = sent
            .and_then(|()| control.set_read_timeout(Some(READY_WAIT)))
            .and_then(|()| read_json::<Result<(), String>>(&mut &control));
        match ready {
            Ok(Ok(())) => Ok(Exposed {
                host,
                child,
                _control: control,
            }),
            Ok(Err(why)) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(SpawnError::SetupFailed {
                    step: Step::Network,
                    errno: 0,
                    detail: format!("expose port {port}: {why}"),
                })
            }
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(failed(&error, "the relay did not start"))
            }
        }
    }
}

/// The relay process (see the module docs). Exits when aido closes the control socket.
pub(crate) fn relay_main() -> ! {
    let Some(control) = crate::protocol::control_socket() else {
        std::process::exit(120);
    };
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    match enter(&control) {
        Ok((relay, listener)) => {
            let _ = write_json(&mut &control, &Ok::<(), String>(()));
            // aido let go: the relay ends.
            std::thread::spawn(move || {
                let mut byte = [0u8; 1];
                let _ = (&control).read(&mut byte);
                std::process::exit(0);
            });
            serve(&relay, &listener)
        }
        Err(why) => {
            let _ = write_json(&mut &control, &Err::<(), String>(why));
            std::process::exit(1)
        }
    }
}

/// Reads the frames and enters the namespace (still one thread: joining a user namespace
/// needs that).
fn enter(control: &UnixStream) -> Result<(Relay, TcpListener), String> {
    let (relay, listener): (Relay, Option<OwnedFd>) =
        read_json_with_fd(control).map_err(|e| format!("the relay's frame: {e}"))?;
    let listener = listener.ok_or("no listener on the relay's frame")?;
    let ((), netns): ((), Option<OwnedFd>) =
        read_json_with_fd(control).map_err(|e| format!("the namespace's frame: {e}"))?;
    let netns = netns.ok_or("no namespace on its frame")?;
    if relay.owner {
        let ((), owner): ((), Option<OwnedFd>) =
            read_json_with_fd(control).map_err(|e| format!("the owner's frame: {e}"))?;
        let owner = owner.ok_or("no user namespace on its frame")?;
        rustix::thread::move_into_link_name_space(
            owner.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::User),
        )
        .map_err(|e| format!("enter the namespace's owner: {e}"))?;
    }
    rustix::thread::move_into_link_name_space(
        netns.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .map_err(|e| format!("enter the command's network namespace: {e}"))?;
    Ok((relay, TcpListener::from(listener)))
}

fn serve(relay: &Relay, listener: &TcpListener) -> ! {
    let open = Arc::new(AtomicUsize::new(0));
    loop {
        let Ok((host, _)) = listener.accept() else {
            continue;
        };
        // Past the bound a connection waits here, not in a thread of its own.
        while open.load(Ordering::SeqCst) >= relay.connections_max {
            std::thread::sleep(Duration::from_millis(10));
        }
        let Ok(inside) = TcpStream::connect(("127.0.0.1", relay.port)) else {
            // Nothing listens inside (yet): the host's client sees the connection close.
            let _ = host.shutdown(Shutdown::Both);
            continue;
        };
        open.fetch_add(1, Ordering::SeqCst);
        let open = Arc::clone(&open);
        std::thread::spawn(move || {
            pipe(host, inside);
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// Copies both ways until both sides closed.
fn pipe(host: TcpStream, inside: TcpStream) {
    let (Ok(host_reader), Ok(inside_writer)) = (host.try_clone(), inside.try_clone()) else {
        return;
    };
    let upstream = std::thread::spawn(move || copy(host_reader, inside_writer));
    copy(inside, host);
    let _ = upstream.join();
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = [0u8; 16 << 10];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
