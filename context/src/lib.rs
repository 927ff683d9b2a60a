//! One call's context, below every service and above every body: the state one runtime's
//! actors share ([`shared::Shared`]: the journal, the policy, the body table, the stores), the
//! [`call::Call`] a service or body call takes, the [`hooks::Hooks`] a surface lends a call,
//! the [`call::Children`] a call starts child actions through, and what the runtime tells an
//! observer.
//!
//! The runtime (`aido-actors`) and the session-bound services (`aido-service-*`) are built on
//! it; it names no service and no session, so nothing above can form a circle through it.

/// The artifact store's place and listener, as the shared state holds them.
#[cfg(feature = "prim-artifact")]
pub mod artifact {
    /// The store's directory and listener.
    pub mod place;
}
/// The body table: one slot per body this build holds.
pub mod bodies;
/// One call's context, and the way it starts child actions.
pub mod call;
/// The runtime's own errors (not of actions).
pub mod error;
/// The file-change subscriptions table the shared state holds, and its errors.
#[cfg(feature = "prim-process")]
pub mod events {
    /// Why a subscription or reaction call failed.
    pub mod error;
    /// The table of subscriptions and reactions, by id.
    pub mod subscriptions;
}
/// The grant store the shared state holds.
pub mod grants {
    /// AIDO_HOME/grants.sqlite, opened on first use.
    pub mod store;
}
/// What a surface lends a call: asking a human, progress, cancellation.
pub mod hooks;
/// What the runtime tells an observer (telemetry) about each action and journal write.
pub mod observe;
/// The state every actor of a runtime shares.
pub mod shared;

/// The clock and id facade (`aido-call`'s).
pub use aido_call::clock;
/// Fault injection (`aido-call`'s).
pub use aido_call::faults;
