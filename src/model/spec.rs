//! Model specs (`<provider>/<model>`) and the built-in providers as data.

use std::fmt;

/// The wire API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireApi {
    /// OpenAI Chat Completions (`…/chat/completions`).
    OpenAi,
    /// OpenAI Responses (`…/responses`).
    Responses,
    /// Anthropic Messages (`…/v1/messages`).
    Anthropic,
    /// Ollama (`…/api/chat`).
    Ollama,
    /// The offline scripted model.
    Script,
}

impl WireApi {
    /// Parses a config `api:` value.
    pub fn from_config(name: &str) -> Option<WireApi> {
        match name {
            "openai" => Some(WireApi::OpenAi),
            "responses" => Some(WireApi::Responses),
            "anthropic" => Some(WireApi::Anthropic),
            "ollama" => Some(WireApi::Ollama),
            _ => None,
        }
    }
}

/// A parsed `<provider>/<model>` spec, split at the first `/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelSpec {
    pub provider: String,
    pub model: String,
}

impl ModelSpec {
    /// Parses a spec; both parts must be non-empty.
    pub fn parse(text: &str) -> Result<ModelSpec, String> {
        match text.split_once('/') {
            Some((provider, model)) if !provider.is_empty() && !model.is_empty() => Ok(ModelSpec {
                provider: provider.to_string(),
                model: model.to_string(),
            }),
            _ => Err(format!(
                "invalid model spec '{text}': expected <provider>/<model>"
            )),
        }
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)
    }
}

/// A built-in provider: its wire API, default endpoint, the environment
/// variable overriding that endpoint, and its key variable.
#[derive(Debug, Clone, Copy)]
pub struct BuiltinProvider {
    pub name: &'static str,
    pub api: WireApi,
    pub endpoint: &'static str,
    pub endpoint_env: Option<&'static str>,
    pub key_env: Option<&'static str>,
}

/// SPEC section 2's table.
pub const BUILTIN_PROVIDERS: &[BuiltinProvider] = &[
    BuiltinProvider {
        name: "openai",
        api: WireApi::OpenAi,
        endpoint: "https://api.openai.com/v1",
        endpoint_env: Some("OPENAI_BASE_URL"),
        key_env: Some("OPENAI_API_KEY"),
    },
    BuiltinProvider {
        name: "responses",
        api: WireApi::Responses,
        endpoint: "https://api.openai.com/v1",
        endpoint_env: Some("OPENAI_BASE_URL"),
        key_env: Some("OPENAI_API_KEY"),
    },
    BuiltinProvider {
        name: "anthropic",
        api: WireApi::Anthropic,
        endpoint: "https://api.anthropic.com",
        endpoint_env: Some("ANTHROPIC_BASE_URL"),
        key_env: Some("ANTHROPIC_API_KEY"),
    },
    BuiltinProvider {
        name: "ollama",
        api: WireApi::Ollama,
        endpoint: "http://127.0.0.1:11434",
        endpoint_env: Some("OLLAMA_HOST"),
        key_env: None,
    },
    BuiltinProvider {
        name: "openrouter",
        api: WireApi::OpenAi,
        endpoint: "https://openrouter.ai/api/v1",
        endpoint_env: None,
        key_env: Some("OPENROUTER_API_KEY"),
    },
    BuiltinProvider {
        name: "script",
        api: WireApi::Script,
        endpoint: "",
        endpoint_env: None,
        key_env: None,
    },
];

/// Looks up a built-in provider by name.
pub fn builtin(name: &str) -> Option<&'static BuiltinProvider> {
    BUILTIN_PROVIDERS.iter().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_first_slash() {
        let spec = ModelSpec::parse("openrouter/anthropic/claude-sonnet-4.5").unwrap();
        assert_eq!(spec.provider, "openrouter");
        assert_eq!(spec.model, "anthropic/claude-sonnet-4.5");
        assert_eq!(spec.to_string(), "openrouter/anthropic/claude-sonnet-4.5");
    }

    #[test]
    fn rejects_malformed() {
        for bad in ["gpt-5", "/gpt-5", "openai/", ""] {
            assert!(ModelSpec::parse(bad).is_err(), "{bad}");
        }
    }
}
