//! The body table: one [`Slot`] per body this build holds. The protocol every body speaks
//! (tickets, replies, the one actor, restarts within a budget, the crash each call is
//! answered with) is `aido-call`'s; a new body is a [`aido_call::Body`], a field here, an
//! entry in [`Bodies::all`], and a group of the `actions!` table it matches without a
//! wildcard.

pub use aido_call::{RESTART_WINDOW_MS, RESTARTS_MAX};
use aido_call::{Slot, Supervised};
use ractor::ActorId;

#[cfg(feature = "prim-desktop")]
use crate::desktop::DesktopBody;
use crate::fs::FsBody;
#[cfg(feature = "prim-memory")]
use crate::memory::MemoryBody;
#[cfg(feature = "prim-net")]
use crate::net::NetBody;
#[cfg(feature = "prim-process")]
use crate::process::ProcessBody;
#[cfg(feature = "prim-search")]
use crate::search::SearchBody;
#[cfg(feature = "prim-vm")]
use crate::vm::VmBody;

/// The table of bodies.
pub struct Bodies {
    /// The filesystem body.
    pub fs: Slot<FsBody>,
    /// The VM body.
    #[cfg(feature = "prim-vm")]
    pub vm: Slot<VmBody>,
    /// The memory body.
    #[cfg(feature = "prim-memory")]
    pub memory: Slot<MemoryBody>,
    /// The process body.
    #[cfg(feature = "prim-process")]
    pub process: Slot<ProcessBody>,
    /// The search body.
    #[cfg(feature = "prim-search")]
    pub search: Slot<SearchBody>,
    /// The net body.
    #[cfg(feature = "prim-net")]
    pub net: Slot<NetBody>,
    /// The desktop body.
    #[cfg(feature = "prim-desktop")]
    pub desktop: Slot<DesktopBody>,
}

impl Bodies {
    /// Every body, for supervision.
    pub fn all(&self) -> Vec<&dyn Supervised> {
        vec![
            &self.fs,
            #[cfg(feature = "prim-vm")]
            &self.vm,
            #[cfg(feature = "prim-memory")]
            &self.memory,
            #[cfg(feature = "prim-process")]
            &self.process,
            #[cfg(feature = "prim-search")]
            &self.search,
            #[cfg(feature = "prim-net")]
            &self.net,
            #[cfg(feature = "prim-desktop")]
            &self.desktop,
        ]
    }

    /// The body whose actor is `id`.
    pub fn find(&self, id: ActorId) -> Option<&dyn Supervised> {
        self.all().into_iter().find(|b| b.is(id))
    }
}
