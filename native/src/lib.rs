//! The native libraries aido drives, each hosted in a helper process of its own: tesseract
//! (OCR of screens) and libvirt (machines on a libvirt host). The `aido-native` executable
//! (beside `aido`, from `cli/src/bin/aido-native.rs`) is this crate's [`main`]; aido itself
//! links neither library, so no aido process pays for loading them (about 20 ms before
//! `main`, some sixty shared libraries) and a crash in either takes only its helper down.
//!
//! The protocol (frames over the helper's standard input and output) and aido's side live in
//! `aido_vm::native`, which has no C dependency; this crate is the other side.
//!
//! ```no_run
//! // cli/src/bin/aido-native.rs
//! fn main() -> std::process::ExitCode {
//!     aido_native::main()
//! }
//! ```

/// Machines on a libvirt host: one guest per helper.
pub mod libvirt;
/// One tesseract engine.
pub mod ocr;

/// `aido-native ocr` or `aido-native libvirt`: serve aido on standard input and output until
/// it closes them.
pub fn main() -> std::process::ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_default();
    match mode.as_str() {
        aido_vm::native::OCR_MODE => ocr::serve(),
        aido_vm::native::LIBVIRT_MODE => libvirt::serve(),
        _ => {
            // Run by hand: say what this is (it never prints on standard output otherwise).
            eprintln!(
                "aido-native: the helper that hosts tesseract and libvirt for aido; it is started by aido \
                 as `aido-native {}` or `aido-native {}`",
                aido_vm::native::OCR_MODE,
                aido_vm::native::LIBVIRT_MODE
            );
            std::process::ExitCode::from(2)
        }
    }
}
