//! Amazon Bedrock's credentials (SPEC 22), in the AWS CLI's order:
//! `AWS_BEARER_TOKEN_BEDROCK` (a Bedrock API key, sent as a bearer token);
//! else SigV4 (service `bedrock`) with the first source of the default
//! chain that has credentials: the environment (`AWS_ACCESS_KEY_ID` ...),
//! the profile (`~/.aws/credentials` and `~/.aws/config`: static keys,
//! `credential_process`, SSO, an assumed role), web identity, container
//! credentials, and EC2 instance metadata unless `AWS_EC2_METADATA_DISABLED`.
//! The sources are `aws-config`'s own providers, asked once when the member
//! is built (on a small runtime of its own: setup is not async), so missing
//! credentials are a setup error naming every place looked in. The
//! credentials found are cached for the process (one per profile and
//! region) and fetched again from the same source shortly before they
//! expire, by one request however many are in flight.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use aws_config::provider_config::ProviderConfig;
use aws_config::Region;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use reqwest::header::{HeaderName, HeaderValue};

use super::aws_http::ReqwestHttpClient;
use super::{Credentials, StaticKey};
use crate::model::ModelError;
use crate::setup::Env;

/// The Bedrock API key variable.
pub(crate) const BEARER_ENV: &str = "AWS_BEARER_TOKEN_BEDROCK";
/// The service name requests are signed for.
const SERVICE: &str = "bedrock";
/// Credentials this close to their expiry are fetched again.
const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);
/// The longest a source may take to answer (a `credential_process`, SSO).
const SOURCE_TIMEOUT: Duration = Duration::from_secs(60);
/// The instance metadata service must answer within this.
const IMDS_TIMEOUT: Duration = Duration::from_secs(2);

/// Why no credentials (or no region) were found: a setup error (exit 2).
#[derive(Debug, thiserror::Error)]
pub(crate) enum AwsSetupError {
    /// Everything missing at once (a profile not found, no region, no
    /// credentials), each naming where it was looked for.
    #[error("{}", .0.join("; and "))]
    Missing(Vec<String>),
    #[error("no AWS credentials found: looked in {0}")]
    NotFound(String),
    /// A source that claims credentials but cannot give them (a profile
    /// that does not parse, a `credential_process` that fails). The
    /// provider's words name the file or the command, never a secret.
    #[error("AWS credentials from {source_name}: {reason}")]
    Broken { source_name: String, reason: String },
    #[error("{0}")]
    Runtime(String),
}

/// Where a Bedrock member's requests go, and what they are signed for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    pub endpoint: String,
    pub region: Option<String>,
    pub profile: String,
}

/// A member's region, endpoint (when one is set) and profile.
struct Located {
    endpoint: Option<String>,
    region: Option<String>,
    profile: String,
}

