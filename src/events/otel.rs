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
//!
//! The sink itself only copies what spans need and hands it to a thread of
//! its own (`spans`), woken once per few dozen events, where the exporter is
//! built and the spans made; the run's thread waits for tracing only at the
//! end, for the last batch. The one thing it decides itself is each tool
//! span's id, so that `bash` gets the span's `TRACEPARENT` at once.

mod batch;
mod client;
mod export;
mod inbox;
mod spans;
mod values;

use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};

use super::{Event, EventRecord, RequestRecord, Sink};
pub(crate) use export::OtelConfig;
use export::FLUSH_BUDGET;
use inbox::{Inbox, Note};
use spans::Trace;
use values::{extract, spawn_vars};

/// Where the sink hands the environment variables (`TRACEPARENT`,
/// `TRACESTATE`) that commands started from now on should get.
pub(crate) type Publish = Box<dyn Fn(Vec<(String, String)>) + Send>;

/// Notes that gather before the sink's thread is woken: one wake-up per
/// this many events (the thread also looks on its own every second).
const WAKE_EVERY: usize = 48;

/// Turns events into spans on its own thread; see the module notes.
pub(crate) struct OtelSink {
    inbox: Arc<Inbox>,
    endpoint: String,
    capture: bool,
    trace_id: TraceId,
    sampled: bool,
    trace_state: TraceState,
    ids: RandomIdGenerator,
    /// Open tool calls, innermost last, as (run_id, call_id, span id).
    open_tools: Vec<(String, String, SpanId)>,
    /// Publishes the innermost tool span's `TRACEPARENT` for `bash`.
    publish: Publish,
    /// Notes handed over since the last flush.
    unflushed: bool,
    warned: bool,
    shut_down: bool,
}

impl OtelSink {
    /// Starts the tracing thread. Returns the sink and the warnings to emit
    /// once the run has started; tracing that cannot start is a warning and
    /// no sink.
    pub(crate) fn start(config: OtelConfig, publish: Publish) -> (Option<OtelSink>, Vec<String>) {
        let mut warnings = config.warnings.clone();
        if let Some(invalid) = config.invalid() {
            warnings.push(invalid.to_string());
            return (None, warnings);
        }
        let ids = RandomIdGenerator::default();
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
            None => opentelemetry::Context::new(),
        };
        let joined = upstream.span().span_context().clone();
        let (trace_id, sampled, trace_state) = if joined.is_valid() {
            (
                joined.trace_id(),
                joined.is_sampled(),
                joined.trace_state().clone(),
            )
        } else {
            (ids.new_trace_id(), true, TraceState::default())
        };
        let inbox = Arc::new(Inbox::default());
        let theirs = inbox.clone();
        let endpoint = config.endpoint.clone();
        let capture = config.capture_content;
        let trace = Trace { upstream, trace_id };
        let spawned = std::thread::Builder::new()
            .name("tinyagent-otel".into())
            .spawn(move || spans::work(config, trace, theirs));
        if let Err(e) = spawned {
            warnings.push(format!("tracing is off: its thread could not start: {e}"));
            return (None, warnings);
        }
        let sink = OtelSink {
            inbox,
            endpoint,
            capture,
            trace_id,
            sampled,
            trace_state,
            ids,
            open_tools: Vec::new(),
            publish,
            unflushed: false,
            warned: false,
            shut_down: false,
        };
        (Some(sink), warnings)
    }

    /// Hands a note to the sink's thread.
    fn keep(&mut self, note: Note) {
        self.unflushed = true;
        self.inbox.put(note, false, WAKE_EVERY);
    }

    /// Hands over `ask` (a flush or the shutdown) and waits at most `budget`
    /// for its answer: a failure reason, if any.
    fn ask(
        &mut self,
        ask: impl FnOnce(Sender<Option<String>>) -> Note,
        budget: Duration,
    ) -> Option<String> {
        let (done, answer) = mpsc::channel();
        self.inbox.put(ask(done), true, WAKE_EVERY);
        self.unflushed = false;
        match answer.recv_timeout(budget) {
            Ok(reason) => reason,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                Some(format!("not done within {}s", budget.as_secs()))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Some("the exporter stopped".to_string()),
        }
    }

    /// Publishes the innermost open tool span's trace context for `bash`.
    fn publish_spawn_env(&self) {
        let vars = match self.open_tools.last() {
            Some((_, _, span_id)) => {
                spawn_vars(self.trace_id, *span_id, self.sampled, &self.trace_state)
            }
            None => Vec::new(),
        };
        (self.publish)(vars);
    }

    /// Forgets the open tool calls of a run that ended.
    fn run_ended(&mut self, run_id: &str) {
        self.open_tools.retain(|(r, _, _)| r != run_id);
        self.publish_spawn_env();
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
        // After a failed flush the collector is not waited for again; after
        // a flush with nothing since, there is nothing left to wait for.
        if self.warned || !self.unflushed {
            self.inbox.put(
                Note::Shutdown {
                    wait: Duration::ZERO,
                    done: mpsc::channel().0,
                },
                true,
                WAKE_EVERY,
            );
            self.inbox.close();
            return;
        }
        let reason = self.ask(
            |done| Note::Shutdown {
                wait: FLUSH_BUDGET,
                done,
            },
            FLUSH_BUDGET + Duration::from_millis(100),
        );
        self.inbox.close();
        // Spans ended after the last flush could not be sent: the stream is
        // over, so the warning is a stderr line.
        if let Some(line) = reason.and_then(|r| self.warning(r)) {
            eprintln!("tinyagent: warning: {line}");
        }
    }
}

