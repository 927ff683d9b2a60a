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