/// The region, endpoint and profile of a Bedrock member: a named
/// provider's own `region`, `endpoint` and `profile` win; else
/// `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`; the
/// endpoint `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, else `AWS_ENDPOINT_URL`.
fn locate(
    region: Option<&str>,
    endpoint: Option<&str>,
    profile: Option<&str>,
    env: Env,
) -> Result<Located, AwsSetupError> {
    let set = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
    let profile = set(profile.map(str::to_string))
        .or_else(|| set(env("AWS_PROFILE")))
        .unwrap_or_else(|| "default".into());
    let region = set(region.map(str::to_string))
        .or_else(|| set(env("AWS_REGION")))
        .or_else(|| set(env("AWS_DEFAULT_REGION")))
        .map_or_else(|| profile_region(&profile), |r| Ok(Some(r)))?;
    let endpoint = set(endpoint.map(str::to_string))
        .or_else(|| set(env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME")))
        .or_else(|| set(env("AWS_ENDPOINT_URL")))
        .map(|e| e.trim_end_matches('/').to_string());
    Ok(Located {
        endpoint,
        region,
        profile,
    })
}

/// `https://bedrock-runtime.{region}.amazonaws.com`
fn regional_endpoint(region: &str) -> String {
    format!("https://bedrock-runtime.{region}.amazonaws.com")
}

/// The region, endpoint and profile of a Bedrock member (`locate`), the
/// endpoint defaulting to the region's.
#[cfg(test)]
fn place(
    region: Option<&str>,
    endpoint: Option<&str>,
    profile: Option<&str>,
    env: Env,
) -> Result<Place, AwsSetupError> {
    let found = locate(region, endpoint, profile, env)?;
    let endpoint = found
        .endpoint
        .or_else(|| found.region.as_deref().map(regional_endpoint))
        .ok_or_else(|| AwsSetupError::Missing(vec![no_region(&found.profile, env, false)]))?;
    Ok(Place {
        endpoint,
        region: found.region,
        profile: found.profile,
    })
}

/// What a missing region says: where it was looked for (and, with an
/// endpoint set, that SigV4 still needs one).
fn no_region(profile: &str, env: Env, signing: bool) -> String {
    format!(
        "no AWS region: looked in AWS_REGION, AWS_DEFAULT_REGION and the region of profile '{profile}' ({}){}",
        files_looked_in(env),
        if signing { ": SigV4 signs for a region" } else { "" }
    )
}

/// A Bedrock member's place and credentials (SPEC 22 "Validation"), or
/// one error naming everything missing: a profile named by `AWS_PROFILE`
/// or the provider that is in neither file, no region, no credentials.
pub(crate) fn member(
    region: Option<&str>,
    endpoint: Option<&str>,
    profile: Option<&str>,
    env: Env,
) -> Result<(Place, Arc<dyn Credentials>), AwsSetupError> {
    let mut missing = Vec::new();
    let named = profile
        .map(str::to_string)
        .or_else(|| env("AWS_PROFILE"))
        .filter(|p| !p.trim().is_empty());
    // `default` may be named and absent: the other sources still count.
    let lost_profile = named.filter(|name| name != "default" && !profile_exists(name, env));
    if let Some(name) = &lost_profile {
        missing.push(format!(
            "profile '{name}' not found (looked in {})",
            files_looked_in(env)
        ));
    }
    let found = locate(region, endpoint, profile, env)?;
    let bearer = env(BEARER_ENV).filter(|t| !t.is_empty());
    let endpoint = found
        .endpoint
        .clone()
        .or_else(|| found.region.as_deref().map(regional_endpoint));
    // Without a bearer token the chain is asked, which names a missing
    // region itself (SigV4 signs for one).
    let asks_chain = lost_profile.is_none() && bearer.is_none();
    if found.region.is_none() && (endpoint.is_none() || bearer.is_none()) && !asks_chain {
        missing.push(no_region(&found.profile, env, endpoint.is_some()));
    }
    let place = Place {
        endpoint: endpoint.unwrap_or_default(),
        region: found.region,
        profile: found.profile,
    };
    let credentials = if lost_profile.is_some() {
        // The profile is the credentials' source too: nothing to ask.
        None
    } else {
        match credentials(&place, env) {
            Ok(found) => Some(found),
            Err(AwsSetupError::Missing(more)) => {
                missing.extend(more);
                None
            }
            Err(e) if missing.is_empty() => return Err(e),
            Err(e) => {
                missing.push(e.to_string());
                None
            }
        }
    };
    match credentials {
        Some(credentials) if missing.is_empty() => Ok((place, credentials)),
        _ => Err(AwsSetupError::Missing(missing)),
    }
}

/// The AWS config files, as `aws-config` finds them (`AWS_CONFIG_FILE`,
/// `AWS_SHARED_CREDENTIALS_FILE`, else under `~/.aws`), as shown.
fn files_looked_in(env: Env) -> String {
    let [config, credentials] = aws_files(env).map(|(shown, _)| shown);
    format!("{config}, {credentials}")
}

/// The config and credentials files: as shown, and where they are.
fn aws_files(env: Env) -> [(String, Option<PathBuf>); 2] {
    let home = env("HOME").filter(|h| !h.is_empty());
    let file = |var: &str, default: &str| match env(var).filter(|v| !v.is_empty()) {
        Some(path) => (path.clone(), Some(PathBuf::from(path))),
        None => (
            format!("~/{default}"),
            home.as_ref().map(|h| Path::new(h).join(default)),
        ),
    };
    [
        file("AWS_CONFIG_FILE", ".aws/config"),
        file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"),
    ]
}

/// Whether profile `name` is a section of the config file (`[profile
/// name]`, or `[default]`) or of the credentials file (`[name]`).
fn profile_exists(name: &str, env: Env) -> bool {
    let [config, credentials] = aws_files(env).map(|(_, path)| path);
    let sections = |path: Option<PathBuf>, config: bool| -> bool {
        let Some(text) = path.and_then(|p| std::fs::read_to_string(p).ok()) else {
            return false;
        };
        text.lines().any(|line| {
            let Some(inside) = line.trim().strip_prefix('[') else {
                return false;
            };
            let Some((header, _)) = inside.split_once(']') else {
                return false;
            };
            let header = header.trim();
            let profile = match header.strip_prefix("profile") {
                Some(rest) if config && rest.starts_with([' ', '\t']) => rest.trim(),
                _ => header,
            };
            profile == name
        })
    };
    sections(config, true) || sections(credentials, false)
}

/// A small runtime for setup's asks (setup runs before the run's runtime).
fn on_runtime<T>(work: impl std::future::Future<Output = T>) -> Result<T, AwsSetupError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| AwsSetupError::Runtime(format!("cannot start the async runtime: {e}")))?;
    Ok(runtime.block_on(work))
}

