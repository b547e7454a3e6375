//! Assembles a streamed Chat Completions reply from its `chat.completion.chunk`
//! events: text deltas go to the observer as they come, tool-call argument
//! fragments are joined by index, `finish_reason` is normalised, usage comes
//! from the final chunk, and `data: [DONE]` is the required finish marker.
//! A `delta.refusal` makes the reply a refusal. A server that did not stream
//! sends one `chat.completion` body, read through the same assembly.
//!
//! What a server controls is bounded: at most `MAX_TOOL_CALLS` calls, looked
//! up by index in a map (an index of 10^12 allocates nothing), names capped,
//! and arguments read raw and kept only within their bound (`wire::Arguments`:
//! past it the call is refused, not the reply). llama-cpp-python repeats the
//! whole name (and id) in every fragment of a call; a name equal to the name
//! so far, or any name once the arguments have started, is that repeat and
//! not a fragment.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::model::wire::{
    append, note_model, stream_error, too_large, Arguments, Assembly, Kept, Progress, MAX_TEXT,
    MAX_TOOL_CALLS, MAX_TOOL_NAME,
};
use crate::model::{FinishReason, ModelError, Response, StreamObserver, ToolCall, Usage};

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: u64,
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
    refusal: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallDelta<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallDelta<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<FunctionDelta<'a>>,
}

/// A call's function: `arguments` is a fragment of the JSON text in a
/// stream (a string), the whole arguments in a body (a string, or an object
/// from some servers), kept raw until measured.
#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
}

/// A whole `chat.completion` body (a server that did not stream).
#[derive(Deserialize)]
struct Completion<'a> {
    #[serde(default, borrow)]
    choices: Vec<CompletionChoice<'a>>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct CompletionChoice<'a> {
    #[serde(default)]
    index: u64,
    /// The whole message, read as the one delta it amounts to.
    #[serde(default, borrow)]
    message: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
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
    arguments: Arguments,
}

/// The reply as assembled so far.
#[derive(Debug, Default)]
pub struct ChunkAssembler {
    text: String,
    refusal: String,
    calls: Vec<PartialCall>,
    /// The wire index of each call to its place in `calls`.
    by_index: BTreeMap<u64, usize>,
    /// The argument text the calls keep between them.
    kept: Kept,
    finish_reason: Option<String>,
    usage: Usage,
    usage_reported: bool,
    done: bool,
    model: Option<String>,
}

impl ChunkAssembler {
    /// Takes one SSE `data` payload. Fails on an error object in the stream,
    /// a payload that is not a chunk, or one that breaks a bound.
    pub fn feed(&mut self, data: &str, observer: &dyn StreamObserver) -> Result<(), ModelError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Chunk<'_> =
            serde_json::from_str(data).map_err(|_| ModelError::StreamIncomplete)?;
        if let Some(error) = chunk.error.as_ref().filter(|e| !e.is_null()) {
            return Err(stream_error(error));
        }
        note_model(&mut self.model, chunk.model.as_deref());
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(delta) = choice.delta {
                self.add_delta(delta, observer)?;
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason.into_owned());
            }
        }
        if let Some(usage) = chunk.usage {
            self.set_usage(usage);
        }
        Ok(())
    }

    fn add_delta(
        &mut self,
        delta: Delta<'_>,
        observer: &dyn StreamObserver,
    ) -> Result<(), ModelError> {
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            append(&mut self.text, &text, MAX_TEXT, "the reply text")?;
            observer.text_delta(&text);
        }
        if let Some(refusal) = delta.refusal {
            append(&mut self.refusal, &refusal, MAX_TEXT, "the refusal")?;
        }
        for fragment in delta.tool_calls.unwrap_or_default() {
            self.add_fragment(fragment)?;
            observer.tool_call_delta();
        }
        Ok(())
    }

    fn set_usage(&mut self, usage: WireUsage) {
        let input = usage.prompt_tokens.unwrap_or(0);
        self.usage_reported |= usage.prompt_tokens.is_some() || usage.completion_tokens.is_some();
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

    fn add_fragment(&mut self, fragment: ToolCallDelta<'_>) -> Result<(), ModelError> {
        // OpenAI always sends `index`; servers that leave it out start a new
        // call with each new id.
        let slot = match (fragment.index, fragment.id.as_deref()) {
            (Some(i), _) => self.by_index.get(&i).copied().ok_or(Some(i)),
            (None, Some(id)) if !id.is_empty() => {
                self.calls.iter().position(|c| c.id == id).ok_or(None)
            }
            (None, _) => self.calls.len().checked_sub(1).ok_or(None),
        };
        let slot = match slot {
            Ok(slot) => slot,
            Err(index) => {
                if self.calls.len() >= MAX_TOOL_CALLS {
                    return Err(too_large("the number of tool calls"));
                }
                self.calls.push(PartialCall::default());
                if let Some(index) = index {
                    self.by_index.insert(index, self.calls.len() - 1);
                }
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[slot];
        if let Some(id) = fragment.id.filter(|id| !id.is_empty()) {
            if id.len() > MAX_TOOL_NAME {
                return Err(too_large("a tool call id"));
            }
            if call.id != *id {
                call.id = id.into_owned();
            }
        }
        if let Some(function) = fragment.function {
            if let Some(name) = function.name.filter(|n| !n.is_empty()) {
                let repeat = *name == call.name || !call.arguments.is_empty();
                if !repeat {
                    append(&mut call.name, &name, MAX_TOOL_NAME, "a tool name")?;
                }
            }
            if let Some(arguments) = function.arguments {
                call.arguments.push_raw(arguments, &mut self.kept)?;
            }
        }
        Ok(())
    }

    /// Reads a whole `chat.completion` body (a server that did not stream):
    /// its message is the one delta it amounts to, each call an index of
    /// its own.
    fn feed_body(&mut self, body: &str, observer: &dyn StreamObserver) -> Result<(), ModelError> {
        let body: Completion<'_> =
            serde_json::from_str(body).map_err(|_| ModelError::StreamIncomplete)?;
        note_model(&mut self.model, body.model.as_deref());
        let choice = body
            .choices
            .into_iter()
            .find(|c| c.index == 0)
            .ok_or(ModelError::StreamIncomplete)?;
        if let Some(mut message) = choice.message {
            for (i, call) in message.tool_calls.iter_mut().flatten().enumerate() {
                call.index = Some(i as u64);
            }
            self.add_delta(message, observer)?;
        }
        self.finish_reason = choice.finish_reason.map(Cow::into_owned);
        if let Some(usage) = body.usage {
            self.set_usage(usage);
        }
        self.done = true;
        Ok(())
    }

    /// The `finish_reason` the reply has named so far, as sent (a
    /// dialect's own, such as Azure's `content_filter`).
    pub(crate) fn finish_reason(&self) -> Option<&str> {
        self.finish_reason.as_deref()
    }

    /// The whole reply; a stream that never sent `[DONE]` is incomplete, and
    /// one that carried a refusal is a refusal.
    pub fn finish(self) -> Result<Response, ModelError> {
        if !self.done {
            return Err(ModelError::StreamIncomplete);
        }
        if !self.refusal.is_empty() {
            return Err(ModelError::Refusal { text: self.refusal });
        }
        let tool_calls: Vec<ToolCall> = self
            .calls
            .into_iter()
            .filter(|c| !c.name.is_empty() || !c.arguments.is_empty())
            .map(|c| c.arguments.into_call(c.id, c.name))
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
            usage_reported: self.usage_reported,
            finish,
            extra: None,
            cost_override: None,
            model: self.model,
        })
    }
}

