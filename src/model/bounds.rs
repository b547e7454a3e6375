//! The bounds on what a server controls: how many tool calls, how long a
//! name, how large a reply's text, an event, an error body or a message may be.
//! The transport (`http.rs`, `sse.rs`) and the adapters (through `wire.rs`)
//! check them; this file imports only the error type they fail with.

use super::error::ModelError;

/// At most this many tool calls in one reply; a higher index or count fails
/// the attempt instead of allocating what a server asks for.
pub(crate) const MAX_TOOL_CALLS: usize = 128;
/// The longest tool name kept (OpenAI allows 64 characters; MCP names are
/// longer but nowhere near this).
pub(crate) const MAX_TOOL_NAME: usize = 1024;
/// The largest text of a reply (and of its refusal, a thinking block, a
/// signature). A tool call's arguments have their own, smaller bound
/// (`wire::MAX_CALL_ARGUMENTS`), past which the call is refused, not the reply.
pub(crate) const MAX_TEXT: usize = 64 << 20;
/// The largest SSE event, NDJSON line or one-JSON-body reply.
pub(crate) const MAX_EVENT: usize = 64 << 20;
/// Error bodies are read up to this size; the rest is dropped.
pub(crate) const MAX_ERROR_BODY: usize = 64 << 10;
/// The vendor's short message kept from an error.
pub(crate) const MAX_MESSAGE_CHARS: usize = 300;

/// A `Malformed` error naming the bound a reply broke.
pub(crate) fn too_large(what: &str) -> ModelError {
    ModelError::Malformed {
        message: format!("{what} exceeds its limit"),
    }
}
