//! The built-in providers as data (SPEC 2 and 22): one row per provider,
//! naming its API (a value of `model/api.rs`'s table), its endpoint, its
//! credential kind and how the price table knows its model names. A new
//! door to a model is one row here; what `--help` says of a provider is
//! read from its row.

use crate::wire_api::WireApi;

/// Which OpenAI-compatible server we talk to; they differ in the names of
/// two parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI itself: `max_completion_tokens` (its `max_tokens` is deprecated
    /// and refused by reasoning models) and `reasoning_effort`.
    OpenAi,
    /// OpenRouter: `max_tokens` and its normalised `reasoning: {effort}`.
    OpenRouter,
    /// Any other OpenAI-compatible server (vLLM, llama.cpp, LiteLLM, LM
    /// Studio, ...): `max_tokens`, which they all accept, and
    /// `reasoning_effort`.
    Compatible,
}

/// What authorizes a provider's requests (each kind is found in settings,
/// and sent through `model/credentials`' one `Credentials` path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CredentialKind {
    /// Nothing (a local server, the offline scripted model).
    None,
    /// A key from this variable, sent as the API's key header (a bearer
    /// token, `x-api-key`, ...); a missing key is a setup error.
    Key(&'static str),
    /// AWS credentials, in the AWS CLI's order (`credentials/aws.rs`).
    Aws,
    /// Google Application Default Credentials (`credentials/google/`).
    Google,
    /// A key from the cloud's variables, else a Microsoft Entra ID token
    /// from Azure's credential chain; found by the API's settings hook.
    Azure,
}

/// How the built-in price table knows a provider's model names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PriceNames {
    /// Not priced by the table (a local server: its own prices, or none).
    Unpriced,
    /// As the vendor names them (`claude-sonnet-4-5`, or Vertex's
    /// `claude-sonnet-4-5@20250929`).
    Vendor,
    /// OpenRouter's `anthropic/claude-sonnet-4.5`: the last part, dots as
    /// dashes.
    OpenRouter,
    /// Bedrock's ids: `us.anthropic.claude-sonnet-4-5-20250929-v1:0`.
    Bedrock,
}

/// A built-in provider: its wire API, default endpoint, the environment
/// variable overriding that endpoint, its credentials and its prices.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BuiltinProvider {
    pub name: &'static str,
    pub api: WireApi,
    pub endpoint: &'static str,
    pub endpoint_env: Option<&'static str>,
    pub credentials: CredentialKind,
    /// For Chat Completions providers: which server it is (parameter names
    /// differ). Named providers are `Dialect::Compatible`.
    pub dialect: Dialect,
    pub prices: PriceNames,
    /// What `--help` says of the provider's credentials and endpoint, when
    /// more than its key and endpoint variables.
    pub help: Option<&'static str>,
}

impl BuiltinProvider {
    /// The variable holding the provider's key, when a key is what it takes.
    pub(crate) fn key_env(&self) -> Option<&'static str> {
        match self.credentials {
            CredentialKind::Key(var) => Some(var),
            _ => None,
        }
    }
}

