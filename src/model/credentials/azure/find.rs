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

/// Finds the first member of the chain for tokens of `scope`.
pub(crate) fn find(env: Env, scope: &str) -> Result<AzureCredentials, FindError> {
    let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let mut looked = Vec::new();
    let tenant = var("AZURE_TENANT_ID");
    let client_id = var("AZURE_CLIENT_ID");
    let authority = || authority(var("AZURE_AUTHORITY_HOST"));
    let token_url = |tenant: &str| -> Result<String, FindError> {
        if !tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        {
            return Err(FindError::Bad(
                "AZURE_TENANT_ID is not a tenant id or domain".into(),
            ));
        }
        Ok(format!("{}/{tenant}/oauth2/v2.0/token", authority()?))
    };

    // A service principal from the environment.
    let secret = var("AZURE_CLIENT_SECRET");
    let certificate = var("AZURE_CLIENT_CERTIFICATE_PATH");
    match (&tenant, &client_id, secret, &certificate) {
        (Some(tenant), Some(client_id), Some(secret), _) => {
            let member = Member::Secret {
                token_url: token_url(tenant)?,
                tenant: tenant.clone(),
                client_id: client_id.clone(),
                secret,
            };
            let source = "Entra ID, service principal (AZURE_CLIENT_ID)";
            return Ok(AzureCredentials::new(member, scope, source.into()));
        }
        (Some(tenant), Some(client_id), None, Some(path)) => {
            let signer = certificate::Signer::read(path.as_ref()).map_err(|why| {
                FindError::Bad(format!("AZURE_CLIENT_CERTIFICATE_PATH ({path}): {why}"))
            })?;
            let member = Member::Certificate {
                token_url: token_url(tenant)?,
                tenant: tenant.clone(),
                client_id: client_id.clone(),
                signer,
            };
            let source = "Entra ID, service principal (AZURE_CLIENT_CERTIFICATE_PATH)";
            return Ok(AzureCredentials::new(member, scope, source.into()));
        }
        (tenant, client_id, secret, _) => looked.push(format!(
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
    }

    // Workload identity.
    let file = var("AZURE_FEDERATED_TOKEN_FILE");
    match (&tenant, &client_id, file) {
        (Some(tenant), Some(client_id), Some(file)) => {
            let readable = std::fs::read_to_string(&file).is_ok_and(|t| !t.trim().is_empty());
            if !readable {
                return Err(FindError::Bad(format!(
                    "AZURE_FEDERATED_TOKEN_FILE ({file}): cannot be read or is empty"
                )));
            }
            let member = Member::Workload {
                token_url: token_url(tenant)?,
                tenant: tenant.clone(),
                client_id: client_id.clone(),
                file: PathBuf::from(file),
            };
            let source = "Entra ID, workload identity (AZURE_FEDERATED_TOKEN_FILE)";
            return Ok(AzureCredentials::new(member, scope, source.into()));
        }
        (tenant, client_id, file) => looked.push(format!(
            "workload identity ({})",
            unset(&[
                ("AZURE_FEDERATED_TOKEN_FILE", file.is_some()),
                ("AZURE_TENANT_ID", tenant.is_some()),
                ("AZURE_CLIENT_ID", client_id.is_some()),
            ])
        )),
    }

    // A managed identity: App Service's endpoint, else the instance
    // metadata service. `AZURE_CLIENT_ID` names a user-assigned identity.
    match (var("IDENTITY_ENDPOINT"), var("IDENTITY_HEADER")) {
        (Some(endpoint), Some(header)) => {
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
            let member = Member::AppService {
                endpoint,
                header,
                client_id: client_id.clone(),
            };
            let source = "Entra ID, managed identity (IDENTITY_ENDPOINT)";
            return Ok(AzureCredentials::new(member, scope, source.into()));
        }
        (endpoint, header) => looked.push(format!(
            "a managed identity ({})",
            unset(&[
                ("IDENTITY_ENDPOINT", endpoint.is_some()),
                ("IDENTITY_HEADER", header.is_some()),
            ])
        )),
    }
    let imds = var("AZURE_POD_IDENTITY_AUTHORITY_HOST")
        .map(|h| h.trim().trim_end_matches('/').to_string())
        .unwrap_or_else(|| IMDS.to_string());
    if imds_answers(&imds) {
        let member = Member::Imds {
            base: imds,
            client_id,
        };
        let source = "Entra ID, managed identity (instance metadata service)";
        return Ok(AzureCredentials::new(member, scope, source.into()));
    }
    looked.push(format!(
        "the instance metadata service ({imds}: no answer within {} s)",
        IMDS_PROBE.as_secs()
    ));

    // The Azure CLI.
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
            looked.push(why);
            Err(FindError::NotFound(looked))
        }
    }
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
