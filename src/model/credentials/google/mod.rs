//! Google Application Default Credentials for Vertex AI (SPEC 22), found in
//! gcloud's order: the file named by `GOOGLE_APPLICATION_CREDENTIALS` (a
//! service account key, whose signed JWT is exchanged at the file's
//! `token_uri`; or an `authorized_user` refresh token, exchanged at the
//! file's `token_uri` or Google's; or workload identity federation,
//! `external.rs`), else gcloud's
//! `application_default_credentials.json` (under `CLOUDSDK_CONFIG`, else
//! `~/.config/gcloud`), else the metadata server (`GCE_METADATA_HOST`, or
//! `metadata.google.internal` on a machine that says it is on Google Cloud).
//!
//! `find` only reads files (validation, exit 2); the first token is fetched
//! with the first request, cached for the process (every member built from
//! the same credentials shares it: `shared_slot`), and refreshed a minute
//! before it expires, once however many requests are waiting.
//! The JWT is signed here with `jsonwebtoken` (RS256): `google-cloud-auth`'s
//! service accounts sign their own tokens and never ask a `token_uri`.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderValue, AUTHORIZATION};
use serde::Deserialize;
use tokio::sync::Mutex;

mod external;

use super::Credentials;
use crate::model::client::{display_url, shared_client};
use crate::model::ModelError;
use crate::setup::Env;

/// Google's OAuth token endpoint, for a refresh token whose file names none.
const GOOGLE_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// What Vertex AI needs.
pub(super) const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The metadata server's name on Google Cloud (never asked elsewhere).
const METADATA_HOST: &str = "metadata.google.internal";
/// A token is refreshed this long before it expires.
const REFRESH_EARLY: Duration = Duration::from_secs(60);
/// The most a token endpoint's answer may hold.
pub(super) const MAX_TOKEN_REPLY: usize = 64 << 10;
/// How long a token endpoint may take.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the credentials are and what they hold (secrets included: never
/// printed, see `Debug`).
enum Kind {
    ServiceAccount {
        client_email: String,
        private_key: String,
        token_uri: String,
    },
    AuthorizedUser {
        client_id: String,
        client_secret: String,
        refresh_token: String,
        token_uri: String,
    },
    Metadata {
        host: String,
    },
    /// Workload identity federation (`external_account`).
    External(external::ExternalAccount),
    /// A service account impersonated with the token of `source`
    /// (`impersonated_service_account`).
    Impersonated {
        url: String,
        source: Box<Kind>,
    },
}

/// Credentials found, with their cached token.
pub(crate) struct GoogleCredentials {
    kind: Kind,
    /// Where they were found, for `--check` and errors.
    source: String,
    /// The project the file names (`project_id`, `quota_project_id`).
    project: Option<String>,
    /// The token, shared with every member built from the same credentials.
    token: Arc<TokenSlot>,
}

/// A cached token and when it expires; one fetch at a time fills it.
type TokenSlot = Mutex<Option<(HeaderValue, Instant)>>;

/// The process's token slot for the credentials named `key` (where they
/// were found and whose they are): two members built separately from the
/// same credentials (a chain with two Vertex models, `--check` on it) fetch
/// one token between them (SPEC 22).
fn shared_slot(key: String) -> Arc<TokenSlot> {
    use std::collections::HashMap;
    static SLOTS: std::sync::OnceLock<std::sync::Mutex<HashMap<String, Arc<TokenSlot>>>> =
        std::sync::OnceLock::new();
    let slots = SLOTS.get_or_init(Default::default);
    match slots.lock() {
        Ok(mut map) => map.entry(key).or_default().clone(),
        Err(_) => Arc::default(),
    }
}

impl std::fmt::Debug for GoogleCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoogleCredentials")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Why no credentials could be used: every place looked in, or the file
/// that is not what it claims.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FindError {
    #[error("no Google credentials found (looked in {})", .0.join(", "))]
    NotFound(Vec<String>),
    #[error("{}: {why}", .path.display())]
    BadFile { path: PathBuf, why: &'static str },
}

