//! Workload identity federation for Google's Application Default
//! Credentials: an `external_account` file (what `google-github-actions/auth`
//! and `gcloud iam workload-identity-pools create-cred-config` write) names
//! where a subject token is read (a file, or a URL with its headers; plain
//! text or a JSON field), the STS endpoint that exchanges it for a Google
//! token (RFC 8693, at the file's `token_url`) and, when it has one, the
//! service account to impersonate with that token
//! (`service_account_impersonation_url`). An `impersonated_service_account`
//! file (gcloud's `--impersonate-service-account`) impersonates with the
//! token of its own source credentials. The calls themselves go through
//! `super::token_call`, bounded like every token endpoint's.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderName, HeaderValue};
use serde::Deserialize;

use super::{token_call, TokenReply, MAX_TOKEN_REPLY, SCOPE};
use crate::model::client::shared_client;
use crate::model::ModelError;

const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";
/// What a federated token needs to impersonate (google-auth asks for this).
pub(super) const IAM_SCOPE: &str = "https://www.googleapis.com/auth/iam";
/// What an impersonated token is asked to last (Google's default, at most).
const IMPERSONATED_LIFETIME: &str = "3600s";

/// An `external_account` file's `credential_source`, as Google documents it.
#[derive(Deserialize)]
pub(super) struct CredentialSource {
    file: Option<String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    format: Option<Format>,
    environment_id: Option<String>,
    executable: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Format {
    #[serde(rename = "type", default)]
    kind: String,
    subject_token_field_name: Option<String>,
}

/// Where the subject token is read, and which field of its JSON holds it
/// (`None`: the whole text is the token).
enum Subject {
    File {
        path: PathBuf,
        field: Option<String>,
    },
    Url {
        url: String,
        /// Secrets (a bearer token for GitHub's OIDC endpoint): never shown.
        headers: Vec<(HeaderName, HeaderValue)>,
        field: Option<String>,
    },
}

/// An `external_account` file's credentials.
pub(super) struct ExternalAccount {
    audience: String,
    subject_token_type: String,
    token_url: String,
    subject: Subject,
    /// The STS client, when the file names one (sent as basic auth).
    client: Option<(String, String)>,
    impersonation_url: Option<String>,
}

/// The fields of an `external_account` file this reads.
pub(super) struct ExternalFields {
    pub audience: Option<String>,
    pub subject_token_type: Option<String>,
    pub token_url: Option<String>,
    pub credential_source: Option<CredentialSource>,
    pub impersonation_url: Option<String>,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
}

impl ExternalAccount {
    /// The file's credentials, or why they cannot be used (for the file's
    /// one-line error).
    pub(super) fn parse(fields: ExternalFields) -> Result<ExternalAccount, &'static str> {
        let present = |v: Option<String>| v.filter(|v| !v.is_empty());
        let audience =
            present(fields.audience).ok_or("an external_account file without audience")?;
        let subject_token_type = present(fields.subject_token_type)
            .ok_or("an external_account file without subject_token_type")?;
        let token_url = present(fields.token_url)
            .filter(|u| is_http(u))
            .ok_or("an external_account file without an http(s) token_url")?;
        let source = fields
            .credential_source
            .ok_or("an external_account file without credential_source")?;
        if source.environment_id.is_some() || source.executable.is_some() {
            return Err("an external_account file whose credential_source is AWS or an executable (tinyagent reads a file or a URL source)");
        }
        let field = match source.format {
            Some(Format { kind, .. }) if kind.is_empty() || kind == "text" => None,
            Some(Format {
                kind,
                subject_token_field_name,
            }) if kind == "json" => Some(present(subject_token_field_name).ok_or(
                "an external_account file whose json format names no subject_token_field_name",
            )?),
            Some(_) => {
                return Err("an external_account file whose format is neither text nor json")
            }
            None => None,
        };
        let subject = match (present(source.file), present(source.url)) {
            (Some(path), None) => {
                let path = PathBuf::from(path);
                if !path.is_file() {
                    return Err("an external_account file whose credential_source file does not exist");
                }
                Subject::File { path, field }
            }
            (None, Some(url)) if is_http(&url) => Subject::Url {
                url,
                headers: valid_headers(source.headers)?,
                field,
            },
            _ => return Err("an external_account file whose credential_source is neither one file nor one http(s) url"),
        };
        let impersonation_url = present(fields.impersonation_url);
        if impersonation_url.as_deref().is_some_and(|u| !is_http(u)) {
            return Err(
                "an external_account file whose service_account_impersonation_url is not http(s)",
            );
        }
        let client =
            present(fields.client_id).map(|id| (id, fields.client_secret.unwrap_or_default()));
        Ok(ExternalAccount {
            audience,
            subject_token_type,
            token_url,
            subject,
            client,
            impersonation_url,
        })
    }

