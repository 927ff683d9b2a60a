//! The body protocol: how the runtime calls a body, and how a body answers.
//!
//! A *body* is the one owner of a part of the world aido acts on (files, commands, machines,
//! a display, the network, memory, search). Every call to a body is the same handshake, and
//! this crate is the only place it is written:
//!
//! - the caller makes a [`Reply`] (a [`Ticket`] with the call's deadline, and the port the
//!   answer comes back on) and casts its message to the body's actor through the body's
//!   [`Slot`] ([`Slot::ask`]); it waits until the deadline for the body to take the call,
//!   and past it only for a call the body committed to (it is changing the world, so its
//!   answer is what the journal must record);
//! - the body's actor ([`BodyActor`], one generic actor for every body) hands each message to
//!   the body's [`Body::handle`]; the body takes the call ([`Reply::take`]: a call whose
//!   deadline passed never runs), runs it either inline (a *serial* body, which owns mutable
//!   state: machines, a store) or through [`Calls`] on a task or the blocking pool behind the
//!   body's gate (a *concurrent* body: files, commands, search, the network), and answers;
//! - a panic anywhere in a call answers that call with `body_crashed` and its own panic's
//!   text, never another body's, and fails the actor, so the supervisor restarts it within
//!   its budget ([`Slot`], [`RESTARTS_MAX`] in [`RESTART_WINDOW_MS`]) and journals it; a body
//!   past its budget answers `body_failed` until aido restarts.
//!
//! Serial or concurrent is one choice per body: a serial body does its work in `handle` (one
//! call at a time, the actor's mailbox is the queue); a concurrent one gives each call to
//! [`Calls::blocking`] or [`Calls::task`] with a [`Turn`] at the body's gate (shared for calls
//! that may run side by side, exclusive for one that must see the body whole).
//!
//! The crate knows nothing of any particular body, the journal or sessions: it sits under
//! every body crate and the runtime, so the protocol cannot drift between bodies.

/// The generic body actor, the [`Body`] trait and the ways a body runs a call.
mod body;
/// The clock and id facade (tests and replay pin it).
pub mod clock;
/// Fault injection for tests and the seeded simulation.
pub mod faults;
/// The answer of one call: its ticket, its port, and what a body that dies owes it.
mod reply;
/// One body's place in the supervision tree: its actor, its restarts, its last crash.
mod slot;
/// A deadline that travels with a body call.
pub mod ticket;

pub use body::{Body, BodyActor, Calls, Letter, Turn};
pub use faults::{Faults, Plan as FaultPlan};
pub use reply::Reply;
pub use slot::{RESTART_WINDOW_MS, RESTARTS_MAX, Restarted, Slot, Supervised};
pub use ticket::Ticket;

/// The text of a panic's payload.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}
