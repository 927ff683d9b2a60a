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
use std::sync::Mutex;

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
