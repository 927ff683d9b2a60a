//! Every read of the wall clock and every random id in the runtime goes through here, so a
//! test or a replay can substitute a fixed clock and fixed ids.

use std::sync::atomic::{AtomicU64, Ordering};

use aido_journal::SessionId;

/// Time and identity for the runtime.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
    /// A fresh session id: 6 bytes of time, 10 unpredictable bytes.
    fn session_id(&self) -> SessionId;
    /// Fill `buf` with unpredictable bytes.
    fn random(&self, buf: &mut [u8]);
}

/// The real clock; ids mix the time, a counter and the process's random hasher keys.
#[derive(Debug, Default)]
pub struct SystemClock {
    counter: AtomicU64,
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }

    fn session_id(&self) -> SessionId {
        use std::hash::{BuildHasher, Hasher};
        let now = self.now_ms();
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        // RandomState is seeded from the OS once per process and per instance.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(now);
        hasher.write_u64(n);
        hasher.write_u32(std::process::id());
        let random = blake3::hash(&hasher.finish().to_le_bytes());
        let mut bytes = [0u8; 16];
        bytes[..6].copy_from_slice(&now.to_be_bytes()[2..]);
        bytes[6..].copy_from_slice(&random.as_bytes()[..10]);
        SessionId::from_bytes(bytes)
    }

    fn random(&self, buf: &mut [u8]) {
        use std::io::Read;
        let from_os = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(buf));
        if from_os.is_err() {
            // No /dev/urandom: stretch the hasher-seeded id entropy with blake3's XOF.
            let seed = self.session_id();
            blake3::Hasher::new()
                .update(seed.as_bytes())
                .finalize_xof()
                .fill(buf);
        }
    }
}

/// A clock for tests: time advances by one millisecond per read, ids count up.
#[derive(Debug, Default)]
pub struct FixedClock {
    ticks: AtomicU64,
}

impl Clock for FixedClock {
    fn now_ms(&self) -> u64 {
        1_700_000_000_000 + self.ticks.fetch_add(1, Ordering::Relaxed)
    }

    fn session_id(&self) -> SessionId {
        let n = self.ticks.fetch_add(1, Ordering::Relaxed);
        let mut bytes = [0u8; 16];
        bytes[8..].copy_from_slice(&n.to_be_bytes());
        SessionId::from_bytes(bytes)
    }

    fn random(&self, buf: &mut [u8]) {
        let n = self.ticks.fetch_add(1, Ordering::Relaxed);
        blake3::Hasher::new()
            .update(&n.to_le_bytes())
            .finalize_xof()
            .fill(buf);
    }
}
