//! `aido watch`: the operator's terminal. It shows the runtimes of this host (or an
//! `aido serve` URL with its token) and their fleet, the sessions, a session's timeline as it
//! is written (primitive, verdict with gate and code, duration, seq, the files a change
//! touched, rewinds and the branches they abandoned), a step in full with the diff of what it
//! wrote, and the questions waiting for a person, answered in place (`a` approve, `d` deny,
//! `t` type); and it rewinds a session to a chosen step after showing what would be undone.
//!
//! The design decision: it is a thin client of Mission Control's JSON API (`/mc/api/...`,
//! behind the operator's bearer token), the same the web page reads, so an answer given here
//! is journaled exactly as one given on the page or with `aido answer`, and a rewind is the
//! `rewind` primitive run by the runtime, not something done here. Nothing is held whole: a
//! timeline is read a page at a time ([`timeline::PAGE_RECORDS`]) and at most
//! [`timeline::ROWS_KEPT_MAX`] rows are kept, so a session of millions of records costs what
//! a small one does. The state ([`app`]) is pure: keys and answers in, requests out, which
//! is what its tests drive, with ratatui's `TestBackend` for the screen ([`ui`]).
//!
//! ```no_run
//! let options = aido_watch::Options {
//!     endpoint: aido_watch::discover::this_host(&std::env::home_dir().unwrap_or_default().join(".aido")),
//!     session: None,
//!     colour: aido_watch::colour_wanted(),
//! };
//! aido_watch::run(options)?;
//! # Ok::<(), aido_watch::WatchError>(())
//! ```

/// The state and what changes it: keys, timers, answers.
pub mod app;
/// The HTTP client of one `aido serve` and its fleet.
pub mod client;
/// One step in full: arguments, outcome, diffs.
pub mod detail;
/// Finding this host's runtime.
pub mod discover;
/// `WatchError`.
pub mod error;
/// What the API answers, as read here.
pub mod model;
/// The terminal and the loop.
mod run;
/// A session's timeline, a window of pages.
pub mod timeline;
/// Drawing.
pub mod ui;
/// The thread that asks the runtime.
mod worker;

pub use client::Endpoint;
pub use error::WatchError;
pub use run::{Options, colour_wanted, run};
