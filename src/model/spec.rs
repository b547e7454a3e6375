//! Model specs (`<provider>/<model>`) and
//! `ResolvedModel`: a spec with everything the registry, the health record
//! and the run need (resolved once, in `settings`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use super::price::Pricing;
pub(crate) use super::providers::{builtin, Dialect, BUILTIN_PROVIDERS};
use crate::health::{HealthKey, PaceKey};
use crate::prompt_cache::PromptCache;
/// Re-exported from the leaf `wire_api`, where the config reads them too.
pub(crate) use crate::wire_api::{ToolChoice, WireApi};

/// How requests to one provider are sent: streamed (the default), or as one
/// request answered by one JSON body (`stream: false`, for servers that
/// cannot stream tool calls), and the `tool_choice` to send, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WireOptions {
    pub stream: bool,
    pub tool_choice: Option<ToolChoice>,
}

impl Default for WireOptions {
    fn default() -> Self {
        WireOptions {
            stream: true,
            tool_choice: None,
        }
    }
}

/// A parsed `<provider>/<model>` spec, split at the first `/` (so
/// `openrouter/anthropic/claude-sonnet-4.5` is provider `openrouter`). It
/// keeps its text whole: the spec is what requests, events and records name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ModelSpec {
    text: String,
    /// Where the first `/` is.
    slash: usize,
}

/// Why a spec does not parse. A model named without its provider is told
/// the whole spec (`did you mean openai/gpt-5?`, SPEC 21).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid model spec '{0}': expected <provider>/<model>{hint}", hint = whole_spec_hint(.0))]
pub(crate) struct BadSpec(pub String);

/// ` (did you mean openai/gpt-5?)` for a model named without its provider.
fn whole_spec_hint(text: &str) -> String {
    if text.contains('/') {
        return String::new();
    }
    crate::suggest::full_spec(text)
        .map(|spec| format!(" (did you mean {spec}?)"))
        .unwrap_or_default()
}

impl ModelSpec {
    /// Parses a spec; both parts must be non-empty.
    pub(crate) fn parse(text: &str) -> Result<ModelSpec, BadSpec> {
        match text.find('/') {
            Some(slash) if slash > 0 && slash + 1 < text.len() => Ok(ModelSpec {
                text: text.to_string(),
                slash,
            }),
            _ => Err(BadSpec(text.to_string())),
        }
    }

    /// The part before the first `/`.
    pub(crate) fn provider(&self) -> &str {
        &self.text[..self.slash]
    }

    /// The part after the first `/`.
    pub(crate) fn model(&self) -> &str {
        &self.text[self.slash + 1..]
    }

