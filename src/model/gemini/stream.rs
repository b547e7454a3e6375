//! Assembles Gemini's streamed `GenerateContentResponse` chunks (SSE, one
//! per event; or one body when not streamed) into one `Response`: the first
//! candidate's `content.parts` (text to the observer as it arrives, thought
//! parts kept apart, `functionCall` parts whole), its `finishReason` (the
//! stream's finish marker) and `usageMetadata`. Parts that carried a
//! `thoughtSignature` are kept as they came in `extra` (`{"gemini":
//! {"parts": [...]}}`), for `request.rs` to send back to the same model.
//!
//! `MAX_TOKENS` is a truncation; `SAFETY`, `PROHIBITED_CONTENT`,
//! `RECITATION`, `BLOCKLIST` (and a prompt blocked outright) a refusal;
//! `MALFORMED_FUNCTION_CALL` a garbled tool call, which the model is asked
//! to send again (SPEC 22).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::errors::google_error;
use crate::model::wire::{
    append, made_up_id, note_model, stream_error, too_large, Arguments, Assembly as WireAssembly,
    Kept, Progress, MAX_MESSAGE_CHARS, MAX_TEXT, MAX_TOOL_CALLS, MAX_TOOL_NAME,
};
use crate::model::{
    usage_wire, FinishReason, ModelError, Response, StreamObserver, ToolCall, Usage,
};

/// At most this many parts in one reply.
const MAX_PARTS: usize = 4 * MAX_TOOL_CALLS;

/// One part of the reply as it builds up.
#[derive(Debug)]
enum Part {
    Text {
        text: String,
        thought: bool,
        signature: Option<String>,
    },
    Call {
        name: String,
        args: Arguments,
        id: Option<String>,
        signature: Option<String>,
    },
    /// Any other part (code execution and the like), kept as it came.
    Other(Value),
}

/// The reply so far.
#[derive(Debug, Default)]
pub(crate) struct Assembly {
    parts: Vec<Part>,
    calls: usize,
    kept: Kept,
    usage: Option<Usage>,
    finish_reason: Option<String>,
    finish_message: Option<String>,
    /// `promptFeedback.blockReason`: the prompt itself was refused.
    blocked: Option<String>,
    model: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireChunk<'a> {
    #[serde(default, borrow)]
    candidates: Option<Vec<WireCandidate<'a>>>,
    #[serde(default, deserialize_with = "usage_wire::object")]
    usage_metadata: Option<WireUsage>,
    #[serde(default, borrow)]
    model_version: Option<Cow<'a, str>>,
    #[serde(default)]
    prompt_feedback: Option<WireFeedback>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireCandidate<'a> {
    #[serde(default, borrow)]
    content: Option<WireContent<'a>>,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    finish_message: Option<String>,
    #[serde(default)]
    index: Option<u64>,
}

#[derive(Deserialize)]
struct WireContent<'a> {
    #[serde(default, borrow)]
    parts: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePart<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    thought: Option<bool>,
    #[serde(default, borrow)]
    thought_signature: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function_call: Option<WireCall<'a>>,
}

#[derive(Deserialize)]
struct WireCall<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    args: Option<&'a RawValue>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireFeedback {
    #[serde(default)]
    block_reason: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    #[serde(default, deserialize_with = "usage_wire::count")]
    prompt_token_count: Option<u64>,
    #[serde(default, deserialize_with = "usage_wire::count")]
    candidates_token_count: Option<u64>,
    #[serde(default, deserialize_with = "usage_wire::count")]
    thoughts_token_count: Option<u64>,
    #[serde(default, deserialize_with = "usage_wire::count")]
    tool_use_prompt_token_count: Option<u64>,
    /// A part of `promptTokenCount` (implicit or explicit cache reads).
    #[serde(default, deserialize_with = "usage_wire::count")]
    cached_content_token_count: Option<u64>,
}

