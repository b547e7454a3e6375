//! OpenAI Responses SSE builders, shaped like the vendor documents its
//! stream: `event: <type>` plus `data: <json>` with `type` and
//! `sequence_number`.

use serde_json::{json, Value};

use super::stub::Reply;

/// Builds one stream, numbering events as the API does.
#[derive(Default)]
pub struct Stream {
    events: Vec<String>,
    output_index: usize,
}

impl Stream {
    pub fn new() -> Stream {
        let mut s = Stream::default();
        s.push(
            json!({"type": "response.created", "response": response("in_progress", Value::Null)}),
        );
        s.push(json!({"type": "response.in_progress", "response": response("in_progress", Value::Null)}));
        s
    }

    fn push(&mut self, mut data: Value) {
        data["sequence_number"] = json!(self.events.len());
        self.events.push(format!(
            "event: {}\ndata: {}\n\n",
            data["type"].as_str().unwrap(),
            data
        ));
    }

    /// A reasoning item with encrypted content.
    pub fn reasoning(mut self, id: &str, encrypted: &str) -> Stream {
        let i = self.output_index;
        self.push(json!({"type": "response.output_item.added", "output_index": i, "item": {"type": "reasoning", "id": id, "summary": []}}));
        self.push(json!({"type": "response.output_item.done", "output_index": i, "item": {"type": "reasoning", "id": id, "summary": [], "encrypted_content": encrypted}}));
        self.output_index += 1;
        self
    }

    /// An assistant message whose text arrives in `parts`.
    pub fn text(mut self, parts: &[&str]) -> Stream {
        let i = self.output_index;
        let id = format!("msg_{i}");
        self.push(json!({"type": "response.output_item.added", "output_index": i, "item": {"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []}}));
        self.push(json!({"type": "response.content_part.added", "item_id": id, "output_index": i, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}));
        for part in parts {
            self.push(json!({"type": "response.output_text.delta", "item_id": id, "output_index": i, "content_index": 0, "delta": part, "logprobs": []}));
        }
        let text: String = parts.concat();
        self.push(json!({"type": "response.output_text.done", "item_id": id, "output_index": i, "content_index": 0, "text": text, "logprobs": []}));
        self.push(json!({"type": "response.content_part.done", "item_id": id, "output_index": i, "content_index": 0, "part": {"type": "output_text", "text": text, "annotations": []}}));
        self.push(json!({"type": "response.output_item.done", "output_index": i, "item": {"type": "message", "id": id, "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]}}));
        self.output_index += 1;
        self
    }

    /// A function call whose arguments arrive in `parts`; `done` sends the
    /// `.done` events (with the joined arguments).
    pub fn function_call(
        mut self,
        call_id: &str,
        name: &str,
        parts: &[&str],
        done: bool,
    ) -> Stream {
        let i = self.output_index;
        let id = format!("fc_{i}");
        self.push(json!({"type": "response.output_item.added", "output_index": i, "item": {"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": "", "status": "in_progress"}}));
        for part in parts {
            self.push(json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": i, "delta": part}));
        }
        if done {
            let args: String = parts.concat();
            self.push(json!({"type": "response.function_call_arguments.done", "item_id": id, "output_index": i, "arguments": args}));
            self.push(json!({"type": "response.output_item.done", "output_index": i, "item": {"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": args, "status": "completed"}}));
        }
        self.output_index += 1;
        self
    }

    /// `response.completed` with usage.
    pub fn completed(mut self, input: u64, cached: u64, output: u64) -> Vec<String> {
        self.push(json!({"type": "response.completed", "response": response("completed", usage(input, cached, output))}));
        self.events
    }

    /// `response.incomplete` (max_output_tokens).
    pub fn incomplete(mut self) -> Vec<String> {
        let mut r = response("incomplete", usage(10, 0, 16));
        r["incomplete_details"] = json!({"reason": "max_output_tokens"});
        self.push(json!({"type": "response.incomplete", "response": r}));
        self.events
    }

    /// `response.failed` with an error code.
    pub fn failed(mut self, code: &str, message: &str) -> Vec<String> {
        let mut r = response("failed", Value::Null);
        r["error"] = json!({"code": code, "message": message});
        self.push(json!({"type": "response.failed", "response": r}));
        self.events
    }

    /// The events so far, with no terminal event.
    pub fn unfinished(self) -> Vec<String> {
        self.events
    }
}

fn usage(input: u64, cached: u64, output: u64) -> Value {
    json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": input + output})
}

fn response(status: &str, usage: Value) -> Value {
    json!({"id": "resp_67ccd2bed1ec8190b14f964abc054267", "object": "response", "created_at": 1741476542, "status": status,
        "model": "gpt-5-2025-08-07", "output": [], "parallel_tool_calls": true, "store": false, "usage": usage})
}

/// A reply with text only.
pub fn text_reply(text: &str) -> Reply {
    Reply::sse(Stream::new().text(&[text]).completed(25, 0, 15))
}

/// A reply calling one tool.
pub fn tool_reply(call_id: &str, name: &str, arguments: Value) -> Reply {
    let args = arguments.to_string();
    Reply::sse(
        Stream::new()
            .function_call(call_id, name, &[&args], true)
            .completed(25, 0, 15),
    )
}

/// An OpenAI error object response.
pub fn error_reply(status: u16, kind: &str, code: Option<&str>, message: &str) -> Reply {
    Reply::json(
        status,
        &json!({"error": {"message": message, "type": kind, "param": null, "code": code}}),
    )
}
