//! Credentials that authorize each request (SPEC 22): the `Credentials`
//! seam a transport calls just before sending, and `StaticKey`, a key sent
//! in a header of the provider's choosing. A cloud's signer or token source
//! is one more implementation in this folder; the gate and the chain never
//! see one.

pub(crate) mod aws;
mod aws_http;
pub(crate) mod azure;
pub(crate) mod google;

use std::fmt;

use reqwest::header::{HeaderName, HeaderValue};

use super::ModelError;
use crate::setup::SetupError;

/// What authorizes a provider's requests. Implementations cache and refresh
/// whatever expires, once per process however many requests are in flight.
#[async_trait::async_trait]
pub(crate) trait Credentials: Send + Sync + fmt::Debug {
    /// Authorizes one request about to be sent (adds headers; a signer
    /// reads the method, URL, headers and body). A token endpoint that
    /// cannot be reached is a `ModelError::Network`; one that refuses the
    /// credentials an auth error naming where they came from.
    async fn authorize(&self, request: &mut reqwest::Request) -> Result<(), ModelError>;

    /// A stable identity for the pacing and health records: never the
    /// secret, and the same across token refreshes.
    fn identity(&self) -> String;

    /// Where the credentials were found, for `--check` (for example
    /// `environment (GEMINI_API_KEY)`); never a value.
    fn source(&self) -> String;

    /// Drops a cached token after a 401/403 saying it expired; `true` when
    /// sending again with a fresh one may help.
    fn invalidate(&self) -> bool {
        false
    }
}

/// A key sent as one header on every request (`api-key: …`,
/// `x-goog-api-key: …`, `Authorization: Bearer …`).
pub(crate) struct StaticKey {
    name: HeaderName,
    value: HeaderValue,
    /// Where the key came from (a variable's name), for `--check`.
    source: String,
}

impl fmt::Debug for StaticKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the value: it is the key.
        f.debug_struct("StaticKey")
            .field("header", &self.name)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl StaticKey {
    /// `header: key`, marked sensitive so no log of the request shows it.
    pub(crate) fn header(
        header: &'static str,
        key: &str,
        source: impl Into<String>,
    ) -> Result<StaticKey, SetupError> {
        let mut value = HeaderValue::from_str(key)
            .map_err(|_| SetupError("the API key holds characters a header cannot carry".into()))?;
        value.set_sensitive(true);
        Ok(StaticKey {
            name: HeaderName::from_static(header),
            value,
            source: source.into(),
        })
    }

    /// `Authorization: Bearer <token>`.
    pub(crate) fn bearer(token: &str, source: impl Into<String>) -> Result<StaticKey, SetupError> {
        StaticKey::header("authorization", &format!("Bearer {token}"), source)
    }
}

#[async_trait::async_trait]
impl Credentials for StaticKey {
    async fn authorize(&self, request: &mut reqwest::Request) -> Result<(), ModelError> {
        request
            .headers_mut()
            .insert(self.name.clone(), self.value.clone());
        Ok(())
    }

    fn identity(&self) -> String {
        format!("key:{}", self.source)
    }

    fn source(&self) -> String {
        self.source.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::{Credentials, StaticKey};

    #[tokio::test]
    async fn a_static_key_is_sent_in_its_header_and_never_printed() {
        let key =
            StaticKey::header("api-key", "s3cret", "environment (AZURE_OPENAI_API_KEY)").unwrap();
        let mut request = reqwest::Client::new()
            .post("http://127.0.0.1:9/x")
            .build()
            .unwrap();
        key.authorize(&mut request).await.unwrap();
        assert_eq!(request.headers()["api-key"], "s3cret");
        assert!(request.headers()["api-key"].is_sensitive());
        let shown = format!("{key:?} {} {}", key.identity(), key.source());
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn a_key_a_header_cannot_carry_is_a_setup_error() {
        assert!(StaticKey::bearer("bad\nkey", "environment (X)").is_err());
    }
}
