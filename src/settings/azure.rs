//! An Azure OpenAI member resolved (SPEC 22): its resource endpoint (a
//! named provider's own `endpoint`, else `AZURE_OPENAI_ENDPOINT`) made into
//! the `/openai/v1` base, or with an `api-version` (a named provider's own
//! `api_version`, else `AZURE_OPENAI_API_VERSION`) the deployment's classic
//! URL; and its credentials found before any request: the key
//! (`AZURE_OPENAI_API_KEY`, or a named provider's `api_key_env`) sent as
//! `api-key`, else `AZURE_OPENAI_AD_TOKEN` as a bearer token, else a
//! Microsoft Entra ID token for Azure AI services from Azure's credential
//! chain (`model/credentials/azure/`). A setup error names the member and
//! every place looked in, never a value.

use std::sync::Arc;

use crate::config::ProviderConfig;
use crate::model::credentials::azure::{self as entra, COGNITIVE_SERVICES_SCOPE};
use crate::model::credentials::{Credentials, StaticKey};
use crate::model::spec::{FoundCredentials, ModelSpec, ResolvedModel};
use crate::setup::{Env, SetupError};

/// The resource endpoint's variable.
const ENDPOINT_VAR: &str = "AZURE_OPENAI_ENDPOINT";
/// The key's variable, sent as `api-key`.
const KEY_VAR: &str = "AZURE_OPENAI_API_KEY";
/// A Microsoft Entra ID token's variable, sent as a bearer token.
const TOKEN_VAR: &str = "AZURE_OPENAI_AD_TOKEN";
/// The variable asking for the classic URL with this `api-version`.
const VERSION_VAR: &str = "AZURE_OPENAI_API_VERSION";

/// A named provider's own `endpoint`, `api_version` and `api_key_env`.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Overrides<'a> {
    pub endpoint: Option<&'a str>,
    pub api_version: Option<&'a str>,
    pub key_env: Option<&'a str>,
}

/// A named provider that sets `api_version` for another API: an error,
/// since nothing would read it.
pub(super) fn check_api_version(
    provider: &ProviderConfig,
    what: &str,
    spec: &ModelSpec,
) -> Result<(), SetupError> {
    if provider.api == crate::model::azure::API.name || provider.api_version.is_none() {
        return Ok(());
    }
    Err(SetupError(format!(
        "{what} '{spec}': provider '{}' sets api_version, which only api: azure takes",
        spec.provider()
    )))
}

/// Fills in `resolved`'s endpoint, `api_version` and credentials; `what`
/// names the setting.
pub(super) fn resolve(
    resolved: &mut ResolvedModel,
    overrides: Overrides<'_>,
    env: Env,
    what: &str,
) -> Result<(), SetupError> {
    let spec = resolved.spec.to_string();
    let fail = |problem: String| SetupError(format!("{what} '{spec}': {problem}"));
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let (endpoint, endpoint_source) = match overrides.endpoint {
        Some(own) => (own.to_string(), "the provider's endpoint"),
        None => (
            var(ENDPOINT_VAR).ok_or_else(|| {
                fail(format!(
                    "Azure OpenAI needs the resource's endpoint: {ENDPOINT_VAR} is not set (https://<resource>.openai.azure.com)"
                ))
            })?,
            ENDPOINT_VAR,
        ),
    };
    let base = resource_base(&endpoint)
        .ok_or_else(|| fail(format!("{endpoint_source} is not an http(s) URL")))?;
    let deployment = resolved.spec.model();
    if deployment.contains(['/', '?', '#', '%', ' ']) {
        return Err(fail(format!(
            "'{deployment}' cannot be an Azure OpenAI deployment name"
        )));
    }
    let api_version = overrides
        .api_version
        .map(str::to_string)
        .or_else(|| var(VERSION_VAR));
    if let Some(version) = &api_version {
        if !version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        {
            return Err(fail(format!(
                "'{version}' cannot be an Azure OpenAI api-version"
            )));
        }
    }
    resolved.endpoint = match &api_version {
        Some(_) => format!("{base}/openai/deployments/{deployment}"),
        None => format!("{base}/openai/v1"),
    };
    resolved.api_version = api_version;
    resolved.credentials = Some(FoundCredentials(
        credentials(overrides.key_env, env).map_err(|e| fail(e.to_string()))?,
    ));
    // The key goes in its own header, never as `Authorization` too.
    resolved.api_key = None;
    if resolved.pricing.is_none() {
        // A named provider's deployments are priced by the table too.
        resolved.pricing = crate::model::price::builtin_price("azure", deployment);
    }
    Ok(())
}

