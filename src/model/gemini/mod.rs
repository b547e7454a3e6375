//! The Gemini adapter: one `POST {base}/models/{model}:streamGenerateContent?alt=sse`
//! per call on the Gemini API, or the same body at a Vertex AI publisher
//! model's path. `request.rs` translates our conversation to the wire form,
//! `stream.rs` assembles the SSE chunks into a `Response`, `errors.rs` reads
//! Google's error bodies.

mod errors;
mod request;
mod stream;

use async_trait::async_trait;

pub(crate) use errors::error_from_google_body;
#[cfg(test)]
pub(crate) use request::request_body;
pub(crate) use request::request_bytes;
pub(crate) use stream::Assembly;

use super::http::HttpTransport;
use super::spec::WireOptions;
use super::wire_cache::WireCache;
use super::{Model, ModelError, Request, Response, StreamObserver};

/// One Gemini model behind one endpoint.
#[derive(Debug)]
pub(crate) struct GeminiModel {
    transport: HttpTransport,
    model: String,
    /// The model's path without its method: `/models/{model}` on the Gemini
    /// API, `/v1/projects/…/publishers/google/models/{model}` on Vertex.
    model_path: String,
    max_output_tokens: Option<u32>,
    cache: WireCache<request::Parts>,
    wire: WireOptions,
}

impl GeminiModel {
    /// `transport` must authenticate (an `x-goog-api-key` or a bearer
    /// token); its error bodies are read as Google's here.
    pub(crate) fn new(
        transport: HttpTransport,
        model: &str,
        model_path: String,
        max_output_tokens: Option<u32>,
    ) -> Self {
        GeminiModel {
            transport: transport.with_error_reader(error_from_google_body),
            model: model.to_string(),
            model_path,
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

    /// The Gemini API's path of `model`.
    pub(crate) fn api_path(model: &str) -> String {
        format!("/models/{model}")
    }
}

#[async_trait]
impl Model for GeminiModel {
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
        let path = if self.wire.stream {
            format!("{}:streamGenerateContent?alt=sse", self.model_path)
        } else {
            format!("{}:generateContent", self.model_path)
        };
        super::wire::complete::<Assembly>(&self.transport, &path, self.cache.lend(body), observer)
            .await
    }
}
