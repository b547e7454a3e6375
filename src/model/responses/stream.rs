//! Assembles OpenAI Responses stream events (`response.output_item.*`,
//! `response.output_text.delta`, `response.refusal.*`,
//! `response.function_call_arguments.*`, `response.completed` /
//! `response.incomplete` / `response.failed`, `error`) into one `Response`.
//! Text goes to the observer as it arrives; function-call arguments are put
//! together per output item (raw, within the bound of `wire::Arguments`: the
//! `.done` events that carry them whole again replace them, never add a
//! copy); a `refusal` content part makes the reply a refusal. A server that
//! did not stream sends one `response` body.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::model::wire::{
    append, note_model, raw_text, stream_error, too_large, Arguments, Assembly as WireAssembly,
    Kept, Progress, MAX_TEXT, MAX_TOOL_CALLS, MAX_TOOL_NAME,
};
use crate::model::{usage_wire, FinishReason, ModelError, Response, StreamObserver, Usage};

/// At most this many output items in one reply.
const MAX_ITEMS: usize = 4 * MAX_TOOL_CALLS;

/// One output item as it builds up.
#[derive(Debug)]
enum Item {
    Message {
        text: String,
        streamed: bool,
    },
    FunctionCall {
        call_id: String,
        name: String,
        arguments: Arguments,
    },
    /// Kept whole, `encrypted_content` included, for replay.
    Reasoning(Value),
    Other,
}

/// The reply so far.
#[derive(Debug, Default)]
pub(crate) struct Assembly {
    /// By `output_index`, in stream order.
    items: Vec<(usize, Item)>,
    /// Refusal text, from `response.refusal.delta` or a `refusal` part.
    refusal: String,
    /// The argument text the function calls keep between them.
    kept: Kept,
    usage: Usage,
    usage_reported: bool,
    incomplete: bool,
    model: Option<String>,
}

#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    output_index: usize,
    #[serde(default, borrow)]
    delta: Option<&'a RawValue>,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default, borrow)]
    item: Option<&'a RawValue>,
    #[serde(default)]
    response: Option<WireResponse>,
    // `error` events carry these at the top level.
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    message: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

/// An output item's fields as far as a function call needs them, raw.
#[derive(Deserialize)]
struct WireItem<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<&'a RawValue>,
    #[serde(default, borrow)]
    call_id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
}

/// A whole `response` body (a server that did not stream).
#[derive(Deserialize)]
struct WireBody<'a> {
    #[serde(default)]
    status: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    model: Option<Value>,
    #[serde(default, borrow)]
    output: Option<Vec<&'a RawValue>>,
    #[serde(default)]
    usage: Option<Value>,
}

#[derive(Deserialize)]
struct WireResponse {
    #[serde(default, deserialize_with = "usage_wire::object")]
    usage: Option<WireUsage>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "usage_wire::count_or_zero")]
    input_tokens: u64,
    #[serde(default, deserialize_with = "usage_wire::count_or_zero")]
    output_tokens: u64,
    #[serde(default, deserialize_with = "usage_wire::object")]
    input_tokens_details: Option<WireInputDetails>,
}

/// `cached_tokens` are the reads; `cache_write_tokens` the writes where a
/// server reports them (Azure AI Foundry's Responses).
#[derive(Deserialize)]
struct WireInputDetails {
    #[serde(default, deserialize_with = "usage_wire::count_or_zero")]
    cached_tokens: u64,
    #[serde(default, deserialize_with = "usage_wire::count_or_zero")]
    cache_write_tokens: u64,
}

