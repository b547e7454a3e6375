//! Assembles ConverseStream's events (`messageStart`, `contentBlockStart`,
//! `contentBlockDelta`, `contentBlockStop`, `messageStop` with its
//! `stopReason`, `metadata` with the usage) into one `Response`. Each event
//! is a frame whose `:event-type` header names it and whose payload is the
//! event's JSON. Text goes to the observer as it arrives; a tool use's
//! `input` arrives as pieces of JSON text, put together per block index
//! within the bound of `wire::Arguments`. `messageStop` is the finish
//! marker; the `metadata` event after it brings the usage.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::model::wire::{
    append, raw_text, too_large, Arguments, Kept, MAX_TEXT, MAX_TOOL_CALLS, MAX_TOOL_NAME,
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
        input: Arguments,
    },
    /// Reasoning and kinds we do not keep.
    Other,
}

/// Where the reply stands.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Before `messageStop`.
    #[default]
    Open,
    /// `messageStop` came; `metadata` may follow.
    Stopped,
    /// `metadata` came after `messageStop`: nothing more is awaited.
    Done,
}

/// The reply so far.
#[derive(Debug, Default)]
pub(crate) struct Assembly {
    /// In stream order; `contentBlockIndex` is looked up among them.
    blocks: Vec<(u64, Block)>,
    tool_uses: usize,
    kept: Kept,
    usage: Option<Usage>,
    stop_reason: Option<String>,
    stage: Stage,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStart<'a> {
    #[serde(default)]
    content_block_index: u64,
    #[serde(default, borrow)]
    start: Option<StartOf<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartOf<'a> {
    #[serde(default, borrow)]
    tool_use: Option<ToolUseStart<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolUseStart<'a> {
    #[serde(default, borrow)]
    tool_use_id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockDelta<'a> {
    #[serde(default)]
    content_block_index: u64,
    #[serde(default, borrow)]
    delta: Option<DeltaOf<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeltaOf<'a> {
    #[serde(default, borrow)]
    text: Option<&'a RawValue>,
    #[serde(default, borrow)]
    tool_use: Option<ToolUseDelta<'a>>,
}

#[derive(Deserialize)]
struct ToolUseDelta<'a> {
    #[serde(default, borrow)]
    input: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageStop {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default, deserialize_with = "usage_wire::object")]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    #[serde(default, deserialize_with = "usage_wire::count_or_zero")]
    input_tokens: u64,
    #[serde(default, deserialize_with = "usage_wire::count_or_zero")]
    output_tokens: u64,
    #[serde(default, deserialize_with = "usage_wire::count_or_zero")]
    cache_read_input_tokens: u64,
    #[serde(default, deserialize_with = "usage_wire::count_or_zero")]
    cache_write_input_tokens: u64,
    /// The writes by lifetime (`CacheDetail`: `inputTokens`, `ttl`).
    #[serde(default, deserialize_with = "usage_wire::object")]
    cache_details: Option<Vec<WireCacheDetail>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireCacheDetail {
    #[serde(default, deserialize_with = "usage_wire::count_or_zero")]
    input_tokens: u64,
    #[serde(default, deserialize_with = "usage_wire::object")]
    ttl: Option<String>,
}

impl WireUsage {
    /// Bedrock's `inputTokens` leaves out the cache reads and writes; ours
    /// counts all input, so it is their sum.
    fn usage(&self) -> Usage {
        let one_hour = self
            .cache_details
            .iter()
            .flatten()
            .filter(|d| d.ttl.as_deref() == Some("1h"))
            .fold(0u64, |sum, d| sum.saturating_add(d.input_tokens));
        Usage {
            input_tokens: self
                .input_tokens
                .saturating_add(self.cache_read_input_tokens)
                .saturating_add(self.cache_write_input_tokens),
            output_tokens: self.output_tokens,
            cached_input_tokens: self.cache_read_input_tokens,
            cache_write_tokens: self.cache_write_input_tokens,
            cache_write_1h_tokens: one_hour,
        }
        .bounded()
    }
}

fn parse<'a, T: Deserialize<'a>>(payload: &'a str) -> Result<T, ModelError> {
    serde_json::from_str(payload).map_err(|_| ModelError::StreamIncomplete)
}

impl Assembly {
    /// Where the reply stands.
    pub(crate) fn stage(&self) -> Stage {
        self.stage
    }

    /// Applies one event: its `:event-type` and JSON payload. Event types
    /// added later are skipped.
    pub(crate) fn apply(
        &mut self,
        event: &str,
        payload: &str,
        observer: &dyn StreamObserver,
    ) -> Result<(), ModelError> {
        match event {
            "contentBlockStart" => {
                let start: BlockStart = parse(payload)?;
                let tool = start.start.and_then(|s| s.tool_use);
                self.start_block(start.content_block_index, tool, observer)?;
            }
            "contentBlockDelta" => {
                let delta: BlockDelta = parse(payload)?;
                if let Some(d) = delta.delta {
                    self.apply_delta(delta.content_block_index, d, observer)?;
                }
            }
            "messageStop" => {
                let stop: MessageStop = parse(payload)?;
                self.stop_reason = stop.stop_reason;
                self.stage = Stage::Stopped;
            }
            "metadata" => {
                let meta: Metadata = parse(payload)?;
                if let Some(u) = meta.usage {
                    self.usage = Some(u.usage());
                }
                if self.stage == Stage::Stopped {
                    self.stage = Stage::Done;
                }
            }
            // `messageStart`, `contentBlockStop` and later additions.
            _ => {}
        }
        Ok(())
    }

