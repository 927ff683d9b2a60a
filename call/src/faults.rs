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
    /// The process body's next call panics in its task.
    panic_in_process_next: AtomicBool,
    /// Every filesystem call waits this long before the body takes it (a slow or busy body).
    delay_before_start_ms: AtomicU64,
    /// Every filesystem call the body took waits this long before it finishes.
    delay_after_start_ms: AtomicU64,
    /// After an action's work, before its answer (between a write and its outcome record).
    delay_after_work_ms: AtomicU64,
    /// Seeded faults (the simulation): the seed, 0 when off.
    seed: AtomicU64,
    /// Seeded: each call waits a pseudo-random 0..=this many ms before the body takes it.
    random_delay_max_ms: AtomicU64,
    /// Seeded: each message panics the body with this chance, per thousand.
    random_panic_per_mille: AtomicU64,
    /// Each entry of a change set waits this long before it is applied (a window in which to
    /// kill aido in the middle of an apply).
    delay_apply_step_us: AtomicU64,
    /// Calls seen, the input of the seeded choices.
    calls: AtomicU64,
}

/// A seeded fault plan, e.g. from `AIDO_FAULTS=seed=7,delay_max_ms=60,panic_per_mille=30`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The seed (choices are a pure function of it and the call count).
    pub seed: u64,
    /// Most delay before the body takes a call.
    pub delay_max_ms: u64,
    /// Chance per thousand that the body panics on a message.
    pub panic_per_mille: u64,
    /// Delay after every filesystem action's work, before its answer (a window in which to
    /// kill aido between a write and its outcome record).
    pub after_work_ms: u64,
    /// Delay before each entry of a change set is applied, in microseconds.
    pub apply_step_us: u64,
}

impl Plan {
    /// Parse `key=value` pairs separated by commas.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut plan = Plan::default();
        for pair in text.split(',').filter(|p| !p.trim().is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} is not key=value"))?;
            let value: u64 = value.trim().parse().map_err(|e| format!("{key}: {e}"))?;
            match key.trim() {
                "seed" => plan.seed = value,
                "delay_max_ms" => plan.delay_max_ms = value,
                "panic_per_mille" => plan.panic_per_mille = value.min(1000),
                "after_work_ms" => plan.after_work_ms = value,
                "apply_step_us" => plan.apply_step_us = value,
                other => return Err(format!("unknown fault {other:?}")),
            }
        }
        Ok(plan)
    }
}

/// A pseudo-random number from (seed, n): splitmix64.
fn mix(seed: u64, n: u64) -> u64 {
    let mut z = seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
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

    /// Make the process body's next call panic in its task (the body itself goes on).
    pub fn panic_in_process_next(&self) {
        self.panic_in_process_next.store(true, Ordering::SeqCst);
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

    /// Follow a seeded plan (the simulation).
    pub fn follow(&self, plan: Plan) {
        self.random_delay_max_ms
            .store(plan.delay_max_ms, Ordering::SeqCst);
        self.random_panic_per_mille
            .store(plan.panic_per_mille, Ordering::SeqCst);
        self.delay_after_work_ms
            .store(plan.after_work_ms, Ordering::SeqCst);
        self.delay_apply_step_us
            .store(plan.apply_step_us, Ordering::SeqCst);
        self.seed.store(plan.seed | 1, Ordering::SeqCst);
    }

    /// Turn every knob off.
    pub fn clear(&self) {
        self.seed.store(0, Ordering::SeqCst);
        self.panic_next.store(false, Ordering::SeqCst);
        self.panic_in_work_next.store(false, Ordering::SeqCst);
        self.panic_in_process_next.store(false, Ordering::SeqCst);
        self.delay_before_start(Duration::ZERO);
        self.delay_after_start(Duration::ZERO);
        self.delay_after_work_ms.store(0, Ordering::SeqCst);
        self.delay_apply_step_us.store(0, Ordering::SeqCst);
    }

    /// The next seeded choice, if a plan is followed.
    fn roll(&self) -> Option<u64> {
        match self.seed.load(Ordering::SeqCst) {
            0 => None,
            seed => Some(mix(seed, self.calls.fetch_add(1, Ordering::SeqCst))),
        }
    }

    /// Whether the body panics on this message (once when asked, or by the seeded plan's chance).
    pub fn take_panic(&self) -> bool {
        if self.panic_next.swap(false, Ordering::SeqCst) {
            return true;
        }
        let chance = self.random_panic_per_mille.load(Ordering::SeqCst);
        chance > 0 && self.roll().is_some_and(|r| r % 1000 < chance)
    }

    /// Whether this piece of blocking work panics (once, when asked).
    pub fn take_panic_in_work(&self) -> bool {
        self.panic_in_work_next.swap(false, Ordering::SeqCst)
    }

    /// Whether this process call panics in its task (once, when asked).
    pub fn take_panic_in_process(&self) -> bool {
        self.panic_in_process_next.swap(false, Ordering::SeqCst)
    }

    /// How long a call waits before the body takes it, if at all.
    pub fn before_start(&self) -> Option<Duration> {
        let random = match self.random_delay_max_ms.load(Ordering::SeqCst) {
            0 => 0,
            max => self.roll().map_or(0, |r| r % (max + 1)),
        };
        match self.delay_before_start_ms.load(Ordering::SeqCst) + random {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// Wait before one entry of a change set is applied, if a test asked for it.
    pub fn apply_step(&self) {
        match self.delay_apply_step_us.load(Ordering::Relaxed) {
            0 => {}
            us => std::thread::sleep(Duration::from_micros(us)),
        }
    }

    /// How long an action waits after its work, before its answer, if at all.
    pub fn after_work(&self) -> Option<Duration> {
        match self.delay_after_work_ms.load(Ordering::SeqCst) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// How long a call the body took waits before it finishes, if at all.
    pub fn after_start(&self) -> Option<Duration> {
        match self.delay_after_start_ms.load(Ordering::SeqCst) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }
}