/// Why no Azure credentials could be made (never a value).
#[derive(Debug, thiserror::Error)]
enum CredentialsError {
    #[error("the API key variable {0} is not set")]
    KeyUnset(String),
    #[error("no Azure OpenAI credentials: neither {KEY_VAR} nor {TOKEN_VAR} is set, and {0}")]
    NoneSet(entra::FindError),
    /// A chain member set but unusable (its own message names it).
    #[error("{0}")]
    Chain(entra::FindError),
    /// A value that cannot be a header (its own message names the variable).
    #[error("{0}")]
    BadValue(String),
}

/// The key of `key_env` (a named provider's), else `AZURE_OPENAI_API_KEY`,
/// as `api-key`; else `AZURE_OPENAI_AD_TOKEN` as a bearer token; else
/// Azure's credential chain.
fn credentials(key_env: Option<&str>, env: Env) -> Result<Arc<dyn Credentials>, CredentialsError> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let source = |name: &str| format!("environment ({name})");
    let header_error = |e: SetupError| CredentialsError::BadValue(e.0);
    let key = if let Some(name) = key_env {
        let key = var(name).ok_or_else(|| CredentialsError::KeyUnset(name.to_string()))?;
        StaticKey::header("api-key", &key, source(name))
    } else if let Some(key) = var(KEY_VAR) {
        StaticKey::header("api-key", &key, source(KEY_VAR))
    } else if let Some(token) = var(TOKEN_VAR) {
        StaticKey::bearer(&token, source(TOKEN_VAR))
    } else {
        return match entra::find(env, COGNITIVE_SERVICES_SCOPE) {
            Ok(chain) => Ok(Arc::new(chain)),
            Err(e @ entra::FindError::NotFound(_)) => Err(CredentialsError::NoneSet(e)),
            Err(e) => Err(CredentialsError::Chain(e)),
        };
    };
    Ok(Arc::new(key.map_err(header_error)?))
}

