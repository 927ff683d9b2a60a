//! The loop. Each step is one turn of the model (an `llm_call` action of the session) and,
//! when the model asks for one, one tool call (the action of that tool, parsed and bounded as
//! an MCP `tools/call` is, and refused the same way when it lies outside the toolsets). What
//! every step does is told to an event sink as it happens, for the terminal.

use std::path::PathBuf;

use aido_actions::Action;
use aido_mcp::server::CallError;
use serde_json::{Value, json};

use crate::budget::{Budget, Tokens, tokens_of};
use crate::error::ReplyError;
use crate::reply::{self, Reply};
use crate::runner::{Refusal, Runner};
use crate::{AgentError, prompt};

/// The largest goal, in bytes.
pub const GOAL_BYTES_MAX: usize = 65_536;
/// The most of a tool's result the model is given, in bytes (the whole result is journaled).
pub const RESULT_BYTES_MAX: usize = 16_384;
/// The most of a reply kept in the conversation, in bytes.
pub const REPLY_BYTES_MAX: usize = 65_536;
/// The most of a failure's details the model is given, in bytes.
const DETAILS_BYTES_MAX: usize = 2_048;
/// The largest `max_tokens` llm_call takes.
const REPLY_TOKENS_MAX: u64 = 1_000_000;

/// What a run is asked to do, with what.
#[derive(Clone)]
pub struct Options {
    /// The operator's goal.
    pub goal: String,
    /// The primitives the model is given (a toolset's, as `aido tools` resolves it).
    pub tools: Vec<&'static str>,
    /// The steps and tokens it may use.
    pub budget: Budget,
    /// The model, over `[llm] model`.
    pub model: Option<String>,
    /// The most tokens one reply may take (`[llm] max_tokens_default`).
    pub reply_tokens_max: u32,
    /// The largest arguments of one tool call (`[limits] argument_bytes_max`).
    pub argument_bytes_max: u64,
    /// Where relative paths start, as the model is told.
    pub cwd: PathBuf,
}

/// How a run ended with an answer.
#[derive(Clone, Debug)]
pub struct Finished {
    /// The model's final report.
    pub answer: String,
    /// Steps taken.
    pub steps: u32,
    /// Tokens used.
    pub tokens: u64,
    /// Some turns' tokens were estimated.
    pub estimated: bool,
}

/// What a tool call came to, as the model reads it.
#[derive(Clone, Debug)]
pub enum Called {
    /// It ran; `text` is its result (bounded).
    Ran {
        /// Its proposal's seq.
        seq: u64,
        /// The result the model reads.
        text: String,
    },
    /// It was refused (with the gate that refused it) or failed.
    Refused {
        /// Its proposal's seq (or the rejected call's record), when it was journaled.
        seq: Option<u64>,
        /// The code.
        code: String,
        /// The policy's gate, for a refusal (it did not run).
        gate: Option<String>,
        /// The message.
        message: String,
        /// A failure's details (bounded JSON).
        details: Option<String>,
    },
}

impl Called {
    /// The journal seq of the call, when it has one.
    pub fn seq(&self) -> Option<u64> {
        match self {
            Self::Ran { seq, .. } => Some(*seq),
            Self::Refused { seq, .. } => *seq,
        }
    }

    /// The turn's result message the model is sent.
    fn for_model(&self, tool: &str) -> String {
        match self {
            Self::Ran { seq, text } => format!("Result of {tool} (seq {seq}):\n{text}"),
            Self::Refused {
                code,
                gate: Some(gate),
                message,
                ..
            } => format!(
                "{tool} was refused by the policy ({gate}) and did not run: [{code}] {message}"
            ),
            Self::Refused {
                code,
                message,
                details,
                ..
            } => {
                let details = details
                    .as_deref()
                    .map(|d| format!("\ndetails: {d}"))
                    .unwrap_or_default();
                format!("{tool} failed: [{code}] {message}{details}")
            }
        }
    }
}

