//! The HTTP side shared by every wire adapter: sending a streaming request
//! through the process's one client (`client.rs`), turning error
//! responses into classified `ModelError`s (Retry-After included), reading
//! a reply (SSE, or one JSON body) under the stream timeouts (`timed.rs`;
//! NDJSON: `ndjson.rs`), and telling the request's watcher (`watch.rs`)
//! what its response said: the status and the published rate limits
//! (SPEC 17), on success and error alike.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use futures::stream::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use serde_json::Value;

use super::bounds::{too_large, MAX_ERROR_BODY, MAX_EVENT, MAX_MESSAGE_CHARS};
pub(crate) use super::client::{display_url, shared_client};
use super::credentials::{Credentials, StaticKey};
use super::error::classify_status;
pub use super::sse::SseEvent;
use super::sse::{SseDecoder, SseError};
use super::timed::{Framing, TimedStream};
use super::watch::{first_event_deadline, note_first_event, note_response};
use super::ModelError;
use crate::policy::StreamTimeouts;
use crate::setup::SetupError;

/// How a provider wants its key sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer <key>`
    Bearer,
    /// `x-api-key: <key>` (Anthropic)
    XApiKey,
    /// `x-goog-api-key: <key>` (the Gemini API)
    XGoogApiKey,
}

/// Reads an error response's body (status, body, the Retry-After header's
/// wait) into a classified error: `error_from_body`, or a vendor's own.
pub(crate) type ErrorReader = fn(u16, &[u8], Option<Duration>) -> ModelError;

/// An endpoint with its headers (key included) and stream timeouts.
#[derive(Clone)]
pub struct HttpTransport {
    endpoint: String,
    headers: HeaderMap,
    timeouts: StreamTimeouts,
    /// What authorizes each request just before it is sent, if anything
    /// does beyond the static headers.
    credentials: Option<std::sync::Arc<dyn super::credentials::Credentials>>,
    errors: ErrorReader,
}

