//! Asking a person in MCP 2026-07-28: `input_required` (SEP-2322) instead of a server-to-client
//! elicitation request, which that revision removed.
//!
//! A 2026-07-28 `tools/call` runs its action in a task of its own, as any call does, with an
//! [`Asker`] and a [`Confirmer`] that do not reach the client: they hand the question to the
//! call ([`Step::Asked`]) and wait for the answer. The call answers the request with
//! `resultType: "input_required"`: one `elicitation/create` input request and a `requestState`
//! naming the waiting round. The client asks its person and sends the same `tools/call` again
//! with `inputResponses` and that `requestState`; the retry takes the round out of
//! [`Pending`] (so an answer reaches the action exactly once: a second retry with the same state
//! finds nothing and is refused `request_state_unknown`), hands the answer to the waiting asker
//! and waits for the action's next step: its result, or another question. The human actor
//! journals the answer as it does for an elicitation (`via: "elicitation"`).
//!
//! The action is never run twice: the retry resumes the one that asked. `requestState` is
//! untrusted input, so it is sealed with rmcp's `RequestStateCodec` (HMAC-SHA256 under a key
//! drawn from the runtime's random facade when the place was made, never persisted), bound to
//! who asked (the grant), the tool and its arguments, and it expires with the question: a state
//! that fails any of these is `request_state_invalid`. A client that never retries leaves the
//! round to its question's timeout; the action then completes as a timed-out question, and the
//! round is dropped at the next sweep.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aido_actors::{Asker, ConfirmAnswer, Confirmer, Elicited};
use rmcp::model::{
    CallToolResult, ErrorData as McpError, InputRequest, InputRequests, InputRequiredResult,
    InputResponses, RequestStateCodec, SealOptions,
};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// The key of aido's one input request in `inputRequests` and `inputResponses`.
pub(crate) const QUESTION_KEY: &str = "aido_question";

/// The bytes of the key a place's round states are sealed under.
pub(crate) const KEY_BYTES: usize = 32;

/// Rounds waiting for their client at once, per place; a call past it is refused.
pub(crate) const ROUNDS_MAX: usize = 64;

/// Why a retry's `requestState` or `inputResponses` cannot resume a round.
#[derive(Debug, thiserror::Error)]
pub enum RoundError {
    /// The state was forged, altered, expired, or sealed for another tool, arguments or grant.
    #[error("the requestState failed its integrity check: {reason}")]
    StateInvalid { reason: String },
    /// The state is sound but names no waiting round: it was answered already, or its question
    /// timed out.
    #[error("the requestState names no waiting question: it was answered already or timed out")]
    StateUnknown,
    /// Too many rounds are waiting for their clients.
    #[error("{max} questions already wait for their clients' answers")]
    TooMany { max: usize },
}

aido_actions::coded!(RoundError {
    StateInvalid => "request_state_invalid",
    StateUnknown => "request_state_unknown",
    TooMany => "input_rounds_full",
});

impl RoundError {
    /// As the JSON-RPC error the request gets (-32602, with the code in `data`).
    pub(crate) fn to_mcp(&self) -> McpError {
        McpError::invalid_params(self.to_string(), Some(json!({"code": self.code()})))
    }
}

/// A question the action asked, as the client is shown it.
#[derive(Clone, Debug)]
pub(crate) struct Question {
    message: String,
    schema: Value,
    wait: Duration,
}

/// What the running call tells the request that waits on it.
pub(crate) enum Step {
    /// The action asks a person; the answer goes to the sender.
    Asked(Question, oneshot::Sender<Elicited>),
    /// The action ended with this result.
    Done(Box<CallToolResult>),
}

/// Where the running call's steps arrive.
pub(crate) type Steps = mpsc::Receiver<Step>;

/// A call waiting for its client to answer.
struct Round {
    question: Question,
    answer: oneshot::Sender<Elicited>,
    steps: Steps,
    deadline: Instant,
}

/// The rounds waiting for their clients, in one place (a stdio connection, an HTTP session, or
/// the stateless requests of one bearer and endpoint).
pub(crate) struct Pending {
    rounds: Mutex<HashMap<u64, Round>>,
    next: AtomicU64,
    codec: RequestStateCodec,
}