/// `scheme://host[:port][/path]` of a resource endpoint, without a trailing
/// `/` and without the `/openai` or `/openai/v1` that users copy from the
/// portal along with it; `None` when it is not an http(s) URL.
fn resource_base(endpoint: &str) -> Option<String> {
    let url = url::Url::parse(endpoint.trim()).ok()?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return None;
    }
    let text = endpoint.trim().trim_end_matches('/');
    let text = text.strip_suffix("/openai/v1").unwrap_or(text);
    let text = text.strip_suffix("/openai").unwrap_or(text);
    Some(text.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::resource_base;
    use crate::model::spec::ModelSpec;
    use crate::settings::models::resolve;
    use crate::setup::fixed_env as env;

    const ENDPOINT: &str = "https://res.openai.azure.com/";

    #[test]
    fn the_v1_base_or_the_classic_deployment_url() {
        let none = BTreeMap::new();
        let spec = || ModelSpec::parse("azure/gpt-4o").unwrap();
        let e = env(&[
            ("AZURE_OPENAI_ENDPOINT", ENDPOINT),
            ("AZURE_OPENAI_API_KEY", "k"),
        ]);
        let r = resolve(spec(), &none, &e, "model").unwrap();
        assert_eq!(r.endpoint, "https://res.openai.azure.com/openai/v1");
        assert_eq!(r.api_version, None);
        assert_eq!(r.api_key, None, "the key is never a bearer token too");
        let source = r.credentials.as_ref().unwrap().0.source();
        assert_eq!(source, "environment (AZURE_OPENAI_API_KEY)");
        assert_eq!(
            r.pricing,
            crate::model::price::builtin_price("openai", "gpt-4o")
        );
        let e = env(&[
            (
                "AZURE_OPENAI_ENDPOINT",
                "https://res.openai.azure.com/openai/v1/",
            ),
            ("AZURE_OPENAI_AD_TOKEN", "t"),
            ("AZURE_OPENAI_API_VERSION", "2024-10-21"),
        ]);
        let r = resolve(spec(), &none, &e, "model").unwrap();
        assert_eq!(
            r.endpoint,
            "https://res.openai.azure.com/openai/deployments/gpt-4o"
        );
        assert_eq!(r.api_version.as_deref(), Some("2024-10-21"));
        let source = r.credentials.as_ref().unwrap().0.source();
        assert_eq!(source, "environment (AZURE_OPENAI_AD_TOKEN)");
    }

    #[test]
    fn missing_credentials_or_endpoint_name_the_variables() {
        let none = BTreeMap::new();
        let spec = || ModelSpec::parse("azure/prod-chat").unwrap();
        let e = env(&[
            ("AZURE_OPENAI_ENDPOINT", ENDPOINT),
            ("AZURE_POD_IDENTITY_AUTHORITY_HOST", "http://127.0.0.1:9"),
            ("PATH", "/nonexistent"),
        ]);
        let err = resolve(spec(), &none, &e, "fallback model").unwrap_err();
        assert!(
            err.0.starts_with(
                "fallback model 'azure/prod-chat': no Azure OpenAI credentials: neither AZURE_OPENAI_API_KEY nor AZURE_OPENAI_AD_TOKEN is set, and no Microsoft Entra ID credentials found (looked in a service principal"
            ),
            "{}",
            err.0
        );
        assert!(
            err.0.contains("the Azure CLI (az not found on PATH)"),
            "{}",
            err.0
        );
        let e = env(&[("AZURE_OPENAI_API_KEY", "secret-value")]);
        let err = resolve(spec(), &none, &e, "model").unwrap_err();
        assert!(
            err.0.contains("AZURE_OPENAI_ENDPOINT is not set"),
            "{}",
            err.0
        );
        assert!(!err.0.contains("secret-value"));
        let e = env(&[
            ("AZURE_OPENAI_ENDPOINT", ENDPOINT),
            ("AZURE_OPENAI_API_KEY", "k"),
            ("AZURE_OPENAI_API_VERSION", "2024-10-21&x=1"),
        ]);
        let err = resolve(spec(), &none, &e, "model").unwrap_err();
        assert!(
            err.0.contains("cannot be an Azure OpenAI api-version"),
            "{}",
            err.0
        );
        let e = env(&[
            ("AZURE_OPENAI_ENDPOINT", "res.openai.azure.com"),
            ("AZURE_OPENAI_API_KEY", "k"),
        ]);
        let err = resolve(spec(), &none, &e, "model").unwrap_err();
        assert_eq!(
            err.0,
            "model 'azure/prod-chat': AZURE_OPENAI_ENDPOINT is not an http(s) URL"
        );
    }

    #[test]
    fn a_named_azure_provider_has_its_own_endpoint_version_and_key() {
        let config: crate::config::Config = serde_yaml::from_str(
            "providers:\n  eastus:\n    api: azure\n    endpoint: https://east.openai.azure.com\n    api_version: 2025-04-01-preview\n    api_key_env: EAST_KEY\n  gw:\n    api: openai\n    endpoint: http://127.0.0.1:9/v1\n    api_version: 2024-10-21\n",
        )
        .unwrap();
        let e = env(&[
            ("EAST_KEY", "east"),
            ("AZURE_OPENAI_ENDPOINT", ENDPOINT),
            ("AZURE_OPENAI_API_KEY", "k"),
        ]);
        let spec = ModelSpec::parse("eastus/gpt-5-mini").unwrap();
        let r = resolve(spec, &config.providers, &e, "model").unwrap();
        assert_eq!(
            r.endpoint,
            "https://east.openai.azure.com/openai/deployments/gpt-5-mini"
        );
        assert_eq!(r.api_version.as_deref(), Some("2025-04-01-preview"));
        assert_eq!(
            r.credentials.as_ref().unwrap().0.source(),
            "environment (EAST_KEY)"
        );
        assert_eq!(
            r.pricing,
            crate::model::price::builtin_price("openai", "gpt-5-mini")
        );
        let err = resolve(
            ModelSpec::parse("eastus/gpt-5-mini").unwrap(),
            &config.providers,
            &env(&[("AZURE_OPENAI_API_KEY", "k")]),
            "model",
        )
        .unwrap_err();
        assert_eq!(
            err.0,
            "model 'eastus/gpt-5-mini': the API key variable EAST_KEY is not set"
        );
        let err = resolve(
            ModelSpec::parse("gw/m").unwrap(),
            &config.providers,
            &e,
            "model",
        )
        .unwrap_err();
        assert_eq!(
            err.0,
            "model 'gw/m': provider 'gw' sets api_version, which only api: azure takes"
        );
    }

    #[test]
    fn the_portal_suffixes_are_dropped_from_the_endpoint() {
        for given in [
            "https://r.openai.azure.com",
            "https://r.openai.azure.com/",
            "https://r.openai.azure.com/openai",
            "https://r.openai.azure.com/openai/v1/",
        ] {
            assert_eq!(
                resource_base(given).as_deref(),
                Some("https://r.openai.azure.com"),
                "{given}"
            );
        }
        assert_eq!(
            resource_base("http://127.0.0.1:8080/proxy").as_deref(),
            Some("http://127.0.0.1:8080/proxy")
        );
        assert_eq!(resource_base("ftp://r"), None);
    }
}