#[derive(Deserialize)]
struct CredentialsFile {
    #[serde(rename = "type", default)]
    kind: String,
    client_email: Option<String>,
    private_key: Option<String>,
    token_uri: Option<String>,
    project_id: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    refresh_token: Option<String>,
    quota_project_id: Option<String>,
    audience: Option<String>,
    subject_token_type: Option<String>,
    token_url: Option<String>,
    credential_source: Option<external::CredentialSource>,
    service_account_impersonation_url: Option<String>,
    source_credentials: Option<Box<CredentialsFile>>,
}

/// Finds Application Default Credentials in gcloud's order.
pub(crate) fn find(env: Env) -> Result<GoogleCredentials, FindError> {
    let mut looked = Vec::new();
    match env("GOOGLE_APPLICATION_CREDENTIALS").filter(|v| !v.is_empty()) {
        Some(path) => {
            return read_file(
                Path::new(&path),
                format!("GOOGLE_APPLICATION_CREDENTIALS ({path})"),
            )
        }
        None => looked.push("GOOGLE_APPLICATION_CREDENTIALS (not set)".to_string()),
    }
    let gcloud = env("CLOUDSDK_CONFIG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".config/gcloud")));
    if let Some(dir) = gcloud {
        let path = dir.join("application_default_credentials.json");
        if path.is_file() {
            let source = format!(
                "gcloud application default credentials ({})",
                path.display()
            );
            return read_file(&path, source);
        }
        looked.push(format!("{} (not found)", path.display()));
    }
    let host = env("GCE_METADATA_HOST").filter(|v| !v.is_empty());
    let host = host.or_else(|| on_google_cloud().then(|| METADATA_HOST.to_string()));
    match host {
        Some(host) => Ok(GoogleCredentials::new(
            Kind::Metadata { host: host.clone() },
            format!("the metadata server ({host})"),
            None,
        )),
        None => {
            looked.push(
                "the metadata server (GCE_METADATA_HOST not set, not on Google Cloud)".into(),
            );
            Err(FindError::NotFound(looked))
        }
    }
}

/// Whether this machine says it is a Google Compute Engine VM (what
/// Google's libraries check before asking the metadata server).
fn on_google_cloud() -> bool {
    std::fs::read_to_string("/sys/class/dmi/id/product_name")
        .is_ok_and(|name| name.trim().starts_with("Google"))
}

fn read_file(path: &Path, source: String) -> Result<GoogleCredentials, FindError> {
    let bad = |why| FindError::BadFile {
        path: path.to_path_buf(),
        why,
    };
    let text = std::fs::read(path).map_err(|_| bad("cannot be read"))?;
    let file: CredentialsFile = serde_json::from_slice(&text)
        .map_err(|_| bad("not a Google credentials file (not JSON of the kind it claims)"))?;
    let present = |v: Option<String>| v.filter(|v| !v.is_empty());
    let project = present(file.project_id.clone()).or(present(file.quota_project_id.clone()));
    let kind = kind_of(file, true).map_err(bad)?;
    let source = match &kind {
        Kind::External(_) => format!("{source}, workload identity federation"),
        Kind::Impersonated { url, .. } => format!(
            "{source}, impersonating {}",
            external::impersonated_account(url).unwrap_or_default()
        ),
        _ => source,
    };
    Ok(GoogleCredentials::new(kind, source, project))
}

/// What a credentials file holds, or why it cannot be used; `outer` is
/// false for an impersonation's source credentials (which cannot nest).
fn kind_of(file: CredentialsFile, outer: bool) -> Result<Kind, &'static str> {
    let present = |v: Option<String>| v.filter(|v| !v.is_empty());
    let kind = match file.kind.as_str() {
        "service_account" => Kind::ServiceAccount {
            client_email: present(file.client_email)
                .ok_or("a service account key without client_email")?,
            private_key: present(file.private_key)
                .ok_or("a service account key without private_key")?,
            token_uri: present(file.token_uri).unwrap_or_else(|| GOOGLE_TOKEN_URI.into()),
        },
        "authorized_user" => Kind::AuthorizedUser {
            client_id: present(file.client_id)
                .ok_or("authorized_user credentials without client_id")?,
            client_secret: present(file.client_secret)
                .ok_or("authorized_user credentials without client_secret")?,
            refresh_token: present(file.refresh_token)
                .ok_or("authorized_user credentials without refresh_token")?,
            token_uri: present(file.token_uri).unwrap_or_else(|| GOOGLE_TOKEN_URI.into()),
        },
        "external_account" => Kind::External(external::ExternalAccount::parse(
            external::ExternalFields {
                audience: file.audience,
                subject_token_type: file.subject_token_type,
                token_url: file.token_url,
                credential_source: file.credential_source,
                impersonation_url: file.service_account_impersonation_url,
                client_id: file.client_id,
                client_secret: file.client_secret,
            },
        )?),
        "impersonated_service_account" if outer => {
            let url = present(file.service_account_impersonation_url)
                .filter(|u| external::impersonated_account(u).is_some())
                .ok_or("impersonated credentials without a service_account_impersonation_url")?;
            let source = file
                .source_credentials
                .ok_or("impersonated credentials without source_credentials")?;
            Kind::Impersonated {
                url,
                source: Box::new(kind_of(*source, false)?),
            }
        }
        _ => return Err("not a service_account, authorized_user, external_account or impersonated_service_account credentials file"),
    };
    if let Kind::ServiceAccount { private_key, .. } = &kind {
        jsonwebtoken::EncodingKey::from_rsa_pem(private_key.as_bytes())
            .map_err(|_| "a service account key whose private_key is not an RSA key")?;
    }
    Ok(kind)
}

