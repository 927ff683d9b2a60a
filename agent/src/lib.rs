//! `aido agent "GOAL"`: a small agent loop for an operator who has no agent client. It is a
//! thin client of the runtime, not a second one: it holds one [`Session`] of a runtime and
//! does everything through [`Session::run`], so the policy judges, the journal records, and
//! approvals, refusals, rewind and replay work as they do for any MCP client.
//!
//! The design decision: **the model's turns are actions too**. Each turn is an `llm_call`
//! action of the same session (the `[llm]` endpoint, judged by `[net] allow`, its key never
//! journaled), and each tool call the model asks for is the action of that tool, parsed from
//! its name and arguments exactly as an MCP `tools/call` is. The session's journal is the
//! whole loop: what the model was asked, what it answered, what ran, what was refused. Since
//! `llm_call` carries text, the tools are offered in the system prompt (name, description and
//! the JSON Schema of the arguments, as `aido tools --json` gives them) and the model answers
//! each turn with one JSON object: a tool call or its final answer ([`reply`]). Any
//! OpenAI-compatible endpoint (OpenAI, vLLM, llama.cpp, Ollama's `/v1`) or Anthropic's works
//! alike, and playback reproduces every turn from the journal.
//!
//! A refused or failed tool call goes back to the model as that call's result, with its code
//! ([`turn`]); the loop goes on. The loop ends when the model answers, or with a coded
//! [`AgentError`] when the step or token budget is spent ([`budget`]) or the model cannot be
//! reached.
//!
//! ```no_run
//! # async fn example(session: &aido_actors::Session, llm: &aido_policy::Llm) -> Result<(), aido_agent::AgentError> {
//! let options = aido_agent::Options {
//!     goal: "Count the lines of README.md".into(),
//!     tools: vec!["read_file", "stat_files"],
//!     budget: aido_agent::Budget::new(10, 50_000)?,
//!     model: None,
//!     reply_tokens_max: llm.max_tokens_default,
//!     argument_bytes_max: 8 << 20,
//!     cwd: session.cwd(),
//! };
//! aido_agent::check_llm(llm, options.model.as_deref())?;
//! let runner = aido_agent::InProcess { session: session.clone(), hooks: Default::default() };
//! let finished = aido_agent::run(&runner, &options, &mut |event| println!("{event:?}")).await?;
//! println!("{} in {} steps", finished.answer, finished.steps);
//! # Ok(())
//! # }
//! ```
//!
//! [`Session`]: aido_actors::Session
//! [`Session::run`]: aido_actors::Session::run

/// The step and token budgets, and the tokens a turn cost.
pub mod budget;
/// `AgentError`: why the loop stopped without an answer.
pub mod error;
/// The system prompt: the protocol, the working directory and the tools.
pub mod prompt;
/// Reading a model's reply: a tool call, an answer, or neither.
pub mod reply;
/// Where the loop's actions run: a session in this process, or one the cli reaches.
pub mod runner;
/// The loop: turns, tool calls, and what the terminal is told.
pub mod turn;

pub use budget::Budget;
pub use error::AgentError;
pub use runner::{InProcess, Runner};
pub use turn::{Called, Event, Finished, Options, check_goal, check_llm, run};
