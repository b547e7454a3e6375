//! Translates a provider-neutral `Request` into a Chat Completions request
//! body: messages, tools, the reply budget and reasoning effort, in the
//! parameter names of each OpenAI-compatible dialect; the run lineage's
//! `prompt_cache_key` (SPEC 25) for OpenAI and named providers.

use serde_json::{json, Map, Value};

use crate::model::spec::Dialect;
use crate::model::spec::WireOptions;
use crate::model::wire::apply_options;
use crate::model::wire_cache::{push_json, WireBody, WireCache};
use crate::model::{Message, Request, Role, ToolCall, ToolSpec};

impl Dialect {
    fn budget_field(self) -> &'static str {
        match self {
            Dialect::OpenAi => "max_completion_tokens",
            Dialect::OpenRouter | Dialect::Compatible => "max_tokens",
        }
    }

    /// Whether the request carries the run's `prompt_cache_key`: OpenAI's
    /// and a named provider's (OpenAI-compatible servers ignore what they
    /// do not know); OpenRouter routes by its own rules.
    fn takes_cache_key(self) -> bool {
        self != Dialect::OpenRouter
    }
}

/// The JSON body of one streaming Chat Completions request. `budget` is the
/// reply budget already capped by the model's configured limit. Each message
/// serialised afresh: what `request_bytes` must send, byte for byte.
#[cfg(test)]
pub(crate) fn request_body(
    model: &str,
    dialect: Dialect,
    budget: Option<u32>,
    request: &Request<'_>,
) -> Value {
    let mut body = fields(model, dialect, budget, request);
    body.insert("messages".into(), Value::Array(messages(request)));
    Value::Object(body)
}

/// The same body as bytes, each message written from its bytes in `cache`,
/// sent as the provider's `wire` options ask.
pub(crate) fn request_bytes(
    model: &str,
    dialect: Dialect,
    budget: Option<u32>,
    request: &Request<'_>,
    wire: WireOptions,
    cache: &WireCache,
) -> WireBody {
    let mut body = fields(model, dialect, budget, request);
    apply_options(&mut body, super::API.tool_choice, wire);
    cache.fill().body(&body, "messages", |fill, array| {
        if let Some(system) = system_message(request) {
            array.push_value(&system);
        }
        for m in request.messages {
            let key = fill.key().message(m, None).finish();
            fill.push_or(array, key, || {
                let mut bytes = Vec::new();
                push_json(&mut bytes, &message(m));
                bytes
            });
        }
    })
}

/// The body's fields, `messages` (in its place) left `null`.
fn fields(
    model: &str,
    dialect: Dialect,
    budget: Option<u32>,
    request: &Request<'_>,
) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("messages".into(), Value::Null);
    if !request.tools.is_empty() {
        body.insert(
            "tools".into(),
            Value::Array(request.tools.iter().map(tool).collect()),
        );
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    if let Some(key) = request.cache_key.filter(|_| dialect.takes_cache_key()) {
        body.insert("prompt_cache_key".into(), json!(key));
    }
    if let Some(budget) = budget {
        body.insert(dialect.budget_field().into(), json!(budget));
    }
    if let Some(effort) = request.reasoning_effort {
        match dialect {
            Dialect::OpenRouter => body.insert("reasoning".into(), json!({"effort": effort})),
            Dialect::OpenAi | Dialect::Compatible => {
                body.insert("reasoning_effort".into(), json!(effort))
            }
        };
    }
    body
}

/// The conversation in Chat Completions form, the system prompt first.
#[cfg(test)]
fn messages(request: &Request<'_>) -> Vec<Value> {
    let mut out = Vec::with_capacity(request.messages.len() + 1);
    out.extend(system_message(request));
    out.extend(request.messages.iter().map(message));
    out
}

fn system_message(request: &Request<'_>) -> Option<Value> {
    (!request.system.is_empty()).then(|| json!({"role": "system", "content": request.system}))
}

fn message(m: &Message) -> Value {
    match m.role {
        Role::System => json!({"role": "system", "content": m.content}),
        Role::User => json!({"role": "user", "content": m.content}),
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.as_deref().unwrap_or_default(),
            "content": m.content,
        }),
        Role::Assistant if m.tool_calls.is_empty() => {
            json!({"role": "assistant", "content": m.content})
        }
        Role::Assistant => json!({
            "role": "assistant",
            // `""`, never `null`: llama-cpp-python refuses a null content
            // (HTTP 500), and OpenAI and the other servers take `""`.
            "content": m.content,
            "tool_calls": m.tool_calls.iter().map(tool_call).collect::<Vec<_>>(),
        }),
    }
}

