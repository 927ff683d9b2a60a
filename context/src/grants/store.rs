//! The grant store the shared state holds: AIDO_HOME/grants.sqlite, opened on first use.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use aido_actions::Failure;
use aido_grants::{GrantError, GrantStore};

/// The store, opened on first use (a runtime that never sees a grant never creates the file).
pub struct Grants {
    path: PathBuf,
    store: Mutex<Option<Arc<GrantStore>>>,
}

impl Grants {
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            store: Mutex::new(None),
        }
    }

    /// The store, opening it if needed.
    pub fn store(&self) -> Result<Arc<GrantStore>, Failure> {
        self.open().map_err(Failure::from)
    }

    /// The store, opening it if needed, with the store's own error.
    pub fn open(&self) -> Result<Arc<GrantStore>, GrantError> {
        let mut slot = self
            .store
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(store) = slot.as_ref() {
            return Ok(store.clone());
        }
        let store = Arc::new(GrantStore::open(&self.path)?);
        *slot = Some(store.clone());
        Ok(store)
    }
}
