//! The agent loop: steps, tool calls, limits and statuses. The only place
//! that decides when a run ends. It never sees a provider type: models come
//! as a `ChainModel`, tools as a `ToolRegistry`, and everything leaves
//! through events and the trajectory.

mod answer;
pub(crate) mod compact;
pub(crate) mod hooks;
pub(crate) mod instructions;
mod prompt;
mod record;
mod request;
pub(crate) mod schema;
mod setup;
pub(crate) mod subagent;
mod tool_calls;
pub(crate) mod usage;

use std::time::Instant;

use serde_json::Value;

use crate::conversation::{FinishReason, Message, Role, ToolCall, ToolSpec};
use crate::events::{DownModel, Emitter, Event, ToolCallView};
use crate::exit::Status;
use crate::model::chain::ChainModel;
use crate::stop::{Stop, StopCause};
use crate::tools::delegate::delegate_spec;
use crate::tools::plan::SharedPlan;
use crate::tools::{submit_spec, ToolCtx, ToolRegistry};
use crate::trajectory::{Checkpoint, Trajectory};

use answer::{FinalAnswer, Ruling};
pub(crate) use prompt::system_prompt;
pub(crate) use setup::job_options;

/// A reply cut off this many times in a row ends the run.
const MAX_TRUNCATIONS: u32 = 3;

/// Step and cost limits (the time limit lives in `Stop`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Limits {
    pub steps: Option<u32>,
    pub cost_usd: Option<f64>,
}

/// Per-request options from settings.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestOptions {
    pub max_output_tokens: Option<u32>,
    pub reasoning_effort: Option<String>,
    pub output_schema: Option<Value>,
}

/// What unattended jobs and long tasks add to a run: the output schema,
/// compaction, hooks and subagents.
pub(crate) struct JobOptions {
    /// `--output-schema`: a final answer must be JSON valid against it.
    pub output_schema: Option<schema::OutputSchema>,
    pub compaction: compact::CompactionPolicy,
    pub hooks: hooks::Hooks,
    /// With `subagents` configured: the `delegate` tool's child chain.
    pub subagent: Option<subagent::Subagent>,
    /// Appended to the system prompt (a subagent's role).
    pub system_note: Option<String>,
    /// Asks a person before commands and file changes run (SPEC 20);
    /// `None` (`--approval auto`) asks nothing.
    pub approvals: Option<std::sync::Arc<dyn crate::approval::Gate>>,
}

/// Counters that bound the loop's retries of a final answer or a reply.
#[derive(Debug, Default)]
struct Counters {
    /// Cut-off replies in a row.
    truncations: u32,
    /// Final answers refused by the output schema in a row.
    invalid_answers: u32,
    /// Stop-hook rounds that failed.
    stop_hook_failures: u32,
    /// Whether this step's reply tried to finish.
    answered_this_step: bool,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub status: Status,
    /// The process exit code (75 for an outage, else the status's).
    pub exit_code: i32,
    pub output: Value,
    pub error: Option<String>,
    pub steps: u32,
    /// After an outage (exit 75): every model with its last reason.
    pub down: Vec<DownModel>,
}

/// One run's loop and everything it needs: built by `Agent::new` (the run
/// in `lib.rs`, a subagent in `subagent.rs`), its state private to the loop.
pub(crate) struct Agent {
    chain: ChainModel,
    tools: ToolRegistry,
    emitter: Emitter,
    stop: Stop,
    limits: Limits,
    options: RequestOptions,
    tool_ctx: ToolCtx,
    plan: SharedPlan,
    /// The run as recorded so far; its `messages` are the conversation.
    doc: Trajectory,
    checkpoint: Option<Checkpoint>,
    /// Switches recorded before this process (resume).
    prior_switches: usize,
    /// Hedges recorded before this process (resume).
    prior_hedges: usize,
    jobs: JobOptions,
    /// What servers said about token counts: bases for size estimates,
    /// windows named in overflow errors, models warned about.
    meter: usage::TokenMeter,
}

