//! What every wire adapter shares and none of them owns: the bounds on what a
//! server controls, the garbled-arguments rule and the bound on a tool
//! call's arguments (`arguments.rs`), in-stream error classification, and
//! the one `complete` loop over an SSE stream (or a reply sent as one JSON
//! body instead).

mod arguments;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::api::ToolChoiceForm;
pub(crate) use super::bounds::{
    too_large, MAX_MESSAGE_CHARS, MAX_TEXT, MAX_TOOL_CALLS, MAX_TOOL_NAME,
};
use super::error::{classify_status, mentions_overflow};
use super::http::{HttpTransport, Reply};
use super::spec::WireOptions;
use super::{ModelError, Response, StreamObserver};
pub(crate) use arguments::{parse_arguments, raw_text, Arguments, Kept};
pub(crate) use arguments::{MAX_CALL_ARGUMENTS, MAX_REPLY_ARGUMENTS};

/// Lays a provider's `stream` and `tool_choice` options (SPEC 3) over a
/// request body built for streaming: `stream: false` asks for one JSON body
/// (the reply reader accepts either), and a `tool_choice` goes with every
/// request that offers tools, in the API's own `form` (its value's: none
/// when the API has no `tool_choice` field or its builder writes its own).
pub(crate) fn apply_options(
    body: &mut Map<String, Value>,
    form: ToolChoiceForm,
    options: WireOptions,
) {
    if !options.stream {
        body.insert("stream".into(), Value::Bool(false));
        body.remove("stream_options");
    }
    let offers_tools = body
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    let (Some(choice), ToolChoiceForm::Field(form)) =
        (options.tool_choice.filter(|_| offers_tools), form)
    else {
        return;
    };
    body.insert("tool_choice".into(), form(choice));
}

/// The longest model name kept from a reply.
const MAX_MODEL_NAME: usize = 256;

/// Keeps the first model name a reply names, cut to a bound.
pub(crate) fn note_model(slot: &mut Option<String>, name: Option<&str>) {
    if slot.is_none() {
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            *slot = Some(name.chars().take(MAX_MODEL_NAME).collect());
        }
    }
}

/// Whether the stream's finish marker has arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    Continue,
    Finished,
}

/// Appends a streamed piece to `buf`, failing once `buf` would pass `max`.
pub(crate) fn append(
    buf: &mut String,
    piece: &str,
    max: usize,
    what: &str,
) -> Result<(), ModelError> {
    if buf.len().saturating_add(piece.len()) > max {
        return Err(too_large(what));
    }
    buf.push_str(piece);
    Ok(())
}

/// A call id for servers that send none.
pub(crate) fn made_up_id() -> String {
    format!("call_{}", &uuid::Uuid::new_v4().simple().to_string()[..24])
}

/// An error object sent inside a stream (or as a 200 body), classified like
/// the HTTP error it stands for. `code` and `status` count whether they are
/// numbers or strings (`429`, `"429"`, `"rate_limit_exceeded"`: LiteLLM sends
/// its codes as strings); otherwise the code or type names the status, and
/// anything unnamed is a server error (the request had been accepted). An
/// overflow named anywhere is a context overflow, whatever the status.
pub(crate) fn stream_error(error: &Value) -> ModelError {
    let field = |name: &str| error.get(name).filter(|v| !v.is_null());
    let numeric = ["code", "status", "status_code"]
        .into_iter()
        .filter_map(field)
        .find_map(|v| match v {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        })
        .filter(|s| (400..600).contains(s));
    let mut names: Vec<String> = ["code", "type", "status"]
        .into_iter()
        .filter_map(field)
        .filter_map(Value::as_str)
        .map(str::to_ascii_lowercase)
        .collect();
    // The message alone may name an overflow (vLLM, llama.cpp).
    names.push(String::new());
    let status = numeric
        .map(|s| s as u16)
        .unwrap_or_else(|| status_of_names(&names));
    let message = field("message")
        .and_then(Value::as_str)
        .or_else(|| error.as_str())
        .unwrap_or_default();
    let message: String = message.chars().take(MAX_MESSAGE_CHARS).collect();
    let code = names.first().map(String::as_str);
    if names.iter().any(|n| n == "billing_error") {
        return ModelError::Quota { status, message };
    }
    let retry_after = field("retry_after")
        .and_then(Value::as_f64)
        .and_then(super::http::seconds);
    let lower = message.to_ascii_lowercase();
    match classify_status(status, code, &message, retry_after) {
        ModelError::Status { status, .. }
            if status != 429 && names.iter().any(|n| mentions_overflow(n, &lower)) =>
        {
            ModelError::ContextOverflow { message }
        }
        other => other,
    }
}

