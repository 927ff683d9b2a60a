//! The browser body: one headless Chromium per session ([`aido_browser::Browser`]), started
//! by the session's first `browser_navigate` and closed by `browser_close` or the session's
//! end.
//!
//! - **Every request through aido's egress proxy.** Each session's browser gets a proxy of
//!   its own ([`aido_egress::Proxy`], the one confined commands use) on 127.0.0.1, judging
//!   every connection the page makes (loopback included: Chromium is told not to bypass it)
//!   by `[net] allow` and `allow_ranges`, addresses checked after resolution; a redirect to a
//!   metadata address is refused there and never fetched. The connections each call caused
//!   are part of its answer, so the journal holds every host the page reached or was refused.
//! - **A private profile** per session under `AIDO_HOME/browser/<session>`, made empty at
//!   start and removed when the browser closes.
//! - **Answers are records.** A call answers `{"answer": ..., "requests": [...]}` with
//!   aido-browser's typed answer; the walk renders the result from it (`aido_walk::browser`),
//!   as playback does without a browser.
//! - **Serial per session.** A session's calls take its browser one at a time (a tab's state
//!   is the order of its calls); sessions do not wait for each other.

/// The actor and its messages.
pub mod actor;
/// Downloads, staged for the executor to land.
mod downloads;
/// Anthropic's browser toolset on a session's browser.
mod toolset;

pub use actor::{BrowserBody, BrowserBodyArgs, BrowserMsg};

/// Why the browser body refused a call (the browser's own failures keep their codes:
/// `browser_navigation_failed`, `browser_ref_unknown`, ...).
#[derive(Debug, thiserror::Error)]
pub enum BrowserBodyError {
    /// A call that needs a page before any `browser_navigate` opened one.
    #[error("{primitive} needs an open browser: call browser_navigate first")]
    NotOpen {
        /// The primitive.
        primitive: &'static str,
    },
    /// The egress proxy the browser would go through could not be made.
    #[error("the browser's egress proxy could not start: {why}")]
    Proxy {
        /// Why.
        why: String,
    },
    /// The private profile directory could not be made.
    #[error("the browser profile {path:?} could not be made: {why}")]
    Profile {
        /// The directory.
        path: std::path::PathBuf,
        /// Why.
        why: String,
    },
    /// The browser exited or crashed since the last call; the next browser_navigate starts a
    /// fresh one.
    #[error("the session's browser has exited; browser_navigate starts a new one")]
    Exited,
    /// A file to upload that the policy did not judge for this call (never handed to a page
    /// unjudged).
    #[error("{path:?} was not judged by the walls for this upload")]
    UploadUnjudged {
        /// The path as given.
        path: String,
    },
    /// A file to upload that is not a regular file.
    #[error("{path:?} is not a file that can be uploaded")]
    UploadMissing {
        /// The path, resolved.
        path: std::path::PathBuf,
    },
    /// A file to upload could not be copied where Chromium may read it.
    #[error("a file to upload could not be copied for the browser: {why}")]
    UploadCopy {
        /// Why.
        why: String,
    },
}

aido_actions::coded!(BrowserBodyError {
    NotOpen => "browser_not_open",
    Proxy => "browser_proxy_failed",
    Profile => "browser_profile_failed",
    Exited => "browser_exited",
    UploadUnjudged => "browser_upload_unjudged",
    UploadMissing => "browser_upload_missing",
    UploadCopy => "browser_upload_copy_failed",
});
