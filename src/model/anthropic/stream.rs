//! Assembles Anthropic's streamed events (`message_start`,
//! `content_block_start/delta/stop`, `message_delta`, `ping`, `error`,
//! `message_stop`) into one `Response`. Text goes to the observer as it
//! arrives; tool input JSON is put together per block index and parsed once
//! the reply is whole.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::model::error::classify_status;
use crate::model::{FinishReason, ModelError, Response, StreamObserver, ToolCall, Usage};

/// Whether the finish marker (`message_stop`) has arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Continue,
    Finished,
}

/// One content block as it builds up.
#[derive(Debug)]
enum Block {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
    /// `redacted_thinking` and any block we only keep as it came.
    Opaque(Value),
}

/// The reply so far.
#[derive(Debug, Default)]
pub struct Assembly {
    /// In stream order; `index` is looked up among them.
    blocks: Vec<(usize, Block)>,
    tokens: Tokens,
    stop_reason: Option<String>,
}

/// Anthropic's usage counters as last reported.
#[derive(Debug, Default)]
struct Tokens {
    input: u64,
    cache_read: u64,
    cache_creation: u64,
    output: u64,
}

impl Tokens {
    /// Our `input_tokens` counts all input, cache reads and writes
    /// included; `cached_input_tokens` the cache reads.
    fn usage(&self) -> Usage {
        Usage {
            input_tokens: self.input + self.cache_read + self.cache_creation,
            output_tokens: self.output,
            cached_input_tokens: self.cache_read,
        }
    }
}

/// The fields of any streamed event we read; the rest are ignored.
#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    index: usize,
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    #[serde(default)]
    content_block: Option<Value>,
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    signature: Option<Cow<'a, str>>,
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct WireError {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}

impl Assembly {
    /// Applies one event's `data`. An in-stream `error` event fails the
    /// attempt with the status its type stands for.
    pub fn apply(
        &mut self,
        data: &[u8],
        observer: &dyn StreamObserver,
    ) -> Result<Progress, ModelError> {
        let event: WireEvent =
            serde_json::from_slice(data).map_err(|_| ModelError::StreamIncomplete)?;
        match &*event.kind {
            "message_start" => {
                if let Some(usage) = event.message.and_then(|m| m.usage) {
                    self.add_usage(&usage);
                }
            }
            "content_block_start" => {
                let block = match event.content_block {
                    Some(block) => start_block(block, observer),
                    None => return Err(ModelError::StreamIncomplete),
                };
                self.blocks.push((event.index, block));
            }
            "content_block_delta" => {
                if let Some(delta) = event.delta {
                    self.apply_delta(event.index, delta, observer)?;
                }
            }
            "message_delta" => {
                if let Some(reason) = event.delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(reason);
                }
                if let Some(usage) = event.usage {
                    self.add_usage(&usage);
                }
            }
            "message_stop" => return Ok(Progress::Finished),
            "error" => {
                return Err(stream_error(event.error.unwrap_or(WireError {
                    kind: String::new(),
                    message: String::new(),
                })))
            }
            // `ping`, `content_block_stop` and event types added later.
            _ => {}
        }
        Ok(Progress::Continue)
    }

    fn apply_delta(
        &mut self,
        index: usize,
        delta: WireDelta<'_>,
        observer: &dyn StreamObserver,
    ) -> Result<(), ModelError> {
        let block = self
            .blocks
            .iter_mut()
            .rev()
            .find(|(i, _)| *i == index)
            .map(|(_, b)| b)
            .ok_or(ModelError::StreamIncomplete)?;
        match (delta.kind.as_deref(), block) {
            (Some("text_delta"), Block::Text(text)) => {
                let piece = delta.text.unwrap_or_default();
                observer.text_delta(&piece);
                text.push_str(&piece);
            }
            (Some("input_json_delta"), Block::ToolUse { json, .. }) => {
                observer.tool_call_delta();
                json.push_str(&delta.partial_json.unwrap_or_default());
            }
            (Some("thinking_delta"), Block::Thinking { thinking, .. }) => {
                thinking.push_str(&delta.thinking.unwrap_or_default());
            }
            (Some("signature_delta"), Block::Thinking { signature, .. }) => {
                signature.push_str(&delta.signature.unwrap_or_default());
            }
            // Citations and deltas of block kinds we keep whole.
            _ => {}
        }
        Ok(())
    }

    /// Usage fields are cumulative: a later event's value replaces an
    /// earlier one, field by field.
    fn add_usage(&mut self, usage: &WireUsage) {
        let t = &mut self.tokens;
        for (slot, value) in [
            (&mut t.input, usage.input_tokens),
            (&mut t.cache_read, usage.cache_read_input_tokens),
            (&mut t.cache_creation, usage.cache_creation_input_tokens),
            (&mut t.output, usage.output_tokens),
        ] {
            if let Some(value) = value {
                *slot = value;
            }
        }
    }

    /// The whole reply. Thinking and redacted-thinking blocks (with their
    /// signatures) go to `extra` in stream order.
    pub fn finish(self) -> Response {
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        let mut kept = Vec::new();
        for (_, block) in self.blocks {
            match block {
                Block::Text(t) => text.push_str(&t),
                Block::ToolUse { id, name, json } => tool_calls.push(tool_call(id, name, json)),
                Block::Thinking {
                    thinking,
                    signature,
                } => kept.push(
                    json!({"type": "thinking", "thinking": thinking, "signature": signature}),
                ),
                Block::Opaque(value) => {
                    if value["type"] == "redacted_thinking" {
                        kept.push(value);
                    }
                }
            }
        }
        let finish = match self.stop_reason.as_deref() {
            Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
            Some("tool_use") => FinishReason::ToolCalls,
            _ if !tool_calls.is_empty() => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        };
        Response {
            text,
            tool_calls,
            usage: self.tokens.usage(),
            finish,
            extra: (!kept.is_empty()).then(|| json!({"anthropic": {"content": kept}})),
            cost_override: None,
            usage_reported: true,
        }
    }
}

