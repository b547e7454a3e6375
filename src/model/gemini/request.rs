//! Our provider-neutral request as a Gemini `generateContent` body (the
//! Gemini API's and Vertex AI's alike).
//!
//! - The system prompt (and any system message) is `systemInstruction`.
//! - User text is a `text` part of a `user` content; tool results are
//!   `functionResponse` parts of a `user` content; consecutive contents of
//!   one role merge into one, as the API wants roles to alternate.
//! - Assistant messages are `model` contents: a `text` part, then one
//!   `functionCall` part per tool call (`args` an object).
//! - The parts a Gemini model sent (kept in `extra` as
//!   `{"gemini": {"parts": [...]}}` when they carried a `thoughtSignature`)
//!   are sent back as they came, but only to the model spec that made them.
//!   A Gemini 3 model refuses a replayed call without a signature, so a
//!   call it did not make (another model's, in a fallback) carries the
//!   documented `skip_thought_signature_validator` instead.
//! - Tools are `functionDeclarations` with their JSON Schema as
//!   `parametersJsonSchema` (full JSON Schema, unlike `parameters`).

use serde_json::{json, Map, Value};

use crate::model::spec::{ToolChoice, WireOptions};
use crate::model::wire_cache::{joined, push_json, Entry, JsonArray, WireBody, WireCache};
use crate::model::{Message, Request, Role};

/// What Google documents for a replayed call whose signature is unknown.
pub(super) const SKIP_SIGNATURE: &str = "skip_thought_signature_validator";

/// The whole request body, each message serialised afresh: what
/// `request_bytes` must send, byte for byte.
#[cfg(test)]
pub(crate) fn request_body(
    model: &str,
    request: &Request<'_>,
    configured_max: Option<u32>,
    wire: WireOptions,
) -> Value {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in request.messages {
        let (role, parts) = message_parts(model, request, message);
        if parts.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(parts),
            _ => turns.push((role, parts)),
        }
    }
    let contents = turns
        .into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect();
    let mut body = fields(model, request, configured_max, wire);
    body.insert("contents".into(), Value::Array(contents));
    Value::Object(body)
}

/// What a body needs to know of one message's kept parts.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Parts {
    /// A `model` content's parts; else a `user` one's.
    model: bool,
    count: usize,
}

/// The same body as bytes, each message's parts written from their bytes in
/// `cache`.
pub(crate) fn request_bytes(
    model: &str,
    request: &Request<'_>,
    configured_max: Option<u32>,
    wire: WireOptions,
    cache: &WireCache<Parts>,
) -> WireBody {
    let mut fill = cache.fill();
    let mut slots = Vec::with_capacity(request.messages.len());
    for message in request.messages {
        let key = fill
            .key()
            .message(message, request.extra_of(message))
            .str(model)
            .finish();
        let slot = fill.slot(key, || {
            let (role, parts) = message_parts(model, request, message);
            Entry::new(
                joined(&parts),
                Parts {
                    model: role == "model",
                    count: parts.len(),
                },
            )
        });
        if fill.get(slot).meta.count > 0 {
            slots.push(slot);
        }
    }
    let body = fields(model, request, configured_max, wire);
    fill.body(&body, "contents", |fill, array| {
        let turns = slots.chunk_by(|a, b| fill.get(*a).meta.model == fill.get(*b).meta.model);
        for turn in turns {
            let out = array.out();
            out.extend_from_slice(br#"{"role":"#);
            let role = if fill.get(turn[0]).meta.model {
                "model"
            } else {
                "user"
            };
            push_json(out, role);
            out.extend_from_slice(br#","parts":"#);
            let mut parts = JsonArray::open(out);
            for slot in turn {
                parts.push_entry(fill.get(*slot));
            }
            parts.close();
            out.push(b'}');
        }
    })
}

/// The body's fields, `contents` (in its place, first) left `null`.
fn fields(
    model: &str,
    request: &Request<'_>,
    configured_max: Option<u32>,
    wire: WireOptions,
) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("contents".into(), Value::Null);
    let mut system = request.system.to_string();
    for m in request.messages.iter().filter(|m| m.role == Role::System) {
        if !system.is_empty() {
            system.push_str("\n\n");
        }
        system.push_str(&m.content);
    }
    if !system.is_empty() {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system}]}),
        );
    }
    if !request.tools.is_empty() {
        let declarations: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "parametersJsonSchema": t.parameters}))
            .collect();
        body.insert(
            "tools".into(),
            json!([{"functionDeclarations": declarations}]),
        );
        if let Some(choice) = wire.tool_choice {
            let mode = match choice {
                ToolChoice::Auto => "AUTO",
                ToolChoice::Required => "ANY",
            };
            body.insert(
                "toolConfig".into(),
                json!({"functionCallingConfig": {"mode": mode}}),
            );
        }
    }
    let mut config = Map::new();
    if let Some(max) = request.max_output_tokens.or(configured_max) {
        config.insert("maxOutputTokens".into(), json!(max));
    }
    if let Some(thinking) = request.reasoning_effort.and_then(|e| thinking(model, e)) {
        config.insert("thinkingConfig".into(), thinking);
    }
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    body
}

