//! Asking a human, the pure parts: what a question is, the no-secrets rule, the form a client
//! shows, checking an answer, and the result rendered from the recorded answer.
//!
//! The executor asks (through the client's elicitation, or by storing the question for
//! `aido answer`) and records the answer as `Input::Answer { from: "human" }`; the result is
//! [`render`] of that answer, live and in playback, so playback never asks anyone. An answer is
//! recorded as `{"via", "action", "answer"?, "id"?, "question"?, "timeout_ms"?}`: `via` is
//! `elicitation` or `aido answer`, `action` is `accept`, `decline`, `cancel`, `timeout` or
//! `pending` (nobody has answered the stored question yet).

use aido_actions::human::{AskHuman, AskMultipleChoice, Confirm};
use aido_actions::{Failure, HumanAction, Outcome};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Who the recorded answers come from (`Input::Answer { from }`).
pub const ANSWER_FROM: &str = "human";

/// Longest question, in characters.
pub const QUESTION_CHARS_MAX: usize = 2000;
/// Longest choice, in characters.
pub const CHOICE_CHARS_MAX: usize = 200;
/// Fewest and most choices.
pub const CHOICES_MIN: usize = 2;
/// Most choices.
pub const CHOICES_MAX: usize = 10;
/// Longest free-text answer, in characters.
pub const ANSWER_CHARS_MAX: usize = 4000;
/// How long a question waits when the agent names no timeout, in ms (less when the policy's
/// maximum is lower).
pub const TIMEOUT_MS_DEFAULT: u64 = 120_000;

/// A question could not be asked, or was not answered.
#[derive(Debug, thiserror::Error)]
pub enum HumanError {
    /// The question (or a choice) asks for a secret.
    #[error(
        "the {field} asks for a secret ({word:?}); aido never asks for passwords, tokens, keys or other credentials in a form: tell the person where to put it instead (an environment variable, a file the policy denies to you)"
    )]
    SecretRequested {
        /// `question` or `choices[N]`.
        field: String,
        /// The word that names a secret.
        word: String,
    },
    /// The question or its choices break a bound.
    #[error("the question is not valid: {why}")]
    QuestionInvalid {
        /// Why.
        why: String,
    },
    /// The timeout asked for is over the policy's maximum.
    #[error(
        "timeout {asked_ms} ms is over the policy's maximum of {max_ms} ms (confirm_timeout_ms)"
    )]
    TimeoutTooLong {
        /// What the agent asked for.
        asked_ms: u64,
        /// The bound.
        max_ms: u64,
    },
    /// The person declined to answer.
    #[error("the person declined to answer")]
    Declined,
    /// The person dismissed the question.
    #[error("the person dismissed the question without answering")]
    Cancelled,
    /// Nobody answered in time.
    #[error("nobody answered within {timeout_ms} ms")]
    TimedOut {
        /// The wait.
        timeout_ms: u64,
    },
    /// The client cannot ask a person: the question waits for `aido answer`.
    #[error(
        "this client cannot ask a person, so the question is stored as {id}: a person answers it with `aido answer {id} ...` (`aido answer --list` shows it); then call check_answer with this id"
    )]
    NeedsHuman {
        /// The stored question's id.
        id: String,
    },
    /// The answer does not fit the question.
    #[error("the answer does not fit the question: {why}")]
    AnswerInvalid {
        /// Why.
        why: String,
    },
    /// No stored question has this id.
    #[error("no question {id:?} is stored")]
    QuestionNotFound {
        /// The id.
        id: String,
    },
    /// The stored question was answered already (by someone else, or twice).
    #[error("question {id} was answered already")]
    AlreadyAnswered {
        /// The id.
        id: String,
    },
    /// The question was closed without an answer: the call that asked stopped waiting (its
    /// timeout passed, or the agent cancelled it), so no answer can reach it any more.
    #[error("question {id} was closed: the call that asked it no longer waits for an answer")]
    QuestionClosed {
        /// The id.
        id: String,
    },
    /// The question store could not be read or written.
    #[error("the question store failed: {why}")]
    StoreFailed {
        /// Why.
        why: String,
    },
}

