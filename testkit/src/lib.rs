//! The fixtures aido's tests share, so each is written once: a real runtime on a sled
//! journal ([`runtime`], feature `runtime`), an sshd of the test's own on 127.0.0.1
//! ([`ssh::LoopbackSsh`]), the libvirt host the libvirt tests use ([`libvirt::host`]), and the
//! rule for a test that needs what the machine lacks ([`lacking`]).

#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures of tests may fail loudly

/// The libvirt host the libvirt tests use.
pub mod libvirt;
/// A test binary's own runner, for tests that must own `main`.
pub mod runner;
/// A real runtime on a sled journal.
#[cfg(feature = "runtime")]
pub mod runtime;
/// An sshd of the test's own on loopback.
pub mod ssh;

/// The host's processes whose command line holds `marker` (to see that nothing of a test
/// outlives what should have ended it).
pub fn pids_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            found.push(pid);
        }
    }
    found
}

/// A test needs `what`, which this machine lacks (`why`): outside CI it says so and the test
/// stops (`None`); under `CI` (any value) it fails, since CI installs and starts everything
/// the tests need.
pub fn lacking<T>(what: &str, got: Result<T, String>) -> Option<T> {
    match got {
        Ok(found) => Some(found),
        Err(why) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED: no {what}: {why}");
            None
        }
        Err(why) => panic!("CI must have {what}: {why}"),
    }
}
