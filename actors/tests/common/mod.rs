//! The world the runtime tests share: a real runtime on a sled journal (group commit) with a
//! fixed clock, its config the layered text a test gives.

use std::path::Path;
use std::sync::Arc;

use aido_actors::clock::FixedClock;
use aido_actors::{Runtime, RuntimeOptions};
use aido_journal::{CommitMode, Journal, Limits as JournalLimits};
use aido_policy::{Environment, Layered, Source};

/// Start a runtime whose config is `text` (one layer), with HOME `home`, AIDO_HOME
/// `aido_home` and its journal at `journal`.
pub async fn runtime(text: &str, home: &Path, aido_home: &Path, journal: &Path) -> Runtime {
    let config = Layered::from_layers(&[(Source::File("test".into()), text)])
        .unwrap()
        .config;
    let journal = Journal::open(journal, JournalLimits::default(), CommitMode::Group).unwrap();
    Runtime::start(RuntimeOptions {
        config,
        env: Environment {
            home: home.to_owned(),
            aido_home: aido_home.to_owned(),
        },
        journal,
        clock: Arc::new(FixedClock::default()),
    })
    .await
    .unwrap()
}
