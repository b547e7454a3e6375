//! The Ollama wire form of the one HTTP adapter (`ollama` and named providers with `api: ollama`): one
//! streaming POST to `{endpoint}/api/chat` per call, read as NDJSON. Text
//! arrives in pieces, tool calls whole with object arguments, and the line
//! with `done: true` is the finish marker carrying the token counts. Each
//! line is read into borrowed types: a tool call's arguments stay raw JSON
//! until they are measured against their bound.

use std::borrow::Cow;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::adapter::{Call, HttpModel, WireForm};
use super::api::{Api, ToolChoiceForm};
use super::http::Auth;
use super::ndjson::NdjsonReader;
use super::spec::{WireApi, WireOptions};
use super::wire::{
    append, note_model, stream_error, too_large, Arguments, Kept, MAX_TEXT, MAX_TOOL_CALLS,
    MAX_TOOL_NAME,
};
use super::wire_cache::{push_json, WireBody, WireCache};
use super::{
    http::HttpTransport, FinishReason, Message, ModelError, Request, Response, Role,
    StreamObserver, ToolCall, Usage,
};

/// The Ollama `/api/chat` wire form: NDJSON lines assembled by
/// `LineAssembler`.
#[derive(Debug, Default)]
struct OllamaForm {
    /// Each message's bytes in `/api/chat` form.
    cache: WireCache,
}

impl HttpModel {
    /// A model served by Ollama.
    pub fn ollama(transport: HttpTransport, model: &str, output_cap: Option<u32>) -> HttpModel {
        HttpModel::new(transport, model, output_cap, OllamaForm::default())
    }
}

/// Ollama's `/api/chat` as a value (`model/api.rs`): it has no
/// `tool_choice`.
pub(crate) const API: Api = Api {
    name: WireApi::named("ollama"),
    key: Auth::Bearer,
    tool_choice: ToolChoiceForm::Refused,
    build: |transport, resolved| {
        HttpModel::ollama(transport, resolved.spec.model(), resolved.max_output_tokens)
    },
    resolve: None,
    home: None,
};

#[async_trait]
impl WireForm for OllamaForm {
    async fn exchange(&self, call: Call<'_>) -> Result<Response, ModelError> {
        let budget = call.request.reply_budget(call.output_cap);
        let body = request_bytes(call.model, budget, call.request, call.wire, &self.cache);
        let (response, sent) = call
            .transport
            .post("/api/chat", self.cache.lend(body))
            .await?;
        let mut lines = NdjsonReader::new(response, sent, call.transport.timeouts());
        let mut reply = LineAssembler::default();
        while let Some(line) = lines.next().await? {
            reply.feed(line, call.observer)?;
            if reply.done {
                break;
            }
        }
        reply.finish()
    }
}

/// The JSON body of one streaming `/api/chat` request, each message
/// serialised afresh: what `request_bytes` must send, byte for byte.
#[cfg(test)]
pub(crate) fn request_body(model: &str, budget: Option<u32>, request: &Request<'_>) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    messages.extend(system_message(request));
    messages.extend(
        request
            .messages
            .iter()
            .map(|m| message(m, tool_name(m, request.messages))),
    );
    let mut body = fields(model, budget, request);
    body.insert("messages".into(), Value::Array(messages));
    Value::Object(body)
}

/// The same body as bytes, each message written from its bytes in `cache`,
/// sent as the provider's `wire` options ask.
pub(crate) fn request_bytes(
    model: &str,
    budget: Option<u32>,
    request: &Request<'_>,
    wire: WireOptions,
    cache: &WireCache,
) -> WireBody {
    let mut body = fields(model, budget, request);
    super::wire::apply_options(&mut body, API.tool_choice, wire);
    cache.fill().body(&body, "messages", |fill, array| {
        if let Some(system) = system_message(request) {
            array.push_value(&system);
        }
        for m in request.messages {
            let name = tool_name(m, request.messages);
            let key = fill.key().message(m, None).str(name).finish();
            fill.push_or(array, key, || {
                let mut bytes = Vec::new();
                push_json(&mut bytes, &message(m, name));
                bytes
            });
        }
    })
}

