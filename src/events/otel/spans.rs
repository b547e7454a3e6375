//! The trace sink's own thread: the notes the sink hands over become
//! OpenTelemetry spans named and attributed by the GenAI semantic
//! conventions, batched and exported over OTLP/HTTP (`batch`). Building
//! the exporter, every span and every export happen here, never on the run's
//! thread, and on no other thread. What an event adds to an open run span
//! is in `run_events`.

mod run_events;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Span as _, SpanId, SpanKind, Status, TraceContextExt, TraceId, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, Span};

use super::batch::short_reason;
use super::batch::Batches;
use super::export::{self, OtelConfig};
use super::inbox::{Inbox, Note, LOOK_EVERY};
use super::values::{as_i64, bounded, host_port, output_messages, timestamp, RunEnd};
use crate::events::{Event, RequestRecord};
use crate::exit::Status as RunStatus;
use crate::reason::RequestOutcome;

/// How long a flush at a run's end may export: a little less than the sink
/// waits for its answer, so that the answer says why it failed.
const FLUSH_WITHIN: Duration = export::FLUSH_BUDGET.saturating_sub(Duration::from_millis(100));

/// The trace every run of this process joins, as the sink decided it.
pub(super) struct Trace {
    /// The trace from `TRACEPARENT`, or an empty context.
    pub upstream: Context,
    /// The top run's trace: `TRACEPARENT`'s, else a new one.
    pub trace_id: TraceId,
}

/// Runs the thread: builds the exporter, then applies notes until the sink
/// closes the inbox or asks for the shutdown.
pub(super) fn work(config: OtelConfig, trace: Trace, inbox: Arc<Inbox>) {
    let mut spans = match export::start(&config) {
        Ok((provider, batches)) => Ok(Spans::new(provider, batches, &config, trace)),
        // The reason tracing is off answers every flush.
        Err(e) => Err(e.to_string()),
    };
    loop {
        let within = match &spans {
            Ok(spans) => spans
                .batches
                .due_in()
                .map_or(LOOK_EVERY, |d| d.min(LOOK_EVERY)),
            Err(_) => LOOK_EVERY,
        };
        let Some(notes) = inbox.take(within) else {
            break;
        };
        for note in notes {
            match (&mut spans, note) {
                (Ok(spans), note) => {
                    if spans.apply(note) {
                        return;
                    }
                }
                (Err(reason), Note::Flush { done, .. } | Note::Shutdown { done, .. }) => {
                    let _ = done.send(Some(reason.clone()));
                }
                (Err(_), _) => {}
            }
        }
        if let Ok(spans) = &mut spans {
            spans.batches.export_due();
        }
    }
    if let Ok(spans) = &mut spans {
        // The sink went away without a shutdown: nothing more is waited for.
        let _ = spans.batches.shutdown(Duration::ZERO);
    }
}

/// One run's open spans.
struct RunSpans {
    span: Span,
    /// Open tool calls by `call_id`.
    tools: HashMap<String, Span>,
    /// The last successful request's span, kept open until the reply's
    /// finish reason (and, when captured, its text) has been seen.
    pending_chat: Option<(Span, SystemTime)>,
}

/// Every open span of the process's runs.
struct Spans {
    /// Kept alive for the tracer; its spans gather in `batches`.
    _provider: SdkTracerProvider,
    tracer: SdkTracer,
    batches: Batches,
    capture: bool,
    trace: Trace,
    runs: HashMap<String, RunSpans>,
    /// Open tool calls, innermost last, as (run_id, call_id).
    open_tools: Vec<(String, String)>,
}

impl Spans {
    fn new(
        provider: SdkTracerProvider,
        batches: Batches,
        config: &OtelConfig,
        trace: Trace,
    ) -> Spans {
        let scope = InstrumentationScope::builder("tinyagent")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let tracer = provider.tracer_with_scope(scope);
        Spans {
            _provider: provider,
            tracer,
            batches,
            capture: config.capture_content,
            trace,
            runs: HashMap::new(),
            open_tools: Vec::new(),
        }
    }

