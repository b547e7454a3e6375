//! Our provider-neutral request as an OpenAI Responses request body.
//!
//! - The system prompt is `instructions`.
//! - Assistant messages become an assistant message item plus one
//!   `function_call` item per tool call (`arguments` as a JSON string);
//!   tool results become `function_call_output` items.
//! - Reasoning items kept in `extra` (`{"responses": {"reasoning": [...]}}`)
//!   are replayed before the assistant's items, but only to the model spec
//!   that produced them, and without their ids: with `store: false` the
//!   server keeps nothing an id could refer to.
//! - The run lineage's `prompt_cache_key` (SPEC 25), unless `prompt_cache: off`.

use serde_json::{json, Map, Value};

use crate::model::spec::WireOptions;
use crate::model::wire::apply_options;
use crate::model::wire_cache::{joined, WireBody, WireCache};
use crate::model::{Message, Request, Role};

/// The whole request body, `stream: true` included, each message serialised
/// afresh: what `request_bytes` must send, byte for byte.
#[cfg(test)]
pub(crate) fn request_body(
    model: &str,
    request: &Request<'_>,
    configured_max: Option<u32>,
) -> Value {
    let mut body = fields(model, request, configured_max);
    body.insert("input".into(), Value::Array(input_items(request)));
    Value::Object(body)
}

/// The same body as bytes, each message's items written from their bytes
/// in `cache`, sent as the provider's `wire` options ask.
pub(crate) fn request_bytes(
    model: &str,
    request: &Request<'_>,
    configured_max: Option<u32>,
    wire: WireOptions,
    cache: &WireCache,
) -> WireBody {
    let mut body = fields(model, request, configured_max);
    apply_options(&mut body, super::API.tool_choice, wire);
    cache.fill().body(&body, "input", |fill, array| {
        for m in request.messages {
            let extra = request.extra_of(m);
            let key = fill.key().message(m, extra).finish();
            fill.push_or(array, key, || {
                let mut items = Vec::new();
                message_items(request, m, &mut items);
                joined(&items)
            });
        }
    })
}