fn provider_config(region: Option<&str>, profile: &str) -> ProviderConfig {
    let _ = profile;
    ProviderConfig::default()
        .with_http_client(ReqwestHttpClient)
        .with_region(region.map(|r| Region::new(r.to_string())))
}

/// The profile's `region`, read by `aws-config`'s profile parser.
fn profile_region(profile: &str) -> Result<Option<String>, AwsSetupError> {
    use aws_config::meta::region::ProvideRegion;
    let provider = aws_config::profile::region::ProfileFileRegionProvider::builder()
        .configure(&provider_config(None, profile))
        .profile_name(profile)
        .build();
    let region = on_runtime(async move { provider.region().await })?;
    Ok(region.map(|r| r.as_ref().to_string()))
}

/// The credentials of a Bedrock member: its bearer token, or the first
/// source of the default chain that has credentials (cached per profile
/// and region for the process). Without a region SigV4 cannot sign: the
/// chain is still asked, so that missing credentials are named too.
fn credentials(place: &Place, env: Env) -> Result<Arc<dyn Credentials>, AwsSetupError> {
    if let Some(token) = env(BEARER_ENV).filter(|t| !t.is_empty()) {
        let key =
            StaticKey::bearer(&token, format!("environment ({BEARER_ENV})")).map_err(|e| {
                AwsSetupError::Broken {
                    source_name: BEARER_ENV.into(),
                    reason: e.0,
                }
            })?;
        return Ok(Arc::new(key));
    }
    let Some(region) = place.region.clone() else {
        let mut missing = vec![no_region(&place.profile, env, true)];
        // Any region will do to find out whether there are credentials.
        if let Err(e) = on_runtime(discover(
            "us-east-1".into(),
            place.profile.clone(),
            files_looked_in(env),
        ))? {
            missing.push(e.to_string());
        }
        return Err(AwsSetupError::Missing(missing));
    };
    static FOUND: OnceLock<Mutex<Signers>> = OnceLock::new();
    let key = (place.profile.clone(), region.clone());
    let found = FOUND.get_or_init(Default::default);
    if let Some(signer) = found.lock().ok().and_then(|map| map.get(&key).cloned()) {
        return Ok(signer);
    }
    let signer = Arc::new(on_runtime(discover(
        region,
        place.profile.clone(),
        files_looked_in(env),
    ))??);
    if let Ok(mut map) = found.lock() {
        map.insert(key, signer.clone());
    }
    Ok(signer)
}

