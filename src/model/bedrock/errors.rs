//! Bedrock's exceptions as classified failures (SPEC 22 "Errors"), the same
//! whether they come as an HTTP error (the `x-amzn-errortype` header, the
//! body `{"message": ...}`) or inside the event stream (a frame with
//! `:message-type: exception` and `:exception-type`):
//! `ThrottlingException` and `ServiceUnavailableException` are `http_429` /
//! `http_503`, `InternalServerException` and `ModelStreamErrorException`
//! `http_500`, `ModelTimeoutException` a `timeout`; `ValidationException`
//! is not retryable but for "input is too long" (a context overflow) and a
//! `maxTokens` above the model's maximum (a reply cap);
//! `ServiceQuotaExceededException` is `quota`; `AccessDeniedException` and
//! `UnrecognizedClientException` are auth errors. Only the vendor's short
//! message is kept, never the body.

use std::time::Duration;

use serde_json::Value;

use crate::model::bounds::MAX_MESSAGE_CHARS;
use crate::model::error::{classify_status, mentions_overflow};
use crate::model::ModelError;

/// An exception's name as the header carries it: `ThrottlingException`,
/// `throttlingException`, or `ValidationException:http://internal...`.
fn exception_name(raw: &str) -> String {
    raw.split(':')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// The message of an exception's JSON body (`message` or `Message`), bounded.
pub(crate) fn body_message(body: &[u8]) -> String {
    let json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let message = ["message", "Message"]
        .into_iter()
        .find_map(|k| json.get(k).and_then(Value::as_str))
        .unwrap_or_default();
    message.chars().take(MAX_MESSAGE_CHARS).collect()
}

/// Classifies an exception by its name (`None`: no header came), the HTTP
/// status it came with (an in-stream one has none), and its message.
pub(crate) fn exception(
    name: Option<&str>,
    status: Option<u16>,
    message: String,
    retry_after: Option<Duration>,
) -> ModelError {
    let name = name.map(exception_name).unwrap_or_default();
    let status_error = |status: u16| ModelError::Status {
        status,
        message: message.clone(),
        retry_after,
    };
    match name.as_str() {
        "throttlingexception" | "modelnotreadyexception" => status_error(429),
        "serviceunavailableexception" => status_error(503),
        "internalserverexception" | "modelstreamerrorexception" => status_error(500),
        "modeltimeoutexception" => ModelError::Timeout {
            message,
            deadline: None,
        },
        "servicequotaexceededexception" => ModelError::Quota {
            status: status.unwrap_or(400),
            message,
        },
        "accessdeniedexception" => status_error(403),
        "unrecognizedclientexception" | "expiredtokenexception" => {
            status_error(status.unwrap_or(403).max(400))
        }
        "resourcenotfoundexception" => status_error(404),
        "validationexception" => validation(status.unwrap_or(400), message),
        // No name, or one added later: the status says it; an in-stream
        // error of no known kind is a server error (the request had been accepted).
        _ => classify_status(status.unwrap_or(500), None, &message, retry_after),
    }
}

/// A `ValidationException`: an input that is too long is a context
/// overflow, a `maxTokens` above the model's maximum a reply cap, anything
/// else a refused request.
fn validation(status: u16, message: String) -> ModelError {
    let lower = message.to_ascii_lowercase();
    if lower.contains("input is too long")
        || lower.contains("too many input tokens")
        || mentions_overflow("", &lower)
    {
        return ModelError::ContextOverflow { message };
    }
    if let Some(cap) = max_tokens_cap(&lower) {
        return ModelError::ReplyCap {
            status,
            cap,
            message,
        };
    }
    if lower.contains("model identifier is invalid") {
        // Bedrock's 400 for a model id it does not serve: a 404 in all but name.
        return ModelError::Status {
            status,
            message: format!("{message}{MODEL_ID_HINT}"),
            retry_after: None,
        };
    }
    classify_status(status, None, &message, None)
}

/// What an unknown model id is told, as a 404 is, with the form of an id.
const MODEL_ID_HINT: &str = " (hint: the model name may be wrong; a Bedrock model id looks like us.anthropic.claude-sonnet-4-5-20250929-v1:0)";

/// The cap a refusal of `maxTokens` names: Bedrock's own wording ("The
/// maximum tokens you requested exceeds the model limit of 64000") or the
/// model's passed through (Anthropic's `max_tokens: 64001 > 64000, which is
/// the maximum allowed ...`).
fn max_tokens_cap(lower: &str) -> Option<u32> {
    if let Some(cap) = crate::model::reply_cap::named_cap(lower) {
        return Some(cap);
    }
    let names_budget = lower.contains("maximum tokens") || lower.contains("maxtokens");
    let at = lower.find("limit of ")?;
    if !names_budget {
        return None;
    }
    let rest = &lower[at + "limit of ".len()..];
    let digits: String = rest
        .chars()
        .take_while(char::is_ascii_digit)
        .take(10)
        .collect();
    digits.parse().ok().filter(|&cap| cap > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ErrorClass;

    fn class(name: &str, status: Option<u16>, message: &str) -> ErrorClass {
        exception(Some(name), status, message.into(), None).class()
    }

    #[test]
    fn the_documented_exceptions_take_their_classes() {
        let t = |s: &str| ErrorClass::Transient(s.into());
        assert_eq!(
            class(
                "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/",
                Some(429),
                "Too many requests"
            ),
            t("http_429")
        );
        assert_eq!(
            class("throttlingException", None, "slow down"),
            t("http_429")
        );
        assert_eq!(
            class("serviceUnavailableException", None, ""),
            t("http_503")
        );
        assert_eq!(
            class("InternalServerException", Some(500), ""),
            t("http_500")
        );
        assert_eq!(
            class("modelStreamErrorException", None, "boom"),
            t("http_500")
        );
        assert_eq!(class("ModelTimeoutException", Some(408), ""), t("timeout"));
        assert_eq!(
            class("ServiceQuotaExceededException", Some(400), "quota"),
            ErrorClass::Quota
        );
        assert_eq!(
            class("AccessDeniedException", Some(403), "no"),
            ErrorClass::Fatal
        );
        assert_eq!(
            class("UnrecognizedClientException", Some(403), "bad key"),
            ErrorClass::Fatal
        );
        assert_eq!(
            class("ValidationException", Some(400), "Malformed input request"),
            ErrorClass::Fatal
        );
        assert_eq!(
            class(
                "ValidationException",
                Some(400),
                "Input is too long for requested model."
            ),
            ErrorClass::ContextOverflow
        );
        assert_eq!(
            class("validationException", None, "The maximum tokens you requested exceeds the model limit of 64000. Try again with a maximum tokens value that is lower than 64000."),
            ErrorClass::ReplyCap(64000)
        );
        assert_eq!(
            class("ValidationException", Some(400), "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-5-20250929"),
            ErrorClass::ReplyCap(64000)
        );
        let unknown = exception(
            Some("ValidationException"),
            Some(400),
            "The provided model identifier is invalid.".into(),
            None,
        );
        assert_eq!(unknown.class(), ErrorClass::Fatal);
        assert!(
            unknown
                .message()
                .contains("hint: the model name may be wrong")
                && unknown
                    .message()
                    .contains("us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            "{unknown}"
        );
        assert_eq!(
            exception(None, Some(503), String::new(), None).class(),
            t("http_503")
        );
        assert_eq!(
            exception(Some("weirdException"), None, String::new(), None).class(),
            t("http_500")
        );
    }

    #[test]
    fn messages_are_short_and_bodies_never_kept() {
        let long = format!(
            r#"{{"message":"{}","secret":"s3cr3t"}}"#,
            "x".repeat(10_000)
        );
        let m = body_message(long.as_bytes());
        assert_eq!(m.len(), MAX_MESSAGE_CHARS);
        assert_eq!(body_message(br#"{"Message":"Bad"}"#), "Bad");
        assert_eq!(body_message(b"<html>"), "");
    }
}
