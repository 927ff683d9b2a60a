//! The HTTP side: Mission Control's JSON API of one `aido serve`, with its bearer token, and
//! the runtimes of its fleet reached through it (`/mc/api/fleet/P/...`).
//!
//! Every call is bounded ([`CALL_TIMEOUT`], [`ANSWER_BYTES_MAX`]) and blocking: the worker
//! thread makes them, never the thread that draws.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::error::WatchError;

/// Longest a call waits for its answer (a peer asked through its runtime takes up to 5 s).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(8);
/// Largest answer read, in bytes.
pub const ANSWER_BYTES_MAX: u64 = 16 << 20;

/// Where an `aido serve` answers, and the file with its bearer token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `http://HOST:PORT`.
    pub url: String,
    /// The bearer token's file (`AIDO_HOME/serve/token` of that runtime).
    pub token_file: PathBuf,
}

/// Which runtime a request is for: the endpoint's own, or peer P of its `[fleet]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Via {
    /// The runtime the endpoint serves.
    Own,
    /// Its fleet's peer at this place in `/mc/api/fleet`'s list.
    Peer(usize),
}

impl Via {
    /// The URL path under which this runtime's Mission Control API answers.
    fn prefix(self) -> String {
        match self {
            Self::Own => "/mc/api".into(),
            Self::Peer(p) => format!("/mc/api/fleet/{p}"),
        }
    }
}

/// A connection to one `aido serve`.
pub struct Client {
    url: String,
    bearer: String,
    agent: ureq::Agent,
}

impl Client {
    /// Read the token and make the agent; nothing is asked yet.
    pub fn new(endpoint: &Endpoint) -> Result<Self, WatchError> {
        let token = read_token(&endpoint.token_file)?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(CALL_TIMEOUT))
            .build()
            .into();
        Ok(Self {
            url: endpoint.url.trim_end_matches('/').to_owned(),
            bearer: format!("Bearer {token}"),
            agent,
        })
    }

    /// The endpoint's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// GET `path` (with its query) of `via`'s API.
    pub fn get(&self, via: Via, path: &str) -> Result<Value, WatchError> {
        let url = format!("{}{}/{path}", self.url, via.prefix());
        let sent = self
            .agent
            .get(&url)
            .header("Authorization", &self.bearer)
            .call();
        read(&url, sent)
    }

    /// POST `body` as JSON to `path` of `via`'s API.
    pub fn post(&self, via: Via, path: &str, body: &Value) -> Result<Value, WatchError> {
        let url = format!("{}{}/{path}", self.url, via.prefix());
        let sent = self
            .agent
            .post(&url)
            .header("Authorization", &self.bearer)
            .header("Content-Type", "application/json")
            .send(body.to_string());
        read(&url, sent)
    }

    /// GET the endpoint's fleet (itself first); not through a peer.
    pub fn fleet(&self) -> Result<Value, WatchError> {
        self.get(Via::Own, "fleet")
    }
}

fn read_token(path: &Path) -> Result<String, WatchError> {
    let text = std::fs::read_to_string(path).map_err(|source| WatchError::TokenUnreadable {
        path: path.to_owned(),
        source,
    })?;
    Ok(text.trim().to_owned())
}

/// The JSON of an answer; a coded refusal as [`WatchError::Refused`].
fn read(
    url: &str,
    sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<Value, WatchError> {
    let mut response = sent.map_err(|e| WatchError::Unreachable {
        url: url.to_owned(),
        why: e.to_string(),
    })?;
    let status = response.status().as_u16();
    let bytes = response
        .body_mut()
        .with_config()
        .limit(ANSWER_BYTES_MAX)
        .read_to_vec()
        .map_err(|e| WatchError::Unreachable {
            url: url.to_owned(),
            why: e.to_string(),
        })?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| WatchError::AnswerInvalid {
        url: url.to_owned(),
        why: format!("HTTP {status}, not JSON: {e}"),
    })?;
    if status >= 400 {
        return Err(WatchError::Refused {
            status,
            code: value["code"].as_str().unwrap_or("unknown").to_owned(),
            message: value["message"].as_str().unwrap_or_default().to_owned(),
        });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_is_asked_through_its_runtime() {
        assert_eq!(Via::Own.prefix(), "/mc/api");
        assert_eq!(Via::Peer(2).prefix(), "/mc/api/fleet/2");
    }

    #[test]
    fn a_missing_token_file_is_a_coded_error() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = Endpoint {
            url: "http://127.0.0.1:1".into(),
            token_file: dir.path().join("none"),
        };
        let Err(e) = Client::new(&endpoint) else {
            panic!("a client without a token");
        };
        assert_eq!(e.code(), "watch_token_unreadable");
    }
}