/// The signers found so far, by profile and region.
type Signers = HashMap<(String, String), Arc<SigV4>>;

/// One source of the chain, with how it is named.
struct Source {
    name: String,
    provider: SharedCredentialsProvider,
    timeout: Duration,
}

fn chain(region: &str, profile: &str, files: &str) -> Vec<Source> {
    use aws_config::{ecs, environment, imds, profile as prof, web_identity_token};
    let conf = provider_config(Some(region), profile);
    let imds_client = imds::Client::builder()
        .configure(&conf)
        .connect_timeout(Duration::from_secs(1))
        .read_timeout(Duration::from_secs(1))
        .max_attempts(1)
        .build();
    let source = |name: String, provider, timeout| Source {
        name,
        provider: SharedCredentialsProvider::new(provider),
        timeout,
    };
    vec![
        source(
            "environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)".into(),
            Arc::new(environment::credentials::EnvironmentVariableCredentialsProvider::new())
                as Arc<dyn ProvideCredentials>,
            SOURCE_TIMEOUT,
        ),
        source(
            format!("profile '{profile}' ({files})"),
            Arc::new(
                prof::ProfileFileCredentialsProvider::builder()
                    .configure(&conf)
                    .profile_name(profile)
                    .build(),
            ),
            SOURCE_TIMEOUT,
        ),
        source(
            "web identity (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN)".into(),
            Arc::new(
                web_identity_token::WebIdentityTokenCredentialsProvider::builder()
                    .configure(&conf)
                    .build(),
            ),
            SOURCE_TIMEOUT,
        ),
        source(
            "container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI, AWS_CONTAINER_CREDENTIALS_RELATIVE_URI)".into(),
            Arc::new(ecs::EcsCredentialsProvider::builder().configure(&conf).build()),
            SOURCE_TIMEOUT,
        ),
        source(
            "EC2 instance metadata".into(),
            Arc::new(
                imds::credentials::ImdsCredentialsProvider::builder()
                    .configure(&conf)
                    .imds_client(imds_client)
                    .build(),
            ),
            IMDS_TIMEOUT,
        ),
    ]
}

/// Asks each source in turn; the first with credentials is the member's.
async fn discover(region: String, profile: String, files: String) -> Result<SigV4, AwsSetupError> {
    let mut looked = vec![BEARER_ENV.to_string()];
    for source in chain(&region, &profile, &files) {
        if source.name.starts_with("EC2")
            && std::env::var("AWS_EC2_METADATA_DISABLED")
                .is_ok_and(|v| v.eq_ignore_ascii_case("true"))
        {
            looked.push("EC2 instance metadata (disabled by AWS_EC2_METADATA_DISABLED)".into());
            continue;
        }
        let asked =
            tokio::time::timeout(source.timeout, source.provider.provide_credentials()).await;
        match asked {
            Ok(Ok(found)) => {
                return Ok(SigV4 {
                    provider: source.provider,
                    source: source.name,
                    region,
                    cached: tokio::sync::Mutex::new(Some(found)),
                })
            }
            Ok(Err(CredentialsError::CredentialsNotLoaded(_))) => looked.push(source.name),
            Err(_) if source.name.starts_with("EC2") => {
                looked.push(format!("{} (no answer within 2 s)", source.name));
            }
            Err(_) => {
                return Err(AwsSetupError::Broken {
                    source_name: source.name,
                    reason: format!("no answer within {} s", source.timeout.as_secs()),
                })
            }
            Ok(Err(e)) => {
                return Err(AwsSetupError::Broken {
                    source_name: source.name,
                    reason: short_reason(&e),
                })
            }
        }
    }
    Err(AwsSetupError::NotFound(looked.join(", ")))
}

