//! One step's request: the prompt built from the document, the chain asked,
//! and every way the chain can fail turned into the step's end (a context
//! overflow compacts and asks once more).

use serde_json::Value;

use super::{stop_status, usage, Agent, StepEnd};
use crate::conversation::ToolSpec;
use crate::events::DownModel;
use crate::exit::Status;
use crate::model::chain::{Answer, ChainError};
use crate::model::gate::Halt;
use crate::model::retry::RequestCtx;
use crate::model::Prompt;

impl Agent {
    /// Asks the chain for this step's answer, with the request's size in
    /// characters. A context overflow compacts and asks again, once per step
    /// (`compacted` says whether the step already compacted); any other
    /// failure ends the step.
    pub(super) async fn request_answer(
        &mut self,
        step: u32,
        system: &str,
        tool_specs: &[ToolSpec],
        mut compacted: bool,
    ) -> Result<(Answer, u64), StepEnd> {
        loop {
            let chars = usage::request_chars(system, &self.doc.messages, tool_specs);
            let prompt = Prompt {
                system,
                messages: &self.doc.messages,
                tools: tool_specs,
                output_schema: self.options.output_schema.as_ref(),
                max_output_tokens: self.options.max_output_tokens,
                reasoning_effort: self.options.reasoning_effort.as_deref(),
                estimated_input_tokens: self.meter.estimate(self.chain.active_spec(), chars),
            };
            let ctx = RequestCtx {
                step,
                emitter: &self.emitter,
                stop: &self.stop,
            };
            let answer = self.chain.complete(&prompt, ctx).await;
            self.account_hedged_out();
            match answer {
                Ok(answer) => return Ok((answer, chars)),
                Err(ChainError::Stopped(cause)) => {
                    return Err(StepEnd::Finish(stop_status(cause), Value::Null, None))
                }
                // An overflow compacts and retries once; never a fallback.
                Err(ChainError::ContextOverflow { spec, error }) if !compacted => {
                    self.learn_overflow(spec.as_str(), &error.to_string(), system, tool_specs);
                    self.compact(step, system, tool_specs, true).await?;
                    compacted = true;
                }
                Err(error @ ChainError::ContextOverflow { .. }) => {
                    return Err(self.overflow_after_compaction(&error, system, tool_specs))
                }
                // A refusal is the model's own answer: `model refused: <text>`, no spec.
                Err(ChainError::Fatal {
                    error: error @ crate::model::ModelError::Refusal { .. },
                    ..
                }) => {
                    return Err(StepEnd::Finish(
                        Status::Error,
                        Value::Null,
                        Some(error.to_string()),
                    ))
                }
                Err(error @ ChainError::Exhausted { .. }) => {
                    return Err(StepEnd::Outage {
                        down: down_models(&error),
                        error: error.to_string(),
                    })
                }
                Err(ChainError::Halted(halt)) => return Err(halted(&halt)),
                Err(error) => {
                    return Err(StepEnd::Finish(
                        Status::Error,
                        Value::Null,
                        Some(error.to_string()),
                    ))
                }
            }
        }
    }

    /// The step's end when the context overflows although it was already
    /// compacted: an error naming the size it was compacted to.
    fn overflow_after_compaction(
        &self,
        error: &ChainError,
        system: &str,
        tool_specs: &[ToolSpec],
    ) -> StepEnd {
        let tokens = self.estimate_request(system, &self.doc.messages, tool_specs);
        let window = self
            .context_window()
            .map(|w| format!(", window {w}"))
            .unwrap_or_default();
        StepEnd::Finish(
            Status::Error,
            Value::Null,
            Some(format!(
                "{error} (the context was already compacted, to about {tokens} tokens{window})"
            )),
        )
    }
}

/// Every model an exhausted chain tried, with its last reason.
pub(super) fn down_models(error: &ChainError) -> Vec<DownModel> {
    match error {
        ChainError::Exhausted { tried, .. } => tried
            .iter()
            .map(|(spec, reason)| DownModel {
                model: spec.to_string(),
                reason: reason.clone(),
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The end of a run the gate halted: a spent budget is `budget_limit`,
/// its error naming the budgets, their spend and when their periods end.
pub(super) fn halted(halt: &Halt) -> StepEnd {
    let status = match halt {
        Halt::Budget(_) => Status::BudgetLimit,
    };
    StepEnd::Finish(status, Value::Null, Some(halt.to_string()))
}
