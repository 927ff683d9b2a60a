//! The VM body: the machines an agent has started, each a QEMU process (aido-vm) owned by
//! this actor. If the actor crashes its machines are killed with it (QEMU dies with its
//! owner), the supervisor journals the restart, and the agent starts them again.

/// The actor and its messages.
pub mod actor;
/// Anthropic's computer-use tool on a machine.
mod computer;

pub use actor::{VmBody, VmBodyArgs, VmMsg};