    /// Applies one note; true once the shutdown is done.
    fn apply(&mut self, note: Note) -> bool {
        match note {
            Note::Event {
                ts,
                run_id,
                parent_run_id,
                event,
                span_id,
            } => {
                let at = timestamp(&ts);
                self.event(&run_id, parent_run_id.as_deref(), at, &event, span_id);
            }
            Note::Request {
                run_id,
                parent_run_id,
                record,
            } => self.chat(&run_id, parent_run_id.as_deref(), &record),
            Note::Flush {
                run_id,
                finished,
                done,
            } => {
                if let Some(end) = RunEnd::of(&finished) {
                    self.end_run(&run_id, end, SystemTime::now());
                }
                let outcome = self.batches.export_all(FLUSH_WITHIN).err();
                let _ = done.send(
                    self.batches
                        .first_failure()
                        .or_else(|| outcome.as_ref().map(short_reason)),
                );
            }
            Note::Shutdown { wait, done } => {
                self.runs.clear();
                let outcome = self.batches.shutdown(wait).err();
                let _ = done.send(
                    self.batches
                        .first_failure()
                        .or_else(|| outcome.as_ref().map(short_reason)),
                );
                return true;
            }
        }
        false
    }

    /// The run's spans, opening the run span when its first event arrives.
    fn run(&mut self, run_id: &str, parent_run_id: Option<&str>, at: SystemTime) -> &mut RunSpans {
        if !self.runs.contains_key(run_id) {
            let parent = match parent_run_id {
                Some(parent) => self.context_in(parent),
                None => self.trace.upstream.clone(),
            };
            let mut attributes = vec![
                KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                KeyValue::new("gen_ai.agent.name", "tinyagent"),
                KeyValue::new("tinyagent.run_id", run_id.to_string()),
            ];
            if let Some(parent) = parent_run_id {
                attributes.push(KeyValue::new("tinyagent.parent_run_id", parent.to_string()));
            }
            let span = self
                .tracer
                .span_builder("invoke_agent tinyagent")
                .with_kind(SpanKind::Internal)
                .with_start_time(at)
                .with_attributes(attributes)
                .with_trace_id(self.trace.trace_id)
                .start_with_context(&self.tracer, &parent);
            self.runs.insert(
                run_id.to_string(),
                RunSpans {
                    span,
                    tools: HashMap::new(),
                    pending_chat: None,
                },
            );
        }
        self.runs.get_mut(run_id).expect("inserted above")
    }

    /// The context new spans of `run_id` start in: its innermost open tool
    /// call (a subagent runs inside `delegate`), else the run span.
    fn context_in(&self, run_id: &str) -> Context {
        let Some(run) = self.runs.get(run_id) else {
            return self.trace.upstream.clone();
        };
        let tool = self
            .open_tools
            .iter()
            .rev()
            .find(|(r, _)| r == run_id)
            .and_then(|(_, call)| run.tools.get(call));
        let span = tool.unwrap_or(&run.span);
        Context::new().with_remote_span_context(span.span_context().clone())
    }

