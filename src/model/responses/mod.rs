//! The OpenAI Responses adapter: one streaming `POST {endpoint}/responses`
//! per call, stateless (`store: false`). `request.rs` translates our
//! conversation to input items, `stream.rs` assembles the `response.*` events.

mod request;
mod stream;

use async_trait::async_trait;

pub use request::request_body;
pub use stream::Assembly;

use super::http::HttpTransport;
use super::{Model, ModelError, Request, Response, StreamObserver};

/// One Responses model behind one endpoint.
#[derive(Debug)]
pub struct ResponsesModel {
    transport: HttpTransport,
    model: String,
    /// The named model's configured `max_output_tokens`.
    max_output_tokens: Option<u32>,
}

impl ResponsesModel {
    /// `transport` must authenticate with a bearer token.
    pub fn new(transport: HttpTransport, model: &str, max_output_tokens: Option<u32>) -> Self {
        ResponsesModel {
            transport,
            model: model.to_string(),
            max_output_tokens,
        }
    }
}

#[async_trait]
impl Model for ResponsesModel {
    async fn complete(
        &self,
        request: &Request<'_>,
        observer: &dyn StreamObserver,
    ) -> Result<Response, ModelError> {
        let body = request_body(&self.model, request, self.max_output_tokens);
        super::wire::complete::<Assembly>(&self.transport, "/responses", &body, observer).await
    }
}