    fn start_block(
        &mut self,
        index: u64,
        tool: Option<ToolUseStart<'_>>,
        observer: &dyn StreamObserver,
    ) -> Result<(), ModelError> {
        if self.blocks.len() >= MAX_BLOCKS {
            return Err(too_large("the number of content blocks"));
        }
        let block = match tool {
            Some(tool) => {
                observer.tool_call_delta();
                let text = |v: Option<&RawValue>| -> Result<String, ModelError> {
                    Ok(v.map(raw_text)
                        .transpose()?
                        .unwrap_or_default()
                        .into_owned())
                };
                let (id, name) = (text(tool.tool_use_id)?, text(tool.name)?);
                if id.len() > MAX_TOOL_NAME || name.len() > MAX_TOOL_NAME {
                    return Err(too_large("a tool name or id"));
                }
                self.tool_uses += 1;
                if self.tool_uses > MAX_TOOL_CALLS {
                    return Err(too_large("the number of tool calls"));
                }
                Block::ToolUse {
                    id,
                    name,
                    input: Arguments::default(),
                }
            }
            None => Block::Other,
        };
        self.blocks.push((index, block));
        Ok(())
    }

    fn apply_delta(
        &mut self,
        index: u64,
        delta: DeltaOf<'_>,
        observer: &dyn StreamObserver,
    ) -> Result<(), ModelError> {
        // A text block has no `contentBlockStart`: its first delta opens it.
        let found = self.blocks.iter().rposition(|(i, _)| *i == index);
        let at = match (found, delta.text.is_some()) {
            (Some(at), _) => at,
            (None, true) => {
                if self.blocks.len() >= MAX_BLOCKS {
                    return Err(too_large("the number of content blocks"));
                }
                self.blocks.push((index, Block::Text(String::new())));
                self.blocks.len() - 1
            }
            (None, false) => return Ok(()),
        };
        match (&mut self.blocks[at].1, delta) {
            (Block::Text(text), DeltaOf { text: Some(t), .. }) => {
                let piece = raw_text(t)?;
                append(text, &piece, MAX_TEXT, "the reply text")?;
                observer.text_delta(&piece);
            }
            (
                Block::ToolUse { input, .. },
                DeltaOf {
                    tool_use: Some(ToolUseDelta { input: Some(piece) }),
                    ..
                },
            ) => {
                observer.tool_call_delta();
                input.push_raw(piece, &mut self.kept)?;
            }
            // A block that turned out to be text after a start without a tool.
            (block @ Block::Other, DeltaOf { text: Some(t), .. }) => {
                let piece = raw_text(t)?;
                if piece.len() > MAX_TEXT {
                    return Err(too_large("the reply text"));
                }
                observer.text_delta(&piece);
                *block = Block::Text(piece.into_owned());
            }
            // Reasoning deltas and kinds we do not keep.
            _ => {}
        }
        Ok(())
    }