fn system_message(request: &Request<'_>) -> Option<Value> {
    (!request.system.is_empty()).then(|| json!({"role": "system", "content": request.system}))
}

/// The body's fields, `messages` (in its place) left `null`.
fn fields(model: &str, budget: Option<u32>, request: &Request<'_>) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("messages".into(), Value::Null);
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters,
                }})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("stream".into(), json!(true));
    if let Some(budget) = budget {
        body.insert("options".into(), json!({"num_predict": budget}));
    }
    if let Some(effort) = request.reasoning_effort {
        // Ollama's `think` takes a boolean or a level (`low`/`medium`/`high`).
        body.insert("think".into(), json!(effort));
    }
    body
}

/// A message in `/api/chat` form; `tool_name` is a tool result's tool.
fn message(m: &Message, tool_name: &str) -> Value {
    match m.role {
        Role::System => json!({"role": "system", "content": m.content}),
        Role::User => json!({"role": "user", "content": m.content}),
        Role::Assistant if m.tool_calls.is_empty() => {
            json!({"role": "assistant", "content": m.content})
        }
        Role::Assistant => json!({
            "role": "assistant",
            "content": m.content,
            "tool_calls": m.tool_calls.iter().map(|c| json!({"function": {
                "name": c.name,
                // Ollama wants an object; a garbled call goes back empty.
                "arguments": if c.arguments.is_object() { c.arguments.clone() } else { json!({}) },
            }})).collect::<Vec<_>>(),
        }),
        Role::Tool => {
            json!({"role": "tool", "tool_name": tool_name, "content": m.content})
        }
    }
}

/// The name of the tool a result answers: its own, else the matching call's
/// (empty for other messages).
fn tool_name<'a>(result: &'a Message, history: &'a [Message]) -> &'a str {
    if result.role != Role::Tool {
        return "";
    }
    if let Some(name) = &result.name {
        return name;
    }
    history
        .iter()
        .flat_map(|m| &m.tool_calls)
        .find(|c| Some(&c.id) == result.tool_call_id.as_ref())
        .map(|c| c.name.as_str())
        .unwrap_or_default()
}

/// One NDJSON line: the fields read, the rest skipped. Small fields stay
/// `Value`s, so a server that sends them in another type is ignored there
/// rather than failing the line.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    model: Option<Value>,
    #[serde(default, borrow)]
    message: Option<LineMessage<'a>>,
    #[serde(default)]
    done: Option<Value>,
    #[serde(default)]
    done_reason: Option<Value>,
    #[serde(default)]
    prompt_eval_count: Option<Value>,
    #[serde(default)]
    eval_count: Option<Value>,
}

#[derive(Deserialize)]
struct LineMessage<'a> {
    #[serde(default, borrow)]
    content: Option<&'a RawValue>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<LineCall<'a>>>,
}

#[derive(Deserialize)]
struct LineCall<'a> {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default, borrow)]
    function: Option<LineFunction<'a>>,
}

#[derive(Deserialize)]
struct LineFunction<'a> {
    #[serde(default)]
    name: Option<Value>,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
}

/// The reply as assembled from NDJSON lines so far.
#[derive(Debug, Default)]
pub(crate) struct LineAssembler {
    text: String,
    tool_calls: Vec<ToolCall>,
    /// The argument text the calls keep between them.
    kept: Kept,
    done: bool,
    done_reason: Option<String>,
    usage: Usage,
    usage_reported: bool,
    model: Option<String>,
}

