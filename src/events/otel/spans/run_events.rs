//! What an event adds to an open run span: the run's own attributes at its
//! start, a span event for a model switch, a compaction or an outage wait
//! (SPEC 18), and a reply's finish reason and (captured) output on the
//! pending chat span.

use opentelemetry::trace::Span as _;
use opentelemetry::KeyValue;
use serde_json::json;

use super::super::values::{as_i64, bounded, input_messages, output_messages, strings};
use super::RunSpans;
use crate::events::{Event, ToolCallView};

/// The run's model, fallback models, the run it resumes and (when content
/// is captured) its task, as attributes of its span.
pub(super) fn run_started(
    run: &mut RunSpans,
    capture: bool,
    task: &str,
    model: &str,
    fallback_models: &[String],
    resumed_from: Option<&str>,
) {
    run.span
        .set_attribute(KeyValue::new("tinyagent.model", model.to_string()));
    if !fallback_models.is_empty() {
        run.span.set_attribute(KeyValue::new(
            "tinyagent.fallback_models",
            strings(fallback_models),
        ));
    }
    if let Some(from) = resumed_from {
        run.span
            .set_attribute(KeyValue::new("tinyagent.resumed_from", from.to_string()));
    }
    if capture {
        run.span
            .set_attribute(KeyValue::new("gen_ai.input.messages", input_messages(task)));
    }
}

/// The span event an event becomes on its run's span, with its attributes:
/// a model fallback or restore, a compaction, an outage wait's start or
/// end. `None` for any other event.
pub(super) fn span_event(event: &Event) -> Option<(&'static str, Vec<KeyValue>)> {
    let (name, attributes) = match event {
        Event::ModelFallback {
            step,
            from,
            to,
            reason,
            attempts,
        } => (
            "tinyagent.model.fallback",
            vec![
                KeyValue::new("from", from.clone()),
                KeyValue::new("to", to.clone()),
                KeyValue::new("reason", reason.to_string()),
                KeyValue::new("attempts", i64::from(*attempts)),
                KeyValue::new("step", i64::from(*step)),
            ],
        ),
        Event::ModelRestore { step, from, to } => (
            "tinyagent.model.restore",
            vec![
                KeyValue::new("from", from.clone()),
                KeyValue::new("to", to.clone()),
                KeyValue::new("step", i64::from(*step)),
            ],
        ),
        Event::ContextCompacted {
            step,
            model,
            tokens_before,
            tokens_after,
        } => (
            "tinyagent.context.compacted",
            vec![
                KeyValue::new("model", model.clone()),
                KeyValue::new("tokens_before", as_i64(*tokens_before)),
                KeyValue::new("tokens_after", as_i64(*tokens_after)),
                KeyValue::new("step", i64::from(*step)),
            ],
        ),
        Event::OutageWaiting {
            step,
            models,
            until,
            ..
        } => {
            let down: Vec<String> = models
                .iter()
                .map(|m| format!("{}: {}", m.model, m.reason))
                .collect();
            (
                "tinyagent.outage.waiting",
                vec![
                    KeyValue::new("models", strings(&down)),
                    KeyValue::new("until", until.clone()),
                    KeyValue::new("step", i64::from(*step)),
                ],
            )
        }
        Event::OutageOver {
            step,
            model,
            waited_seconds,
            probes,
        } => (
            "tinyagent.outage.over",
            vec![
                KeyValue::new("model", model.clone()),
                KeyValue::new("waited_seconds", *waited_seconds),
                KeyValue::new("probes", i64::from(*probes)),
                KeyValue::new("step", i64::from(*step)),
            ],
        ),
        _ => return hedge_span_event(event),
    };
    Some((name, attributes))
}

/// The span event of a hedge (SPEC 23), sent or settled.
fn hedge_span_event(event: &Event) -> Option<(&'static str, Vec<KeyValue>)> {
    Some(match event {
        Event::ModelHedge {
            step,
            from,
            to,
            after_seconds,
        } => (
            "tinyagent.model.hedge",
            vec![
                KeyValue::new("from", from.clone()),
                KeyValue::new("to", to.clone()),
                KeyValue::new("after_seconds", *after_seconds),
                KeyValue::new("step", i64::from(*step)),
            ],
        ),
        Event::ModelHedgeSettled {
            step,
            winner,
            loser,
            winner_first_event_ms,
        } => (
            "tinyagent.model.hedge_settled",
            vec![
                KeyValue::new("winner", winner.clone()),
                KeyValue::new("loser", loser.clone()),
                KeyValue::new("winner_first_event_ms", as_i64(*winner_first_event_ms)),
                KeyValue::new("step", i64::from(*step)),
            ],
        ),
        _ => return None,
    })
}

/// The reply's finish reason on the pending chat span, if one is open.
pub(super) fn finish_reason(run: &mut RunSpans, finish_reason: &str) {
    if let Some((span, _)) = run.pending_chat.as_mut() {
        span.set_attribute(KeyValue::new(
            "gen_ai.response.finish_reasons",
            strings(&[finish_reason.to_string()]),
        ));
    }
}

/// The reply's text and tool calls as the pending chat span's output
/// messages, if one is open (only when content is captured).
pub(super) fn reply_output(run: &mut RunSpans, text: &str, tool_calls: &[ToolCallView]) {
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