impl Assembly {
    /// Applies one chunk. An `error` object fails the attempt as Google's
    /// status names it.
    pub(crate) fn apply(
        &mut self,
        data: &str,
        observer: &dyn StreamObserver,
    ) -> Result<Progress, ModelError> {
        let chunk: WireChunk =
            serde_json::from_str(data).map_err(|_| ModelError::StreamIncomplete)?;
        if let Some(error) = chunk.error.filter(|e| !e.is_null()) {
            return Err(if super::errors::is_google(&error) {
                google_error(None, &error, None)
            } else {
                stream_error(&error)
            });
        }
        note_model(&mut self.model, chunk.model_version.as_deref());
        if let Some(usage) = chunk.usage_metadata {
            let output = usage
                .candidates_token_count
                .unwrap_or(0)
                .saturating_add(usage.thoughts_token_count.unwrap_or(0));
            self.usage = Some(
                Usage {
                    input_tokens: usage
                        .prompt_token_count
                        .unwrap_or(0)
                        .saturating_add(usage.tool_use_prompt_token_count.unwrap_or(0)),
                    output_tokens: output,
                    cached_input_tokens: usage.cached_content_token_count.unwrap_or(0),
                    // Gemini bills no cache writes: its implicit cache is free to fill.
                    cache_write_tokens: 0,
                    cache_write_1h_tokens: 0,
                }
                .bounded(),
            );
        }
        if let Some(reason) = chunk.prompt_feedback.and_then(|f| f.block_reason) {
            self.blocked = Some(bounded(&reason));
            return Ok(Progress::Finished);
        }
        let first = chunk
            .candidates
            .into_iter()
            .flatten()
            .find(|c| c.index.unwrap_or(0) == 0);
        let Some(candidate) = first else {
            return Ok(Progress::Continue);
        };
        let parts = candidate.content.and_then(|c| c.parts).unwrap_or_default();
        for raw in parts {
            self.add_part(raw, observer)?;
        }
        if let Some(message) = candidate.finish_message {
            self.finish_message = Some(bounded(&message));
        }
        match candidate.finish_reason {
            Some(reason) if !reason.is_empty() && reason != "FINISH_REASON_UNSPECIFIED" => {
                self.finish_reason = Some(bounded(&reason));
                Ok(Progress::Finished)
            }
            _ => Ok(Progress::Continue),
        }
    }

    fn add_part(
        &mut self,
        raw: &RawValue,
        observer: &dyn StreamObserver,
    ) -> Result<(), ModelError> {
        let part: WirePart<'_> =
            serde_json::from_str(raw.get()).map_err(|_| ModelError::StreamIncomplete)?;
        let signature = part
            .thought_signature
            .filter(|s| !s.is_empty())
            .map(|s| {
                let mut kept = String::new();
                append(&mut kept, &s, MAX_TEXT, "a thought signature").map(|()| kept)
            })
            .transpose()?;
        if let Some(call) = part.function_call {
            observer.tool_call_delta();
            self.calls += 1;
            if self.calls > MAX_TOOL_CALLS {
                return Err(too_large("the number of tool calls"));
            }
            let name = call.name.unwrap_or_default();
            let id = call.id.filter(|i| !i.is_empty());
            if name.len() > MAX_TOOL_NAME || id.as_ref().is_some_and(|i| i.len() > MAX_TOOL_NAME) {
                return Err(too_large("a tool name or id"));
            }
            let mut args = Arguments::default();
            if let Some(raw) = call.args {
                args.push_raw(raw, &mut self.kept)?;
            }
            return self.push(Part::Call {
                name: name.into_owned(),
                args,
                id: id.map(Cow::into_owned),
                signature,
            });
        }
        if let Some(text) = part.text {
            let thought = part.thought.unwrap_or(false);
            if !thought && !text.is_empty() {
                observer.text_delta(&text);
            }
            // Unsigned text continues the text before it; a signed part
            // stays a part of its own, as Google asks.
            if signature.is_none() {
                if let Some(Part::Text {
                    text: last,
                    thought: last_thought,
                    signature: None,
                }) = self.parts.last_mut()
                {
                    if *last_thought == thought {
                        return append(last, &text, MAX_TEXT, "the reply text");
                    }
                }
                if text.is_empty() {
                    return Ok(());
                }
            }
            let mut kept = String::new();
            append(&mut kept, &text, MAX_TEXT, "the reply text")?;
            return self.push(Part::Text {
                text: kept,
                thought,
                signature,
            });
        }
        if raw.get().len() > MAX_TEXT {
            return Err(too_large("a reply part"));
        }
        let value = serde_json::from_str(raw.get()).map_err(|_| ModelError::StreamIncomplete)?;
        self.push(Part::Other(value))
    }