    #[allow(clippy::too_many_arguments)]
    fn tool_started(
        &mut self,
        run_id: &str,
        parent_run_id: Option<&str>,
        at: SystemTime,
        step: Option<u32>,
        call_id: &str,
        tool: &str,
        args: &serde_json::Value,
        span_id: Option<SpanId>,
    ) {
        close_pending(self.run(run_id, parent_run_id, at));
        let run_id = run_id.to_string();
        let parent = self.context_in(&run_id);
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", tool.to_string()),
            KeyValue::new("gen_ai.tool.call.id", call_id.to_string()),
            KeyValue::new("gen_ai.tool.type", "function"),
        ];
        if let Some(step) = step {
            attributes.push(KeyValue::new("tinyagent.step", i64::from(step)));
        }
        if self.capture {
            attributes.push(KeyValue::new(
                "gen_ai.tool.call.arguments",
                bounded(&args.to_string()),
            ));
        }
        let mut builder = self
            .tracer
            .span_builder(format!("execute_tool {tool}"))
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes(attributes);
        builder.span_id = span_id;
        let span = builder.start_with_context(&self.tracer, &parent);
        if let Some(run) = self.runs.get_mut(&run_id) {
            run.tools.insert(call_id.to_string(), span);
        }
        self.open_tools.push((run_id, call_id.to_string()));
    }

    fn tool_finished(
        &mut self,
        run_id: &str,
        at: SystemTime,
        call_id: &str,
        ok: bool,
        output: &str,
    ) {
        self.open_tools
            .retain(|(r, c)| !(r == run_id && c == call_id));
        let capture = self.capture;
        if let Some(mut span) = self
            .runs
            .get_mut(run_id)
            .and_then(|run| run.tools.remove(call_id))
        {
            if capture {
                span.set_attribute(KeyValue::new("gen_ai.tool.call.result", bounded(output)));
            }
            if !ok {
                span.set_attribute(KeyValue::new("error.type", "tool_error"));
                span.set_status(Status::error("the tool call failed"));
            }
            span.end_with_timestamp(at);
        }
    }

    /// A `chat <model>` span for one request sent to a model. A failed one
    /// ends at once; a successful one waits for its reply's finish reason.
    fn chat(&mut self, run_id: &str, parent_run_id: Option<&str>, record: &RequestRecord) {
        let start = timestamp(&record.started_at);
        let end = start + Duration::from_millis(record.duration_ms);
        close_pending(self.run(run_id, parent_run_id, start));
        let parent = self.context_in(run_id);
        let model_id = record
            .model
            .strip_prefix(&format!("{}/", record.provider))
            .unwrap_or(&record.model)
            .to_string();
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", record.provider.clone()),
            KeyValue::new("gen_ai.request.model", model_id.clone()),
            KeyValue::new("gen_ai.usage.input_tokens", as_i64(record.input_tokens)),
            KeyValue::new("gen_ai.usage.output_tokens", as_i64(record.output_tokens)),
            KeyValue::new(
                "gen_ai.usage.cache_read.input_tokens",
                as_i64(record.cached_input_tokens),
            ),
            KeyValue::new(
                "gen_ai.usage.cache_creation.input_tokens",
                as_i64(record.cache_write_tokens),
            ),
            KeyValue::new("tinyagent.model", record.model.clone()),
            KeyValue::new("tinyagent.attempt", i64::from(record.attempt)),
            KeyValue::new("tinyagent.step", i64::from(record.step)),
            KeyValue::new("tinyagent.cost_usd", record.cost_usd),
        ];
        let ok = record.outcome == RequestOutcome::Ok;
        if ok {
            let answered = record.response_model.clone().unwrap_or(model_id);
            attributes.push(KeyValue::new("gen_ai.response.model", answered));
        } else {
            attributes.push(KeyValue::new("error.type", record.outcome.to_string()));
        }
        if let Some((host, port)) = record.endpoint.as_deref().and_then(host_port) {
            attributes.push(KeyValue::new("server.address", host));
            attributes.push(KeyValue::new("server.port", port));
        }
        if let Some(status) = record.http_status {
            attributes.push(KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            ));
        }
        if let Some(ms) = record.first_event_ms {
            attributes.push(KeyValue::new("tinyagent.first_event_ms", as_i64(ms)));
        }
        let mut span = self
            .tracer
            .span_builder(format!("chat {}", record.model))
            .with_kind(SpanKind::Client)
            .with_start_time(start)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        if ok {
            if let Some(run) = self.runs.get_mut(run_id) {
                run.pending_chat = Some((span, end));
            }
        } else {
            span.set_status(Status::error(record.outcome.to_string()));
            span.end_with_timestamp(end);
        }
    }

    /// Ends a run span with how the run ended.
    fn end_run(&mut self, run_id: &str, end: RunEnd<'_>, at: SystemTime) {
        let Some(mut run) = self.runs.remove(run_id) else {
            return;
        };
        self.open_tools.retain(|(r, _)| r != run_id);
        close_pending(&mut run);
        for (_, mut tool) in run.tools.drain() {
            tool.end_with_timestamp(at);
        }
        run.span
            .set_attribute(KeyValue::new("tinyagent.status", end.status.to_string()));
        run.span.set_attributes(end.totals);
        if matches!(end.status, RunStatus::Error | RunStatus::OutputTruncated) {
            run.span
                .set_attribute(KeyValue::new("error.type", end.status.to_string()));
            let description = match (self.capture, end.error) {
                (true, Some(error)) => bounded(error),
                _ => format!("the run ended with status {}", end.status),
            };
            run.span.set_status(Status::error(description));
        }
        if self.capture && !end.output.is_null() {
            let text = match end.output {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            run.span.set_attribute(KeyValue::new(
                "gen_ai.output.messages",
                output_messages(&text, &[], None),
            ));
        }
        run.span.end_with_timestamp(at);
    }
}

