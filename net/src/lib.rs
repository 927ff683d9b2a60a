//! The pure parts of aido's network primitives (http_request, fetch_url, port_check,
//! dns_lookup): what may be reached, and how a page is shown. No I/O, no clock: the policy
//! judges targets with it before an action runs, the net body judges every resolved address
//! and every redirect hop with it, and playback converts recorded pages with it.
//!
//! The design decision: a target is parsed the way a browser parses it (so `2130706433`,
//! `0x7f.1` and `[::ffff:7f00:1]` are all `127.0.0.1` to the judge), judged by the allowlist
//! by host and port, and then every address it is or resolves to is judged by range. A name's
//! addresses are judged after resolution and the connection goes to a judged address, so a
//! DNS answer that changes between the check and the connect cannot reach anything else.
//!
//! ```
//! use aido_net::{NetPolicy, Target};
//! let policy = NetPolicy::new(&["*.example.com".into()], &[]).unwrap();
//! let (_, target) = Target::from_url("https://docs.example.com/a").unwrap();
//! assert!(policy.admit(&target).is_ok());
//! let (_, metadata) = Target::from_url("http://169.254.169.254/").unwrap();
//! assert_eq!(policy.admit(&metadata).unwrap_err().code(), "net_denied");
//! let err = policy.check_address("docs.example.com", "127.0.0.1".parse().unwrap()).unwrap_err();
//! assert_eq!(err.code(), "net_address_refused");
//! ```

/// The host:port allowlist and the refused ranges it opens.
pub mod allow;
/// Why a target is refused, with stable codes.
pub mod error;
/// HTML to markdown or text, and windows of a page.
pub mod page;
/// Address ranges refused unless the policy names them.
pub mod range;
/// Secrets kept out of the journal.
pub mod redact;
/// URLs and hosts as the judge sees them.
pub mod target;

pub use allow::{Admitted, NetPolicy};
pub use error::NetError;
pub use page::{Format, Window};
pub use range::{Range, RangeKind, classify};
pub use target::{Host, Target};
