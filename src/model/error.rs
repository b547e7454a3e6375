//! Typed model errors and the one classification table that says whether a
//! failure is transient (retry, then maybe switch), quota (switch at once),
//! context overflow (compact) or fatal (end the run).

use std::time::Duration;

use thiserror::Error;

use super::reason::FailureReason;

/// A failed model request. Adapters build these; they never carry a raw
/// response body, only a short vendor message.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum ModelError {
    /// An HTTP error status that is not quota or context overflow.
    #[error("HTTP {status}{}{}", short(message), status_hint(*status))]
    Status {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    /// The account's quota, credit or billing is exhausted.
    #[error("quota exhausted{}", short(message))]
    Quota { status: u16, message: String },
    /// The prompt does not fit the model's context window.
    #[error("context overflow{}", short(message))]
    ContextOverflow { message: String },
    /// Connection refused, reset, or dropped before the server answered.
    #[error("network error{}", short(message))]
    Network { message: String },
    /// The connection dropped after the server had answered 200 (mid-reply).
    #[error("network error{}", short(message))]
    Dropped { message: String },
    /// No first event in time, or silence past the idle limit; `deadline`
    /// is the one that ran out, when the reader knows it.
    #[error("timeout{}", short(message))]
    Timeout {
        message: String,
        deadline: Option<Duration>,
    },
    /// The stream ended without its finish marker.
    #[error("stream ended without its finish marker")]
    StreamIncomplete,
    /// A finished reply with no text and no tool calls (the retry loop
    /// decides this from the reply; scripts can also ask for it).
    #[error("empty reply: no text and no tool calls")]
    EmptyResponse,
    /// A reply that broke a bound (an event, a line, a tool call or an
    /// index too large) or was not in the vendor's form: thrown away and
    /// retried like a stream that ended early.
    #[error("malformed reply: {message}")]
    Malformed { message: String },
    /// The vendor marked the reply as a refusal; carries the refusal text.
    /// Never retried, never a fallback: another model is no answer to it.
    #[error("model refused: {text}")]
    Refusal { text: String },
    /// A request we could not even build or send (bad local setup); never retried.
    #[error("{message}")]
    Invalid { message: String },
}

fn short(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

/// What a status says beyond itself: a 404 is most often a wrong model name.
fn status_hint(status: u16) -> &'static str {
    if status == 404 {
        " (hint: the model name may be wrong)"
    } else {
        ""
    }
}

/// What to do about a failure. Every `ModelError` maps to exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    /// Retry with backoff; after the retry budget, the chain may switch.
    /// Carries the failure reason (`http_503`, `network`, ...).
    Transient(FailureReason),
    /// Not retried on this model; the chain switches at once.
    Quota,
    /// Compact the history and retry once; never a switch by itself.
    ContextOverflow,
    /// End the run with `error`; never a switch.
    Fatal,
}

impl ModelError {
    /// The one classification table (SPEC section 4).
    pub(crate) fn class(&self) -> ErrorClass {
        match self {
            ModelError::Status { status, .. } if *status == 429 || (500..600).contains(status) => {
                ErrorClass::Transient(FailureReason::Http(*status))
            }
            ModelError::Status { .. } => ErrorClass::Fatal,
            ModelError::Quota { .. } => ErrorClass::Quota,
            ModelError::ContextOverflow { .. } => ErrorClass::ContextOverflow,
            ModelError::Network { .. } | ModelError::Dropped { .. } => {
                ErrorClass::Transient(FailureReason::Network)
            }
            ModelError::Timeout { .. } => ErrorClass::Transient(FailureReason::Timeout),
            ModelError::StreamIncomplete | ModelError::Malformed { .. } => {
                ErrorClass::Transient(FailureReason::StreamIncomplete)
            }
            ModelError::EmptyResponse => ErrorClass::Transient(FailureReason::EmptyResponse),
            ModelError::Refusal { .. } | ModelError::Invalid { .. } => ErrorClass::Fatal,
        }
    }

