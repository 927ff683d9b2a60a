//! The state every actor of one runtime shares: the journal, the policy, the clock and the
//! body table. It points only down: at the journal, the policy, the bodies and the stores'
//! own types.

use std::sync::{Arc, OnceLock};

use aido_journal::{Journal, SessionId};
use aido_policy::PolicyEngine;

use crate::bodies::Bodies;
use crate::clock::Clock;
use crate::faults::Faults;
use crate::observe::Observer;

/// A defined function or custom primitive as an MCP tool list shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct DefinedTool {
    /// Its name (the tool's).
    pub name: String,
    /// Function or custom primitive.
    pub kind: aido_actions::script::DefinitionKind,
    /// What it does.
    pub description: String,
    /// Its arguments' schema (a function's takes any object).
    pub input_schema: aido_actions::script::Object,
}

/// The definitions store's directory in AIDO_HOME (composite functions and custom primitives).
pub const SCRIPTS_DIR: &str = "scripts";

/// The question store's file in AIDO_HOME (shared by every aido process of that home).
pub const QUESTIONS_FILE: &str = "questions.sqlite";

/// The version recorded in every session's first record.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// State every actor of one runtime shares.
pub struct Shared {
    pub journal: Journal,
    pub policy: Arc<PolicyEngine>,
    pub clock: Arc<dyn Clock>,
    /// The body table: each body's actor (replaced by the supervisor after a crash) and its
    /// restart history.
    pub bodies: Bodies,
    /// The runtime's own journal session (body restarts are recorded there).
    pub runtime_session: SessionId,
    /// Whether the runtime's session has its start record yet.
    pub runtime_session_started: tokio::sync::Mutex<bool>,
    /// Fault injection.
    pub faults: Arc<Faults>,
    /// The question store's file (AIDO_HOME/questions.sqlite).
    pub questions: std::path::PathBuf,
    /// The capability grants (AIDO_HOME/grants.sqlite).
    pub grants: crate::grants::store::Grants,
    /// The definitions store's directory (AIDO_HOME/scripts).
    pub scripts: std::path::PathBuf,
    /// The artifact store's place and the listener that serves artifacts (AIDO_HOME/artifacts).
    #[cfg(feature = "prim-artifact")]
    pub artifacts: crate::artifact::place::Artifacts,
    /// The (session, proposal)s that may have left write intents or a recovery marker on disk
    /// (a mutating leaf ran, or a marker was written): only these are cleared when their
    /// outcome is journaled, so an action that wrote neither costs no file system call.
    pub marks: std::sync::Mutex<std::collections::HashSet<(SessionId, u64)>>,
    /// Who is told about each action and journal write (telemetry), once one is set.
    pub observer: OnceLock<Arc<dyn Observer>>,
    /// File-change subscriptions and reactions, by id (in memory: they end with their
    /// session).
    #[cfg(feature = "prim-process")]
    pub events: crate::events::subscriptions::Subscriptions,
    /// Each session's shared `/tmp` (the process body's too), let go when the session ends.
    #[cfg(feature = "prim-process")]
    pub tmps: Arc<aido_body_process::SessionTmps>,
}

impl Shared {
    /// Journal an event of the runtime's own session, starting it on its first record.
    pub async fn journal_runtime(&self, event: aido_journal::Event) {
        let now = self.clock.now_ms();
        let session = self.runtime_session;
        let mut started = self.runtime_session_started.lock().await;
        if !*started {
            let start = aido_journal::Event::SessionStarted {
                client: Some("aido-runtime".into()),
                cwd: self.policy.workdir().display().to_string(),
                runtime: format!("aido {}", VERSION),
                grant: None,
            };
            match self.journal.append(session, now, start).await {
                Ok(_) => *started = true,
                Err(e) => tracing::error!(code = e.code(), "cannot journal the runtime session"),
            }
        }
        if let Err(e) = self.journal.append(session, now, event).await {
            tracing::error!(code = e.code(), "cannot journal an event of the runtime");
        }
    }

    pub fn config_limits(&self) -> &aido_policy::Limits {
        &self.policy.config().limits
    }

    /// Note that (session, proposal) may leave intents or a marker to clear.
    pub fn marked(&self, session: SessionId, proposal: u64) {
        self.marks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert((session, proposal));
    }

    /// Whether (session, proposal) may have left intents or a marker; forgets it.
    pub fn take_mark(&self, session: SessionId, proposal: u64) -> bool {
        self.marks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&(session, proposal))
    }

    /// How long a body call may wait to be taken (`action_timeout_ms`).
    pub fn action_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.config_limits().action_timeout_ms)
    }
}
