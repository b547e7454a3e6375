//! The event vocabulary (SPEC section 6), the emitter that stamps each
//! event with `seq`, `ts` and `run_id` and fans it out to sinks
//! (`emitter.rs`), and the stderr lines every mode prints.
//!
//! Events are the only way out of the agent loop: the terminal view, the
//! `--json` stream, the log database and the stderr fallback lines all read
//! the same `EventRecord`.

mod emitter;
pub(crate) mod github;
pub(crate) mod human;
pub(crate) mod jsonl;
pub(crate) mod otel;
pub mod sqlite;

#[cfg(test)]
use emitter::envelope;
pub use emitter::{Emitter, Sink};

use std::time::Duration;

use serde::Serialize;

use crate::exit::Status;
use crate::reason::{FailureReason, SwitchReason};
use serde_json::Value;

/// A tool call as shown in `assistant.message`.
#[derive(Debug, Clone, Serialize)]
pub struct ToolCallView {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

/// A model that is down and its last failure reason, as `outage.waiting`
/// lists them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DownModel {
    pub model: String,
    pub reason: SwitchReason,
}

/// How an outage wait stands (SPEC 18), for its stderr line and countdown.
/// Not an event: `outage.waiting` is emitted once; this goes to sinks
/// (`Sink::outage_progress`) as the wait goes on.
#[derive(Debug, Clone)]
pub struct OutageNotice {
    /// Every model with its last reason.
    pub models: Vec<DownModel>,
    /// How much longer the run waits at most.
    pub left: Duration,
    /// When this run tries a model next.
    pub next_try: Duration,
    /// A line is due: a log that is not a terminal shows the run is alive.
    pub remind: bool,
}

impl OutageNotice {
    /// The stderr line, with the time left in place of the whole wait.
    pub(crate) fn line(&self) -> String {
        outage_line(&self.models, self.left, self.next_try)
    }
}

