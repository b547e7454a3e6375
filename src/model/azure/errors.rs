//! Azure OpenAI's errors as section 4's classes (SPEC 22). Azure answers in
//! OpenAI's shape with its codes as strings (`{"error": {"code": "429",
//! "message": "…"}}`), read the usual way (`http::error_from_body`): 429 and
//! 5xx transient, 401/403/404 (`DeploymentNotFound`) fatal, quota and
//! context overflow as OpenAI's. What Azure adds: a 429's wait is its
//! `retry-after-ms` header when it sends one, else `Retry-After` (as
//! openai's own SDK reads them); a prompt or reply its content filter stops
//! (code `content_filter`, or `innererror.code`
//! `ResponsibleAIPolicyViolation`) is a refusal, retried by no one and
//! crossed by no fallback; and "Out of call volume quota" is `quota`.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::model::bounds::MAX_MESSAGE_CHARS;
use crate::model::http::{error_from_body, seconds};
use crate::model::ModelError;

/// At most this many content-filter categories are named.
const MAX_CATEGORIES: usize = 8;

/// An HTTP error response of Azure OpenAI.
pub(super) fn http_error(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    header_wait: Option<Duration>,
) -> ModelError {
    let json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if let Some(refusal) = json.get("error").and_then(content_filter) {
        return refusal;
    }
    let wait = retry_after_ms(headers).or(header_wait);
    match error_from_body(status, body, wait) {
        ModelError::Status {
            status, message, ..
        } if (400..500).contains(&status)
            && message
                .to_ascii_lowercase()
                .contains("out of call volume quota") =>
        {
            ModelError::Quota { status, message }
        }
        other => other,
    }
}

/// The `retry-after-ms` header's wait (milliseconds, a fraction allowed).
fn retry_after_ms(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get("retry-after-ms")?.to_str().ok()?.trim();
    if value.len() > 32 {
        return None;
    }
    seconds(value.parse::<f64>().ok()? / 1000.0)
}

/// An error object (an HTTP error's, or one sent inside a stream) that
/// says the content filter stopped the prompt or the reply: a refusal
/// carrying Azure's message and the categories it filtered.
pub(super) fn content_filter(error: &Value) -> Option<ModelError> {
    let code = |v: &Value| v.get("code").and_then(Value::as_str).map(str::to_string);
    let inner = error.get("innererror");
    let filtered = code(error).is_some_and(|c| c.eq_ignore_ascii_case("content_filter"))
        || inner
            .and_then(code)
            .is_some_and(|c| c.eq_ignore_ascii_case("ResponsibleAIPolicyViolation"));
    if !filtered {
        return None;
    }
    let message: String = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("Azure OpenAI's content filter stopped the request")
        .chars()
        .take(MAX_MESSAGE_CHARS)
        .collect();
    let categories = inner
        .and_then(|i| i.get("content_filter_result"))
        .map(filtered_categories)
        .unwrap_or_default();
    Some(ModelError::Refusal {
        text: with_categories(message, &categories),
    })
}

/// The categories a `content_filter_results` object marks as filtered,
/// with their severity when it names one (`hate: high`).
pub(super) fn filtered_categories(results: &Value) -> Vec<String> {
    let Some(results) = results.as_object() else {
        return Vec::new();
    };
    results
        .iter()
        .filter(|(_, r)| r.get("filtered").and_then(Value::as_bool) == Some(true))
        .take(MAX_CATEGORIES)
        .map(|(name, r)| {
            let name: String = name.chars().take(64).collect();
            match r.get("severity").and_then(Value::as_str) {
                Some(severity) => {
                    format!("{name}: {}", severity.chars().take(16).collect::<String>())
                }
                None => name,
            }
        })
        .collect()
}

/// `message (hate: high, violence: medium)`.
pub(super) fn with_categories(message: String, categories: &[String]) -> String {
    if categories.is_empty() {
        message
    } else {
        format!("{message} ({})", categories.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ErrorClass;
    use serde_json::json;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    fn body(value: Value) -> Vec<u8> {
        value.to_string().into_bytes()
    }

    #[test]
    fn a_429_waits_retry_after_ms_else_retry_after() {
        let limited = body(
            json!({"error": {"code": "429", "message": "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 6 seconds."}}),
        );
        let e = http_error(
            429,
            &headers(&[("retry-after", "6"), ("retry-after-ms", "5250")]),
            &limited,
            Some(Duration::from_secs(6)),
        );
        assert_eq!(e.class(), ErrorClass::Transient("http_429".into()));
        assert!(
            matches!(e, ModelError::Status { retry_after: Some(w), .. } if w == Duration::from_millis(5250)),
            "{e:?}"
        );
        let e = http_error(
            429,
            &headers(&[("retry-after-ms", "soon")]),
            &limited,
            Some(Duration::from_secs(6)),
        );
        assert!(
            matches!(e, ModelError::Status { retry_after: Some(w), .. } if w == Duration::from_secs(6)),
            "{e:?}"
        );
    }

    #[test]
    fn azures_statuses_keep_their_classes() {
        let e = http_error(
            503,
            &HeaderMap::new(),
            &body(json!({"error": {"code": "503", "message": "Service Unavailable"}})),
            None,
        );
        assert_eq!(e.class(), ErrorClass::Transient("http_503".into()));
        let e = http_error(
            401,
            &HeaderMap::new(),
            &body(
                json!({"error": {"code": "401", "message": "Access denied due to invalid subscription key or wrong API endpoint."}}),
            ),
            None,
        );
        assert_eq!(e.class(), ErrorClass::Fatal);
        let e = http_error(
            404,
            &HeaderMap::new(),
            &body(
                json!({"error": {"code": "DeploymentNotFound", "message": "The API deployment for this resource does not exist."}}),
            ),
            None,
        );
        assert_eq!(e.class(), ErrorClass::Fatal);
        assert!(e.to_string().contains("hint"), "{e}");
        let e = http_error(
            400,
            &HeaderMap::new(),
            &body(
                json!({"error": {"code": "context_length_exceeded", "message": "This model's maximum context length is 128000 tokens."}}),
            ),
            None,
        );
        assert_eq!(e.class(), ErrorClass::ContextOverflow);
        let e = http_error(
            403,
            &HeaderMap::new(),
            &body(
                json!({"error": {"code": "403", "message": "Out of call volume quota for OpenAI API. Quota will be replenished in 2.00:00:00."}}),
            ),
            None,
        );
        assert_eq!(e.class(), ErrorClass::Quota);
    }

    #[test]
    fn a_filtered_prompt_is_a_refusal_naming_the_categories() {
        let filtered = body(json!({"error": {
            "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
            "type": null, "param": "prompt", "code": "content_filter", "status": 400,
            "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {
                "hate": {"filtered": true, "severity": "high"},
                "jailbreak": {"filtered": false, "detected": false},
                "self_harm": {"filtered": false, "severity": "safe"},
                "violence": {"filtered": true, "severity": "medium"}}}}}));
        let e = http_error(400, &HeaderMap::new(), &filtered, None);
        assert_eq!(e.class(), ErrorClass::Fatal);
        assert_eq!(
            e.to_string(),
            "model refused: The response was filtered due to the prompt triggering Azure OpenAI's content management policy. (hate: high, violence: medium)"
        );
    }
}
