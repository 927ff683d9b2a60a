//! The guest images the VM tests boot, built once per target dir with vm/guest/build-image
//! (concurrent test processes wait on a lock file).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

fn build(name: &str, framebuffer: bool) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let lock = std::fs::File::create(dir.join(".lock")).unwrap();
    lock.lock().unwrap();
    if !dir.join("manifest.json").exists() {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("guest/build-image");
        let mut cmd = std::process::Command::new(script);
        cmd.arg(&dir);
        if framebuffer {
            cmd.arg("--framebuffer");
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "build-image failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dir
}

/// The VGA text guest.
pub fn guest() -> PathBuf {
    build("aido-guest", false)
}

/// The framebuffer guest.
pub fn guest_fb() -> PathBuf {
    build("aido-guest-fb", true)
}

pub use aido_testkit::ssh::LoopbackSsh;

/// QEMU processes started by this test binary (children of this process or of its setpriv).
pub fn qemu_pids() -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            cmd.contains("qemu-system-x86_64") && ppid == Some(me) && !stat.contains(") Z ")
        })
        .collect()
}

/// Assert that, within 5 s, no QEMU of this test binary runs but those in `before`.
pub fn no_qemu_left_but(before: &[u32]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while qemu_pids().iter().any(|p| !before.contains(p)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let left: Vec<u32> = qemu_pids()
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert!(left.is_empty(), "QEMU processes left behind: {left:?}");
}
