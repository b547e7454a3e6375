//! The Anthropic Messages adapter: one streaming `POST {endpoint}/v1/messages`
//! per call. `request.rs` translates our conversation to the wire form,
//! `stream.rs` assembles the SSE events into a `Response`.

mod request;
mod stream;

use async_trait::async_trait;

pub use request::{request_body, thinking_budget, DEFAULT_MAX_TOKENS};
pub(crate) use stream::tool_call;
pub use stream::{Assembly, Progress};

use super::http::{HttpTransport, SseReader};
use super::{Model, ModelError, Request, Response, StreamObserver};

/// The `anthropic-version` header every request carries.
pub const API_VERSION: &str = "2023-06-01";

/// One Anthropic model behind one endpoint.
#[derive(Debug)]
pub struct AnthropicModel {
    transport: HttpTransport,
    model: String,
    /// The named model's configured `max_output_tokens`, used when the
    /// request carries none.
    max_output_tokens: Option<u32>,
}

impl AnthropicModel {
    /// `transport` must authenticate with `x-api-key`; the version header is added here.
    pub fn new(transport: HttpTransport, model: &str, max_output_tokens: Option<u32>) -> Self {
        AnthropicModel {
            transport: transport.with_header("anthropic-version", API_VERSION),
            model: model.to_string(),
            max_output_tokens,
        }
    }
}

#[async_trait]
impl Model for AnthropicModel {
    async fn complete(
        &self,
        request: &Request<'_>,
        observer: &dyn StreamObserver,
    ) -> Result<Response, ModelError> {
        let body = request_body(&self.model, request, self.max_output_tokens);
        let (response, sent) = self.transport.post("/v1/messages", &body).await?;
        let mut events = SseReader::new(response, sent, self.transport.timeouts);
        let mut assembly = Assembly::default();
        while let Some(event) = events.next().await? {
            if assembly.apply(event.data.as_bytes(), observer)? == Progress::Finished {
                return Ok(assembly.finish());
            }
        }
        Err(ModelError::StreamIncomplete)
    }
}