aido_actions::coded!(HumanError {
    @details details;
    SecretRequested => "human_secret_requested",
    QuestionInvalid => "human_question_invalid",
    TimeoutTooLong => "human_timeout_too_long",
    Declined => "human_declined",
    Cancelled => "human_cancelled",
    TimedOut => "human_timeout",
    NeedsHuman => "needs_human",
    AnswerInvalid => "human_answer_invalid",
    QuestionNotFound => "question_not_found",
    AlreadyAnswered => "question_already_answered",
    QuestionClosed => "question_closed",
    StoreFailed => "question_store_failed",
});

/// What a failure of a question carries beside its message.
fn details(e: &HumanError) -> Option<serde_json::Value> {
    match e {
        HumanError::NeedsHuman { id } => Some(json!({
            "id": id,
            "answer_with": format!("aido answer {id} ..."),
            "then": "check_answer",
        })),
        HumanError::SecretRequested { field, word } => Some(json!({"field": field, "word": word})),
        HumanError::TimedOut { timeout_ms } => Some(json!({"timeout_ms": timeout_ms})),
        HumanError::QuestionNotFound { id }
        | HumanError::AlreadyAnswered { id }
        | HumanError::QuestionClosed { id } => Some(json!({"id": id})),
        _ => None,
    }
}

/// What kind of answer a question wants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Kind {
    /// Free text.
    Text,
    /// Yes or no.
    Confirm,
    /// One (or with `multiple`, several) of `choices`.
    Choice {
        /// The choices.
        choices: Vec<String>,
        /// Several may be picked.
        multiple: bool,
    },
}

/// A checked question: safe to show a person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    /// The kind of answer.
    #[serde(flatten)]
    pub kind: Kind,
    /// The question.
    pub question: String,
}

impl Question {
    /// The question an ask primitive asks, checked (bounds, the no-secrets rule), with the
    /// timeout it asked for; `None` for check_answer, which asks nothing.
    pub fn of(action: &HumanAction) -> Option<Result<(Question, Option<u64>), HumanError>> {
        let (kind, question, timeout) = match action {
            HumanAction::AskHuman(AskHuman {
                question,
                timeout_ms,
            }) => (Kind::Text, question, *timeout_ms),
            HumanAction::Confirm(Confirm {
                question,
                timeout_ms,
            }) => (Kind::Confirm, question, *timeout_ms),
            HumanAction::AskMultipleChoice(AskMultipleChoice {
                question,
                choices,
                multiple,
                timeout_ms,
            }) => (
                Kind::Choice {
                    choices: choices.clone(),
                    multiple: *multiple,
                },
                question,
                *timeout_ms,
            ),
            HumanAction::CheckAnswer(_) => return None,
        };
        let q = Question {
            kind,
            question: question.clone(),
        };
        Some(q.check().map(|()| (q, timeout)))
    }

    /// Check the bounds and the no-secrets rule.
    pub fn check(&self) -> Result<(), HumanError> {
        let invalid = |why: String| Err(HumanError::QuestionInvalid { why });
        if self.question.trim().is_empty() {
            return invalid("the question is empty".into());
        }
        let chars = self.question.chars().count();
        if chars > QUESTION_CHARS_MAX {
            return invalid(format!(
                "the question has {chars} characters; at most {QUESTION_CHARS_MAX}"
            ));
        }
        refuse_secret("question", &self.question)?;
        if let Kind::Choice { choices, .. } = &self.kind {
            if !(CHOICES_MIN..=CHOICES_MAX).contains(&choices.len()) {
                return invalid(format!(
                    "{} choices; give {CHOICES_MIN} to {CHOICES_MAX}",
                    choices.len()
                ));
            }
            for (i, c) in choices.iter().enumerate() {
                let chars = c.chars().count();
                if c.trim().is_empty() || chars > CHOICE_CHARS_MAX {
                    return invalid(format!(
                        "choice {i} must have 1 to {CHOICE_CHARS_MAX} characters"
                    ));
                }
                if choices[..i].contains(c) {
                    return invalid(format!("choice {c:?} is given twice"));
                }
                refuse_secret(&format!("choices[{i}]"), c)?;
            }
        }
        Ok(())
    }

