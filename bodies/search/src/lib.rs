//! The search body: `search_code` and `search_and_read` on aido-search (ripgrep's crates),
//! over the walls.
//!
//! The policy judged the root before the action ran; the body judges it again, then hands
//! aido-search a [`judge::Walls`] that runs the same walls and deny globs
//! (`PolicyEngine::check_path`, symlinks resolved) on every directory and file before the
//! search opens it, so a denied file is never read and never listed. The search is blocking
//! work on many files, so each call runs on the blocking pool and one long search does not
//! hold up the next. Its bounds ([`actor::limits_of`]) keep the result inside a share of the
//! journal's record bound and the time inside the call's deadline: a bound reached is a
//! `truncated` result (`limit`, `budget`, `files_max`, `timeout`), a bound exceeded by the
//! request is a coded error, and the server goes on serving.
//!
//! The answer (the root and what the search found) is the action's recorded input; the
//! result is [`aido_walk::search::render`] of it, live and in playback, so playback never
//! reads the tree.

/// The actor and its messages.
pub mod actor;
/// The walls and deny globs as aido-search's judge.
pub mod judge;

pub use actor::{SearchBody, SearchBodyArgs, SearchMsg};

/// Why the search body could not answer a call (the search's own refusals keep their codes:
/// `pattern_invalid`, `pattern_too_large`, `glob_invalid`, ...).
#[derive(Debug, thiserror::Error)]
pub enum SearchBodyError {
    /// The search's answer could not be turned into JSON.
    #[error("the search's answer is not JSON: {why}")]
    Unencodable {
        /// Why.
        why: String,
    },
}

aido_actions::coded!(SearchBodyError {
    Unencodable => "search_answer_unencodable",
});
