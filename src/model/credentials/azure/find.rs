//! Where Azure's credential chain looks, in `DefaultAzureCredential`'s
//! order (SPEC 22): a service principal from the environment
//! (`AZURE_TENANT_ID` + `AZURE_CLIENT_ID` with `AZURE_CLIENT_SECRET`, or
//! with `AZURE_CLIENT_CERTIFICATE_PATH`); workload identity
//! (`AZURE_FEDERATED_TOKEN_FILE` with the tenant and client id); a managed
//! identity (`IDENTITY_ENDPOINT` + `IDENTITY_HEADER`, else the instance
//! metadata service, asked only now that nothing earlier was found, within
//! 2 s, at `AZURE_POD_IDENTITY_AUTHORITY_HOST` when set); the Azure CLI.
//! `AZURE_AUTHORITY_HOST` replaces the login host. Only variables and
//! files are read before that probe; no token is fetched here.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use reqwest::header::HeaderValue;

use super::{certificate, cli, AzureCredentials, Member};
use crate::setup::Env;

/// Microsoft Entra ID's login host, for the public cloud.
const LOGIN_HOST: &str = "https://login.microsoftonline.com";
/// The instance metadata service's address.
const IMDS: &str = "http://169.254.169.254";
/// How long the instance metadata service may take to answer the probe.
const IMDS_PROBE: Duration = Duration::from_secs(2);

/// Why no credentials could be used: every place looked in, or what is
/// wrong with what was set (never a value).
#[derive(Debug, thiserror::Error)]
pub(crate) enum FindError {
    #[error("no Microsoft Entra ID credentials found (looked in {})", .0.join("; "))]
    NotFound(Vec<String>),
    #[error("{0}")]
    Bad(String),
}

