//! Builds chain members from specs: resolves the provider (built-in or
//! named), its endpoint, key, headers, prices and limits, then the adapter.

use std::collections::BTreeMap;
use std::path::Path;

use super::anthropic::AnthropicModel;
use super::chain::Member;
use super::http::{Auth, HttpTransport};
use super::ollama::OllamaChat;
use super::openai::{ChatCompletions, Dialect};
use super::price::{builtin_price, Pricing};
use super::responses::ResponsesModel;
use super::script::ScriptModel;
use super::spec::{builtin, ModelSpec, WireApi};
use super::Model;
use crate::config::ProviderConfig;
use crate::setup::{Env, SetupError};

/// A provider resolved for one model: everything an adapter needs.
#[derive(Clone)]
pub struct ResolvedProvider {
    pub api: WireApi,
    /// Base URL the API's own paths are appended to.
    pub endpoint: String,
    /// The key's value. Never printed, logged or stored.
    pub api_key: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub pricing: Option<Pricing>,
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u32>,
}

impl std::fmt::Debug for ResolvedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedProvider")
            .field("api", &self.api)
            .field("endpoint", &self.endpoint)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

/// Resolves `spec` against the built-in table and the named providers.
pub fn resolve(
    spec: &ModelSpec,
    providers: &BTreeMap<String, ProviderConfig>,
    env: Env,
) -> Result<ResolvedProvider, SetupError> {
    if let Some(b) = builtin(&spec.provider) {
        let endpoint = b
            .endpoint_env
            .and_then(env)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| b.endpoint.to_string());
        let endpoint = if b.api == WireApi::Ollama {
            ollama_host(&endpoint)
        } else {
            endpoint
        };
        return Ok(ResolvedProvider {
            api: b.api,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            api_key: b.key_env.and_then(env),
            headers: BTreeMap::new(),
            pricing: builtin_price(&spec.provider, &spec.model),
            context_window: None,
            max_output_tokens: None,
        });
    }
    let p = providers.get(&spec.provider).ok_or_else(|| {
        SetupError(format!(
            "model '{spec}': unknown provider '{}'",
            spec.provider
        ))
    })?;
    let api = WireApi::from_config(&p.api).ok_or_else(|| {
        SetupError(format!(
            "providers.{}: unknown api '{}'",
            spec.provider, p.api
        ))
    })?;
    let model = p.models.get(&spec.model).cloned().unwrap_or_default();
    let pricing = match (model.input_price, model.output_price) {
        (None, None) => None,
        (input, output) => {
            let input = input.unwrap_or(0.0);
            Some(Pricing {
                input,
                output: output.unwrap_or(0.0),
                cached_input: model.cached_input_price.unwrap_or(input),
            })
        }
    };
    Ok(ResolvedProvider {
        api,
        endpoint: p.endpoint.trim_end_matches('/').to_string(),
        api_key: p.api_key_env.as_deref().and_then(env),
        headers: p.headers.clone(),
        pricing,
        context_window: model.context_window,
        max_output_tokens: model.max_output_tokens,
    })
}

/// What adapters need beyond the provider: the retry policy's stream timeouts.
#[derive(Debug, Clone, Copy)]
pub struct StreamTimeouts {
    pub first_event: std::time::Duration,
    pub idle: std::time::Duration,
}

