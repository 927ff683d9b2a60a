//! The step and token budgets, and what a turn cost as its endpoint reports it.

use serde_json::Value;

use crate::AgentError;

/// The most steps a run may be given: each step adds two messages to the conversation (the
/// model's reply and its result) and a model call carries at most 256 messages.
pub const STEPS_MAX: u32 = 120;
/// The most tokens a run may be given.
pub const TOKENS_MAX: u64 = 100_000_000;
/// Bytes per token when an endpoint reports no usage (the rule of thumb `aido tools` uses).
pub const BYTES_PER_TOKEN: u64 = 4;

/// How many model turns and tokens a run may use, and how many it has used.
#[derive(Clone, Debug)]
pub struct Budget {
    steps_max: u32,
    tokens_max: u64,
    tokens_spent: u64,
    estimated: bool,
}

impl Budget {
    /// A budget of `steps_max` model turns and `tokens_max` tokens (prompt and completion
    /// together, as the endpoint counts them).
    pub fn new(steps_max: u32, tokens_max: u64) -> Result<Self, AgentError> {
        if !(1..=STEPS_MAX).contains(&steps_max) {
            return Err(AgentError::BudgetInvalid {
                what: "--steps",
                given: u64::from(steps_max),
                max: u64::from(STEPS_MAX),
            });
        }
        if !(1..=TOKENS_MAX).contains(&tokens_max) {
            return Err(AgentError::BudgetInvalid {
                what: "--tokens",
                given: tokens_max,
                max: TOKENS_MAX,
            });
        }
        Ok(Self {
            steps_max,
            tokens_max,
            tokens_spent: 0,
            estimated: false,
        })
    }

    /// The most model turns.
    pub fn steps_max(&self) -> u32 {
        self.steps_max
    }

    /// The most tokens.
    pub fn tokens_max(&self) -> u64 {
        self.tokens_max
    }

    /// Tokens used so far.
    pub fn tokens_spent(&self) -> u64 {
        self.tokens_spent
    }

    /// Whether some turn's count was estimated.
    pub fn estimated(&self) -> bool {
        self.estimated
    }

    /// Tokens left (0 when spent).
    pub fn tokens_left(&self) -> u64 {
        self.tokens_max.saturating_sub(self.tokens_spent)
    }

    /// Step `step` (from 1) may start.
    pub fn step_allowed(&self, step: u32) -> Result<(), AgentError> {
        if step > self.steps_max {
            return Err(AgentError::StepsSpent {
                steps: self.steps_max,
            });
        }
        Ok(())
    }

    /// Count a turn's tokens.
    pub fn spend(&mut self, used: Tokens) {
        self.tokens_spent = self.tokens_spent.saturating_add(used.count);
        self.estimated |= used.estimated;
    }

    /// After step `step`: the loop may go on.
    pub fn tokens_allowed(&self, step: u32) -> Result<(), AgentError> {
        if self.tokens_spent >= self.tokens_max {
            return Err(AgentError::TokensSpent {
                step,
                spent: self.tokens_spent,
                max: self.tokens_max,
                estimated: self.estimated,
            });
        }
        Ok(())
    }
}

/// What one model call cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tokens {
    /// Prompt and completion tokens.
    pub count: u64,
    /// The endpoint reported no usage: `count` is the bytes sent and received over
    /// [`BYTES_PER_TOKEN`].
    pub estimated: bool,
}

/// The tokens an llm_call's output (`aido_walk::llm`'s one shape) reports: OpenAI's `usage`
/// (`total_tokens`, else prompt and completion), Anthropic's (input and output), Ollama's
/// (`prompt_eval_count` and `eval_count`); else an estimate from `bytes` exchanged.
pub fn tokens_of(output: &Value, bytes: usize) -> Tokens {
    let n = |v: &Value| v.as_u64();
    let usage = &output["usage"];
    let reported = n(&usage["total_tokens"])
        .or_else(|| Some(n(&usage["prompt_tokens"])? + n(&usage["completion_tokens"])?))
        .or_else(|| Some(n(&usage["input_tokens"])? + n(&usage["output_tokens"])?))
        .or_else(|| Some(n(&output["prompt_eval_count"])? + n(&output["eval_count"])?));
    match reported {
        Some(count) => Tokens {
            count,
            estimated: false,
        },
        None => Tokens {
            count: (bytes as u64).div_ceil(BYTES_PER_TOKEN),
            estimated: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_providers_usage_is_read_and_a_missing_one_estimated() {
        let table = [
            (json!({"usage": {"total_tokens": 11}}), 11, false),
            (
                json!({"usage": {"prompt_tokens": 9, "completion_tokens": 2}}),
                11,
                false,
            ),
            (
                json!({"usage": {"input_tokens": 472, "output_tokens": 89}}),
                561,
                false,
            ),
            (json!({"prompt_eval_count": 5, "eval_count": 7}), 12, false),
            (json!({"text": "streamed"}), 25, true),
        ];
        for (output, count, estimated) in table {
            assert_eq!(tokens_of(&output, 100), Tokens { count, estimated });
        }
    }

    #[test]
    fn budgets_are_bounded_and_spent() {
        assert_eq!(
            Budget::new(0, 10).err().map(|e| e.code()),
            Some("agent_budget_invalid")
        );
        assert_eq!(
            Budget::new(STEPS_MAX + 1, 10).err().map(|e| e.code()),
            Some("agent_budget_invalid")
        );
        assert_eq!(
            Budget::new(3, 0).err().map(|e| e.code()),
            Some("agent_budget_invalid")
        );
        let mut budget = Budget::new(2, 100).unwrap();
        assert!(budget.step_allowed(2).is_ok());
        assert_eq!(
            budget.step_allowed(3).err().map(|e| e.code()),
            Some("agent_steps_spent")
        );
        budget.spend(Tokens {
            count: 60,
            estimated: false,
        });
        assert!(budget.tokens_allowed(1).is_ok());
        assert_eq!(budget.tokens_left(), 40);
        budget.spend(Tokens {
            count: 60,
            estimated: true,
        });
        let spent = budget.tokens_allowed(2).err().unwrap();
        assert_eq!(spent.code(), "agent_tokens_spent");
        assert!(budget.estimated() && budget.tokens_left() == 0);
    }
}