#[derive(Deserialize)]
pub(super) struct TokenReply {
    pub(super) access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

impl TokenReply {
    /// How long the token lasts (an hour when the reply does not say).
    pub(super) fn lifetime(&self) -> Duration {
        Duration::from_secs(self.expires_in.unwrap_or(3600).min(24 * 3600))
    }
}

/// Sends a token endpoint's `request` to `url` within its bounds (time,
/// size) and gives its body: a 4xx is the credentials refused (an auth
/// error naming `source`), anything else that is not a success or not
/// reached is a `network` failure.
pub(super) async fn token_call(
    source: &str,
    url: &str,
    request: reqwest::RequestBuilder,
) -> Result<Vec<u8>, ModelError> {
    let unreachable = |why: Option<String>| ModelError::Network {
        message: format!(
            "the token endpoint {} could not be reached{} ({source})",
            display_url(url),
            why.map(|why| format!(": {why}")).unwrap_or_default()
        ),
    };
    let answer = async {
        let response = request
            .send()
            .await
            .map_err(|e| unreachable(crate::model::unreachable::cause(&e, e.is_connect())))?;
        let status = response.status();
        let body = read_capped(response)
            .await
            .map_err(|()| unreachable(None))?;
        Ok::<_, ModelError>((status, body))
    };
    let (status, body) = tokio::time::timeout(TOKEN_TIMEOUT, answer)
        .await
        .map_err(|_| unreachable(None))??;
    if status.is_client_error() {
        let why = match refusal_reason(&body) {
            Some(reason) => format!(
                "the token endpoint {} refused them ({reason})",
                display_url(url)
            ),
            None => format!("the token endpoint {} refused them", display_url(url)),
        };
        return Err(refused(source, status.as_u16(), &why));
    }
    if !status.is_success() {
        return Err(ModelError::Network {
            message: format!(
                "the token endpoint {} answered without a token ({source})",
                display_url(url)
            ),
        });
    }
    Ok(body)
}

/// The most of a token endpoint's reason that is shown.
const MAX_REASON_CHARS: usize = 160;

/// A token endpoint's short reason for refusing, from its error body:
/// OAuth's `{"error": "invalid_grant", "error_description": "Invalid JWT
/// Signature."}` (RFC 6749 5.2, Google's token endpoint and STS) or
/// Google's `{"error": {"message", "status"}}` (IAM Credentials). Bounded,
/// one line of printable characters; the credentials are never in it.
fn refusal_reason(body: &[u8]) -> Option<String> {
    use serde_json::Value;
    let json: Value = serde_json::from_slice(body).ok()?;
    let error = json.get("error")?;
    let text = match error {
        Value::String(code) => match json.get("error_description").and_then(Value::as_str) {
            Some(description) if !description.trim().is_empty() => {
                format!("{code}: {}", description.trim())
            }
            _ => code.clone(),
        },
        Value::Object(_) => {
            let message = error.get("message").and_then(Value::as_str)?.trim();
            match error.get("status").and_then(Value::as_str) {
                Some(status) => format!("{status}: {message}"),
                None => message.to_string(),
            }
        }
        _ => return None,
    };
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_REASON_CHARS)
        .collect();
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// An auth error naming where the credentials came from, never them.
fn refused(source: &str, status: u16, why: &str) -> ModelError {
    ModelError::Status {
        status: if status == 403 { 403 } else { 401 },
        message: format!("the Google credentials from {source}: {why}"),
        retry_after: None,
    }
}

impl GoogleCredentials {
    fn new(kind: Kind, source: String, project: Option<String>) -> Self {
        let key = format!("{source}\n{}", identity_of(&kind));
        GoogleCredentials {
            kind,
            source,
            project,
            token: shared_slot(key),
        }
    }

