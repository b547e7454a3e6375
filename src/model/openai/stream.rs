//! Assembles a streamed Chat Completions reply from its `chat.completion.chunk`
//! events: text deltas go to the observer as they come, tool-call argument
//! fragments are joined by index, `finish_reason` is normalised, usage comes
//! from the final chunk, and `data: [DONE]` is the required finish marker.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use crate::model::http::error_from_body;
use crate::model::{FinishReason, ModelError, Response, StreamObserver, ToolCall, Usage};

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: u32,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallDelta<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallDelta<'a> {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

/// A tool call whose fragments are still arriving.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// The reply as assembled so far.
#[derive(Debug, Default)]
pub struct ChunkAssembler {
    text: String,
    calls: Vec<PartialCall>,
    finish_reason: Option<String>,
    usage: Usage,
    done: bool,
}

impl ChunkAssembler {
    /// Takes one SSE `data` payload. Fails on an error object in the stream
    /// or a payload that is not a chunk.
    pub fn feed(&mut self, data: &str, observer: &dyn StreamObserver) -> Result<(), ModelError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Chunk<'_> =
            serde_json::from_str(data).map_err(|_| ModelError::StreamIncomplete)?;
        if let Some(error) = &chunk.error {
            return Err(stream_error(error, data));
        }
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                    observer.text_delta(&text);
                    self.text.push_str(&text);
                }
                for fragment in delta.tool_calls.unwrap_or_default() {
                    self.add_fragment(fragment);
                    observer.tool_call_delta();
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason.into_owned());
            }
        }
        if let Some(usage) = chunk.usage {
            let input = usage.prompt_tokens.unwrap_or(0);
            self.usage = Usage {
                input_tokens: input,
                output_tokens: usage.completion_tokens.unwrap_or(0),
                cached_input_tokens: usage
                    .prompt_tokens_details
                    .and_then(|d| d.cached_tokens)
                    .unwrap_or(0)
                    .min(input),
            };
        }
        Ok(())
    }

    /// Whether `[DONE]` arrived.
    pub fn is_done(&self) -> bool {
        self.done
    }

    fn add_fragment(&mut self, fragment: ToolCallDelta<'_>) {
        // OpenAI always sends `index`; servers that leave it out start a new
        // call with each new id.
        let index = match (fragment.index, fragment.id.as_deref()) {
            (Some(i), _) => i,
            (None, Some(id)) => self
                .calls
                .iter()
                .position(|c| c.id == id)
                .unwrap_or(self.calls.len()),
            (None, None) => self.calls.len().saturating_sub(1),
        };
        if self.calls.len() <= index {
            self.calls.resize_with(index + 1, PartialCall::default);
        }
        let call = &mut self.calls[index];
        if let Some(id) = fragment.id.filter(|id| !id.is_empty()) {
            call.id = id.into_owned();
        }
        if let Some(function) = fragment.function {
            if let Some(name) = function.name {
                call.name.push_str(&name);
            }
            if let Some(arguments) = function.arguments {
                call.arguments.push_str(&arguments);
            }
        }
    }

    /// The whole reply; a stream that never sent `[DONE]` is incomplete.
    pub fn finish(self) -> Result<Response, ModelError> {
        if !self.done {
            return Err(ModelError::StreamIncomplete);
        }
        let tool_calls: Vec<ToolCall> = self
            .calls
            .into_iter()
            .filter(|c| !c.name.is_empty() || !c.arguments.is_empty())
            .map(whole_call)
            .collect();
        let finish = match self.finish_reason.as_deref() {
            Some("length") => FinishReason::Length,
            _ if !tool_calls.is_empty() => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        };
        Ok(Response {
            text: self.text,
            tool_calls,
            usage: self.usage,
            finish,
            extra: None,
            cost_override: None,
            usage_reported: true,
        })
    }
}