/// The HTTP status an error's code or type names.
fn status_of_names(names: &[String]) -> u16 {
    let is = |list: &[&str]| names.iter().any(|n| list.contains(&n.as_str()));
    if is(&["overloaded_error"]) {
        529
    } else if is(&[
        "rate_limit_exceeded",
        "rate_limit_error",
        "ratelimiterror",
        "insufficient_quota",
        "too_many_requests",
    ]) {
        429
    } else if is(&[
        "context_length_exceeded",
        "exceed_context_size_error",
        "contextwindowexceedederror",
        "invalid_request_error",
        "invalid_prompt",
        "badrequesterror",
    ]) {
        400
    } else if is(&[
        "invalid_api_key",
        "authentication_error",
        "authenticationerror",
    ]) {
        401
    } else if is(&["permission_error", "billing_error", "permissiondeniederror"]) {
        403
    } else if is(&["not_found_error", "model_not_found", "notfounderror"]) {
        404
    } else if is(&["request_too_large"]) {
        413
    } else if is(&["timeout_error"]) {
        504
    } else {
        500
    }
}

/// A reply assembled from SSE events, or from one JSON body when the server
/// did not stream.
pub(crate) trait Assembly: Default + Send {
    /// Applies one event's `data`.
    fn apply(&mut self, data: &str, observer: &dyn StreamObserver) -> Result<Progress, ModelError>;
    /// Applies a whole reply sent as one JSON body (an error object already
    /// ruled out); `finish` follows. The body is the text as it came, so
    /// each adapter reads it into its own borrowed types: a tool call's
    /// arguments are measured before they are copied.
    fn apply_body(&mut self, body: &str, observer: &dyn StreamObserver) -> Result<(), ModelError>;
    /// The whole reply once the finish marker (or the body) arrived.
    fn finish(self) -> Result<Response, ModelError>;
}

/// The one field every JSON body is first read for (the rest is skipped,
/// not copied).
#[derive(Deserialize)]
struct BodyError {
    #[serde(default)]
    error: Option<Value>,
}

/// The one adapter loop: POST `body` to `path`, then assemble the SSE events
/// until the finish marker (a stream that ends first is incomplete), or the
/// one JSON body a non-streaming server sent.
pub(crate) async fn complete<A: Assembly>(
    transport: &HttpTransport,
    path: &str,
    body: bytes::Bytes,
    observer: &dyn StreamObserver,
) -> Result<Response, ModelError> {
    let (response, sent) = transport.post(path, body).await?;
    assemble::<A>(transport, response, sent, observer).await
}

