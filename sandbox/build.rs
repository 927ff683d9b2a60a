//! `AIDO_SANDBOX_SOURCE_HASH`: a hash of this crate's sources, so aido can tell whether a
//! sandbox helper binary beside it speaks exactly its protocol (see `host_exe`), and of
//! aido-confine's, whose layers the child applies and whose types travel in the plan. The other
//! crates split out of it (aido-egress, aido-globs, aido-changes) run in the parent only and send
//! nothing to the child, so they are no part of that protocol.

use std::path::Path;

fn visit(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            visit(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

fn main() {
    let mut files = Vec::new();
    visit(Path::new("src"), &mut files);
    visit(Path::new("../confine/src"), &mut files);
    files.sort();
    // FNV-1a, 64 bits, over each file's path and bytes.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in &files {
        let bytes = std::fs::read(file).unwrap_or_default();
        for byte in file.to_string_lossy().as_bytes().iter().chain(&bytes) {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=../confine/src");
    println!("cargo:rustc-env=AIDO_SANDBOX_SOURCE_HASH={hash:016x}");
}
