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
use crate::model::{
    usage_wire, FinishReason, ModelError, Response, StreamObserver, ToolCall, Usage,
};

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "usage_wire::object")]
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
    #[serde(default, deserialize_with = "usage_wire::object")]
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
    #[serde(default, deserialize_with = "usage_wire::count")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "usage_wire::count")]
    completion_tokens: Option<u64>,
    #[serde(default, deserialize_with = "usage_wire::object")]
    prompt_tokens_details: Option<PromptDetails>,
}

/// `cached_tokens` are the reads (OpenAI, Azure); `cache_write_tokens` the
/// writes where a server reports them (OpenRouter).
#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default, deserialize_with = "usage_wire::count_or_zero")]
    cached_tokens: u64,
    #[serde(default, deserialize_with = "usage_wire::count_or_zero")]
    cache_write_tokens: u64,
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
        self.usage_reported |= usage.prompt_tokens.is_some() || usage.completion_tokens.is_some();
        let details = usage.prompt_tokens_details;
        self.usage = Usage {
            input_tokens: usage.prompt_tokens.unwrap_or(0),
            output_tokens: usage.completion_tokens.unwrap_or(0),
            cached_input_tokens: details.as_ref().map_or(0, |d| d.cached_tokens),
            cache_write_tokens: details.as_ref().map_or(0, |d| d.cache_write_tokens),
            cache_write_1h_tokens: 0,
        }
        .bounded();
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
mod tests;
