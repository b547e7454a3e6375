//! Chat Completions stream builders for the stub: `chat.completion.chunk`
//! events shaped as OpenAI documents them (a role chunk, content or
//! tool-call fragments, a chunk with `finish_reason`, a usage chunk with
//! empty `choices`, then `data: [DONE]`).

use serde_json::{json, Value};

use super::stub::Reply;

/// One SSE event carrying a chunk with a single choice.
pub fn chunk(delta: Value, finish_reason: Option<&str>) -> String {
    data(&json!({
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": 1_750_000_000,
        "model": "gpt-5-2025-08-07",
        "system_fingerprint": null,
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
    }))
}

/// The last chunk under `stream_options.include_usage`: no choices, usage.
pub fn usage_chunk(prompt: u64, completion: u64, cached: u64) -> String {
    data(&json!({
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": 1_750_000_000,
        "model": "gpt-5-2025-08-07",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
        },
    }))
}

/// `data: [DONE]`, the stream's finish marker.
pub fn done() -> String {
    "data: [DONE]\n\n".to_string()
}

/// An SSE event with a JSON payload.
pub fn data(payload: &Value) -> String {
    format!("data: {payload}\n\n")
}

/// The events of a text reply: role chunk, the text in word-sized pieces,
/// `finish_reason: stop`, usage, `[DONE]`.
pub fn text_events(text: &str) -> Vec<String> {
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": "", "refusal": null}),
        None,
    )];
    events.extend(
        pieces(text)
            .into_iter()
            .map(|p| chunk(json!({"content": p}), None)),
    );
    events.push(chunk(json!({}), Some("stop")));
    events.push(usage_chunk(50, 10, 0));
    events.push(done());
    events
}

/// The events of a reply calling one tool, its arguments in two fragments.
pub fn tool_call_events(id: &str, name: &str, args_json: &str) -> Vec<String> {
    let split = args_json.len() / 2;
    let split = (0..=split)
        .rev()
        .find(|i| args_json.is_char_boundary(*i))
        .unwrap_or(0);
    let (a, b) = args_json.split_at(split);
    vec![
        chunk(
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}
            ], "refusal": null}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": b}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        usage_chunk(100, 20, 80),
        done(),
    ]
}

/// A streamed text reply.
pub fn chat_sse_text(text: &str) -> Reply {
    Reply::sse(text_events(text))
}

/// A streamed reply calling one tool.
pub fn chat_sse_tool_call(id: &str, name: &str, args_json: &str) -> Reply {
    Reply::sse(tool_call_events(id, name, args_json))
}

/// A reply calling `submit` with `output`.
pub fn chat_sse_submit(id: &str, output: &str) -> Reply {
    chat_sse_tool_call(id, "submit", &json!({"output": output}).to_string())
}

/// Splits text after each space, keeping every byte.
fn pieces(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        current.push(c);
        if c == ' ' {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}
