//! What resolving a model of Google's APIs adds (SPEC 22): the Gemini API's
//! second key variable (`GEMINI_API_KEY`, else `GOOGLE_API_KEY`) and its
//! default endpoint for named providers (`api: gemini`).

use crate::config::ProviderConfig;
use crate::model::spec::{builtin, WireApi};
use crate::setup::Env;

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
        WireApi::Gemini => {
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
    (api == WireApi::Gemini).then(|| GEMINI_KEYS[0].to_string())
}

/// The key of the Gemini API's variables, in order, when `var` (found
/// unset or not read) is its first.
pub(super) fn second_key(api: WireApi, var: &str, env: Env) -> Option<String> {
    if api == WireApi::Gemini && var == GEMINI_KEYS[0] {
        GEMINI_KEYS
            .iter()
            .find_map(|name| env(name).filter(|v| !v.is_empty()))
    } else {
        None
    }
}

/// The variables a missing key was looked for in, for the error.
pub(super) fn key_variables(api: WireApi, var: &str) -> String {
    if api == WireApi::Gemini && var == GEMINI_KEYS[0] {
        format!("{} (or {})", GEMINI_KEYS[0], GEMINI_KEYS[1])
    } else {
        var.to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::model::spec::ModelSpec;
    use crate::settings::models::resolve;
    use crate::setup::fixed_env as env;

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