/// The body's fields, `input` (in its place) left `null`.
fn fields(model: &str, request: &Request<'_>, configured_max: Option<u32>) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    if !request.system.is_empty() {
        body.insert("instructions".into(), json!(request.system));
    }
    body.insert("input".into(), Value::Null);
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                // Our schemas have optional fields, which strict mode refuses.
                json!({"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters, "strict": false})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(max) = request.max_output_tokens.or(configured_max) {
        body.insert("max_output_tokens".into(), json!(max));
    }
    let reasons = is_reasoning_model(model);
    if let Some(effort) = request.reasoning_effort.filter(|_| reasons) {
        body.insert("reasoning".into(), json!({"effort": effort}));
    }
    body.insert("stream".into(), json!(true));
    body.insert("store".into(), json!(false));
    if let Some(key) = request.cache_key {
        body.insert("prompt_cache_key".into(), json!(key));
    }
    if reasons {
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    body
}

/// Whether a model reasons. OpenAI refuses `reasoning` and
/// `include: ["reasoning.encrypted_content"]` with HTTP 400 for the models
/// that do not ("Encrypted content is not supported with this model"), so
/// those known not to reason (the GPT-4 generation and chat snapshots) get
/// neither; every other model, named gateways' included, is asked for both.
fn is_reasoning_model(model: &str) -> bool {
    const NON_REASONING: &[&str] = &["gpt-4", "gpt-3.5", "chatgpt-4o", "gpt-5-chat"];
    !NON_REASONING.iter().any(|prefix| model.starts_with(prefix))
}

#[cfg(test)]
fn input_items(request: &Request<'_>) -> Vec<Value> {
    let mut items = Vec::new();
    for message in request.messages {
        message_items(request, message, &mut items);
    }
    items
}

/// The input items one message becomes (an assistant message: none or more).
fn message_items(request: &Request<'_>, message: &Message, items: &mut Vec<Value>) {
    match message.role {
        Role::System => items.push(json!({"role": "developer", "content": message.content})),
        Role::User => items.push(json!({"role": "user", "content": message.content})),
        Role::Tool => items.push(json!({
            "type": "function_call_output",
            "call_id": message.tool_call_id.as_deref().unwrap_or_default(),
            "output": message.content,
        })),
        Role::Assistant => assistant_items(request, message, items),
    }
}

fn assistant_items(request: &Request<'_>, message: &Message, items: &mut Vec<Value>) {
    let reasoning = request
        .extra_of(message)
        .and_then(|extra| extra.pointer("/responses/reasoning"))
        .and_then(Value::as_array);
    for item in reasoning.into_iter().flatten() {
        let mut item = item.clone();
        if let Some(map) = item.as_object_mut() {
            map.remove("id");
            map.remove("status");
        }
        items.push(item);
    }
    if !message.content.is_empty() {
        items.push(json!({"role": "assistant", "content": message.content}));
    }
    for call in &message.tool_calls {
        let arguments = match &call.arguments {
            Value::String(raw) if call.garbled => raw.clone(),
            other => other.to_string(),
        };
        items.push(json!({"type": "function_call", "call_id": call.id, "name": call.name, "arguments": arguments}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ToolCall, ToolSpec};

    fn request<'a>(messages: &'a [Message], tools: &'a [ToolSpec], spec: &'a str) -> Request<'a> {
        Request {
            system: "be brief",
            messages,
            tools,
            output_schema: None,
            max_output_tokens: Some(4000),
            reasoning_effort: Some("medium"),
            spec,
            prompt_cache: crate::model::PromptCache::On,
            cache_key: None,
        }
    }

    #[test]
    fn conversation_becomes_input_items() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "bash".into(),
            arguments: json!({"command": "ls"}),
            garbled: false,
            oversized: None,
        };
        let reasoning = json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB"});
        let msgs = vec![
            Message::new(Role::User, "task", 0),
            Message {
                tool_calls: vec![call.clone()],
                model: Some("responses/gpt-5".into()),
                extra: Some(json!({"responses": {"reasoning": [reasoning]}})),
                ..Message::new(Role::Assistant, "Looking.", 1)
            },
            Message::tool_result(&call, "a.txt", 1),
        ];
        let tools = [ToolSpec {
            name: "bash".into(),
            description: "run".into(),
            parameters: json!({"type": "object"}),
        }];
        let body = request_body("gpt-5", &request(&msgs, &tools, "responses/gpt-5"), None);
        assert_eq!(body["instructions"], "be brief");
        assert_eq!(body["stream"], true);
        assert_eq!(body["store"], false);
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(body["max_output_tokens"], 4000);
        assert_eq!(body["reasoning"], json!({"effort": "medium"}));
        assert_eq!(
            body["tools"][0],
            json!({"type": "function", "name": "bash", "description": "run", "parameters": {"type": "object"}, "strict": false})
        );
        assert_eq!(
            body["input"],
            json!([
                {"role": "user", "content": "task"},
                {"type": "reasoning", "summary": [], "encrypted_content": "gAAAAB"},
                {"role": "assistant", "content": "Looking."},
                {"type": "function_call", "call_id": "call_1", "name": "bash", "arguments": "{\"command\":\"ls\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
            ])
        );
        let other = request_body(
            "gpt-5-mini",
            &request(&msgs, &tools, "responses/gpt-5-mini"),
            None,
        );
        assert_eq!(other["input"][1]["role"], "assistant");
    }

    #[test]
    fn non_reasoning_models_get_no_reasoning_parameters() {
        let msgs = [Message::new(Role::User, "t", 0)];
        for model in ["gpt-4.1", "gpt-4o-mini", "gpt-5-chat-latest"] {
            let body = request_body(model, &request(&msgs, &[], "x/y"), None);
            assert!(body.get("include").is_none(), "{model}");
            assert!(body.get("reasoning").is_none(), "{model}");
            assert_eq!(body["store"], false);
        }
        for model in ["gpt-5", "o4-mini", "gpt-5-codex"] {
            let body = request_body(model, &request(&msgs, &[], "x/y"), None);
            assert_eq!(
                body["include"],
                json!(["reasoning.encrypted_content"]),
                "{model}"
            );
        }
    }

    #[test]
    fn garbled_arguments_are_sent_back_as_they_came() {
        let call = ToolCall {
            id: "call_2".into(),
            name: "bash".into(),
            arguments: json!("{\"command\": "),
            garbled: true,
            oversized: None,
        };
        let msgs = vec![Message {
            tool_calls: vec![call],
            ..Message::new(Role::Assistant, "", 1)
        }];
        let body = request_body("gpt-5", &request(&msgs, &[], "x/y"), Some(100));
        assert_eq!(body["input"][0]["arguments"], "{\"command\": ");
        assert_eq!(body["max_output_tokens"], 4000);
    }

    #[test]
    fn the_run_key_is_sent_when_the_chain_gives_one() {
        let msgs = [Message::new(Role::User, "go", 0)];
        let base = crate::model::wire_fixtures::request(&msgs, &[], "responses/gpt-5");
        assert!(request_body("gpt-5", &base, None)
            .get("prompt_cache_key")
            .is_none());
        let keyed = Request {
            cache_key: Some("tinyagent-run-1"),
            ..base
        };
        let body = request_body("gpt-5", &keyed, None);
        assert_eq!(body["prompt_cache_key"], "tinyagent-run-1");
        let cache = WireCache::default();
        let bytes = request_bytes("gpt-5", &keyed, None, WireOptions::default(), &cache);
        assert_eq!(serde_json::from_slice::<Value>(&bytes.bytes).unwrap(), body);
    }
}
