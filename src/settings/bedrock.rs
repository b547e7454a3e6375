//! A Bedrock member resolved (SPEC 22): its region, endpoint and profile
//! (a named provider's own win over the environment), and its credentials
//! found before any request, or a setup error naming the member and every
//! place looked in (never a value).

use crate::model::credentials::aws;
use crate::model::spec::{FoundCredentials, ResolvedModel};
use crate::setup::{Env, SetupError};

/// A named provider's own `region`, `endpoint` and `profile`.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Overrides<'a> {
    pub region: Option<&'a str>,
    pub endpoint: Option<&'a str>,
    pub profile: Option<&'a str>,
}

/// Fills in `resolved`'s endpoint and credentials; `what` names the setting.
pub(super) fn resolve(
    resolved: &mut ResolvedModel,
    overrides: Overrides<'_>,
    env: Env,
    what: &str,
) -> Result<(), SetupError> {
    let failed = |e: aws::AwsSetupError| SetupError(format!("{what} '{}': {e}", resolved.spec));
    let (place, credentials) =
        aws::member(overrides.region, overrides.endpoint, overrides.profile, env)
            .map_err(&failed)?;
    resolved.endpoint = place.endpoint;
    resolved.region = place.region;
    if resolved.pricing.is_none() {
        // A named provider's model ids are Bedrock's too.
        resolved.pricing = crate::model::price::builtin_price("bedrock", resolved.spec.model());
    }
    resolved.credentials = Some(FoundCredentials(credentials));
    Ok(())
}
