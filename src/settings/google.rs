//! What resolving a model of Google's APIs adds (SPEC 22): the Gemini API's
//! second key variable (`GEMINI_API_KEY`, else `GOOGLE_API_KEY`) and its
//! default endpoint for named providers (`api: gemini`); for Vertex AI the
//! model's family, the credentials (Application Default Credentials, found
//! here, used from the first request on), the project, the region and the
//! publisher model's URL.

use std::sync::Arc;

use crate::config::ProviderConfig;
use crate::model::credentials::google::{find, metadata_project};
use crate::model::credentials::Credentials as _;
use crate::model::price::{builtin_price, vertex_price};
use crate::model::spec::{builtin, FoundCredentials, ResolvedModel, WireApi};
use crate::setup::{Env, SetupError};

/// The Gemini API.
const GEMINI: WireApi = crate::model::gemini::API.name;

/// The Gemini API's key variables, in order.
const GEMINI_KEYS: [&str; 2] = ["GEMINI_API_KEY", "GOOGLE_API_KEY"];

/// A named provider's endpoint: its own, else for a cloud's API the
/// built-in provider's (its variable, else its default); `None` when an
/// API that needs one has none.
pub(super) fn named_endpoint(provider: &ProviderConfig, env: Env) -> Option<String> {
    if !provider.endpoint.is_empty() {
        return Some(provider.endpoint.clone());
    }
    match provider.api {
        api if api == GEMINI => {
            let b = builtin("gemini")?;
            Some(
                b.endpoint_env
                    .and_then(env)
                    .filter(|v| !v.is_empty())
                    .unwrap_or_else(|| b.endpoint.to_string()),
            )
        }
        _ => None,
    }
}

/// The key variable of a named provider that names none, for an API that
/// has one of its own.
pub(super) fn default_key_env(api: WireApi) -> Option<String> {
    (api == GEMINI).then(|| GEMINI_KEYS[0].to_string())
}

/// The key of the Gemini API's variables, in order, when `var` (found
/// unset or not read) is its first.
pub(super) fn second_key(api: WireApi, var: &str, env: Env) -> Option<String> {
    if api == GEMINI && var == GEMINI_KEYS[0] {
        GEMINI_KEYS
            .iter()
            .find_map(|name| env(name).filter(|v| !v.is_empty()))
    } else {
        None
    }
}

/// The variables a missing key was looked for in, for the error.
pub(super) fn key_variables(api: WireApi, var: &str) -> String {
    if api == GEMINI && var == GEMINI_KEYS[0] {
        format!("{} (or {})", GEMINI_KEYS[0], GEMINI_KEYS[1])
    } else {
        var.to_string()
    }
}

/// Where a Gemini API member's key was found, for `--check` (SPEC 22):
/// `environment (GEMINI_API_KEY)`, the variable that holds the key it
/// sends (a named provider's own `api_key_env`, else the two of the
/// Gemini API in order); never the value. `None` for other APIs.
pub(crate) fn gemini_key_source(
    model: &ResolvedModel,
    providers: &std::collections::BTreeMap<String, ProviderConfig>,
    env: Env,
) -> Option<String> {
    if model.api != GEMINI {
        return None;
    }
    let key = model.api_key.as_deref().filter(|k| !k.is_empty())?;
    let own = providers
        .get(model.spec.provider())
        .and_then(|p| p.api_key_env.as_deref());
    own.into_iter()
        .chain(GEMINI_KEYS)
        .find(|name| env(name).as_deref() == Some(key))
        .map(|name| format!("environment ({name})"))
}

/// A named Vertex provider's own settings, which win over the variables.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct VertexOverrides<'a> {
    pub project: Option<&'a str>,
    pub region: Option<&'a str>,
    pub endpoint: Option<&'a str>,
}

/// The publisher of a Vertex model, from its family.
fn publisher(model: &str) -> Option<&'static str> {
    if model.starts_with("claude") {
        Some("anthropic")
    } else if model.starts_with("gemini") {
        Some("google")
    } else {
        None
    }
}