    /// What pacing and health key on: the impersonated service account, else
    /// the workload identity pool's provider (never a token).
    pub(super) fn identity(&self) -> String {
        match self
            .impersonation_url
            .as_deref()
            .and_then(impersonated_account)
        {
            Some(account) => format!("google:{account}"),
            None => format!("google:external:{}", self.audience),
        }
    }

    /// A fresh token and how long it lasts: the subject token, exchanged at
    /// STS, then for the service account's when the file names one.
    pub(super) async fn fetch(&self, source: &str) -> Result<(String, Duration), ModelError> {
        let subject_token = self.subject_token(source).await?;
        let form = [
            ("grant_type", TOKEN_EXCHANGE),
            ("audience", self.audience.as_str()),
            (
                "scope",
                if self.impersonation_url.is_some() {
                    IAM_SCOPE
                } else {
                    SCOPE
                },
            ),
            ("requested_token_type", ACCESS_TOKEN),
            ("subject_token", subject_token.as_str()),
            ("subject_token_type", self.subject_token_type.as_str()),
        ];
        let mut request = shared_client().post(&self.token_url).form(&form);
        if let Some((id, secret)) = &self.client {
            request = request.basic_auth(id, Some(secret));
        }
        let body = token_call(source, &self.token_url, request).await?;
        let reply: TokenReply = serde_json::from_slice(&body)
            .ok()
            .filter(|r: &TokenReply| !r.access_token.is_empty())
            .ok_or_else(|| no_token(source, &self.token_url))?;
        let lifetime = reply.lifetime();
        let federated = (reply.access_token, lifetime);
        match &self.impersonation_url {
            None => Ok(federated),
            Some(url) => impersonate(source, url, &federated.0).await,
        }
    }

    /// The subject token, read from its file or URL (bounded).
    async fn subject_token(&self, source: &str) -> Result<String, ModelError> {
        let (text, field, from) = match &self.subject {
            Subject::File { path, field } => {
                let text = read_bounded(path).map_err(|()| ModelError::Network {
                    message: format!(
                        "the subject token file {} could not be read ({source})",
                        path.display()
                    ),
                })?;
                (text, field, path.display().to_string())
            }
            Subject::Url {
                url,
                headers,
                field,
            } => {
                let mut request = shared_client().get(url);
                for (name, value) in headers {
                    request = request.header(name.clone(), value.clone());
                }
                let body = token_call(source, url, request).await?;
                (body, field, crate::model::client::display_url(url))
            }
        };
        let garbled = || ModelError::Network {
            message: format!("the subject token from {from} could not be read ({source})"),
        };
        let token = match field {
            None => String::from_utf8(text).map_err(|_| garbled())?,
            Some(name) => {
                let value: serde_json::Value =
                    serde_json::from_slice(&text).map_err(|_| garbled())?;
                value
                    .get(name)
                    .and_then(|v| v.as_str())
                    .ok_or_else(garbled)?
                    .to_string()
            }
        };
        let token = token.trim().to_string();
        if token.is_empty() {
            return Err(garbled());
        }
        Ok(token)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Impersonated {
    access_token: String,
    expire_time: Option<String>,
}

/// The impersonated service account's token for `token` (IAM Credentials'
/// `generateAccessToken`).
pub(super) async fn impersonate(
    source: &str,
    url: &str,
    token: &str,
) -> Result<(String, Duration), ModelError> {
    let body = serde_json::json!({"scope": [SCOPE], "lifetime": IMPERSONATED_LIFETIME});
    let request = shared_client()
        .post(url)
        .bearer_auth(token)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string());
    let body = token_call(source, url, request).await?;
    let reply: Impersonated = serde_json::from_slice(&body)
        .ok()
        .filter(|r: &Impersonated| !r.access_token.is_empty())
        .ok_or_else(|| no_token(source, url))?;
    let lifetime = reply
        .expire_time
        .as_deref()
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
        .and_then(|at| at.duration_since(SystemTime::now()).ok())
        .unwrap_or(Duration::from_secs(3600))
        .min(Duration::from_secs(12 * 3600));
    Ok((reply.access_token, lifetime))
}

/// The account an impersonation URL names
/// (`…/serviceAccounts/{account}:generateAccessToken`).
pub(super) fn impersonated_account(url: &str) -> Option<&str> {
    let rest = &url[url.rfind("/serviceAccounts/")? + "/serviceAccounts/".len()..];
    let account = rest.split(':').next()?;
    (!account.is_empty()).then_some(account)
}

fn no_token(source: &str, url: &str) -> ModelError {
    ModelError::Network {
        message: format!(
            "the token endpoint {} answered without a token ({source})",
            crate::model::client::display_url(url)
        ),
    }
}

/// A URL source's headers as HTTP headers, each value marked sensitive.
fn valid_headers(
    headers: BTreeMap<String, String>,
) -> Result<Vec<(HeaderName, HeaderValue)>, &'static str> {
    headers
        .into_iter()
        .map(|(name, value)| {
            let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
            let mut value = HeaderValue::from_str(&value).ok()?;
            value.set_sensitive(true);
            Some((name, value))
        })
        .collect::<Option<_>>()
        .ok_or(
            "an external_account file whose credential_source headers are not valid HTTP headers",
        )
}

