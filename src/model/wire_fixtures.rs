//! What the wire forms' request tests build conversations from: a brief
//! request around messages and tools, and a `bash` call (tests only).

use serde_json::Value;

use super::{Message, Request, ToolCall, ToolSpec};

/// A request with the system prompt "be brief" and nothing else set.
pub(crate) fn request<'a>(
    messages: &'a [Message],
    tools: &'a [ToolSpec],
    spec: &'a str,
) -> Request<'a> {
    Request {
        system: "be brief",
        messages,
        tools,
        output_schema: None,
        max_output_tokens: None,
        reasoning_effort: None,
        spec,
        prompt_cache: super::PromptCache::On,
        cache_key: None,
    }
}

/// A well-formed `bash` call with id `id`.
pub(crate) fn call(id: &str, args: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "bash".into(),
        arguments: args,
        garbled: false,
        oversized: None,
    }
}
