//! The thread that asks the runtime: requests in, answers out, one at a time, so the thread
//! that draws never waits on the network. It ends when either channel closes.

use std::sync::mpsc::{Receiver, Sender};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::app::{Loaded, Request};
use crate::client::{Client, Via};
use crate::error::WatchError;

/// Requests waiting for the worker at most; a poll is dropped rather than queued past it.
pub const QUEUE_MAX: usize = 64;

/// Answer requests until the app goes away.
pub fn serve(client: Client, requests: Receiver<Request>, answers: Sender<Loaded>) {
    for request in requests {
        if answers.send(answer(&client, request)).is_err() {
            return;
        }
    }
}

fn field<T: DeserializeOwned>(client: &Client, value: Value, key: &str) -> Result<T, String> {
    serde_json::from_value(value[key].clone()).map_err(|e| {
        WatchError::AnswerInvalid {
            url: client.url().to_owned(),
            why: format!("{key}: {e}"),
        }
        .to_string()
    })
}

fn whole<T: DeserializeOwned>(client: &Client, value: Value) -> Result<T, String> {
    serde_json::from_value(value).map_err(|e| {
        WatchError::AnswerInvalid {
            url: client.url().to_owned(),
            why: e.to_string(),
        }
        .to_string()
    })
}

fn text(e: WatchError) -> String {
    e.to_string()
}

/// Make one request.
pub fn answer(client: &Client, request: Request) -> Loaded {
    match request {
        Request::Fleet => Loaded::Fleet(
            client
                .fleet()
                .map_err(text)
                .and_then(|v| field(client, v, "runtimes")),
        ),
        Request::Sessions { via } => Loaded::Sessions {
            via,
            result: client
                .get(via, "sessions")
                .map_err(text)
                .and_then(|v| field(client, v, "sessions")),
        },
        Request::Questions { via } => Loaded::Questions {
            via,
            result: match client.get(via, "questions") {
                Ok(v) => field(client, v, "questions"),
                // A build without questions has none waiting.
                Err(WatchError::Refused { code, .. }) if code == "mc_not_built" => Ok(Vec::new()),
                Err(e) => Err(text(e)),
            },
        },
        Request::Timeline { via, session, ask } => Loaded::Timeline {
            via,
            result: client
                .get(via, &format!("sessions/{session}{}", ask.query()))
                .map_err(text)
                .and_then(|v| whole(client, v)),
            session,
            ask,
        },
        Request::Step { via, session, seq } => Loaded::Step {
            via,
            seq,
            result: client
                .get(via, &format!("sessions/{session}/records/{seq}"))
                .map(|v| crate::detail::of_step(&v))
                .map_err(text),
        },
        Request::Answer { via, id, content } => Loaded::Answered {
            result: client
                .post(via, &format!("questions/{id}"), &answered(content))
                .map(|v| {
                    let q = &v["question"];
                    match &q["answer"] {
                        Value::Null => q["state"].as_str().unwrap_or("answered").to_owned(),
                        answer => answer.to_string(),
                    }
                })
                .map_err(text),
            id,
        },
        Request::Preview {
            via,
            session,
            target,
        } => Loaded::Preview {
            target,
            result: client
                .get(
                    via,
                    &format!("sessions/{session}/rewind?{}", target.query()),
                )
                .map_err(text)
                .and_then(|v| whole(client, v)),
        },
        Request::Rewind {
            via,
            session,
            target,
        } => Loaded::Rewound {
            via,
            result: rewind(client, via, &session, target.body(&by())),
            session,
        },
    }
}

fn rewind(client: &Client, via: Via, session: &str, body: Value) -> Result<String, String> {
    let done = client
        .post(via, &format!("sessions/{session}/rewind"), &body)
        .map_err(text)?;
    if done["ok"] == Value::Bool(true) {
        let said = done["text"].as_str().unwrap_or("rewound");
        Ok(said.lines().next().unwrap_or(said).to_owned())
    } else {
        Err(format!(
            "[{}] {}",
            done["code"].as_str().unwrap_or("?"),
            done["message"].as_str().unwrap_or_default()
        ))
    }
}

/// An answer's body: the form content, with who answers (the surface `watch`, and the user it
/// runs as), which the runtime journals with the answer.
pub fn answered(content: Value) -> Value {
    let mut body = content;
    if let Some(fields) = body.as_object_mut() {
        fields.insert("who".into(), Value::from("watch"));
        fields.insert("by".into(), Value::from(user()));
    }
    body
}

/// The user `aido watch` runs as.
fn user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| uid())
}

/// The uid this process runs as (`uid N`), when the environment names no user.
fn uid() -> String {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").map_or_else(|_| "?".into(), |m| format!("uid {}", m.uid()))
}

/// Who rewinds, for the journal: `aido watch` and the user it runs as.
pub fn by() -> String {
    format!("aido watch (user {})", user())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer names its surface and the user, so the runtime journals who answered.
    #[test]
    fn an_answer_says_it_comes_from_watch() {
        let body = answered(serde_json::json!({"approve": true}));
        assert_eq!(body["approve"], true);
        assert_eq!(body["who"], "watch");
        assert!(body["by"].is_string(), "{body}");
    }
}
