//! A Foundry member resolved (SPEC 22), its API's settings hook: the base
//! (a named provider's own `endpoint`, else `ANTHROPIC_FOUNDRY_BASE_URL`,
//! else `https://{ANTHROPIC_FOUNDRY_RESOURCE}.services.ai.azure.com/anthropic`)
//! and the credentials, found before any request: the key (a named
//! provider's `api_key_env`, else `ANTHROPIC_FOUNDRY_API_KEY`), else a
//! Microsoft Entra ID token from Azure's credential chain. A setup error
//! names the member and everything missing, every place looked in, never a
//! value.

use std::sync::Arc;

use super::key::FoundryKey;
use crate::model::api::ApiInput;
use crate::model::credentials::azure::{self as entra, FOUNDRY_SCOPE};
use crate::model::credentials::Credentials;
use crate::model::spec::{FoundCredentials, ResolvedModel};
use crate::setup::{Env, SetupError};

/// The resource's name: `{resource}.services.ai.azure.com`.
const RESOURCE_VAR: &str = "ANTHROPIC_FOUNDRY_RESOURCE";
/// A whole base in place of the resource's.
const BASE_VAR: &str = "ANTHROPIC_FOUNDRY_BASE_URL";
/// The key's variable.
const KEY_VAR: &str = "ANTHROPIC_FOUNDRY_API_KEY";

/// Fills in `resolved`'s endpoint and credentials; `what` names the
/// setting.
pub(super) fn resolve(
    resolved: &mut ResolvedModel,
    input: &ApiInput<'_>,
    env: Env,
    what: &str,
) -> Result<(), SetupError> {
    let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let base = match input.endpoint.map(str::to_string).or_else(|| var(BASE_VAR)) {
        Some(base) => http_base(&base).ok_or_else(|| {
            let source = input
                .endpoint
                .map_or(BASE_VAR, |_| "the provider's endpoint");
            format!("{source} is not an http(s) URL")
        }),
        None => match var(RESOURCE_VAR) {
            Some(resource) if is_resource_name(&resource) => Ok(format!(
                "https://{resource}.services.ai.azure.com/anthropic"
            )),
            Some(_) => Err(format!("{RESOURCE_VAR} is not a Foundry resource name")),
            None => Err(format!(
                "Microsoft Foundry needs its resource: neither {RESOURCE_VAR} nor {BASE_VAR} is set"
            )),
        },
    };
    let credentials = credentials(input.key_env, env).map_err(|e| e.to_string());
    let (base, credentials) = match (base, credentials) {
        (Ok(base), Ok(credentials)) => (base, credentials),
        (base, credentials) => {
            let problems: Vec<String> = [base.err(), credentials.err()]
                .into_iter()
                .flatten()
                .collect();
            return Err(SetupError(format!(
                "{what} '{}': {}",
                resolved.spec,
                problems.join("; ")
            )));
        }
    };
    resolved.endpoint = base;
    resolved.credentials = Some(FoundCredentials(credentials));
    // The key goes in its own headers, never as `Authorization` too.
    resolved.api_key = None;
    Ok(())
}

/// Why no Foundry credentials could be made (never a value).
#[derive(Debug, thiserror::Error)]
enum CredentialsError {
    /// A key that cannot be a header (its own message names the variable).
    #[error("{0}")]
    BadKey(String),
    #[error("the API key variable {0} is not set")]
    KeyUnset(String),
    #[error("no Microsoft Foundry credentials: {KEY_VAR} is not set, and {0}")]
    NoneSet(entra::FindError),
    /// A chain member set but unusable (its own message names it).
    #[error("{0}")]
    Chain(entra::FindError),
}

