//! Resolving model specs: the one place a provider is looked up (built-in
//! table, then the config's named providers), its key checked and its
//! endpoint, headers, prices and limits read into a `ResolvedModel`.

use std::collections::BTreeMap;

use crate::cli::Cli;
use crate::config::{Config, FallbackEntry, ProviderConfig};
use crate::model::apis::{self as api, ApiInput};
use crate::model::price::{builtin_price, Pricing};
use crate::model::providers::CredentialKind;
use crate::model::script::ScriptModel;
use crate::model::spec::{builtin, ModelSpec, ResolvedModel, WireApi, WireOptions};
use crate::prompt_cache::PromptCache;
use crate::resume::Checkpointed;
use crate::setup::{Env, SetupError};

use super::defaults;
use super::google;

/// Most fallback entries a chain may have.
pub(super) const MAX_FALLBACKS: usize = 3;

/// The subagents' models and step limit (config `subagents`).
#[derive(Debug, Clone)]
pub(crate) struct SubagentSettings {
    pub primary: ResolvedModel,
    pub fallbacks: Vec<ResolvedModel>,
    pub step_limit: u32,
}

/// The run's primary and fallbacks: a resumed run's model, else `-m`, else
/// config `model`; `--no-fallback`, else `--fallback-model`, else config
/// `fallback_models`. A named provider may not shadow a built-in one.
pub(super) fn run_chain(
    cli: &Cli,
    config: &Config,
    env: Env,
    resumed: Option<&Checkpointed>,
) -> Result<(ResolvedModel, Vec<ResolvedModel>), SetupError> {
    for name in config.providers.keys() {
        if builtin(name).is_some() {
            return Err(SetupError(format!(
                "config providers.{name}: a named provider may not shadow the built-in provider '{name}'"
            )));
        }
    }
    if let Some(chain) = cli.session_chain.as_deref() {
        return session_chain(chain, config, env);
    }
    let model_text = resumed
        .map(|cp| cp.doc.model.clone())
        .or_else(|| cli.model.clone())
        .or_else(|| config.model.clone())
        .ok_or_else(|| {
            SetupError("no model: give -m <provider>/<model> or set `model` in the config".into())
        })?;
    let primary = ModelSpec::parse(&model_text).map_err(|e| SetupError(e.to_string()))?;
    let primary = resolve(primary, &config.providers, env, "model")?;
    let flags: Vec<FallbackEntry>;
    let entries: &[FallbackEntry] = if cli.no_fallback {
        &[]
    } else if !cli.fallback_model.is_empty() {
        flags = cli
            .fallback_model
            .iter()
            .cloned()
            .map(FallbackEntry::from)
            .collect();
        &flags
    } else {
        config.fallback_models.as_deref().unwrap_or_default()
    };
    let mut fallbacks = resolve_chain(&primary.spec, entries, &config.providers, env)?;
    let mut primary = primary;
    cache_settings(config, &mut primary, &mut fallbacks, entries);
    Ok((primary, fallbacks))
}

/// A chain a session put in a new order (`/model` with a member): the
/// first is the primary, each member keeps its reply budget.
fn session_chain(
    chain: &[(String, Option<u32>)],
    config: &Config,
    env: Env,
) -> Result<(ResolvedModel, Vec<ResolvedModel>), SetupError> {
    let ((first, budget), rest) = chain
        .split_first()
        .ok_or_else(|| SetupError("no model".into()))?;
    let primary = ModelSpec::parse(first).map_err(|e| SetupError(e.to_string()))?;
    let mut primary = resolve(primary, &config.providers, env, "model")?;
    primary.reply_budget = *budget;
    // Each member keeps its own `fallback_models` entry's `prompt_cache`.
    let configured = |model: &str| {
        let entries = config.fallback_models.as_deref().unwrap_or_default();
        entries
            .iter()
            .find(|e| e.model == model)
            .and_then(|e| e.prompt_cache)
    };
    let entries: Vec<FallbackEntry> = rest
        .iter()
        .map(|(model, budget)| FallbackEntry {
            model: model.clone(),
            max_output_tokens: *budget,
            prompt_cache: configured(model),
        })
        .collect();
    let mut fallbacks = resolve_chain(&primary.spec, &entries, &config.providers, env)?;
    cache_settings(config, &mut primary, &mut fallbacks, &entries);
    if let Some(own) = configured(first) {
        primary.prompt_cache = own;
    }
    Ok((primary, fallbacks))
}