/// SPEC section 2's table, and section 22's.
pub(crate) const BUILTIN_PROVIDERS: &[BuiltinProvider] = &[
    BuiltinProvider {
        name: "openai",
        api: WireApi::named("openai"),
        endpoint: "https://api.openai.com/v1",
        endpoint_env: Some("OPENAI_BASE_URL"),
        credentials: CredentialKind::Key("OPENAI_API_KEY"),
        dialect: Dialect::OpenAi,
        prices: PriceNames::Vendor,
        help: None,
    },
    BuiltinProvider {
        name: "responses",
        api: WireApi::named("responses"),
        endpoint: "https://api.openai.com/v1",
        endpoint_env: Some("OPENAI_BASE_URL"),
        credentials: CredentialKind::Key("OPENAI_API_KEY"),
        dialect: Dialect::Compatible,
        prices: PriceNames::Vendor,
        help: None,
    },
    BuiltinProvider {
        name: "anthropic",
        api: WireApi::named("anthropic"),
        endpoint: "https://api.anthropic.com",
        endpoint_env: Some("ANTHROPIC_BASE_URL"),
        credentials: CredentialKind::Key("ANTHROPIC_API_KEY"),
        dialect: Dialect::Compatible,
        prices: PriceNames::Vendor,
        help: None,
    },
    BuiltinProvider {
        name: "ollama",
        api: WireApi::named("ollama"),
        endpoint: "http://127.0.0.1:11434",
        endpoint_env: Some("OLLAMA_HOST"),
        credentials: CredentialKind::None,
        dialect: Dialect::Compatible,
        prices: PriceNames::Unpriced,
        help: None,
    },
    BuiltinProvider {
        name: "openrouter",
        api: WireApi::named("openai"),
        endpoint: "https://openrouter.ai/api/v1",
        endpoint_env: None,
        credentials: CredentialKind::Key("OPENROUTER_API_KEY"),
        dialect: Dialect::OpenRouter,
        prices: PriceNames::OpenRouter,
        help: None,
    },
    BuiltinProvider {
        name: "script",
        api: WireApi::SCRIPT,
        endpoint: "",
        endpoint_env: None,
        credentials: CredentialKind::None,
        dialect: Dialect::Compatible,
        prices: PriceNames::Unpriced,
        help: Some("offline: the model is a script file (script/<file.yaml>)"),
    },
    BuiltinProvider {
        name: "bedrock",
        api: WireApi::named("bedrock"),
        // `{region}` is filled in by settings (SPEC 22).
        endpoint: "https://bedrock-runtime.{region}.amazonaws.com",
        endpoint_env: Some("AWS_ENDPOINT_URL_BEDROCK_RUNTIME"),
        credentials: CredentialKind::Aws,
        dialect: Dialect::Compatible,
        prices: PriceNames::Bedrock,
        help: Some("AWS credentials or AWS_BEARER_TOKEN_BEDROCK, region AWS_REGION"),
    },
    BuiltinProvider {
        name: "vertex",
        api: WireApi::named("vertex"),
        // The publisher model's URL is made by settings (SPEC 22).
        endpoint: "https://aiplatform.googleapis.com",
        endpoint_env: Some("VERTEX_BASE_URL"),
        credentials: CredentialKind::Google,
        dialect: Dialect::Compatible,
        prices: PriceNames::Vendor,
        help: Some("Google Application Default Credentials, project GOOGLE_CLOUD_PROJECT"),
    },
    BuiltinProvider {
        name: "azure",
        api: WireApi::named("azure"),
        // `/openai/v1` (or a deployment's classic URL) is added by settings
        // (SPEC 22); there is no default resource.
        endpoint: "",
        endpoint_env: Some("AZURE_OPENAI_ENDPOINT"),
        credentials: CredentialKind::Azure,
        dialect: Dialect::OpenAi,
        prices: PriceNames::Vendor,
        help: Some(
            "key AZURE_OPENAI_API_KEY or AZURE_OPENAI_AD_TOKEN, endpoint AZURE_OPENAI_ENDPOINT",
        ),
    },
    BuiltinProvider {
        name: "gemini",
        api: WireApi::named("gemini"),
        endpoint: "https://generativelanguage.googleapis.com/v1beta",
        endpoint_env: Some("GEMINI_BASE_URL"),
        credentials: CredentialKind::Key("GEMINI_API_KEY"),
        dialect: Dialect::Compatible,
        prices: PriceNames::Vendor,
        help: None,
    },
    BuiltinProvider {
        name: "foundry",
        api: WireApi::named("foundry"),
        // `https://{resource}.services.ai.azure.com/anthropic` is made by
        // its API's settings (SPEC 22).
        endpoint: "",
        endpoint_env: Some("ANTHROPIC_FOUNDRY_BASE_URL"),
        credentials: CredentialKind::Azure,
        dialect: Dialect::Compatible,
        prices: PriceNames::Vendor,
        help: Some("key ANTHROPIC_FOUNDRY_API_KEY or Entra ID, ANTHROPIC_FOUNDRY_RESOURCE"),
    },
];

/// Looks up a built-in provider by name.
pub(crate) fn builtin(name: &str) -> Option<&'static BuiltinProvider> {
    BUILTIN_PROVIDERS.iter().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_names_a_known_api() {
        for row in BUILTIN_PROVIDERS {
            assert!(
                row.api == WireApi::SCRIPT || WireApi::from_config(row.api.config_name()).is_some(),
                "{}",
                row.name
            );
        }
    }
}
