//! The model layer: the `Model` trait every wire adapter implements (one
//! request per call), the provider-neutral request and response types, and
//! the layers above the adapters.
//!
//! Layers (outermost first): `chain::ChainModel` (not itself a `Model`: it
//! owns the members and decides which one a step goes to) →
//! `retry::request_with_retries` (one retry loop per member and step) →
//! a wire adapter (`script::ScriptModel`, the HTTP adapters), built from a
//! `spec::ResolvedModel` by `registry::build_member`. The agent loop only
//! sees `ChainModel::complete`.

pub mod adapter;
pub(crate) mod anthropic;
pub(crate) mod api;
pub(crate) mod apis;
pub(crate) mod attempt;
pub(crate) mod azure;
pub(crate) mod bedrock;
pub(crate) mod bounds;
pub(crate) mod chain;
pub(crate) mod client;
pub(crate) mod credentials;
pub(crate) mod error;
pub(crate) mod eventstream;
pub(crate) mod foundry;
pub(crate) mod gate;
pub(crate) mod gemini;
pub(crate) mod hedge;
pub mod http;
pub(crate) mod member;
pub(crate) mod ndjson;
pub mod ollama;
pub mod openai;
pub(crate) mod price;
pub(crate) mod providers;
pub(crate) mod ratelimit;
pub(crate) use crate::reason;
pub(crate) mod registry;
pub(crate) mod reply_cap;
pub(crate) mod responses;
pub(crate) mod retry;
pub(crate) mod script;
pub(crate) mod spec;
pub mod sse;
pub(crate) mod timed;
pub(crate) mod unreachable;
pub(crate) mod usage_wire;
pub(crate) mod vertex;
pub(crate) mod watch;
pub(crate) mod wire;
pub(crate) mod wire_cache;
#[cfg(test)]
pub(crate) mod wire_fixtures;

#[cfg(test)]
pub(crate) mod fuzz_tests;
#[cfg(test)]
mod request_bench;
#[cfg(test)]
mod request_bytes_tests;

use async_trait::async_trait;
use serde_json::Value;

pub use crate::conversation::{FinishReason, Message, Role, ToolCall, ToolSpec, Usage};
pub use crate::prompt_cache::PromptCache;
pub(crate) use error::ErrorClass;
pub use error::ModelError;
pub(crate) use wire::{MAX_CALL_ARGUMENTS, MAX_REPLY_ARGUMENTS};

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
    /// How this member asks for the prompt cache (SPEC 25; set by the chain).
    pub prompt_cache: PromptCache,
    /// The run lineage's `prompt_cache_key` for the APIs that take one;
    /// `None` with `prompt_cache: off` (set by the chain).
    pub cache_key: Option<&'a str>,
}

/// One step's request as the loop makes it, to whichever chain member
/// answers: a `Request` but for the spec, which the chain sets per member
/// (`ChainModel::complete`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Prompt<'a> {
    pub system: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a [ToolSpec],
    pub output_schema: Option<&'a Value>,
    /// Reply budget; the chain clears it for members of another provider.
    pub max_output_tokens: Option<u32>,
    /// `low` / `medium` / `high`; the chain clears it for members of another provider.
    pub reasoning_effort: Option<&'a str>,
    /// The request's estimated input tokens (the server's count for the
    /// previous request plus what was added since): what the gate sizes
    /// deadlines and rate-limit reservations with.
    pub estimated_input_tokens: u64,
}

impl<'a> Request<'a> {
    /// A message's provider-specific state, but only when the model this
    /// request goes to produced it: foreign state never crosses models.
    pub(crate) fn extra_of(&self, message: &'a Message) -> Option<&'a Value> {
        match (&message.extra, &message.model) {
            (Some(extra), Some(model)) if model == self.spec => Some(extra),
            _ => None,
        }
    }

    /// The reply budget for a model whose config caps replies at `cap`:
    /// the smaller of the two, or whichever is set.
    pub(crate) fn reply_budget(&self, cap: Option<u32>) -> Option<u32> {
        match (self.max_output_tokens, cap) {
            (Some(asked), Some(cap)) => Some(asked.min(cap)),
            (asked, cap) => asked.or(cap),
        }
    }
}

/// A whole, successful reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    /// Whether the provider reported `usage` at all (llama-cpp-python's
    /// streams do not); when false, `usage` is zero or partial and the run
    /// estimates the tokens instead.
    pub usage_reported: bool,
    pub finish: FinishReason,
    /// Provider-specific state to keep on the assistant message.
    pub extra: Option<Value>,
    /// A cost the adapter knows better than the price table (scripted replies).
    pub cost_override: Option<f64>,
    /// The model name the server says answered (`gen_ai.response.model`),
    /// bounded; `None` when it named none.
    pub model: Option<String>,
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
