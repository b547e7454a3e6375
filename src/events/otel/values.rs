//! Conversions from tinyagent's data to span data: how a run ended, W3C
//! trace context in and out, times, attribute values, and captured content
//! in the GenAI conventions' shapes, bounded.

use std::collections::HashMap;
use std::time::SystemTime;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanId, TraceId, TraceState};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::json;

use crate::events::Event;
use crate::exit::Status;

/// Largest captured text (prompt, answer, arguments, output) per attribute.
pub(super) const MAX_CONTENT_CHARS: usize = 16 * 1024;

/// How a run ended: its status, totals, answer and error.
pub(super) struct RunEnd<'a> {
    pub(super) status: Status,
    pub(super) totals: Vec<KeyValue>,
    pub(super) output: &'a serde_json::Value,
    pub(super) error: Option<&'a str>,
}

impl<'a> RunEnd<'a> {
    /// From a `run.finished`.
    pub(super) fn of(event: &'a Event) -> Option<RunEnd<'a>> {
        let Event::RunFinished {
            status,
            exit_code,
            steps,
            input_tokens,
            output_tokens,
            cost_usd,
            model_fallbacks,
            active_model,
            output,
            error,
            cache,
            ..
        } = event
        else {
            return None;
        };
        Some(RunEnd {
            status: *status,
            totals: vec![
                KeyValue::new("tinyagent.exit_code", i64::from(*exit_code)),
                KeyValue::new("tinyagent.steps", i64::from(*steps)),
                KeyValue::new("gen_ai.usage.input_tokens", as_i64(*input_tokens)),
                KeyValue::new("gen_ai.usage.output_tokens", as_i64(*output_tokens)),
                KeyValue::new(
                    "gen_ai.usage.cache_read.input_tokens",
                    as_i64(cache.cached_input_tokens),
                ),
                KeyValue::new(
                    "gen_ai.usage.cache_creation.input_tokens",
                    as_i64(cache.cache_write_tokens),
                ),
                KeyValue::new("tinyagent.cost_usd", *cost_usd),
                KeyValue::new("tinyagent.model_fallbacks", i64::from(*model_fallbacks)),
                KeyValue::new("tinyagent.active_model", active_model.clone()),
            ],
            output,
            error: error.as_deref(),
        })
    }

    /// A subagent's end, from its parent's `subagent.finished` (the
    /// subagent's own `run.finished` is not in the stream).
    pub(super) fn of_subagent(
        status: Status,
        steps: u32,
        cost_usd: f64,
        output: &'a serde_json::Value,
    ) -> RunEnd<'a> {
        RunEnd {
            status,
            totals: vec![
                KeyValue::new("tinyagent.steps", i64::from(steps)),
                KeyValue::new("tinyagent.cost_usd", cost_usd),
            ],
            output,
            error: None,
        }
    }
}

/// The trace context in `TRACEPARENT` / `TRACESTATE`.
pub(super) fn extract(traceparent: &str, tracestate: Option<&str>) -> Context {
    let mut carrier = HashMap::new();
    carrier.insert("traceparent".to_string(), traceparent.to_string());
    if let Some(state) = tracestate {
        carrier.insert("tracestate".to_string(), state.to_string());
    }
    TraceContextPropagator::new().extract(&carrier)
}

/// `TRACEPARENT` (and `TRACESTATE` when there is one) for a span of the
/// trace, written as the W3C propagator writes them.
pub(super) fn spawn_vars(
    trace_id: TraceId,
    span_id: SpanId,
    sampled: bool,
    state: &TraceState,
) -> Vec<(String, String)> {
    let flags = if sampled { "01" } else { "00" };
    let mut vars = vec![(
        "TRACEPARENT".to_string(),
        format!("00-{trace_id}-{span_id}-{flags}"),
    )];
    let state = state.header();
    if !state.is_empty() {
        vars.push(("TRACESTATE".to_string(), state));
    }
    vars
}

