//! The VM body: the machines an agent has started, each a QEMU process (aido-vm) owned by
//! this actor. If the actor crashes its machines are killed with it (QEMU dies with its
//! owner), the supervisor journals the restart, and the agent starts them again.

/// The actor and its messages.
pub mod actor;
/// Anthropic's computer-use tool on a machine.
mod computer;

pub use actor::{VmBody, VmBodyArgs, VmMsg};

/// Why the VM body refused or failed a call, beside the machine's own errors
/// (`aido_vm::VmError`). Each variant says why in its own words.
#[derive(Debug, thiserror::Error)]
pub enum VmBodyError {
    /// No machine of that name runs.
    #[error("{why}")]
    NotFound {
        /// Why.
        why: String,
    },
    /// A machine of that name runs already.
    #[error("{why}")]
    Exists {
        /// Why.
        why: String,
    },
    /// `vm.machines_max` machines run already.
    #[error("{why}")]
    TooMany {
        /// Why.
        why: String,
    },
    /// The guest image is not built.
    #[error("{why}")]
    ImageMissing {
        /// Why.
        why: String,
    },
    /// The machine was not made by the primitive asked to undo it.
    #[error("{why}")]
    WrongKind {
        /// Why.
        why: String,
    },
    /// The text is not on the screen.
    #[error("{why}")]
    TextNotFound {
        /// Why.
        why: String,
    },
    /// The OCR engine is not there.
    #[error("{why}")]
    OcrFailed {
        /// Why.
        why: String,
    },
    /// The warm pool is not there.
    #[error("{why}")]
    PoolFailed {
        /// Why.
        why: String,
    },
    /// Arguments the schema admits but the body refuses.
    #[error("{why}")]
    InvalidArguments {
        /// Why.
        why: String,
    },
}

aido_actions::coded!(VmBodyError {
    NotFound => "vm_not_found",
    Exists => "vm_exists",
    TooMany => "vm_too_many",
    ImageMissing => "vm_image_missing",
    WrongKind => "vm_wrong_kind",
    TextNotFound => "vm_text_not_found",
    OcrFailed => "vm_ocr_failed",
    PoolFailed => "vm_pool_failed",
    InvalidArguments => "invalid_arguments",
});

/// What the warm pool holds (aido-vm's), as the runtime reports it.
pub use aido_vm::PoolStatus;
