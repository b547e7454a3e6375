//! Google's error bodies (`{"error": {"code", "message", "status",
//! "details"}}`, the Gemini API's and Vertex AI's alike) as classified
//! `ModelError`s (SPEC 22): `RESOURCE_EXHAUSTED` is a rate limit (`http_429`)
//! whose `RetryInfo.retryDelay` is the server's Retry-After, unless a
//! `QuotaFailure` names a per-day quota (`quota`: waiting won't fix it
//! today); `UNAVAILABLE` and `INTERNAL` are transient; `PERMISSION_DENIED`
//! and `UNAUTHENTICATED` are auth errors; "the input token count exceeds
//! the maximum" is a context overflow. A body in any other shape is read
//! the usual way (`http::error_from_body`): Claude on Vertex answers in
//! Anthropic's shape.

use std::time::Duration;

use serde_json::Value;

use crate::model::bounds::MAX_MESSAGE_CHARS;
use crate::model::error::classify_status;
use crate::model::http::{error_from_body, seconds};
use crate::model::ModelError;

/// The `@type` of the details read.
const RETRY_INFO: &str = "type.googleapis.com/google.rpc.RetryInfo";
const QUOTA_FAILURE: &str = "type.googleapis.com/google.rpc.QuotaFailure";
const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";

/// At most this many `details` entries (and violations) are looked at.
const MAX_DETAILS: usize = 32;

/// An HTTP error response's body: Google's shape, else the usual reading.
pub(crate) fn error_from_google_body(
    status: u16,
    body: &[u8],
    header_wait: Option<Duration>,
) -> ModelError {
    let json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    match json.get("error").filter(|e| is_google(e)) {
        Some(error) => google_error(Some(status), error, header_wait),
        None => error_from_body(status, body, header_wait),
    }
}

/// Whether an error object is Google's: a string `status` (`"UNAVAILABLE"`).
pub(crate) fn is_google(error: &Value) -> bool {
    error
        .get("status")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
}

/// A Google error object, from an HTTP error (its `status`) or inside a
/// stream (`None`: the object's own `code`, else what its status names).
pub(crate) fn google_error(
    http_status: Option<u16>,
    error: &Value,
    header_wait: Option<Duration>,
) -> ModelError {
    let name = error.get("status").and_then(Value::as_str).unwrap_or("");
    let code = error
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c));
    let status = http_status.or(code).unwrap_or_else(|| status_of_name(name));
    let message: String = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .chars()
        .take(MAX_MESSAGE_CHARS)
        .collect();
    let details = error
        .get("details")
        .and_then(Value::as_array)
        .map(|d| &d[..d.len().min(MAX_DETAILS)])
        .unwrap_or_default();
    let of_type = |kind: &'static str| {
        details
            .iter()
            .filter(move |d| d.get("@type").and_then(Value::as_str) == Some(kind))
    };
    if name == "RESOURCE_EXHAUSTED" || status == 429 {
        if of_type(QUOTA_FAILURE).any(names_a_daily_quota) {
            return ModelError::Quota { status, message };
        }
        let wait = of_type(RETRY_INFO)
            .find_map(|d| d.get("retryDelay").and_then(Value::as_str))
            .and_then(parse_google_duration)
            .or(header_wait);
        return ModelError::Status {
            status: 429,
            message,
            retry_after: wait,
        };
    }
    let lower = message.to_ascii_lowercase();
    if lower.contains("input token count") && lower.contains("exceeds the maximum") {
        return ModelError::ContextOverflow { message };
    }
    let status = match name {
        // An invalid key comes as 400 INVALID_ARGUMENT with reason
        // API_KEY_INVALID: an auth error all the same.
        _ if of_type(ERROR_INFO)
            .any(|d| d.get("reason").and_then(Value::as_str) == Some("API_KEY_INVALID")) =>
        {
            401
        }
        "UNAUTHENTICATED" => 401,
        "PERMISSION_DENIED" => 403,
        "UNAVAILABLE" if !(500..600).contains(&status) => 503,
        "INTERNAL" if !(500..600).contains(&status) => 500,
        _ => status,
    };
    classify_status(status, Some(name), &message, header_wait)
}

/// The HTTP status a canonical status name stands for.
fn status_of_name(name: &str) -> u16 {
    match name {
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => 400,
        "UNAUTHENTICATED" => 401,
        "PERMISSION_DENIED" => 403,
        "NOT_FOUND" => 404,
        "ALREADY_EXISTS" | "ABORTED" => 409,
        "RESOURCE_EXHAUSTED" => 429,
        "CANCELLED" => 499,
        "UNIMPLEMENTED" => 501,
        "UNAVAILABLE" => 503,
        "DEADLINE_EXCEEDED" => 504,
        _ => 500,
    }
}

