//! A headless Chromium for aido agents, with no actors: the browser body (later) drives one
//! [`Browser`] per session.
//!
//! The design decisions:
//! - **Fail closed on the network.** Chromium is only ever started with aido's egress proxy
//!   (`--proxy-server`) and with loopback *not* bypassed (`--proxy-bypass-list=<-loopback>`),
//!   so every request, 127.0.0.1 included, is judged and recorded by the proxy. Options with
//!   no proxy are refused with `browser_proxy_missing` before anything runs.
//! - **A private profile** (`--user-data-dir`) per browser, given by the caller, and the whole
//!   process group killed on drop: nothing of one session outlives it.
//! - **DevTools on a pipe, as plain JSON.** Chromium speaks DevTools on two pipes of ours
//!   (`--remote-debugging-pipe`, fds 3 and 4), never on a TCP port that any local process (the
//!   agent's own commands included) could reach to drive the browser around the policy. A
//!   small client of our own speaks the ~25 methods used here and reads the fields it needs
//!   by name, so a newer Chromium (Debian ships each new major as a security update) adding
//!   events, fields or enum values never breaks a reply, as it can for clients that
//!   deserialize the whole protocol into generated types.
//! - **Typed answers.** Every operation answers with a serde type in [`answer`], so a body can
//!   journal it and play it back without a browser.
//!
//! ```no_run
//! # async fn demo(proxy: std::net::SocketAddr) -> Result<(), aido_browser::BrowserError> {
//! use aido_browser::{Browser, Options};
//! let profile = std::path::PathBuf::from("/tmp/aido-browser-profile");
//! let mut browser = Browser::launch(Options::new(proxy, &profile)).await?;
//! browser.navigate("http://127.0.0.1:8080/").await?;
//! let snapshot = browser.snapshot().await?;
//! let field = snapshot.nodes.iter().find(|n| n.role == "textbox").and_then(|n| n.reference.clone());
//! if let Some(field) = field {
//!     browser.fill(&field, "alice").await?;
//! }
//! println!("{}", browser.text().await?.text);
//! # Ok(()) }
//! ```

/// The typed answers of every operation.
pub mod answer;
/// The browser: launch, tabs, navigation, downloads.
pub mod browser;
/// The DevTools connection.
pub(crate) mod cdp;
/// The error enum and its codes.
pub mod error;
/// Pointer gestures, drags, key chords, form fields, files, zoom.
pub mod input;
/// Key names as key events.
pub(crate) mod keys;
/// Starting Chromium: options, limits, flags, the process group.
pub mod launch;
/// Console messages and requests, kept per tab until read.
pub mod logs;
/// Input, reading and waits inside the current page.
pub(crate) mod page;
/// The accessibility tree flattened, with element references.
pub(crate) mod snapshot;

pub use answer::{
    Clicked, Download, Evaluated, Filled, Found, Locator, Navigated, Node, PageText, Screenshot,
    Scrolled, Snapshot, TabInfo,
};
pub use browser::Browser;
pub use error::BrowserError;
pub use input::{Button, Gesture};
pub use launch::{CHROMIUM_PATH, Limits, Options};
pub use logs::{ConsoleEntry, Dialog, NetworkEntry, Read};
