//! Builds the models a run asks from resolved models: the wire form of the
//! member's API (its value in `api.rs`), with the transport's key, headers and stream timeouts. The one
//! place that builds a `Member`, for the chain (`launch/prepare.rs`) and `--check`.

use std::path::Path;

use super::apis as api;
use super::http::{Auth, HttpTransport};
use super::member::Member;
use super::script::ScriptModel;
use super::spec::{ResolvedModel, WireApi};
use super::Model;
use crate::policy::StreamTimeouts;
use crate::setup::SetupError;

/// A member that could not be built (a setup error, exit 2).
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The `script/` model's file cannot be read or parsed.
    #[error("{0}")]
    Script(String),
    /// The transport refused a configured header.
    #[error("{0}")]
    Transport(String),
}

impl From<RegistryError> for SetupError {
    fn from(e: RegistryError) -> Self {
        SetupError(e.to_string())
    }
}

/// Builds the chain member for `resolved`.
pub(crate) fn build_member(
    resolved: &ResolvedModel,
    timeouts: StreamTimeouts,
) -> Result<Member, RegistryError> {
    let spec = &resolved.spec;
    let model: Box<dyn Model> = match api::of(resolved.api) {
        Some(api) => Box::new(
            (api.build)(transport(resolved, api.key, timeouts)?, resolved).with_wire(resolved.wire),
        ),
        None => Box::new(
            ScriptModel::load(Path::new(spec.model()))
                .map_err(|e| RegistryError::Script(e.to_string()))?,
        ),
    };
    let endpoint = (resolved.api != WireApi::SCRIPT)
        .then(|| origin(&resolved.endpoint))
        .flatten();
    Ok(Member::new(
        spec.clone(),
        model,
        resolved.pricing,
        resolved.context_window,
    )
    .with_health_key(resolved.health_key())
    .with_pace_key(resolved.pace_key())
    .with_endpoint(endpoint)
    .with_reply_budget(resolved.reply_budget)
    .with_prompt_cache(resolved.prompt_cache))
}

/// `scheme://host:port` of a base URL: no path, query or credentials (the
/// port is the scheme's default when the URL names none).
pub(crate) fn origin(endpoint: &str) -> Option<String> {
    let url = reqwest::Url::parse(endpoint).ok()?;
    let host = url.host_str()?;
    let port = url.port_or_known_default()?;
    Some(format!("{}://{host}:{port}", url.scheme()))
}

/// The HTTP transport of `resolved`, sending its key as `auth` says. A
/// provider that does not stream (`stream: false`) sends its headers only
/// once the whole reply is written, so its first "event" may take as long
/// as the idle limit allows a stream to be silent.
fn transport(
    resolved: &ResolvedModel,
    auth: Auth,
    mut timeouts: StreamTimeouts,
) -> Result<HttpTransport, RegistryError> {
    if !resolved.wire.stream {
        timeouts.first_event = timeouts.first_event.max(timeouts.idle);
    }
    let transport = HttpTransport::new(
        &resolved.endpoint,
        resolved.api_key.as_deref(),
        auth,
        &resolved.headers,
        timeouts,
    )
    .map_err(|e| RegistryError::Transport(e.0))?;
    Ok(match &resolved.credentials {
        Some(found) => transport.with_credentials(found.0.clone()),
        None => transport,
    })
}

#[cfg(test)]
mod tests {
    use super::origin;

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
}