/// Validates `subagents:` like the main chain: the model and each fallback
/// must name a known provider with its key set.
pub(super) fn subagents(config: &Config, env: Env) -> Result<Option<SubagentSettings>, SetupError> {
    let Some(sub) = &config.subagents else {
        return Ok(None);
    };
    let text = sub.model.as_deref().ok_or_else(|| {
        SetupError("config subagents.model: required when subagents is set".into())
    })?;
    let primary =
        ModelSpec::parse(text).map_err(|e| SetupError(format!("config subagents.model: {e}")))?;
    let mut primary = resolve(primary, &config.providers, env, "subagents.model")?;
    let entries = sub.fallback_models.as_deref().unwrap_or_default();
    let mut fallbacks = resolve_chain(&primary.spec, entries, &config.providers, env)
        .map_err(|e| SetupError(format!("config subagents.fallback_models: {e}")))?;
    cache_settings(config, &mut primary, &mut fallbacks, entries);
    let step_limit = sub.step_limit.unwrap_or(defaults::SUBAGENT_STEP_LIMIT);
    if step_limit == 0 {
        return Err(SetupError(
            "config subagents.step_limit: must be at least 1".into(),
        ));
    }
    Ok(Some(SubagentSettings {
        primary,
        fallbacks,
        step_limit,
    }))
}

/// Each member's `prompt_cache` (SPEC 25): its `fallback_models` entry's,
/// else its named provider model's, else the config's, else `on`.
fn cache_settings(
    config: &Config,
    primary: &mut ResolvedModel,
    fallbacks: &mut [ResolvedModel],
    entries: &[FallbackEntry],
) {
    let of = |member: &ResolvedModel, entry: Option<PromptCache>| {
        entry
            .or_else(|| {
                let provider = config.providers.get(member.spec.provider())?;
                provider.models.get(member.spec.model())?.prompt_cache
            })
            .or(config.prompt_cache)
            .unwrap_or_default()
    };
    primary.prompt_cache = of(primary, None);
    for (member, entry) in fallbacks.iter_mut().zip(entries) {
        member.prompt_cache = of(member, entry.prompt_cache);
    }
}

