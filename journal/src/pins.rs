//! Pins: the contents a running aido stores while retention sweeps its own journal.
//!
//! A body stores contents before the record that names them is appended (a large write's
//! before-image, a command's change set), so a sweep of a journal that is being written could
//! take contents whose record is still on its way. While a [`PinGuard`] lives, every hash the
//! journal's blob store is asked to store is pinned first, and the sweep removes nothing
//! pinned: it checks and removes under the same lock the store pins under, so a store of the
//! same contents either is seen by the sweep or comes after the removal and writes them again.
//! The guard is taken when the journal opens, before anything is stored, so nothing this
//! process stores escapes it; what earlier processes stored and never named is garbage (they
//! are gone: their journal's lock was free) unless a recovery marker names it, and the sweep
//! reads those too.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

/// Most hashes a guard pins. Past it the guard is overflowed and the sweep of that journal
/// removes nothing (a run that long should not sweep a journal being written).
pub const PINS_MAX: usize = 1 << 20;

#[derive(Debug, Default)]
struct PinSet {
    hashes: HashSet<[u8; 32]>,
    overflowed: bool,
}

/// The pins of one journal's blob store. Cheap to clone; clones share the pins.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pins(Arc<Mutex<Option<PinSet>>>);

impl Pins {
    fn lock(&self) -> MutexGuard<'_, Option<PinSet>> {
        // A panic while pinning leaves a set that is still a set.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Pin `hash` (hex or raw) if a guard is active. Called before the store looks for or
    /// writes the contents.
    pub(crate) fn pin(&self, hash: &[u8; 32]) {
        if let Some(set) = self.lock().as_mut() {
            if set.hashes.len() < PINS_MAX {
                set.hashes.insert(*hash);
            } else if !set.hashes.contains(hash) {
                set.overflowed = true;
            }
        }
    }

    /// Pin a hash given as 64 hex digits (anything else names no contents).
    pub(crate) fn pin_hex(&self, hash: &str) {
        if let Some(key) = decode(hash) {
            self.pin(&key);
        }
    }

    /// Run `remove` unless `hash` is pinned (or the pins overflowed, when nothing can be told
    /// apart), holding the pins' lock meanwhile; true when it ran.
    pub(crate) fn unless_pinned(&self, hash: &[u8; 32], remove: impl FnOnce()) -> bool {
        let guard = self.lock();
        if guard
            .as_ref()
            .is_some_and(|set| set.overflowed || set.hashes.contains(hash))
        {
            return false;
        }
        remove();
        true
    }

    /// True when a guard pinned more than [`PINS_MAX`] hashes.
    pub(crate) fn overflowed(&self) -> bool {
        self.lock().as_ref().is_some_and(|set| set.overflowed)
    }

    /// True while a guard is active.
    #[cfg(test)]
    pub(crate) fn active(&self) -> bool {
        self.lock().is_some()
    }

    /// Start pinning.
    pub(crate) fn guard(&self) -> PinGuard {
        *self.lock() = Some(PinSet::default());
        PinGuard { pins: self.clone() }
    }
}

/// While it lives, everything the journal stores is pinned against retention's sweep (see the
/// module). Take it before the journal stores anything; drop it when the sweep is done.
#[derive(Debug)]
pub struct PinGuard {
    pins: Pins,
}

impl PinGuard {
    /// Hashes pinned so far.
    pub fn pinned(&self) -> usize {
        self.pins.lock().as_ref().map_or(0, |set| set.hashes.len())
    }

    pub(crate) fn pins(&self) -> &Pins {
        &self.pins
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        *self.pins.lock() = None;
    }
}

/// 64 hex digits as 32 bytes.
pub(crate) fn decode(hash: &str) -> Option<[u8; 32]> {
    if hash.len() != 64 {
        return None;
    }
    let bytes = hex::decode(hash).ok()?;
    bytes.try_into().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_pinned_hash_is_not_removed_and_pins_end_with_their_guard() {
        let pins = Pins::default();
        let hash = [3u8; 32];
        pins.pin(&hash);
        assert!(!pins.active(), "nothing is pinned without a guard");
        let guard = pins.guard();
        pins.pin(&hash);
        assert_eq!(guard.pinned(), 1);
        let mut removed = false;
        assert!(!pins.unless_pinned(&hash, || removed = true));
        assert!(!removed);
        assert!(pins.unless_pinned(&[4u8; 32], || removed = true));
        assert!(removed);
        drop(guard);
        assert!(!pins.active());
        assert!(pins.unless_pinned(&hash, || {}));
    }
}
