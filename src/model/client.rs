//! The process's one HTTP client and how a URL may be shown: what the
//! wire adapters (`http.rs`) and the credential sources (`credentials/`)
//! share, so that neither depends on the other.

use std::sync::OnceLock;
use std::time::Duration;

/// The process's one HTTP client. Proxies come from `HTTP(S)_PROXY`/`NO_PROXY`;
/// a host that does not resolve is named (`unreachable::Resolver`).
pub(crate) fn shared_client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .user_agent(concat!("tinyagent/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(30))
            .dns_resolver(std::sync::Arc::new(super::unreachable::Resolver))
            .build()
            .unwrap_or_default()
    })
}

/// A URL as it may be shown: scheme, host, port and path; never a user,
/// password, query or fragment (where keys hide).
pub(crate) fn display_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => {
            let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
            format!(
                "{}://{}{port}{}",
                u.scheme(),
                u.host_str().unwrap_or(""),
                u.path()
            )
        }
        Err(_) => "an invalid URL".into(),
    }
}