    /// The project the credentials file names, if any.
    pub(crate) fn project(&self) -> Option<&str> {
        self.project.as_deref()
    }

    /// The metadata server's address, for metadata-server credentials.
    pub(crate) fn metadata_host(&self) -> Option<&str> {
        match &self.kind {
            Kind::Metadata { host } => Some(host),
            _ => None,
        }
    }

    /// A fresh token and when it expires.
    async fn fetch(&self) -> Result<(String, Duration), ModelError> {
        fetch_kind(&self.kind, &self.source, SCOPE).await
    }
}

/// A token being fetched: the token and how long it lasts.
type Fetching<'a> =
    Pin<Box<dyn Future<Output = Result<(String, Duration), ModelError>> + Send + 'a>>;

/// A fresh token of credentials `kind` found at `source` (a service
/// account's for `scope`), and how long it lasts.
fn fetch_kind<'a>(kind: &'a Kind, source: &'a str, scope: &'a str) -> Fetching<'a> {
    Box::pin(async move {
        let client = shared_client();
        let (url, request) = match kind {
            Kind::ServiceAccount {
                client_email,
                private_key,
                token_uri,
            } => {
                let assertion = signed_jwt(client_email, private_key, token_uri, scope)
                    .map_err(|()| refused(source, 401, "its private key could not sign a token"))?;
                let form = [
                    ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                    ("assertion", assertion.as_str()),
                ];
                (token_uri.clone(), client.post(token_uri).form(&form))
            }
            Kind::AuthorizedUser {
                client_id,
                client_secret,
                refresh_token,
                token_uri,
            } => {
                let form = [
                    ("grant_type", "refresh_token"),
                    ("client_id", client_id.as_str()),
                    ("client_secret", client_secret.as_str()),
                    ("refresh_token", refresh_token.as_str()),
                ];
                (token_uri.clone(), client.post(token_uri).form(&form))
            }
            Kind::Metadata { host } => {
                let url = format!(
                    "http://{host}/computeMetadata/v1/instance/service-accounts/default/token"
                );
                let request = client.get(&url).header("Metadata-Flavor", "Google");
                (url, request)
            }
            Kind::External(account) => return account.fetch(source).await,
            Kind::Impersonated { url, source: inner } => {
                // The source needs only IAM, to impersonate with (as google-auth asks).
                let (token, _) = fetch_kind(inner, source, external::IAM_SCOPE).await?;
                return external::impersonate(source, url, &token).await;
            }
        };
        let body = token_call(source, &url, request).await?;
        let reply: TokenReply = serde_json::from_slice(&body)
            .ok()
            .filter(|r: &TokenReply| !r.access_token.is_empty())
            .ok_or_else(|| ModelError::Network {
                message: format!(
                    "the token endpoint {} answered without a token ({source})",
                    display_url(&url)
                ),
            })?;
        let lifetime = reply.lifetime();
        Ok((reply.access_token, lifetime))
    })
}

