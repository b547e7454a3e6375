//! Assembles Anthropic's streamed events (`message_start`,
//! `content_block_start/delta/stop`, `message_delta`, `ping`, `error`,
//! `message_stop`) into one `Response`. Text goes to the observer as it
//! arrives; tool input JSON is put together per block index (raw, within
//! the bound of `wire::Arguments`) and parsed once the reply is whole.
//! `stop_reason: refusal` makes the reply a refusal. A server that did not
//! stream sends one `message` body, read here too.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::model::wire::{
    append, note_model, raw_text, stream_error, too_large, Arguments, Assembly as WireAssembly,
    Kept, Progress, MAX_TEXT, MAX_TOOL_CALLS, MAX_TOOL_NAME,
};
use crate::model::{usage_wire, FinishReason, ModelError, Response, StreamObserver, Usage};

/// At most this many content blocks in one reply.
const MAX_BLOCKS: usize = 4 * MAX_TOOL_CALLS;

/// One content block as it builds up.
#[derive(Debug)]
enum Block {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        json: Arguments,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
    /// `redacted_thinking` and any block we only keep as it came.
    Opaque(Value),
}

/// The reply so far.
#[derive(Debug, Default)]
pub(crate) struct Assembly {
    /// In stream order; `index` is looked up among them.
    blocks: Vec<(usize, Block)>,
    tool_uses: usize,
    /// The input JSON the tool uses keep between them.
    kept: Kept,
    tokens: Tokens,
    usage_reported: bool,
    stop_reason: Option<String>,
    model: Option<String>,
}

/// Anthropic's usage counters as last reported.
#[derive(Debug, Default)]
struct Tokens {
    input: u64,
    cache_read: u64,
    cache_creation: u64,
    /// The one-hour share of the writes, when `cache_creation` says so.
    cache_creation_1h: u64,
    output: u64,
}

impl Tokens {
    /// Anthropic's `input_tokens` leaves out the cache reads and writes;
    /// ours counts all input, so it is their sum.
    fn usage(&self) -> Usage {
        Usage {
            input_tokens: self
                .input
                .saturating_add(self.cache_read)
                .saturating_add(self.cache_creation),
            output_tokens: self.output,
            cached_input_tokens: self.cache_read,
            cache_write_tokens: self.cache_creation,
            cache_write_1h_tokens: self.cache_creation_1h,
        }
        .bounded()
    }
}

/// The fields of any streamed event we read; the rest are ignored.
#[derive(Deserialize)]
struct WireEvent<'a> {
    /// LiteLLM's `/v1/messages` sends an error as `{"error": {...}}` alone.
    #[serde(rename = "type", default, borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    index: usize,
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    #[serde(default, borrow)]
    content_block: Option<&'a RawValue>,
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default, deserialize_with = "usage_wire::object")]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    partial_json: Option<&'a RawValue>,
    #[serde(default, borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    signature: Option<Cow<'a, str>>,
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default, deserialize_with = "usage_wire::object")]
    usage: Option<WireUsage>,
    #[serde(default)]
    model: Option<String>,
}

/// A whole `message` body (a server that did not stream).
#[derive(Deserialize)]
struct WireBody<'a> {
    #[serde(default)]
    model: Option<Value>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default, borrow)]
    content: Option<Vec<&'a RawValue>>,
    #[serde(default)]
    stop_reason: Option<Value>,
}

/// A content block as it starts, its fields raw (a text's type is not
/// checked: anything but a string is empty).
#[derive(Deserialize)]
struct WireBlock<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<&'a RawValue>,
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    text: Option<&'a RawValue>,
    #[serde(default, borrow)]
    thinking: Option<&'a RawValue>,
    #[serde(default, borrow)]
    signature: Option<&'a RawValue>,
    #[serde(default, borrow)]
    input: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default, deserialize_with = "usage_wire::count")]
    input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "usage_wire::count")]
    output_tokens: Option<u64>,
    #[serde(default, deserialize_with = "usage_wire::count")]
    cache_read_input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "usage_wire::count")]
    cache_creation_input_tokens: Option<u64>,
    /// The writes by lifetime.
    #[serde(default, deserialize_with = "usage_wire::object")]
    cache_creation: Option<WireCacheCreation>,
}

#[derive(Deserialize, Default)]
struct WireCacheCreation {
    #[serde(default, deserialize_with = "usage_wire::count")]
    ephemeral_1h_input_tokens: Option<u64>,
}