/// A tool call sent back in history; arguments travel as a JSON string (the
/// model's raw text when it was garbled).
fn tool_call(call: &ToolCall) -> Value {
    let arguments = match &call.arguments {
        Value::String(raw) if call.garbled => raw.clone(),
        other => other.to_string(),
    };
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    })
}

fn tool(spec: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, arguments: Value, garbled: bool) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments,
            garbled,
            oversized: None,
        }
    }

    fn conversation() -> Vec<Message> {
        let first = call("call_1", json!({"command": "ls"}), false);
        vec![
            Message::new(Role::User, "list files", 0),
            Message {
                tool_calls: vec![first.clone()],
                ..Message::new(Role::Assistant, "", 1)
            },
            Message::tool_result(&first, "a.txt", 1),
            Message::new(Role::Assistant, "done", 2),
        ]
    }

    fn request<'a>(messages: &'a [Message], tools: &'a [ToolSpec]) -> Request<'a> {
        Request {
            system: "be brief",
            messages,
            tools,
            output_schema: None,
            max_output_tokens: None,
            reasoning_effort: None,
            spec: "openai/gpt-5",
            prompt_cache: crate::model::PromptCache::On,
            cache_key: None,
        }
    }

    #[test]
    fn translates_the_conversation_in_openai_form() {
        let messages = conversation();
        let body = request_body("gpt-5", Dialect::OpenAi, None, &request(&messages, &[]));
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "list files"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
                {"role": "assistant", "content": "done"},
            ])
        );
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        assert!(body.get("tools").is_none(), "no tools: no tools field");
        assert!(body.get("max_completion_tokens").is_none());
    }

    #[test]
    fn tools_are_functions_with_schemas() {
        let tools = [ToolSpec {
            name: "bash".into(),
            description: "Run a command".into(),
            parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
        }];
        let body = request_body("gpt-5", Dialect::OpenAi, None, &request(&[], &tools));
        assert_eq!(
            body["tools"],
            json!([{"type": "function", "function": {
                "name": "bash",
                "description": "Run a command",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
            }}])
        );
    }

    #[test]
    fn garbled_arguments_go_back_as_the_raw_text() {
        let messages = [Message {
            tool_calls: vec![call("c", json!("{\"command\": "), true)],
            ..Message::new(Role::Assistant, "trying", 1)
        }];
        let body = request_body("m", Dialect::Compatible, None, &request(&messages, &[]));
        assert_eq!(body["messages"][1]["content"], "trying");
        assert_eq!(
            body["messages"][1]["tool_calls"][0]["function"]["arguments"],
            "{\"command\": "
        );
    }

    #[test]
    fn budget_and_effort_use_each_dialects_names() {
        let mut req = request(&[], &[]);
        req.reasoning_effort = Some("high");
        let openai = request_body("o3", Dialect::OpenAi, Some(900), &req);
        assert_eq!(openai["max_completion_tokens"], 900);
        assert_eq!(openai["reasoning_effort"], "high");
        assert!(openai.get("max_tokens").is_none());

        let router = request_body("x/y", Dialect::OpenRouter, Some(900), &req);
        assert_eq!(router["max_tokens"], 900);
        assert_eq!(router["reasoning"], json!({"effort": "high"}));
        assert!(router.get("reasoning_effort").is_none());

        let gateway = request_body("qwen", Dialect::Compatible, Some(900), &req);
        assert_eq!(gateway["max_tokens"], 900);
        assert_eq!(gateway["reasoning_effort"], "high");
    }

    #[test]
    fn the_run_key_goes_to_openai_and_named_servers_not_openrouter() {
        let msgs = conversation();
        let base = crate::model::wire_fixtures::request(&msgs, &[], "openai/gpt-5");
        let keyed = Request {
            cache_key: Some("tinyagent-run-1"),
            ..base
        };
        for dialect in [Dialect::OpenAi, Dialect::Compatible] {
            let body = request_body("gpt-5", dialect, None, &keyed);
            assert_eq!(body["prompt_cache_key"], "tinyagent-run-1", "{dialect:?}");
            let cache = WireCache::default();
            let bytes = request_bytes(
                "gpt-5",
                dialect,
                None,
                &keyed,
                WireOptions::default(),
                &cache,
            );
            assert_eq!(serde_json::from_slice::<Value>(&bytes.bytes).unwrap(), body);
            assert!(request_body("gpt-5", dialect, None, &base)
                .get("prompt_cache_key")
                .is_none());
        }
        let body = request_body("x/y", Dialect::OpenRouter, None, &keyed);
        assert!(body.get("prompt_cache_key").is_none());
    }
}
