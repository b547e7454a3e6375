//! Microsoft Entra ID tokens from Azure's credential chain (SPEC 22), for
//! any provider that names a scope: found as the Azure SDKs'
//! `DefaultAzureCredential` finds them (`find.rs`: a service principal from
//! the environment, workload identity, a managed identity, the Azure CLI),
//! fetched with the first request, cached, and refreshed before they
//! expire, once however many requests are waiting.
//!
//! Not Microsoft's `azure_identity` crate: its `DefaultAzureCredential`
//! holds only the developer tools since 0.22 (no environment, workload or
//! managed identity), its certificate credential needs OpenSSL, and its
//! `azure_core` brings a second HTTP pipeline; here every token request goes
//! through the process's one client (`client.rs`), and `jsonwebtoken`
//! signs the certificate's client assertion as it signs Google's JWTs.

mod certificate;
mod cli;
mod find;
mod token;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderValue, AUTHORIZATION};
use tokio::sync::Mutex;

use super::Credentials;
use crate::model::client::shared_client;
use crate::model::ModelError;

pub(crate) use find::{find, FindError};

/// The scope of Azure OpenAI (Azure AI services), as openai's `AzureOpenAI`
/// samples ask for it.
pub(crate) const COGNITIVE_SERVICES_SCOPE: &str = "https://cognitiveservices.azure.com/.default";

/// The scope of Claude on Microsoft Foundry, as anthropic's
/// `AnthropicFoundry` documents it (for the `foundry` provider's row).
pub(crate) const FOUNDRY_SCOPE: &str = "https://ai.azure.com/.default";

/// A token is refreshed this long before it expires at most (as the Azure
/// SDKs do), and at least half-way through its life.
const REFRESH_EARLY: Duration = Duration::from_secs(300);

/// The chain member found, with what it needs (secrets included: never
/// printed, see `Debug`).
enum Member {
    /// A service principal's client secret (`AZURE_CLIENT_SECRET`).
    Secret {
        token_url: String,
        tenant: String,
        client_id: String,
        secret: String,
    },
    /// A service principal's certificate (`AZURE_CLIENT_CERTIFICATE_PATH`):
    /// a client assertion signed with its key.
    Certificate {
        token_url: String,
        tenant: String,
        client_id: String,
        signer: certificate::Signer,
    },
    /// Workload identity: the federated token in `file`, read at each
    /// fetch, is the client assertion.
    Workload {
        token_url: String,
        tenant: String,
        client_id: String,
        file: PathBuf,
    },
    /// App Service's managed identity endpoint (`IDENTITY_ENDPOINT`).
    AppService {
        endpoint: String,
        header: HeaderValue,
        client_id: Option<String>,
    },
    /// The instance metadata service (`base` is its scheme and host).
    Imds {
        base: String,
        client_id: Option<String>,
    },
    /// The Azure CLI's own token.
    Cli {
        program: PathBuf,
        config_dir: PathBuf,
    },
}

/// Entra ID credentials found, with their cached token.
pub(crate) struct AzureCredentials {
    member: Member,
    scope: String,
    /// Where they were found, for `--check` and errors.
    source: String,
    token: Mutex<Option<(HeaderValue, Instant)>>,
    /// Whether a token was ever fetched.
    fetched: AtomicBool,
}

impl std::fmt::Debug for AzureCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureCredentials")
            .field("source", &self.source)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// What a managed identity is asked for: the scope without `/.default`.
fn resource_of(scope: &str) -> &str {
    scope.strip_suffix("/.default").unwrap_or(scope)
}

impl AzureCredentials {
    fn new(member: Member, scope: &str, source: String) -> Self {
        AzureCredentials {
            member,
            scope: scope.to_string(),
            source,
            token: Mutex::new(None),
            fetched: AtomicBool::new(false),
        }
    }

