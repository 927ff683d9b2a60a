//! The memory body: one actor owning aido-memory's store at `AIDO_HOME/memory.sqlite`, the
//! SQLite file (WAL) every session and every aido process of this AIDO_HOME shares.
//!
//! The store is opened on the first call, not at start-up, so a damaged or locked file costs
//! the memory primitives a coded failure (`memory_store_corrupt`, `memory_store_busy`, ...)
//! and never the rest of the runtime; the next call tries again. Its work is blocking SQLite
//! I/O, so it runs on the blocking pool. A panic there fails the actor and the supervisor
//! restarts it like any body (the store is opened again on the next call).
//!
//! The body never reads a clock: the executor reads the runtime's clock, passes it in and
//! records it, with the store's answer, as the action's inputs, so playback rebuilds the
//! result (`aido_walk::memory::render`) without the database.

/// The actor and its messages.
pub mod actor;

pub use actor::{MemoryBody, MemoryBodyArgs, MemoryCall, MemoryMsg};