/// What one place of the chain gave: a member and where it was found, or
/// what was missing there.
enum Step {
    Found(Member, &'static str),
    Looked(String),
}

/// The variables every Entra ID member shares.
struct Ids {
    tenant: Option<String>,
    client_id: Option<String>,
    authority_host: Option<String>,
}

impl Ids {
    /// The tenant's token endpoint at the login host.
    fn token_url(&self, tenant: &str) -> Result<String, FindError> {
        if !tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        {
            return Err(FindError::Bad(
                "AZURE_TENANT_ID is not a tenant id or domain".into(),
            ));
        }
        let authority = authority(self.authority_host.clone())?;
        Ok(format!("{authority}/{tenant}/oauth2/v2.0/token"))
    }
}

/// Finds the first member of the chain for tokens of `scope`.
pub(crate) fn find(env: Env, scope: &str) -> Result<AzureCredentials, FindError> {
    let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let ids = Ids {
        tenant: var("AZURE_TENANT_ID"),
        client_id: var("AZURE_CLIENT_ID"),
        authority_host: var("AZURE_AUTHORITY_HOST"),
    };
    let mut looked = Vec::new();
    for place in [service_principal, workload_identity, app_service] {
        match place(&var, &ids)? {
            Step::Found(member, source) => {
                return Ok(AzureCredentials::new(member, scope, source.into()))
            }
            Step::Looked(why) => looked.push(why),
        }
    }
    // The instance metadata service, only now that nothing else was found.
    let imds = var("AZURE_POD_IDENTITY_AUTHORITY_HOST")
        .map(|h| h.trim().trim_end_matches('/').to_string())
        .unwrap_or_else(|| IMDS.to_string());
    if imds_answers(&imds) {
        let member = Member::Imds {
            base: imds,
            client_id: ids.client_id,
        };
        let source = "Entra ID, managed identity (instance metadata service)";
        return Ok(AzureCredentials::new(member, scope, source.into()));
    }
    looked.push(format!(
        "the instance metadata service ({imds}: no answer within {} s)",
        IMDS_PROBE.as_secs()
    ));
    match cli::locate(env) {
        Ok((program, config_dir)) => {
            let member = Member::Cli {
                program,
                config_dir,
            };
            Ok(AzureCredentials::new(
                member,
                scope,
                "Entra ID, Azure CLI".into(),
            ))
        }
        Err(why) => {
            looked.push(why.to_string());
            Err(FindError::NotFound(looked))
        }
    }
}

/// A service principal from the environment: its secret, else its
/// certificate.
fn service_principal(var: &dyn Fn(&str) -> Option<String>, ids: &Ids) -> Result<Step, FindError> {
    let secret = var("AZURE_CLIENT_SECRET");
    let certificate = var("AZURE_CLIENT_CERTIFICATE_PATH");
    Ok(match (&ids.tenant, &ids.client_id, secret, &certificate) {
        (Some(tenant), Some(client_id), Some(secret), _) => Step::Found(
            Member::Secret {
                token_url: ids.token_url(tenant)?,
                tenant: tenant.clone(),
                client_id: client_id.clone(),
                secret,
            },
            "Entra ID, service principal (AZURE_CLIENT_ID)",
        ),
        (Some(tenant), Some(client_id), None, Some(path)) => {
            let signer = certificate::Signer::read(path.as_ref()).map_err(|why| {
                FindError::Bad(format!("AZURE_CLIENT_CERTIFICATE_PATH ({path}): {why}"))
            })?;
            Step::Found(
                Member::Certificate {
                    token_url: ids.token_url(tenant)?,
                    tenant: tenant.clone(),
                    client_id: client_id.clone(),
                    signer,
                },
                "Entra ID, service principal (AZURE_CLIENT_CERTIFICATE_PATH)",
            )
        }
        (tenant, client_id, secret, _) => Step::Looked(format!(
            "a service principal ({})",
            unset(&[
                ("AZURE_TENANT_ID", tenant.is_some()),
                ("AZURE_CLIENT_ID", client_id.is_some()),
                (
                    "AZURE_CLIENT_SECRET or AZURE_CLIENT_CERTIFICATE_PATH",
                    secret.is_some() || certificate.is_some()
                ),
            ])
        )),
    })
}

/// Workload identity: the federated token file with the tenant and client.
fn workload_identity(var: &dyn Fn(&str) -> Option<String>, ids: &Ids) -> Result<Step, FindError> {
    Ok(
        match (
            &ids.tenant,
            &ids.client_id,
            var("AZURE_FEDERATED_TOKEN_FILE"),
        ) {
            (Some(tenant), Some(client_id), Some(file)) => {
                let readable = std::fs::read_to_string(&file).is_ok_and(|t| !t.trim().is_empty());
                if !readable {
                    return Err(FindError::Bad(format!(
                        "AZURE_FEDERATED_TOKEN_FILE ({file}): cannot be read or is empty"
                    )));
                }
                Step::Found(
                    Member::Workload {
                        token_url: ids.token_url(tenant)?,
                        tenant: tenant.clone(),
                        client_id: client_id.clone(),
                        file: PathBuf::from(file),
                    },
                    "Entra ID, workload identity (AZURE_FEDERATED_TOKEN_FILE)",
                )
            }
            (tenant, client_id, file) => Step::Looked(format!(
                "workload identity ({})",
                unset(&[
                    ("AZURE_FEDERATED_TOKEN_FILE", file.is_some()),
                    ("AZURE_TENANT_ID", tenant.is_some()),
                    ("AZURE_CLIENT_ID", client_id.is_some()),
                ])
            )),
        },
    )
}

/// App Service's managed identity endpoint; `AZURE_CLIENT_ID` names a
/// user-assigned identity.
fn app_service(var: &dyn Fn(&str) -> Option<String>, ids: &Ids) -> Result<Step, FindError> {
    let (Some(endpoint), Some(header)) = (var("IDENTITY_ENDPOINT"), var("IDENTITY_HEADER")) else {
        return Ok(Step::Looked(format!(
            "a managed identity ({})",
            unset(&[
                ("IDENTITY_ENDPOINT", var("IDENTITY_ENDPOINT").is_some()),
                ("IDENTITY_HEADER", var("IDENTITY_HEADER").is_some()),
            ])
        )));
    };
    let url = url::Url::parse(&endpoint).ok();
    if !url.is_some_and(|u| matches!(u.scheme(), "http" | "https")) {
        return Err(FindError::Bad(
            "IDENTITY_ENDPOINT is not an http(s) URL".into(),
        ));
    }
    let mut header = HeaderValue::from_str(&header).map_err(|_| {
        FindError::Bad("IDENTITY_HEADER holds characters a header cannot carry".into())
    })?;
    header.set_sensitive(true);
    Ok(Step::Found(
        Member::AppService {
            endpoint,
            header,
            client_id: ids.client_id.clone(),
        },
        "Entra ID, managed identity (IDENTITY_ENDPOINT)",
    ))
}

/// `A, B not set` of the variables not set.
fn unset(vars: &[(&str, bool)]) -> String {
    let missing: Vec<&str> = vars
        .iter()
        .filter(|(_, set)| !set)
        .map(|(name, _)| *name)
        .collect();
    format!("{} not set", missing.join(", "))
}

/// The login host: `AZURE_AUTHORITY_HOST` (`https://` added to a bare
/// host; `http://` only for a loopback host, for tests), else the public
/// cloud's.
fn authority(given: Option<String>) -> Result<String, FindError> {
    let Some(given) = given else {
        return Ok(LOGIN_HOST.to_string());
    };
    let given = given.trim().trim_end_matches('/');
    let text = if given.contains("://") {
        given.to_string()
    } else {
        format!("https://{given}")
    };
    let bad = || {
        FindError::Bad(
            "AZURE_AUTHORITY_HOST is not an https:// URL (http:// is taken only for a loopback host)"
                .into(),
        )
    };
    let url = url::Url::parse(&text).map_err(|_| bad())?;
    let loopback = match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d == "localhost",
        None => false,
    };
    match url.scheme() {
        "https" if url.host().is_some() => Ok(text),
        "http" if loopback => Ok(text),
        _ => Err(bad()),
    }
}