impl std::fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print headers: they hold the key.
        f.debug_struct("HttpTransport")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl HttpTransport {
    /// `endpoint` is the base URL the API's own paths are appended to.
    pub fn new(
        endpoint: &str,
        api_key: Option<&str>,
        auth: Auth,
        extra_headers: &BTreeMap<String, String>,
        timeouts: StreamTimeouts,
    ) -> Result<HttpTransport, SetupError> {
        let mut headers = HeaderMap::new();
        for (name, value) in extra_headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| SetupError(format!("invalid header name '{name}'")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| SetupError(format!("invalid value for header '{name}'")))?;
            headers.insert(name, value);
        }
        // A key is one kind of credentials, authorizing each request as
        // any other kind does (and replaced by `with_credentials`).
        let credentials = match api_key.filter(|k| !k.is_empty()) {
            Some(key) => {
                let key = match auth {
                    Auth::Bearer => StaticKey::bearer(key, "the provider's key")?,
                    Auth::XApiKey => StaticKey::header("x-api-key", key, "the provider's key")?,
                    Auth::XGoogApiKey => {
                        StaticKey::header("x-goog-api-key", key, "the provider's key")?
                    }
                };
                Some(std::sync::Arc::new(key) as std::sync::Arc<dyn Credentials>)
            }
            None => None,
        };
        Ok(HttpTransport {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            headers,
            timeouts,
            credentials,
            errors: error_from_body,
        })
    }

    /// Drops the credentials' cached token after a refusal saying it
    /// expired; `true` when sending again with fresh ones may help.
    pub(crate) fn invalidate_credentials(&self) -> bool {
        self.credentials.as_ref().is_some_and(|c| c.invalidate())
    }

    /// Authorizes every request with `credentials` (a signer, a token), in
    /// place of the key the transport was made with.
    pub(crate) fn with_credentials(
        mut self,
        credentials: std::sync::Arc<dyn super::credentials::Credentials>,
    ) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// Reads error bodies with `reader` (a vendor's own shape).
    pub(crate) fn with_error_reader(mut self, reader: ErrorReader) -> Self {
        self.errors = reader;
        self
    }

    /// Adds a fixed header (e.g. `anthropic-version`).
    pub(crate) fn with_header(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
        self
    }

    /// The stream timeouts of the request being sent: the transport's own,
    /// with the first-event deadline the gate set for this request
    /// (`watch_request`) when it set a longer one. (A transport that does
    /// not stream waits as long as the idle limit already.)
    pub(crate) fn timeouts(&self) -> StreamTimeouts {
        let mut timeouts = self.timeouts;
        if let Some(first_event) = first_event_deadline() {
            timeouts.first_event = timeouts.first_event.max(first_event);
        }
        timeouts
    }

    /// The full URL for an API path.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{}", self.endpoint, path)
    }

    /// POSTs `body` (JSON bytes) and waits for a successful status within
    /// the first-event timeout. Error statuses become classified errors.
    pub(crate) async fn post(
        &self,
        path: &str,
        body: bytes::Bytes,
    ) -> Result<(reqwest::Response, Instant), ModelError> {
        self.post_with(path, body, |status, _, body, wait| {
            (self.errors)(status, body, wait)
        })
        .await
    }

    /// `post`, with the error responses classified by `classify` (the
    /// status, the headers, the body read up to `MAX_ERROR_BODY` and the
    /// `Retry-After` wait): for an API whose errors say what they are in a
    /// header (Bedrock's `x-amzn-errortype`). A refusal saying the
    /// credentials expired drops the cached ones and sends the request
    /// again at once with fresh ones, without using up a retry (SPEC 22).
    pub(crate) async fn post_with(
        &self,
        path: &str,
        body: bytes::Bytes,
        classify: impl Fn(u16, &HeaderMap, &[u8], Option<Duration>) -> ModelError,
    ) -> Result<(reqwest::Response, Instant), ModelError> {
        match self.post_once(path, body.clone(), &classify).await {
            Err(e) if refused_as_expired(&e) && self.invalidate_credentials() => {
                self.post_once(path, body, &classify).await
            }
            other => other,
        }
    }

    /// One POST of `post_with`.
    async fn post_once(
        &self,
        path: &str,
        body: bytes::Bytes,
        classify: &impl Fn(u16, &HeaderMap, &[u8], Option<Duration>) -> ModelError,
    ) -> Result<(reqwest::Response, Instant), ModelError> {
        let sent = Instant::now();
        let timeouts = self.timeouts();
        let mut request = shared_client()
            .post(self.url(path))
            .headers(self.headers.clone())
            .header("content-type", "application/json")
            .body(body)
            .build()
            .map_err(|e| with_url(network_error(&e), &self.url(path)))?;
        let send = async {
            if let Some(credentials) = &self.credentials {
                credentials.authorize(&mut request).await?;
            }
            shared_client()
                .execute(request)
                .await
                .map_err(|e| with_url(network_error(&e), &self.url(path)))
        };
        let response = match tokio::time::timeout(timeouts.first_event, send).await {
            Err(_) => {
                return Err(ModelError::Timeout {
                    message: "no response headers within the first-event timeout".into(),
                    deadline: Some(timeouts.first_event),
                })
            }
            Ok(Err(e)) => return Err(e),
            Ok(Ok(r)) => r,
        };
        let status = response.status();
        note_response(status.as_u16(), response.headers());
        if status.is_success() {
            return Ok((response, sent));
        }
        let header_wait = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let headers = response.headers().clone();
        let body = match tokio::time::timeout(timeouts.idle, read_capped(response, MAX_ERROR_BODY))
            .await
        {
            Ok(Ok((bytes, _))) => bytes,
            _ => Vec::new(),
        };
        let error = classify(status.as_u16(), &headers, &body, header_wait);
        Err(if status == reqwest::StatusCode::NOT_FOUND {
            with_url(error, &self.url(path))
        } else {
            error
        })
    }
}

/// Whether a refusal says the request's credentials expired: a 401, or a
/// 400/403 whose message says so (Bedrock's `ExpiredTokenException`).
/// Only credentials that can be fetched again act on it (`invalidate`).
fn refused_as_expired(error: &ModelError) -> bool {
    match error {
        ModelError::Status { status: 401, .. } => true,
        ModelError::Status {
            status: 400 | 403,
            message,
            ..
        } => message.to_ascii_lowercase().contains("expired"),
        _ => false,
    }
}