impl Pending {
    /// Rounds sealed under `key`: unpredictable bytes, as long as the codec asks
    /// (`RequestStateCodec::MIN_KEY_LENGTH`, checked at compile time).
    pub(crate) fn new(key: [u8; KEY_BYTES]) -> Self {
        const { assert!(KEY_BYTES >= RequestStateCodec::MIN_KEY_LENGTH) };
        Self {
            rounds: Mutex::default(),
            next: AtomicU64::new(1),
            codec: RequestStateCodec::new_unchecked(key.to_vec()),
        }
    }

    /// Whether no round waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.locked().is_empty()
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Round>> {
        self.rounds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait for the call's next step: its result, or a question, which is kept as a round
    /// and put to the client as `input_required`. `bound` ties the state to the request.
    ///
    /// # Cancel safety
    /// A question received and not yet kept is lost with the future (the action then waits
    /// for its timeout); callers await it to the end.
    pub(crate) async fn next(&self, mut steps: Steps, bound: &[u8]) -> Result<Outcome, McpError> {
        match steps.recv().await {
            Some(Step::Done(result)) => Ok(Outcome::Done(result)),
            Some(Step::Asked(question, answer)) => {
                let round = self.next.fetch_add(1, Ordering::Relaxed);
                let mut rounds = self.locked();
                let now = Instant::now();
                // A round whose asker stopped waiting (another surface answered the question
                // first) is kept until its deadline: the client's retry still collects the
                // action's result from it, and its late answer goes nowhere.
                rounds.retain(|_, r| r.deadline > now);
                if rounds.len() >= ROUNDS_MAX {
                    // Dropping `answer` tells the asker nobody can be asked.
                    return Err(RoundError::TooMany { max: ROUNDS_MAX }.to_mcp());
                }
                let state = self.seal(round, &question, bound)?;
                let required = input_required(&question, state);
                rounds.insert(
                    round,
                    Round {
                        deadline: now + question.wait,
                        question,
                        answer,
                        steps,
                    },
                );
                Ok(Outcome::Asked(required))
            }
            None => Err(McpError::internal_error(
                "the call ended without a result",
                None,
            )),
        }
    }

    fn seal(&self, round: u64, question: &Question, bound: &[u8]) -> Result<String, McpError> {
        // The state carries the round's number alone, sealed (see the module's docs).
        let options = SealOptions::new().associated_data(bound).ttl(question.wait);
        Ok(self.codec.seal_with(&round.to_be_bytes(), &options))
    }

    /// Resume the round `state` names with the client's `responses`: the answer goes to the
    /// waiting action and the call's next step comes back. Without an answer to aido's
    /// question the same question is put again.
    pub(crate) async fn resume(
        &self,
        state: &str,
        responses: Option<&InputResponses>,
        bound: &[u8],
    ) -> Result<Outcome, McpError> {
        let opened = self.codec.open_with(state, bound).map_err(|e| {
            RoundError::StateInvalid {
                reason: e.to_string(),
            }
            .to_mcp()
        })?;
        let round = <[u8; 8]>::try_from(opened.as_slice())
            .map(u64::from_be_bytes)
            .map_err(|_| {
                RoundError::StateInvalid {
                    reason: "it does not name a round".into(),
                }
                .to_mcp()
            })?;
        let answer = responses
            .and_then(|r| r.get(QUESTION_KEY))
            .and_then(elicited);
        // One look at the rounds: a retry without an answer leaves the round where it is (a
        // retry with the answer at the same moment must still find it), one with the answer
        // takes it, once.
        let (waiting, answer) = {
            let mut rounds = self.locked();
            match answer {
                None => {
                    let waiting = rounds
                        .get(&round)
                        .ok_or_else(|| RoundError::StateUnknown.to_mcp())?;
                    // Asked again, under the state the client already holds.
                    return Ok(Outcome::Asked(input_required(
                        &waiting.question,
                        state.to_owned(),
                    )));
                }
                Some(answer) => (
                    rounds
                        .remove(&round)
                        .ok_or_else(|| RoundError::StateUnknown.to_mcp())?,
                    answer,
                ),
            }
        };
        // The asker may have given up (its question timed out, or another surface answered
        // it first: Mission Control, `aido watch`, `aido answer`): the action then goes on
        // without this answer, which is ignored, and its result is what the client gets.
        let _ = waiting.answer.send(answer);
        Box::pin(self.next(waiting.steps, bound)).await
    }
}

/// A call's next step as the request answers it.
pub(crate) enum Outcome {
    /// The result.
    Done(Box<CallToolResult>),
    /// Input required: the question and the state to send back.
    Asked(InputRequiredResult),
}

/// The `input_required` result putting `question`, resumable with `state`.
fn input_required(question: &Question, state: String) -> InputRequiredResult {
    let request = json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": question.message,
            "requestedSchema": question.schema,
        },
    });
    let mut requests = InputRequests::new();
    // The question was checked as an elicitation form when it was asked.
    if let Ok(request) = serde_json::from_value::<InputRequest>(request) {
        requests.insert(QUESTION_KEY.to_owned(), request);
    }
    InputRequiredResult::new(Some(requests), Some(state))
}

