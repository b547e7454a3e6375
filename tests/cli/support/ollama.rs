//! Ollama `/api/chat` NDJSON builders for the stub, shaped as Ollama's API
//! docs show them: message lines with `done: false`, then a final line with
//! `done: true`, `done_reason` and the token counts.

use serde_json::{json, Value};

use super::stub::Reply;

/// A streamed message line.
pub fn message_line(message: Value) -> Value {
    json!({
        "model": "qwen3",
        "created_at": "2025-05-27T22:54:57.641643Z",
        "message": message,
        "done": false,
    })
}

/// The final line.
pub fn done_line(reason: &str) -> Value {
    json!({
        "model": "qwen3",
        "created_at": "2025-05-27T22:54:58.100509Z",
        "message": {"role": "assistant", "content": ""},
        "done_reason": reason,
        "done": true,
        "total_duration": 885095291,
        "load_duration": 3753500,
        "prompt_eval_count": 122,
        "prompt_eval_duration": 328493000,
        "eval_count": 33,
        "eval_duration": 552222000,
    })
}

/// The lines of a text reply, one word a line, then `done`.
pub fn text_lines(text: &str) -> Vec<Value> {
    let mut lines: Vec<Value> = text
        .split_inclusive(' ')
        .map(|piece| message_line(json!({"role": "assistant", "content": piece})))
        .collect();
    lines.push(done_line("stop"));
    lines
}

/// The lines of a reply calling one tool (sent whole, arguments an object).
pub fn tool_call_lines(name: &str, arguments: Value) -> Vec<Value> {
    vec![
        message_line(json!({"role": "assistant", "content": "",
            "tool_calls": [{"function": {"name": name, "arguments": arguments}}]})),
        done_line("stop"),
    ]
}

pub fn ollama_text(text: &str) -> Reply {
    Reply::ndjson(text_lines(text))
}

pub fn ollama_tool_call(name: &str, arguments: Value) -> Reply {
    Reply::ndjson(tool_call_lines(name, arguments))
}
