//! Our provider-neutral request as an Anthropic Messages request body.
//!
//! - The system prompt is the top-level `system`.
//! - Tool results become `tool_result` blocks of a user message; consecutive
//!   user-side messages (tool results, then any user text) merge into one
//!   user message, as the API wants roles to alternate.
//! - Assistant tool calls become `tool_use` blocks with `input` objects.
//! - Thinking blocks kept in `extra` (`{"anthropic": {"content": [...]}}`)
//!   are replayed first, in order, but only to the model spec that made them.
//! - Prompt caching (SPEC 25), unless `prompt_cache: off`: `cache_control`
//!   on the last tool, on the system prompt (then a list of one text
//!   block), on the last block of the conversation and on the last block
//!   of the previous request (the user turn before the last reply): the
//!   API's four breakpoints at most, all of one lifetime (`ttl: "1h"` with
//!   `1h`), so tools, system and conversation are read from the cache step
//!   to step, however many blocks a step adds.

use serde_json::{json, Map, Value};

use crate::model::spec::WireOptions;
use crate::model::wire::apply_options;
use crate::model::wire_cache::{joined, push_json, Entry, JsonArray, Slot, WireBody, WireCache};
use crate::model::{Message, PromptCache, Request, Role};

/// `max_tokens` when neither the request nor the model config sets one.
pub(super) const DEFAULT_MAX_TOKENS: u32 = 16_000;

/// Room left for the visible answer on top of the thinking budget when
/// `max_tokens` is the default.
const ANSWER_ROOM: u32 = 8_192;

/// The API's smallest thinking budget.
const MIN_THINKING_BUDGET: u32 = 1_024;

/// The thinking budget for a `reasoning_effort`.
pub(super) fn thinking_budget(effort: &str) -> Option<u32> {
    match effort {
        "low" => Some(4_096),
        "medium" => Some(10_240),
        "high" => Some(20_480),
        _ => None,
    }
}

/// Older models cap their output below the default.
fn model_default_max_tokens(model: &str) -> u32 {
    if model.starts_with("claude-3-5") {
        8_192
    } else if model.starts_with("claude-3-") && !model.starts_with("claude-3-7") {
        4_096
    } else {
        DEFAULT_MAX_TOKENS
    }
}

/// `max_tokens` and the thinking budget (if any) for a request.
///
/// An explicit limit (flag/config, else the named model's
/// `max_output_tokens`) is kept, and thinking gets at most half of it
/// (dropped below the API's 1024 minimum). Without one, the default is the
/// model's, raised to the thinking budget plus room for the answer.
fn budgets(model: &str, request: &Request<'_>, configured: Option<u32>) -> (u32, Option<u32>) {
    let thinking = request.reasoning_effort.and_then(thinking_budget);
    match (request.max_output_tokens.or(configured), thinking) {
        (Some(max), Some(budget)) => {
            let budget = budget.min(max / 2);
            (max, (budget >= MIN_THINKING_BUDGET).then_some(budget))
        }
        (Some(max), None) => (max, None),
        (None, Some(budget)) => (
            model_default_max_tokens(model).max(budget + ANSWER_ROOM),
            Some(budget),
        ),
        (None, None) => (model_default_max_tokens(model), None),
    }
}

/// The whole request body, `stream: true` included, each message serialised
/// afresh: what `request_bytes` must send, byte for byte.
#[cfg(test)]
pub(crate) fn request_body(
    model: &str,
    request: &Request<'_>,
    configured_max: Option<u32>,
) -> Value {
    let messages = messages(request);
    let can_think = turn_can_think(messages.iter().map(Shape::of));
    let mut body = fields(model, request, configured_max, can_think);
    body.insert("messages".into(), Value::Array(messages));
    Value::Object(body)
}

/// The same body as bytes, each message's blocks written from their bytes
/// in `cache`, sent as the provider's `wire` options ask.
pub(crate) fn request_bytes(
    model: &str,
    request: &Request<'_>,
    configured_max: Option<u32>,
    wire: WireOptions,
    cache: &WireCache<Blocks>,
) -> WireBody {
    body_bytes(model, request, configured_max, wire, cache, false)
}

