//! The OpenAI Responses adapter: one streaming `POST {endpoint}/responses`
//! per call, stateless (`store: false`). `request.rs` translates our
//! conversation to input items, `stream.rs` assembles the `response.*` events.

mod request;
mod stream;

use async_trait::async_trait;

pub use request::request_body;
pub use stream::Assembly;

use super::http::HttpTransport;
use super::spec::{WireApi, WireOptions};
use super::{Model, ModelError, Request, Response, StreamObserver};

/// One Responses model behind one endpoint.
#[derive(Debug)]
pub struct ResponsesModel {
    transport: HttpTransport,
    model: String,
    /// The named model's configured `max_output_tokens`.
    max_output_tokens: Option<u32>,
    /// The provider's `stream` and `tool_choice` options.
    wire: WireOptions,
}

impl ResponsesModel {
    /// `transport` must authenticate with a bearer token.
    pub fn new(transport: HttpTransport, model: &str, max_output_tokens: Option<u32>) -> Self {
        ResponsesModel {
            transport,
            model: model.to_string(),
            max_output_tokens,
            wire: WireOptions::default(),
        }
    }

    /// Sends requests as the provider's config asks (`stream`, `tool_choice`).
    pub fn with_wire(mut self, wire: WireOptions) -> Self {
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
        let mut body = request_body(&self.model, request, self.max_output_tokens);
        super::wire::apply_options(&mut body, WireApi::Responses, self.wire);
        super::wire::complete::<Assembly>(&self.transport, "/responses", &body, observer).await
    }
}