    /// The message and the form (an MCP elicitation `requestedSchema`: a flat object of
    /// primitive fields) a client shows the person.
    pub fn form(&self) -> (String, Value) {
        let (name, field) = match &self.kind {
            Kind::Text => (
                "answer",
                json!({"type": "string", "title": "Your answer", "maxLength": ANSWER_CHARS_MAX}),
            ),
            Kind::Confirm => (
                "approve",
                json!({"type": "boolean", "title": "Approve",
                       "description": "Tick to approve. Anything else is a no.", "default": false}),
            ),
            Kind::Choice {
                choices,
                multiple: false,
            } => (
                "choice",
                json!({"type": "string", "title": "Choose one", "enum": choices}),
            ),
            Kind::Choice {
                choices,
                multiple: true,
            } => (
                "choices",
                json!({"type": "array", "title": "Choose one or more", "minItems": 1,
                       "maxItems": choices.len(), "items": {"type": "string", "enum": choices}}),
            ),
        };
        let schema = json!({
            "type": "object",
            "properties": {name: field},
            "required": [name],
        });
        (self.question.clone(), schema)
    }

    /// The answer a person accepted the form with, checked and normalized:
    /// `{"text"}`, `{"approved"}` or `{"choices"}`.
    pub fn accept(&self, content: &Value) -> Result<Value, HumanError> {
        let invalid = |why: String| Err(HumanError::AnswerInvalid { why });
        match &self.kind {
            Kind::Text => match content["answer"].as_str() {
                Some(text) if text.chars().count() <= ANSWER_CHARS_MAX => Ok(json!({"text": text})),
                Some(_) => invalid(format!("the answer is over {ANSWER_CHARS_MAX} characters")),
                None => invalid("the form has no text `answer`".into()),
            },
            // Only a boolean true is a yes; a missing field, a string "true" or anything
            // else is a no.
            Kind::Confirm => Ok(json!({"approved": content["approve"] == Value::Bool(true)})),
            Kind::Choice { choices, multiple } => {
                let picked: Vec<&str> = if *multiple {
                    match content["choices"].as_array() {
                        Some(items) => items.iter().filter_map(Value::as_str).collect(),
                        None => return invalid("the form has no list `choices`".into()),
                    }
                } else {
                    match content["choice"].as_str() {
                        Some(c) => vec![c],
                        None => return invalid("the form has no `choice`".into()),
                    }
                };
                if picked.is_empty() {
                    return invalid("nothing was chosen".into());
                }
                for (i, p) in picked.iter().enumerate() {
                    if !choices.iter().any(|c| c == p) {
                        return invalid(format!("{p:?} is not one of the choices"));
                    }
                    if picked[..i].contains(p) {
                        return invalid(format!("{p:?} is chosen twice"));
                    }
                }
                Ok(json!({"choices": picked}))
            }
        }
    }
}

/// The timeout a question waits: the one asked for (or the default), within the policy's
/// maximum.
pub fn timeout_ms(asked: Option<u64>, max_ms: u64) -> Result<u64, HumanError> {
    match asked {
        Some(asked_ms) if asked_ms > max_ms => Err(HumanError::TimeoutTooLong { asked_ms, max_ms }),
        Some(ms) => Ok(ms),
        None => Ok(TIMEOUT_MS_DEFAULT.min(max_ms)),
    }
}

