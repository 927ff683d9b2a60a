//! Why `aido watch` could not do what it was asked.

use std::path::PathBuf;

/// A failure of `aido watch`: reaching a runtime, or the terminal.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The token file could not be read.
    #[error("the token file {path}: {source} (aido serve writes it; pass --token-file)")]
    TokenUnreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The runtime did not answer (not running, wrong URL, a network failure).
    #[error("{url} did not answer: {why}")]
    Unreachable { url: String, why: String },
    /// The runtime answered with a coded refusal.
    #[error("[{code}] {message} (HTTP {status})")]
    Refused {
        status: u16,
        code: String,
        message: String,
    },
    /// The runtime answered something that is not what this endpoint gives.
    #[error("{url} answered what aido watch cannot read: {why}")]
    AnswerInvalid { url: String, why: String },
    /// The terminal could not be set up, drawn on or read.
    #[error("the terminal: {0}")]
    Terminal(#[from] std::io::Error),
}

aido_codes::coded!(WatchError {
    TokenUnreadable => "watch_token_unreadable",
    Unreachable => "watch_unreachable",
    Refused => "watch_refused",
    AnswerInvalid => "watch_answer_invalid",
    Terminal => "watch_terminal",
});

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole table; codes are never reused.
    #[test]
    fn watch_error_codes_are_stable() {
        let io = || std::io::Error::other("x");
        let table = [
            (
                WatchError::TokenUnreadable {
                    path: "t".into(),
                    source: io(),
                },
                "watch_token_unreadable",
            ),
            (
                WatchError::Unreachable {
                    url: "u".into(),
                    why: "w".into(),
                },
                "watch_unreachable",
            ),
            (
                WatchError::Refused {
                    status: 409,
                    code: "c".into(),
                    message: "m".into(),
                },
                "watch_refused",
            ),
            (
                WatchError::AnswerInvalid {
                    url: "u".into(),
                    why: "w".into(),
                },
                "watch_answer_invalid",
            ),
            (WatchError::Terminal(io()), "watch_terminal"),
        ];
        for (error, code) in &table {
            assert_eq!(error.code(), *code);
        }
        let codes: Vec<&str> = table.iter().map(|(_, code)| *code).collect();
        assert_eq!(WatchError::CODES, codes.as_slice());
    }
}
