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
    pub fn io(op: &'static str, path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.display().to_string(),
            source,
        }
    }
}

aido_codes::coded!(VmError {
    Missing => "vm_qemu_missing",
    Spawn => "vm_spawn_failed",
    Exited => "vm_exited",
    BootTimeout => "vm_boot_timeout",
    Qmp => "vm_qmp_failed",
    TextTimeout => "vm_text_timeout",
    UnknownKey => "vm_unknown_key",
    Ocr => "vm_ocr_failed",
    Io => "vm_io_failed",
    Libvirt => "vm_libvirt_failed",
    Unsupported => "vm_unsupported_on_host",
    Helper => "vm_helper_failed",
});