/// A finished call: arguments parsed as a JSON object, or kept raw and
/// marked garbled; an id made up when the server sent none.
fn whole_call(call: PartialCall) -> ToolCall {
    let id = if call.id.is_empty() {
        format!("call_{}", &uuid::Uuid::new_v4().simple().to_string()[..24])
    } else {
        call.id
    };
    parse_arguments(id, call.name, call.arguments)
}

/// Parses streamed argument text; empty text is an empty object.
pub fn parse_arguments(id: String, name: String, raw: String) -> ToolCall {
    if raw.trim().is_empty() {
        return ToolCall {
            id,
            name,
            arguments: Value::Object(Default::default()),
            garbled: false,
        };
    }
    match serde_json::from_str::<Value>(&raw) {
        Ok(arguments @ Value::Object(_)) => ToolCall {
            id,
            name,
            arguments,
            garbled: false,
        },
        _ => ToolCall {
            id,
            name,
            arguments: Value::String(raw),
            garbled: true,
        },
    }
}

/// An error object sent inside the stream, classified like the HTTP error it
/// stands for: a numeric `code` (OpenRouter) is the status; otherwise the
/// error's type or code names it, and anything unnamed counts as a server
/// error (the request had been accepted).
fn stream_error(error: &Value, data: &str) -> ModelError {
    let numeric = error
        .get("code")
        .and_then(Value::as_u64)
        .or_else(|| error.get("status").and_then(Value::as_u64))
        .filter(|s| (400..600).contains(s));
    let status = numeric.unwrap_or_else(|| {
        let named = [error.get("code"), error.get("type")]
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>();
        let is = |names: &[&str]| named.iter().any(|n| names.contains(n));
        if is(&[
            "rate_limit_exceeded",
            "rate_limit_error",
            "insufficient_quota",
        ]) {
            429
        } else if is(&["context_length_exceeded", "invalid_request_error"]) {
            400
        } else if is(&["invalid_api_key", "authentication_error"]) {
            401
        } else {
            500
        }
    }) as u16;
    error_from_body(status, data.as_bytes(), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ErrorClass, NoObserver};
    use serde_json::json;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Recorder {
        text: Mutex<Vec<String>>,
        tool_deltas: Mutex<usize>,
    }
    impl StreamObserver for Recorder {
        fn text_delta(&self, text: &str) {
            self.text.lock().unwrap().push(text.to_string());
        }
        fn tool_call_delta(&self) {
            *self.tool_deltas.lock().unwrap() += 1;
        }
    }

    fn chunk(delta: Value, finish: Value) -> String {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-5", "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
        .to_string()
    }

    fn usage_chunk() -> String {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-5",
            "choices": [],
            "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150,
                      "prompt_tokens_details": {"cached_tokens": 100}},
        })
        .to_string()
    }

    fn assemble(events: &[String], observer: &dyn StreamObserver) -> Result<Response, ModelError> {
        let mut asm = ChunkAssembler::default();
        for e in events {
            asm.feed(e, observer)?;
        }
        asm.finish()
    }

    #[test]
    fn text_streams_to_the_observer_and_usage_comes_last() {
        let events = [
            chunk(
                json!({"role": "assistant", "content": "", "refusal": null}),
                Value::Null,
            ),
            chunk(json!({"content": "Hel"}), Value::Null),
            chunk(json!({"content": "lo"}), Value::Null),
            chunk(json!({}), json!("stop")),
            usage_chunk(),
            "[DONE]".to_string(),
        ];
        let rec = Recorder::default();
        let r = assemble(&events, &rec).unwrap();
        assert_eq!(r.text, "Hello");
        assert_eq!(*rec.text.lock().unwrap(), vec!["Hel", "lo"]);
        assert_eq!(r.finish, FinishReason::Stop);
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 120,
                output_tokens: 30,
                cached_input_tokens: 100
            }
        );
    }

    #[test]
    fn tool_call_fragments_are_joined_by_index() {
        let events = [
            chunk(
                json!({"role": "assistant", "content": null, "tool_calls": [
                {"index": 0, "id": "call_a", "type": "function", "function": {"name": "bash", "arguments": ""}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [
                {"index": 1, "id": "call_b", "type": "function", "function": {"name": "read_file", "arguments": ""}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"comm"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"path\":\"a\"}"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "and\":\"ls\"}"}}]}),
                Value::Null,
            ),
            chunk(json!({}), json!("tool_calls")),
            "[DONE]".to_string(),
        ];
        let rec = Recorder::default();
        let r = assemble(&events, &rec).unwrap();
        assert_eq!(r.finish, FinishReason::ToolCalls);
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].id, "call_a");
        assert_eq!(r.tool_calls[0].name, "bash");
        assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls"}));
        assert_eq!(r.tool_calls[1].arguments, json!({"path": "a"}));
        assert_eq!(*rec.tool_deltas.lock().unwrap(), 5);
        assert!(rec.text.lock().unwrap().is_empty());
    }

    #[test]
    fn garbled_arguments_are_kept_raw_and_marked() {
        let events = [
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                "function": {"name": "bash", "arguments": "{\"command\": \"ls"}}]}),
                json!("tool_calls"),
            ),
            "[DONE]".to_string(),
        ];
        let r = assemble(&events, &NoObserver).unwrap();
        assert!(r.tool_calls[0].garbled);
        assert_eq!(r.tool_calls[0].arguments, json!("{\"command\": \"ls"));
    }

    #[test]
    fn empty_arguments_are_an_empty_object_and_missing_ids_are_made_up() {
        let events = [
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"name": "plan"}}]}),
                json!("tool_calls"),
            ),
            "[DONE]".to_string(),
        ];
        let r = assemble(&events, &NoObserver).unwrap();
        assert_eq!(r.tool_calls[0].arguments, json!({}));
        assert!(r.tool_calls[0].id.starts_with("call_"));
        assert!(!r.tool_calls[0].garbled);
    }

    #[test]
    fn length_wins_and_tool_calls_need_no_finish_reason() {
        let cut = [
            chunk(json!({"content": "abc"}), json!("length")),
            "[DONE]".to_string(),
        ];
        assert_eq!(
            assemble(&cut, &NoObserver).unwrap().finish,
            FinishReason::Length
        );
        let calls = [
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "bash", "arguments": "{}"}}]}),
                json!("stop"),
            ),
            "[DONE]".to_string(),
        ];
        assert_eq!(
            assemble(&calls, &NoObserver).unwrap().finish,
            FinishReason::ToolCalls
        );
    }

    #[test]
    fn a_stream_without_done_is_incomplete() {
        let events = [
            chunk(json!({"content": "hi"}), json!("stop")),
            usage_chunk(),
        ];
        assert_eq!(
            assemble(&events, &NoObserver),
            Err(ModelError::StreamIncomplete)
        );
        assert_eq!(
            assemble(&["not json".into()], &NoObserver),
            Err(ModelError::StreamIncomplete)
        );
    }

    #[test]
    fn errors_inside_the_stream_are_classified() {
        let openrouter = json!({"id": "gen-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "provider": "X", "error": {"code": 502, "message": "Provider disconnected"},
            "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]});
        let e = assemble(&[openrouter.to_string()], &NoObserver).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Transient("http_502".into()));
        assert!(e.to_string().contains("Provider disconnected"));

        let quota = json!({"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}});
        let e = assemble(&[quota.to_string()], &NoObserver).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Quota);

        let server = json!({"error": {"message": "The server had an error", "type": "server_error", "code": null}});
        let e = assemble(&[server.to_string()], &NoObserver).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Transient("http_500".into()));

        let overflow = json!({"error": {"message": "This model's maximum context length is 8192 tokens", "type": "invalid_request_error", "code": "context_length_exceeded"}});
        let e = assemble(&[overflow.to_string()], &NoObserver).unwrap_err();
        assert_eq!(e.class(), ErrorClass::ContextOverflow);
    }
}
