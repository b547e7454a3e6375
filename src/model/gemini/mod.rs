//! The Gemini wire form of the one HTTP adapter: one `POST {base}/models/{model}:streamGenerateContent?alt=sse`
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

use super::adapter::{Call, HttpModel, WireForm};
use super::api::{Api, ToolChoiceForm};
use super::http::{Auth, HttpTransport};
use super::spec::WireApi;
use super::wire_cache::WireCache;
use super::{ModelError, Response};

/// The Gemini wire form, on the Gemini API or on Vertex AI.
#[derive(Debug)]
struct GeminiForm {
    /// The model's path without its method: `/models/{model}` on the Gemini
    /// API, `/v1/projects/…/publishers/google/models/{model}` on Vertex.
    model_path: String,
    cache: WireCache<request::Parts>,
}

impl HttpModel {
    /// A Gemini model at `model_path` (`transport` must authenticate: an
    /// `x-goog-api-key` or a bearer token); its error bodies are read as
    /// Google's.
    pub(crate) fn gemini(
        transport: HttpTransport,
        model: &str,
        model_path: String,
        max_output_tokens: Option<u32>,
    ) -> HttpModel {
        let form = GeminiForm {
            model_path,
            cache: WireCache::default(),
        };
        HttpModel::new(
            transport.with_error_reader(error_from_google_body),
            model,
            max_output_tokens,
            form,
        )
    }
}

/// The Gemini API as a value (`model/api.rs`): its `toolConfig` is
/// written by its own request builder.
pub(crate) const API: Api = Api {
    name: WireApi::named("gemini"),
    key: Auth::XGoogApiKey,
    tool_choice: ToolChoiceForm::Own,
    build: |transport, resolved| {
        let model = resolved.spec.model();
        HttpModel::gemini(
            transport,
            model,
            api_path(model),
            resolved.max_output_tokens,
        )
    },
    resolve: None,
    home: Some("gemini"),
};

/// The Gemini API's path of `model`.
pub(crate) fn api_path(model: &str) -> String {
    format!("/models/{model}")
}

#[async_trait]
impl WireForm for GeminiForm {
    async fn exchange(&self, call: Call<'_>) -> Result<Response, ModelError> {
        let body = request_bytes(
            call.model,
            call.request,
            call.output_cap,
            call.wire,
            &self.cache,
        );
        let path = if call.wire.stream {
            format!("{}:streamGenerateContent?alt=sse", self.model_path)
        } else {
            format!("{}:generateContent", self.model_path)
        };
        super::wire::complete::<Assembly>(
            call.transport,
            &path,
            self.cache.lend(body),
            call.observer,
        )
        .await
    }
}