/// An event with what spans do not use left out: content unless it is
/// captured, and events no span shows.
fn slim(event: &Event, capture: bool) -> Option<Event> {
    let event = match event {
        Event::ProviderRetry { .. }
        | Event::AttemptReset { .. }
        | Event::Warning { .. }
        | Event::CheckResult { .. }
        | Event::CheckBudget { .. }
        | Event::CheckLimit { .. }
        | Event::CheckHealth { .. }
        | Event::CheckFinished { .. } => return None,
        _ if capture => event.clone(),
        Event::RunStarted {
            model,
            fallback_models,
            resumed_from,
            ..
        } => Event::RunStarted {
            task: String::new(),
            model: model.clone(),
            cwd: String::new(),
            fallback_models: fallback_models.clone(),
            resumed_from: resumed_from.clone(),
            worktree: None,
            instructions: Vec::new(),
        },
        Event::AssistantMessage { step, model, .. } => Event::AssistantMessage {
            step: *step,
            model: model.clone(),
            text: String::new(),
            tool_calls: Vec::new(),
        },
        Event::ToolStarted {
            step,
            call_id,
            tool,
            ..
        } => Event::ToolStarted {
            step: *step,
            call_id: call_id.clone(),
            tool: tool.clone(),
            arguments: serde_json::Value::Null,
        },
        Event::ToolFinished {
            step,
            call_id,
            tool,
            ok,
            duration_ms,
            ..
        } => Event::ToolFinished {
            step: *step,
            call_id: call_id.clone(),
            tool: tool.clone(),
            ok: *ok,
            output: String::new(),
            duration_ms: *duration_ms,
        },
        Event::SubagentStarted {
            step,
            child_run_id,
            model,
            ..
        } => Event::SubagentStarted {
            step: *step,
            child_run_id: child_run_id.clone(),
            task: String::new(),
            model: model.clone(),
        },
        Event::SubagentFinished {
            step,
            child_run_id,
            status,
            steps,
            cost_usd,
            ..
        } => Event::SubagentFinished {
            step: *step,
            child_run_id: child_run_id.clone(),
            status: *status,
            steps: *steps,
            cost_usd: *cost_usd,
            output: serde_json::Value::Null,
        },
        Event::RunFinished { .. } => finished_without_content(event),
        other => other.clone(),
    };
    Some(event)
}

/// A `run.finished` without its answer and error text.
fn finished_without_content(event: &Event) -> Event {
    let mut event = event.clone();
    if let Event::RunFinished { output, error, .. } = &mut event {
        *output = serde_json::Value::Null;
        *error = None;
    }
    event
}

impl Sink for OtelSink {
    fn handle(&mut self, record: &EventRecord) {
        let Some(event) = slim(&record.event, self.capture) else {
            return;
        };
        let mut span_id = None;
        match &event {
            Event::ToolStarted { call_id, .. } => {
                let id = self.ids.new_span_id();
                span_id = Some(id);
                self.open_tools
                    .push((record.run_id.clone(), call_id.clone(), id));
                self.publish_spawn_env();
            }
            Event::ToolFinished { call_id, .. } => {
                self.open_tools
                    .retain(|(r, c, _)| !(r == &record.run_id && c == call_id));
                self.publish_spawn_env();
            }
            Event::SubagentFinished { child_run_id, .. } => self.run_ended(child_run_id),
            // The top run's end went with the flush just before it.
            Event::RunFinished { .. } if record.parent_run_id.is_none() => return,
            _ => {}
        }
        self.keep(Note::Event {
            ts: record.ts.clone(),
            run_id: record.run_id.clone(),
            parent_run_id: record.parent_run_id.clone(),
            event,
            span_id,
        });
    }

    fn model_request(&mut self, run_id: &str, parent_run_id: Option<&str>, record: &RequestRecord) {
        self.keep(Note::Request {
            run_id: run_id.to_string(),
            parent_run_id: parent_run_id.map(str::to_string),
            record: record.clone(),
        });
    }

    fn before_run_finished(&mut self, run_id: &str, finished: &Event) -> Option<String> {
        self.run_ended(run_id);
        let finished = if self.capture {
            finished.clone()
        } else {
            finished_without_content(finished)
        };
        let run_id = run_id.to_string();
        let reason = self.ask(
            |done| Note::Flush {
                run_id,
                finished,
                done,
            },
            FLUSH_BUDGET,
        )?;
        self.warning(reason)
    }

    fn finish(&mut self) {
        self.shutdown();
    }
}

impl Drop for OtelSink {
    fn drop(&mut self) {
        // Never a wait on drop beyond a flush already asked for.
        self.warned = true;
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slim_events_keep_no_content_unless_captured() {
        let started = Event::ToolStarted {
            step: 1,
            call_id: "c1".into(),
            tool: "bash".into(),
            arguments: serde_json::json!({"command": "secret"}),
        };
        let Some(Event::ToolStarted { arguments, .. }) = slim(&started, false) else {
            panic!("tool.started kept")
        };
        assert!(arguments.is_null());
        let Some(Event::ToolStarted { arguments, .. }) = slim(&started, true) else {
            panic!("tool.started kept")
        };
        assert_eq!(arguments["command"], "secret");
        let warning = Event::Warning {
            message: "x".into(),
        };
        assert!(slim(&warning, true).is_none());
    }
}