/// What a run's loop is built from besides its document.
pub(crate) struct Parts {
    pub chain: ChainModel,
    pub tools: ToolRegistry,
    pub emitter: Emitter,
    pub stop: Stop,
    pub limits: Limits,
    pub options: RequestOptions,
    /// The working directory tools run in.
    pub cwd: std::path::PathBuf,
    /// The plan the `plan` tool writes (the document's, shared).
    pub plan: SharedPlan,
    pub jobs: JobOptions,
}

impl Agent {
    /// An agent that continues `doc` (new or resumed), writing `checkpoint`
    /// when there is one.
    pub(crate) fn new(parts: Parts, doc: Trajectory, checkpoint: Option<Checkpoint>) -> Agent {
        Agent {
            chain: parts.chain,
            tools: parts.tools,
            emitter: parts.emitter,
            tool_ctx: ToolCtx {
                cwd: parts.cwd,
                stop: parts.stop.clone(),
            },
            stop: parts.stop,
            limits: parts.limits,
            options: parts.options,
            plan: parts.plan,
            prior_switches: doc.model_switches.len(),
            prior_hedges: doc.hedges.len(),
            doc,
            checkpoint,
            jobs: parts.jobs,
            meter: usage::TokenMeter::default(),
        }
    }

    /// Whether a final answer must be JSON (`--output-schema`).
    pub(crate) fn answers_json(&self) -> bool {
        self.jobs.output_schema.is_some()
    }

    /// The run's document as it stands.
    pub(crate) fn doc(&self) -> &Trajectory {
        &self.doc
    }
}

enum StepEnd {
    Continue,
    Finish(Status, Value, Option<String>),
    /// `error` because every model it could ask failed on a transient or
    /// quota cause (exit 75): each with its last reason.
    Outage {
        error: String,
        down: Vec<DownModel>,
    },
}

impl Agent {
    /// Runs the loop to its end and returns the outcome with the finished
    /// document (an interactive follow-up continues it); `run.finished` has
    /// been emitted and the trajectory finished when this returns.
    pub(crate) async fn run_keeping_doc(
        mut self,
        new_messages: Vec<Message>,
    ) -> (Outcome, Trajectory) {
        let outcome = self.run_mut(new_messages).await;
        (outcome, self.doc)
    }

    /// `run` without consuming the agent (a subagent's chain is reused).
    async fn run_mut(&mut self, new_messages: Vec<Message>) -> Outcome {
        let started = Instant::now();
        for message in new_messages {
            self.push_message(message);
        }
        let mut system = system_prompt(&self.tool_ctx.cwd);
        if let Some(note) = &self.jobs.system_note {
            system.push_str("\n\n");
            system.push_str(note);
        }
        if self.options.output_schema.is_none() {
            self.options.output_schema = self.jobs.output_schema.as_ref().map(|s| s.value.clone());
        }
        let mut counters = Counters::default();
        // Every model with its last reason, after an outage (exit 75).
        let mut outage = None;

        let (status, output, error) = loop {
            if let Some(limit) = self.limits.steps {
                if self.doc.steps >= limit {
                    break (Status::StepLimit, Value::Null, None);
                }
            }
            if let Some(cause) = self.stop.pending() {
                break (stop_status(cause), Value::Null, None);
            }
            // Recomputed each step: an MCP server that died has its tools withdrawn.
            let mut tool_specs: Vec<ToolSpec> = self.tools.available_specs();
            if self.jobs.subagent.is_some() {
                tool_specs.push(delegate_spec());
            }
            tool_specs.push(submit_spec(self.options.output_schema.as_ref()));
            let end = self.step(&system, &tool_specs, &mut counters).await;
            if !std::mem::take(&mut counters.answered_this_step) {
                counters.invalid_answers = 0;
            }
            match end {
                StepEnd::Continue => {}
                StepEnd::Finish(status, output, error) => break (status, output, error),
                StepEnd::Outage { error, down } => {
                    outage = Some(down);
                    break (Status::Error, Value::Null, Some(error));
                }
            }
        };
        self.finish(status, output, error, started, outage)
    }

