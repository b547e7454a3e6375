//! The Amazon Bedrock wire form of the one HTTP adapter (SPEC 22): one `POST
//! {endpoint}/model/{modelId}/converse-stream` per call, the reply in AWS
//! event-stream framing (`model::eventstream`). `request.rs` translates our
//! conversation to the Converse form (`cache.rs`: its `cachePoint`s), `stream.rs` assembles the events into
//! a `Response`, `errors.rs` classifies Bedrock's exceptions, whether they
//! come as HTTP errors or inside the stream. The transport's credentials
//! (a bearer token or a SigV4 signer) authorize each request.

mod cache;
mod errors;
mod request;
mod stream;

use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::HeaderMap;

use super::adapter::{Call, HttpModel, WireForm};
use super::api::{Api, ToolChoiceForm};
use super::eventstream::{header, FrameReader};
use super::http::{Auth, HttpTransport};
use super::spec::WireApi;
use super::{ModelError, Response, StreamObserver};
use stream::{Assembly, Stage};

/// How long the `metadata` event (the usage) is awaited after `messageStop`:
/// the reply is whole already, so a server that sends none costs this much.
const METADATA_GRACE: Duration = Duration::from_secs(5);

/// The Converse wire form (a model id or inference profile as the model).
#[derive(Debug)]
struct ConverseForm;

impl HttpModel {
    /// A Bedrock model (`transport` carries the member's credentials).
    pub(crate) fn bedrock(
        transport: HttpTransport,
        model_id: &str,
        max_output_tokens: Option<u32>,
    ) -> HttpModel {
        HttpModel::new(
            transport.with_header("accept", "application/vnd.amazon.eventstream"),
            model_id,
            max_output_tokens,
            ConverseForm,
        )
    }
}

/// Bedrock ConverseStream as a value (`model/api.rs`): its `toolChoice`
/// is written by its own request builder; its settings are found in
/// `settings/bedrock.rs`.
pub(crate) const API: Api = Api {
    name: WireApi::named("bedrock"),
    key: Auth::Bearer,
    tool_choice: ToolChoiceForm::Own,
    build: |transport, resolved| {
        HttpModel::bedrock(transport, resolved.spec.model(), resolved.max_output_tokens)
    },
    resolve: None,
    home: Some("bedrock"),
};

/// The path of a model's ConverseStream; the id is one path segment
/// (`us.anthropic.claude-sonnet-4-5-20250929-v1:0` sends its `:` encoded,
/// as the AWS SDKs do).
pub(crate) fn converse_stream_path(model_id: &str) -> String {
    let mut segment = String::with_capacity(model_id.len());
    for byte in model_id.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            segment.push(char::from(byte));
        } else {
            segment.push_str(&format!("%{byte:02X}"));
        }
    }
    format!("/model/{segment}/converse-stream")
}

/// An HTTP error response as the exception its `x-amzn-errortype` names.
fn http_error(status: u16, headers: &HeaderMap, body: &[u8], wait: Option<Duration>) -> ModelError {
    let name = headers
        .get("x-amzn-errortype")
        .and_then(|v| v.to_str().ok());
    errors::exception(name, Some(status), errors::body_message(body), wait)
}

#[async_trait]
impl WireForm for ConverseForm {
    async fn exchange(&self, call: Call<'_>) -> Result<Response, ModelError> {
        let Call {
            transport,
            model: model_id,
            request,
            output_cap,
            wire,
            observer,
        } = call;
        let body = request::request_body(model_id, request, output_cap, wire);
        let body = serde_json::to_vec(&body).map_err(|e| ModelError::Invalid {
            message: format!("cannot write the request: {e}"),
        })?;
        let path = converse_stream_path(model_id);
        let body = bytes::Bytes::from(body);
        // Credentials that expired are fetched again by the transport.
        let (response, sent) = transport.post_with(&path, body, http_error).await?;
        let one_hour = cache::asks_one_hour(model_id, request.prompt_cache);
        read_reply(
            FrameReader::new(response, sent, transport.timeouts()),
            observer,
        )
        .await
        .map(|reply| one_hour_writes(reply, one_hour))
    }
}

/// Bedrock's usage names no lifetime unless it sends `cacheDetails`: when
/// the request's cache points all asked for one hour, so were its writes.
fn one_hour_writes(mut reply: Response, one_hour: bool) -> Response {
    let usage = &mut reply.usage;
    if one_hour && usage.cache_write_1h_tokens == 0 {
        usage.cache_write_1h_tokens = usage.cache_write_tokens;
    }
    reply
}

/// The reply assembled from its event-stream frames.
async fn read_reply(
    mut frames: FrameReader,
    observer: &dyn StreamObserver,
) -> Result<Response, ModelError> {
    let mut assembly = Assembly::default();
    loop {
        let frame = match frames.next().await {
            Ok(Some(frame)) => frame,
            // The reply was whole at `messageStop`: only the usage is missing.
            Ok(None) | Err(ModelError::Timeout { .. } | ModelError::Dropped { .. })
                if assembly.stage() != Stage::Open =>
            {
                return assembly.finish()
            }
            Ok(None) => return Err(ModelError::StreamIncomplete),
            Err(e) => return Err(e),
        };
        let payload =
            std::str::from_utf8(frame.payload()).map_err(|_| ModelError::StreamIncomplete)?;
        match header(&frame, ":message-type") {
            Some("event") => {
                let event = header(&frame, ":event-type").unwrap_or_default();
                assembly.apply(event, payload, observer)?;
                match assembly.stage() {
                    Stage::Done => return assembly.finish(),
                    Stage::Stopped => frames.shorten_idle(METADATA_GRACE),
                    Stage::Open => {}
                }
            }
            Some("exception") => {
                return Err(errors::exception(
                    header(&frame, ":exception-type"),
                    None,
                    errors::body_message(payload.as_bytes()),
                    None,
                ))
            }
            Some("error") => {
                let message: String = header(&frame, ":error-message")
                    .unwrap_or_default()
                    .chars()
                    .take(crate::model::bounds::MAX_MESSAGE_CHARS)
                    .collect();
                return Err(errors::exception(
                    header(&frame, ":error-code"),
                    None,
                    message,
                    None,
                ));
            }
            _ => return Err(ModelError::StreamIncomplete),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_hour_request_s_writes_are_one_hour_writes_unless_its_usage_says() {
        let reply = |written: u64, one_hour: u64| Response {
            text: "ok".into(),
            tool_calls: Vec::new(),
            usage: crate::conversation::Usage {
                input_tokens: 5000,
                cache_write_tokens: written,
                cache_write_1h_tokens: one_hour,
                ..Default::default()
            },
            usage_reported: true,
            finish: crate::conversation::FinishReason::Stop,
            extra: None,
            cost_override: None,
            model: None,
        };
        let settled = |r: Response| r.usage.cache_write_1h_tokens;
        assert_eq!(settled(one_hour_writes(reply(4000, 0), true)), 4000);
        assert_eq!(settled(one_hour_writes(reply(4000, 0), false)), 0);
        // `cacheDetails` said how much was written for an hour.
        assert_eq!(settled(one_hour_writes(reply(4000, 1000), true)), 1000);
    }

    #[test]
    fn model_ids_are_one_encoded_segment() {
        assert_eq!(
            converse_stream_path("us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"
        );
        assert_eq!(
            converse_stream_path("arn:aws:bedrock:us-east-1:1:inference-profile/x"),
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fx/converse-stream"
        );
    }
}
