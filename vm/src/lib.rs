//! Whole machines for agents: QEMU processes driven over QMP with the qapi crate.
//!
//! A [`Machine`] is one QEMU process (KVM where it really works, TCG otherwise) on a private
//! directory: its QMP socket, its serial log and its disk overlay live there, nothing listens on
//! a network, `-sandbox on` is set, no host folder is shared, and the process is started under
//! `setpriv --pdeathsig KILL` so it dies with aido. Every error path kills it. The screen is read
//! exactly from the VGA text buffer when the guest is in text mode; input goes through
//! `input-send-event`, key down and up paced a few milliseconds apart so QEMU's small queue
//! never drops keys.
//!
//! This crate has no actors and no policy: the VM body in aido-actors wraps it.

/// Which accelerator a machine runs on.
pub mod accel;
/// Errors and their codes.
pub mod error;
/// Cropping screenshots.
pub mod image;
/// Text and chords to QEMU key codes.
pub mod keys;
/// Machines on a libvirt host (local or remote), through the helper that hosts libvirt.
pub mod libvirt;
/// The machine: boot, screen, input, snapshots, shutdown.
pub mod machine;
/// The helper process that hosts tesseract and libvirt (`aido-native`): its protocol.
pub mod native;
/// Reading graphical screens with tesseract (in the helper).
pub mod ocr;
/// A warm pool of clones, and cloning a running machine.
pub mod pool;
/// The VGA text screen and finding text on it.
pub mod screen;
/// What to boot, and where.
pub mod spec;
/// Saved, prepared machines that `vm_start` and the pool start others from.
pub mod template;

pub use accel::Accel;
pub use error::VmError;
pub use machine::{Machine, MachineSpec, ScreenMatch};
pub use ocr::Ocr;
pub use pool::{Pool, PoolStatus};
pub use screen::{TextMatch, TextScreen};
pub use template::Template;
