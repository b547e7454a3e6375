//! The provider-neutral conversation: messages, tool calls, tool specs and
//! token usage. A leaf module: it imports nothing of ours, so the agent,
//! the tools, the trajectory and every adapter can share it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message of the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// A tool call requested by the model. Arguments arrive whole (adapters
/// assemble streamed argument deltas); `garbled` marks arguments that were
/// not valid JSON, in which case `arguments` holds the raw text as a string.
/// A garbled call is never run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub garbled: bool,
    /// Set when the arguments were larger than a tool call may send (the
    /// adapters' bound): their size in bytes. They were dropped as they
    /// arrived, so `arguments` is `{}`; such a call is also `garbled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oversized: Option<u64>,
}

/// One message of the provider-neutral conversation. This is also the shape
/// stored in the trajectory's `messages`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Tool name, on tool results (some wire APIs want it back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default)]
    pub step: u32,
    /// The model spec that produced an assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Provider-specific state (thinking blocks, encrypted reasoning), sent
    /// back only to the model spec that produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

impl Message {
    /// A plain message with no tool calls and no provider state.
    pub fn new(role: Role, content: impl Into<String>, step: u32) -> Self {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            step,
            model: None,
            extra: None,
        }
    }

    /// A tool result answering `call`.
    pub fn tool_result(call: &ToolCall, content: impl Into<String>, step: u32) -> Self {
        Message {
            tool_call_id: Some(call.id.clone()),
            name: Some(call.name.clone()),
            ..Message::new(Role::Tool, content, step)
        }
    }
}

/// A tool offered to the model: name, description and JSON Schema of its
/// arguments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// Why a reply ended, normalised across wire APIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    ToolCalls,
    Length,
}

impl FinishReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::Length => "length",
        }
    }
}

/// Token counts of one response. `input_tokens` is the whole prompt: the
/// tokens read from a prompt cache (`cached_input_tokens`) and written to
/// one (`cache_write_tokens`) are parts of it, and the one-hour writes
/// (`cache_write_1h_tokens`) a part of the writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cached_input_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
    #[serde(default)]
    pub cache_write_1h_tokens: u64,
}

/// The most tokens one response is taken to count in any field: a server
/// that says more is lying, and its figure is cut to this (no context
/// window comes near it), so that sums and prices stay finite.
pub(crate) const MAX_RESPONSE_TOKENS: u64 = 1 << 32;

impl Usage {
    /// The counts made consistent, whatever a server said: each at most
    /// `MAX_RESPONSE_TOKENS`, the cache reads and writes together at most
    /// the input (reads first), the one-hour writes at most the writes.
    pub fn bounded(self) -> Usage {
        let input = self.input_tokens.min(MAX_RESPONSE_TOKENS);
        let cached = self.cached_input_tokens.min(input);
        let write = self.cache_write_tokens.min(input - cached);
        Usage {
            input_tokens: input,
            output_tokens: self.output_tokens.min(MAX_RESPONSE_TOKENS),
            cached_input_tokens: cached,
            cache_write_tokens: write,
            cache_write_1h_tokens: self.cache_write_1h_tokens.min(write),
        }
    }
}
