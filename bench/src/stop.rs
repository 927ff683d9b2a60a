//! Stopping a long section early (Ctrl-C) without leaving mounts or temp trees behind: the
//! signal only sets a flag; the section checks it between steps and returns an error, so its
//! Drop guards unmount and remove what it made.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Result, bail};

static STOP: AtomicBool = AtomicBool::new(false);

/// Ask the running section to stop at its next check.
pub fn request() {
    STOP.store(true, Ordering::SeqCst);
}

/// An error once a stop was requested.
pub fn check() -> Result<()> {
    if STOP.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}

/// Whether a stop was requested.
pub fn requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