    fn push(&mut self, part: Part) -> Result<(), ModelError> {
        if self.parts.len() >= MAX_PARTS {
            return Err(too_large("the number of reply parts"));
        }
        self.parts.push(part);
        Ok(())
    }

    /// The whole reply.
    pub(crate) fn finish(self) -> Result<Response, ModelError> {
        if let Some(reason) = self.blocked {
            return Err(ModelError::Refusal {
                text: format!("the prompt was blocked (blockReason: {reason})"),
            });
        }
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        let mut wire_parts = Vec::new();
        let mut signed = false;
        for part in self.parts {
            match part {
                Part::Text {
                    text: t,
                    thought,
                    signature,
                } => {
                    if !thought {
                        text.push_str(&t);
                    }
                    let mut part = json!({"text": t});
                    if thought {
                        part["thought"] = json!(true);
                    }
                    if let Some(signature) = signature {
                        signed = true;
                        part["thoughtSignature"] = json!(signature);
                    }
                    wire_parts.push(part);
                }
                Part::Call {
                    name,
                    args,
                    id,
                    signature,
                } => {
                    let call = args.into_call(id.clone().unwrap_or_default(), name);
                    let args = if call.arguments.is_object() && !call.garbled {
                        call.arguments.clone()
                    } else {
                        json!({})
                    };
                    let mut call_part = json!({"name": call.name, "args": args});
                    if let Some(id) = id {
                        call_part["id"] = json!(id);
                    }
                    let mut part = json!({"functionCall": call_part});
                    if let Some(signature) = signature {
                        signed = true;
                        part["thoughtSignature"] = json!(signature);
                    }
                    wire_parts.push(part);
                    tool_calls.push(call);
                }
                Part::Other(value) => wire_parts.push(value),
            }
        }
        let finish = match self.finish_reason.as_deref() {
            Some(
                "SAFETY" | "PROHIBITED_CONTENT" | "RECITATION" | "BLOCKLIST" | "SPII"
                | "IMAGE_SAFETY",
            ) => {
                let reason = self.finish_reason.unwrap_or_default();
                let text = if text.trim().is_empty() {
                    format!("the reply was stopped as a refusal (finishReason: {reason})")
                } else {
                    text
                };
                return Err(ModelError::Refusal { text });
            }
            Some("MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL") => {
                tool_calls.push(malformed_call(self.finish_message.as_deref()));
                FinishReason::ToolCalls
            }
            Some("MAX_TOKENS") => FinishReason::Length,
            _ if !tool_calls.is_empty() => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        };
        Ok(Response {
            text,
            tool_calls,
            usage: self.usage.unwrap_or_default(),
            usage_reported: self.usage.is_some(),
            finish,
            extra: signed.then(|| json!({"gemini": {"parts": wire_parts}})),
            cost_override: None,
            model: self.model,
        })
    }
}

/// The call a `MALFORMED_FUNCTION_CALL` stands for: garbled (never run, the
/// model asked to send it again), named as its `finishMessage` names it
/// (`Malformed function call: print(default_api.write_file(...))`).
fn malformed_call(message: Option<&str>) -> ToolCall {
    let message = message.unwrap_or("");
    let name = message
        .split_once("default_api.")
        .map(|(_, rest)| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .take(MAX_TOOL_NAME)
                .collect::<String>()
        })
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "malformed_function_call".into());
    ToolCall {
        id: made_up_id(),
        name,
        arguments: Value::String(message.to_string()),
        garbled: true,
        oversized: None,
    }
}

