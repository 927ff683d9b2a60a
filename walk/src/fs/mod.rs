//! The filesystem primitives' pure half: their errors, and their results as functions of the
//! arguments and what the body read. The body (in `aido-actors`) reads the world and records
//! what it read; playback hands these the recorded inputs.

/// Errors and their codes.
pub mod error;
/// Results as pure functions of arguments and recorded inputs.
pub mod render;

pub use error::FsError;