impl Assembly {
    /// Applies one event's `data`. An in-stream `error` event fails the
    /// attempt with the status its type stands for.
    pub(crate) fn apply(
        &mut self,
        data: &str,
        observer: &dyn StreamObserver,
    ) -> Result<Progress, ModelError> {
        let event: WireEvent =
            serde_json::from_str(data).map_err(|_| ModelError::StreamIncomplete)?;
        match &*event.kind {
            "message_start" => {
                if let Some(message) = event.message {
                    note_model(&mut self.model, message.model.as_deref());
                    if let Some(usage) = message.usage {
                        self.add_usage(&usage);
                    }
                }
            }
            "content_block_start" => {
                let block = event.content_block.ok_or(ModelError::StreamIncomplete)?;
                self.start_block(event.index, block, observer)?;
            }
            "content_block_delta" => {
                if let Some(delta) = event.delta {
                    self.apply_delta(event.index, delta, observer)?;
                }
            }
            "message_delta" => {
                if let Some(reason) = event.delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(reason);
                }
                if let Some(usage) = event.usage {
                    self.add_usage(&usage);
                }
            }
            "message_stop" => return Ok(Progress::Finished),
            "error" | "" if event.error.is_some() => {
                return Err(stream_error(event.error.as_ref().unwrap_or(&Value::Null)))
            }
            "error" => return Err(stream_error(&Value::Null)),
            // `ping`, `content_block_stop` and event types added later.
            _ => {}
        }
        Ok(Progress::Continue)
    }

    /// Applies a whole `message` body (a server that did not stream).
    pub(crate) fn apply_message(
        &mut self,
        body: &str,
        observer: &dyn StreamObserver,
    ) -> Result<(), ModelError> {
        let body: WireBody<'_> =
            serde_json::from_str(body).map_err(|_| ModelError::StreamIncomplete)?;
        note_model(&mut self.model, body.model.as_ref().and_then(Value::as_str));
        if let Some(Ok(usage)) = body.usage.map(serde_json::from_value::<WireUsage>) {
            self.add_usage(&usage);
        }
        for (index, block) in body.content.into_iter().flatten().enumerate() {
            self.start_block(index, block, observer)?;
        }
        self.stop_reason = body
            .stop_reason
            .as_ref()
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok(())
    }

    fn start_block(
        &mut self,
        index: usize,
        block: &RawValue,
        observer: &dyn StreamObserver,
    ) -> Result<(), ModelError> {
        if self.blocks.len() >= MAX_BLOCKS {
            return Err(too_large("the number of content blocks"));
        }
        let block = start_block(block, observer, &mut self.kept)?;
        // LiteLLM's /v1/messages in front of a server that repeats a tool
        // call in every delta (llama-cpp-python) opens a new `tool_use`
        // block with the same id for each piece: one call, continued.
        let continued = matches!(
            (&block, self.blocks.last()),
            (Block::ToolUse { id, .. }, Some((_, Block::ToolUse { id: last_id, .. })))
                if !id.is_empty() && id == last_id
        );
        if continued {
            if let Some((last, _)) = self.blocks.last_mut() {
                *last = index;
            }
            if let Block::ToolUse { json, .. } = block {
                json.discard(&mut self.kept);
            }
            return Ok(());
        }
        if matches!(block, Block::ToolUse { .. }) {
            self.tool_uses += 1;
            if self.tool_uses > MAX_TOOL_CALLS {
                return Err(too_large("the number of tool calls"));
            }
        }
        self.blocks.push((index, block));
        Ok(())
    }

    fn apply_delta(
        &mut self,
        index: usize,
        delta: WireDelta<'_>,
        observer: &dyn StreamObserver,
    ) -> Result<(), ModelError> {
        let block = self
            .blocks
            .iter_mut()
            .rev()
            .find(|(i, _)| *i == index)
            .map(|(_, b)| b)
            .ok_or(ModelError::StreamIncomplete)?;
        match (delta.kind.as_deref(), block) {
            (Some("text_delta"), Block::Text(text)) => {
                let piece = delta.text.unwrap_or_default();
                append(text, &piece, MAX_TEXT, "the reply text")?;
                observer.text_delta(&piece);
            }
            (Some("input_json_delta"), Block::ToolUse { json, .. }) => {
                observer.tool_call_delta();
                if let Some(piece) = delta.partial_json {
                    json.push_raw(piece, &mut self.kept)?;
                }
            }
            (Some("thinking_delta"), Block::Thinking { thinking, .. }) => {
                let piece = delta.thinking.unwrap_or_default();
                append(thinking, &piece, MAX_TEXT, "a thinking block")?;
            }
            (Some("signature_delta"), Block::Thinking { signature, .. }) => {
                let piece = delta.signature.unwrap_or_default();
                append(signature, &piece, MAX_TEXT, "a signature")?;
            }
            // Citations and deltas of block kinds we keep whole.
            _ => {}
        }
        Ok(())
    }

    /// Usage fields are cumulative: a later event's value replaces an
    /// earlier one, field by field.
    fn add_usage(&mut self, usage: &WireUsage) {
        let t = &mut self.tokens;
        for (slot, value) in [
            (&mut t.input, usage.input_tokens),
            (&mut t.cache_read, usage.cache_read_input_tokens),
            (&mut t.cache_creation, usage.cache_creation_input_tokens),
            (
                &mut t.cache_creation_1h,
                usage
                    .cache_creation
                    .as_ref()
                    .and_then(|c| c.ephemeral_1h_input_tokens),
            ),
            (&mut t.output, usage.output_tokens),
        ] {
            if let Some(value) = value {
                *slot = value;
                self.usage_reported = true;
            }
        }
    }

    /// The whole reply. Thinking and redacted-thinking blocks (with their
    /// signatures) go to `extra` in stream order. A reply stopped as a
    /// refusal is a `Refusal` carrying its text.
    pub(crate) fn finish(self) -> Result<Response, ModelError> {
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        let mut kept = Vec::new();
        for (_, block) in self.blocks {
            match block {
                Block::Text(t) => text.push_str(&t),
                Block::ToolUse { id, name, json } => tool_calls.push(json.into_call(id, name)),
                Block::Thinking {
                    thinking,
                    signature,
                } => kept.push(
                    json!({"type": "thinking", "thinking": thinking, "signature": signature}),
                ),
                Block::Opaque(value) => {
                    if value["type"] == "redacted_thinking" {
                        kept.push(value);
                    }
                }
            }
        }
        let finish = match self.stop_reason.as_deref() {
            Some("refusal") => {
                let text = if text.trim().is_empty() {
                    "the reply was stopped as a refusal (stop_reason: refusal)".to_string()
                } else {
                    text
                };
                return Err(ModelError::Refusal { text });
            }
            Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
            Some("tool_use") => FinishReason::ToolCalls,
            _ if !tool_calls.is_empty() => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        };
        Ok(Response {
            text,
            tool_calls,
            usage: self.tokens.usage(),
            usage_reported: self.usage_reported,
            finish,
            extra: (!kept.is_empty()).then(|| json!({"anthropic": {"content": kept}})),
            cost_override: None,
            model: self.model,
        })
    }
}