/// Resolves `spec`: a known provider whose key variable (if it has one) is
/// set. `what` names the setting in errors (`model`, `fallback model`...).
pub(crate) fn resolve(
    spec: ModelSpec,
    providers: &BTreeMap<String, ProviderConfig>,
    env: Env,
    what: &str,
) -> Result<ResolvedModel, SetupError> {
    let (key_env, resolved) = if let Some(b) = builtin(spec.provider()) {
        let endpoint = b
            .endpoint_env
            .and_then(env)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| b.endpoint.to_string());
        let endpoint = if b.api == crate::model::ollama::API.name {
            ollama_host(&endpoint)
        } else {
            endpoint
        };
        let mut resolved = ResolvedModel {
            api: b.api,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            api_key: b.key_env().and_then(env),
            headers: BTreeMap::new(),
            pricing: builtin_price(spec.provider(), spec.model()).or_else(|| script_pricing(&spec)),
            context_window: None,
            max_output_tokens: None,
            reply_budget: None,
            wire: WireOptions::default(),
            credentials: None,
            api_version: None,
            region: None,
            prompt_cache: PromptCache::On,
            spec,
        };
        builtin_cloud(&mut resolved, env, what)?;
        (b.key_env().map(str::to_string), resolved)
    } else if let Some(p) = providers.get(spec.provider()) {
        let model = p.models.get(spec.model()).cloned().unwrap_or_default();
        let pricing = match (model.input_price, model.output_price) {
            (None, None) => None,
            (input, output) => {
                let input = input.unwrap_or(0.0);
                Some(Pricing {
                    input,
                    output: output.unwrap_or(0.0),
                    cached_input: model.cached_input_price.unwrap_or(input),
                    cache_write: model.cache_write_price.unwrap_or(input),
                })
            }
        };
        let endpoint = google::named_endpoint(p, env).unwrap_or_default();
        let mut resolved = ResolvedModel {
            api: p.api,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            api_key: p.api_key_env.as_deref().and_then(env),
            headers: headers(p, env),
            pricing,
            context_window: model.context_window,
            max_output_tokens: model.max_output_tokens,
            reply_budget: None,
            wire: WireOptions {
                stream: p.stream.unwrap_or(true),
                tool_choice: p.tool_choice,
            },
            credentials: None,
            api_version: None,
            region: None,
            prompt_cache: PromptCache::On,
            spec,
        };
        named_api(&mut resolved, p, env, what)?;
        if resolved.pricing.is_none() {
            // A cloud's door prices a named provider of its API as its own.
            let home = api::of(p.api).and_then(|a| a.home);
            resolved.pricing = home.and_then(|h| builtin_price(h, resolved.spec.model()));
        }
        // A key of Azure's kind was found with its credentials.
        let key_env = p
            .api_key_env
            .clone()
            .or_else(|| google::default_key_env(p.api))
            .filter(|_| !finds_own_key(p.api));
        (key_env, resolved)
    } else {
        let known = crate::model::spec::BUILTIN_PROVIDERS
            .iter()
            .map(|b| b.name)
            .chain(providers.keys().map(String::as_str));
        let unknown = crate::suggest::unknown_provider(spec.provider(), known);
        return Err(SetupError(format!("{what} '{spec}': {unknown}")));
    };
    let mut resolved = resolved;
    if let Some(var) = key_env {
        if resolved.api_key.as_deref().is_none_or(str::is_empty) {
            resolved.api_key = google::second_key(resolved.api, &var, env);
        }
        if resolved.api_key.as_deref().is_none_or(str::is_empty) {
            return Err(SetupError(format!(
                "{what} '{}': the API key variable {} is not set",
                resolved.spec,
                google::key_variables(resolved.api, &var)
            )));
        }
    }
    Ok(resolved)
}

/// What a built-in provider's API adds (SPEC 22): its endpoint and
/// credentials, from the environment.
fn builtin_cloud(resolved: &mut ResolvedModel, env: Env, what: &str) -> Result<(), SetupError> {
    api_settings(resolved, &ApiInput::default(), env, what)
}

/// What a named provider's API takes: a cloud's own settings (its
/// endpoint and credentials, the provider's settings winning over the
/// environment), else the endpoint every other API needs.
fn named_api<'p>(
    resolved: &mut ResolvedModel,
    p: &'p ProviderConfig,
    env: Env,
    what: &str,
) -> Result<(), SetupError> {
    super::azure::check_api_version(p, what, &resolved.spec)?;
    let refuses_tool_choice =
        api::of(p.api).is_some_and(|a| matches!(a.tool_choice, api::ToolChoiceForm::Refused));
    if refuses_tool_choice && p.tool_choice.is_some() {
        return Err(SetupError(format!(
            "{what} '{}': provider '{}' sets tool_choice, which api: {} does not take",
            resolved.spec,
            resolved.spec.provider(),
            p.api.config_name()
        )));
    }
    let set = |v: &'p Option<String>| v.as_deref().filter(|v| !v.is_empty());
    let input = ApiInput {
        endpoint: (!p.endpoint.is_empty()).then_some(p.endpoint.as_str()),
        key_env: set(&p.api_key_env),
        region: set(&p.region),
        project: set(&p.project),
        profile: set(&p.profile),
        api_version: set(&p.api_version),
    };
    if has_settings(p.api) {
        return api_settings(resolved, &input, env, what);
    }
    if resolved.endpoint.is_empty() {
        return Err(SetupError(format!(
            "{what} '{}': provider '{}' has no endpoint (required for api: {})",
            resolved.spec,
            resolved.spec.provider(),
            p.api.config_name()
        )));
    }
    Ok(())
}