    /// The whole spec.
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq<str> for ModelSpec {
    fn eq(&self, other: &str) -> bool {
        self.text == other
    }
}

/// A spec resolved against the built-in table and the named providers:
/// what the registry builds the adapter from, what the health record keys
/// on, and what the run prices and sizes with.
#[derive(Clone, PartialEq)]
pub(crate) struct ResolvedModel {
    pub spec: ModelSpec,
    pub api: WireApi,
    /// Base URL the API's own paths are appended to, no trailing `/`
    /// (empty for `script/`).
    pub endpoint: String,
    /// The key's value. Never printed, logged or stored: `Debug` redacts it.
    pub api_key: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub pricing: Option<Pricing>,
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u32>,
    /// A fallback's own reply budget (`{model: SPEC, max_output_tokens: N}`),
    /// in place of the run's.
    pub reply_budget: Option<u32>,
    /// Streaming and `tool_choice`, from a named provider's config.
    pub wire: WireOptions,
    /// Credentials found while resolving (a cloud's: SPEC 22), which
    /// authorize each request in place of `api_key`.
    pub credentials: Option<FoundCredentials>,
    /// Azure OpenAI's `api-version` (SPEC 22): requests go to the
    /// deployment's classic URL (`endpoint` is `…/openai/deployments/{name}`)
    /// with it as their query; `None` is the `/openai/v1` form.
    pub api_version: Option<String>,
    /// A cloud member's region (Bedrock) or location (Vertex AI), for the
    /// warning about one this release does not know (SPEC 22).
    pub region: Option<String>,
    /// `prompt_cache:` as it applies to this member (SPEC 25).
    pub prompt_cache: PromptCache,
}

/// A member's credentials, found once (and shared by every member that
/// uses the same ones).
#[derive(Debug, Clone)]
pub(crate) struct FoundCredentials(pub std::sync::Arc<dyn crate::model::credentials::Credentials>);

impl PartialEq for FoundCredentials {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl ResolvedModel {
    /// The health record's key: the resolved endpoint, or for a `script/`
    /// model the script file's absolute path.
    pub(crate) fn health_key(&self) -> HealthKey {
        let endpoint = if self.api == WireApi::SCRIPT {
            let path = Path::new(self.spec.model());
            path.canonicalize()
                .or_else(|_| std::env::current_dir().map(|d| d.join(path)))
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| self.spec.model().to_string())
        } else {
            self.endpoint.clone()
        };
        HealthKey {
            model: self.spec.to_string(),
            endpoint,
        }
    }
}

impl ResolvedModel {
    /// The pacing record's key (SPEC 17): the health key and a one-way
    /// fingerprint of the API key, so runs that share a key share its limit.
    pub(crate) fn pace_key(&self) -> PaceKey {
        let identity = self.credentials.as_ref().map(|c| c.0.identity());
        PaceKey::new(
            self.health_key(),
            self.api_key.as_deref().or(identity.as_deref()),
        )
    }
}

impl fmt::Debug for ResolvedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedModel")
            .field("spec", &self.spec.to_string())
            .field("api", &self.api)
            .field("endpoint", &self.endpoint)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("pricing", &self.pricing)
            .field("context_window", &self.context_window)
            .field("max_output_tokens", &self.max_output_tokens)
            .field("reply_budget", &self.reply_budget)
            .field("wire", &self.wire)
            .field("credentials", &self.credentials)
            .field("api_version", &self.api_version)
            .field("region", &self.region)
            .field("prompt_cache", &self.prompt_cache)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_first_slash() {
        let spec = ModelSpec::parse("openrouter/anthropic/claude-sonnet-4.5").unwrap();
        assert_eq!(spec.provider(), "openrouter");
        assert_eq!(spec.model(), "anthropic/claude-sonnet-4.5");
        assert_eq!(spec.to_string(), "openrouter/anthropic/claude-sonnet-4.5");
    }

    #[test]
    fn debug_redacts_the_key_and_header_values() {
        let resolved = ResolvedModel {
            spec: ModelSpec::parse("openai/gpt-5").unwrap(),
            api: WireApi::named("openai"),
            endpoint: "http://127.0.0.1:1/v1".into(),
            api_key: Some("sk-secret-key".into()),
            headers: BTreeMap::from([("X-Auth".into(), "header-secret".into())]),
            pricing: None,
            context_window: None,
            max_output_tokens: None,
            reply_budget: None,
            wire: WireOptions::default(),
            credentials: None,
            api_version: None,
            region: None,
            prompt_cache: PromptCache::On,
        };
        let text = format!("{resolved:?}");
        assert!(!text.contains("sk-secret-key") && !text.contains("header-secret"));
        assert!(
            text.contains("<redacted>") && text.contains("X-Auth"),
            "{text}"
        );
    }

    #[test]
    fn unknown_api_names_the_accepted_ones() {
        let err = serde_yaml::from_str::<WireApi>("chat")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown API 'chat'") && err.contains("ollama"),
            "{err}"
        );
        assert!(serde_yaml::from_str::<WireApi>("script").is_err());
        assert_eq!(
            serde_yaml::from_str::<WireApi>("anthropic").unwrap(),
            WireApi::named("anthropic")
        );
    }

    #[test]
    fn rejects_malformed() {
        for bad in ["gpt-5", "/gpt-5", "openai/", ""] {
            assert!(ModelSpec::parse(bad).is_err(), "{bad}");
        }
    }
}
