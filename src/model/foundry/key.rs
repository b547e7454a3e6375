//! A Foundry key, sent as anthropic's `AnthropicFoundry` client sends it:
//! as `x-api-key` (what the endpoint reads) and as `api-key` (kept by the
//! client for older endpoints), both marked sensitive.

use std::fmt;

use crate::model::credentials::{Credentials, StaticKey};
use crate::model::ModelError;
use crate::setup::SetupError;

/// The key in both of the client's headers.
pub(super) struct FoundryKey {
    x_api_key: StaticKey,
    api_key: StaticKey,
}

impl fmt::Debug for FoundryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FoundryKey")
            .field("source", &self.x_api_key.source())
            .finish_non_exhaustive()
    }
}

impl FoundryKey {
    /// `key`, found in `source` (a variable's name, for `--check`).
    pub(super) fn new(key: &str, source: &str) -> Result<FoundryKey, SetupError> {
        Ok(FoundryKey {
            x_api_key: StaticKey::header("x-api-key", key, source)?,
            api_key: StaticKey::header("api-key", key, source)?,
        })
    }
}

#[async_trait::async_trait]
impl Credentials for FoundryKey {
    async fn authorize(&self, request: &mut reqwest::Request) -> Result<(), ModelError> {
        self.x_api_key.authorize(request).await?;
        self.api_key.authorize(request).await
    }

    fn identity(&self) -> String {
        self.x_api_key.identity()
    }

    fn source(&self) -> String {
        self.x_api_key.source()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn both_headers_carry_the_key_and_nothing_prints_it() {
        let key = FoundryKey::new("f0undry", "environment (ANTHROPIC_FOUNDRY_API_KEY)").unwrap();
        let mut request = reqwest::Client::new()
            .post("http://127.0.0.1:9/v1/messages")
            .build()
            .unwrap();
        key.authorize(&mut request).await.unwrap();
        assert_eq!(request.headers()["x-api-key"], "f0undry");
        assert_eq!(request.headers()["api-key"], "f0undry");
        assert!(request.headers()["x-api-key"].is_sensitive());
        assert!(request.headers().get("authorization").is_none());
        let shown = format!("{key:?} {} {}", key.identity(), key.source());
        assert!(!shown.contains("f0undry"), "{shown}");
    }
}