/// The clouds whose settings are found in `settings/` still: each is its
/// API's `resolve` hook, by its API's name.
const SETTINGS_HOOKS: [(WireApi, api::Resolve); 3] = [
    (crate::model::bedrock::API.name, bedrock_settings),
    (crate::model::vertex::API.name, vertex_settings),
    (crate::model::azure::API.name, azure_settings),
];

/// The settings hook of `api`: its value's own, else one of `SETTINGS_HOOKS`.
fn settings_hook(api: WireApi) -> Option<api::Resolve> {
    api::of(api).and_then(|a| a.resolve).or_else(|| {
        SETTINGS_HOOKS
            .iter()
            .find(|(name, _)| *name == api)
            .map(|(_, hook)| *hook)
    })
}

/// Whether `api` resolves its own endpoint and credentials.
fn has_settings(api: WireApi) -> bool {
    settings_hook(api).is_some()
}

/// Runs the member's API's settings hook, if it has one.
fn api_settings(
    resolved: &mut ResolvedModel,
    input: &ApiInput<'_>,
    env: Env,
    what: &str,
) -> Result<(), SetupError> {
    match settings_hook(resolved.api) {
        Some(hook) => hook(resolved, input, env, what),
        None => Ok(()),
    }
}

/// Bedrock's hook (`settings/bedrock.rs`).
fn bedrock_settings(
    resolved: &mut ResolvedModel,
    input: &ApiInput<'_>,
    env: Env,
    what: &str,
) -> Result<(), SetupError> {
    let overrides = super::bedrock::Overrides {
        region: input.region,
        endpoint: input.endpoint,
        profile: input.profile,
    };
    super::bedrock::resolve(resolved, overrides, env, what)
}

/// Vertex AI's hook (`settings/google.rs`).
fn vertex_settings(
    resolved: &mut ResolvedModel,
    input: &ApiInput<'_>,
    env: Env,
    what: &str,
) -> Result<(), SetupError> {
    let overrides = google::VertexOverrides {
        project: input.project,
        region: input.region,
        endpoint: input.endpoint,
    };
    google::resolve_vertex(resolved, overrides, env, what)
}

/// Azure OpenAI's hook (`settings/azure.rs`).
fn azure_settings(
    resolved: &mut ResolvedModel,
    input: &ApiInput<'_>,
    env: Env,
    what: &str,
) -> Result<(), SetupError> {
    let overrides = super::azure::Overrides {
        endpoint: input.endpoint,
        api_version: input.api_version,
        key_env: input.key_env,
    };
    super::azure::resolve(resolved, overrides, env, what)
}

/// A named provider's `headers`, and its `env_headers` whose variables
/// are set (codex-rs's `env_http_headers`): a variable that is unset or
/// empty sends no header.
fn headers(p: &ProviderConfig, env: Env) -> BTreeMap<String, String> {
    let mut headers = p.headers.clone();
    for (name, var) in &p.env_headers {
        if let Some(value) = env(var).filter(|v| !v.is_empty()) {
            headers.insert(name.clone(), value);
        }
    }
    headers
}

/// Whether `api`'s settings hook finds the key itself (its built-in
/// provider's credentials are of Azure's kind: a key, else a token).
fn finds_own_key(api: WireApi) -> bool {
    api::of(api)
        .and_then(|a| a.home)
        .and_then(builtin)
        .is_some_and(|b| b.credentials == CredentialKind::Azure)
}

/// A script whose replies state their `cost:` is priced (at $0 for any
/// reply that states none), not unpriced. An unreadable script is left to
/// the registry, which reports it.
fn script_pricing(spec: &ModelSpec) -> Option<Pricing> {
    if builtin(spec.provider()).is_none_or(|b| b.api != WireApi::SCRIPT) {
        return None;
    }
    let script = ScriptModel::load(std::path::Path::new(spec.model())).ok()?;
    script.states_costs().then_some(Pricing {
        input: 0.0,
        output: 0.0,
        cached_input: 0.0,
        cache_write: 0.0,
    })
}

