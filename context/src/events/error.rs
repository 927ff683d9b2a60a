//! Why a subscription or reaction call failed.

/// Why a subscription or a reaction was refused.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    /// Paths, globs, kinds or bounds out of range.
    #[error("{why}")]
    Invalid {
        /// Why.
        why: String,
    },
    /// The surface this call came over cannot send notifications.
    #[error(
        "this client connection cannot receive notifications, so a subscription could deliver nothing"
    )]
    Undeliverable,
    /// As many subscriptions as allowed are alive in this session.
    #[error("this session holds {max} subscriptions; unsubscribe one first")]
    TooMany {
        /// The bound.
        max: usize,
    },
    /// No subscription of this session has this id (they end with their session, and after
    /// a restart none are left).
    #[error("this session has no subscription {subscription:?}")]
    Unknown {
        /// The id asked for.
        subscription: String,
    },
    /// The watcher could not be started (inotify missing, its watch limit reached).
    #[error("the file watcher could not be started: {why}")]
    WatchFailed {
        /// Why.
        why: String,
    },
    /// A reaction that is not a primitive call that parses, or one that watches itself.
    #[error("the reaction is not valid: {why}")]
    ReactionInvalid {
        /// Why.
        why: String,
    },
    /// A change came over the reaction's rate: it was journaled and not run.
    #[error("over {per_minute} firings a minute")]
    RateLimited {
        /// The rate.
        per_minute: u32,
    },
}

aido_actions::coded!(EventsError {
    Invalid => "events_invalid",
    Undeliverable => "events_undeliverable",
    TooMany => "subscriptions_too_many",
    Unknown => "subscription_unknown",
    WatchFailed => "watch_failed",
    ReactionInvalid => "reaction_invalid",
    RateLimited => "watch_rate_limited",
});