/// One event of a run. Each variant's `strum` name is its wire `type`
/// (`type_name`), which the envelope puts first; serde writes the fields.
#[derive(Debug, Clone, Serialize, strum::IntoStaticStr)]
#[serde(untagged)]
pub enum Event {
    #[strum(serialize = "run.started")]
    RunStarted {
        task: String,
        model: String,
        cwd: String,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        fallback_models: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        resumed_from: Option<String>,
        /// The worktree created by `--worktree` (an addition to SPEC's fields).
        #[serde(skip_serializing_if = "Option::is_none")]
        worktree: Option<String>,
        /// The project instruction files used (SPEC 14).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        instructions: Vec<String>,
    },
    #[strum(serialize = "step.started")]
    StepStarted { step: u32, model: String },
    #[strum(serialize = "provider.retry")]
    ProviderRetry {
        step: u32,
        model: String,
        attempt: u32,
        next_attempt: u32,
        wait_seconds: f64,
        reason: FailureReason,
        /// For `timeout`: the first-event or idle deadline that ran out.
        #[serde(skip_serializing_if = "Option::is_none")]
        deadline_seconds: Option<f64>,
        /// For `network`: what failed (`could not resolve host <host>`,
        /// `connection refused`, ...), for the retry line (SPEC 4); not in
        /// `--json`, where `reason` says `network`.
        #[serde(skip)]
        cause: Option<String>,
    },
    #[strum(serialize = "model.attempt_reset")]
    AttemptReset { step: u32, model: String },
    /// A wait before a request to stay under the member's rate limit
    /// (SPEC 17, 24); `limit` is `requests` or `tokens`, `source`
    /// `published`, `declared` or `learned`.
    #[strum(serialize = "provider.paced")]
    ProviderPaced {
        step: u32,
        model: String,
        wait_seconds: f64,
        limit: String,
        source: String,
        /// The declared or learned window (`24 requests/min`), for the
        /// human line only.
        #[serde(skip)]
        rate: Option<String>,
    },
    /// A rate limit learned or changed from a refusal, or grown
    /// (`reason` `increase`) (SPEC 24).
    #[strum(serialize = "provider.limit_learned")]
    LimitLearned {
        step: u32,
        model: String,
        requests_per_minute: u64,
        reason: String,
    },
    #[strum(serialize = "model.fallback")]
    ModelFallback {
        step: u32,
        from: String,
        to: String,
        reason: SwitchReason,
        attempts: u32,
    },
    #[strum(serialize = "model.restore")]
    ModelRestore { step: u32, from: String, to: String },
    /// A late first event: the request also went to `to` (SPEC 23).
    #[strum(serialize = "model.hedge")]
    ModelHedge {
        step: u32,
        from: String,
        to: String,
        after_seconds: f64,
    },
    /// A hedge's race was won at `winner`'s first event.
    #[strum(serialize = "model.hedge_settled")]
    ModelHedgeSettled {
        step: u32,
        winner: String,
        loser: String,
        winner_first_event_ms: u64,
    },
    #[strum(serialize = "model.response")]
    ModelResponse {
        step: u32,
        model: String,
        /// The whole prompt, cache reads and writes included.
        input_tokens: u64,
        output_tokens: u64,
        /// The part of the input read from a prompt cache (SPEC 25).
        cached_input_tokens: u64,
        /// The part of the input written to a prompt cache.
        cache_write_tokens: u64,
        cost_usd: f64,
        finish_reason: String,
        /// The provider reported no usage: the tokens are estimated.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        usage_estimated: bool,
    },
    #[strum(serialize = "assistant.message")]
    AssistantMessage {
        step: u32,
        model: String,
        text: String,
        tool_calls: Vec<ToolCallView>,
    },
    #[strum(serialize = "tool.started")]
    ToolStarted {
        step: u32,
        call_id: String,
        tool: String,
        arguments: Value,
    },
    #[strum(serialize = "tool.finished")]
    ToolFinished {
        step: u32,
        call_id: String,
        tool: String,
        ok: bool,
        output: String,
        duration_ms: u64,
    },
    #[strum(serialize = "context.compacted")]
    ContextCompacted {
        step: u32,
        model: String,
        tokens_before: u64,
        tokens_after: u64,
    },
    /// Every model is down and the run waits for one (SPEC 18).
    #[strum(serialize = "outage.waiting")]
    OutageWaiting {
        step: u32,
        models: Vec<DownModel>,
        /// RFC 3339: when the wait runs out.
        until: String,
        /// The whole wait, for the stderr line; not in `--json`.
        #[serde(skip)]
        wait: Duration,
        /// When the run tries a model first, for the stderr line; not in `--json`.
        #[serde(skip)]
        next_try: Duration,
    },
    /// A model answered again and the run goes on (SPEC 18).
    #[strum(serialize = "outage.over")]
    OutageOver {
        step: u32,
        model: String,
        waited_seconds: f64,
        /// The requests this run sent during the wait, the answered one included.
        probes: u32,
    },
    #[strum(serialize = "warning")]
    Warning { message: String },
    /// A subagent's start, in its parent's stream and numbering.
    #[strum(serialize = "subagent.started")]
    SubagentStarted {
        step: u32,
        child_run_id: String,
        task: String,
        model: String,
    },
    /// A subagent's end, in its parent's stream and numbering.
    #[strum(serialize = "subagent.finished")]
    SubagentFinished {
        step: u32,
        child_run_id: String,
        status: Status,
        steps: u32,
        cost_usd: f64,
        output: Value,
    },
    /// `--check`: the verdict on one model (SPEC section 15).
    #[strum(serialize = "check.result")]
    CheckResult {
        model: String,
        ok: bool,
        /// The SPEC 4 failure reason; null when the model answered.
        reason: Option<FailureReason>,
        /// The vendor's short message on failure (an addition to SPEC's fields).
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        first_event_ms: Option<u64>,
        /// Whether the reply called the offered tool; null on failure.
        tool_calls: Option<bool>,
        priced: bool,
        /// Where a cloud member's credentials were found (SPEC 22).
        #[serde(skip_serializing_if = "Option::is_none")]
        credentials: Option<String>,
        /// The human verdict line; not in `--json`.
        #[serde(skip)]
        line: String,
    },
    /// `--check`: one rate limit of a model and where it came from (SPEC
    /// 24; an addition to SPEC's events).
    #[strum(serialize = "check.limit")]
    CheckLimit {
        model: String,
        /// `24 requests/min`.
        limit: String,
        /// `declared` or `learned`.
        source: String,
        /// The human line; not in `--json`.
        #[serde(skip)]
        line: String,
    },
    /// `--check`: one budget (SPEC 19) and its current period, after the
    /// models' verdicts (an addition to SPEC's events).
    #[strum(serialize = "check.budget")]
    CheckBudget {
        /// The cap in USD.
        usd: f64,
        /// `hour`, `day`, `week` or `month`.
        per: String,
        /// The model spec it is for (only for a model's budget).
        #[serde(skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// The provider it is for (only for a provider's budget).
        #[serde(skip_serializing_if = "Option::is_none")]
        provider: Option<String>,
        /// What the current period has spent, in USD.
        spent_usd: f64,
        /// Whether the cap is reached (runs it applies to send nothing more).
        exhausted: bool,
        /// When the current period ends (RFC 3339, UTC).
        resets_at: String,
        /// The human line; not in `--json`.
        #[serde(skip)]
        line: String,
    },
    /// `--check`: the shared health record (SPEC 13) could not be used, a
    /// failed check like a model's (an addition to SPEC's events): a run
    /// with this setup would go on without it.
    #[strum(serialize = "check.health")]
    CheckHealth {
        /// The record: its file, or its Redis URL without the password.
        health_db: String,
        ok: bool,
        /// Why it cannot be used.
        message: String,
        /// The human line; not in `--json`.
        #[serde(skip)]
        line: String,
    },
    /// `--check`: every verdict is in; `ok` when all models answered.
    #[strum(serialize = "check.finished")]
    CheckFinished { ok: bool, failed: u32 },
    #[strum(serialize = "run.finished")]
    RunFinished {
        status: Status,
        exit_code: i32,
        steps: u32,
        input_tokens: u64,
        output_tokens: u64,
        cost_usd: f64,
        duration_ms: u64,
        model_fallbacks: u32,
        active_model: String,
        output: Value,
        error: Option<String>,
        /// After an outage (exit 75): every model with its last reason, for
        /// the summary line (SPEC 6); not in `--json`, where `error` says it.
        #[serde(skip)]
        down: Vec<DownModel>,
        /// The run's totals of prompt-cache reads and writes (SPEC 25), for
        /// the summary line's `· N% cached` and the traces; not in `--json`
        /// (SPEC 6 lists `run.finished`'s fields), where the trajectory's
        /// totals and `model.response` carry them.
        #[serde(skip)]
        cache: CacheTotals,
    },
}