/// SPEC section 5's validation of the fallback chain, each entry resolved.
pub(crate) fn resolve_chain(
    primary: &ModelSpec,
    entries: &[FallbackEntry],
    providers: &BTreeMap<String, ProviderConfig>,
    env: Env,
) -> Result<Vec<ResolvedModel>, SetupError> {
    let mut chain: Vec<ResolvedModel> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let text = &entry.model;
        if i >= MAX_FALLBACKS {
            return Err(SetupError(format!(
                "fallback model '{text}': the fallback chain takes at most {MAX_FALLBACKS} models"
            )));
        }
        let spec =
            ModelSpec::parse(text).map_err(|e| SetupError(format!("fallback model: {e}")))?;
        let mut resolved = resolve(spec, providers, env, "fallback model")?;
        if entry.max_output_tokens == Some(0) {
            return Err(SetupError(format!(
                "fallback model '{text}': max_output_tokens must be at least 1"
            )));
        }
        resolved.reply_budget = entry.max_output_tokens;
        let spec = &resolved.spec;
        if spec == primary {
            return Err(SetupError(format!(
                "fallback model '{spec}': it is the primary model"
            )));
        }
        if chain.iter().any(|m| &m.spec == spec) {
            return Err(SetupError(format!(
                "fallback model '{spec}': listed more than once"
            )));
        }
        chain.push(resolved);
    }
    Ok(chain)
}