fn start_block(block: Value, observer: &dyn StreamObserver) -> Block {
    let field = |name: &str| block[name].as_str().unwrap_or_default().to_string();
    match block["type"].as_str() {
        Some("text") => {
            let text = field("text");
            if !text.is_empty() {
                observer.text_delta(&text);
            }
            Block::Text(text)
        }
        Some("tool_use") => {
            observer.tool_call_delta();
            // `input` starts as `{}`; a non-empty one arrives whole.
            let json = match &block["input"] {
                Value::Object(map) if !map.is_empty() => block["input"].to_string(),
                _ => String::new(),
            };
            Block::ToolUse {
                id: field("id"),
                name: field("name"),
                json,
            }
        }
        Some("thinking") => Block::Thinking {
            thinking: field("thinking"),
            signature: field("signature"),
        },
        _ => Block::Opaque(block),
    }
}

/// A tool call from its assembled input; input that is not a JSON object
/// marks the call garbled and keeps the raw text.
pub(crate) fn tool_call(id: String, name: String, raw: String) -> ToolCall {
    let (arguments, garbled) = parse_arguments(raw);
    ToolCall {
        id,
        name,
        arguments,
        garbled,
    }
}

/// Parses streamed tool arguments: empty means `{}`; anything but a JSON
/// object is garbled, kept as the raw string.
pub(crate) fn parse_arguments(raw: String) -> (Value, bool) {
    if raw.trim().is_empty() {
        return (json!({}), false);
    }
    match serde_json::from_str::<Value>(&raw) {
        Ok(value @ Value::Object(_)) => (value, false),
        _ => (Value::String(raw), true),
    }
}

