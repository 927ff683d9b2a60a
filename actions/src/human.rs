//! Asking a human: free text, a yes/no confirmation, a multiple choice, and fetching an answer
//! given out of band.
//!
//! The runtime asks through the surface's elicitation (MCP form mode). A client that cannot ask
//! gets a coded `needs_human` failure carrying the question's id; the question is stored in
//! AIDO_HOME and a person answers it with `aido answer ID ...` (the command line only: no tool
//! answers a question, so the agent can never answer itself); the agent collects the answer
//! with `check_answer`. Questions and choices that ask for a secret (a password, a token, an API
//! key, ...) are refused before anyone is asked: a form is no place for secrets.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{Access, Touches};

/// Ask a person a question and wait (bounded) for a free-text answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskHuman {
    /// The question, as the person reads it (1 to 2000 characters; never ask for a secret).
    #[schemars(length(min = 1, max = 2000))]
    pub question: String,
    /// How long to wait for the answer, in ms (default 120000, at most the policy's
    /// `[limits] confirm_timeout_ms`). Without a client that can ask, the call answers
    /// needs_human at once unless a timeout is given, and then waits that long for
    /// `aido answer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Ask a person to confirm. Only an explicit yes is yes: a no, a decline, a cancel, a timeout
/// are all `approved: false`, with the reason.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Confirm {
    /// What the person is asked to approve (1 to 2000 characters).
    #[schemars(length(min = 1, max = 2000))]
    pub question: String,
    /// How long to wait, in ms (default 120000, at most `[limits] confirm_timeout_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Ask a person to pick one of several choices (or several, with `multiple`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskMultipleChoice {
    /// The question (1 to 2000 characters).
    #[schemars(length(min = 1, max = 2000))]
    pub question: String,
    /// The choices, 2 to 10, each 1 to 200 characters and all different.
    #[schemars(length(min = 2, max = 10), inner(length(min = 1, max = 200)))]
    pub choices: Vec<String>,
    /// Whether the person may pick several (at least one).
    #[serde(default)]
    pub multiple: bool,
    /// How long to wait, in ms (default 120000, at most `[limits] confirm_timeout_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Collect the answer to a question that came back `needs_human` (a person answers it with
/// `aido answer ID ...`), waiting up to `wait_ms` for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckAnswer {
    /// The question's id, as `needs_human` gave it (`q-` and 16 hex digits).
    #[schemars(length(min = 1, max = 64))]
    pub id: String,
    /// How long to wait for an answer, in ms (default 0: look once; at most
    /// `[limits] confirm_timeout_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

// A question touches no path: the class, mode and action gates judge it.
impl Touches for AskHuman {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for Confirm {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for AskMultipleChoice {
    fn touches(&self, _out: &mut Vec<Access>) {}
}
impl Touches for CheckAnswer {
    fn touches(&self, _out: &mut Vec<Access>) {}
}

/// The surface a person answered a question through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Surface {
    /// The agent's MCP client, through elicitation (or a 2026-07-28 `input_required` round).
    Elicitation,
    /// Mission Control's web page (`POST /mc/api/questions/ID` with `who: mission_control`).
    MissionControl,
    /// `aido watch` (the same endpoint, `who: watch`).
    Watch,
    /// `aido answer` on the command line.
    Cli,
}

impl Surface {
    /// Every surface, in the order they are documented.
    pub const ALL: [Surface; 4] = [
        Surface::Elicitation,
        Surface::MissionControl,
        Surface::Watch,
        Surface::Cli,
    ];

    /// Its name, as the journal and the answer API spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Elicitation => "elicitation",
            Self::MissionControl => "mission_control",
            Self::Watch => "watch",
            Self::Cli => "cli",
        }
    }

    /// The surface named `name`, as [`Surface::name`] spells it.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// Longest [`Answerer::person`] kept, in characters.
pub const PERSON_CHARS_MAX: usize = 120;

/// Who answered a question: the surface, and the person where the surface knows one (the
/// `$USER` of `aido answer`, the user `aido watch` runs as and the address the operator's token
/// came from). Journaled with the answer; never trusted for anything but showing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Answerer {
    /// The surface the answer came through.
    pub surface: Surface,
    /// The person, in the surface's words (control characters dropped, at most
    /// [`PERSON_CHARS_MAX`] characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person: Option<String>,
}

impl Answerer {
    /// `surface`, answered for `person` (kept printable and bounded; empty is nobody).
    pub fn new(surface: Surface, person: Option<&str>) -> Self {
        let person = person
            .map(|p| {
                p.chars()
                    .filter(|c| !c.is_control())
                    .take(PERSON_CHARS_MAX)
                    .collect::<String>()
                    .trim()
                    .to_owned()
            })
            .filter(|p| !p.is_empty());
        Self { surface, person }
    }

    /// How it is said: `watch (alice)`, or the surface alone.
    pub fn words(&self) -> String {
        match &self.person {
            Some(p) => format!("{} ({p})", self.surface.name()),
            None => self.surface.name().to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_surface_is_named_as_the_journal_spells_it() {
        for s in Surface::ALL {
            assert_eq!(Surface::named(s.name()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.name());
        }
        assert_eq!(Surface::named("agent"), None);
    }

    #[test]
    fn a_person_is_kept_printable_and_bounded() {
        let a = Answerer::new(Surface::Cli, Some("ali\u{1b}[31mce\n"));
        assert_eq!(a.person.as_deref(), Some("ali[31mce"));
        let long = "x".repeat(PERSON_CHARS_MAX * 2);
        let a = Answerer::new(Surface::Watch, Some(&long));
        assert_eq!(a.person.unwrap().chars().count(), PERSON_CHARS_MAX);
        assert_eq!(Answerer::new(Surface::Cli, Some("  ")).person, None);
        assert_eq!(
            Answerer::new(Surface::Watch, Some("bob")).words(),
            "watch (bob)"
        );
    }
}
