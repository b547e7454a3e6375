//! The OpenAI Chat Completions wire form (providers `openai`, `openrouter`
//! and named providers with `api: openai`) of the one HTTP adapter
//! (`model/adapter.rs`): one streaming POST to `{endpoint}/chat/completions`
//! per call, read as server-sent events (or as one JSON body from a server
//! that does not stream).

mod request;
mod stream;

use async_trait::async_trait;

use serde_json::Value;

use super::adapter::{Call, HttpModel, WireForm};
use super::api::{Api, ToolChoiceForm};
use super::http::{Auth, HttpTransport};
use super::spec::{builtin, ResolvedModel, ToolChoice, WireApi};
use super::wire_cache::WireCache;
use super::{ModelError, Response};

pub use crate::model::providers::Dialect;
#[cfg(test)]
pub(crate) use request::request_body;
pub(crate) use request::request_bytes;
pub use stream::ChunkAssembler;

/// The Chat Completions wire form: the body in the provider's dialect,
/// SSE chunks assembled by `ChunkAssembler`.
#[derive(Debug)]
struct ChatForm {
    dialect: Dialect,
    /// Each message's bytes in Chat Completions form.
    cache: WireCache,
}

impl HttpModel {
    /// A model behind a Chat Completions endpoint (`transport` authenticates
    /// with a bearer token, or none).
    pub fn chat_completions(
        transport: HttpTransport,
        model: &str,
        dialect: Dialect,
        output_cap: Option<u32>,
    ) -> HttpModel {
        let form = ChatForm {
            dialect,
            cache: WireCache::default(),
        };
        HttpModel::new(transport, model, output_cap, form)
    }
}

/// Chat Completions as a value (`model/api.rs`).
pub(crate) const API: Api = Api {
    name: WireApi::named("openai"),
    key: Auth::Bearer,
    tool_choice: ToolChoiceForm::Field(tool_choice),
    build,
    resolve: None,
    home: None,
};

/// `tool_choice` in the OpenAI APIs' form.
pub(crate) fn tool_choice(choice: ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => "auto".into(),
        ToolChoice::Required => "required".into(),
    }
}

/// A member's model: its dialect is its built-in provider's.
fn build(transport: HttpTransport, resolved: &ResolvedModel) -> HttpModel {
    let spec = &resolved.spec;
    let dialect = builtin(spec.provider()).map_or(Dialect::Compatible, |b| b.dialect);
    HttpModel::chat_completions(transport, spec.model(), dialect, resolved.max_output_tokens)
}

#[async_trait]
impl WireForm for ChatForm {
    async fn exchange(&self, call: Call<'_>) -> Result<Response, ModelError> {
        let budget = call.request.reply_budget(call.output_cap);
        let body = request_bytes(
            call.model,
            self.dialect,
            budget,
            call.request,
            call.wire,
            &self.cache,
        );
        super::wire::complete::<ChunkAssembler>(
            call.transport,
            "/chat/completions",
            self.cache.lend(body),
            call.observer,
        )
        .await
    }
}