/// A client's `elicitation/create` result as the asker's answer; `None` if it is not one.
fn elicited(response: &Value) -> Option<Elicited> {
    match response.get("action")?.as_str()? {
        "accept" => Some(Elicited::Accepted(
            response.get("content").cloned().unwrap_or(Value::Null),
        )),
        "decline" => Some(Elicited::Declined),
        "cancel" => Some(Elicited::Cancelled),
        _ => None,
    }
}

/// Asks through the request that waits on the call (`input_required`), for a client that
/// declared form elicitation in its request's capabilities.
pub(crate) struct RoundAsker {
    pub(crate) steps: mpsc::Sender<Step>,
    pub(crate) can_ask: bool,
    /// How long a policy confirmation (a `confirm` verdict) waits for its answer: the
    /// config's `confirm_timeout_ms`, as the session's own bound on it.
    pub(crate) confirm_wait: Duration,
}

impl RoundAsker {
    fn put(
        &self,
        message: String,
        schema: Value,
        wait: Duration,
    ) -> Pin<Box<dyn Future<Output = Elicited> + Send>> {
        let steps = self.steps.clone();
        Box::pin(async move {
            if rmcp::model::ElicitationSchema::from_json_schema(match &schema {
                Value::Object(object) => object.clone(),
                _ => return Elicited::Unavailable,
            })
            .is_err()
            {
                tracing::warn!("a question's form is not an elicitation schema");
                return Elicited::Unavailable;
            }
            let (answer, answered) = oneshot::channel();
            let question = Question {
                message,
                schema,
                wait,
            };
            if steps.send(Step::Asked(question, answer)).await.is_err() {
                return Elicited::Unavailable;
            }
            match tokio::time::timeout(wait, answered).await {
                Ok(Ok(elicited)) => elicited,
                // The round was dropped unanswered (too many waiting, or swept).
                Ok(Err(_)) => Elicited::Unavailable,
                Err(_) => Elicited::TimedOut,
            }
        })
    }
}

impl Asker for RoundAsker {
    fn can_ask(&self) -> bool {
        self.can_ask
    }