/// Reads a token reply within its bound.
async fn read_capped(response: reqwest::Response) -> Result<Vec<u8>, ()> {
    use futures::StreamExt;
    let mut stream = response.bytes_stream();
    let mut body = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| ())?;
        if body.len() + chunk.len() > MAX_TOKEN_REPLY {
            return Err(());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The JWT a service account exchanges for a token (RFC 7523).
fn signed_jwt(
    client_email: &str,
    private_key: &str,
    token_uri: &str,
    scope: &str,
) -> Result<String, ()> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let claims = serde_json::json!({
        "iss": client_email,
        "scope": scope,
        "aud": token_uri,
        "iat": now,
        "exp": now + 3600,
    });
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(private_key.as_bytes()).map_err(|_| ())?;
    let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    jsonwebtoken::encode(&header, &claims, &key).map_err(|_| ())
}

#[async_trait::async_trait]
impl Credentials for GoogleCredentials {
    async fn authorize(&self, request: &mut reqwest::Request) -> Result<(), ModelError> {
        // One fetch at a time: requests in flight wait for the same token.
        let mut token = self.token.lock().await;
        let fresh = token
            .as_ref()
            .is_some_and(|(_, expires)| Instant::now() + REFRESH_EARLY < *expires);
        if !fresh {
            let (value, lifetime) = self.fetch().await?;
            let mut header = HeaderValue::from_str(&format!("Bearer {value}")).map_err(|_| {
                ModelError::Network {
                    message: format!("the token from {} cannot be sent", self.source),
                }
            })?;
            header.set_sensitive(true);
            *token = Some((header, Instant::now() + lifetime));
        }
        if let Some((header, _)) = token.as_ref() {
            request.headers_mut().insert(AUTHORIZATION, header.clone());
        }
        Ok(())
    }

    fn identity(&self) -> String {
        identity_of(&self.kind)
    }

    fn source(&self) -> String {
        self.source.clone()
    }

    fn invalidate(&self) -> bool {
        match self.token.try_lock() {
            Ok(mut token) => token.take().is_some(),
            Err(_) => false,
        }
    }
}

/// A stable identity of credentials `kind`: never the secret.
fn identity_of(kind: &Kind) -> String {
    match kind {
        Kind::ServiceAccount { client_email, .. } => format!("google:{client_email}"),
        Kind::AuthorizedUser { client_id, .. } => format!("google:user:{client_id}"),
        Kind::Metadata { host } => format!("google:metadata:{host}"),
        Kind::External(account) => account.identity(),
        Kind::Impersonated { url, .. } => format!(
            "google:{}",
            external::impersonated_account(url).unwrap_or_default()
        ),
    }
}

/// The metadata server's project id, asked with a 2 s bound (only for
/// metadata-server credentials with no project given).
pub(crate) fn metadata_project(host: &str) -> Option<String> {
    use std::io::{Read, Write};
    let addr = std::net::ToSocketAddrs::to_socket_addrs(host)
        .ok()?
        .next()?;
    let limit = Duration::from_secs(2);
    let mut stream = std::net::TcpStream::connect_timeout(&addr, limit).ok()?;
    stream.set_read_timeout(Some(limit)).ok()?;
    stream.set_write_timeout(Some(limit)).ok()?;
    let request = format!(
        "GET /computeMetadata/v1/project/project-id HTTP/1.0\r\nHost: {host}\r\nMetadata-Flavor: Google\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut reply = Vec::new();
    stream.take(64 << 10).read_to_end(&mut reply).ok()?;
    let reply = String::from_utf8(reply).ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    let ok = head.lines().next()?.split_whitespace().nth(1)? == "200";
    let project = body.trim();
    (ok && !project.is_empty() && project.len() < 128 && !project.contains(char::is_whitespace))
        .then(|| project.to_string())
}

/// A file's parsed contents, for tests of what `find` reads.
#[cfg(test)]
fn kind_name(c: &GoogleCredentials) -> &'static str {
    match c.kind {
        Kind::ServiceAccount { .. } => "service_account",
        Kind::AuthorizedUser { .. } => "authorized_user",
        Kind::Metadata { .. } => "metadata",
        Kind::External(_) => "external_account",
        Kind::Impersonated { .. } => "impersonated_service_account",
    }
}

#[cfg(test)]
mod tests;
