//! The artifact store's place and its listener, as the shared state holds them.

use std::path::PathBuf;

use aido_artifacts::Server;

/// The store's directory in AIDO_HOME.
pub const ARTIFACTS_DIR: &str = "artifacts";

/// The runtime's artifacts: the store's place and the listener, once started.
pub(crate) struct Artifacts {
    pub(crate) dir: PathBuf,
    pub(crate) server: tokio::sync::Mutex<Option<Server>>,
}

impl Artifacts {
    pub(crate) fn new(aido_home: &std::path::Path) -> Self {
        Self {
            dir: aido_home.join(ARTIFACTS_DIR),
            server: tokio::sync::Mutex::new(None),
        }
    }
}