/// Fills in a Vertex member: its credentials, and its endpoint, the
/// publisher model's URL (`{base}/v1/projects/{project}/locations/{region}/
/// publishers/{anthropic|google}/models/{model}`).
pub(super) fn resolve_vertex(
    resolved: &mut ResolvedModel,
    overrides: VertexOverrides<'_>,
    env: Env,
    what: &str,
) -> Result<(), SetupError> {
    let spec = resolved.spec.clone();
    let model = spec.model();
    let publisher = publisher(model).ok_or_else(|| {
        SetupError(format!(
            "{what} '{spec}': Vertex AI serves claude… models (Anthropic's) and gemini… models (Google's); '{model}' is neither"
        ))
    })?;
    let credentials = find(env).map_err(|e| SetupError(format!("{what} '{spec}': {e}")))?;
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let project = overrides
        .project
        .map(str::to_string)
        .or_else(|| var("GOOGLE_CLOUD_PROJECT"))
        .or_else(|| var("ANTHROPIC_VERTEX_PROJECT_ID"))
        .or_else(|| credentials.project().map(str::to_string))
        .or_else(|| credentials.metadata_host().and_then(metadata_project))
        .ok_or_else(|| {
            SetupError(format!(
                "{what} '{spec}': Vertex AI needs a project (looked in the provider's project, GOOGLE_CLOUD_PROJECT, ANTHROPIC_VERTEX_PROJECT_ID, {}{})",
                credentials.source(),
                if credentials.metadata_host().is_some() { "" } else { "'s project_id" }
            ))
        })?;
    let region = overrides
        .region
        .map(str::to_string)
        .or_else(|| var("GOOGLE_CLOUD_LOCATION"))
        .or_else(|| var("CLOUD_ML_REGION"))
        .unwrap_or_else(|| "global".into());
    let base = overrides
        .endpoint
        .map(str::to_string)
        .or_else(|| var("VERTEX_BASE_URL"))
        .unwrap_or_else(|| {
            if region == "global" {
                "https://aiplatform.googleapis.com".into()
            } else {
                format!("https://{region}-aiplatform.googleapis.com")
            }
        });
    let path = |part: &str| -> Result<String, SetupError> {
        if part.is_empty() || part.contains(['/', '?', '#', ' ']) {
            return Err(SetupError(format!(
                "{what} '{spec}': '{part}' cannot be part of a Vertex AI URL"
            )));
        }
        Ok(part.to_string())
    };
    resolved.endpoint = format!(
        "{}/v1/projects/{}/locations/{}/publishers/{publisher}/models/{}",
        base.trim_end_matches('/'),
        path(&project)?,
        path(&region)?,
        path(model)?
    );
    if resolved.pricing.is_some() && resolved.pricing == builtin_price("vertex", model) {
        // The table's price, at this endpoint's (SPEC 22).
        resolved.pricing = vertex_price(model, &region);
    }
    resolved.credentials = Some(FoundCredentials(Arc::new(credentials)));
    resolved.region = Some(region);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::model::spec::ModelSpec;
    use crate::settings::models::resolve;
    use crate::setup::fixed_env as env;

    /// Metadata-server credentials (nothing is asked at resolving when
    /// the project is given) and these variables.
    fn vertex_env(extra: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let mut vars: Vec<(String, String)> = vec![
            ("GCE_METADATA_HOST".into(), "127.0.0.1:9".into()),
            ("CLOUDSDK_CONFIG".into(), "/nonexistent".into()),
        ];
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        move |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn vertex_urls_follow_the_region_and_the_family() {
        let none = BTreeMap::new();
        let e = vertex_env(&[
            ("GOOGLE_CLOUD_PROJECT", "p1"),
            ("CLOUD_ML_REGION", "us-east5"),
        ]);
        let spec = ModelSpec::parse("vertex/claude-sonnet-4-5@20250929").unwrap();
        let r = resolve(spec, &none, &e, "model").unwrap();
        assert_eq!(
            r.endpoint,
            "https://us-east5-aiplatform.googleapis.com/v1/projects/p1/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929"
        );
        // A regional endpoint costs 10% more than the global one.
        assert_eq!(
            r.pricing,
            crate::model::price::vertex_price("claude-sonnet-4-5@20250929", "us-east5")
        );
        assert!((r.pricing.unwrap().input - 3.3).abs() < 1e-9);
        let e = vertex_env(&[
            ("ANTHROPIC_VERTEX_PROJECT_ID", "p2"),
            ("VERTEX_BASE_URL", "http://127.0.0.1:7"),
        ]);
        let spec = ModelSpec::parse("vertex/gemini-2.5-pro").unwrap();
        let r = resolve(spec, &none, &e, "model").unwrap();
        assert_eq!(
            r.endpoint,
            "http://127.0.0.1:7/v1/projects/p2/locations/global/publishers/google/models/gemini-2.5-pro"
        );
        let spec = ModelSpec::parse("vertex/llama-4").unwrap();
        let err = resolve(spec, &none, &e, "model").unwrap_err();
        assert!(
            err.0.contains("claude")
                && err.0.contains("gemini")
                && err.0.contains("'llama-4' is neither"),
            "{}",
            err.0
        );
    }

    #[test]
    fn a_named_vertex_provider_wins_over_the_variables() {
        let config: crate::config::Config = serde_yaml::from_str(
            "providers:\n  eu:\n    api: vertex\n    project: mine\n    region: europe-west1\n",
        )
        .unwrap();
        let e = vertex_env(&[
            ("GOOGLE_CLOUD_PROJECT", "p1"),
            ("GOOGLE_CLOUD_LOCATION", "us-east5"),
        ]);
        let spec = ModelSpec::parse("eu/claude-haiku-4-5@20251001").unwrap();
        let r = resolve(spec, &config.providers, &e, "fallback model").unwrap();
        assert_eq!(
            r.endpoint,
            "https://europe-west1-aiplatform.googleapis.com/v1/projects/mine/locations/europe-west1/publishers/anthropic/models/claude-haiku-4-5@20251001"
        );
    }

    #[test]
    fn the_gemini_key_is_either_variable_and_the_error_names_both() {
        let none = BTreeMap::new();
        let spec = || ModelSpec::parse("gemini/gemini-2.5-flash").unwrap();
        let r = resolve(spec(), &none, &env(&[("GOOGLE_API_KEY", "g")]), "model").unwrap();
        assert_eq!(r.api_key.as_deref(), Some("g"));
        assert_eq!(
            r.endpoint,
            "https://generativelanguage.googleapis.com/v1beta"
        );
        let r = resolve(
            spec(),
            &none,
            &env(&[("GOOGLE_API_KEY", "g"), ("GEMINI_API_KEY", "k")]),
            "model",
        )
        .unwrap();
        assert_eq!(r.api_key.as_deref(), Some("k"));
        let e = resolve(spec(), &none, &env(&[]), "model").unwrap_err();
        assert_eq!(
            e.0,
            "model 'gemini/gemini-2.5-flash': the API key variable GEMINI_API_KEY (or GOOGLE_API_KEY) is not set"
        );
    }

    #[test]
    fn the_gemini_keys_source_is_the_variable_that_holds_it() {
        use super::gemini_key_source;
        let none = BTreeMap::new();
        let spec = || ModelSpec::parse("gemini/gemini-2.5-flash").unwrap();
        let e = env(&[("GOOGLE_API_KEY", "g")]);
        let r = resolve(spec(), &none, &e, "model").unwrap();
        assert_eq!(
            gemini_key_source(&r, &none, &e).as_deref(),
            Some("environment (GOOGLE_API_KEY)")
        );
        let e = env(&[("GOOGLE_API_KEY", "g"), ("GEMINI_API_KEY", "k")]);
        let r = resolve(spec(), &none, &e, "model").unwrap();
        assert_eq!(
            gemini_key_source(&r, &none, &e).as_deref(),
            Some("environment (GEMINI_API_KEY)")
        );
        let config: crate::config::Config =
            serde_yaml::from_str("providers:\n  g2:\n    api: gemini\n    api_key_env: TEAM_KEY\n")
                .unwrap();
        let e = env(&[("TEAM_KEY", "t"), ("GEMINI_API_KEY", "k")]);
        let spec = ModelSpec::parse("g2/gemini-2.5-pro").unwrap();
        let r = resolve(spec, &config.providers, &e, "model").unwrap();
        assert_eq!(
            gemini_key_source(&r, &config.providers, &e).as_deref(),
            Some("environment (TEAM_KEY)")
        );
    }

    #[test]
    fn a_named_gemini_provider_needs_no_endpoint_but_others_do() {
        let config: crate::config::Config =
            serde_yaml::from_str("providers:\n  g2:\n    api: gemini\n  gw:\n    api: openai\n")
                .unwrap();
        let e = env(&[
            ("GEMINI_API_KEY", "k"),
            ("GEMINI_BASE_URL", "http://127.0.0.1:9/v1beta"),
        ]);
        let spec = ModelSpec::parse("g2/gemini-2.5-pro").unwrap();
        let r = resolve(spec, &config.providers, &e, "model").unwrap();
        assert_eq!(r.endpoint, "http://127.0.0.1:9/v1beta");
        assert_eq!(r.api_key.as_deref(), Some("k"));
        let spec = ModelSpec::parse("gw/m").unwrap();
        let err = resolve(spec, &config.providers, &e, "model").unwrap_err();
        assert_eq!(
            err.0,
            "model 'gw/m': provider 'gw' has no endpoint (required for api: openai)"
        );
    }
}
