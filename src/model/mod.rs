//! The model abstraction: one `Model` trait that every wire adapter, the retry
//! loop's callers and the fallback chain speak, plus the provider-neutral
//! request and response types.
//!
//! Layers (outermost first): `chain::ChainModel` (switching between members) →
//! `retry::request_with_retries` (one retry loop per member) → a wire adapter
//! (`script::ScriptModel`, the HTTP adapters). The agent loop only sees
//! `ChainModel::complete`.

pub mod chain;
pub mod error;
pub mod http;
pub mod ollama;
pub mod openai;
pub mod price;
pub mod registry;
pub mod retry;
pub mod script;
pub mod spec;
pub mod sse;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use error::{ErrorClass, ModelError};

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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub garbled: bool,
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

/// Everything one model request carries, borrowed from the agent's history
/// so re-sending it to another chain member copies nothing. Each adapter
/// translates it to its wire API, sending `Message::extra` back only for
/// messages that `spec` produced (see `Request::extra_of`).
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub system: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a [ToolSpec],
    pub output_schema: Option<&'a Value>,
    /// Reply budget; the chain clears it for members of another provider.
    pub max_output_tokens: Option<u32>,
    /// `low` / `medium` / `high`; the chain clears it for members of another provider.
    pub reasoning_effort: Option<&'a str>,
    /// The spec of the model this request is for (set by the chain).
    pub spec: &'a str,
}

impl<'a> Request<'a> {
    /// A message's provider-specific state, but only when the model this
    /// request goes to produced it: foreign state never crosses models.
    pub fn extra_of(&self, message: &'a Message) -> Option<&'a Value> {
        match (&message.extra, &message.model) {
            (Some(extra), Some(model)) if model == self.spec => Some(extra),
            _ => None,
        }
    }

    /// The reply budget for a model whose config caps replies at `cap`:
    /// the smaller of the two, or whichever is set.
    pub fn reply_budget(&self, cap: Option<u32>) -> Option<u32> {
        match (self.max_output_tokens, cap) {
            (Some(asked), Some(cap)) => Some(asked.min(cap)),
            (asked, cap) => asked.or(cap),
        }
    }
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
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::Length => "length",
        }
    }
}

/// Token counts of one response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cached_input_tokens: u64,
}

/// A whole, successful reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub finish: FinishReason,
    /// Provider-specific state to keep on the assistant message.
    pub extra: Option<Value>,
    /// A cost the adapter knows better than the price table (scripted replies).
    pub cost_override: Option<f64>,
}

/// Receives a reply while it streams. Text arrives as deltas; tool calls
/// arrive whole in the final `Response`, but adapters report that argument
/// deltas were seen so a failed attempt can be known to have produced output.
pub trait StreamObserver: Send + Sync {
    fn text_delta(&self, _text: &str) {}
    fn tool_call_delta(&self) {}
}

/// An observer that ignores everything.
pub struct NoObserver;
impl StreamObserver for NoObserver {}

/// One model behind one wire API. Implementations make exactly one request
/// per call (no retries: those belong to `retry.rs`) and fail with a
/// classified `ModelError`.
#[async_trait]
pub trait Model: Send + Sync {
    async fn complete(
        &self,
        request: &Request<'_>,
        observer: &dyn StreamObserver,
    ) -> Result<Response, ModelError>;
}
