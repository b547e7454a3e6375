//! Builds chain members from resolved models: the adapter for the wire API,
//! with the transport's key, headers and stream timeouts.

use std::path::Path;

use super::anthropic::AnthropicModel;
use super::chain::Member;
use super::http::{Auth, HttpTransport};
use super::ollama::OllamaChat;
use super::openai::{ChatCompletions, Dialect};
use super::responses::ResponsesModel;
use super::script::ScriptModel;
use super::spec::{ResolvedModel, WireApi};
use super::Model;
use crate::policy::StreamTimeouts;
use crate::setup::SetupError;

/// A member that could not be built (a setup error, exit 2).
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The `script/` model's file cannot be read or parsed.
    #[error("{0}")]
    Script(String),
    /// The transport refused a configured header.
    #[error("{0}")]
    Transport(String),
}

impl From<RegistryError> for SetupError {
    fn from(e: RegistryError) -> Self {
        SetupError(e.to_string())
    }
}

/// Builds the chain member for `resolved`.
pub fn build_member(
    resolved: &ResolvedModel,
    timeouts: StreamTimeouts,
) -> Result<Member, RegistryError> {
    let spec = &resolved.spec;
    let model: Box<dyn Model> = match resolved.api {
        WireApi::Script => {
            Box::new(ScriptModel::load(Path::new(&spec.model)).map_err(RegistryError::Script)?)
        }
        WireApi::OpenAi => {
            let dialect = match spec.provider.as_str() {
                "openai" => Dialect::OpenAi,
                "openrouter" => Dialect::OpenRouter,
                _ => Dialect::Compatible,
            };
            Box::new(ChatCompletions::new(
                transport(resolved, Auth::Bearer, timeouts)?,
                &spec.model,
                dialect,
                resolved.max_output_tokens,
            ))
        }
        WireApi::Ollama => Box::new(OllamaChat::new(
            transport(resolved, Auth::Bearer, timeouts)?,
            &spec.model,
            resolved.max_output_tokens,
        )),
        WireApi::Anthropic => Box::new(AnthropicModel::new(
            transport(resolved, Auth::XApiKey, timeouts)?,
            &spec.model,
            resolved.max_output_tokens,
        )),
        WireApi::Responses => Box::new(ResponsesModel::new(
            transport(resolved, Auth::Bearer, timeouts)?,
            &spec.model,
            resolved.max_output_tokens,
        )),
    };
    Ok(Member::new(
        spec.to_string(),
        model,
        resolved.pricing,
        resolved.context_window,
    )
    .with_health_key(resolved.health_key()))
}

/// The HTTP transport of `resolved`, sending its key as `auth` says.
fn transport(
    resolved: &ResolvedModel,
    auth: Auth,
    timeouts: StreamTimeouts,
) -> Result<HttpTransport, RegistryError> {
    HttpTransport::new(
        &resolved.endpoint,
        resolved.api_key.as_deref(),
        auth,
        &resolved.headers,
        timeouts,
    )
    .map_err(|e| RegistryError::Transport(e.0))
}
