//! The OpenAI Responses wire form of the one HTTP adapter: one streaming `POST {endpoint}/responses`
//! per call, stateless (`store: false`). `request.rs` translates our
//! conversation to input items, `stream.rs` assembles the `response.*` events.

mod request;
mod stream;

use async_trait::async_trait;

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

/// The Responses wire form: input items, `response.*` events.
#[derive(Debug, Default)]
struct ResponsesForm {
    /// Each message's bytes as Responses input items.
    cache: WireCache,
}

impl HttpModel {
    /// A model behind a Responses endpoint (`transport` must authenticate
    /// with a bearer token).
    pub(crate) fn responses(
        transport: HttpTransport,
        model: &str,
        max_output_tokens: Option<u32>,
    ) -> HttpModel {
        HttpModel::new(
            transport,
            model,
            max_output_tokens,
            ResponsesForm::default(),
        )
    }
}

/// OpenAI Responses as a value (`model/api.rs`).
pub(crate) const API: Api = Api {
    name: WireApi::named("responses"),
    key: Auth::Bearer,
    tool_choice: ToolChoiceForm::Field(super::openai::tool_choice),
    build: |transport, resolved| {
        HttpModel::responses(transport, resolved.spec.model(), resolved.max_output_tokens)
    },
    resolve: None,
    home: None,
};

#[async_trait]
impl WireForm for ResponsesForm {
    async fn exchange(&self, call: Call<'_>) -> Result<Response, ModelError> {
        let body = request_bytes(
            call.model,
            call.request,
            call.output_cap,
            call.wire,
            &self.cache,
        );
        super::wire::complete::<Assembly>(
            call.transport,
            "/responses",
            self.cache.lend(body),
            call.observer,
        )
        .await
    }
}