/// An event's RFC 3339 time, or now when it does not parse.
pub(super) fn timestamp(ts: &str) -> SystemTime {
    humantime::parse_rfc3339_weak(ts).unwrap_or_else(|_| SystemTime::now())
}

/// Host and port of a `scheme://host:port` origin.
pub(super) fn host_port(origin: &str) -> Option<(String, i64)> {
    let url = reqwest::Url::parse(origin).ok()?;
    let host = url.host_str()?.to_string();
    Some((host, i64::from(url.port_or_known_default()?)))
}

pub(super) fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(super) fn strings(items: &[String]) -> Value {
    Value::Array(Array::String(
        items.iter().map(|s| StringValue::from(s.clone())).collect(),
    ))
}

/// Text cut to `MAX_CONTENT_CHARS`, marked when cut.
pub(super) fn bounded(text: &str) -> String {
    match text.char_indices().nth(MAX_CONTENT_CHARS) {
        Some((cut, _)) => format!("{}…[truncated]", &text[..cut]),
        None => text.to_string(),
    }
}

/// `gen_ai.input.messages` for a task: one user message.
pub(super) fn input_messages(task: &str) -> String {
    json!([{"role": "user", "parts": [{"type": "text", "content": bounded(task)}]}]).to_string()
}

/// `gen_ai.output.messages`: one assistant message with its text and tool
/// calls.
pub(super) fn output_messages(
    text: &str,
    calls: &[serde_json::Value],
    finish: Option<&str>,
) -> String {
    let mut parts = Vec::new();
    if !text.is_empty() {
        parts.push(json!({"type": "text", "content": bounded(text)}));
    }
    parts.extend(calls.iter().cloned());
    let mut message = json!({"role": "assistant", "parts": parts});
    if let Some(finish) = finish {
        message["finish_reason"] = json!(finish);
    }
    json!([message]).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TraceContextExt;

    #[test]
    fn traceparent_round_trips_as_the_propagator_writes_it() {
        use opentelemetry::trace::SpanContext;
        let cx = extract(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            Some("vendor=abc"),
        );
        let sc = cx.span().span_context().clone();
        assert!(sc.is_valid() && sc.is_sampled());
        let vars = spawn_vars(sc.trace_id(), sc.span_id(), true, sc.trace_state());
        assert_eq!(
            vars,
            [
                (
                    "TRACEPARENT".to_string(),
                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_string()
                ),
                ("TRACESTATE".to_string(), "vendor=abc".to_string()),
            ]
        );
        // The same as the SDK's propagator, unsampled and without a state.
        let span = SpanId::from(7);
        let unsampled = SpanContext::new(
            sc.trace_id(),
            span,
            opentelemetry::trace::TraceFlags::default(),
            false,
            TraceState::default(),
        );
        let mut carrier: HashMap<String, String> = HashMap::new();
        TraceContextPropagator::new().inject_context(
            &Context::new().with_remote_span_context(unsampled),
            &mut carrier,
        );
        assert_eq!(
            spawn_vars(sc.trace_id(), span, false, &TraceState::default()),
            [("TRACEPARENT".to_string(), carrier["traceparent"].clone())]
        );
        assert!(!extract("garbage", None).span().span_context().is_valid());
    }

    #[test]
    fn captured_text_is_bounded() {
        let long = "é".repeat(MAX_CONTENT_CHARS + 10);
        let cut = bounded(&long);
        assert!(cut.ends_with("…[truncated]"));
        assert_eq!(
            cut.chars().count(),
            MAX_CONTENT_CHARS + "…[truncated]".chars().count()
        );
        assert_eq!(bounded("short"), "short");
    }

    #[test]
    fn event_times_parse_and_origins_split() {
        let t = timestamp("2026-12-01T09:51:07.123Z");
        let ms = t
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        assert_eq!(ms % 1000, 123);
        assert_eq!(
            host_port("https://api.openai.com:443"),
            Some(("api.openai.com".to_string(), 443))
        );
        assert_eq!(host_port("not a url"), None);
    }
}