/// What the loop tells the terminal, as it happens.
#[derive(Debug)]
pub enum Event<'a> {
    /// The session the loop runs in (said once, as soon as it is known).
    Session { id: &'a str },
    /// The model answered step `step` (its llm_call at `seq`).
    Model {
        step: u32,
        seq: u64,
        tokens: Tokens,
        spent: u64,
        max: u64,
    },
    /// What the model says it will do.
    Plan { step: u32, text: &'a str },
    /// A tool call about to be run.
    Call {
        step: u32,
        tool: &'a str,
        arguments: &'a Value,
    },
    /// What the call came to.
    Result {
        step: u32,
        tool: &'a str,
        called: &'a Called,
    },
    /// A reply that is neither a call nor an answer (the model is asked again).
    Unparsed { step: u32, reply: &'a str },
    /// The model's final report.
    Answer { step: u32, text: &'a str },
}

/// Whether `[llm]` names an endpoint and a model (`model` overrides its model).
pub fn check_llm(llm: &aido_policy::Llm, model: Option<&str>) -> Result<(), AgentError> {
    if llm.base_url.trim().is_empty() {
        return Err(AgentError::LlmNotConfigured {
            missing: "base_url",
        });
    }
    if llm.model.trim().is_empty() && model.is_none_or(|m| m.trim().is_empty()) {
        return Err(AgentError::LlmNotConfigured { missing: "model" });
    }
    Ok(())
}

/// Whether `goal` is something to send: not blank, and within [`GOAL_BYTES_MAX`].
pub fn check_goal(goal: &str) -> Result<(), AgentError> {
    let goal = goal.trim();
    if goal.is_empty() || goal.len() > GOAL_BYTES_MAX {
        return Err(AgentError::GoalInvalid {
            bytes: goal.len(),
            max: GOAL_BYTES_MAX,
        });
    }
    Ok(())
}

/// Run the loop in `runner`'s session until the model answers or a budget is spent; `on`
/// hears each step as it happens.
///
/// # Cancel safety
/// Dropping the future stops the loop between actions; an action already started still
/// finishes and is journaled (see `aido_actors::Session::run`).
pub async fn run(
    runner: &dyn Runner,
    options: &Options,
    on: &mut (dyn FnMut(Event<'_>) + Send),
) -> Result<Finished, AgentError> {
    check_goal(&options.goal)?;
    let goal = options.goal.trim();
    let system = prompt::system(&options.tools, &options.cwd)?;
    let mut said = false;
    let mut say_session = |on: &mut (dyn FnMut(Event<'_>) + Send)| {
        if !said && let Some(id) = runner.session() {
            said = true;
            on(Event::Session { id: &id });
        }
    };
    say_session(on);
    let mut budget = options.budget.clone();
    let mut messages = vec![json!({"role": "user", "content": format!("Goal: {goal}")})];
    for step in 1..=budget.steps_max() {
        let asked = ask(runner, options, &system, &messages, &budget, step).await;
        say_session(on);
        let (seq, text, tokens) = asked?;
        budget.spend(tokens);
        on(Event::Model {
            step,
            seq,
            tokens,
            spent: budget.tokens_spent(),
            max: budget.tokens_max(),
        });
        messages.push(json!({"role": "assistant", "content": bounded(&text, REPLY_BYTES_MAX)}));
        let result = match act(runner, options, &budget, step, &text, on).await? {
            Acted::Told(result) => result,
            Acted::Answered(answer) => {
                return Ok(Finished {
                    answer,
                    steps: step,
                    tokens: budget.tokens_spent(),
                    estimated: budget.estimated(),
                });
            }
        };
        messages.push(json!({"role": "user", "content": result}));
    }
    Err(AgentError::StepsSpent {
        steps: budget.steps_max(),
    })
}

/// What a reply came to.
enum Acted {
    /// The model's next message: a call's result, or why its reply was not read.
    Told(String),
    /// The model's final report.
    Answered(String),
}

/// Do what the reply `text` of step `step` asks, within the budget.
async fn act(
    runner: &dyn Runner,
    options: &Options,
    budget: &Budget,
    step: u32,
    text: &str,
    on: &mut (dyn FnMut(Event<'_>) + Send),
) -> Result<Acted, AgentError> {
    match reply::read(text) {
        Reply::Answer { plan, text } => {
            if !plan.is_empty() {
                on(Event::Plan { step, text: &plan });
            }
            on(Event::Answer { step, text: &text });
            Ok(Acted::Answered(text))
        }
        Reply::Unparsed => {
            on(Event::Unparsed { step, reply: text });
            budget.tokens_allowed(step)?;
            Ok(Acted::Told(format!(
                "[{}] Your reply was not one JSON object with \"tool\" or \"answer\". Reply with exactly one JSON object, as the system prompt says.",
                ReplyError::Unparsed.code()
            )))
        }
        Reply::Call {
            plan,
            tool,
            arguments,
        } => {
            if !plan.is_empty() {
                on(Event::Plan { step, text: &plan });
            }
            // The budget is spent: the call it asked for is not run.
            budget.tokens_allowed(step)?;
            on(Event::Call {
                step,
                tool: &tool,
                arguments: &arguments,
            });
            let called = call(runner, options, &tool, arguments).await?;
            on(Event::Result {
                step,
                tool: &tool,
                called: &called,
            });
            Ok(Acted::Told(called.for_model(&tool)))
        }
    }
}

/// One turn of the model: an llm_call action with the conversation so far. Its seq, the
/// reply's text and what it cost.
async fn ask(
    runner: &dyn Runner,
    options: &Options,
    system: &str,
    messages: &[Value],
    budget: &Budget,
    step: u32,
) -> Result<(u64, String, Tokens), AgentError> {
    let max_tokens = u64::from(options.reply_tokens_max)
        .min(budget.tokens_left())
        .clamp(1, REPLY_TOKENS_MAX);
    let mut arguments = json!({"system": system, "messages": messages, "max_tokens": max_tokens});
    if let Some(model) = &options.model {
        arguments["model"] = json!(model);
    }
    let sent = arguments.to_string().len();
    let failed = |seq: Option<u64>, code: &str, message: String| AgentError::ModelFailed {
        step,
        seq,
        code: code.to_owned(),
        message,
    };
    let action = Action::from_tool_call("llm_call", arguments.clone())
        .map_err(|e| failed(None, e.code(), e.to_string()))?;
    let done = runner
        .run(action, "llm_call", &arguments)
        .await?
        .map_err(|e| failed(e.seq, &e.code, e.message))?;
    if let Some(why) = done.output["error"].as_str() {
        return Err(AgentError::ModelAnswerInvalid {
            step,
            seq: done.seq,
            why: why.to_owned(),
        });
    }
    let text = done.output["text"].as_str().unwrap_or_default().to_owned();
    let tokens = tokens_of(&done.output, sent + text.len());
    Ok((done.seq, text, tokens))
}

/// Run one tool call the model asked for, as an MCP `tools/call` would be: bounded, limited
/// to the tools given, parsed, then judged, journaled and run in the runner's session. Only
/// the runner's own failure is an error.
async fn call(
    runner: &dyn Runner,
    options: &Options,
    tool: &str,
    arguments: Value,
) -> Result<Called, AgentError> {
    let size = serde_json::to_vec(&arguments).map_or(0, |b| b.len()) as u64;
    if size > options.argument_bytes_max {
        let message = format!(
            "the arguments are {size} bytes; the limit is {} (argument_bytes_max)",
            options.argument_bytes_max
        );
        let code = CallError::ArgumentsTooLarge.code();
        return Ok(reject(runner, tool, code, message).await);
    }
    if Action::class_of(tool).is_some() && !options.tools.contains(&tool) {
        let code = CallError::ToolNotEnabled.code();
        return Ok(reject(runner, tool, code, not_given(tool, "")).await);
    }
    let action = match Action::from_tool_call(tool, arguments.clone()) {
        Ok(action) => action,
        Err(e) => return Ok(reject(runner, tool, e.code(), e.to_string()).await),
    };
    // Nor can a composite's step reach a tool outside the toolsets.
    let outside = action
        .leaves()
        .into_iter()
        .find(|(_, leaf)| !options.tools.contains(&leaf.primitive()))
        .map(|(at, leaf)| not_given(leaf.primitive(), &format!(" (at {at})")));
    if let Some(message) = outside {
        let code = CallError::ToolNotEnabled.code();
        return Ok(reject(runner, tool, code, message).await);
    }
    Ok(match runner.run(action, tool, &arguments).await? {
        Ok(done) => {
            let text = if done.text.is_empty() {
                done.output.to_string()
            } else {
                done.text
            };
            Called::Ran {
                seq: done.seq,
                text: bounded(&text, RESULT_BYTES_MAX),
            }
        }
        Err(Refusal {
            seq,
            code,
            message,
            gate,
            details,
        }) => Called::Refused {
            seq,
            code,
            details: details
                .filter(|_| gate.is_none())
                .map(|d| bounded(&d.to_string(), DETAILS_BYTES_MAX)),
            gate,
            message,
        },
    })
}

/// A call that never became an action, journaled as rejected.
async fn reject(runner: &dyn Runner, tool: &str, code: &str, message: String) -> Called {
    let seq = runner.reject(tool, code, &message).await;
    Called::Refused {
        seq,
        code: code.to_owned(),
        gate: None,
        message,
        details: None,
    }
}

fn not_given(tool: &str, at: &str) -> String {
    let set = aido_actions::toolsets::toolset_of(tool).unwrap_or("none");
    format!(
        "{tool}{at} is not among the tools this agent was given (it is in the {set} toolset; aido agent --toolset gives it)"
    )
}

/// `text` cut to at most `max` bytes on a char boundary, saying how much was left out.
fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[... {} more bytes not shown]",
        &text[..end],
        text.len() - end
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_cut_on_a_char_boundary_and_say_so() {
        assert_eq!(bounded("short", 10), "short");
        let cut = bounded("ééé", 3);
        assert_eq!(cut, "é\n[... 4 more bytes not shown]");
    }

    #[test]
    fn the_model_reads_a_refusal_with_its_code_and_gate() {
        let refused = Called::Refused {
            seq: Some(7),
            code: "path_outside_walls".into(),
            gate: Some("path_walls".into()),
            message: "/etc/shadow is outside".into(),
            details: None,
        };
        let text = refused.for_model("read_file");
        assert!(text.contains("[path_outside_walls]") && text.contains("did not run"));
        let ran = Called::Ran {
            seq: 5,
            text: "hello".into(),
        };
        assert_eq!(
            ran.for_model("read_file"),
            "Result of read_file (seq 5):\nhello"
        );
    }

    #[test]
    fn an_unconfigured_llm_is_named() {
        let mut llm = aido_policy::Config::default().llm;
        assert_eq!(
            check_llm(&llm, None)
                .err()
                .map(|e| e.to_string().contains("base_url")),
            Some(true)
        );
        llm.base_url = "http://127.0.0.1:1/v1".into();
        assert_eq!(
            check_llm(&llm, None).err().map(|e| e.code()),
            Some("llm_not_configured")
        );
        assert!(check_llm(&llm, Some("m")).is_ok());
    }
}
