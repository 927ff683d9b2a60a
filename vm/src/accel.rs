use serde::Serialize;

/// The accelerator a machine runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Accel {
    /// Hardware virtualization.
    Kvm,
    /// QEMU's software emulation.
    Tcg,
}

impl Accel {
    /// The `-machine accel=` value.
    pub fn name(self) -> &'static str {
        match self {
            Self::Kvm => "kvm",
            Self::Tcg => "tcg",
        }
    }

    /// KVM only where a real KVM module is loaded (`/dev/kvm` alone proves nothing: a nested
    /// software hypervisor can provide it and then fail on real guests); TCG otherwise. The
    /// caller confirms KVM with a smoke boot and falls back to TCG when it fails.
    pub fn detect() -> Self {
        let real_kvm = std::path::Path::new("/sys/module/kvm_intel").exists()
            || std::path::Path::new("/sys/module/kvm_amd").exists();
        if real_kvm
            && std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/kvm")
                .is_ok()
        {
            Self::Kvm
        } else {
            Self::Tcg
        }
    }
}
