//! The Ollama adapter (`ollama` and named providers with `api: ollama`): one
//! streaming POST to `{endpoint}/api/chat` per call, read as NDJSON. Text
//! arrives in pieces, tool calls whole with object arguments, and the line
//! with `done: true` is the finish marker carrying the token counts.

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::http::{HttpTransport, NdjsonReader};
use super::spec::{WireApi, WireOptions};
use super::wire::{
    append, made_up_id, note_model, parse_arguments, stream_error, too_large, MAX_ARGUMENTS,
    MAX_TOOL_CALLS, MAX_TOOL_NAME,
};
use super::wire_cache::{push_json, WireBody, WireCache};
use super::{
    FinishReason, Message, Model, ModelError, Request, Response, Role, StreamObserver, ToolCall,
    Usage,
};

/// One model served by Ollama.
#[derive(Debug)]
pub struct OllamaChat {
    transport: HttpTransport,
    model: String,
    /// The model's own reply limit from config (`max_output_tokens`).
    output_cap: Option<u32>,
    /// Each message's bytes in `/api/chat` form.
    cache: WireCache,
    /// The provider's `stream` and `tool_choice` options.
    wire: WireOptions,
}

impl OllamaChat {
    pub fn new(transport: HttpTransport, model: &str, output_cap: Option<u32>) -> Self {
        OllamaChat {
            transport,
            model: model.to_string(),
            output_cap,
            cache: WireCache::default(),
            wire: WireOptions::default(),
        }
    }

    /// Sends requests as the provider's config asks (`stream`, `tool_choice`).
    pub(crate) fn with_wire(mut self, wire: WireOptions) -> Self {
        self.wire = wire;
        self
    }
}

#[async_trait]
impl Model for OllamaChat {
    async fn complete(
        &self,
        request: &Request<'_>,
        observer: &dyn StreamObserver,
    ) -> Result<Response, ModelError> {
        let budget = request.reply_budget(self.output_cap);
        let body = request_bytes(&self.model, budget, request, self.wire, &self.cache);
        let (response, sent) = self
            .transport
            .post("/api/chat", self.cache.lend(body))
            .await?;
        let mut lines = NdjsonReader::new(response, sent, self.transport.timeouts());
        let mut reply = LineAssembler::default();
        while let Some(line) = lines.next().await? {
            reply.feed(&line, observer)?;
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
    super::wire::apply_options(&mut body, WireApi::Ollama, wire);
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

/// The reply as assembled from NDJSON lines so far.
#[derive(Debug, Default)]
pub(crate) struct LineAssembler {
    text: String,
    tool_calls: Vec<ToolCall>,
    done: bool,
    done_reason: Option<String>,
    usage: Usage,
    usage_reported: bool,
    model: Option<String>,
}

impl LineAssembler {
    /// Takes one NDJSON line. An `error` line fails the attempt.
    pub(crate) fn feed(
        &mut self,
        line: &Value,
        observer: &dyn StreamObserver,
    ) -> Result<(), ModelError> {
        if let Some(error) = line.get("error").filter(|e| !e.is_null()) {
            // A failure after the reply had started: the server's fault,
            // unless it names another cause.
            return Err(stream_error(error));
        }
        note_model(&mut self.model, line.get("model").and_then(Value::as_str));
        if let Some(message) = line.get("message") {
            if let Some(text) = message
                .get("content")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                append(&mut self.text, text, MAX_ARGUMENTS, "the reply text")?;
                observer.text_delta(text);
            }
            for call in message
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if self.tool_calls.len() >= MAX_TOOL_CALLS {
                    return Err(too_large("the number of tool calls"));
                }
                observer.tool_call_delta();
                self.tool_calls.push(tool_call(call)?);
            }
        }
        if line.get("done").and_then(Value::as_bool) == Some(true) {
            self.done = true;
            self.done_reason = line
                .get("done_reason")
                .and_then(Value::as_str)
                .map(str::to_string);
            let count = |key: &str| line.get(key).and_then(Value::as_u64).unwrap_or(0);
            // Ollama leaves `prompt_eval_count` out when the prompt was cached.
            self.usage_reported =
                line.get("eval_count").is_some() || line.get("prompt_eval_count").is_some();
            self.usage = Usage {
                input_tokens: count("prompt_eval_count"),
                output_tokens: count("eval_count"),
                cached_input_tokens: 0,
            };
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

/// A whole tool call as Ollama sends it; an id is made up when absent.
fn tool_call(call: &Value) -> Result<ToolCall, ModelError> {
    let id = call
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .map(str::to_string)
        .unwrap_or_else(made_up_id);
    let function = call.get("function").unwrap_or(&Value::Null);
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if name.len() > MAX_TOOL_NAME || id.len() > MAX_TOOL_NAME {
        return Err(too_large("a tool name or id"));
    }
    let (arguments, garbled) = match function.get("arguments") {
        Some(arguments @ Value::Object(_)) => (arguments.clone(), false),
        Some(Value::String(raw)) => parse_arguments(raw.clone()),
        None | Some(Value::Null) => parse_arguments(String::new()),
        Some(other) => parse_arguments(other.to_string()),
    };
    Ok(ToolCall {
        id,
        name,
        arguments,
        garbled,
    })
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
            asm.feed(l, &NoObserver)?;
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
}