/// Whether the instance metadata service at `base` answers within 2 s: any
/// HTTP answer to a token request without its `Metadata` header (which it
/// refuses), as azure-identity probes it; Docker Desktop's proxy answers
/// 403 "unreachable" for it, which is no answer.
fn imds_answers(base: &str) -> bool {
    let Ok(url) = url::Url::parse(base) else {
        return false;
    };
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return false;
    };
    if url.scheme() != "http" {
        return false;
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let Some(addr) = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .ok()
        .and_then(|mut a| a.next())
    else {
        return false;
    };
    let probe = || -> std::io::Result<Vec<u8>> {
        let mut stream = std::net::TcpStream::connect_timeout(&addr, IMDS_PROBE)?;
        stream.set_read_timeout(Some(IMDS_PROBE))?;
        stream.set_write_timeout(Some(IMDS_PROBE))?;
        let request = format!(
            "GET /metadata/identity/oauth2/token?api-version=2018-02-01 HTTP/1.0\r\nHost: {host}\r\n\r\n"
        );
        stream.write_all(request.as_bytes())?;
        let mut reply = Vec::new();
        stream.take(4 << 10).read_to_end(&mut reply)?;
        Ok(reply)
    };
    let Ok(reply) = probe() else {
        return false;
    };
    let reply = String::from_utf8_lossy(&reply);
    let Some(status) = reply
        .lines()
        .next()
        .filter(|l| l.starts_with("HTTP/"))
        .and_then(|l| l.split_whitespace().nth(1))
    else {
        return false;
    };
    !(status == "403" && reply.contains("unreachable"))
}

#[cfg(test)]
mod tests {
    use super::authority;

    #[test]
    fn the_authority_is_https_or_a_loopback_http_host() {
        assert_eq!(
            authority(None).unwrap(),
            "https://login.microsoftonline.com"
        );
        assert_eq!(
            authority(Some("login.microsoftonline.us/".into())).unwrap(),
            "https://login.microsoftonline.us"
        );
        assert_eq!(
            authority(Some("http://127.0.0.1:8080".into())).unwrap(),
            "http://127.0.0.1:8080"
        );
        assert!(authority(Some("http://localhost:1".into())).is_ok());
        assert!(authority(Some("http://login.example.com".into())).is_err());
        assert!(authority(Some("ftp://x".into())).is_err());
    }
}
