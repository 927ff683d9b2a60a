//! Artifacts: files an agent made (an HTML page, a canvas, a small web app), kept under
//! `AIDO_HOME/artifacts/<id>/` and served to a person's browser on 127.0.0.1. A plain library:
//! the artifact body in `aido-actors` wraps it, journals every answer and judges every path.
//!
//! The design decision: an artifact is a manifest of names with their blake3, and the server
//! answers only names in that manifest. No request path is ever joined onto a directory, so
//! there is nothing to traverse and nothing to list; what is refused on top of that (`%`
//! escapes, `..`, backslashes, empty segments) is refused so that no client's normalisation
//! can make two spellings of one name. Every response carries a CSP whose `sandbox` directive
//! gives the page an opaque origin (no cookies, storage or same-origin reads of other
//! artifacts) and whose `connect-src` is `'none'` unless the policy allowed origins, a Host
//! check stops DNS rebinding, and ids are 128 random bits.
//!
//! ```
//! use aido_artifacts::{Limits, Store, valid_name};
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path(), Limits::default()).unwrap();
//! let id = "0123456789abcdef0123456789abcdef";
//! let made = store
//!     .create(id, "demo", None, vec![("index.html".into(), b"<p>hi</p>".to_vec())], 1)
//!     .unwrap();
//! assert_eq!(made.entry, "index.html");
//! assert_eq!(store.read(id, "index.html").unwrap(), b"<p>hi</p>");
//! assert!(!valid_name("../etc/passwd"));
//! ```

/// Why an artifact operation failed, with stable codes.
pub mod error;
/// The HTTP listener: Host check, names from the manifest only, the sandboxing headers.
pub mod server;
/// The store: manifests, names, ids and the size caps.
pub mod store;

pub use error::ArtifactError;
pub use server::{Server, csp};
pub use store::{FileEntry, ID_HEX_LEN, Limits, Manifest, Store, valid_id, valid_name};
