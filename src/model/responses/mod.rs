//! The OpenAI Responses adapter: one streaming `POST {endpoint}/responses`
//! per call, stateless (`store: false`). `request.rs` translates our
//! conversation to input items, `stream.rs` assembles the `response.*` events.

mod request;
mod stream;

use async_trait::async_trait;

#[cfg(test)]
pub(crate) use request::request_body;
pub(crate) use request::request_bytes;
pub(crate) use stream::Assembly;

use super::http::HttpTransport;
use super::spec::WireOptions;
use super::wire_cache::WireCache;
use super::{Model, ModelError, Request, Response, StreamObserver};

/// One Responses model behind one endpoint.
#[derive(Debug)]
pub(crate) struct ResponsesModel {
    transport: HttpTransport,
    model: String,
    /// The named model's configured `max_output_tokens`.
    max_output_tokens: Option<u32>,
    /// Each message's bytes as Responses input items.
    cache: WireCache,
    /// The provider's `stream` and `tool_choice` options.
    wire: WireOptions,
}

impl ResponsesModel {
    /// `transport` must authenticate with a bearer token.
    pub(crate) fn new(
        transport: HttpTransport,
        model: &str,
        max_output_tokens: Option<u32>,
    ) -> Self {
        ResponsesModel {
            transport,
            model: model.to_string(),
            max_output_tokens,
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
impl Model for ResponsesModel {
    async fn complete(
        &self,
        request: &Request<'_>,
        observer: &dyn StreamObserver,
    ) -> Result<Response, ModelError> {
        let body = request_bytes(
            &self.model,
            request,
            self.max_output_tokens,
            self.wire,
            &self.cache,
        );
        super::wire::complete::<Assembly>(
            &self.transport,
            "/responses",
            self.cache.lend(body),
            observer,
        )
        .await
    }
}
