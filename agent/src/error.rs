//! Why `aido agent` stopped without the model's answer, or could not start.

/// A failure of the loop: bad input before it starts, a budget spent, the model unreachable.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// `[llm]` does not say which endpoint or model to use.
    #[error(
        "[llm] {missing} is not set: aido agent asks the model of the config's [llm] section (provider, base_url, model; the endpoint must also pass [net] allow)"
    )]
    LlmNotConfigured {
        /// The setting that is empty (`base_url` or `model`).
        missing: &'static str,
    },
    /// A toolset, profile or tool name that does not exist.
    #[error("{reason}")]
    ToolsetUnknown {
        /// What the toolsets table said.
        reason: String,
    },
    /// A budget outside its bounds.
    #[error("{what} must be between 1 and {max}; it is {given}")]
    BudgetInvalid {
        /// `--steps` or `--tokens`.
        what: &'static str,
        /// What was given.
        given: u64,
        /// The largest allowed.
        max: u64,
    },
    /// The goal is empty or larger than the model call can carry.
    #[error("the goal is {bytes} bytes; it must be between 1 and {max}")]
    GoalInvalid {
        /// The goal's size.
        bytes: usize,
        /// The largest allowed.
        max: usize,
    },
    /// The system prompt (the tools' descriptions and schemas) is larger than a model call
    /// can carry.
    #[error(
        "the tools' descriptions take {bytes} bytes, more than the {max} a model call carries: give fewer tools (--toolset)"
    )]
    PromptTooLarge {
        /// The prompt's size.
        bytes: usize,
        /// The largest allowed.
        max: usize,
    },
    /// A model call failed or was refused (the endpoint unreachable, an error status, the
    /// policy refusing its URL).
    #[error(
        "the model call of step {step} failed: [{code}] {message}{}",
        seq.map(|s| format!(" (seq {s})")).unwrap_or_default()
    )]
    ModelFailed {
        /// The turn.
        step: u32,
        /// The llm_call's proposal, when it got that far.
        seq: Option<u64>,
        /// The llm_call's own code (`llm_http_error`, `host_not_allowed`, ...).
        code: String,
        /// Its message.
        message: String,
    },
    /// The model answered something that is not its provider's JSON.
    #[error("the model's answer in step {step} is not its provider's JSON (seq {seq}): {why}")]
    ModelAnswerInvalid {
        /// The turn.
        step: u32,
        /// The llm_call's proposal.
        seq: u64,
        /// What was wrong.
        why: String,
    },
    /// The `aido serve` the loop runs in (`--serve`) could not be reached, or refused the
    /// request.
    #[error("aido serve at {url}: {why}")]
    ServeFailed {
        /// Where it was asked.
        url: String,
        /// What went wrong (a refusal's own code in brackets).
        why: String,
    },
    /// Every step of `--steps` was taken and the model has not answered.
    #[error("the step budget is spent: {steps} steps and no answer yet (--steps)")]
    StepsSpent {
        /// The budget.
        steps: u32,
    },
    /// The model's calls used the token budget (as the endpoint reports usage).
    #[error(
        "the token budget is spent: {spent} tokens used of {max} after step {step} (--tokens){}",
        if *estimated { "; the endpoint reported no usage for some turns, so those are estimated at 4 bytes a token" } else { "" }
    )]
    TokensSpent {
        /// The turn after which it was spent.
        step: u32,
        /// Tokens used.
        spent: u64,
        /// The budget.
        max: u64,
        /// Some turns' counts were estimated.
        estimated: bool,
    },
}

aido_actions::coded!(AgentError {
    LlmNotConfigured => "llm_not_configured",
    ToolsetUnknown => "agent_toolset_unknown",
    BudgetInvalid => "agent_budget_invalid",
    GoalInvalid => "agent_goal_invalid",
    PromptTooLarge => "agent_prompt_too_large",
    ModelFailed => "agent_model_failed",
    ModelAnswerInvalid => "agent_model_answer_invalid",
    ServeFailed => "agent_serve_failed",
    StepsSpent => "agent_steps_spent",
    TokensSpent => "agent_tokens_spent",
});

impl AgentError {
    /// The process's exit code for this stop: 2 for bad input (as every aido command), 3
    /// when the step budget is spent, 4 the token budget, 5 when the model failed, 6 when
    /// the `aido serve` it runs in failed.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::LlmNotConfigured { .. }
            | Self::ToolsetUnknown { .. }
            | Self::BudgetInvalid { .. }
            | Self::GoalInvalid { .. }
            | Self::PromptTooLarge { .. } => 2,
            Self::StepsSpent { .. } => 3,
            Self::TokensSpent { .. } => 4,
            Self::ModelFailed { .. } | Self::ModelAnswerInvalid { .. } => 5,
            Self::ServeFailed { .. } => 6,
        }
    }
}

/// What the model is told when its reply is neither a tool call nor an answer (it is its
/// turn's result, and the loop goes on).
#[derive(Debug)]
pub enum ReplyError {
    /// No JSON object with `tool` or `answer` in the reply.
    Unparsed,
}

aido_actions::coded!(ReplyError {
    Unparsed => "agent_reply_unparsed",
});

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole table with each stop's exit code; codes are never reused.
    #[test]
    fn agent_error_codes_and_exit_codes_are_stable() {
        let failed = |code: &str| AgentError::ModelFailed {
            step: 1,
            seq: None,
            code: code.into(),
            message: "m".into(),
        };
        let table = [
            (
                AgentError::LlmNotConfigured {
                    missing: "base_url",
                },
                "llm_not_configured",
                2,
            ),
            (
                AgentError::ToolsetUnknown { reason: "r".into() },
                "agent_toolset_unknown",
                2,
            ),
            (
                AgentError::BudgetInvalid {
                    what: "--steps",
                    given: 0,
                    max: 1,
                },
                "agent_budget_invalid",
                2,
            ),
            (
                AgentError::GoalInvalid { bytes: 0, max: 1 },
                "agent_goal_invalid",
                2,
            ),
            (
                AgentError::PromptTooLarge { bytes: 2, max: 1 },
                "agent_prompt_too_large",
                2,
            ),
            (failed("llm_http_error"), "agent_model_failed", 5),
            (
                AgentError::ModelAnswerInvalid {
                    step: 1,
                    seq: 3,
                    why: "w".into(),
                },
                "agent_model_answer_invalid",
                5,
            ),
            (
                AgentError::ServeFailed {
                    url: "u".into(),
                    why: "w".into(),
                },
                "agent_serve_failed",
                6,
            ),
            (AgentError::StepsSpent { steps: 3 }, "agent_steps_spent", 3),
            (
                AgentError::TokensSpent {
                    step: 1,
                    spent: 2,
                    max: 1,
                    estimated: false,
                },
                "agent_tokens_spent",
                4,
            ),
        ];
        for (error, code, exit) in &table {
            assert_eq!((error.code(), error.exit_code()), (*code, *exit));
        }
        let codes: Vec<&str> = table.iter().map(|(_, code, _)| *code).collect();
        assert_eq!(AgentError::CODES, codes.as_slice());
        assert_eq!(ReplyError::CODES, &["agent_reply_unparsed"]);
    }
}