/// Words that name a secret, alone (or plural).
const SECRET_WORDS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "passcode",
    "secret",
    "token",
    "apikey",
    "credential",
    "cvv",
    "cvc",
    "ssn",
    "otp",
    "2fa",
    "mfa",
    "totp",
    "mnemonic",
    "privkey",
];

/// Pairs of words that name a secret.
const SECRET_PAIRS: &[(&str, &str)] = &[
    ("api", "key"),
    ("access", "key"),
    ("private", "key"),
    ("secret", "key"),
    ("signing", "key"),
    ("ssh", "key"),
    ("auth", "code"),
    ("one", "time"),
    ("verification", "code"),
    ("security", "code"),
    ("card", "number"),
    ("credit", "card"),
    ("social", "security"),
    ("seed", "phrase"),
    ("recovery", "phrase"),
    ("recovery", "code"),
    ("pin", "code"),
    ("pin", "number"),
];

/// The no-secrets rule: refuse a text that names a secret. Words are compared whole, case
/// and separators ignored (`API_KEY`, `apiKey`, `api-key` are all "api key"), so a question
/// about a "token" is refused even when it only mentions one; reword it.
pub fn refuse_secret(field: &str, text: &str) -> Result<(), HumanError> {
    let words = words(text);
    let refuse = |word: String| {
        Err(HumanError::SecretRequested {
            field: field.to_owned(),
            word,
        })
    };
    for w in &words {
        if SECRET_WORDS
            .iter()
            .any(|s| w == s || w.strip_suffix('s') == Some(s))
        {
            return refuse(w.clone());
        }
    }
    for pair in words.windows(2) {
        let second = pair[1].strip_suffix('s').unwrap_or(&pair[1]);
        if SECRET_PAIRS
            .iter()
            .any(|(a, b)| pair[0] == *a && (second == *b || pair[1] == *b))
        {
            return refuse(format!("{} {}", pair[0], pair[1]));
        }
    }
    Ok(())
}