/// `thinkingConfig` for a `reasoning_effort`: Gemini 3 takes a level,
/// Gemini 2.5 a token budget; other models take neither.
fn thinking(model: &str, effort: &str) -> Option<Value> {
    let model = model.rsplit('/').next().unwrap_or(model);
    if model.starts_with("gemini-3") {
        let level = match effort {
            "low" => "low",
            "medium" | "high" => "high",
            _ => return None,
        };
        Some(json!({"thinkingLevel": level}))
    } else if model.starts_with("gemini-2.5") {
        let budget = match effort {
            "low" => 4_096,
            "medium" => 10_240,
            "high" => 20_480,
            _ => return None,
        };
        Some(json!({"thinkingBudget": budget}))
    } else {
        None
    }
}

/// One message's role and parts (a system message has none: it joins
/// `systemInstruction`).
fn message_parts(
    model: &str,
    request: &Request<'_>,
    message: &Message,
) -> (&'static str, Vec<Value>) {
    match message.role {
        Role::System => ("user", Vec::new()),
        Role::User => {
            let text = if message.content.is_empty() {
                "(empty)"
            } else {
                &message.content
            };
            ("user", vec![json!({"text": text})])
        }
        Role::Tool => {
            let name = message.name.as_deref().filter(|n| !n.is_empty());
            let content = if message.content.is_empty() {
                "(no output)"
            } else {
                &message.content
            };
            (
                "user",
                vec![json!({"functionResponse": {
                    "name": name.unwrap_or("tool"),
                    "response": {"result": content},
                }})],
            )
        }
        Role::Assistant => ("model", model_parts(model, request, message)),
    }
}