impl Assembly {
    /// Applies one event's `data`.
    pub(crate) fn apply(
        &mut self,
        data: &str,
        observer: &dyn StreamObserver,
    ) -> Result<Progress, ModelError> {
        let event: WireEvent =
            serde_json::from_str(data).map_err(|_| ModelError::StreamIncomplete)?;
        let index = event.output_index;
        match &*event.kind {
            "response.output_item.added" => {
                let item = match event.item {
                    Some(item) => new_item(item, observer, &mut self.kept)?,
                    None => Item::Other,
                };
                self.push(index, item)?;
            }
            "response.output_text.delta" => {
                let piece = event.delta.map(raw_text).transpose()?.unwrap_or_default();
                let make = || Item::Message {
                    text: String::new(),
                    streamed: false,
                };
                if let Item::Message { text, streamed } = self.item(index, make)? {
                    append(text, &piece, MAX_TEXT, "the reply text")?;
                    *streamed = true;
                }
                observer.text_delta(&piece);
            }
            "response.refusal.delta" => {
                let piece = event.delta.map(raw_text).transpose()?.unwrap_or_default();
                append(&mut self.refusal, &piece, MAX_TEXT, "the refusal")?;
            }
            "response.refusal.done" => {
                if let Some(full) = event.refusal.filter(|r| !r.is_empty()) {
                    self.refusal = full;
                }
            }
            "response.function_call_arguments.delta" => {
                observer.tool_call_delta();
                let at = self.item_at(index, || Item::Other)?;
                if let (Item::FunctionCall { arguments, .. }, Some(piece)) =
                    (&mut self.items[at].1, event.delta)
                {
                    arguments.push_raw(piece, &mut self.kept)?;
                }
            }
            "response.function_call_arguments.done" => {
                let at = self.item_at(index, || Item::Other)?;
                if let (Item::FunctionCall { arguments, .. }, Some(done)) =
                    (&mut self.items[at].1, event.arguments)
                {
                    arguments.replace_raw(done, &mut self.kept)?;
                }
            }
            "response.output_item.done" => {
                if let Some(item) = event.item {
                    self.complete_item(index, item, observer)?;
                }
            }
            "response.completed" | "response.incomplete" => {
                self.incomplete = event.kind == "response.incomplete";
                if let Some(response) = event.response {
                    note_model(&mut self.model, response.model.as_deref());
                    if let Some(usage) = response.usage {
                        self.set_usage(usage);
                    }
                }
                return Ok(Progress::Finished);
            }
            "response.failed" => {
                let error = event.response.and_then(|r| r.error).unwrap_or(Value::Null);
                return Err(stream_error(&error));
            }
            "error" | "" if event.error.is_some() => {
                return Err(stream_error(event.error.as_ref().unwrap_or(&Value::Null)));
            }
            "error" => {
                let error = json!({"code": event.code, "message": event.message});
                return Err(stream_error(&error));
            }
            _ => {}
        }
        Ok(Progress::Continue)
    }

    fn set_usage(&mut self, usage: WireUsage) {
        self.usage_reported = true;
        let details = usage.input_tokens_details;
        self.usage = Usage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cached_input_tokens: details.as_ref().map_or(0, |d| d.cached_tokens),
            cache_write_tokens: details.as_ref().map_or(0, |d| d.cache_write_tokens),
            cache_write_1h_tokens: 0,
        }
        .bounded();
    }

    /// Applies a whole `response` body (a server that did not stream).
    pub(crate) fn apply_response(
        &mut self,
        body: &str,
        observer: &dyn StreamObserver,
    ) -> Result<(), ModelError> {
        let body: WireBody<'_> =
            serde_json::from_str(body).map_err(|_| ModelError::StreamIncomplete)?;
        let status = body.status.as_ref().and_then(Value::as_str);
        if status == Some("failed") {
            return Err(stream_error(body.error.as_ref().unwrap_or(&Value::Null)));
        }
        note_model(&mut self.model, body.model.as_ref().and_then(Value::as_str));
        for (index, item) in body.output.into_iter().flatten().enumerate() {
            self.complete_item(index, item, observer)?;
        }
        self.incomplete = status == Some("incomplete");
        if let Some(Ok(usage)) = body.usage.map(serde_json::from_value::<WireUsage>) {
            self.set_usage(usage);
        }
        Ok(())
    }

    fn push(&mut self, index: usize, item: Item) -> Result<usize, ModelError> {
        if self.items.len() >= MAX_ITEMS {
            return Err(too_large("the number of output items"));
        }
        let calls = |items: &[(usize, Item)]| {
            items
                .iter()
                .filter(|(_, i)| matches!(i, Item::FunctionCall { .. }))
                .count()
        };
        if matches!(item, Item::FunctionCall { .. }) && calls(&self.items) >= MAX_TOOL_CALLS {
            return Err(too_large("the number of tool calls"));
        }
        self.items.push((index, item));
        Ok(self.items.len() - 1)
    }

    /// The item at `index`, created by `make` when the stream skipped its
    /// `output_item.added`.
    fn item(&mut self, index: usize, make: impl FnOnce() -> Item) -> Result<&mut Item, ModelError> {
        let at = self.item_at(index, make)?;
        Ok(&mut self.items[at].1)
    }

    /// Where `item` finds (or puts) the item at `index`.
    fn item_at(&mut self, index: usize, make: impl FnOnce() -> Item) -> Result<usize, ModelError> {
        match self.items.iter().rposition(|(i, _)| *i == index) {
            Some(at) => Ok(at),
            None => self.push(index, make()),
        }
    }

    /// `output_item.done` carries the finished item: its fields win. A
    /// function call's arguments replace those streamed (given back to the
    /// reply's budget first).
    fn complete_item(
        &mut self,
        index: usize,
        done: &RawValue,
        observer: &dyn StreamObserver,
    ) -> Result<(), ModelError> {
        let head: WireItem<'_> =
            serde_json::from_str(done.get()).map_err(|_| ModelError::StreamIncomplete)?;
        if head.kind.map(raw_text).transpose()?.as_deref() == Some("function_call") {
            let at = self.item_at(index, || Item::Other)?;
            let old = std::mem::replace(&mut self.items[at].1, Item::Other);
            if let Item::FunctionCall { arguments, .. } = old {
                arguments.discard(&mut self.kept);
            }
            self.items[at].1 = function_call(&head, &mut self.kept)?;
            return Ok(());
        }
        let done: Value =
            serde_json::from_str(done.get()).map_err(|_| ModelError::StreamIncomplete)?;
        if let Some(refusal) = refusal_of(&done) {
            if self.refusal.is_empty() {
                self.refusal = refusal;
            }
        }
        let finished = other_item(done);
        let at = self.item_at(index, || Item::Other)?;
        if matches!(finished, Item::Reasoning(_)) {
            let old = std::mem::replace(&mut self.items[at].1, finished);
            if let Item::FunctionCall { arguments, .. } = old {
                arguments.discard(&mut self.kept);
            }
            return Ok(());
        }
        match (&mut self.items[at].1, finished) {
            (Item::Message { text, streamed }, Item::Message { text: full, .. })
                if !*streamed && !full.is_empty() =>
            {
                observer.text_delta(&full);
                *text = full;
            }
            (slot @ Item::Other, Item::Message { text: full, .. }) => {
                observer.text_delta(&full);
                *slot = Item::Message {
                    text: full,
                    streamed: true,
                };
            }
            _ => {}
        }
        Ok(())
    }

    /// The whole reply; reasoning items go to `extra` in stream order. A
    /// reply with refusal text is a `Refusal`.
    pub(crate) fn finish(self) -> Result<Response, ModelError> {
        if !self.refusal.is_empty() {
            return Err(ModelError::Refusal { text: self.refusal });
        }
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        let mut reasoning = Vec::new();
        for (_, item) in self.items {
            match item {
                Item::Message { text: t, .. } => text.push_str(&t),
                Item::FunctionCall {
                    call_id,
                    name,
                    arguments,
                } => tool_calls.push(arguments.into_call(call_id, name)),
                Item::Reasoning(value) => reasoning.push(value),
                Item::Other => {}
            }
        }
        let finish = if self.incomplete {
            FinishReason::Length
        } else if tool_calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        };
        Ok(Response {
            text,
            tool_calls,
            usage: self.usage,
            usage_reported: self.usage_reported,
            finish,
            extra: (!reasoning.is_empty()).then(|| json!({"responses": {"reasoning": reasoning}})),
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
        self.apply_response(body, observer)
    }

    fn finish(self) -> Result<Response, ModelError> {
        Assembly::finish(self)
    }
}