    /// A fresh token and how long it lasts.
    async fn fetch(&self) -> Result<token::Token, ModelError> {
        let source = self.source.as_str();
        match &self.member {
            Member::Secret {
                token_url,
                client_id,
                secret,
                ..
            } => {
                self.grant(token_url, client_id, ("client_secret", secret))
                    .await
            }
            Member::Certificate {
                token_url,
                client_id,
                signer,
                ..
            } => {
                let assertion = signer.assertion(client_id, token_url).map_err(|()| {
                    token::refused(source, 401, "its private key could not sign an assertion")
                })?;
                self.grant(token_url, client_id, ("client_assertion", &assertion))
                    .await
            }
            Member::Workload {
                token_url,
                client_id,
                file,
                ..
            } => {
                // Read at each fetch: the platform rotates the file.
                let assertion = tokio::fs::read_to_string(file)
                    .await
                    .ok()
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| {
                        let why = format!("{} cannot be read or is empty", file.display());
                        token::refused(source, 401, &why)
                    })?;
                self.grant(token_url, client_id, ("client_assertion", &assertion))
                    .await
            }
            Member::AppService {
                endpoint,
                header,
                client_id,
            } => {
                let request = self
                    .managed(endpoint, "2019-08-01", client_id.as_deref())
                    .header("X-IDENTITY-HEADER", header.clone());
                let secret = header.to_str().unwrap_or_default();
                token::call(source, endpoint, request, &[secret]).await
            }
            Member::Imds { base, client_id } => {
                let url = format!("{base}/metadata/identity/oauth2/token");
                let request = self.managed(&url, "2018-02-01", client_id.as_deref());
                token::call(source, &url, request, &[]).await
            }
            Member::Cli {
                program,
                config_dir,
            } => cli::token(source, program, config_dir, &self.scope).await,
        }
    }

    /// Entra ID's client credentials grant with `credential`: the client
    /// secret, or a client assertion.
    async fn grant(
        &self,
        token_url: &str,
        client_id: &str,
        credential: (&str, &str),
    ) -> Result<token::Token, ModelError> {
        let mut form = vec![
            ("grant_type", "client_credentials"),
            ("client_id", client_id),
            ("scope", self.scope.as_str()),
            credential,
        ];
        if credential.0 == "client_assertion" {
            form.push((
                "client_assertion_type",
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            ));
        }
        let request = shared_client().post(token_url).form(&form);
        token::call(&self.source, token_url, request, &[credential.1]).await
    }

    /// A managed identity endpoint's token request (`Metadata: true`, as
    /// the instance metadata service needs and App Service takes).
    fn managed(
        &self,
        url: &str,
        api_version: &str,
        client_id: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let mut query = vec![
            ("api-version", api_version),
            ("resource", resource_of(&self.scope)),
        ];
        if let Some(id) = client_id {
            query.push(("client_id", id));
        }
        shared_client()
            .get(url)
            .query(&query)
            .header("Metadata", "true")
    }
}

/// When a token that lasts `lifetime` from now should be fetched again.
fn refresh_at(lifetime: Duration) -> Instant {
    Instant::now() + lifetime - REFRESH_EARLY.min(lifetime / 2)
}

#[async_trait::async_trait]
impl Credentials for AzureCredentials {
    async fn authorize(&self, request: &mut reqwest::Request) -> Result<(), ModelError> {
        // One fetch at a time: requests in flight wait for the same token.
        let mut token = self.token.lock().await;
        let fresh = token
            .as_ref()
            .is_some_and(|(_, refresh)| Instant::now() < *refresh);
        if !fresh {
            let fetched = self.fetch().await?;
            let mut header =
                HeaderValue::from_str(&format!("Bearer {}", fetched.value)).map_err(|_| {
                    ModelError::Network {
                        message: format!("the token from {} cannot be sent", self.source),
                    }
                })?;
            header.set_sensitive(true);
            *token = Some((header, refresh_at(fetched.lifetime)));
            self.fetched.store(true, Ordering::Relaxed);
        }
        if let Some((header, _)) = token.as_ref() {
            request.headers_mut().insert(AUTHORIZATION, header.clone());
        }
        Ok(())
    }

    fn identity(&self) -> String {
        match &self.member {
            Member::Secret {
                tenant, client_id, ..
            }
            | Member::Certificate {
                tenant, client_id, ..
            }
            | Member::Workload {
                tenant, client_id, ..
            } => format!("azure:{tenant}/{client_id}"),
            Member::AppService { client_id, .. } | Member::Imds { client_id, .. } => format!(
                "azure:managed-identity:{}",
                client_id.as_deref().unwrap_or("system")
            ),
            Member::Cli { config_dir, .. } => format!("azure:cli:{}", config_dir.display()),
        }
    }

    fn source(&self) -> String {
        self.source.clone()
    }

    /// Drops the cached token. Worth one more try once a token was ever
    /// fetched (another request in flight may have dropped the same one, or
    /// be fetching its successor); not after a first fetch was refused.
    fn invalidate(&self) -> bool {
        match self.token.try_lock() {
            Ok(mut token) => token.take().is_some() || self.fetched.load(Ordering::Relaxed),
            Err(_) => true,
        }
    }
}

#[cfg(test)]
mod tests;
