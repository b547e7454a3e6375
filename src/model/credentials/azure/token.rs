//! One token request of Azure's credential chain and its answer: Microsoft
//! Entra ID's (`expires_in`, errors as `error_description` with an AADSTS
//! code), App Service's (`expires_on`, errors as `message`) and the
//! instance metadata service's (strings for numbers). A token endpoint that
//! cannot be reached, or answers 5xx, is a `network` failure; one that
//! refuses is an auth error naming the source, with the endpoint's reason
//! but never a secret.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use serde_json::Value;

use crate::model::client::display_url;
use crate::model::ModelError;

/// The most a token endpoint's answer may hold.
const MAX_REPLY: usize = 64 << 10;
/// How long a token endpoint may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The longest reason quoted from a refusal.
const MAX_REASON: usize = 300;

/// A token and how long it lasts from now.
pub(super) struct Token {
    pub(super) value: String,
    pub(super) lifetime: Duration,
}

/// Sends `request` to the token endpoint `url` within its bounds and reads
/// its token; `secrets` are cut out of any reason quoted.
pub(super) async fn call(
    source: &str,
    url: &str,
    request: reqwest::RequestBuilder,
    secrets: &[&str],
) -> Result<Token, ModelError> {
    let unreachable = || ModelError::Network {
        message: format!(
            "the token endpoint {} could not be reached ({source})",
            display_url(url)
        ),
    };
    let answer = async {
        let response = request.send().await.map_err(|_| unreachable())?;
        let status = response.status().as_u16();
        let body = read_capped(response).await.map_err(|()| unreachable())?;
        Ok::<_, ModelError>((status, body))
    };
    let (status, body) = tokio::time::timeout(TIMEOUT, answer)
        .await
        .map_err(|_| unreachable())??;
    let no_token = || ModelError::Network {
        message: format!(
            "the token endpoint {} answered without a token (HTTP {status}, {source})",
            display_url(url)
        ),
    };
    if (400..500).contains(&status) && status != 408 && status != 429 {
        let mut why = format!("the token endpoint {} refused them", display_url(url));
        if let Some(reason) = reason(&body, secrets) {
            why = format!("{why}: {reason}");
        }
        return Err(refused(source, status, &why));
    }
    if !(200..300).contains(&status) {
        return Err(no_token());
    }
    parse(&body).ok_or_else(no_token)
}

/// An auth error naming where the credentials came from, never them.
pub(super) fn refused(source: &str, status: u16, why: &str) -> ModelError {
    ModelError::Status {
        status: if status == 403 { 403 } else { 401 },
        message: format!("the Entra ID credentials from {source}: {why}"),
        retry_after: None,
    }
}

/// A token reply of any of the chain's endpoints (`access_token`, or the
/// Azure CLI's `accessToken`), and its lifetime: `expires_in`, else
/// `expires_on` (seconds since the epoch) from now, else an hour.
pub(super) fn parse(body: &[u8]) -> Option<Token> {
    let reply: Value = serde_json::from_slice(body).ok()?;
    let value = reply
        .get("access_token")
        .or_else(|| reply.get("accessToken"))?
        .as_str()
        .filter(|t| !t.is_empty())?
        .to_string();
    let number = |key: &str| match reply.get(key)? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let seconds = number("expires_in")
        .or_else(|| number("expires_on").map(|on| on.saturating_sub(now)))
        .unwrap_or(3600)
        .min(24 * 3600);
    Some(Token {
        value,
        lifetime: Duration::from_secs(seconds),
    })
}

/// The reason a refusal gives: Entra's `error_description` (its first line:
/// the rest is trace and correlation ids), else App Service's `message`,
/// else the `error` code; bounded, one line, secrets cut out.
fn reason(body: &[u8], secrets: &[&str]) -> Option<String> {
    let reply: Value = serde_json::from_slice(body).ok()?;
    let text = ["error_description", "message", "error"]
        .iter()
        .find_map(|key| reply.get(key).and_then(Value::as_str))
        .or_else(|| reply.pointer("/error/message").and_then(Value::as_str))?;
    let mut line: String = text
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_REASON)
        .collect();
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        line = line.replace(secret, "[redacted]");
    }
    let line = line.trim().to_string();
    (!line.is_empty()).then_some(line)
}

/// Reads a token reply within its bound.
async fn read_capped(response: reqwest::Response) -> Result<Vec<u8>, ()> {
    let mut stream = response.bytes_stream();
    let mut body = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| ())?;
        if body.len() + chunk.len() > MAX_REPLY {
            return Err(());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::{parse, reason};

    #[test]
    fn every_endpoints_reply_gives_a_token_and_its_lifetime() {
        let entra = br#"{"token_type":"Bearer","expires_in":3599,"ext_expires_in":3599,"access_token":"eyJ0"}"#;
        let t = parse(entra).unwrap();
        assert_eq!((t.value.as_str(), t.lifetime.as_secs()), ("eyJ0", 3599));
        let imds =
            br#"{"access_token":"a","expires_in":"86399","expires_on":"1","token_type":"Bearer"}"#;
        assert_eq!(parse(imds).unwrap().lifetime.as_secs(), 86399);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let app_service = format!(r#"{{"access_token":"b","expires_on":"{}"}}"#, now + 600);
        let secs = parse(app_service.as_bytes()).unwrap().lifetime.as_secs();
        assert!((598..=600).contains(&secs), "{secs}");
        let cli = format!(
            r#"{{"accessToken":"c","expires_on":{},"tokenType":"Bearer"}}"#,
            now + 900
        );
        assert_eq!(parse(cli.as_bytes()).unwrap().value, "c");
        assert!(parse(b"<html>").is_none());
        assert!(parse(br#"{"access_token":""}"#).is_none());
    }

    #[test]
    fn a_refusals_reason_is_one_bounded_line_without_secrets() {
        let body = br#"{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided: s3cret-value.\r\nTrace ID: 1\r\nCorrelation ID: 2"}"#;
        assert_eq!(
            reason(body, &["s3cret-value"]).unwrap(),
            "AADSTS7000215: Invalid client secret provided: [redacted]."
        );
        let app_service = br#"{"statusCode":400,"message":"No managed identity found for specified ClientId/ResourceId/PrincipalId."}"#;
        assert!(reason(app_service, &[])
            .unwrap()
            .starts_with("No managed identity found"));
        let long = format!(r#"{{"error":"{}"}}"#, "x".repeat(5000));
        assert_eq!(reason(long.as_bytes(), &[]).unwrap().len(), 300);
        assert!(reason(b"not json", &[]).is_none());
    }
}
