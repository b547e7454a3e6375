//! The Azure OpenAI adapter (SPEC 22): Chat Completions on a deployment,
//! one streaming POST per call to `{resource}/openai/v1/chat/completions`
//! (the deployment named as `model`), or with an `api-version` to the
//! classic `{resource}/openai/deployments/{deployment}/chat/completions?api-version=…`.
//! The request is the OpenAI adapter's own wire form (`openai::request_bytes`);
//! `stream.rs` reads the reply through the OpenAI adapter's assembly, adding
//! what Azure adds (its content filter), and `errors.rs` reads Azure's error
//! responses (`retry-after-ms`, content filtering). The transport's
//! credentials (an `api-key` header or a Microsoft Entra ID bearer token)
//! authorize each request. Deployment names are the user's own, so a reply
//! is priced by the model it says answered, when the table knows it.

mod errors;
mod stream;

use async_trait::async_trait;

use super::http::HttpTransport;
use super::openai::{request_bytes, Dialect};
use super::price::builtin_price;
use super::spec::WireOptions;
use super::wire_cache::WireCache;
use super::{Model, ModelError, Request, Response, StreamObserver};

/// One Azure OpenAI deployment behind one resource.
#[derive(Debug)]
pub(crate) struct AzureModel {
    transport: HttpTransport,
    deployment: String,
    /// `/chat/completions`, with `?api-version=…` on the classic URL.
    path: String,
    /// The model's own reply limit from config (`max_output_tokens`).
    output_cap: Option<u32>,
    cache: WireCache,
    wire: WireOptions,
    /// Whether a reply is priced by the model it names (no price was
    /// configured for the deployment).
    price_by_reply: bool,
}

impl AzureModel {
    /// `transport`'s endpoint is `{resource}/openai/v1`, or with
    /// `api_version` `{resource}/openai/deployments/{deployment}`.
    pub(crate) fn new(
        transport: HttpTransport,
        deployment: &str,
        api_version: Option<&str>,
        output_cap: Option<u32>,
    ) -> Self {
        let path = match api_version {
            Some(version) => format!("/chat/completions?api-version={version}"),
            None => "/chat/completions".to_string(),
        };
        AzureModel {
            transport,
            deployment: deployment.to_string(),
            path,
            output_cap,
            cache: WireCache::default(),
            wire: WireOptions::default(),
            price_by_reply: true,
        }
    }

    /// Sends requests as the provider's config asks (`stream`, `tool_choice`).
    pub(crate) fn with_wire(mut self, wire: WireOptions) -> Self {
        self.wire = wire;
        self
    }

    /// Whether replies are priced by the model they name (`false` when the
    /// config prices the deployment itself).
    pub(crate) fn priced_by_reply(mut self, yes: bool) -> Self {
        self.price_by_reply = yes;
        self
    }

    /// The reply's cost at the price of the model it says answered
    /// (`gpt-4o-2024-11-20` behind a deployment named `prod-chat`), when
    /// the table knows that model and the server reported the usage.
    fn price(&self, response: &mut Response) {
        let usage = response.usage;
        if !self.price_by_reply
            || !response.usage_reported
            || (usage.input_tokens == 0 && usage.output_tokens == 0)
        {
            return;
        }
        if let Some(pricing) = response
            .model
            .as_deref()
            .and_then(|model| builtin_price("azure", model))
        {
            response.cost_override = Some(pricing.cost(&usage));
        }
    }
}

#[async_trait]
impl Model for AzureModel {
    async fn complete(
        &self,
        request: &Request<'_>,
        observer: &dyn StreamObserver,
    ) -> Result<Response, ModelError> {
        let budget = request.reply_budget(self.output_cap);
        let body = request_bytes(
            &self.deployment,
            Dialect::OpenAi,
            budget,
            request,
            self.wire,
            &self.cache,
        );
        let (response, sent) = self
            .transport
            .post_with(&self.path, self.cache.lend(body), errors::http_error)
            .await?;
        let mut response =
            super::wire::assemble::<stream::Assembly>(&self.transport, response, sent, observer)
                .await?;
        self.price(&mut response);
        Ok(response)
    }
}
