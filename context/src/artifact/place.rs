//! The artifact store's place and its listener, as the shared state holds them.

use std::path::PathBuf;

use aido_artifacts::Server;

/// The store's directory in AIDO_HOME.
pub const ARTIFACTS_DIR: &str = "artifacts";

/// The runtime's artifacts: the store's place and the listener, once started.
pub struct Artifacts {
    pub dir: PathBuf,
    pub server: tokio::sync::Mutex<Option<Server>>,
}

impl Artifacts {
    pub fn new(aido_home: &std::path::Path) -> Self {
        Self {
            dir: aido_home.join(ARTIFACTS_DIR),
            server: tokio::sync::Mutex::new(None),
        }
    }
}