    fn ask(
        &self,
        message: String,
        schema: Value,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Elicited> + Send>> {
        self.put(message, schema, timeout)
    }
}

impl Confirmer for RoundAsker {
    fn confirm(&self, prompt: String) -> Pin<Box<dyn Future<Output = ConfirmAnswer> + Send>> {
        if !self.can_ask {
            return Box::pin(std::future::ready(ConfirmAnswer::Unavailable));
        }
        let schema = json!({
            "type": "object",
            "properties": {"approve": {"type": "boolean"}},
            "required": ["approve"],
        });
        let asked = self.put(prompt, schema, self.confirm_wait);
        Box::pin(async move {
            match asked.await {
                Elicited::Accepted(content) if content["approve"] == json!(true) => {
                    ConfirmAnswer::Approved
                }
                Elicited::Accepted(_) | Elicited::Declined => ConfirmAnswer::Declined,
                Elicited::Cancelled => ConfirmAnswer::Cancelled,
                Elicited::TimedOut => ConfirmAnswer::TimedOut,
                Elicited::Unavailable => ConfirmAnswer::Unavailable,
            }
        })
    }
}

/// What a round's state is bound to: the bearer, the tool and its arguments.
pub(crate) fn bound(grant: Option<&str>, tool: &str, arguments: &Value) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(grant.unwrap_or("").as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(tool.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(arguments.to_string().as_bytes());
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(steps: &mpsc::Sender<Step>) -> tokio::task::JoinHandle<Elicited> {
        let asker = RoundAsker {
            steps: steps.clone(),
            can_ask: true,
            confirm_wait: Duration::from_secs(600),
        };
        tokio::spawn(async move {
            let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
            asker
                .ask("name?".into(), schema, Duration::from_secs(30))
                .await
        })
    }

    fn state(outcome: Outcome) -> String {
        match outcome {
            Outcome::Asked(required) => {
                let requests = required.input_requests.unwrap();
                assert!(requests.contains_key(QUESTION_KEY));
                required.request_state.unwrap()
            }
            Outcome::Done(_) => panic!("expected input_required"),
        }
    }

    fn code(error: McpError) -> String {
        error.data.unwrap()["code"].as_str().unwrap().to_owned()
    }

    /// An answer reaches the waiting asker once; the same state again is refused, and so is
    /// a state altered, or sent for other arguments.
    #[tokio::test]
    async fn an_answer_is_delivered_exactly_once() {
        let pending = Pending::new([7; 32]);
        let (tx, rx) = mpsc::channel(4);
        let asker = asked(&tx);
        let bound = bound(None, "ask_human", &json!({"question": "name?"}));
        let first = state(pending.next(rx, &bound).await.unwrap());
        // No answer to aido's key: asked again under the same state.
        let again = pending.resume(&first, None, &bound).await.unwrap();
        assert_eq!(state(again), first);
        // Another tool or other arguments: the seal does not open.
        let other = super::bound(None, "ask_human", &json!({"question": "other?"}));
        let refused = pending.resume(&first, None, &other).await;
        assert_eq!(code(refused.err().unwrap()), "request_state_invalid");
        // One character of the sealed part changed (never to itself).
        let mut altered: Vec<char> = first.chars().collect();
        let middle = altered.len() / 2;
        altered[middle] = if altered[middle] == 'A' { 'B' } else { 'A' };
        let altered: String = altered.into_iter().collect();
        let refused = pending.resume(&altered, None, &bound).await;
        assert_eq!(code(refused.err().unwrap()), "request_state_invalid");
        // The answer: the asker gets it, and the call's result follows.
        let mut responses = InputResponses::new();
        responses.insert(
            QUESTION_KEY.into(),
            json!({"action": "accept", "content": {"name": "Ada"}}),
        );
        let done = tokio::spawn({
            let tx = tx.clone();
            async move {
                let _ = tx
                    .send(Step::Done(Box::new(CallToolResult::success(vec![]))))
                    .await;
            }
        });
        let outcome = pending
            .resume(&first, Some(&responses), &bound)
            .await
            .unwrap();
        assert!(matches!(outcome, Outcome::Done(_)));
        done.await.unwrap();
        assert_eq!(
            asker.await.unwrap(),
            Elicited::Accepted(json!({"name": "Ada"}))
        );
        let replayed = pending.resume(&first, Some(&responses), &bound).await;
        assert_eq!(code(replayed.err().unwrap()), "request_state_unknown");
        assert!(pending.is_empty());
    }

    #[test]
    fn error_codes_are_stable() {
        let table = [
            (
                RoundError::StateInvalid { reason: "r".into() },
                "request_state_invalid",
            ),
            (RoundError::StateUnknown, "request_state_unknown"),
            (RoundError::TooMany { max: 1 }, "input_rounds_full"),
        ];
        let codes: Vec<&str> = table.iter().map(|(error, _)| error.code()).collect();
        assert_eq!(codes, RoundError::CODES);
        for (error, code) in table {
            assert_eq!(error.code(), code);
            assert_eq!(error.to_mcp().code, rmcp::model::ErrorCode::INVALID_PARAMS);
        }
    }
}