impl Assembly for ChunkAssembler {
    fn apply(&mut self, data: &str, observer: &dyn StreamObserver) -> Result<Progress, ModelError> {
        self.feed(data, observer)?;
        Ok(if self.done {
            Progress::Finished
        } else {
            Progress::Continue
        })
    }

    fn apply_body(&mut self, body: &str, observer: &dyn StreamObserver) -> Result<(), ModelError> {
        self.feed_body(body, observer)
    }

    fn finish(self) -> Result<Response, ModelError> {
        ChunkAssembler::finish(self)
    }
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

    /// llama-cpp-python 0.3.x: every fragment repeats the call's id and
    /// whole name (`llama_chat_format._stream_response_to_function_stream`).
    #[test]
    fn a_name_repeated_whole_in_every_fragment_is_one_name() {
        let frag = |args: &str| {
            chunk(
                json!({"role": null, "content": null, "function_call": {"name": "bash", "arguments": args},
                    "tool_calls": [{"index": 0, "id": "call__0_bash_cmpl-1", "type": "function",
                        "function": {"name": "bash", "arguments": args}}]}),
                Value::Null,
            )
        };
        let events = [
            chunk(
                json!({"role": "assistant", "content": null, "function_call": null, "tool_calls": null}),
                Value::Null,
            ),
            frag("{\"command\""),
            frag(": \"ls\""),
            frag("}"),
            chunk(
                json!({"role": null, "content": null, "function_call": null, "tool_calls": null}),
                json!("tool_calls"),
            ),
            "[DONE]".to_string(),
        ];
        let r = assemble(&events, &NoObserver).unwrap();
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, "bash");
        assert_eq!(r.tool_calls[0].id, "call__0_bash_cmpl-1");
        assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls"}));
        assert!(!r.usage_reported, "llama-cpp-python streams carry no usage");
    }

    #[test]
    fn real_name_fragments_still_join_and_a_late_name_is_a_repeat() {
        let events = [
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "read_", "arguments": ""}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"name": "file"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\":\"a\"}"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"name": "file"}}]}),
                json!("tool_calls"),
            ),
            "[DONE]".to_string(),
        ];
        let r = assemble(&events, &NoObserver).unwrap();
        assert_eq!(r.tool_calls[0].name, "read_file");
        assert_eq!(r.tool_calls[0].arguments, json!({"path": "a"}));
    }

    #[test]
    fn huge_indexes_allocate_nothing_and_too_many_calls_fail() {
        let events = [
            chunk(
                json!({"tool_calls": [{"index": 1_000_000_000_000u64, "id": "a", "function": {"name": "bash", "arguments": "{}"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 50_000_000, "id": "b", "function": {"name": "plan", "arguments": "{}"}}]}),
                json!("tool_calls"),
            ),
            "[DONE]".to_string(),
        ];
        let r = assemble(&events, &NoObserver).unwrap();
        let names: Vec<&str> = r.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["bash", "plan"]);

        let mut asm = ChunkAssembler::default();
        let mut failed = None;
        for i in 0..=MAX_TOOL_CALLS {
            let c = chunk(
                json!({"tool_calls": [{"index": i, "id": format!("c{i}"), "function": {"name": "bash", "arguments": "{}"}}]}),
                Value::Null,
            );
            if let Err(e) = asm.feed(&c, &NoObserver) {
                failed = Some((i, e));
                break;
            }
        }
        let (at, e) = failed.expect("the cap holds");
        assert_eq!(at, MAX_TOOL_CALLS);
        assert_eq!(e.reason(), "stream_incomplete");
        assert!(matches!(e, ModelError::Malformed { .. }));

        let index_too_big = chunk(
            json!({"tool_calls": [{"index": 1e30, "function": {"name": "bash"}}]}),
            Value::Null,
        );
        assert!(ChunkAssembler::default()
            .feed(&index_too_big, &NoObserver)
            .is_err());
    }

    #[test]
    fn a_long_name_fails_the_attempt() {
        let c = chunk(
            json!({"tool_calls": [{"index": 0, "function": {"name": "x".repeat(MAX_TOOL_NAME + 1)}}]}),
            Value::Null,
        );
        assert!(matches!(
            ChunkAssembler::default().feed(&c, &NoObserver),
            Err(ModelError::Malformed { .. })
        ));
    }

    #[test]
    fn a_refusal_delta_makes_a_refusal() {
        let events = [
            chunk(
                json!({"role": "assistant", "content": null, "refusal": ""}),
                Value::Null,
            ),
            chunk(json!({"refusal": "I'm sorry, "}), Value::Null),
            chunk(json!({"refusal": "I cannot help with that."}), Value::Null),
            chunk(json!({}), json!("stop")),
            usage_chunk(),
            "[DONE]".to_string(),
        ];
        assert_eq!(
            assemble(&events, &NoObserver),
            Err(ModelError::Refusal {
                text: "I'm sorry, I cannot help with that.".into()
            })
        );
    }

    #[test]
    fn a_whole_chat_completion_body_is_a_reply() {
        let body = json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]},
                "logprobs": null, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
        });
        let mut asm = ChunkAssembler::default();
        Assembly::apply_body(&mut asm, &body.to_string(), &NoObserver).unwrap();
        let r = Assembly::finish(asm).unwrap();
        assert_eq!(r.tool_calls[0].name, "bash");
        assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls"}));
        assert_eq!(r.usage.input_tokens, 9);
        assert!(r.usage_reported);

        let refused = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": "No."}, "finish_reason": "stop"}]});
        let mut asm = ChunkAssembler::default();
        Assembly::apply_body(&mut asm, &refused.to_string(), &NoObserver).unwrap();
        assert_eq!(
            Assembly::finish(asm),
            Err(ModelError::Refusal { text: "No.".into() })
        );
    }

    #[test]
    fn litellm_string_codes_inside_the_stream() {
        let e = json!({"error": {"message": "litellm.RateLimitError: slow down", "type": "None", "param": "None", "code": "429"}});
        let e = assemble(&[e.to_string()], &NoObserver).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Transient("http_429".into()));
    }

    #[test]
    fn a_call_over_the_argument_bound_is_refused_and_the_others_kept() {
        use crate::model::wire::MAX_CALL_ARGUMENTS;
        let big = json!({"content": "x".repeat(MAX_CALL_ARGUMENTS)}).to_string();
        let events = [
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "c_big", "function": {"name": "write_file", "arguments": big}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "c_ok", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]}),
                json!("tool_calls"),
            ),
            "[DONE]".to_string(),
        ];
        let r = assemble(&events, &NoObserver).unwrap();
        assert_eq!(r.tool_calls[0].oversized, Some(big.len() as u64));
        assert!(r.tool_calls[0].garbled);
        assert_eq!(r.tool_calls[0].arguments, json!({}));
        assert_eq!(r.tool_calls[0].name, "write_file");
        assert_eq!(r.tool_calls[1].arguments, json!({"command": "ls"}));
        assert_eq!(r.tool_calls[1].oversized, None);

        // The same in a body sent unstreamed, arguments a string or an object.
        for arguments in [json!(big), serde_json::from_str::<Value>(&big).unwrap()] {
            let body = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "c_big", "type": "function", "function": {"name": "write_file", "arguments": arguments}}]}}]});
            let mut asm = ChunkAssembler::default();
            Assembly::apply_body(&mut asm, &body.to_string(), &NoObserver).unwrap();
            let r = Assembly::finish(asm).unwrap();
            assert!(
                r.tool_calls[0].oversized.is_some(),
                "{}",
                &body.to_string()[..80]
            );
            assert_eq!(r.finish, FinishReason::ToolCalls);
        }
    }
}