fn model_parts(model: &str, request: &Request<'_>, message: &Message) -> Vec<Value> {
    let kept = request
        .extra_of(message)
        .and_then(|extra| extra.pointer("/gemini/parts"))
        .and_then(Value::as_array)
        .filter(|parts| !parts.is_empty());
    if let Some(parts) = kept {
        return parts.clone();
    }
    let mut parts = Vec::new();
    if !message.content.is_empty() {
        parts.push(json!({"text": message.content}));
    }
    let needs_signature = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .starts_with("gemini-3");
    for (i, call) in message.tool_calls.iter().enumerate() {
        // A garbled call's raw text is no object; the API wants one.
        let args = if call.garbled || !call.arguments.is_object() {
            json!({})
        } else {
            call.arguments.clone()
        };
        let mut part = json!({"functionCall": {"name": call.name, "args": args}});
        if needs_signature && i == 0 {
            part["thoughtSignature"] = json!(SKIP_SIGNATURE);
        }
        parts.push(part);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::wire_fixtures::{call, request};
    use crate::model::ToolSpec;

    const SPEC: &str = "gemini/gemini-2.5-flash";

    fn conversation(extra: Option<Value>) -> Vec<Message> {
        let c1 = call("call_1", json!({"command": "ls"}));
        let c2 = call("call_2", json!({"command": "pwd"}));
        vec![
            Message::new(Role::User, "task", 0),
            Message {
                tool_calls: vec![c1.clone(), c2.clone()],
                model: Some(SPEC.into()),
                extra,
                ..Message::new(Role::Assistant, "Looking.", 1)
            },
            Message::tool_result(&c1, "a.txt", 1),
            Message::tool_result(&c2, "", 1),
            Message::new(Role::User, "keep going", 1),
        ]
    }

    #[test]
    fn the_documented_shape_with_tool_results_in_one_user_content() {
        let msgs = conversation(None);
        let tools = [ToolSpec {
            name: "bash".into(),
            description: "run".into(),
            parameters: json!({"type": "object"}),
        }];
        let mut r = request(&msgs, &tools, SPEC);
        r.max_output_tokens = Some(900);
        let body = request_body("gemini-2.5-flash", &r, None, WireOptions::default());
        assert_eq!(
            body["systemInstruction"],
            json!({"parts": [{"text": "be brief"}]})
        );
        assert_eq!(
            body["tools"],
            json!([{"functionDeclarations": [{"name": "bash", "description": "run", "parametersJsonSchema": {"type": "object"}}]}])
        );
        assert_eq!(body["generationConfig"], json!({"maxOutputTokens": 900}));
        assert!(body.get("toolConfig").is_none());
        assert_eq!(
            body["contents"],
            json!([
                {"role": "user", "parts": [{"text": "task"}]},
                {"role": "model", "parts": [
                    {"text": "Looking."},
                    {"functionCall": {"name": "bash", "args": {"command": "ls"}}},
                    {"functionCall": {"name": "bash", "args": {"command": "pwd"}}},
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "bash", "response": {"result": "a.txt"}}},
                    {"functionResponse": {"name": "bash", "response": {"result": "(no output)"}}},
                    {"text": "keep going"},
                ]},
            ])
        );
    }

    #[test]
    fn tool_choice_becomes_a_function_calling_mode() {
        let msgs = conversation(None);
        let tools = [ToolSpec {
            name: "bash".into(),
            description: "run".into(),
            parameters: json!({"type": "object"}),
        }];
        let wire = WireOptions {
            stream: true,
            tool_choice: Some(ToolChoice::Required),
        };
        let body = request_body(
            "gemini-2.5-flash",
            &request(&msgs, &tools, SPEC),
            None,
            wire,
        );
        assert_eq!(
            body["toolConfig"],
            json!({"functionCallingConfig": {"mode": "ANY"}})
        );
        let body = request_body("gemini-2.5-flash", &request(&msgs, &[], SPEC), None, wire);
        assert!(body.get("toolConfig").is_none(), "only with tools");
    }

    #[test]
    fn signed_parts_go_back_as_they_came_to_their_model_only() {
        let parts = json!([
            {"text": "Looking.", "thoughtSignature": "c2lnMQ=="},
            {"functionCall": {"name": "bash", "args": {"command": "ls"}}, "thoughtSignature": "c2lnMg=="},
            {"functionCall": {"name": "bash", "args": {"command": "pwd"}}},
        ]);
        let msgs = conversation(Some(json!({"gemini": {"parts": parts.clone()}})));
        let same = request_body(
            "gemini-2.5-flash",
            &request(&msgs, &[], SPEC),
            None,
            WireOptions::default(),
        );
        assert_eq!(same["contents"][1]["parts"], parts);
        let other = request_body(
            "gemini-2.5-pro",
            &request(&msgs, &[], "gemini/gemini-2.5-pro"),
            None,
            WireOptions::default(),
        );
        let text = other.to_string();
        assert!(!text.contains("thoughtSignature"), "{text}");
    }

    #[test]
    fn gemini_3_gets_the_documented_skip_for_calls_it_did_not_make() {
        let msgs = conversation(None);
        let body = request_body(
            "gemini-3-pro-preview",
            &request(&msgs, &[], "gemini/gemini-3-pro-preview"),
            None,
            WireOptions::default(),
        );
        let parts = &body["contents"][1]["parts"];
        assert_eq!(parts[1]["thoughtSignature"], SKIP_SIGNATURE);
        assert!(parts[2].get("thoughtSignature").is_none());
    }

    #[test]
    fn reasoning_effort_is_a_level_or_a_budget() {
        let msgs = [Message::new(Role::User, "t", 0)];
        let mut r = request(&msgs, &[], SPEC);
        r.reasoning_effort = Some("medium");
        let body = request_body("gemini-2.5-pro", &r, None, WireOptions::default());
        assert_eq!(
            body["generationConfig"]["thinkingConfig"],
            json!({"thinkingBudget": 10240})
        );
        let body = request_body("gemini-3-pro-preview", &r, Some(64), WireOptions::default());
        assert_eq!(
            body["generationConfig"],
            json!({"maxOutputTokens": 64, "thinkingConfig": {"thinkingLevel": "high"}})
        );
        let body = request_body("gemini-2.0-flash", &r, None, WireOptions::default());
        assert!(body.get("generationConfig").is_none());
    }
}