    async fn step(
        &mut self,
        system: &str,
        tool_specs: &[ToolSpec],
        counters: &mut Counters,
    ) -> StepEnd {
        let step = self.doc.steps.saturating_add(1);
        self.emitter.emit(Event::StepStarted {
            step,
            model: self.chain.active_spec().to_string(),
        });
        let mut compacted = false;
        if self.needs_compaction(system, tool_specs) {
            match self.compact(step, system, tool_specs, false).await {
                Ok(shrank) => compacted = shrank,
                Err(end) => return end,
            }
        }
        let (mut answer, chars) = match self
            .request_answer(step, system, tool_specs, compacted)
            .await
        {
            Ok(answered) => answered,
            Err(end) => return end,
        };

        // The step counts once a response arrived.
        self.doc.steps = step;
        let usage_estimated = self.account(&mut answer, chars, true);
        let response = answer.response;
        self.doc.active_model = answer.spec.clone();
        self.emitter.emit(Event::ModelResponse {
            step,
            model: answer.spec.clone(),
            input_tokens: response.usage.input_tokens,
            output_tokens: response.usage.output_tokens,
            cached_input_tokens: response.usage.cached_input_tokens,
            cache_write_tokens: response.usage.cache_write_tokens,
            cost_usd: answer.cost_usd,
            finish_reason: response.finish.as_str().to_string(),
            usage_estimated,
        });
        self.emitter.emit(Event::AssistantMessage {
            step,
            model: answer.spec.clone(),
            text: response.text.clone(),
            tool_calls: response
                .tool_calls
                .iter()
                .map(|c| ToolCallView {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
                .collect(),
        });
        let calls = response.tool_calls.clone();
        self.push_message(Message {
            tool_calls: response.tool_calls,
            model: Some(answer.spec),
            extra: response.extra,
            ..Message::new(Role::Assistant, response.text.clone(), step)
        });
        // The response's totals are durable before any of its tools runs.
        self.journal_state();

        let end = self
            .after_response(step, &response.text, response.finish, &calls, counters)
            .await;
        self.journal_state();
        end
    }

    async fn after_response(
        &mut self,
        step: u32,
        text: &str,
        finish: FinishReason,
        calls: &[ToolCall],
        counters: &mut Counters,
    ) -> StepEnd {
        let over_cost = self
            .limits
            .cost_usd
            .is_some_and(|limit| self.doc.totals.cost_usd >= limit);
        if over_cost && !calls.is_empty() {
            self.answer_unrun(step, calls, "not run: the run's cost limit was reached");
            return StepEnd::Finish(Status::CostLimit, Value::Null, None);
        }
        if finish == FinishReason::Length {
            counters.truncations += 1;
            self.answer_unrun(
                step,
                calls,
                "not run: your reply was cut off before this call was complete",
            );
            if counters.truncations >= MAX_TRUNCATIONS {
                return StepEnd::Finish(
                    Status::OutputTruncated,
                    Value::Null,
                    Some(format!("the model's reply was cut off {MAX_TRUNCATIONS} times in a row (output token limit)")),
                );
            }
            self.push_message(Message::new(
                Role::User,
                "Your last reply was cut off by the output token limit, so none of its tool calls ran. Continue with a shorter reply, for example by splitting large file writes.",
                step,
            ));
            return StepEnd::Continue;
        }
        counters.truncations = 0;
        if calls.is_empty() {
            // A final answer stands even when it crossed the cost limit.
            return match self
                .check_answer(FinalAnswer::Text(text.to_string()), counters)
                .await
            {
                Ruling::Accept(output) => StepEnd::Finish(Status::Completed, output, None),
                Ruling::Reject(message) => {
                    self.push_message(Message::new(Role::User, message, step));
                    StepEnd::Continue
                }
                Ruling::Fail(error) => StepEnd::Finish(Status::Error, Value::Null, Some(error)),
            };
        }
        self.run_tools(step, calls, counters).await
    }
}

fn stop_status(cause: StopCause) -> Status {
    match cause {
        StopCause::Interrupted => Status::Interrupted,
        StopCause::TimeLimit => Status::TimeLimit,
    }
}
