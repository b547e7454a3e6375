//! What a reply's tool calls become: each journaled as started, run between
//! the pre- and post-tool hooks (`submit` checked as the final answer, a
//! garbled call or one whose arguments were over their bound refused), its
//! result added to the history; the calls a run's end leaves unrun answered
//! so the history stays well formed.

use std::time::Instant;

use serde_json::Value;

use super::answer::{FinalAnswer, Ruling};
use super::{hooks, stop_status, Agent, Counters, StepEnd};
use crate::approval::{Review, Where};
use crate::conversation::{Message, ToolCall};
use crate::events::Event;
use crate::exit::Status;
use crate::model::{MAX_CALL_ARGUMENTS, MAX_REPLY_ARGUMENTS};
use crate::tools::ToolOutput;
use crate::trajectory::JournalOp;

impl Agent {
    /// Runs a reply's tool calls in order. `submit` ends the run after it.
    pub(super) async fn run_tools(
        &mut self,
        step: u32,
        calls: &[ToolCall],
        counters: &mut Counters,
    ) -> StepEnd {
        for (i, call) in calls.iter().enumerate() {
            self.emitter.emit(Event::ToolStarted {
                step,
                call_id: call.id.clone(),
                tool: call.name.clone(),
                arguments: call.arguments.clone(),
            });
            self.journal(&JournalOp::ToolStarted {
                step,
                call_id: call.id.clone(),
                tool: call.name.clone(),
                arguments: call.arguments.clone(),
            });
            let mut started = Instant::now();
            let mut ending = None;
            let result = if let Some(size) = call.oversized {
                ToolOutput::err(oversized(size))
            } else if call.garbled {
                ToolOutput::err(
                    "the arguments of this call were not valid JSON, so it was not run; send the call again with valid JSON arguments",
                )
            } else if call.name == "submit" {
                let output = call.arguments.get("output").cloned().unwrap_or(Value::Null);
                match self
                    .check_answer(FinalAnswer::Submitted(output), counters)
                    .await
                {
                    Ruling::Accept(output) => {
                        ending = Some((Status::Submitted, output, None));
                        ToolOutput::ok("submitted")
                    }
                    Ruling::Reject(message) => ToolOutput::err(message),
                    Ruling::Fail(error) => {
                        let result = ToolOutput::err(error.clone());
                        ending = Some((Status::Error, Value::Null, Some(error)));
                        result
                    }
                }
            } else if let Some(declined) = self.declined(call).await {
                // The time spent answering is not the tool's: a declined call took none.
                started = Instant::now();
                ToolOutput::err(declined)
            } else {
                // The time spent waiting for an answer is not the tool's.
                started = Instant::now();
                self.run_tool(call).await
            };
            let duration_ms = started.elapsed().as_millis() as u64;
            self.emitter.emit(Event::ToolFinished {
                step,
                call_id: call.id.clone(),
                tool: call.name.clone(),
                ok: result.ok,
                output: result.output.clone(),
                duration_ms,
            });
            self.journal(&JournalOp::ToolFinished {
                step,
                call_id: call.id.clone(),
                ok: result.ok,
            });
            self.push_message(Message::tool_result(call, result.output, step));
            if let Some((status, output, error)) = ending {
                let why = match status {
                    Status::Submitted => "not run: the task was submitted",
                    _ => "not run: the run ended",
                };
                self.answer_unrun(step, &calls[i + 1..], why);
                return StepEnd::Finish(status, output, error);
            }
            let over_cost = self
                .limits
                .cost_usd
                .is_some_and(|limit| self.doc.totals.cost_usd >= limit);
            if over_cost && call.name == "delegate" {
                // A subagent's spending can cross the limit between responses.
                self.answer_unrun(
                    step,
                    &calls[i + 1..],
                    "not run: the run's cost limit was reached",
                );
                return StepEnd::Finish(Status::CostLimit, Value::Null, None);
            }
            if let Some(cause) = self.stop.pending() {
                self.answer_unrun(step, &calls[i + 1..], "not run: the run was stopped");
                return StepEnd::Finish(stop_status(cause), Value::Null, None);
            }
        }
        StepEnd::Continue
    }

    /// The failed result the model gets when the run's approval gate
    /// declines `call`; `None` when it may run (always, without a gate).
    async fn declined(&self, call: &ToolCall) -> Option<String> {
        let Some(gate) = &self.jobs.approvals else {
            return None;
        };
        let at = Where {
            cwd: &self.tool_ctx.cwd,
            stop: &self.stop,
            emitter: &self.emitter,
        };
        match gate.review(call, at).await {
            Review::Run => None,
            Review::Declined(result) => Some(result),
        }
    }

    /// Runs one tool call (not `submit`) between the pre- and post-tool
    /// hooks. A failing pre-tool hook blocks the call; a failing post-tool
    /// hook's message is added to the result.
    async fn run_tool(&mut self, call: &ToolCall) -> ToolOutput {
        let payload = serde_json::json!({
            "tool": call.name,
            "arguments": call.arguments,
            "call_id": call.id,
        });
        let cwd = self.tool_ctx.cwd.clone();
        if let Some(refusal) =
            hooks::run_all(&self.jobs.hooks.pre_tool, &payload, &cwd, &self.stop).await
        {
            return ToolOutput::err(format!("blocked: the {}", refusal.describe("pre_tool")));
        }
        let mut result = if call.name == "delegate" && self.jobs.subagent.is_some() {
            self.delegate(&call.arguments).await
        } else {
            match self.tools.get(&call.name) {
                Some(tool) => tool.run(&call.arguments, &self.tool_ctx).await,
                None => ToolOutput::err(format!("unknown tool '{}'", call.name)),
            }
        };
        if !self.jobs.hooks.post_tool.is_empty() {
            let mut payload = payload;
            payload["ok"] = Value::Bool(result.ok);
            payload["output"] = Value::String(result.output.clone());
            if let Some(refusal) =
                hooks::run_all(&self.jobs.hooks.post_tool, &payload, &cwd, &self.stop).await
            {
                result
                    .output
                    .push_str(&format!("\n[{}]", refusal.describe("post_tool")));
            }
        }
        result
    }

    /// Answers calls that will not run, so the history stays well formed.
    pub(super) fn answer_unrun(&mut self, step: u32, calls: &[ToolCall], why: &str) {
        for call in calls {
            self.push_message(Message::tool_result(call, why, step));
        }
    }
}

/// What the model is told of a call whose arguments were over their bound
/// (SPEC 4: refused like garbled arguments, so it can send smaller calls).
fn oversized(size: u64) -> String {
    let mib = |bytes: usize| bytes >> 20;
    format!(
        "this call was not run: its arguments ({size} bytes) were over the limit on a tool call's arguments ({} MiB for one call, {} MiB for all the calls of one reply), so they were dropped; send the work in smaller calls (a large file in several parts)",
        mib(MAX_CALL_ARGUMENTS),
        mib(MAX_REPLY_ARGUMENTS),
    )
}