impl WireAssembly for Assembly {
    fn apply(&mut self, data: &str, observer: &dyn StreamObserver) -> Result<Progress, ModelError> {
        Assembly::apply(self, data, observer)
    }

    fn apply_body(&mut self, body: &str, observer: &dyn StreamObserver) -> Result<(), ModelError> {
        self.apply_message(body, observer)
    }

    fn finish(self) -> Result<Response, ModelError> {
        Assembly::finish(self)
    }
}

/// A block from its `content_block_start` (or a body's content): text and
/// thinking as they are, a tool use's non-empty `input` as the start of its
/// input JSON, any other kind kept whole.
fn start_block(
    raw: &RawValue,
    observer: &dyn StreamObserver,
    kept: &mut Kept,
) -> Result<Block, ModelError> {
    let block: WireBlock<'_> =
        serde_json::from_str(raw.get()).map_err(|_| ModelError::StreamIncomplete)?;
    let field = |v: Option<&RawValue>| -> Result<String, ModelError> {
        Ok(v.map(raw_text)
            .transpose()?
            .unwrap_or_default()
            .into_owned())
    };
    let kind = block.kind.map(raw_text).transpose()?;
    Ok(match kind.as_deref() {
        Some("text") => {
            let text = field(block.text)?;
            if text.len() > MAX_TEXT {
                return Err(too_large("the reply text"));
            }
            if !text.is_empty() {
                observer.text_delta(&text);
            }
            Block::Text(text)
        }
        Some("tool_use") => {
            observer.tool_call_delta();
            let (id, name) = (field(block.id)?, field(block.name)?);
            if name.len() > MAX_TOOL_NAME || id.len() > MAX_TOOL_NAME {
                return Err(too_large("a tool name or id"));
            }
            // `input` starts as `{}`; a non-empty one arrives whole.
            let mut json = Arguments::default();
            if let Some(input) = block.input.filter(|i| is_filled_object(i)) {
                json.push_raw(input, kept)?;
            }
            Block::ToolUse { id, name, json }
        }
        Some("thinking") => Block::Thinking {
            thinking: field(block.thinking)?,
            signature: field(block.signature)?,
        },
        _ => Block::Opaque(
            serde_json::from_str(raw.get()).map_err(|_| ModelError::StreamIncomplete)?,
        ),
    })
}

/// Whether raw JSON is an object with at least one member.
fn is_filled_object(raw: &RawValue) -> bool {
    raw.get()
        .strip_prefix('{')
        .is_some_and(|rest| !rest.trim_start().starts_with('}'))
}

#[cfg(test)]
mod tests;