/// A run's prompt-cache totals as `run.finished` hands them to the sinks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CacheTotals {
    pub cached_input_tokens: u64,
    pub cache_write_tokens: u64,
}

impl Event {
    /// The wire `type` of this event.
    pub(crate) fn type_name(&self) -> &'static str {
        self.into()
    }

    /// The step an event belongs to, when it has one.
    pub(crate) fn step(&self) -> Option<u32> {
        match self {
            Event::StepStarted { step, .. }
            | Event::ProviderRetry { step, .. }
            | Event::AttemptReset { step, .. }
            | Event::ProviderPaced { step, .. }
            | Event::LimitLearned { step, .. }
            | Event::ModelFallback { step, .. }
            | Event::ModelRestore { step, .. }
            | Event::ModelHedge { step, .. }
            | Event::ModelHedgeSettled { step, .. }
            | Event::ModelResponse { step, .. }
            | Event::AssistantMessage { step, .. }
            | Event::ToolStarted { step, .. }
            | Event::ToolFinished { step, .. }
            | Event::ContextCompacted { step, .. }
            | Event::OutageWaiting { step, .. }
            | Event::OutageOver { step, .. }
            | Event::SubagentStarted { step, .. }
            | Event::SubagentFinished { step, .. } => Some(*step),
            Event::RunStarted { .. }
            | Event::Warning { .. }
            | Event::CheckResult { .. }
            | Event::CheckBudget { .. }
            | Event::CheckLimit { .. }
            | Event::CheckHealth { .. }
            | Event::CheckFinished { .. }
            | Event::RunFinished { .. } => None,
        }
    }
}