/// The key of `key_env` (a named provider's), else of
/// `ANTHROPIC_FOUNDRY_API_KEY`; else the credential kind "Azure": a
/// Microsoft Entra ID token for the scope anthropic's Foundry client asks
/// for, found by Azure's credential chain (SPEC 22).
fn credentials(key_env: Option<&str>, env: Env) -> Result<Arc<dyn Credentials>, CredentialsError> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let name = key_env.unwrap_or(KEY_VAR);
    if let Some(key) = var(name) {
        let key = FoundryKey::new(&key, &format!("environment ({name})"))
            .map_err(|e| CredentialsError::BadKey(e.0))?;
        return Ok(Arc::new(key));
    }
    if key_env.is_some() {
        return Err(CredentialsError::KeyUnset(name.to_string()));
    }
    match entra::find(env, FOUNDRY_SCOPE) {
        Ok(chain) => Ok(Arc::new(chain)),
        Err(e @ entra::FindError::NotFound(_)) => Err(CredentialsError::NoneSet(e)),
        Err(e) => Err(CredentialsError::Chain(e)),
    }
}

/// `base` without its trailing `/`, when it is an http(s) URL.
fn http_base(base: &str) -> Option<String> {
    let url = url::Url::parse(base.trim()).ok()?;
    let ok = matches!(url.scheme(), "http" | "https") && url.host_str().is_some();
    ok.then(|| base.trim().trim_end_matches('/').to_string())
}

/// Whether `name` can be a resource's host label.
fn is_resource_name(name: &str) -> bool {
    name.len() <= 63 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::spec::{ModelSpec, WireApi, WireOptions};
    use crate::setup::fixed_env as env;

    fn run(e: Env) -> Result<ResolvedModel, SetupError> {
        let mut r = ResolvedModel {
            spec: ModelSpec::parse("foundry/claude-sonnet-4-5").unwrap(),
            api: WireApi::named("foundry"),
            endpoint: String::new(),
            api_key: None,
            headers: BTreeMap::new(),
            pricing: None,
            context_window: None,
            max_output_tokens: None,
            reply_budget: None,
            wire: WireOptions::default(),
            credentials: None,
            api_version: None,
            region: None,
            prompt_cache: crate::model::PromptCache::On,
        };
        resolve(&mut r, &ApiInput::default(), e, "model").map(|()| r)
    }

    #[test]
    fn the_resource_makes_the_base_and_the_key_its_headers() {
        let e = env(&[
            ("ANTHROPIC_FOUNDRY_RESOURCE", "my-res"),
            ("ANTHROPIC_FOUNDRY_API_KEY", "k"),
        ]);
        let r = run(&e).unwrap();
        assert_eq!(r.endpoint, "https://my-res.services.ai.azure.com/anthropic");
        assert_eq!(r.api_key, None);
        let source = r.credentials.as_ref().unwrap().0.source();
        assert_eq!(source, "environment (ANTHROPIC_FOUNDRY_API_KEY)");
        let e = env(&[
            ("ANTHROPIC_FOUNDRY_RESOURCE", "my-res"),
            (
                "ANTHROPIC_FOUNDRY_BASE_URL",
                "http://127.0.0.1:9/anthropic/",
            ),
            ("ANTHROPIC_FOUNDRY_API_KEY", "k"),
        ]);
        assert_eq!(run(&e).unwrap().endpoint, "http://127.0.0.1:9/anthropic");
    }

    #[test]
    fn everything_missing_is_named_at_once() {
        // The chain's last places aimed at nothing: no metadata address, no `az`.
        const NO_AZURE: [(&str, &str); 2] = [
            ("AZURE_POD_IDENTITY_AUTHORITY_HOST", "http://127.0.0.1:9"),
            ("PATH", "/nonexistent"),
        ];
        let err = run(&env(&NO_AZURE)).unwrap_err().0;
        for name in [
            "model 'foundry/claude-sonnet-4-5'",
            "ANTHROPIC_FOUNDRY_RESOURCE",
            "ANTHROPIC_FOUNDRY_BASE_URL",
            "ANTHROPIC_FOUNDRY_API_KEY",
            "no Microsoft Entra ID credentials found (looked in a service principal",
        ] {
            assert!(err.contains(name), "{err}");
        }
        let e = env(&[
            ("ANTHROPIC_FOUNDRY_RESOURCE", "bad/name"),
            NO_AZURE[0],
            NO_AZURE[1],
        ]);
        let err = run(&e).unwrap_err().0;
        assert!(err.contains("not a Foundry resource name"), "{err}");
    }
}