/// Lowercase words of letters and digits; camelCase is split (`apiKey` is "api", "key").
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in text.chars() {
        if c.is_alphanumeric() {
            if c.is_uppercase() && previous_lower && !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            previous_lower = c.is_lowercase();
            word.extend(c.to_lowercase());
        } else {
            previous_lower = false;
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// The result of a question whose recorded answer is `answer`: a success for an answer (and
/// for every confirm that was answered, declined, dismissed or timed out: all but an explicit
/// yes are `approved: false`), a coded failure otherwise.
pub fn render(question: &Question, answer: &Value) -> Result<Outcome, Failure> {
    let via = answer["via"].as_str().unwrap_or("elicitation");
    let action = answer["action"].as_str().unwrap_or_default();
    let mut output = json!({"via": via});
    if let Some(id) = answer["id"].as_str() {
        output["id"] = json!(id);
    }
    let no = |reason: &str, code: Option<&str>| {
        let mut out = output.clone();
        out["approved"] = json!(false);
        out["answer"] = json!("no");
        out["reason"] = json!(reason);
        if let Some(code) = code {
            out["code"] = json!(code);
        }
        out
    };
    let timeout_ms = answer["timeout_ms"].as_u64().unwrap_or_default();
    let (text, output) = match (action, &question.kind) {
        ("pending", _) => {
            let id = answer["id"].as_str().unwrap_or_default().to_owned();
            return Err(HumanError::NeedsHuman { id }.into());
        }
        ("accept", Kind::Confirm) => {
            if answer["answer"]["approved"] == Value::Bool(true) {
                let mut out = output.clone();
                out["approved"] = json!(true);
                out["answer"] = json!("yes");
                out["reason"] = json!("answered yes");
                ("the person approved: yes".to_owned(), out)
            } else {
                (
                    "the person did not approve: no".to_owned(),
                    no("answered no", None),
                )
            }
        }
        ("decline", Kind::Confirm) => (
            "no: the person declined".to_owned(),
            no("declined", Some(HumanError::Declined.code())),
        ),
        ("cancel", Kind::Confirm) => (
            "no: the person dismissed the question".to_owned(),
            no("cancelled", Some(HumanError::Cancelled.code())),
        ),
        ("timeout", Kind::Confirm) => (
            format!("no: nobody answered within {timeout_ms} ms"),
            no("timeout", Some(HumanError::TimedOut { timeout_ms }.code())),
        ),
        ("accept", Kind::Text) => {
            let text = answer["answer"]["text"].as_str().unwrap_or_default();
            let mut out = output.clone();
            out["status"] = json!("answered");
            out["answer"] = json!(text);
            (format!("the person answered: {text}"), out)
        }
        ("accept", Kind::Choice { multiple, .. }) => {
            let picked = answer["answer"]["choices"].clone();
            let mut out = output.clone();
            out["status"] = json!("answered");
            out["choices"] = picked.clone();
            if !multiple {
                out["choice"] = picked[0].clone();
            }
            let names: Vec<&str> = picked
                .as_array()
                .map(|p| p.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            (format!("the person chose: {}", names.join(", ")), out)
        }
        ("closed", Kind::Confirm) => (
            "no: the question was closed unanswered".to_owned(),
            no(
                "closed",
                Some(HumanError::QuestionClosed { id: String::new() }.code()),
            ),
        ),
        ("closed", _) => {
            let id = answer["id"].as_str().unwrap_or_default().to_owned();
            return Err(HumanError::QuestionClosed { id }.into());
        }
        ("decline", _) => return Err(HumanError::Declined.into()),
        ("cancel", _) => return Err(HumanError::Cancelled.into()),
        ("timeout", _) => return Err(HumanError::TimedOut { timeout_ms }.into()),
        (other, _) => {
            return Err(HumanError::AnswerInvalid {
                why: format!("the recorded answer has action {other:?}"),
            }
            .into());
        }
    };
    Ok(Outcome {
        text,
        output,
        ..Outcome::default()
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn confirm() -> Question {
        Question {
            kind: Kind::Confirm,
            question: "Deploy to staging?".into(),
        }
    }

    fn choice(multiple: bool) -> Question {
        Question {
            kind: Kind::Choice {
                choices: vec!["red".into(), "green".into(), "blue".into()],
                multiple,
            },
            question: "Which colour?".into(),
        }
    }

    #[test]
    fn questions_that_name_a_secret_are_refused() {
        for (text, word) in [
            ("What is your password?", "password"),
            ("Paste the API key here", "api key"),
            ("Set API_KEY for me", "api key"),
            ("your apiKey please", "api key"),
            ("GitHub tokens?", "tokens"),
            ("Enter the 2FA code", "2fa"),
            ("the one-time code you got", "one time"),
            ("What is the 2FA code?", "2fa"),
            ("your private key", "private key"),
            ("which credentials", "credentials"),
        ] {
            let e = refuse_secret("question", text).unwrap_err();
            assert_eq!(e.code(), "human_secret_requested", "{text}");
            match e {
                HumanError::SecretRequested { word: w, .. } => assert_eq!(w, word, "{text}"),
                other => panic!("{other:?}"),
            }
        }
        for fine in [
            "Deploy to staging?",
            "Which secretary handles this?",
            "Pin the version to 1.2?",
            "Is the keyboard layout right?",
        ] {
            refuse_secret("question", fine).unwrap();
        }
        // A choice is checked too, and says which one.
        let q = Question {
            kind: Kind::Choice {
                choices: vec!["ok".into(), "my password".into()],
                multiple: false,
            },
            question: "Pick".into(),
        };
        match q.check().unwrap_err() {
            HumanError::SecretRequested { field, .. } => assert_eq!(field, "choices[1]"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_questions_and_timeouts_are_coded() {
        let empty = Question {
            kind: Kind::Text,
            question: "  ".into(),
        };
        assert_eq!(empty.check().unwrap_err().code(), "human_question_invalid");
        let twice = Question {
            kind: Kind::Choice {
                choices: vec!["a".into(), "a".into()],
                multiple: false,
            },
            question: "?".into(),
        };
        assert_eq!(twice.check().unwrap_err().code(), "human_question_invalid");
        assert_eq!(
            timeout_ms(Some(10_001), 10_000).unwrap_err().code(),
            "human_timeout_too_long"
        );
        assert_eq!(timeout_ms(None, 10_000).unwrap(), 10_000);
        assert_eq!(timeout_ms(None, 300_000).unwrap(), TIMEOUT_MS_DEFAULT);
    }

    #[test]
    fn confirm_is_yes_only_on_an_explicit_yes() {
        let q = confirm();
        let yes = q.accept(&json!({"approve": true})).unwrap();
        let out = render(
            &q,
            &json!({"via": "elicitation", "action": "accept", "answer": yes}),
        )
        .unwrap();
        assert_eq!(out.output["approved"], true);
        for content in [
            json!({"approve": false}),
            json!({"approve": "true"}),
            json!({}),
            json!({"approve": 1}),
        ] {
            let a = q.accept(&content).unwrap();
            let out = render(&q, &json!({"action": "accept", "answer": a})).unwrap();
            assert_eq!(out.output["approved"], false, "{content}");
            assert_eq!(out.output["reason"], "answered no");
        }
        for (action, reason, code) in [
            ("decline", "declined", "human_declined"),
            ("cancel", "cancelled", "human_cancelled"),
            ("timeout", "timeout", "human_timeout"),
        ] {
            let out = render(&q, &json!({"action": action, "timeout_ms": 5})).unwrap();
            assert_eq!(out.output["approved"], false);
            assert_eq!(out.output["reason"], reason);
            assert_eq!(out.output["code"], code);
        }
        let pending = render(&q, &json!({"action": "pending", "id": "q-1"})).unwrap_err();
        assert_eq!(pending.code, "needs_human");
        assert_eq!(pending.details.unwrap()["id"], "q-1");
        // An action this version does not know is never a yes.
        assert_eq!(
            render(&q, &json!({"action": "maybe"})).unwrap_err().code,
            "human_answer_invalid"
        );
    }

    #[test]
    fn choices_are_checked_against_the_question() {
        let single = choice(false);
        assert_eq!(
            single.accept(&json!({"choice": "green"})).unwrap(),
            json!({"choices": ["green"]})
        );
        assert_eq!(
            single
                .accept(&json!({"choice": "purple"}))
                .unwrap_err()
                .code(),
            "human_answer_invalid"
        );
        let multi = choice(true);
        let a = multi.accept(&json!({"choices": ["red", "blue"]})).unwrap();
        let out = render(&multi, &json!({"action": "accept", "answer": a})).unwrap();
        assert_eq!(out.output["choices"], json!(["red", "blue"]));
        assert_eq!(out.text, "the person chose: red, blue");
        assert_eq!(
            multi.accept(&json!({"choices": []})).unwrap_err().code(),
            "human_answer_invalid"
        );
        assert_eq!(
            multi
                .accept(&json!({"choices": ["red", "red"]}))
                .unwrap_err()
                .code(),
            "human_answer_invalid"
        );
        let (_, schema) = multi.form();
        assert_eq!(
            schema["properties"]["choices"]["items"]["enum"],
            json!(["red", "green", "blue"])
        );
        // Text and choice questions that were not answered fail with a code.
        assert_eq!(
            render(&single, &json!({"action": "decline"}))
                .unwrap_err()
                .code,
            "human_declined"
        );
        assert_eq!(
            render(&single, &json!({"action": "cancel"}))
                .unwrap_err()
                .code,
            "human_cancelled"
        );
        assert_eq!(
            render(&single, &json!({"action": "timeout"}))
                .unwrap_err()
                .code,
            "human_timeout"
        );
    }
}