/// Adds the endpoint URL asked to a network or 404 error's message.
fn with_url(mut error: ModelError, url: &str) -> ModelError {
    if let ModelError::Network { message } | ModelError::Status { message, .. } = &mut error {
        let at = format!("at {}", display_url(url));
        *message = if message.is_empty() {
            at
        } else {
            format!("{message} {at}")
        };
    }
    error
}

/// Reads a body up to `cap` bytes; the rest is not read. Says whether the
/// body went past the cap.
async fn read_capped(
    response: reqwest::Response,
    cap: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut bytes = response.bytes_stream();
    let mut body = Vec::new();
    while let Some(chunk) = bytes.next().await {
        let chunk = chunk?;
        let room = cap - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// A successful reply: a stream, or one JSON body from a server that did not
/// stream (`content-type: application/json`).
pub(crate) enum Reply {
    Stream(SseReader),
    Json(Vec<u8>),
}

/// Looks at a successful response's content type: a JSON body is read whole
/// (at most `MAX_EVENT` bytes, under the first-event timeout) and is the
/// request's first event once whole, anything else is read as server-sent
/// events.
pub(crate) async fn read_reply(
    response: reqwest::Response,
    sent: Instant,
    timeouts: StreamTimeouts,
) -> Result<Reply, ModelError> {
    let json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    if !json {
        return Ok(Reply::Stream(SseReader::new(response, sent, timeouts)));
    }
    let limit = timeouts
        .first_event
        .saturating_sub(sent.elapsed())
        .max(timeouts.idle);
    match tokio::time::timeout(limit, read_capped(response, MAX_EVENT)).await {
        Err(_) => Err(ModelError::Timeout {
            message: "the reply body did not arrive in time".into(),
            deadline: Some(timeouts.first_event.max(timeouts.idle)),
        }),
        Ok(Err(e)) => Err(network_error(&e)),
        Ok(Ok((_, true))) => Err(too_large("a reply body")),
        Ok(Ok((body, false))) => {
            // A whole one-body reply is a whole event (SPEC 4): the first.
            note_first_event();
            Ok(Reply::Json(body))
        }
    }
}

/// A connection-level failure, saying which when its causes tell
/// (`unreachable::cause`: a host that does not resolve, a refused
/// connection, a failed TLS handshake, a reset).
pub(crate) fn network_error(e: &reqwest::Error) -> ModelError {
    let message = super::unreachable::cause(e, e.is_connect()).unwrap_or_else(|| {
        if e.is_connect() {
            "connection failed"
        } else if e.is_timeout() {
            "timed out"
        } else if e.is_body() || e.is_decode() {
            "connection dropped during the reply"
        } else {
            "request failed"
        }
        .to_string()
    });
    ModelError::Network { message }
}

/// Builds a classified error from an error response body. Only the vendor's
/// short message is kept, never the body.
pub(crate) fn error_from_body(
    status: u16,
    body: &[u8],
    header_wait: Option<Duration>,
) -> ModelError {
    let json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let error = json.get("error").unwrap_or(&json);
    let message = match error {
        Value::String(s) => s.clone(),
        _ => error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
    };
    let message: String = message.chars().take(MAX_MESSAGE_CHARS).collect();
    let code = error
        .get("code")
        .and_then(Value::as_str)
        .or_else(|| error.get("type").and_then(Value::as_str));
    let body_wait = [error.get("retry_after"), json.get("retry_after")]
        .into_iter()
        .flatten()
        .find_map(Value::as_f64)
        .and_then(seconds);
    let wait = match (header_wait, body_wait) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    classify_status(status, code, &message, wait)
}

/// The longest wait a server can ask for; anything longer saturates here
/// (far beyond any `max_backoff`, so it moves a chain on at once).
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A wait in seconds from a server: negative or NaN is none, too long
/// saturates at `MAX_RETRY_AFTER`.
pub(crate) fn seconds(secs: f64) -> Option<Duration> {
    if secs.is_nan() || secs < 0.0 {
        return None;
    }
    Some(Duration::try_from_secs_f64(secs).map_or(MAX_RETRY_AFTER, |d| d.min(MAX_RETRY_AFTER)))
}

/// Parses a `Retry-After` value: delay seconds or an HTTP date.
pub(crate) fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if value.len() > 64 {
        // No honest Retry-After is this long; all digits is "very long".
        return value
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then_some(MAX_RETRY_AFTER);
    }
    if let Ok(secs) = value.parse::<f64>() {
        return seconds(secs);
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Reads server-sent events under the stream timeouts (`timed.rs`),
/// decoding them with the linear-time `sse::SseDecoder`.
pub(crate) struct SseReader {
    stream: TimedStream,
    decoder: SseDecoder,
}

impl Framing for SseDecoder {
    fn push(&mut self, chunk: &[u8]) {
        SseDecoder::push(self, chunk);
    }

    fn poll(&mut self, _ended: bool) -> Result<bool, ModelError> {
        SseDecoder::poll(self).map_err(|e| match e {
            SseError::InvalidUtf8 => ModelError::StreamIncomplete,
            SseError::TooLarge => too_large("a stream event"),
        })
    }
}

impl SseReader {
    pub(crate) fn new(
        response: reqwest::Response,
        sent: Instant,
        timeouts: StreamTimeouts,
    ) -> Self {
        SseReader {
            stream: TimedStream::of(response, sent, timeouts),
            decoder: SseDecoder::default(),
        }
    }

    /// The next event; `Ok(None)` when the stream ended. The event borrows
    /// the reader's buffer until the next call.
    pub(crate) async fn next(&mut self) -> Result<Option<SseEvent<'_>>, ModelError> {
        if self.stream.next_event(&mut self.decoder).await? {
            Ok(Some(self.decoder.take()))
        } else {
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ErrorClass;

    #[test]
    fn urls_are_shown_without_secrets() {
        assert_eq!(
            display_url("https://user:pw@gw.example:8443/v1/chat/completions?key=sk-1#x"),
            "https://gw.example:8443/v1/chat/completions"
        );
        assert_eq!(
            display_url("http://127.0.0.1:11434/api/chat"),
            "http://127.0.0.1:11434/api/chat"
        );
        let e = with_url(
            ModelError::Network {
                message: "connection failed".into(),
            },
            "http://h:1/v1/x",
        );
        assert_eq!(
            e.to_string(),
            "network error: connection failed at http://h:1/v1/x"
        );
    }

    #[test]
    fn retry_after_seconds_and_http_date() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        let future = SystemTime::now() + Duration::from_secs(120);
        let date = httpdate::fmt_http_date(future);
        let wait = parse_retry_after(&date).unwrap();
        assert!(
            wait > Duration::from_secs(100) && wait <= Duration::from_secs(120),
            "{wait:?}"
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
        assert_eq!(parse_retry_after("-3"), None);
        assert_eq!(parse_retry_after("NaN"), None);
    }

    #[test]
    fn absurd_retry_after_values_saturate() {
        let nines = "9".repeat(40);
        assert_eq!(parse_retry_after(&nines), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("1e308"), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("inf"), Some(MAX_RETRY_AFTER));
        assert_eq!(
            parse_retry_after(&"9".repeat(100_000)),
            Some(MAX_RETRY_AFTER)
        );
        let body = format!(r#"{{"error":{{"message":"x","retry_after":{nines}}}}}"#);
        assert_eq!(
            error_from_body(429, body.as_bytes(), None).retry_after(),
            Some(MAX_RETRY_AFTER)
        );
    }

    #[test]
    fn vendor_error_bodies_are_classified_without_the_body() {
        let openai = br#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
        assert_eq!(
            error_from_body(429, openai, None).class(),
            ErrorClass::Quota
        );
        let anthropic =
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let e = error_from_body(529, anthropic, None);
        assert_eq!(e.class(), ErrorClass::Transient("http_529".into()));
        assert_eq!(e.to_string(), "HTTP 529: Overloaded");
        let with_field = br#"{"error":{"message":"slow down","retry_after":3}}"#;
        assert_eq!(
            error_from_body(429, with_field, Some(Duration::from_secs(1))).retry_after(),
            Some(Duration::from_secs(3))
        );
        let top = br#"{"error":"rate limited","retry_after":2.5}"#;
        assert_eq!(
            error_from_body(429, top, None).retry_after(),
            Some(Duration::from_millis(2500))
        );
    }
}
