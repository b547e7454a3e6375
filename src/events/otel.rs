//! The trace sink (SPEC 16): the event stream and the per-request records
//! become OpenTelemetry spans named and attributed by the GenAI semantic
//! conventions, exported over OTLP/HTTP in the background.
//!
//! Spans: `invoke_agent tinyagent` per run (a subagent's is a child of the
//! `execute_tool delegate` span that started it), `chat <model>` per request
//! sent to a model, `execute_tool <name>` per tool call; switches and
//! restores are span events on the run span. Nothing of a prompt, an answer,
//! a tool's arguments or output is recorded unless
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`.

mod client;
mod export;
mod values;

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, Span};
use serde_json::json;

use super::{Event, EventRecord, RequestRecord, Sink};
pub use export::OtelConfig;
use export::{short_reason, Failures, FLUSH_BUDGET};
use values::{
    as_i64, bounded, extract, host_port, inject, input_messages, output_messages, strings,
    timestamp, RunEnd,
};

/// Where the sink hands the environment variables (`TRACEPARENT`,
/// `TRACESTATE`) that commands started from now on should get.
pub type Publish = Box<dyn Fn(Vec<(String, String)>) + Send>;

/// One run's open spans.
struct RunSpans {
    span: Span,
    /// Open tool calls by `call_id`.
    tools: HashMap<String, Span>,
    /// The last successful request's span, kept open until the reply's
    /// finish reason (and, when captured, its text) has been seen.
    pending_chat: Option<(Span, SystemTime)>,
}

/// Turns events into spans; see the module notes.
pub struct OtelSink {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    failures: Failures,
    endpoint: String,
    capture: bool,
    /// The trace from `TRACEPARENT`, or an empty context.
    upstream: Context,
    runs: HashMap<String, RunSpans>,
    /// Open tool calls, innermost last, as (run_id, call_id).
    open_tools: Vec<(String, String)>,
    /// Publishes the innermost tool span's `TRACEPARENT` for `bash`.
    publish: Publish,
    warned: bool,
    shut_down: bool,
}

impl OtelSink {
    /// Starts the exporter. Returns the sink and the warnings to emit once
    /// the run has started; an exporter that cannot be built is a warning
    /// and no sink.
    pub fn start(config: OtelConfig, publish: Publish) -> (Option<OtelSink>, Vec<String>) {
        let mut warnings = config.warnings.clone();
        let (provider, failures) = match export::start(&config) {
            Ok(started) => started,
            Err(e) => {
                warnings.push(e);
                return (None, warnings);
            }
        };
        let scope = InstrumentationScope::builder("tinyagent")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let tracer = provider.tracer_with_scope(scope);
        let upstream = match &config.traceparent {
            Some(traceparent) => {
                let cx = extract(traceparent, config.tracestate.as_deref());
                if !cx.span().span_context().is_valid() {
                    warnings.push(
                        "TRACEPARENT is not a valid W3C trace context: the run starts a new trace"
                            .to_string(),
                    );
                }
                cx
            }
            None => Context::new(),
        };
        let sink = OtelSink {
            provider,
            tracer,
            failures,
            endpoint: config.endpoint,
            capture: config.capture_content,
            upstream,
            runs: HashMap::new(),
            open_tools: Vec::new(),
            publish,
            warned: false,
            shut_down: false,
        };
        (Some(sink), warnings)
    }

    /// The run's spans, opening the run span when its first event arrives.
    fn run(&mut self, run_id: &str, parent_run_id: Option<&str>, at: SystemTime) -> &mut RunSpans {
        if !self.runs.contains_key(run_id) {
            let parent = match parent_run_id {
                Some(parent) => self.context_in(parent),
                None => self.upstream.clone(),
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
            return self.upstream.clone();
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

    /// Publishes the innermost open tool span's trace context for `bash`.
    fn publish_spawn_env(&self) {
        let innermost = self
            .open_tools
            .last()
            .and_then(|(run, call)| self.runs.get(run)?.tools.get(call));
        let vars = match innermost {
            Some(span) => inject(span.span_context()),
            None => Vec::new(),
        };
        (self.publish)(vars);
    }

    fn tool_started(
        &mut self,
        record: &EventRecord,
        call_id: &str,
        tool: &str,
        args: &serde_json::Value,
    ) {
        let at = timestamp(&record.ts);
        let run_id = record.run_id.clone();
        close_pending(self.run(&run_id, record.parent_run_id.as_deref(), at));
        let parent = self.context_in(&run_id);
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", tool.to_string()),
            KeyValue::new("gen_ai.tool.call.id", call_id.to_string()),
            KeyValue::new("gen_ai.tool.type", "function"),
        ];
        if let Some(step) = record.event.step() {
            attributes.push(KeyValue::new("tinyagent.step", i64::from(step)));
        }
        if self.capture {
            attributes.push(KeyValue::new(
                "gen_ai.tool.call.arguments",
                bounded(&args.to_string()),
            ));
        }
        let span = self
            .tracer
            .span_builder(format!("execute_tool {tool}"))
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        if let Some(run) = self.runs.get_mut(&run_id) {
            run.tools.insert(call_id.to_string(), span);
        }
        self.open_tools.push((run_id, call_id.to_string()));
        self.publish_spawn_env();
    }

    fn tool_finished(&mut self, record: &EventRecord, call_id: &str, ok: bool, output: &str) {
        let at = timestamp(&record.ts);
        self.open_tools
            .retain(|(r, c)| !(r == &record.run_id && c == call_id));
        let capture = self.capture;
        if let Some(mut span) = self
            .runs
            .get_mut(&record.run_id)
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
        self.publish_spawn_env();
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
            KeyValue::new("tinyagent.model", record.model.clone()),
            KeyValue::new("tinyagent.attempt", i64::from(record.attempt)),
            KeyValue::new("tinyagent.step", i64::from(record.step)),
            KeyValue::new("tinyagent.cost_usd", record.cost_usd),
        ];
        let ok = record.outcome == "ok";
        if ok {
            let answered = record.response_model.clone().unwrap_or(model_id);
            attributes.push(KeyValue::new("gen_ai.response.model", answered));
        } else {
            attributes.push(KeyValue::new("error.type", record.outcome.clone()));
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
            span.set_status(Status::error(record.outcome.clone()));
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
        if end.status == "error" || end.status == "output_truncated" {
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
        self.publish_spawn_env();
    }

    /// Exports what is queued, waiting at most `budget`.
    fn flush(&mut self, budget: Duration) -> Option<String> {
        let provider = self.provider.clone();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("tinyagent-otel-flush".into())
            .spawn(move || {
                let _ = done_tx.send(provider.force_flush());
            });
        let outcome = match spawned {
            Ok(_) => match done_rx.recv_timeout(budget) {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(short_reason(&e)),
                Err(_) => Some(format!("not done within {}s", budget.as_secs())),
            },
            Err(_) => Some("could not start the flush".to_string()),
        };
        self.failures.first().or(outcome)
    }

    /// The one warning tracing may cost a run.
    fn warning(&mut self, reason: String) -> Option<String> {
        if self.warned {
            return None;
        }
        self.warned = true;
        Some(format!(
            "traces could not be exported to {}: {reason}",
            self.endpoint
        ))
    }

    fn shutdown(&mut self) {
        if self.shut_down {
            return;
        }
        self.shut_down = true;
        for (_, run) in self.runs.drain() {
            drop(run);
        }
        // After a failed flush the collector is not waited for again.
        let wait = if self.warned {
            Duration::ZERO
        } else {
            FLUSH_BUDGET
        };
        if let Err(e) = self.provider.shutdown_with_timeout(wait) {
            // Spans that were ended after the last flush could not be sent:
            // the stream is over, so the warning is a stderr line.
            let reason = self.failures.first().unwrap_or_else(|| short_reason(&e));
            if let Some(line) = self.warning(reason) {
                eprintln!("tinyagent: warning: {line}");
            }
        }
    }
}

impl Sink for OtelSink {
    fn handle(&mut self, record: &EventRecord) {
        let at = timestamp(&record.ts);
        let parent = record.parent_run_id.as_deref();
        let capture = self.capture;
        match &record.event {
            Event::RunStarted {
                task,
                model,
                fallback_models,
                resumed_from,
                ..
            } => {
                let run = self.run(&record.run_id, parent, at);
                run.span
                    .set_attribute(KeyValue::new("tinyagent.model", model.clone()));
                if !fallback_models.is_empty() {
                    run.span.set_attribute(KeyValue::new(
                        "tinyagent.fallback_models",
                        strings(fallback_models),
                    ));
                }
                if let Some(from) = resumed_from {
                    run.span
                        .set_attribute(KeyValue::new("tinyagent.resumed_from", from.clone()));
                }
                if capture {
                    run.span.set_attribute(KeyValue::new(
                        "gen_ai.input.messages",
                        input_messages(task),
                    ));
                }
            }
            Event::StepStarted { .. } => close_pending(self.run(&record.run_id, parent, at)),
            Event::ModelFallback {
                step,
                from,
                to,
                reason,
                attempts,
            } => {
                let run = self.run(&record.run_id, parent, at);
                run.span.add_event_with_timestamp(
                    "tinyagent.model.fallback",
                    at,
                    vec![
                        KeyValue::new("from", from.clone()),
                        KeyValue::new("to", to.clone()),
                        KeyValue::new("reason", reason.clone()),
                        KeyValue::new("attempts", i64::from(*attempts)),
                        KeyValue::new("step", i64::from(*step)),
                    ],
                );
            }
            Event::ModelRestore { step, from, to } => {
                let run = self.run(&record.run_id, parent, at);
                run.span.add_event_with_timestamp(
                    "tinyagent.model.restore",
                    at,
                    vec![
                        KeyValue::new("from", from.clone()),
                        KeyValue::new("to", to.clone()),
                        KeyValue::new("step", i64::from(*step)),
                    ],
                );
            }
            Event::ModelResponse { finish_reason, .. } => {
                let run = self.run(&record.run_id, parent, at);
                if let Some((span, _)) = run.pending_chat.as_mut() {
                    span.set_attribute(KeyValue::new(
                        "gen_ai.response.finish_reasons",
                        strings(std::slice::from_ref(finish_reason)),
                    ));
                }
            }
            Event::AssistantMessage {
                text, tool_calls, ..
            } => {
                let run = self.run(&record.run_id, parent, at);
                if capture {
                    if let Some((span, _)) = run.pending_chat.as_mut() {
                        let calls: Vec<serde_json::Value> = tool_calls
                            .iter()
                            .map(|c| json!({"type": "tool_call", "id": c.id, "name": c.name, "arguments": bounded(&c.arguments.to_string())}))
                            .collect();
                        span.set_attribute(KeyValue::new(
                            "gen_ai.output.messages",
                            output_messages(text, &calls, None),
                        ));
                    }
                }
                close_pending(run);
            }
            Event::ToolStarted {
                call_id,
                tool,
                arguments,
                ..
            } => self.tool_started(record, call_id, tool, arguments),
            Event::ToolFinished {
                call_id,
                ok,
                output,
                ..
            } => self.tool_finished(record, call_id, *ok, output),
            Event::ContextCompacted {
                step,
                model,
                tokens_before,
                tokens_after,
            } => {
                let run = self.run(&record.run_id, parent, at);
                run.span.add_event_with_timestamp(
                    "tinyagent.context.compacted",
                    at,
                    vec![
                        KeyValue::new("model", model.clone()),
                        KeyValue::new("tokens_before", as_i64(*tokens_before)),
                        KeyValue::new("tokens_after", as_i64(*tokens_after)),
                        KeyValue::new("step", i64::from(*step)),
                    ],
                );
            }
            Event::RunFinished { .. } => {
                if let Some(end) = RunEnd::of(&record.event) {
                    self.end_run(&record.run_id, end, at);
                }
            }
            // A subagent's run span opens and ends with the parent's
            // `subagent.*` events (its own start and end are not in the stream).
            Event::SubagentStarted {
                child_run_id,
                model,
                ..
            } => {
                let child = self.run(child_run_id, Some(&record.run_id), at);
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
                let end = RunEnd {
                    status,
                    totals: vec![
                        KeyValue::new("tinyagent.steps", i64::from(*steps)),
                        KeyValue::new("tinyagent.cost_usd", *cost_usd),
                    ],
                    output,
                    error: None,
                };
                self.end_run(child_run_id, end, at);
            }
            Event::ProviderRetry { .. }
            | Event::AttemptReset { .. }
            | Event::Warning { .. }
            | Event::CheckResult { .. }
            | Event::CheckFinished { .. } => {}
        }
    }

    fn model_request(&mut self, run_id: &str, parent_run_id: Option<&str>, record: &RequestRecord) {
        self.chat(run_id, parent_run_id, record);
    }

    fn before_run_finished(&mut self, run_id: &str, finished: &Event) -> Option<String> {
        if let Some(end) = RunEnd::of(finished) {
            self.end_run(run_id, end, SystemTime::now());
        }
        let reason = self.flush(FLUSH_BUDGET)?;
        self.warning(reason)
    }

    fn finish(&mut self) {
        self.shutdown();
    }
}

impl Drop for OtelSink {
    fn drop(&mut self) {
        // Never the SDK's own 5 s wait on drop.
        self.warned = true;
        self.shutdown();
    }
}

/// Ends the pending chat span at the time its request ended.
fn close_pending(run: &mut RunSpans) {
    if let Some((mut span, end)) = run.pending_chat.take() {
        span.end_with_timestamp(end);
    }
}
