//! Azure's Chat Completions reply: OpenAI's chunks (read by the OpenAI
//! adapter's `ChunkAssembler`, which already takes Azure's first chunk with
//! empty `choices` and its `prompt_filter_results`, and its empty `model`),
//! plus what Azure's content filter adds: a reply that ends with
//! `finish_reason: "content_filter"` is a refusal naming the categories
//! filtered, and so is an error object inside the stream whose code is
//! `content_filter`. Only an event that names `"content_filter"` or
//! `"error"` as a JSON string is read a second time (every Azure chunk
//! carries `content_filter_results`, which names neither).

use serde::Deserialize;
use serde_json::Value;

use super::errors::{content_filter, filtered_categories, with_categories};
use crate::model::openai::ChunkAssembler;
use crate::model::wire::{self, Progress};
use crate::model::{ModelError, Response, StreamObserver};

/// What is read of an event that may concern the content filter.
#[derive(Deserialize)]
struct Peek {
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    choices: Vec<PeekChoice>,
}

#[derive(Deserialize)]
struct PeekChoice {
    #[serde(default)]
    index: u64,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    content_filter_results: Option<Value>,
}

/// The reply as assembled so far.
#[derive(Default)]
pub(super) struct Assembly {
    chat: ChunkAssembler,
    /// The categories the content filter named for the reply.
    filtered: Vec<String>,
}

impl Assembly {
    /// Reads what the content filter said in `data` (an event or a whole
    /// body), before the chat assembly reads the rest.
    fn look_for_filter(&mut self, data: &str) -> Result<(), ModelError> {
        if !data.contains("\"content_filter\"") && !data.contains("\"error\"") {
            return Ok(());
        }
        // What is not JSON is the chat assembly's to refuse.
        let Ok(peek) = serde_json::from_str::<Peek>(data) else {
            return Ok(());
        };
        if let Some(refusal) = peek.error.as_ref().and_then(content_filter) {
            return Err(refusal);
        }
        for choice in peek.choices.iter().filter(|c| c.index == 0) {
            if choice.finish_reason.as_deref() == Some("content_filter") {
                if let Some(results) = &choice.content_filter_results {
                    self.filtered = filtered_categories(results);
                }
            }
        }
        Ok(())
    }
}

impl wire::Assembly for Assembly {
    fn apply(&mut self, data: &str, observer: &dyn StreamObserver) -> Result<Progress, ModelError> {
        self.look_for_filter(data)?;
        wire::Assembly::apply(&mut self.chat, data, observer)
    }

    fn apply_body(&mut self, body: &str, observer: &dyn StreamObserver) -> Result<(), ModelError> {
        self.look_for_filter(body)?;
        wire::Assembly::apply_body(&mut self.chat, body, observer)
    }

    /// A reply the content filter stopped is a refusal, whatever text came
    /// before it.
    fn finish(self) -> Result<Response, ModelError> {
        if self.chat.finish_reason() == Some("content_filter") {
            return Err(ModelError::Refusal {
                text: with_categories(
                    "Azure OpenAI's content filter stopped the reply".into(),
                    &self.filtered,
                ),
            });
        }
        self.chat.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::wire::Assembly as _;
    use crate::model::{ErrorClass, FinishReason, NoObserver};
    use serde_json::json;

    const SAFE: &str = r#"{"hate":{"filtered":false,"severity":"safe"},"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":false,"severity":"safe"}}"#;

    fn chunk(delta: Value, finish: Value, results: &str) -> String {
        format!(
            r#"{{"choices":[{{"content_filter_results":{results},"delta":{delta},"finish_reason":{finish},"index":0,"logprobs":null}}],"created":1,"id":"chatcmpl-1","model":"gpt-4o-2024-11-20","object":"chat.completion.chunk","system_fingerprint":"fp_1"}}"#
        )
    }

    /// Azure's first event: no choices, the prompt's filter results.
    fn prompt_filter_chunk() -> String {
        format!(
            r#"{{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{{"prompt_index":0,"content_filter_results":{SAFE}}}]}}"#
        )
    }

    fn run(events: &[String]) -> Result<Response, ModelError> {
        let mut asm = Assembly::default();
        for event in events {
            if asm.apply(event, &NoObserver)? == Progress::Finished {
                return asm.finish();
            }
        }
        Err(ModelError::StreamIncomplete)
    }

    #[test]
    fn azures_stream_reads_as_openais() {
        let events = [
            prompt_filter_chunk(),
            chunk(json!({"role": "assistant", "content": ""}), Value::Null, "{}"),
            chunk(json!({"content": "Hi"}), Value::Null, SAFE),
            chunk(json!({}), json!("stop"), "{}"),
            r#"{"choices":[],"created":1,"id":"chatcmpl-1","model":"gpt-4o-2024-11-20","object":"chat.completion.chunk","usage":{"completion_tokens":3,"prompt_tokens":20,"total_tokens":23}}"#.into(),
            "[DONE]".into(),
        ];
        let r = run(&events).unwrap();
        assert_eq!(r.text, "Hi");
        assert_eq!(r.finish, FinishReason::Stop);
        assert_eq!(r.model.as_deref(), Some("gpt-4o-2024-11-20"));
        assert_eq!(r.usage.input_tokens, 20);
    }

    #[test]
    fn a_reply_the_filter_stopped_is_a_refusal() {
        let events = [
            prompt_filter_chunk(),
            chunk(json!({"content": "Here is how"}), Value::Null, SAFE),
            chunk(
                json!({}),
                json!("content_filter"),
                r#"{"hate":{"filtered":false,"severity":"safe"},"violence":{"filtered":true,"severity":"high"}}"#,
            ),
            "[DONE]".into(),
        ];
        let e = run(&events).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Fatal);
        assert_eq!(
            e.to_string(),
            "model refused: Azure OpenAI's content filter stopped the reply (violence: high)"
        );
    }

    #[test]
    fn errors_inside_the_stream() {
        let filtered =
            r#"{"error":{"code":"content_filter","message":"The response was filtered."}}"#;
        let e = run(&[prompt_filter_chunk(), filtered.into()]).unwrap_err();
        assert!(matches!(e, ModelError::Refusal { .. }), "{e:?}");
        let limited = r#"{"error":{"code":"429","message":"Rate limit is exceeded."}}"#;
        let e = run(&[prompt_filter_chunk(), limited.into()]).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Transient("http_429".into()));
    }

    #[test]
    fn a_whole_body_the_filter_stopped() {
        let body = r#"{"choices":[{"content_filter_results":{"sexual":{"filtered":true,"severity":"medium"}},"finish_reason":"content_filter","index":0,"message":{"content":null,"role":"assistant"}}],"model":"gpt-4o","usage":{"prompt_tokens":5,"completion_tokens":0}}"#;
        let mut asm = Assembly::default();
        asm.apply_body(body, &NoObserver).unwrap();
        let e = asm.finish().unwrap_err();
        assert!(e.to_string().ends_with("(sexual: medium)"), "{e}");
    }
}
