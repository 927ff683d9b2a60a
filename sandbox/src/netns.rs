//! The pool of empty network namespaces lent to commands without network
//! ([`crate::protocol::Netns`]).
//!
//! A namespace enters the pool from a child that made it before its user namespace (so the
//! host's user namespace owns it and no command can configure it) and sent it back; it is lent
//! to the next command and returned only when the child reported that every process of the
//! sandbox was reaped. A run that ended any other way (a timeout, a killed child, a setup
//! failure) drops its namespace instead. One pool per process; a few are kept idle, the rest
//! closed (the kernel frees a namespace with its last descriptor).

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use crate::protocol::Netns;

/// Idle namespaces kept for the next commands.
const IDLE_MAX: usize = 4;

static IDLE: Mutex<Vec<OwnedFd>> = Mutex::new(Vec::new());

/// Whether this process can seed the pool: only real root may make a network namespace
/// outside a user namespace of its own.
fn can_seed() -> bool {
    rustix::process::geteuid().is_root()
}

/// What a command without network gets: a namespace of the pool (with its descriptor), a
/// seed if the pool is empty and this process can fill it, or its own.
pub(crate) fn lend() -> (Netns, Option<OwnedFd>) {
    if !can_seed() {
        return (Netns::Own, None);
    }
    match IDLE.lock().ok().and_then(|mut idle| idle.pop()) {
        Some(fd) => (Netns::Pooled, Some(fd)),
        None => (Netns::Seed, None),
    }
}

/// Back into the pool after a run whose every process was reaped.
pub(crate) fn give_back(fd: OwnedFd) {
    if let Ok(mut idle) = IDLE.lock()
        && idle.len() < IDLE_MAX
    {
        idle.push(fd);
    }
}

/// Idle namespaces now (for tests).
pub fn idle_count() -> usize {
    IDLE.lock().map(|idle| idle.len()).unwrap_or(0)
}

/// A background command's network namespace, shared with the later commands of its session
/// ([`crate::Sandbox::with_network`]): a dev server it runs and the tests they run meet on
/// one loopback. Cheap to clone; the namespace lives while a clone does (or a process is in
/// it).
#[derive(Clone, Debug)]
pub struct SharedNetwork(Arc<Held>);

#[derive(Debug)]
struct Held {
    netns: OwnedFd,
    /// The user namespace owning it (a command made it inside its own).
    userns: Option<OwnedFd>,
}

impl SharedNetwork {
    pub(crate) fn new(netns: OwnedFd, userns: Option<OwnedFd>) -> Self {
        SharedNetwork(Arc::new(Held { netns, userns }))
    }

    /// Copies of its descriptors for one launch: the namespace, and the user namespace that
    /// owns it.
    pub(crate) fn lend(&self) -> std::io::Result<(OwnedFd, Option<OwnedFd>)> {
        let netns = self.0.netns.try_clone()?;
        let userns = self.0.userns.as_ref().map(OwnedFd::try_clone).transpose()?;
        Ok((netns, userns))
    }

    /// The namespace's inode (`net:[N]` in `/proc/PID/ns/net`), for the journal.
    pub fn inode(&self) -> u64 {
        rustix::fs::fstat(&self.0.netns).map_or(0, |stat| stat.st_ino)
    }
}