/// The version Vertex AI's `rawPredict` takes in the body (SPEC 22).
pub(crate) const VERTEX_VERSION: &str = "vertex-2023-10-16";

/// `request_bytes` as Vertex AI takes it: no `model` (the URL names it),
/// `anthropic_version` first.
pub(crate) fn request_bytes_on_vertex(
    model: &str,
    request: &Request<'_>,
    configured_max: Option<u32>,
    wire: WireOptions,
    cache: &WireCache<Blocks>,
) -> WireBody {
    body_bytes(model, request, configured_max, wire, cache, true)
}

/// A body's fields as Vertex AI takes them.
pub(crate) fn on_vertex(body: &mut Map<String, Value>) {
    body.shift_remove("model");
    body.shift_insert(0, "anthropic_version".into(), json!(VERTEX_VERSION));
}

fn body_bytes(
    model: &str,
    request: &Request<'_>,
    configured_max: Option<u32>,
    wire: WireOptions,
    cache: &WireCache<Blocks>,
    vertex: bool,
) -> WireBody {
    let mut fill = cache.fill();
    let mut parts = Vec::with_capacity(request.messages.len());
    for message in request.messages {
        if message.role == Role::System {
            continue;
        }
        let key = fill
            .key()
            .message(message, request.extra_of(message))
            .finish();
        let slot = fill.slot(key, || blocks_entry(request, message));
        let blocks = fill.get(slot).meta;
        if blocks.count > 0 {
            parts.push(Part {
                index: parts.len(),
                slot,
                blocks,
                message,
            });
        }
    }
    let turns = parts.chunk_by(|a, b| a.blocks.assistant == b.blocks.assistant);
    let can_think = turn_can_think(turns.clone().map(|turn| Shape {
        user_text: !turn[0].blocks.assistant && turn.iter().any(|p| p.blocks.has_text),
        assistant: turn[0].blocks.assistant,
        starts_thinking: turn[0].blocks.starts_thinking,
    }));
    let mut body = fields(model, request, configured_max, can_think);
    apply_options(&mut body, super::API.tool_choice, wire);
    if vertex {
        on_vertex(&mut body);
    }
    let marked = marked_turn_ends(turns.clone().map(|turn| turn[0].blocks.assistant));
    let ends: Vec<usize> = turns
        .clone()
        .map(|turn| turn[turn.len() - 1].index)
        .collect();
    let marked: Vec<usize> = marked.into_iter().map(|t| ends[t]).collect();
    fill.body(&body, "messages", |fill, array| {
        for turn in turns {
            let out = array.out();
            let role = if turn[0].blocks.assistant {
                "assistant"
            } else {
                "user"
            };
            out.extend_from_slice(br#"{"role":"#);
            push_json(out, role);
            out.extend_from_slice(br#","content":"#);
            let mut content = JsonArray::open(out);
            for part in turn {
                let entry = fill.get(part.slot);
                let bytes = &entry.bytes;
                match part.blocks.last {
                    _ if !marked.contains(&part.index) => content.push_entry(entry),
                    _ if !request.prompt_cache.is_on() => content.push_entry(entry),
                    LastBlock::Thinking => content.push_entry(entry),
                    LastBlock::Plain => {
                        let out = content.out();
                        out.extend_from_slice(&bytes[..bytes.len() - 1]);
                        out.extend_from_slice(br#","cache_control":"#);
                        push_json(out, &cache_control(request.prompt_cache));
                        out.push(b'}');
                    }
                    LastBlock::Other => {
                        let mut blocks = message_blocks(request, part.message).1;
                        if let Some(block) = blocks.last_mut() {
                            mark_for_caching(block, request.prompt_cache);
                        }
                        content.push_raw(&joined(&blocks));
                    }
                }
            }
            content.close();
            out.push(b'}');
        }
    })
}

/// The turns whose last block carries a breakpoint: the last turn, and
/// the user turn before the last assistant turn, which ended the previous
/// request (so a step that adds more blocks than the API looks back over,
/// 20, still reads the previous step's prefix). Indexes into the turns.
fn marked_turn_ends(assistant: impl Iterator<Item = bool>) -> Vec<usize> {
    let assistant: Vec<bool> = assistant.collect();
    let Some(last) = assistant.len().checked_sub(1) else {
        return Vec::new();
    };
    let previous = assistant
        .iter()
        .rposition(|&a| a)
        .and_then(|a| a.checked_sub(1))
        .filter(|&p| p != last && !assistant[p]);
    previous.into_iter().chain([last]).collect()
}

/// A message of the history with blocks, for the cached path.
struct Part<'a> {
    /// Its place among the parts.
    index: usize,
    slot: Slot,
    blocks: Blocks,
    message: &'a Message,
}

/// What a body needs to know of one message's kept blocks.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Blocks {
    /// An assistant's blocks; else a user message's (text, tool results).
    assistant: bool,
    count: usize,
    starts_thinking: bool,
    /// Some block is not a tool result.
    has_text: bool,
    last: LastBlock,
}

/// How the last block takes `cache_control` when its message is last.
#[derive(Debug, Clone, Copy, Default)]
enum LastBlock {
    /// A thinking block: left as it is.
    #[default]
    Thinking,
    /// An object without `cache_control`: the field goes at its end.
    Plain,
    /// Anything else: the blocks are made again.
    Other,
}

fn blocks_entry(request: &Request<'_>, message: &Message) -> Entry<Blocks> {
    let (role, blocks) = message_blocks(request, message);
    let last = match blocks.last() {
        Some(block) if is_thinking(block) => LastBlock::Thinking,
        Some(Value::Object(map)) if !map.is_empty() && !map.contains_key("cache_control") => {
            LastBlock::Plain
        }
        _ => LastBlock::Other,
    };
    let meta = Blocks {
        assistant: role == "assistant",
        count: blocks.len(),
        starts_thinking: blocks.first().is_some_and(is_thinking),
        has_text: blocks.iter().any(|b| b["type"] != "tool_result"),
        last,
    };
    Entry::new(joined(&blocks), meta)
}

/// The body's fields, `messages` (in its place) left `null`. `can_think`:
/// whether the turn allows thinking (`turn_can_think`).
fn fields(
    model: &str,
    request: &Request<'_>,
    configured_max: Option<u32>,
    can_think: bool,
) -> Map<String, Value> {
    let (max_tokens, thinking) = budgets(model, request, configured_max);
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("max_tokens".into(), json!(max_tokens));
    let mut system = request.system.to_string();
    for m in request.messages.iter().filter(|m| m.role == Role::System) {
        if !system.is_empty() {
            system.push_str("\n\n");
        }
        system.push_str(&m.content);
    }
    let cache = request.prompt_cache;
    if !system.is_empty() && cache.is_on() {
        // The end of the stable prefix: tools, then system (SPEC 25).
        let block = json!({"type": "text", "text": system, "cache_control": cache_control(cache)});
        body.insert("system".into(), json!([block]));
    } else if !system.is_empty() {
        body.insert("system".into(), json!(system));
    }
    let thinking = thinking.filter(|_| can_think);
    body.insert("messages".into(), Value::Null);
    if !request.tools.is_empty() {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        if let (Some(Value::Object(last)), true) = (tools.last_mut(), cache.is_on()) {
            last.insert("cache_control".into(), cache_control(cache));
        }
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(budget) = thinking {
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    body.insert("stream".into(), json!(true));
    body
}

/// The conversation as alternating user/assistant messages of content blocks.
#[cfg(test)]
fn messages(request: &Request<'_>) -> Vec<Value> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in request.messages {
        if message.role == Role::System {
            continue;
        }
        let (role, blocks) = message_blocks(request, message);
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    for turn in marked_turn_ends(out.iter().map(|(role, _)| *role == "assistant")) {
        if let Some(block) = out[turn].1.last_mut() {
            mark_for_caching(block, request.prompt_cache);
        }
    }
    out.into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// One message's role and blocks (a system message has none: it joins the
/// top-level `system`).
fn message_blocks(request: &Request<'_>, message: &Message) -> (&'static str, Vec<Value>) {
    match message.role {
        Role::System => ("user", Vec::new()),
        Role::User => ("user", vec![text_block(&message.content)]),
        Role::Tool => ("user", vec![tool_result_block(message)]),
        Role::Assistant => ("assistant", assistant_blocks(request, message)),
    }
}

fn is_thinking(block: &Value) -> bool {
    matches!(
        block["type"].as_str(),
        Some("thinking" | "redacted_thinking")
    )
}

/// A breakpoint's `cache_control`: the default five minutes, or an hour.
fn cache_control(cache: PromptCache) -> Value {
    match cache {
        PromptCache::OneHour => json!({"type": "ephemeral", "ttl": "1h"}),
        _ => json!({"type": "ephemeral"}),
    }
}

/// The last block of the conversation carries `cache_control`, unless it is
/// a thinking block or the cache is off.
fn mark_for_caching(block: &mut Value, cache: PromptCache) {
    if cache.is_on() && !is_thinking(block) {
        if let Some(map) = block.as_object_mut() {
            map.insert("cache_control".into(), cache_control(cache));
        }
    }
}

/// What deciding on thinking needs to know of one message of the body.
struct Shape {
    /// A user message with more than tool results.
    user_text: bool,
    assistant: bool,
    starts_thinking: bool,
}

impl Shape {
    #[cfg(test)]
    fn of(message: &Value) -> Shape {
        Shape {
            user_text: message["role"] == "user"
                && message["content"]
                    .as_array()
                    .is_some_and(|blocks| blocks.iter().any(|b| b["type"] != "tool_result")),
            assistant: message["role"] == "assistant",
            starts_thinking: is_thinking(&message["content"][0]),
        }
    }
}

/// With thinking on, every assistant message of the current turn (since the
/// last user message that is more than tool results) must start with a
/// thinking block, or the API refuses the request. A turn begun without
/// thinking (by another model, or with thinking off) finishes without it.
fn turn_can_think(messages: impl Iterator<Item = Shape>) -> bool {
    let messages: Vec<Shape> = messages.collect();
    let start = messages
        .iter()
        .rposition(|m| m.user_text)
        .map_or(0, |i| i + 1);
    messages[start..]
        .iter()
        .filter(|m| m.assistant)
        .all(|m| m.starts_thinking)
}

/// A text block; the API refuses empty ones.
fn text_block(text: &str) -> Value {
    let text = if text.is_empty() { "(empty)" } else { text };
    json!({"type": "text", "text": text})
}

fn tool_result_block(message: &Message) -> Value {
    let id = message.tool_call_id.as_deref().unwrap_or_default();
    let content = if message.content.is_empty() {
        "(no output)"
    } else {
        &message.content
    };
    json!({"type": "tool_result", "tool_use_id": block_id(id), "content": content})
}

fn assistant_blocks(request: &Request<'_>, message: &Message) -> Vec<Value> {
    let mut blocks: Vec<Value> = request
        .extra_of(message)
        .and_then(|extra| extra.pointer("/anthropic/content"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    // The request places its own breakpoints: kept ones would pass the
    // API's four (SPEC 25).
    for block in &mut blocks {
        if let Some(map) = block.as_object_mut() {
            map.shift_remove("cache_control");
        }
    }
    if !message.content.is_empty() {
        blocks.push(json!({"type": "text", "text": message.content}));
    }
    for call in &message.tool_calls {
        // A garbled call's raw text is no object; the API wants one.
        let input = if call.garbled || !call.arguments.is_object() {
            json!({})
        } else {
            call.arguments.clone()
        };
        blocks.push(json!({"type": "tool_use", "id": block_id(&call.id), "name": call.name, "input": input}));
    }
    blocks
}

/// Tool-use ids must match `^[a-zA-Z0-9_-]+$`; ids made by another
/// provider are mapped onto that alphabet (the same way on both sides).
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
        .collect();
    if id.is_empty() {
        "call".into()
    } else {
        id
    }
}

#[cfg(test)]
mod tests;