/// The text of a message item's `refusal` content parts, if any.
fn refusal_of(item: &Value) -> Option<String> {
    if item["type"] != "message" {
        return None;
    }
    let text: String = item["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|part| part["type"] == "refusal")
        .filter_map(|part| part["refusal"].as_str())
        .collect();
    (!text.is_empty()).then_some(text)
}

/// An item from its `output_item.added`.
fn new_item(
    raw: &RawValue,
    observer: &dyn StreamObserver,
    kept: &mut Kept,
) -> Result<Item, ModelError> {
    let head: WireItem<'_> =
        serde_json::from_str(raw.get()).map_err(|_| ModelError::StreamIncomplete)?;
    if head.kind.map(raw_text).transpose()?.as_deref() == Some("function_call") {
        observer.tool_call_delta();
        return function_call(&head, kept);
    }
    let item: Value = serde_json::from_str(raw.get()).map_err(|_| ModelError::StreamIncomplete)?;
    Ok(other_item(item))
}

/// A `function_call` item, its arguments measured before they are kept.
fn function_call(item: &WireItem<'_>, kept: &mut Kept) -> Result<Item, ModelError> {
    let field = |v: Option<&RawValue>| -> Result<String, ModelError> {
        Ok(v.map(raw_text)
            .transpose()?
            .unwrap_or_default()
            .into_owned())
    };
    let (call_id, name) = (field(item.call_id)?, field(item.name)?);
    if name.len() > MAX_TOOL_NAME || call_id.len() > MAX_TOOL_NAME {
        return Err(too_large("a tool name or id"));
    }
    let mut arguments = Arguments::default();
    if let Some(raw) = item.arguments {
        arguments.push_raw(raw, kept)?;
    }
    Ok(Item::FunctionCall {
        call_id,
        name,
        arguments,
    })
}

/// Any item but a function call: a message's text, a reasoning item whole.
fn other_item(item: Value) -> Item {
    match item["type"].as_str() {
        Some("message") => {
            let text: String = item["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|part| part["type"] != "refusal")
                .filter_map(|part| part["text"].as_str())
                .collect();
            Item::Message {
                text,
                streamed: false,
            }
        }
        Some("reasoning") => Item::Reasoning(item),
        _ => Item::Other,
    }
}

#[cfg(test)]
mod tests;
