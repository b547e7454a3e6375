//! The OpenAI Chat Completions adapter (providers `openai`, `openrouter` and
//! named providers with `api: openai`): one streaming POST to
//! `{endpoint}/chat/completions` per call, read as server-sent events (or as
//! one JSON body from a server that does not stream).

mod request;
mod stream;

use async_trait::async_trait;

use super::http::HttpTransport;
use super::spec::WireOptions;
use super::wire_cache::WireCache;
use super::{Model, ModelError, Request, Response, StreamObserver};

pub use crate::model::spec::Dialect;
#[cfg(test)]
pub(crate) use request::request_body;
pub(crate) use request::request_bytes;
pub use stream::ChunkAssembler;

/// One model behind a Chat Completions endpoint.
#[derive(Debug)]
pub struct ChatCompletions {
    transport: HttpTransport,
    model: String,
    dialect: Dialect,
    /// The model's own reply limit from config (`max_output_tokens`).
    output_cap: Option<u32>,
    /// Each message's bytes in Chat Completions form.
    cache: WireCache,
    /// The provider's `stream` and `tool_choice` options.
    wire: WireOptions,
}

impl ChatCompletions {
    pub fn new(
        transport: HttpTransport,
        model: &str,
        dialect: Dialect,
        output_cap: Option<u32>,
    ) -> Self {
        ChatCompletions {
            transport,
            model: model.to_string(),
            dialect,
            output_cap,
            cache: WireCache::default(),
            wire: WireOptions::default(),
        }
    }

    /// Sends requests as the provider's config asks (`stream`, `tool_choice`).
    pub(crate) fn with_wire(mut self, wire: WireOptions) -> Self {
        self.wire = wire;
        self
    }
}

#[async_trait]
impl Model for ChatCompletions {
    async fn complete(
        &self,
        request: &Request<'_>,
        observer: &dyn StreamObserver,
    ) -> Result<Response, ModelError> {
        let budget = request.reply_budget(self.output_cap);
        let body = request_bytes(
            &self.model,
            self.dialect,
            budget,
            request,
            self.wire,
            &self.cache,
        );
        super::wire::complete::<ChunkAssembler>(
            &self.transport,
            "/chat/completions",
            self.cache.lend(body),
            observer,
        )
        .await
    }
}