    /// The failure reason used by `provider.retry`, `model.fallback`, the
    /// stderr line and per-request records.
    pub fn reason(&self) -> FailureReason {
        match self.class() {
            ErrorClass::Transient(reason) => reason,
            ErrorClass::Quota => FailureReason::Quota,
            ErrorClass::ContextOverflow => FailureReason::ContextOverflow,
            ErrorClass::Fatal => match self {
                ModelError::Status { status, .. } => FailureReason::Http(*status),
                ModelError::Refusal { .. } => FailureReason::Refusal,
                _ => FailureReason::Error,
            },
        }
    }

    /// The HTTP status of the response that carried this error, if one came.
    pub(crate) fn http_status(&self) -> Option<u16> {
        match self {
            ModelError::Status { status, .. } | ModelError::Quota { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// What `--check` shows beyond the reason: the vendor's short message
    /// (with the 404 hint), or the error's own words.
    pub(crate) fn message(&self) -> String {
        match self {
            ModelError::Status {
                status, message, ..
            } => {
                let text = if message.is_empty() {
                    format!("HTTP {status}")
                } else {
                    message.clone()
                };
                format!("{text}{}", status_hint(*status))
            }
            ModelError::Quota { message, .. }
            | ModelError::ContextOverflow { message }
            | ModelError::Network { message }
            | ModelError::Timeout { message, .. }
            | ModelError::Invalid { message } => message.clone(),
            other => other.to_string(),
        }
    }

    /// Whether the server had already answered 200 when this failed (a
    /// drop mid-reply, a stream without its finish marker, an empty reply):
    /// a glitch, not overload, so the retry loop retries it once at once
    /// (SPEC 4 "Waits").
    pub(crate) fn after_ok(&self) -> bool {
        matches!(
            self,
            ModelError::Dropped { .. }
                | ModelError::StreamIncomplete
                | ModelError::Malformed { .. }
                | ModelError::EmptyResponse
        )
    }

    /// The server's requested wait, if it sent one.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Classifies an HTTP error status plus the vendor's short message and error
/// code into a `ModelError`, recognising quota and context-overflow errors
/// that vendors report under ordinary statuses (OpenAI `insufficient_quota`,
/// Anthropic "credit balance is too low", "prompt is too long", ...).
pub(crate) fn classify_status(
    status: u16,
    code: Option<&str>,
    message: &str,
    retry_after: Option<Duration>,
) -> ModelError {
    let lower = message.to_ascii_lowercase();
    let code = code.unwrap_or("").to_ascii_lowercase();
    let quota = code == "insufficient_quota"
        || code == "billing_hard_limit_reached"
        || lower.contains("credit balance is too low")
        || lower.contains("insufficient_quota")
        || lower.contains("exceeded your current quota")
        || lower.contains("billing");
    if quota && (status == 429 || (400..500).contains(&status)) {
        return ModelError::Quota {
            status,
            message: message.to_string(),
        };
    }
    if mentions_overflow(&code, &lower) && (400..500).contains(&status) && status != 429 {
        return ModelError::ContextOverflow {
            message: message.to_string(),
        };
    }
    ModelError::Status {
        status,
        message: message.to_string(),
        retry_after,
    }
}

/// Whether an error's code or (lower-cased) message says the prompt does
/// not fit the context: OpenAI and llama-cpp-python `context_length_exceeded`,
/// llama.cpp's `exceed_context_size_error`, LiteLLM's
/// `ContextWindowExceededError`, Anthropic "prompt is too long", vLLM
/// "maximum context length", ...
pub(crate) fn mentions_overflow(code: &str, lower_message: &str) -> bool {
    const CODES: &[&str] = &[
        "context_length_exceeded",
        "exceed_context_size_error",
        "contextwindowexceedederror",
    ];
    const PHRASES: &[&str] = &[
        "prompt is too long",
        "context_length_exceeded",
        "maximum context length",
        "context window",
        "contextwindowexceeded",
        "context size",
        "exceed_context_size",
        "too many tokens",
    ];
    let code = code.to_ascii_lowercase();
    CODES.contains(&code.as_str()) || PHRASES.iter().any(|p| lower_message.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(s: u16) -> ModelError {
        classify_status(s, None, "", None)
    }

    #[test]
    fn transient_statuses() {
        for s in [429, 500, 502, 503, 504, 529] {
            assert_eq!(
                status(s).class(),
                ErrorClass::Transient(FailureReason::Http(s))
            );
        }
    }

    #[test]
    fn fatal_statuses() {
        for s in [400, 401, 403, 404, 413, 422] {
            assert_eq!(status(s).class(), ErrorClass::Fatal, "{s}");
        }
    }

    #[test]
    fn not_found_hints_at_model_name() {
        assert!(status(404).to_string().contains("model name may be wrong"));
    }

    #[test]
    fn quota_is_recognised_by_code_and_message() {
        let openai = classify_status(
            429,
            Some("insufficient_quota"),
            "You exceeded your current quota",
            None,
        );
        assert_eq!(openai.class(), ErrorClass::Quota);
        let anthropic = classify_status(
            400,
            Some("invalid_request_error"),
            "Your credit balance is too low to access the Anthropic API.",
            None,
        );
        assert_eq!(anthropic.class(), ErrorClass::Quota);
        assert_eq!(anthropic.reason(), "quota");
    }

    #[test]
    fn context_overflow_is_recognised() {
        let anthropic = classify_status(
            400,
            Some("invalid_request_error"),
            "prompt is too long: 210000 tokens > 200000 maximum",
            None,
        );
        assert_eq!(anthropic.class(), ErrorClass::ContextOverflow);
        let openai = classify_status(
            400,
            Some("context_length_exceeded"),
            "This model's maximum context length is 128000 tokens.",
            None,
        );
        assert_eq!(openai.class(), ErrorClass::ContextOverflow);
    }

    #[test]
    fn stream_failures_are_transient_with_reasons() {
        assert_eq!(
            ModelError::Network {
                message: String::new()
            }
            .reason(),
            "network"
        );
        assert_eq!(
            ModelError::Timeout {
                message: String::new(),
                deadline: None,
            }
            .reason(),
            "timeout"
        );
        assert_eq!(ModelError::StreamIncomplete.reason(), "stream_incomplete");
        let dropped = ModelError::Dropped {
            message: "connection dropped during the reply".into(),
        };
        assert_eq!(dropped.reason(), "network");
        assert!(dropped.after_ok() && ModelError::StreamIncomplete.after_ok());
        assert!(!status(503).after_ok());
        assert_eq!(ModelError::EmptyResponse.reason(), "empty_response");
        assert!(ModelError::EmptyResponse.after_ok());
        assert!(!ModelError::Network {
            message: String::new()
        }
        .after_ok());
        let malformed = ModelError::Malformed {
            message: "too many tool calls".into(),
        };
        assert_eq!(malformed.reason(), "stream_incomplete");
    }

    #[test]
    fn a_refusal_is_fatal_and_renders_its_text() {
        let refusal = ModelError::Refusal {
            text: "I can't help with that.".into(),
        };
        assert_eq!(refusal.class(), ErrorClass::Fatal);
        assert_eq!(refusal.reason(), "refusal");
        assert_eq!(
            refusal.to_string(),
            "model refused: I can't help with that."
        );
    }

    #[test]
    fn overflow_words_of_self_hosted_servers() {
        for (code, message) in [
            (
                "context_length_exceeded",
                "Requested tokens (7930) exceed context window of 2048",
            ),
            (
                "exceed_context_size_error",
                "the request exceeds the available context size, try increasing it",
            ),
            (
                "None",
                "litellm.ContextWindowExceededError: prompt too large",
            ),
            ("400", "This model's maximum context length is 2048 tokens."),
        ] {
            let e = classify_status(400, Some(code), message, None);
            assert_eq!(e.class(), ErrorClass::ContextOverflow, "{code}: {message}");
        }
    }
}
