/// A machine operation failed. Every variant has a stable code.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// qemu-system-x86_64 (or qemu-img, setpriv) is not installed.
    #[error("{program} is not installed")]
    Missing {
        /// The program.
        program: &'static str,
    },
    /// QEMU could not be started.
    #[error("cannot start QEMU: {message}")]
    Spawn {
        /// Why.
        message: String,
    },
    /// QEMU exited while starting.
    #[error("QEMU exited while starting: {stderr}")]
    Exited {
        /// What it said.
        stderr: String,
    },
    /// The guest did not say it was ready in time.
    #[error("the guest did not boot within {timeout_ms} ms")]
    BootTimeout {
        /// The deadline.
        timeout_ms: u64,
    },
    /// A QMP command failed.
    #[error("QMP {command}: {message}")]
    Qmp {
        /// The command.
        command: &'static str,
        /// QEMU's message.
        message: String,
    },
    /// Text not found before the deadline.
    #[error("{text:?} did not appear within {timeout_ms} ms")]
    TextTimeout {
        /// The text.
        text: String,
        /// The deadline.
        timeout_ms: u64,
    },
    /// A key name or character the keyboard cannot type.
    #[error("cannot type {what:?}")]
    UnknownKey {
        /// The key or character.
        what: String,
    },
    /// OCR failed.
    #[error("OCR: {message}")]
    Ocr {
        /// Why.
        message: String,
    },
    /// A libvirt call failed.
    #[error("libvirt {op}: {message}")]
    Libvirt {
        /// The operation.
        op: String,
        /// libvirt's message.
        message: String,
    },
    /// The helper process that hosts tesseract and libvirt (`aido-native`) is missing, could
    /// not start, or died.
    #[error("{helper}: {message}")]
    Helper {
        /// The helper.
        helper: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The operation needs a machine aido runs itself (direct QMP), not one on a libvirt host.
    #[error("{what} is not available on a libvirt host ({uri}); it needs a direct QEMU machine")]
    Unsupported {
        /// The operation.
        what: &'static str,
        /// The host.
        uri: String,
    },
    /// A file operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

impl VmError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Missing { .. } => "vm_qemu_missing",
            Self::Spawn { .. } => "vm_spawn_failed",
            Self::Exited { .. } => "vm_exited",
            Self::BootTimeout { .. } => "vm_boot_timeout",
            Self::Qmp { .. } => "vm_qmp_failed",
            Self::TextTimeout { .. } => "vm_text_timeout",
            Self::UnknownKey { .. } => "vm_unknown_key",
            Self::Ocr { .. } => "vm_ocr_failed",
            Self::Io { .. } => "vm_io_failed",
            Self::Libvirt { .. } => "vm_libvirt_failed",
            Self::Unsupported { .. } => "vm_unsupported_on_host",
            Self::Helper { .. } => "vm_helper_failed",
        }
    }

    /// Every code this error can give (beside `code()`; this crate depends on no aido
    /// crate, so it cannot use `aido_actions::coded!`; the unit test pins both).
    pub const CODES: &'static [&'static str] = &[
        "vm_qemu_missing",
        "vm_spawn_failed",
        "vm_exited",
        "vm_boot_timeout",
        "vm_qmp_failed",
        "vm_text_timeout",
        "vm_unknown_key",
        "vm_ocr_failed",
        "vm_io_failed",
        "vm_libvirt_failed",
        "vm_unsupported_on_host",
        "vm_helper_failed",
    ];

    pub fn io(op: &'static str, path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.display().to_string(),
            source,
        }
    }
}