fn is_http(url: &str) -> bool {
    url.starts_with("https://") || url.starts_with("http://")
}

fn read_bounded(path: &std::path::Path) -> Result<Vec<u8>, ()> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|_| ())?;
    let mut text = Vec::new();
    file.take(MAX_TOKEN_REPLY as u64 + 1)
        .read_to_end(&mut text)
        .map_err(|_| ())?;
    if text.len() > MAX_TOKEN_REPLY {
        return Err(());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(source: serde_json::Value) -> ExternalFields {
        ExternalFields {
            audience: Some("//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/gh".into()),
            subject_token_type: Some("urn:ietf:params:oauth:token-type:jwt".into()),
            token_url: Some("https://sts.googleapis.com/v1/token".into()),
            credential_source: Some(serde_json::from_value(source).unwrap()),
            impersonation_url: None,
            client_id: None,
            client_secret: None,
        }
    }

    #[test]
    fn a_url_source_with_a_json_field_is_taken_and_aws_or_executables_are_not() {
        let account = ExternalAccount::parse(fields(serde_json::json!({
            "url": "https://token.actions.githubusercontent.com/?audience=x",
            "headers": {"Authorization": "Bearer secret"},
            "format": {"type": "json", "subject_token_field_name": "value"}
        })))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(account
            .identity()
            .starts_with("google:external://iam.googleapis.com/"));
        for source in [
            serde_json::json!({"environment_id": "aws1", "region_url": "http://169.254.169.254"}),
            serde_json::json!({"executable": {"command": "/bin/true"}}),
            serde_json::json!({"url": "file:///etc/passwd"}),
            serde_json::json!({"url": "https://x", "format": {"type": "json"}}),
            serde_json::json!({"file": "/nonexistent/token"}),
            serde_json::json!({"url": "https://x", "headers": {"Bad Name": "v"}}),
            serde_json::json!({"url": "https://x", "headers": {"Authorization": "Bearer a\nb"}}),
        ] {
            let text = source.to_string();
            assert!(ExternalAccount::parse(fields(source)).is_err(), "{text}");
        }
    }

    #[test]
    fn the_impersonated_account_is_the_identity() {
        let url = "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/ci@p.iam.gserviceaccount.com:generateAccessToken";
        assert_eq!(
            impersonated_account(url),
            Some("ci@p.iam.gserviceaccount.com")
        );
        assert_eq!(impersonated_account("https://x/y"), None);
        let mut f = fields(serde_json::json!({"url": "https://x/token"}));
        f.impersonation_url = Some(url.into());
        let account = ExternalAccount::parse(f).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(account.identity(), "google:ci@p.iam.gserviceaccount.com");
    }
}
