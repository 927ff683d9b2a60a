//! What the Mission Control API answers, as `aido watch` reads it: the runtimes of a fleet,
//! the sessions, the questions waiting for a person, a rewind's preview and a step in full.
//! Fields it does not show are not read; a field missing is its default.

use serde::Deserialize;
use serde_json::Value;

/// One runtime of `/mc/api/fleet`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct RuntimeInfo {
    /// Its `service.instance.id`.
    pub instance: Option<String>,
    pub version: Option<String>,
    /// Where it says it listens.
    pub url: Option<String>,
    /// Where the runtime watched reaches it (a peer).
    pub reached_at: Option<String>,
    pub sessions: Option<u64>,
    pub questions: Option<u64>,
    /// Its place in the fleet list (`None`: the runtime watched itself).
    pub peer: Option<usize>,
    /// Whether it answered.
    pub ok: bool,
    pub code: Option<String>,
    pub message: Option<String>,
}

impl RuntimeInfo {
    /// How it is named on screen.
    pub fn name(&self) -> String {
        let at = self
            .reached_at
            .as_deref()
            .or(self.url.as_deref())
            .unwrap_or("?");
        let at = at
            .trim_start_matches("http://")
            .trim_start_matches("https://");
        match &self.instance {
            Some(instance) => format!("{at} ({})", short_id(instance)),
            None => at.to_owned(),
        }
    }
}

/// One session of `/mc/api/sessions`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct SessionInfo {
    pub id: String,
    pub started_ms: u64,
    pub client: Option<String>,
    pub cwd: String,
    pub records: u64,
    pub last_ms: Option<u64>,
    /// Why it ended, when it did.
    pub ended: Option<String>,
    /// The runtime's own session (grants, retention, restarts).
    pub runtime: bool,
}

/// What kind of answer a question wants.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct QuestionText {
    /// `text`, `confirm` or `choice`.
    pub kind: String,
    pub question: String,
    pub choices: Vec<String>,
    pub multiple: bool,
}

/// One question waiting for a person, of `/mc/api/questions`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct QuestionInfo {
    pub id: String,
    pub session: String,
    pub seq: u64,
    pub question: QuestionText,
    pub asked_ms: u64,
}

/// One action a rewind undoes.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Undone {
    pub seq: u64,
    pub primitive: String,
}

/// What a rewind would undo, of `GET /mc/api/sessions/ID/rewind`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Preview {
    /// The last record kept.
    pub cut: u64,
    pub undone: Vec<Undone>,
    /// The paths its steps put back.
    pub paths: Vec<String>,
    /// `snapshot` or `undo`.
    pub method: String,
    /// The branch the undone records become.
    pub branch: u32,
}

/// Where a rewind goes: keep the step at `seq` (`to_seq`), or undo it too (`before_seq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub seq: u64,
    pub keep: bool,
}

impl Target {
    /// The query string of its preview.
    pub fn query(self) -> String {
        if self.keep {
            format!("to_seq={}", self.seq)
        } else {
            format!("before_seq={}", self.seq)
        }
    }

    /// The body of the rewind, with who asks.
    pub fn body(self, by: &str) -> Value {
        if self.keep {
            serde_json::json!({"to_seq": self.seq, "by": by})
        } else {
            serde_json::json!({"before_seq": self.seq, "by": by})
        }
    }

    /// How it is said on screen.
    pub fn words(self) -> String {
        if self.keep {
            format!("keep #{} and undo what came after it", self.seq)
        } else {
            format!("undo #{} and everything after it", self.seq)
        }
    }
}

/// The first 8 characters of an id.
pub fn short_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}