impl LineAssembler {
    /// Takes one NDJSON line. A line that is not JSON fails the attempt as
    /// an incomplete stream; an `error` line as the error it names.
    pub(crate) fn feed(
        &mut self,
        line: &str,
        observer: &dyn StreamObserver,
    ) -> Result<(), ModelError> {
        let line: Line<'_> =
            serde_json::from_str(line).map_err(|_| ModelError::StreamIncomplete)?;
        if let Some(error) = line.error.filter(|e| !e.is_null()) {
            // A failure after the reply had started: the server's fault,
            // unless it names another cause.
            return Err(stream_error(&error));
        }
        note_model(&mut self.model, line.model.as_ref().and_then(Value::as_str));
        if let Some(message) = line.message {
            let text = match message.content {
                Some(raw) => super::wire::raw_text(raw)?,
                None => Cow::Borrowed(""),
            };
            if !text.is_empty() {
                append(&mut self.text, &text, MAX_TEXT, "the reply text")?;
                observer.text_delta(&text);
            }
            for call in message.tool_calls.unwrap_or_default() {
                if self.tool_calls.len() >= MAX_TOOL_CALLS {
                    return Err(too_large("the number of tool calls"));
                }
                observer.tool_call_delta();
                let call = tool_call(call, &mut self.kept)?;
                self.tool_calls.push(call);
            }
        }
        if line.done.as_ref().and_then(Value::as_bool) == Some(true) {
            self.done = true;
            self.done_reason = line
                .done_reason
                .as_ref()
                .and_then(Value::as_str)
                .map(str::to_string);
            // Ollama leaves `prompt_eval_count` out when the prompt was cached.
            self.usage_reported = line.eval_count.is_some() || line.prompt_eval_count.is_some();
            let count = |v: &Option<Value>| v.as_ref().and_then(Value::as_u64).unwrap_or(0);
            // Ollama reports no cache reads or writes.
            self.usage = Usage {
                input_tokens: count(&line.prompt_eval_count),
                output_tokens: count(&line.eval_count),
                ..Usage::default()
            }
            .bounded();
        }
        Ok(())
    }

    /// The whole reply; a stream that never sent `done: true` is incomplete.
    pub(crate) fn finish(self) -> Result<Response, ModelError> {
        if !self.done {
            return Err(ModelError::StreamIncomplete);
        }
        let finish = match self.done_reason.as_deref() {
            Some("length") => FinishReason::Length,
            _ if !self.tool_calls.is_empty() => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        };
        Ok(Response {
            text: self.text,
            tool_calls: self.tool_calls,
            usage: self.usage,
            usage_reported: self.usage_reported,
            finish,
            extra: None,
            cost_override: None,
            model: self.model,
        })
    }
}