/// A provider's error in a few words: its own message and its causes'
/// (a phrase a wrapper repeats is said once), first line, bounded.
fn short_reason(e: &CredentialsError) -> String {
    use std::error::Error;
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(inner) = source {
        let part = inner.to_string();
        // aws-config wraps a source's `ProviderError` in another one.
        if !parts.contains(&part) {
            parts.push(part);
        }
        source = inner.source();
    }
    let mut text = parts.join(": ");
    // A process's stderr may hold anything: it is not repeated.
    if let Some(at) = text.find(" Stderr:") {
        text.truncate(at);
    }
    text.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(300)
        .collect()
}

/// SigV4 signing with credentials from one source of the chain.
pub(crate) struct SigV4 {
    provider: SharedCredentialsProvider,
    source: String,
    region: String,
    /// The credentials last fetched; the lock makes one fetch serve every
    /// request waiting on it.
    cached: tokio::sync::Mutex<Option<aws_credential_types::Credentials>>,
}

impl std::fmt::Debug for SigV4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys: the source and region only.
        f.debug_struct("SigV4")
            .field("source", &self.source)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl SigV4 {
    /// Credentials that are not about to expire, fetched again if needed.
    async fn current(&self) -> Result<aws_credential_types::Credentials, ModelError> {
        let mut cached = self.cached.lock().await;
        let fresh = |c: &aws_credential_types::Credentials| {
            c.expiry()
                .is_none_or(|at| at > SystemTime::now() + REFRESH_BEFORE)
        };
        if let Some(c) = cached.as_ref().filter(|c| fresh(c)) {
            return Ok(c.clone());
        }
        let asked = tokio::time::timeout(SOURCE_TIMEOUT, self.provider.provide_credentials()).await;
        let found = match asked {
            Err(_) => {
                return Err(ModelError::Network {
                    message: format!("AWS credentials from {}: no answer in time", self.source),
                })
            }
            Ok(Err(CredentialsError::ProviderTimedOut(_) | CredentialsError::ProviderError(_))) => {
                return Err(ModelError::Network {
                    message: format!("AWS credentials from {} could not be fetched", self.source),
                })
            }
            Ok(Err(e)) => {
                return Err(ModelError::Invalid {
                    message: format!(
                        "AWS credentials from {} were refused: {}",
                        self.source,
                        short_reason(&e)
                    ),
                })
            }
            Ok(Ok(found)) => found,
        };
        *cached = Some(found.clone());
        Ok(found)
    }
}

