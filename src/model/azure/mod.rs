//! The Azure OpenAI wire form of the one HTTP adapter (SPEC 22): Chat Completions on a deployment,
//! one streaming POST per call to `{resource}/openai/v1/chat/completions`
//! (the deployment named as `model`), or with an `api-version` to the
//! classic `{resource}/openai/deployments/{deployment}/chat/completions?api-version=…`.
//! The request is the OpenAI adapter's own wire form (`openai::request_bytes`),
//! its `prompt_cache_key` on `/openai/v1` only;
//! `stream.rs` reads the reply through the OpenAI adapter's assembly, adding
//! what Azure adds (its content filter), and `errors.rs` reads Azure's error
//! responses (`retry-after-ms`, content filtering). The transport's
//! credentials (an `api-key` header or a Microsoft Entra ID bearer token)
//! authorize each request. Deployment names are the user's own, so a reply
//! is priced by the model it says answered, when the table knows it.

mod errors;
mod stream;

use async_trait::async_trait;

use super::adapter::{Call, HttpModel, WireForm};
use super::api::{Api, ToolChoiceForm};
use super::http::{Auth, HttpTransport};
use super::openai::{request_bytes, Dialect};
use super::price::builtin_price;
use super::spec::{ResolvedModel, WireApi};
use super::wire_cache::WireCache;
use super::{ModelError, Response};

/// The Azure OpenAI wire form: the OpenAI adapter's body for a deployment,
/// its reply read through the OpenAI assembly with Azure's additions.
#[derive(Debug)]
struct AzureForm {
    /// `/chat/completions`, with `?api-version=…` on the classic URL.
    path: String,
    cache: WireCache,
    /// The classic URL (an `api-version`), whose older versions refuse a
    /// `prompt_cache_key`: Microsoft documents it on `/openai/v1`.
    classic: bool,
    /// Whether a reply is priced by the model it names (no price was
    /// configured for the deployment).
    price_by_reply: bool,
}

impl HttpModel {
    /// An Azure OpenAI deployment: `transport`'s endpoint is
    /// `{resource}/openai/v1`, or with `api_version`
    /// `{resource}/openai/deployments/{deployment}`; `price_by_reply`: a
    /// reply is priced by the model it names (`false` when the config prices
    /// the deployment itself).
    pub(crate) fn azure(
        transport: HttpTransport,
        deployment: &str,
        api_version: Option<&str>,
        output_cap: Option<u32>,
        price_by_reply: bool,
    ) -> HttpModel {
        let path = match api_version {
            Some(version) => format!("/chat/completions?api-version={version}"),
            None => "/chat/completions".to_string(),
        };
        let form = AzureForm {
            path,
            classic: api_version.is_some(),
            cache: WireCache::default(),
            price_by_reply,
        };
        HttpModel::new(transport, deployment, output_cap, form)
    }
}

/// Chat Completions on Azure OpenAI as a value (`model/api.rs`); its
/// settings are found in `settings/azure.rs`.
pub(crate) const API: Api = Api {
    name: WireApi::named("azure"),
    key: Auth::Bearer,
    tool_choice: ToolChoiceForm::Field(super::openai::tool_choice),
    build,
    resolve: None,
    home: Some("azure"),
};

/// A deployment's model. Deployments are the user's names: a reply is
/// priced by the model it names unless the config prices the deployment
/// itself.
fn build(transport: HttpTransport, resolved: &ResolvedModel) -> HttpModel {
    let deployment = resolved.spec.model();
    let from_table = resolved.pricing == builtin_price("azure", deployment);
    HttpModel::azure(
        transport,
        deployment,
        resolved.api_version.as_deref(),
        resolved.max_output_tokens,
        from_table,
    )
}

impl AzureForm {
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
impl WireForm for AzureForm {
    async fn exchange(&self, call: Call<'_>) -> Result<Response, ModelError> {
        let budget = call.request.reply_budget(call.output_cap);
        let request = super::Request {
            cache_key: call.request.cache_key.filter(|_| !self.classic),
            ..*call.request
        };
        let body = request_bytes(
            call.model,
            Dialect::OpenAi,
            budget,
            &request,
            call.wire,
            &self.cache,
        );
        let (response, sent) = call
            .transport
            .post_with(&self.path, self.cache.lend(body), errors::http_error)
            .await?;
        let mut response = super::wire::assemble::<stream::Assembly>(
            call.transport,
            response,
            sent,
            call.observer,
        )
        .await?;
        self.price(&mut response);
        Ok(response)
    }
}