/// An in-stream `error` event as the HTTP error its type stands for.
fn stream_error(error: WireError) -> ModelError {
    let status = match error.kind.as_str() {
        "overloaded_error" => 529,
        "rate_limit_error" => 429,
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" | "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "timeout_error" => 504,
        _ => 500,
    };
    if error.kind == "billing_error" {
        return ModelError::Quota {
            status,
            message: error.message,
        };
    }
    let message: String = error.message.chars().take(300).collect();
    classify_status(status, Some(&error.kind), &message, None)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::model::ErrorClass;

    #[derive(Default)]
    struct Seen {
        text: Mutex<String>,
        tool_deltas: Mutex<usize>,
    }
    impl StreamObserver for Seen {
        fn text_delta(&self, text: &str) {
            self.text.lock().unwrap().push_str(text);
        }
        fn tool_call_delta(&self) {
            *self.tool_deltas.lock().unwrap() += 1;
        }
    }

    fn run(events: &[Value]) -> (Result<Response, ModelError>, Seen) {
        let seen = Seen::default();
        let mut a = Assembly::default();
        for e in events {
            match a.apply(e.to_string().as_bytes(), &seen) {
                Ok(Progress::Finished) => return (Ok(a.finish()), seen),
                Ok(Progress::Continue) => {}
                Err(e) => return (Err(e), seen),
            }
        }
        (Err(ModelError::StreamIncomplete), seen)
    }

    fn start(input: u64, read: u64, created: u64) -> Value {
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5", "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input, "cache_creation_input_tokens": created, "cache_read_input_tokens": read, "output_tokens": 1}}})
    }

    #[test]
    fn text_thinking_and_tool_use_assemble() {
        let events = [
            start(20, 1000, 50),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me "}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "look."}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM=="}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va=="}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "ping"}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "Listing "}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "files."}}),
            json!({"type": "content_block_stop", "index": 2}),
            json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "toolu_01", "name": "bash", "input": {}}}),
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": ""}}),
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "{\"command\": \"l"}}),
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "s\"}"}}),
            json!({"type": "content_block_stop", "index": 3}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 89}}),
            json!({"type": "message_stop"}),
        ];
        let (response, seen) = run(&events);
        let r = response.unwrap();
        assert_eq!(r.text, "Listing files.");
        assert_eq!(*seen.text.lock().unwrap(), "Listing files.");
        assert!(*seen.tool_deltas.lock().unwrap() > 0);
        assert_eq!(r.finish, FinishReason::ToolCalls);
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].id, "toolu_01");
        assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls"}));
        assert!(!r.tool_calls[0].garbled);
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 1070,
                output_tokens: 89,
                cached_input_tokens: 1000
            }
        );
        assert_eq!(
            r.extra.unwrap(),
            json!({"anthropic": {"content": [
                {"type": "thinking", "thinking": "Let me look.", "signature": "EqQBCgIYAhIM=="},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va=="},
            ]}})
        );
    }

    #[test]
    fn garbled_input_is_marked_and_kept_raw() {
        let events = [
            start(10, 0, 0),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_02", "name": "write_file", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"a.txt\", \"content"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 9}}),
            json!({"type": "message_stop"}),
        ];
        let r = run(&events).0.unwrap();
        assert!(r.tool_calls[0].garbled);
        assert_eq!(
            r.tool_calls[0].arguments,
            json!("{\"path\": \"a.txt\", \"content")
        );
        assert!(r.extra.is_none());
    }

    #[test]
    fn stop_reasons_normalise() {
        for (reason, finish) in [
            ("end_turn", FinishReason::Stop),
            ("max_tokens", FinishReason::Length),
            ("stop_sequence", FinishReason::Stop),
        ] {
            let events = [
                start(1, 0, 0),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "hi"}}),
                json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null}, "usage": {"output_tokens": 2}}),
                json!({"type": "message_stop"}),
            ];
            let r = run(&events).0.unwrap();
            assert_eq!(r.finish, finish, "{reason}");
            assert_eq!(r.text, "hi");
        }
    }

    #[test]
    fn in_stream_errors_are_classified() {
        let overloaded = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        let err = run(&[start(1, 0, 0), overloaded]).0.unwrap_err();
        assert_eq!(err.class(), ErrorClass::Transient("http_529".into()));
        let invalid = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 200001 tokens > 200000 maximum"}});
        assert_eq!(
            run(&[invalid]).0.unwrap_err().class(),
            ErrorClass::ContextOverflow
        );
        let billing = json!({"type": "error", "error": {"type": "billing_error", "message": "no"}});
        assert_eq!(run(&[billing]).0.unwrap_err().class(), ErrorClass::Quota);
    }

    #[test]
    fn a_stream_without_message_stop_is_incomplete() {
        let events = [
            start(1, 0, 0),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}),
        ];
        assert_eq!(run(&events).0.unwrap_err(), ModelError::StreamIncomplete);
    }

    #[test]
    fn non_json_data_fails_the_attempt() {
        let mut a = Assembly::default();
        assert_eq!(
            a.apply(b"not json", &crate::model::NoObserver),
            Err(ModelError::StreamIncomplete)
        );
    }
}