impl Spans {
    /// Applies one event of a run: opens, annotates or ends its spans.
    fn event(
        &mut self,
        run_id: &str,
        parent: Option<&str>,
        at: SystemTime,
        event: &Event,
        span_id: Option<SpanId>,
    ) {
        let capture = self.capture;
        match event {
            Event::RunStarted {
                task,
                model,
                fallback_models,
                resumed_from,
                ..
            } => run_events::run_started(
                self.run(run_id, parent, at),
                capture,
                task,
                model,
                fallback_models,
                resumed_from.as_deref(),
            ),
            Event::StepStarted { .. } => close_pending(self.run(run_id, parent, at)),
            Event::ModelFallback { .. }
            | Event::ModelRestore { .. }
            | Event::ModelHedge { .. }
            | Event::ModelHedgeSettled { .. }
            | Event::ContextCompacted { .. }
            | Event::OutageWaiting { .. }
            | Event::OutageOver { .. } => {
                let run = self.run(run_id, parent, at);
                if let Some((name, attributes)) = run_events::span_event(event) {
                    run.span.add_event_with_timestamp(name, at, attributes);
                }
            }
            Event::ModelResponse { finish_reason, .. } => {
                run_events::finish_reason(self.run(run_id, parent, at), finish_reason)
            }
            Event::AssistantMessage {
                text, tool_calls, ..
            } => {
                let run = self.run(run_id, parent, at);
                if capture {
                    run_events::reply_output(run, text, tool_calls);
                }
                close_pending(run);
            }
            Event::ToolStarted {
                step,
                call_id,
                tool,
                arguments,
            } => self.tool_started(
                run_id,
                parent,
                at,
                Some(*step),
                call_id,
                tool,
                arguments,
                span_id,
            ),
            Event::ToolFinished {
                call_id,
                ok,
                output,
                ..
            } => self.tool_finished(run_id, at, call_id, *ok, output),
            Event::RunFinished { .. } => {
                if let Some(end) = RunEnd::of(event) {
                    self.end_run(run_id, end, at);
                }
            }
            // A subagent's run span opens and ends with the parent's
            // `subagent.*` events (its own start and end are not in the stream).
            Event::SubagentStarted {
                child_run_id,
                model,
                ..
            } => {
                let child = self.run(child_run_id, Some(run_id), at);
                child
                    .span
                    .set_attribute(KeyValue::new("tinyagent.model", model.clone()));
            }
            Event::SubagentFinished {
                child_run_id,
                status,
                steps,
                cost_usd,
                output,
                ..
            } => {
                let end = RunEnd::of_subagent(*status, *steps, *cost_usd, output);
                self.end_run(child_run_id, end, at);
            }
            Event::ProviderRetry { .. }
            | Event::ProviderPaced { .. }
            | Event::LimitLearned { .. }
            | Event::AttemptReset { .. }
            | Event::Warning { .. }
            | Event::CheckResult { .. }
            | Event::CheckBudget { .. }
            | Event::CheckLimit { .. }
            | Event::CheckHealth { .. }
            | Event::CheckFinished { .. } => {}
        }
    }
}

/// Ends the pending chat span at the time its request ended.
fn close_pending(run: &mut RunSpans) {
    if let Some((mut span, end)) = run.pending_chat.take() {
        span.end_with_timestamp(end);
    }
}