/// A server's string, cut to the bound on vendor messages.
fn bounded(text: &str) -> String {
    text.chars().take(MAX_MESSAGE_CHARS).collect()
}

impl WireAssembly for Assembly {
    fn apply(&mut self, data: &str, observer: &dyn StreamObserver) -> Result<Progress, ModelError> {
        Assembly::apply(self, data, observer)
    }

    /// An unstreamed `generateContent` body is one chunk.
    fn apply_body(&mut self, body: &str, observer: &dyn StreamObserver) -> Result<(), ModelError> {
        match Assembly::apply(self, body, observer)? {
            Progress::Finished => Ok(()),
            Progress::Continue => Err(ModelError::StreamIncomplete),
        }
    }

    fn finish(self) -> Result<Response, ModelError> {
        Assembly::finish(self)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::model::ErrorClass;

    #[derive(Default)]
    struct Seen {
        text: Mutex<String>,
    }
    impl StreamObserver for Seen {
        fn text_delta(&self, text: &str) {
            self.text.lock().unwrap().push_str(text);
        }
    }

    fn run(chunks: &[Value]) -> (Result<Response, ModelError>, Seen) {
        let seen = Seen::default();
        let mut a = Assembly::default();
        for c in chunks {
            match a.apply(&c.to_string(), &seen) {
                Ok(Progress::Finished) => return (a.finish(), seen),
                Ok(Progress::Continue) => {}
                Err(e) => return (Err(e), seen),
            }
        }
        (Err(ModelError::StreamIncomplete), seen)
    }

    fn chunk(parts: Value, finish: Option<&str>) -> Value {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if let Some(reason) = finish {
            candidate["finishReason"] = json!(reason);
        }
        json!({"candidates": [candidate], "modelVersion": "gemini-2.5-flash", "responseId": "r1"})
    }

    fn usage() -> Value {
        json!({"promptTokenCount": 120, "candidatesTokenCount": 30, "thoughtsTokenCount": 12, "cachedContentTokenCount": 100, "totalTokenCount": 162})
    }

    /// `cachedContentTokenCount` is a part of `promptTokenCount` (Gemini's
    /// implicit cache); a lying count is cut to the prompt, a string read
    /// as missing.
    #[test]
    fn cached_content_is_read_and_bounded() {
        let with_usage = |usage: Value| {
            let mut last = chunk(json!([{"text": "ok"}]), Some("STOP"));
            last["usageMetadata"] = usage;
            run(&[last]).0.unwrap().usage
        };
        let u = with_usage(
            json!({"promptTokenCount": 40000, "candidatesTokenCount": 10, "cachedContentTokenCount": 32000}),
        );
        assert_eq!(
            (u.input_tokens, u.cached_input_tokens, u.cache_write_tokens),
            (40000, 32000, 0)
        );
        let u = with_usage(json!({"promptTokenCount": 100, "cachedContentTokenCount": 9999}));
        assert_eq!(u.cached_input_tokens, 100);
        let u = with_usage(
            json!({"promptTokenCount": "a lot", "cachedContentTokenCount": -1, "candidatesTokenCount": u64::MAX, "thoughtsTokenCount": u64::MAX}),
        );
        assert_eq!((u.input_tokens, u.cached_input_tokens), (0, 0));
        assert_eq!(u.output_tokens, crate::conversation::MAX_RESPONSE_TOKENS);
    }

    #[test]
    fn text_and_calls_assemble_with_usage() {
        let mut last = chunk(
            json!([{"functionCall": {"name": "bash", "args": {"command": "ls"}}}]),
            Some("STOP"),
        );
        last["usageMetadata"] = usage();
        let (r, seen) = run(&[
            chunk(json!([{"text": "Let me "}]), None),
            chunk(json!([{"text": "look."}]), None),
            last,
        ]);
        let r = r.unwrap();
        assert_eq!(r.text, "Let me look.");
        assert_eq!(*seen.text.lock().unwrap(), "Let me look.");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls"}));
        assert!(r.tool_calls[0].id.starts_with("call_"));
        assert_eq!(r.finish, FinishReason::ToolCalls);
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 120,
                output_tokens: 42,
                cached_input_tokens: 100,
                ..Usage::default()
            }
        );
        assert!(r.usage_reported);
        assert_eq!(r.model.as_deref(), Some("gemini-2.5-flash"));
        assert!(r.extra.is_none(), "no signature, nothing to keep");
    }

    #[test]
    fn signed_parts_are_kept_as_they_came() {
        let (r, seen) = run(&[
            chunk(json!([{"text": "plan", "thought": true}]), None),
            chunk(
                json!([{"functionCall": {"name": "bash", "args": {"command": "ls"}}, "thoughtSignature": "c2ln"}]),
                None,
            ),
            chunk(
                json!([{"text": "", "thoughtSignature": "ZW5k"}]),
                Some("STOP"),
            ),
        ]);
        let r = r.unwrap();
        assert_eq!(r.text, "", "a thought is not the answer");
        assert_eq!(*seen.text.lock().unwrap(), "");
        assert_eq!(
            r.extra.unwrap(),
            json!({"gemini": {"parts": [
                {"text": "plan", "thought": true},
                {"functionCall": {"name": "bash", "args": {"command": "ls"}}, "thoughtSignature": "c2ln"},
                {"text": "", "thoughtSignature": "ZW5k"},
            ]}})
        );
    }

    #[test]
    fn finish_reasons_map_onto_the_classes() {
        let (r, _) = run(&[chunk(json!([{"text": "cut"}]), Some("MAX_TOKENS"))]);
        assert_eq!(r.unwrap().finish, FinishReason::Length);
        for reason in ["SAFETY", "PROHIBITED_CONTENT", "RECITATION", "BLOCKLIST"] {
            let (r, _) = run(&[chunk(json!([]), Some(reason))]);
            let e = r.unwrap_err();
            assert!(matches!(e, ModelError::Refusal { .. }), "{reason}");
            assert!(e.to_string().contains(reason), "{e}");
        }
        let (r, _) = run(&[json!({"promptFeedback": {"blockReason": "SAFETY"}})]);
        assert!(matches!(r.unwrap_err(), ModelError::Refusal { .. }));
    }

    #[test]
    fn a_malformed_function_call_is_a_garbled_call() {
        let mut c = chunk(json!([]), Some("MALFORMED_FUNCTION_CALL"));
        c["candidates"][0]["finishMessage"] =
            json!("Malformed function call: print(default_api.write_file(path='a.txt', content=))");
        let (r, _) = run(&[c]);
        let r = r.unwrap();
        assert_eq!(r.finish, FinishReason::ToolCalls);
        assert_eq!(r.tool_calls.len(), 1);
        assert!(r.tool_calls[0].garbled);
        assert_eq!(r.tool_calls[0].name, "write_file");
    }

    #[test]
    fn no_finish_reason_is_an_incomplete_stream() {
        let (r, _) = run(&[chunk(json!([{"text": "half"}]), None)]);
        assert_eq!(r.unwrap_err(), ModelError::StreamIncomplete);
    }

    #[test]
    fn errors_in_the_stream_are_classified() {
        let (r, _) = run(&[
            chunk(json!([{"text": "a"}]), None),
            json!({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}),
        ]);
        assert_eq!(
            r.unwrap_err().class(),
            ErrorClass::Transient("http_503".into())
        );
    }

    #[test]
    fn too_many_calls_are_refused() {
        let calls: Vec<Value> = (0..=MAX_TOOL_CALLS)
            .map(|_| json!({"functionCall": {"name": "bash", "args": {}}}))
            .collect();
        let (r, _) = run(&[chunk(Value::Array(calls), Some("STOP"))]);
        assert!(matches!(r.unwrap_err(), ModelError::Malformed { .. }));
    }
}
