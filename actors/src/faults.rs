//! Fault injection for tests and the seeded simulation: a body that panics on its next call,
//! or that is slow to take a call or to finish one. Every knob is off unless a test turns it
//! on, and costs one atomic load per call when off.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The knobs, shared by the runtime and its bodies.
#[derive(Debug, Default)]
pub struct Faults {
    /// The filesystem body panics on its next message.
    panic_next: AtomicBool,
    /// The filesystem body panics inside its next piece of blocking work.
    panic_in_work_next: AtomicBool,
    /// Every filesystem call waits this long before the body takes it (a slow or busy body).
    delay_before_start_ms: AtomicU64,
    /// Every filesystem call the body took waits this long before it finishes.
    delay_after_start_ms: AtomicU64,
}

impl Faults {
    /// Make the filesystem body panic on its next message.
    pub fn panic_next(&self) {
        self.panic_next.store(true, Ordering::SeqCst);
    }

    /// Make the filesystem body panic inside its next piece of blocking work.
    pub fn panic_in_work_next(&self) {
        self.panic_in_work_next.store(true, Ordering::SeqCst);
    }

    /// Delay every filesystem call before the body takes it.
    pub fn delay_before_start(&self, delay: Duration) {
        self.delay_before_start_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Delay every filesystem call after the body took it.
    pub fn delay_after_start(&self, delay: Duration) {
        self.delay_after_start_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Turn every knob off.
    pub fn clear(&self) {
        self.panic_next.store(false, Ordering::SeqCst);
        self.panic_in_work_next.store(false, Ordering::SeqCst);
        self.delay_before_start(Duration::ZERO);
        self.delay_after_start(Duration::ZERO);
    }

    pub(crate) fn take_panic(&self) -> bool {
        self.panic_next.swap(false, Ordering::SeqCst)
    }

    pub(crate) fn take_panic_in_work(&self) -> bool {
        self.panic_in_work_next.swap(false, Ordering::SeqCst)
    }

    pub(crate) fn before_start(&self) -> Option<Duration> {
        match self.delay_before_start_ms.load(Ordering::SeqCst) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    pub(crate) fn after_start(&self) -> Option<Duration> {
        match self.delay_after_start_ms.load(Ordering::SeqCst) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }
}