/// Builds the chain member for `spec`.
pub fn build_member(
    spec: &ModelSpec,
    providers: &BTreeMap<String, ProviderConfig>,
    timeouts: StreamTimeouts,
    env: Env,
) -> Result<Member, SetupError> {
    let resolved = resolve(spec, providers, env)?;
    let model: Box<dyn Model> = match resolved.api {
        WireApi::Script => Box::new(ScriptModel::load(Path::new(&spec.model)).map_err(SetupError)?),
        WireApi::OpenAi => {
            let dialect = match spec.provider.as_str() {
                "openai" => Dialect::OpenAi,
                "openrouter" => Dialect::OpenRouter,
                _ => Dialect::Compatible,
            };
            Box::new(ChatCompletions::new(
                bearer_transport(&resolved, timeouts)?,
                &spec.model,
                dialect,
                resolved.max_output_tokens,
            ))
        }
        WireApi::Ollama => Box::new(OllamaChat::new(
            bearer_transport(&resolved, timeouts)?,
            &spec.model,
            resolved.max_output_tokens,
        )),
        WireApi::Anthropic => Box::new(AnthropicModel::new(
            HttpTransport::new(
                &resolved.endpoint,
                resolved.api_key.as_deref(),
                Auth::XApiKey,
                &resolved.headers,
                timeouts,
            )?,
            &spec.model,
            resolved.max_output_tokens,
        )),
        WireApi::Responses => Box::new(ResponsesModel::new(
            bearer_transport(&resolved, timeouts)?,
            &spec.model,
            resolved.max_output_tokens,
        )),
    };
    let endpoint = (resolved.api != WireApi::Script)
        .then(|| origin(&resolved.endpoint))
        .flatten();
    Ok(Member::new(
        spec.to_string(),
        model,
        resolved.pricing,
        resolved.context_window,
    )
    .with_endpoint(endpoint))
}

/// `scheme://host:port` of a base URL: no path, query or credentials (the
/// port is the scheme's default when the URL names none).
pub fn origin(endpoint: &str) -> Option<String> {
    let url = reqwest::Url::parse(endpoint).ok()?;
    let host = url.host_str()?;
    let port = url.port_or_known_default()?;
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    Some(format!("{}://{host}:{port}", url.scheme()))
}

/// The transport for a provider that takes its key as a bearer token.
fn bearer_transport(
    resolved: &ResolvedProvider,
    timeouts: StreamTimeouts,
) -> Result<HttpTransport, SetupError> {
    HttpTransport::new(
        &resolved.endpoint,
        resolved.api_key.as_deref(),
        Auth::Bearer,
        &resolved.headers,
        timeouts,
    )
}

/// Reads `OLLAMA_HOST` as Ollama does: the scheme defaults to `http` and the
/// port to 11434 (`gpu-box` is `http://gpu-box:11434`).
fn ollama_host(value: &str) -> String {
    let value = value.trim_end_matches('/');
    let (scheme, rest) = value.split_once("://").unwrap_or(("http", value));
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let has_port = match authority.rfind(']') {
        Some(close) => authority[close..].contains(':'),
        None => authority.contains(':'),
    };
    if has_port || scheme != "http" {
        format!("{scheme}://{authority}{path}")
    } else {
        format!("{scheme}://{authority}:11434{path}")
    }
}

#[cfg(test)]
mod ollama_host_tests {
    use super::{ollama_host, origin};

    #[test]
    fn origin_keeps_scheme_host_and_port_only() {
        assert_eq!(
            origin("https://api.openai.com/v1").as_deref(),
            Some("https://api.openai.com:443")
        );
        assert_eq!(
            origin("http://user:secret@127.0.0.1:8080/v1?key=abc").as_deref(),
            Some("http://127.0.0.1:8080")
        );
        assert_eq!(
            origin("http://[::1]:9000/x").as_deref(),
            Some("http://[::1]:9000")
        );
        assert_eq!(origin("not a url"), None);
    }

    #[test]
    fn scheme_and_port_default_like_ollama() {
        assert_eq!(ollama_host("gpu-box"), "http://gpu-box:11434");
        assert_eq!(ollama_host("0.0.0.0:8080"), "http://0.0.0.0:8080");
        assert_eq!(
            ollama_host("http://127.0.0.1:11434/"),
            "http://127.0.0.1:11434"
        );
        assert_eq!(ollama_host("http://gpu-box"), "http://gpu-box:11434");
        assert_eq!(
            ollama_host("https://ollama.example.com"),
            "https://ollama.example.com"
        );
        assert_eq!(ollama_host("[::1]"), "http://[::1]:11434");
        assert_eq!(
            ollama_host("http://[::1]:9000/proxy"),
            "http://[::1]:9000/proxy"
        );
    }
}
