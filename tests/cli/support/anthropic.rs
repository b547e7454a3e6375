//! Anthropic Messages SSE builders, shaped like the vendor documents its
//! stream: `event: <type>` plus `data: <json>` with the same `type`.

use serde_json::{json, Value};

use super::stub::Reply;

/// One SSE event as Anthropic sends it.
pub fn event(data: Value) -> String {
    format!(
        "event: {}\ndata: {}\n\n",
        data["type"].as_str().unwrap(),
        data
    )
}

pub fn message_start(input_tokens: u64, cache_read: u64) -> String {
    event(json!({"type": "message_start", "message": {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant", "content": [],
        "model": "claude-sonnet-4-5-20250929", "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": cache_read, "output_tokens": 1}}}))
}

pub fn ping() -> String {
    event(json!({"type": "ping"}))
}

/// A text block streamed in `parts`.
pub fn text_block(index: usize, parts: &[&str]) -> Vec<String> {
    let mut out = vec![event(
        json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
    )];
    for part in parts {
        out.push(event(json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": part}})));
    }
    out.push(event(json!({"type": "content_block_stop", "index": index})));
    out
}

/// A tool_use block whose input JSON arrives in `json_parts`.
pub fn tool_use_block(index: usize, id: &str, name: &str, json_parts: &[&str]) -> Vec<String> {
    let mut out = vec![event(
        json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
    )];
    for part in json_parts {
        out.push(event(json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": part}})));
    }
    out.push(event(json!({"type": "content_block_stop", "index": index})));
    out
}

/// A thinking block with its signature.
pub fn thinking_block(index: usize, thinking: &str, signature: &str) -> Vec<String> {
    vec![
        event(
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ),
        event(
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": thinking}}),
        ),
        event(
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": signature}}),
        ),
        event(json!({"type": "content_block_stop", "index": index})),
    ]
}

/// A redacted thinking block.
pub fn redacted_thinking_block(index: usize, data: &str) -> Vec<String> {
    vec![
        event(
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "redacted_thinking", "data": data}}),
        ),
        event(json!({"type": "content_block_stop", "index": index})),
    ]
}

pub fn message_delta(stop_reason: &str, output_tokens: u64) -> String {
    event(
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": output_tokens}}),
    )
}

pub fn message_stop() -> String {
    event(json!({"type": "message_stop"}))
}

/// An in-stream error event (e.g. `overloaded_error`).
pub fn error_event(kind: &str, message: &str) -> String {
    event(json!({"type": "error", "error": {"type": kind, "message": message}}))
}

/// A whole streamed message: start, the given blocks, delta, stop.
pub fn message(blocks: Vec<Vec<String>>, stop_reason: &str) -> Vec<String> {
    let mut out = vec![message_start(25, 0), ping()];
    out.extend(blocks.into_iter().flatten());
    out.push(message_delta(stop_reason, 15));
    out.push(message_stop());
    out
}

/// A reply with text only.
pub fn text_reply(text: &str) -> Reply {
    Reply::sse(message(vec![text_block(0, &[text])], "end_turn"))
}

/// A reply calling one tool, with its input JSON in one piece.
pub fn tool_reply(id: &str, name: &str, input: Value) -> Reply {
    let input = input.to_string();
    Reply::sse(message(
        vec![tool_use_block(0, id, name, &[&input])],
        "tool_use",
    ))
}

/// An error response as Anthropic sends one.
pub fn error_reply(status: u16, kind: &str, message: &str) -> Reply {
    Reply::json(
        status,
        &json!({"type": "error", "error": {"type": kind, "message": message}}),
    )
}