/// An event as it leaves the emitter: the typed event plus its envelope and
/// the exact JSON object that `--json` prints.
#[derive(Debug, Clone)]
pub struct EventRecord {
    pub seq: u64,
    pub ts: String,
    pub run_id: String,
    /// Set on a subagent's events: the run that delegated to it.
    pub parent_run_id: Option<String>,
    pub event: Event,
    /// `type`, `seq`, `ts`, `run_id` (and `parent_run_id` for a subagent),
    /// then the event's own fields.
    pub json: Value,
}

/// One request sent to a model (every attempt, probes and subagents
/// included). Not an `Event`: it has no `seq` and is not in `--json`.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    pub step: u32,
    /// The spec, e.g. `openai/gpt-5`.
    pub model: String,
    /// The part of the spec before `/`.
    pub provider: String,
    /// `scheme://host:port` only, never a path, query or credentials.
    pub endpoint: Option<String>,
    /// 1, 2, ... within this model and step.
    pub attempt: u32,
    /// RFC 3339 UTC.
    pub started_at: String,
    /// Time from sending to the first stream event; `None` when none came.
    pub first_event_ms: Option<u64>,
    pub duration_ms: u64,
    /// How it ended: `ok`, a SPEC section 4 failure reason, `interrupted`
    /// or `hedged_out`.
    pub outcome: crate::reason::RequestOutcome,
    /// The response's status (200 for a success); `None` when no response came.
    pub http_status: Option<u16>,
    /// Time waited before sending it to stay under a rate limit (SPEC 17).
    pub paced_ms: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The part of the input read from a prompt cache (SPEC 25).
    pub cached_input_tokens: u64,
    /// The part of the input written to a prompt cache.
    pub cache_write_tokens: u64,
    pub cost_usd: f64,
    /// The model name the server says answered, when it says.
    pub response_model: Option<String>,
}

/// Prints the fallback and restore lines SPEC requires on stderr in every
/// mode (`--json` and `-q` included).
pub(crate) struct SwitchNotices;

impl Sink for SwitchNotices {
    fn handle(&mut self, record: &EventRecord) {
        if let Some(line) = switch_line(&record.event).or_else(|| outage_event_line(&record.event))
        {
            eprintln!("{line}");
        }
    }

    fn outage_progress(&mut self, notice: &OutageNotice) {
        if notice.remind {
            eprintln!("{}", notice.line());
        }
    }
}

/// `outage: every model is down (<spec>: <reason>, ...); waiting up to
/// <DURATION>, next try in <N>s` (SPEC 18).
pub(crate) fn outage_line(models: &[DownModel], wait: Duration, next_try: Duration) -> String {
    let list: Vec<String> = models
        .iter()
        .map(|m| format!("{}: {}", m.model, m.reason))
        .collect();
    format!(
        "outage: every model is down ({}); waiting up to {}, next try in {}s",
        list.join(", "),
        crate::duration::compact(wait),
        next_try.as_secs_f64().ceil() as u64
    )
}

/// The stderr line of an outage event: the wait begins, or it is over.
pub(crate) fn outage_event_line(event: &Event) -> Option<String> {
    match event {
        Event::OutageWaiting {
            models,
            wait,
            next_try,
            ..
        } => Some(outage_line(models, *wait, *next_try)),
        Event::OutageOver {
            step,
            model,
            waited_seconds,
            probes,
        } => Some(format!(
            "outage over: {model} answered again after {} ({probes} request{}), going on with step {step}",
            crate::duration::compact_seconds(Duration::try_from_secs_f64(*waited_seconds).unwrap_or_default()),
            if *probes == 1 { "" } else { "s" }
        )),
        _ => None,
    }
}

/// The stderr line for a switch or restore event.
pub(crate) fn switch_line(event: &Event) -> Option<String> {
    match event {
        Event::ModelFallback {
            step,
            from,
            to,
            reason,
            ..
        } => Some(format!(
            "model fallback: {from} -> {to} ({reason}) at step {step}"
        )),
        Event::ModelRestore { step, from, to } => {
            Some(format!("model restore: {from} -> {to} at step {step}"))
        }
        Event::LimitLearned {
            model,
            requests_per_minute,
            ..
        } => Some(format!(
            "rate limit learned: {model} at {requests_per_minute} requests/min"
        )),
        Event::ModelHedge {
            step,
            from,
            to,
            after_seconds,
        } => Some(format!(
            "model hedge: {from} + {to} at step {step} ({after_seconds:.1}s without a first event)"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