/// Reads `OLLAMA_HOST` as Ollama does: the scheme defaults to `http` and,
/// for `http`, the port to 11434 (`gpu-box` is `http://gpu-box:11434`).
/// A value `url` cannot read is used as written.
fn ollama_host(value: &str) -> String {
    let value = value.trim_end_matches('/');
    let with_scheme = if value.contains("://") {
        value.to_string()
    } else {
        format!("http://{value}")
    };
    let Ok(mut url) = url::Url::parse(&with_scheme) else {
        return with_scheme;
    };
    // `url` drops a written default port (`:80` for http): as written, then.
    let authority = with_scheme
        .split_once("://")
        .map_or("", |(_, rest)| rest.split('/').next().unwrap_or(""));
    if authority.ends_with(":80") {
        return with_scheme;
    }
    if url.scheme() == "http" && url.port().is_none() {
        let _ = url.set_port(Some(11434));
    }
    let text = url.to_string();
    match text.strip_suffix('/') {
        Some(trimmed) if url.path() == "/" => trimmed.to_string(),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::setup::fixed_env as env;

    fn spec(text: &str) -> ModelSpec {
        ModelSpec::parse(text).unwrap()
    }

    #[test]
    fn a_named_provider_of_a_clouds_api_is_priced_as_that_door() {
        let providers: BTreeMap<String, ProviderConfig> = serde_yaml::from_str(
            "gem: {api: gemini}\ngw: {api: anthropic, endpoint: 'http://127.0.0.1:1'}\n",
        )
        .unwrap();
        let e = env(&[("GEMINI_API_KEY", "k")]);
        let r = resolve(spec("gem/gemini-2.5-pro"), &providers, &e, "model").unwrap();
        assert_eq!(r.pricing, builtin_price("gemini", "gemini-2.5-pro"));
        assert!(r.pricing.is_some());
        // A gateway's prices are its own: none unless configured.
        let r = resolve(spec("gw/claude-sonnet-4-5"), &providers, &e, "model").unwrap();
        assert_eq!(r.pricing, None);
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

    #[test]
    fn a_written_default_port_stays() {
        assert_eq!(ollama_host("gpu-box:80"), "http://gpu-box:80");
        assert_eq!(ollama_host("http://gpu-box:80/"), "http://gpu-box:80");
        assert_eq!(ollama_host("https://h:8443/x/"), "https://h:8443/x");
    }

    #[test]
    fn health_keys_name_the_endpoint() {
        let e = env(&[
            ("OPENAI_API_KEY", "k"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1/"),
        ]);
        let none = BTreeMap::new();
        let key = resolve(spec("openai/gpt-5"), &none, &e, "model")
            .unwrap()
            .health_key();
        assert_eq!(key.model, "openai/gpt-5");
        assert_eq!(key.endpoint, "http://127.0.0.1:8080/v1");
        let script = resolve(spec("script/rel.yaml"), &none, &e, "model")
            .unwrap()
            .health_key();
        assert!(Path::new(&script.endpoint).is_absolute(), "{script:?}");
    }

    #[test]
    fn named_providers_bring_headers_prices_and_limits() {
        let config: crate::config::Config = serde_yaml::from_str(
            "providers:\n  local:\n    api: anthropic\n    endpoint: http://127.0.0.1:9/\n    api_key_env: LOCAL_KEY\n    headers: {X-Team: a}\n    models:\n      m: {input_price: 2, context_window: 1000, max_output_tokens: 64}\n",
        )
        .unwrap();
        let e = env(&[("LOCAL_KEY", "secret")]);
        let r = resolve(spec("local/m"), &config.providers, &e, "model").unwrap();
        assert_eq!(r.api, crate::model::anthropic::API.name);
        assert_eq!(r.endpoint, "http://127.0.0.1:9");
        assert_eq!(r.api_key.as_deref(), Some("secret"));
        assert_eq!(r.headers["X-Team"], "a");
        assert_eq!(
            r.pricing,
            Some(Pricing {
                input: 2.0,
                output: 0.0,
                cached_input: 2.0,
                cache_write: 2.0
            })
        );
        assert_eq!(
            (r.context_window, r.max_output_tokens),
            (Some(1000), Some(64))
        );
        let bare: crate::config::Config =
            serde_yaml::from_str("providers:\n  local:\n    api: openai\n").unwrap();
        let err = resolve(spec("local/m"), &bare.providers, &env(&[]), "model").unwrap_err();
        assert_eq!(
            err.0,
            "model 'local/m': provider 'local' has no endpoint (required for api: openai)"
        );
        let e = resolve(spec("local/m"), &config.providers, &env(&[]), "model").unwrap_err();
        assert_eq!(
            e.0,
            "model 'local/m': the API key variable LOCAL_KEY is not set"
        );
    }

    #[test]
    fn prompt_cache_the_most_specific_setting_wins() {
        let config: crate::config::Config = serde_yaml::from_str(
            "prompt_cache: 1h\nproviders:\n  gw:\n    api: openai\n    endpoint: http://127.0.0.1:9/v1\n    models:\n      off: {prompt_cache: off}\n      plain: {}\nfallback_models: [gw/plain, {model: gw/off, prompt_cache: on}, {model: openai/gpt-5, prompt_cache: off}]\n",
        )
        .unwrap();
        let e = env(&[("OPENAI_API_KEY", "k")]);
        let mut primary = resolve(spec("gw/off"), &config.providers, &e, "model").unwrap();
        primary.spec = spec("gw/off");
        let entries = config.fallback_models.clone().unwrap();
        let mut chain =
            resolve_chain(&spec("anthropic/x"), &entries, &config.providers, &e).unwrap();
        cache_settings(&config, &mut primary, &mut chain, &entries);
        assert_eq!(primary.prompt_cache, PromptCache::Off);
        let got: Vec<PromptCache> = chain.iter().map(|m| m.prompt_cache).collect();
        assert_eq!(
            got,
            [PromptCache::OneHour, PromptCache::On, PromptCache::Off]
        );
        let none = crate::config::Config::default();
        let mut bare = resolve(spec("openai/gpt-5"), &none.providers, &e, "model").unwrap();
        cache_settings(&none, &mut bare, &mut [], &[]);
        assert_eq!(bare.prompt_cache, PromptCache::On);
    }
}