/// Assembles a successful response (sent at `sent`) as `complete` does:
/// for an adapter that classifies its error responses itself
/// (`HttpTransport::post_with`).
pub(crate) async fn assemble<A: Assembly>(
    transport: &HttpTransport,
    response: reqwest::Response,
    sent: std::time::Instant,
    observer: &dyn StreamObserver,
) -> Result<Response, ModelError> {
    let mut assembly = A::default();
    match super::http::read_reply(response, sent, transport.timeouts()).await? {
        Reply::Json(body) => {
            let body = std::str::from_utf8(&body).map_err(|_| ModelError::StreamIncomplete)?;
            let head: BodyError =
                serde_json::from_str(body).map_err(|_| ModelError::StreamIncomplete)?;
            if let Some(error) = head.error.filter(|e| !e.is_null()) {
                return Err(stream_error(&error));
            }
            assembly.apply_body(body, observer)?;
            assembly.finish()
        }
        Reply::Stream(mut events) => {
            while let Some(event) = events.next().await? {
                if assembly.apply(&event.data, observer)? == Progress::Finished {
                    return assembly.finish();
                }
            }
            Err(ModelError::StreamIncomplete)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::spec::ToolChoice;
    use crate::model::ErrorClass;
    use serde_json::json;

    #[test]
    fn codes_count_as_numbers_or_strings() {
        for error in [
            json!({"message": "slow down", "type": "None", "param": "None", "code": "429"}),
            json!({"message": "slow down", "code": 429}),
            json!({"message": "slow down", "code": "rate_limit_exceeded"}),
            json!({"message": "slow down", "status": "429"}),
            json!({"message": "slow down", "type": "rate_limit_error"}),
        ] {
            assert_eq!(
                stream_error(&error).class(),
                ErrorClass::Transient("http_429".into()),
                "{error}"
            );
        }
        let e = stream_error(&json!({"code": 502, "message": "Provider disconnected"}));
        assert_eq!(e.class(), ErrorClass::Transient("http_502".into()));
        let e = stream_error(&json!({"code": "401", "message": "bad key"}));
        assert_eq!(e.class(), ErrorClass::Fatal);
        let e = stream_error(&json!({"message": "boom", "type": "server_error", "code": null}));
        assert_eq!(e.class(), ErrorClass::Transient("http_500".into()));
    }

    #[test]
    fn an_overflow_inside_a_stream_is_an_overflow_whatever_its_status() {
        for error in [
            json!({"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error"}),
            json!({"code": "500", "message": "litellm.ContextWindowExceededError: too long"}),
            json!({"object": "error", "message": "This model's maximum context length is 2048 tokens. However, you requested 4000 tokens", "type": "BadRequestError", "param": null, "code": 400}),
            json!({"code": "context_length_exceeded", "message": ""}),
        ] {
            assert_eq!(
                stream_error(&error).class(),
                ErrorClass::ContextOverflow,
                "{error}"
            );
        }
    }

    #[test]
    fn quota_and_billing_inside_a_stream() {
        let e = stream_error(
            &json!({"code": "insufficient_quota", "message": "You exceeded your current quota"}),
        );
        assert_eq!(e.class(), ErrorClass::Quota);
        let e = stream_error(&json!({"type": "billing_error", "message": "no"}));
        assert_eq!(e.class(), ErrorClass::Quota);
    }

    #[test]
    fn deep_nesting_is_refused_without_overflowing_the_stack() {
        let deep = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
        let mut chat = crate::model::openai::ChunkAssembler::default();
        assert!(chat.feed(&deep, &crate::model::NoObserver).is_err());
        let args = format!("{{\"a\":{}1{}}}", "[".repeat(100_000), "]".repeat(100_000));
        let (value, garbled) = parse_arguments(args);
        assert!(garbled && value.is_string());
    }

    #[test]
    fn options_turn_streaming_off_and_add_tool_choice_in_each_apis_form() {
        let streamed = || {
            json!({"model": "m", "tools": [{"name": "bash"}], "stream": true,
                   "stream_options": {"include_usage": true}})
        };
        let mut body = streamed();
        apply_options(
            body.as_object_mut().unwrap(),
            crate::model::openai::API.tool_choice,
            WireOptions::default(),
        );
        assert_eq!(body, streamed(), "the defaults change nothing");

        let options = WireOptions {
            stream: false,
            tool_choice: Some(ToolChoice::Auto),
        };
        let mut body = streamed();
        apply_options(
            body.as_object_mut().unwrap(),
            crate::model::openai::API.tool_choice,
            options,
        );
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
        assert_eq!(body["tool_choice"], "auto");

        let required = WireOptions {
            stream: true,
            tool_choice: Some(ToolChoice::Required),
        };
        let mut body = streamed();
        apply_options(
            body.as_object_mut().unwrap(),
            crate::model::anthropic::API.tool_choice,
            required,
        );
        assert_eq!(body["tool_choice"], json!({"type": "any"}));
        assert_eq!(body["stream"], true);
        let mut body = streamed();
        apply_options(
            body.as_object_mut().unwrap(),
            crate::model::openai::API.tool_choice,
            required,
        );
        assert_eq!(body["tool_choice"], "required");

        let mut no_tools = json!({"model": "m", "stream": true});
        apply_options(
            no_tools.as_object_mut().unwrap(),
            crate::model::openai::API.tool_choice,
            options,
        );
        assert!(no_tools.get("tool_choice").is_none(), "only with tools");
    }

    #[test]
    fn append_stops_at_the_bound() {
        let mut s = String::from("ab");
        assert!(append(&mut s, "cd", 4, "x").is_ok());
        assert!(matches!(
            append(&mut s, "e", 4, "x"),
            Err(ModelError::Malformed { .. })
        ));
        assert_eq!(s, "abcd");
    }
}
