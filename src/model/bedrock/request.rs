//! Our provider-neutral request as a Bedrock Converse request body (the
//! model id goes in the URL, not the body).
//!
//! - The system prompt (and any system messages) is the top-level `system`
//!   list of one `text` block.
//! - User text is a `text` block; an assistant's text and tool calls are
//!   `text` and `toolUse` blocks (`input` an object); tool results are
//!   `toolResult` blocks of a user message. Consecutive messages of one
//!   role merge into one message, as Converse wants roles to alternate.
//! - Tools are `toolConfig.tools[].toolSpec` with `inputSchema.json`; the
//!   reply budget is `inferenceConfig.maxTokens`.
//! - `cachePoint` blocks where the model caches (`cache.rs`, SPEC 25).

use serde_json::{json, Map, Value};

use super::cache::{cache_point, Caching};
use crate::model::spec::{ToolChoice, WireOptions};
use crate::model::{Message, Request, Role};

/// `maxTokens` for a Claude model when neither the request nor the config
/// sets one (other models keep their own default: none is sent).
const CLAUDE_MAX_TOKENS: u32 = 16_000;

/// `maxTokens` when none is asked for: Claude's, by generation.
fn default_max_tokens(model_id: &str) -> Option<u32> {
    let claude = model_id.find("claude-")?;
    let name = &model_id[claude..];
    Some(if name.starts_with("claude-3-5") {
        8_192
    } else if name.starts_with("claude-3-") && !name.starts_with("claude-3-7") {
        4_096
    } else {
        CLAUDE_MAX_TOKENS
    })
}

/// The whole Converse body.
pub(crate) fn request_body(
    model_id: &str,
    request: &Request<'_>,
    configured_max: Option<u32>,
    wire: WireOptions,
) -> Value {
    let caching = Caching::of(model_id, request.prompt_cache);
    let point = || cache_point(model_id, request.prompt_cache);
    let mut messages = messages(request);
    if caching.system_and_messages() {
        for at in marked_messages(&messages) {
            if let Some(content) = messages[at]["content"].as_array_mut() {
                content.push(point());
            }
        }
    }
    let mut body = Map::new();
    body.insert("messages".into(), Value::Array(messages));
    let mut system = request.system.to_string();
    for m in request.messages.iter().filter(|m| m.role == Role::System) {
        if !system.is_empty() {
            system.push_str("\n\n");
        }
        system.push_str(&m.content);
    }
    if !system.is_empty() && caching.system_and_messages() {
        body.insert("system".into(), json!([{"text": system}, point()]));
    } else if !system.is_empty() {
        body.insert("system".into(), json!([{"text": system}]));
    }
    let max_tokens = request
        .max_output_tokens
        .or(configured_max)
        .or_else(|| default_max_tokens(model_id));
    if let Some(max) = max_tokens {
        body.insert("inferenceConfig".into(), json!({"maxTokens": max}));
    }
    if !request.tools.is_empty() {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({"toolSpec": {
                    "name": t.name,
                    "description": if t.description.is_empty() { &t.name } else { &t.description },
                    "inputSchema": {"json": t.parameters},
                }})
            })
            .collect();
        if caching.tools() {
            tools.push(point());
        }
        let mut config = Map::new();
        config.insert("tools".into(), Value::Array(tools));
        match wire.tool_choice {
            Some(ToolChoice::Auto) => {
                config.insert("toolChoice".into(), json!({"auto": {}}));
            }
            Some(ToolChoice::Required) => {
                config.insert("toolChoice".into(), json!({"any": {}}));
            }
            None => {}
        }
        body.insert("toolConfig".into(), Value::Object(config));
    }
    Value::Object(body)
}

