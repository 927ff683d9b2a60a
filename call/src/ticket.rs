//! A deadline that travels with a body call, and the handshake that makes "timed out" true.
//!
//! A call to a body carries a [`Ticket`]. The body takes the call with [`Ticket::start`], which
//! fails once the deadline has passed or the caller gave up, and then touches nothing; before
//! its first change to the world it [`Ticket::commit`]s, which fails if the caller gave up
//! meanwhile. A caller whose deadline passes [`Ticket::abandon`]s the call: that succeeds
//! while the body has not committed (so the call never runs, or its reads are discarded, and
//! "timed out, nothing changed" is the truth), and fails once it has (so the caller waits for
//! the answer: the world is changing and the journal must say how).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

const QUEUED: u8 = 0;
const RUNNING: u8 = 1;
const COMMITTED: u8 = 2;
const ABANDONED: u8 = 3;

/// One body call's deadline and state. Cheap to clone (both sides hold it).
#[derive(Clone, Debug)]
pub struct Ticket {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: AtomicU8,
    deadline: Instant,
}

impl Ticket {
    /// A call that must be taken by `deadline`.
    pub fn new(deadline: Instant) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: AtomicU8::new(QUEUED),
                deadline,
            }),
        }
    }

    /// A call with no deadline that nobody abandons (recovery at start-up).
    pub fn unbounded() -> Self {
        Self::new(Instant::now() + std::time::Duration::from_secs(365 * 24 * 3600))
    }

    fn swap(&self, from: u8, to: u8) -> Result<u8, u8> {
        self.inner
            .state
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
    }

    /// When the caller gives up on a call the body has not committed.
    pub fn deadline(&self) -> Instant {
        self.inner.deadline
    }

    /// The body takes the call. False when the deadline passed or the caller gave up: then
    /// the body must not touch anything and its answer is not awaited.
    pub fn start(&self) -> bool {
        if Instant::now() >= self.inner.deadline {
            // Too late to start: make sure the caller sees it as abandoned too.
            let _ = self.swap(QUEUED, ABANDONED);
            return false;
        }
        self.swap(QUEUED, RUNNING).is_ok()
    }

    /// Before the body's first change to the world. False when the caller gave up (nothing
    /// has changed, and nothing may).
    pub fn commit(&self) -> bool {
        match self.swap(RUNNING, COMMITTED) {
            Ok(_) => true,
            Err(now) => {
                debug_assert_ne!(now, QUEUED, "a call commits only after it started");
                now == COMMITTED
            }
        }
    }

    /// The caller's deadline passed. True when the body has not committed: it will change
    /// nothing now. False when it has: the caller must wait for its answer.
    pub fn abandon(&self) -> bool {
        loop {
            match self.inner.state.load(Ordering::Acquire) {
                COMMITTED => return false,
                ABANDONED => return true,
                now => {
                    if self.swap(now, ABANDONED).is_ok() {
                        return true;
                    }
                }
            }
        }
    }

    /// The caller gave up (or the deadline passed before the call started).
    #[cfg(test)]
    pub(crate) fn abandoned(&self) -> bool {
        self.inner.state.load(Ordering::Acquire) == ABANDONED
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_call_abandoned_before_it_starts_never_starts() {
        let t = Ticket::new(Instant::now() + Duration::from_secs(60));
        assert!(t.abandon());
        assert!(!t.start());
        assert!(t.abandoned());
    }

    #[test]
    fn a_call_past_its_deadline_does_not_start() {
        let t = Ticket::new(Instant::now());
        assert!(!t.start());
        assert!(t.abandon(), "the caller sees it as abandoned");
    }

    #[test]
    fn a_committed_call_cannot_be_abandoned_and_an_abandoned_one_cannot_commit() {
        let t = Ticket::new(Instant::now() + Duration::from_secs(60));
        assert!(t.start());
        assert!(t.commit());
        assert!(t.commit(), "committing twice is fine");
        assert!(!t.abandon(), "the caller must wait for a committed call");
        let u = Ticket::new(Instant::now() + Duration::from_secs(60));
        assert!(u.start());
        assert!(u.abandon());
        assert!(
            !u.commit(),
            "a running read the caller left changes nothing"
        );
    }
}
