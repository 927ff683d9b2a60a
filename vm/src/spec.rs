//! What to boot: the kernel, initramfs, disk, memory and accelerator of a machine, and where it
//! runs (here, or on a libvirt host).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::accel::Accel;

/// What to boot.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MachineSpec {
    /// The kernel (bzImage).
    pub kernel: PathBuf,
    /// The initramfs.
    pub initrd: PathBuf,
    /// A qcow2 base disk; the machine writes to its own overlay on it, never to the base.
    pub disk: Option<PathBuf>,
    /// Guest memory in MiB.
    pub memory_mb: u32,
    /// The kernel command line.
    pub append: String,
    /// How long the guest has to print `ready_marker` on its serial port.
    pub boot_timeout_ms: u64,
    /// The line the guest prints on ttyS0 when it is ready.
    pub ready_marker: String,
    /// The accelerator.
    pub accel: Accel,
    /// TCG's translation buffer in MiB (measured here: 16 MiB costs ~8% of boot time and saves
    /// ~45 MB of resident memory against QEMU's default).
    pub tcg_tb_mb: u32,
    /// A libvirt URI (`qemu:///system`, `qemu+ssh://host/system`) to run the machine on
    /// instead of starting QEMU here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

impl MachineSpec {
    /// The guest built by `vm/guest/build-image DIR --framebuffer`: a 1280x800 framebuffer
    /// console with a large font (read by OCR).
    pub fn framebuffer(dir: &Path) -> Self {
        let mut spec = Self::text_console(dir);
        spec.append = "console=ttyS0 console=tty0 fbcon=font:TER16x32 quiet".into();
        spec
    }

    /// The guest built by `vm/guest/build-image` in `dir`, in VGA text mode.
    pub fn text_console(dir: &Path) -> Self {
        Self {
            kernel: dir.join("vmlinuz"),
            initrd: dir.join("initrd.img"),
            disk: Some(dir.join("disk.qcow2")),
            memory_mb: 128,
            append: "console=ttyS0 console=tty0 quiet".into(),
            boot_timeout_ms: 60_000,
            ready_marker: "AIDO-GUEST-READY".into(),
            accel: Accel::detect(),
            tcg_tb_mb: 16,
            host: None,
        }
    }
}