/// The conversation as alternating user/assistant messages of blocks.
fn messages(request: &Request<'_>) -> Vec<Value> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in request.messages {
        let (role, blocks) = match message.role {
            Role::System => continue,
            Role::User => ("user", vec![text_block(&message.content)]),
            Role::Tool => ("user", vec![tool_result_block(message)]),
            Role::Assistant => ("assistant", assistant_blocks(message)),
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    out.into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// The messages that end with a `cachePoint`: the last, and the user
/// message before the last assistant one, which ended the previous
/// request (so a step adding many blocks still reads that prefix).
fn marked_messages(messages: &[Value]) -> Vec<usize> {
    let Some(last) = messages.len().checked_sub(1) else {
        return Vec::new();
    };
    let previous = messages
        .iter()
        .rposition(|m| m["role"] == "assistant")
        .and_then(|a| a.checked_sub(1))
        .filter(|&p| p != last && messages[p]["role"] == "user");
    previous.into_iter().chain([last]).collect()
}

/// A text block; Converse refuses empty ones.
fn text_block(text: &str) -> Value {
    let text = if text.is_empty() { "(empty)" } else { text };
    json!({"text": text})
}

fn tool_result_block(message: &Message) -> Value {
    let id = message.tool_call_id.as_deref().unwrap_or_default();
    let content = if message.content.is_empty() {
        "(no output)"
    } else {
        &message.content
    };
    json!({"toolResult": {"toolUseId": block_id(id), "content": [{"text": content}]}})
}

fn assistant_blocks(message: &Message) -> Vec<Value> {
    let mut blocks = Vec::new();
    if !message.content.is_empty() {
        blocks.push(json!({"text": message.content}));
    }
    for call in &message.tool_calls {
        // A garbled call's raw text is no object; Converse wants one.
        let input = if call.garbled || !call.arguments.is_object() {
            json!({})
        } else {
            call.arguments.clone()
        };
        blocks.push(json!({"toolUse": {"toolUseId": block_id(&call.id), "name": call.name, "input": input}}));
    }
    blocks
}

/// Tool-use ids must match `[a-zA-Z0-9_-]+` and hold at most 64
/// characters; ids made by another provider are mapped onto that alphabet
/// (the same way on both sides).
fn block_id(id: &str) -> String {
    let id: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if id.is_empty() {
        "call".into()
    } else {
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::wire_fixtures::call;
    use crate::model::{PromptCache, ToolSpec};

    fn request<'a>(messages: &'a [Message], tools: &'a [ToolSpec]) -> Request<'a> {
        Request {
            system: "be brief",
            messages,
            tools,
            output_schema: None,
            max_output_tokens: None,
            reasoning_effort: None,
            spec: "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            prompt_cache: crate::model::PromptCache::On,
            cache_key: None,
        }
    }

    #[test]
    fn a_tool_run_in_converse_form() {
        let c1 = call("toolu_1", json!({"command": "ls"}));
        let c2 = call("call.2", json!({"command": "pwd"}));
        let msgs = vec![
            Message::new(Role::User, "task", 0),
            Message {
                tool_calls: vec![c1.clone(), c2.clone()],
                ..Message::new(Role::Assistant, "Looking.", 1)
            },
            Message::tool_result(&c1, "a.txt", 1),
            Message::tool_result(&c2, "", 1),
            Message::new(Role::User, "keep going", 1),
        ];
        let tools = [ToolSpec {
            name: "bash".into(),
            description: "run".into(),
            parameters: json!({"type": "object"}),
        }];
        let body = request_body(
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            &request(&msgs, &tools),
            None,
            WireOptions {
                stream: true,
                tool_choice: Some(ToolChoice::Required),
            },
        );
        let point = json!({"cachePoint": {"type": "default"}});
        assert_eq!(body["system"], json!([{"text": "be brief"}, point]));
        assert_eq!(body["inferenceConfig"], json!({"maxTokens": 16000}));
        assert_eq!(
            body["toolConfig"],
            json!({"tools": [{"toolSpec": {"name": "bash", "description": "run", "inputSchema": {"json": {"type": "object"}}}}, point], "toolChoice": {"any": {}}})
        );
        let m = body["messages"].as_array().unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(
            m[0],
            json!({"role": "user", "content": [{"text": "task"}, point]})
        );
        assert_eq!(
            m[1],
            json!({"role": "assistant", "content": [
                {"text": "Looking."},
                {"toolUse": {"toolUseId": "toolu_1", "name": "bash", "input": {"command": "ls"}}},
                {"toolUse": {"toolUseId": "call_2", "name": "bash", "input": {"command": "pwd"}}},
            ]})
        );
        assert_eq!(
            m[2],
            json!({"role": "user", "content": [
                {"toolResult": {"toolUseId": "toolu_1", "content": [{"text": "a.txt"}]}},
                {"toolResult": {"toolUseId": "call_2", "content": [{"text": "(no output)"}]}},
                {"text": "keep going"},
                point,
            ]})
        );
    }

    /// The `cachePoint` blocks of a body, by where they are.
    fn points(body: &Value) -> Vec<String> {
        let mut at = Vec::new();
        let mut look = |name: &str, list: &Value| {
            for (i, block) in list.as_array().into_iter().flatten().enumerate() {
                if let Some(point) = block.get("cachePoint") {
                    at.push(format!("{name}/{i} {point}"));
                }
            }
        };
        look("tools", &body["toolConfig"]["tools"]);
        look("system", &body["system"]);
        for (i, m) in body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            look(&format!("messages/{i}"), &m["content"]);
        }
        at
    }

    #[test]
    fn cache_points_by_model_and_setting() {
        let c1 = call("toolu_1", json!({"command": "ls"}));
        let msgs = vec![
            Message::new(Role::User, "task", 0),
            Message {
                tool_calls: vec![c1.clone()],
                ..Message::new(Role::Assistant, "", 1)
            },
            Message::tool_result(&c1, "a.txt", 1),
        ];
        let tools = [ToolSpec {
            name: "bash".into(),
            description: "run".into(),
            parameters: json!({"type": "object"}),
        }];
        let body = |id: &str, cache: PromptCache| {
            let r = Request {
                prompt_cache: cache,
                ..request(&msgs, &tools)
            };
            points(&request_body(id, &r, None, WireOptions::default()))
        };
        let claude = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
        let five = r#"{"type":"default"}"#;
        let hour = r#"{"type":"default","ttl":"1h"}"#;
        assert_eq!(
            body(claude, PromptCache::On),
            [
                format!("tools/1 {five}"),
                format!("system/1 {five}"),
                format!("messages/0/1 {five}"),
                format!("messages/2/1 {five}")
            ]
        );
        assert_eq!(
            body(claude, PromptCache::OneHour),
            [
                format!("tools/1 {hour}"),
                format!("system/1 {hour}"),
                format!("messages/0/1 {hour}"),
                format!("messages/2/1 {hour}")
            ]
        );
        assert_eq!(
            body("us.amazon.nova-pro-v1:0", PromptCache::OneHour),
            [
                format!("system/1 {five}"),
                format!("messages/0/1 {five}"),
                format!("messages/2/1 {five}")
            ]
        );
        assert!(body("meta.llama3-70b-instruct-v1:0", PromptCache::On).is_empty());
        assert!(body(claude, PromptCache::Off).is_empty());
    }

    #[test]
    fn reply_budgets() {
        let msgs = [Message::new(Role::User, "t", 0)];
        let mut r = request(&msgs, &[]);
        let max = |id: &str, r: &Request<'_>, c: Option<u32>| {
            request_body(id, r, c, WireOptions::default())["inferenceConfig"]["maxTokens"].clone()
        };
        assert_eq!(
            max("anthropic.claude-3-5-haiku-20241022-v1:0", &r, None),
            8192
        );
        assert_eq!(max("meta.llama3-70b-instruct-v1:0", &r, None), Value::Null);
        assert_eq!(max("meta.llama3-70b-instruct-v1:0", &r, Some(2048)), 2048);
        r.max_output_tokens = Some(500);
        assert_eq!(
            max("anthropic.claude-sonnet-4-5-20250929-v1:0", &r, Some(2048)),
            500
        );
        assert!(request_body("x", &r, None, WireOptions::default())
            .get("toolConfig")
            .is_none());
    }
}