    /// The whole reply (called once `messageStop` has come).
    pub(crate) fn finish(self) -> Result<Response, ModelError> {
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        for (_, block) in self.blocks {
            match block {
                Block::Text(t) => text.push_str(&t),
                Block::ToolUse { id, name, input } => tool_calls.push(input.into_call(id, name)),
                Block::Other => {}
            }
        }
        let finish = match self.stop_reason.as_deref() {
            Some("guardrail_intervened" | "content_filtered") => {
                let reason = self.stop_reason.unwrap_or_default();
                let text = if text.trim().is_empty() {
                    format!("the reply was stopped (stopReason: {reason})")
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
            usage: self.usage.unwrap_or_default(),
            usage_reported: self.usage.is_some(),
            finish,
            extra: None,
            cost_override: None,
            model: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::NoObserver;

    fn run(events: &[(&str, serde_json::Value)]) -> Result<Response, ModelError> {
        let mut a = Assembly::default();
        for (kind, payload) in events {
            a.apply(kind, &payload.to_string(), &NoObserver)?;
        }
        assert_ne!(a.stage(), Stage::Open);
        a.finish()
    }

    #[test]
    fn text_then_a_tool_call_with_usage() {
        let r = run(&[
            ("messageStart", json!({"role": "assistant"})),
            ("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "Look"}})),
            ("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "ing."}})),
            ("contentBlockStop", json!({"contentBlockIndex": 0})),
            ("contentBlockStart", json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "tooluse_1", "name": "bash"}}})),
            ("contentBlockDelta", json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"command\":"}}})),
            ("contentBlockDelta", json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": " \"ls\"}"}}})),
            ("contentBlockStop", json!({"contentBlockIndex": 1})),
            ("messageStop", json!({"stopReason": "tool_use"})),
            ("metadata", json!({"usage": {"inputTokens": 100, "outputTokens": 20, "totalTokens": 120, "cacheReadInputTokens": 50}, "metrics": {"latencyMs": 12}})),
        ])
        .unwrap();
        assert_eq!(r.text, "Looking.");
        assert_eq!(r.finish, FinishReason::ToolCalls);
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].id, "tooluse_1");
        assert_eq!(r.tool_calls[0].name, "bash");
        assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls"}));
        assert!(r.usage_reported);
        assert_eq!(r.usage.input_tokens, 150);
        assert_eq!(r.usage.cached_input_tokens, 50);
        assert_eq!(r.usage.output_tokens, 20);
    }

    /// Bedrock's `inputTokens` leaves out the cache reads and writes;
    /// `cacheDetails` gives the writes' lifetimes (1h before 5m).
    #[test]
    fn cache_reads_writes_and_their_lifetimes_are_read() {
        let text = (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": "x"}}),
        );
        let stop = ("messageStop", json!({"stopReason": "end_turn"}));
        let r = run(&[
            text.clone(),
            stop.clone(),
            ("metadata", json!({"usage": {"inputTokens": 12, "outputTokens": 20, "totalTokens": 5032,
                "cacheReadInputTokens": 4000, "cacheWriteInputTokens": 1000,
                "cacheDetails": [{"inputTokens": 600, "ttl": "1h"}, {"inputTokens": 400, "ttl": "5m"}]}})),
        ])
        .unwrap();
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 5012,
                output_tokens: 20,
                cached_input_tokens: 4000,
                cache_write_tokens: 1000,
                cache_write_1h_tokens: 600,
            }
        );
        // Counts that lie are read as missing or cut, never failing the reply.
        for usage in [
            json!({"inputTokens": "7", "outputTokens": -1, "cacheReadInputTokens": "x", "cacheDetails": "1h"}),
            json!({"inputTokens": u64::MAX, "cacheReadInputTokens": u64::MAX, "cacheWriteInputTokens": u64::MAX,
                   "cacheDetails": [{"inputTokens": u64::MAX, "ttl": "1h"}, {"inputTokens": u64::MAX, "ttl": "1h"}]}),
            json!(["usage"]),
        ] {
            let r = run(&[
                text.clone(),
                stop.clone(),
                ("metadata", json!({"usage": usage})),
            ])
            .unwrap_or_else(|e| panic!("{usage}: {e:?}"));
            let u = r.usage;
            assert!(
                u.cached_input_tokens + u.cache_write_tokens <= u.input_tokens,
                "{u:?}"
            );
            assert!(u.cache_write_1h_tokens <= u.cache_write_tokens, "{u:?}");
        }
    }

    #[test]
    fn stop_reasons() {
        let stopped = |reason: &str| {
            run(&[
                (
                    "contentBlockDelta",
                    json!({"contentBlockIndex": 0, "delta": {"text": "x"}}),
                ),
                ("messageStop", json!({"stopReason": reason})),
            ])
        };
        assert_eq!(stopped("end_turn").unwrap().finish, FinishReason::Stop);
        assert_eq!(stopped("max_tokens").unwrap().finish, FinishReason::Length);
        assert!(matches!(
            stopped("guardrail_intervened"),
            Err(ModelError::Refusal { .. })
        ));
        let r = stopped("end_turn").unwrap();
        assert!(!r.usage_reported, "no metadata: usage is estimated");
    }

    #[test]
    fn garbled_and_hostile_pieces_are_classified() {
        let r = run(&[
            ("contentBlockStart", json!({"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "t", "name": "bash"}}})),
            ("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"toolUse": {"input": "{\"command\": "}}})),
            ("messageStop", json!({"stopReason": "tool_use"})),
        ])
        .unwrap();
        assert!(r.tool_calls[0].garbled);
        let mut a = Assembly::default();
        assert_eq!(
            a.apply("contentBlockDelta", "not json", &NoObserver),
            Err(ModelError::StreamIncomplete)
        );
        let mut a = Assembly::default();
        let long = "x".repeat(MAX_TOOL_NAME + 1);
        let start =
            json!({"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "t", "name": long}}});
        assert!(matches!(
            a.apply("contentBlockStart", &start.to_string(), &NoObserver),
            Err(ModelError::Malformed { .. })
        ));
        let mut a = Assembly::default();
        for i in 0..MAX_BLOCKS as u64 {
            let d = json!({"contentBlockIndex": i, "delta": {"text": "a"}});
            a.apply("contentBlockDelta", &d.to_string(), &NoObserver)
                .unwrap();
        }
        let d = json!({"contentBlockIndex": 9999, "delta": {"text": "a"}});
        assert!(a
            .apply("contentBlockDelta", &d.to_string(), &NoObserver)
            .is_err());
    }
}