/// Whether a `QuotaFailure` names a quota counted per day
/// (`GenerateRequestsPerDayPerProjectPerModel-FreeTier`, a metric
/// `…/requests_per_day`).
fn names_a_daily_quota(failure: &Value) -> bool {
    let violations = failure
        .get("violations")
        .and_then(Value::as_array)
        .map(|v| &v[..v.len().min(MAX_DETAILS)])
        .unwrap_or_default();
    violations.iter().any(|v| {
        ["quotaId", "quotaMetric", "subject", "description"]
            .iter()
            .filter_map(|field| v.get(*field).and_then(Value::as_str))
            .any(|text| {
                let lower = text.to_ascii_lowercase();
                lower.contains("perday") || lower.contains("per_day") || lower.contains("per day")
            })
    })
}

/// A protobuf JSON duration (`"38s"`, `"0.5s"`, `"38.123456789s"`).
pub(crate) fn parse_google_duration(text: &str) -> Option<Duration> {
    let number = text.trim().strip_suffix('s')?;
    if number.is_empty() || number.len() > 32 {
        return None;
    }
    seconds(number.parse::<f64>().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ErrorClass;

    /// As the Gemini API documents a free-tier 429.
    const PER_MINUTE: &str = r#"{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.5-flash"},"quotaValue":"10"}]},{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"38s"}]}}"#;

    #[test]
    fn resource_exhausted_is_a_rate_limit_with_its_retry_delay() {
        let e = error_from_google_body(429, PER_MINUTE.as_bytes(), None);
        assert_eq!(e.class(), ErrorClass::Transient("http_429".into()));
        assert_eq!(e.retry_after(), Some(Duration::from_secs(38)));
    }

    #[test]
    fn a_per_day_quota_is_quota() {
        let daily = PER_MINUTE.replace("PerMinute", "PerDay");
        let e = error_from_google_body(429, daily.as_bytes(), None);
        assert_eq!(e.class(), ErrorClass::Quota);
        assert!(!e.to_string().contains("quotaId"), "{e}");
    }

    #[test]
    fn canonical_statuses_map_onto_the_classes() {
        let body = |code: u16, status: &str, message: &str| {
            format!(r#"{{"error":{{"code":{code},"message":"{message}","status":"{status}"}}}}"#)
        };
        let cases = [
            (503, "UNAVAILABLE", "The model is overloaded.", ErrorClass::Transient("http_503".into())),
            (500, "INTERNAL", "An internal error has occurred.", ErrorClass::Transient("http_500".into())),
            (403, "PERMISSION_DENIED", "denied", ErrorClass::Fatal),
            (401, "UNAUTHENTICATED", "no", ErrorClass::Fatal),
            (400, "INVALID_ARGUMENT", "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).", ErrorClass::ContextOverflow),
            (404, "NOT_FOUND", "models/gemini-9 is not found", ErrorClass::Fatal),
        ];
        for (code, status, message, class) in cases {
            let e = error_from_google_body(code, body(code, status, message).as_bytes(), None);
            assert_eq!(e.class(), class, "{status}");
        }
        let key = r#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}"#;
        let e = error_from_google_body(400, key.as_bytes(), None);
        assert_eq!(e.http_status(), Some(401));
    }

    #[test]
    fn in_a_stream_the_status_name_says_the_status() {
        let e = google_error(
            None,
            &serde_json::json!({"status": "UNAVAILABLE", "message": "overloaded"}),
            None,
        );
        assert_eq!(e.class(), ErrorClass::Transient("http_503".into()));
    }

    #[test]
    fn other_shapes_are_read_as_usual() {
        let anthropic =
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let e = error_from_google_body(529, anthropic, None);
        assert_eq!(e.class(), ErrorClass::Transient("http_529".into()));
    }

    #[test]
    fn google_durations() {
        assert_eq!(parse_google_duration("38s"), Some(Duration::from_secs(38)));
        assert_eq!(
            parse_google_duration("0.5s"),
            Some(Duration::from_millis(500))
        );
        assert_eq!(parse_google_duration("38"), None);
        assert_eq!(parse_google_duration("-1s"), None);
        assert_eq!(parse_google_duration(&format!("{}s", "9".repeat(40))), None);
    }
}
