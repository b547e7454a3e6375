//! Subagents: the `delegate` tool runs a child agent with its own context,
//! read-only tools (within config `tools: {allow, deny}`) and the
//! `subagents` model chain, and hands back only its
//! report. The child's tokens and cost are added to the parent's totals and
//! its cost limit is what the parent has left; its steps are its own (capped
//! by `subagents.step_limit`) and do not count as the parent's.
//!
//! The child's events go to the parent's sinks with the child's `run_id`, a
//! `parent_run_id`, and their own `seq` (see `Emitter::child`). Its start
//! and end are the parent's `subagent.started` and `subagent.finished`
//! (SPEC 6: a stream holds one `run.started` and one `run.finished`).

use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::{Agent, JobOptions, Limits, Parts, RequestOptions};
use crate::conversation::{Message, Role};
use crate::events::Event;
use crate::exit::Status;
use crate::model::chain::ChainModel;
use crate::tools::delegate::{subagent_note, subagent_tools};
use crate::tools::filter::ToolFilter;
use crate::tools::{str_arg, ToolOutput};
use crate::trajectory::Trajectory;

/// What the parent keeps between delegations: the child chain (so its
/// stickiness and cooldowns carry over) and the child's limits.
pub(crate) struct Subagent {
    /// `None` only while a child runs.
    pub chain: Option<ChainModel>,
    pub fallback_models: Vec<String>,
    pub step_limit: u32,
    /// Config `tools: {allow, deny}`: it limits the child's tools too.
    pub tools: ToolFilter,
}

impl Subagent {
    pub(crate) fn new(
        chain: ChainModel,
        fallback_models: Vec<String>,
        step_limit: u32,
        tools: ToolFilter,
    ) -> Subagent {
        Subagent {
            chain: Some(chain),
            fallback_models,
            step_limit,
            tools,
        }
    }
}

impl Agent {
    /// Runs one `delegate` call: a child agent on `task`, its totals added
    /// to this run's. The result is the child's report, or an error saying
    /// how the child ended.
    pub(super) async fn delegate(&mut self, args: &Value) -> ToolOutput {
        let task = match str_arg(args, "task") {
            Ok(task) if !task.trim().is_empty() => task.to_string(),
            Ok(_) => return ToolOutput::err("the task is empty"),
            Err(e) => return ToolOutput::err(e.to_string()),
        };
        let Some(sub) = self.jobs.subagent.as_mut() else {
            return ToolOutput::err("unknown tool 'delegate': no subagents are configured");
        };
        let Some(chain) = sub.chain.take() else {
            return ToolOutput::err("a subagent is already running");
        };
        let step_limit = sub.step_limit;
        let fallback_models = sub.fallback_models.clone();
        let tools = subagent_tools(&sub.tools);
        let note = subagent_note(&tools);

        let run_id = uuid::Uuid::new_v4().to_string();
        let emitter = self.emitter.child(&run_id);
        let model = chain.active_spec().to_string();
        let cwd = self.tool_ctx.cwd.display().to_string();
        let step = self.doc.steps;
        self.emitter.emit(Event::SubagentStarted {
            step,
            child_run_id: run_id.clone(),
            task: task.clone(),
            model: model.clone(),
        });
        let remaining_cost = self
            .limits
            .cost_usd
            .map(|limit| (limit - self.doc.totals.cost_usd).max(0.0));
        // The child's record lives in memory only: no checkpoint.
        let doc = Trajectory::new(&run_id, &task, &model, fallback_models, &cwd);
        let parts = Parts {
            chain,
            tools,
            emitter,
            stop: self.stop.clone(),
            limits: Limits {
                steps: Some(step_limit),
                cost_usd: remaining_cost,
            },
            options: RequestOptions::default(),
            cwd: self.tool_ctx.cwd.clone(),
            plan: Arc::new(Mutex::new(Vec::new())),
            jobs: JobOptions {
                output_schema: None,
                compaction: self.jobs.compaction,
                hooks: super::hooks::Hooks {
                    stop: Vec::new(),
                    ..self.jobs.hooks.clone()
                },
                subagent: None,
                system_note: Some(note),
                approvals: self.jobs.approvals.clone(),
            },
        };
        let mut child = Agent::new(parts, doc, None);
        let outcome = Box::pin(child.run_mut(vec![Message::new(Role::User, task, 0)])).await;

        let child_totals = child.doc.totals;
        if let Some(sub) = self.jobs.subagent.as_mut() {
            sub.chain = Some(child.chain);
        }
        self.doc.totals += child_totals;
        self.emitter.emit(Event::SubagentFinished {
            step,
            child_run_id: run_id,
            status: outcome.status,
            steps: outcome.steps,
            cost_usd: child_totals.cost_usd,
            output: outcome.output.clone(),
        });
        match outcome.status {
            Status::Submitted | Status::Completed => ToolOutput::ok(match outcome.output {
                Value::String(text) => text,
                Value::Null => String::new(),
                other => other.to_string(),
            }),
            status => ToolOutput::err(format!(
                "the subagent ended with status {} after {} steps without a report{}",
                status.as_str(),
                outcome.steps,
                outcome.error.map(|e| format!(": {e}")).unwrap_or_default()
            )),
        }
    }
}