/// A whole tool call as Ollama sends it (arguments an object, or a string
/// of JSON); an id is made up when absent.
fn tool_call(call: LineCall<'_>, kept: &mut Kept) -> Result<ToolCall, ModelError> {
    let text = |v: Option<Value>| match v {
        Some(Value::String(s)) => s,
        _ => String::new(),
    };
    let id = text(call.id);
    let (name, raw) = match call.function {
        Some(f) => (text(f.name), f.arguments),
        None => (String::new(), None),
    };
    if name.len() > MAX_TOOL_NAME || id.len() > MAX_TOOL_NAME {
        return Err(too_large("a tool name or id"));
    }
    let mut arguments = Arguments::default();
    if let Some(raw) = raw {
        arguments.push_raw(raw, kept)?;
    }
    Ok(arguments.into_call(id, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ErrorClass, NoObserver, ToolSpec};

    fn line(message: Value) -> Value {
        json!({"model": "qwen3", "created_at": "2025-05-27T22:54:57.641643Z", "message": message, "done": false})
    }

    fn done(reason: &str) -> Value {
        json!({"model": "qwen3", "created_at": "2025-05-27T22:54:58.1Z", "message": {"role": "assistant", "content": ""},
               "done_reason": reason, "done": true, "total_duration": 885095291, "load_duration": 3753500,
               "prompt_eval_count": 122, "prompt_eval_duration": 328493000, "eval_count": 33, "eval_duration": 552222000})
    }

    fn assemble(lines: &[Value]) -> Result<Response, ModelError> {
        let mut asm = LineAssembler::default();
        for l in lines {
            asm.feed(&l.to_string(), &NoObserver)?;
        }
        asm.finish()
    }

    #[test]
    fn text_tool_calls_and_usage() {
        let r = assemble(&[
            line(json!({"role": "assistant", "content": "Let me "})),
            line(json!({"role": "assistant", "content": "look."})),
            line(json!({"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "bash", "arguments": {"command": "ls"}}}]})),
            done("stop"),
        ])
        .unwrap();
        assert_eq!(r.text, "Let me look.");
        assert_eq!(r.model.as_deref(), Some("qwen3"));
        assert_eq!(r.finish, FinishReason::ToolCalls);
        assert_eq!(r.tool_calls[0].name, "bash");
        assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls"}));
        assert!(r.tool_calls[0].id.starts_with("call_"));
        assert_eq!(r.usage.input_tokens, 122);
        assert_eq!(r.usage.output_tokens, 33);
    }

    #[test]
    fn length_and_missing_done() {
        assert_eq!(
            assemble(&[line(json!({"content": "abc"})), done("length")])
                .unwrap()
                .finish,
            FinishReason::Length
        );
        assert_eq!(
            assemble(&[line(json!({"content": "abc"}))]),
            Err(ModelError::StreamIncomplete)
        );
    }

    #[test]
    fn error_lines_and_string_arguments() {
        let e = assemble(&[json!({"error": "an error was encountered while running the model"})])
            .unwrap_err();
        assert_eq!(e.class(), ErrorClass::Transient("http_500".into()));
        let r = assemble(&[
            line(json!({"tool_calls": [{"id": "x1", "function": {"name": "bash", "arguments": "{\"command\": "}}]})),
            done("stop"),
        ])
        .unwrap();
        assert_eq!(r.tool_calls[0].id, "x1");
        assert!(r.tool_calls[0].garbled);
    }

    #[test]
    fn request_uses_ollama_forms() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "bash".into(),
            arguments: json!({"command": "ls"}),
            garbled: false,
            oversized: None,
        };
        let messages = vec![
            Message::new(Role::User, "list", 0),
            Message {
                tool_calls: vec![call.clone()],
                ..Message::new(Role::Assistant, "", 1)
            },
            Message {
                name: None,
                ..Message::tool_result(&call, "a.txt", 1)
            },
        ];
        let tools = [ToolSpec {
            name: "bash".into(),
            description: "Run".into(),
            parameters: json!({"type": "object"}),
        }];
        let request = Request {
            system: "sys",
            messages: &messages,
            tools: &tools,
            output_schema: None,
            max_output_tokens: Some(500),
            reasoning_effort: Some("low"),
            spec: "ollama/qwen3",
            prompt_cache: crate::model::PromptCache::On,
            cache_key: None,
        };
        let body = request_body("qwen3", request.reply_budget(Some(300)), &request);
        assert_eq!(
            body,
            json!({
                "model": "qwen3",
                "messages": [
                    {"role": "system", "content": "sys"},
                    {"role": "user", "content": "list"},
                    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "bash", "arguments": {"command": "ls"}}}]},
                    {"role": "tool", "tool_name": "bash", "content": "a.txt"},
                ],
                "tools": [{"type": "function", "function": {"name": "bash", "description": "Run", "parameters": {"type": "object"}}}],
                "stream": true,
                "options": {"num_predict": 300},
                "think": "low",
            })
        );
    }

    #[test]
    fn a_call_over_the_argument_bound_is_refused_and_the_others_kept() {
        use crate::model::wire::MAX_CALL_ARGUMENTS;
        let big = json!({"content": "x".repeat(MAX_CALL_ARGUMENTS)});
        let r = assemble(&[
            line(json!({"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "write_file", "arguments": big}},
                {"function": {"name": "bash", "arguments": {"command": "ls"}}}]})),
            done("stop"),
        ])
        .unwrap();
        assert_eq!(
            r.tool_calls[0].oversized,
            Some(big.to_string().len() as u64)
        );
        assert!(r.tool_calls[0].garbled);
        assert_eq!(r.tool_calls[0].arguments, json!({}));
        assert_eq!(r.tool_calls[1].arguments, json!({"command": "ls"}));
        assert_eq!(r.finish, FinishReason::ToolCalls);
    }
}
