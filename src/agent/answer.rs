//! Whether the agent may finish with an answer: under `--output-schema` the
//! answer must be valid JSON for the schema, then every stop hook must pass.
//! A refused answer goes back to the model and the run goes on, within
//! bounds: three invalid answers in a row end the run with `error`; after
//! three failed stop-hook rounds the answer stands (with a warning).

use serde_json::{json, Value};

use super::hooks;
use super::{Agent, Counters};

/// Invalid answers in a row that end the run.
pub(super) const MAX_INVALID_ANSWERS: u32 = 3;
/// Failed stop-hook rounds after which an answer stands anyway.
pub(super) const MAX_STOP_HOOK_FAILURES: u32 = 3;

/// An answer the agent wants to finish with.
pub(super) enum FinalAnswer {
    /// The `submit` tool's `output`.
    Submitted(Value),
    /// The text of a reply without tool calls.
    Text(String),
}

/// What becomes of a final answer: the ruling on it.
pub(super) enum Ruling {
    /// The run ends with this output.
    Accept(Value),
    /// The model is told this and the run goes on.
    Reject(String),
    /// The run ends with `error` and this message.
    Fail(String),
}

impl Agent {
    /// Checks a final answer against the output schema and the stop hooks.
    pub(super) async fn check_answer(
        &mut self,
        answer: FinalAnswer,
        counters: &mut Counters,
    ) -> Ruling {
        counters.answered_this_step = true;
        let status = match answer {
            FinalAnswer::Submitted(_) => "submitted",
            FinalAnswer::Text(_) => "completed",
        };
        let checked = match (&self.jobs.output_schema, answer) {
            (Some(schema), FinalAnswer::Submitted(value)) => schema.check_submitted(&value),
            (Some(schema), FinalAnswer::Text(text)) => schema.check_text(&text),
            (None, FinalAnswer::Submitted(value)) => Ok(value),
            (None, FinalAnswer::Text(text)) => Ok(Value::String(text)),
        };
        let value = match checked {
            Ok(value) => value,
            Err(problem) => {
                counters.invalid_answers += 1;
                if counters.invalid_answers >= MAX_INVALID_ANSWERS {
                    return Ruling::Fail(format!(
                        "the final answer did not match the output schema {MAX_INVALID_ANSWERS} times in a row; the last time: {problem}"
                    ));
                }
                return Ruling::Reject(format!(
                    "Your final answer was not accepted: {problem}\nFix it and give the final answer again (call submit with an output that matches the schema)."
                ));
            }
        };
        counters.invalid_answers = 0;

        if self.jobs.hooks.stop.is_empty() {
            return Ruling::Accept(value);
        }
        if counters.stop_hook_failures >= MAX_STOP_HOOK_FAILURES {
            self.emitter.warn(format!(
                "the stop hooks failed {MAX_STOP_HOOK_FAILURES} times; the answer stands without running them again"
            ));
            return Ruling::Accept(value);
        }
        let payload = json!({"status": status, "output": value});
        let refusal = hooks::run_all(
            &self.jobs.hooks.stop,
            &payload,
            &self.tool_ctx.cwd,
            &self.stop,
        )
        .await;
        match refusal {
            None => Ruling::Accept(value),
            Some(refusal) => {
                counters.stop_hook_failures += 1;
                Ruling::Reject(format!(
                    "You are not done yet: the {}\nFix the cause, then give the final answer again.",
                    refusal.describe("stop")
                ))
            }
        }
    }
}
