//! The OpenAI Chat Completions wire form (providers `openai`, `openrouter`
//! and named providers with `api: openai`) of the one HTTP adapter
//! (`model/adapter.rs`): one streaming POST to `{endpoint}/chat/completions`
//! per call, read as server-sent events (or as one JSON body from a server
//! that does not stream).

mod request;
mod stream;

use async_trait::async_trait;

use super::adapter::{Call, HttpModel, WireForm};
use super::http::HttpTransport;
use super::wire_cache::WireCache;
use super::{ModelError, Response};

pub use crate::model::spec::Dialect;
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