#[async_trait::async_trait]
impl Credentials for SigV4 {
    async fn authorize(&self, request: &mut reqwest::Request) -> Result<(), ModelError> {
        use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
        use aws_smithy_runtime_api::client::identity::Identity;
        let credentials = self.current().await?;
        let identity = Identity::from(credentials);
        let invalid = |what: &str| ModelError::Invalid {
            message: format!("cannot sign the request: {what}"),
        };
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(SERVICE)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|_| invalid("bad signing parameters"))?
            .into();
        let body = request
            .body()
            .and_then(reqwest::Body::as_bytes)
            .unwrap_or_default();
        let headers: Vec<(&str, &str)> = request
            .headers()
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
            .collect();
        let signable = SignableRequest::new(
            request.method().as_str(),
            request.url().as_str(),
            headers.into_iter(),
            SignableBody::Bytes(body),
        )
        .map_err(|_| invalid("a header or URL SigV4 cannot read"))?;
        let (instructions, _signature) = sign(signable, &params)
            .map_err(|_| invalid("signing failed"))?
            .into_parts();
        let (added, _query) = instructions.into_parts();
        for header in added {
            let name = HeaderName::from_bytes(header.name().as_bytes())
                .map_err(|_| invalid("a signature header"))?;
            let mut value =
                HeaderValue::from_str(header.value()).map_err(|_| invalid("a signature header"))?;
            value.set_sensitive(header.sensitive() || name == "authorization");
            request.headers_mut().insert(name, value);
        }
        Ok(())
    }

    fn identity(&self) -> String {
        format!("aws:{}:{}", self.source, self.region)
    }

    fn source(&self) -> String {
        self.source.clone()
    }

    fn invalidate(&self) -> bool {
        match self.cached.try_lock() {
            Ok(mut cached) => {
                let had = cached.is_some();
                *cached = None;
                had
            }
            Err(_) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setup::fixed_env as env;

    #[test]
    fn a_named_providers_own_values_win_over_the_environment() {
        let e = env(&[
            ("AWS_REGION", "eu-central-1"),
            ("AWS_DEFAULT_REGION", "ap-south-1"),
            ("AWS_PROFILE", "team"),
        ]);
        let p = place(Some("us-west-2"), None, Some("ci"), &e).unwrap();
        assert_eq!(p.region.as_deref(), Some("us-west-2"));
        assert_eq!(p.profile, "ci");
        assert_eq!(
            p.endpoint,
            "https://bedrock-runtime.us-west-2.amazonaws.com"
        );
        let p = place(None, None, None, &e).unwrap();
        assert_eq!(p.region.as_deref(), Some("eu-central-1"));
        assert_eq!(p.profile, "team");
        let e = env(&[("AWS_DEFAULT_REGION", "ap-south-1")]);
        let p = place(None, None, None, &e).unwrap();
        assert_eq!(
            p.endpoint,
            "https://bedrock-runtime.ap-south-1.amazonaws.com"
        );
        assert_eq!(p.profile, "default");
    }

    #[test]
    fn endpoint_variables_replace_the_base_in_order() {
        let e = env(&[
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:1/"),
            ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "http://127.0.0.1:2/"),
        ]);
        assert_eq!(
            place(None, None, None, &e).unwrap().endpoint,
            "http://127.0.0.1:2"
        );
        assert_eq!(
            place(None, Some("http://127.0.0.1:3"), None, &e)
                .unwrap()
                .endpoint,
            "http://127.0.0.1:3"
        );
        let e = env(&[
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
        ]);
        assert_eq!(
            place(None, None, None, &e).unwrap().endpoint,
            "http://127.0.0.1:1"
        );
    }

    #[test]
    fn profiles_are_the_sections_of_either_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        let credentials = dir.path().join("credentials");
        std::fs::write(
            &config,
            "[default]\nregion = us-east-1\n[profile team] # ours\nregion = eu-west-1\n[sso-session s]\n[ci]\n",
        )
        .unwrap();
        std::fs::write(&credentials, "[keys]\naws_access_key_id = A\n").unwrap();
        let vars = [
            ("AWS_CONFIG_FILE", config.display().to_string()),
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                credentials.display().to_string(),
            ),
        ];
        let e = move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert!(profile_exists("default", &e));
        assert!(profile_exists("team", &e));
        assert!(profile_exists("keys", &e));
        assert!(!profile_exists("typo", &e));
        assert!(!profile_exists("profile", &e));
        // A bare `[ci]` in the config file is read as aws-config reads it.
        assert!(profile_exists("ci", &e));
        let err = member(Some("us-east-1"), None, Some("typo"), &e).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("profile 'typo' not found (looked in "),
            "{err}"
        );
    }

    #[test]
    fn a_bearer_token_needs_no_region_and_is_never_shown() {
        let e = env(&[(BEARER_ENV, "ABSK-secret-token")]);
        let p = Place {
            endpoint: "http://127.0.0.1:1".into(),
            region: None,
            profile: "default".into(),
        };
        let c = credentials(&p, &e).unwrap();
        assert_eq!(c.source(), "environment (AWS_BEARER_TOKEN_BEDROCK)");
        let shown = format!("{c:?} {} {}", c.identity(), c.source());
        assert!(!shown.contains("ABSK-secret-token"), "{shown}");
    }
}
