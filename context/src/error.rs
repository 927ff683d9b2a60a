/// The runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The config does not compile into a policy.
    #[error("invalid policy: {0}")]
    Policy(#[from] aido_policy::ConfigError),
    /// An actor failed to spawn.
    #[error("cannot spawn the {actor} actor: {message}")]
    Spawn {
        /// Which actor.
        actor: &'static str,
        /// ractor's message.
        message: String,
    },
    /// The runtime's own journal session could not be started.
    #[error("cannot journal: {0}")]
    Journal(#[from] aido_journal::AppendError),
    /// The session's grant token is not valid, or the grant store cannot answer.
    #[error("{0}")]
    Grant(#[from] aido_grants::GrantError),
}

aido_actions::coded!(StartError {
    @delegate {
        Self::Policy(e) => e.code(),
        Self::Journal(e) => e.code(),
        Self::Grant(e) => e.code(),
    }
    Spawn => "actor_spawn_failed",
});

pub use aido_walk::error::{RewindError, RuntimeError};
