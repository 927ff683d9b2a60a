//! A real runtime on a sled journal (group commit), its config the layered text a test gives.

use std::path::Path;
use std::sync::Arc;

use aido_actors::clock::{Clock, FixedClock};
use aido_actors::{Runtime, RuntimeOptions};
use aido_journal::{CommitMode, Journal, Limits};
use aido_policy::{Environment, Layered, Source};

/// Start a runtime whose config is `text` (one layer), with HOME `home`, AIDO_HOME
/// `aido_home`, its journal at `journal`, and a fixed clock.
pub async fn start(text: &str, home: &Path, aido_home: &Path, journal: &Path) -> Runtime {
    start_with(
        text,
        home,
        aido_home,
        journal,
        Arc::new(FixedClock::default()),
    )
    .await
}

/// [`start`] with the clock given (the system's, for tests that watch time pass).
pub async fn start_with(
    text: &str,
    home: &Path,
    aido_home: &Path,
    journal: &Path,
    clock: Arc<dyn Clock>,
) -> Runtime {
    let config = Layered::from_layers(&[(Source::File("test".into()), text)])
        .unwrap()
        .config;
    let journal = Journal::open(journal, Limits::default(), CommitMode::Group).unwrap();
    Runtime::start(RuntimeOptions {
        config,
        env: Environment {
            home: home.to_owned(),
            aido_home: aido_home.to_owned(),
        },
        journal,
        clock,
    })
    .await
    .unwrap()
}
