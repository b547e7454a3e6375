//! Tests of `model::openai::stream`.

use super::*;
use crate::model::{ErrorClass, NoObserver};
use serde_json::json;
use std::sync::Mutex;

#[derive(Default)]
struct Recorder {
    text: Mutex<Vec<String>>,
    tool_deltas: Mutex<usize>,
}
impl StreamObserver for Recorder {
    fn text_delta(&self, text: &str) {
        self.text.lock().unwrap().push(text.to_string());
    }
    fn tool_call_delta(&self) {
        *self.tool_deltas.lock().unwrap() += 1;
    }
}

fn chunk(delta: Value, finish: Value) -> String {
    json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-5", "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
        .to_string()
}

fn usage_chunk() -> String {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-5",
        "choices": [],
        "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150,
                  "prompt_tokens_details": {"cached_tokens": 100}},
    })
    .to_string()
}

fn assemble(events: &[String], observer: &dyn StreamObserver) -> Result<Response, ModelError> {
    let mut asm = ChunkAssembler::default();
    for e in events {
        asm.feed(e, observer)?;
    }
    asm.finish()
}

#[test]
fn text_streams_to_the_observer_and_usage_comes_last() {
    let events = [
        chunk(
            json!({"role": "assistant", "content": "", "refusal": null}),
            Value::Null,
        ),
        chunk(json!({"content": "Hel"}), Value::Null),
        chunk(json!({"content": "lo"}), Value::Null),
        chunk(json!({}), json!("stop")),
        usage_chunk(),
        "[DONE]".to_string(),
    ];
    let rec = Recorder::default();
    let r = assemble(&events, &rec).unwrap();
    assert_eq!(r.text, "Hello");
    assert_eq!(*rec.text.lock().unwrap(), vec!["Hel", "lo"]);
    assert_eq!(r.finish, FinishReason::Stop);
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 120,
            output_tokens: 30,
            cached_input_tokens: 100,
            ..Usage::default()
        }
    );
}

#[test]
fn tool_call_fragments_are_joined_by_index() {
    let events = [
        chunk(
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"index": 0, "id": "call_a", "type": "function", "function": {"name": "bash", "arguments": ""}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [
                {"index": 1, "id": "call_b", "type": "function", "function": {"name": "read_file", "arguments": ""}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"comm"}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"path\":\"a\"}"}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "and\":\"ls\"}"}}]}),
            Value::Null,
        ),
        chunk(json!({}), json!("tool_calls")),
        "[DONE]".to_string(),
    ];
    let rec = Recorder::default();
    let r = assemble(&events, &rec).unwrap();
    assert_eq!(r.finish, FinishReason::ToolCalls);
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(r.tool_calls[0].id, "call_a");
    assert_eq!(r.tool_calls[0].name, "bash");
    assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls"}));
    assert_eq!(r.tool_calls[1].arguments, json!({"path": "a"}));
    assert_eq!(*rec.tool_deltas.lock().unwrap(), 5);
    assert!(rec.text.lock().unwrap().is_empty());
}

#[test]
fn garbled_arguments_are_kept_raw_and_marked() {
    let events = [
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                "function": {"name": "bash", "arguments": "{\"command\": \"ls"}}]}),
            json!("tool_calls"),
        ),
        "[DONE]".to_string(),
    ];
    let r = assemble(&events, &NoObserver).unwrap();
    assert!(r.tool_calls[0].garbled);
    assert_eq!(r.tool_calls[0].arguments, json!("{\"command\": \"ls"));
}

#[test]
fn empty_arguments_are_an_empty_object_and_missing_ids_are_made_up() {
    let events = [
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"name": "plan"}}]}),
            json!("tool_calls"),
        ),
        "[DONE]".to_string(),
    ];
    let r = assemble(&events, &NoObserver).unwrap();
    assert_eq!(r.tool_calls[0].arguments, json!({}));
    assert!(r.tool_calls[0].id.starts_with("call_"));
    assert!(!r.tool_calls[0].garbled);
}

#[test]
fn length_wins_and_tool_calls_need_no_finish_reason() {
    let cut = [
        chunk(json!({"content": "abc"}), json!("length")),
        "[DONE]".to_string(),
    ];
    assert_eq!(
        assemble(&cut, &NoObserver).unwrap().finish,
        FinishReason::Length
    );
    let calls = [
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "bash", "arguments": "{}"}}]}),
            json!("stop"),
        ),
        "[DONE]".to_string(),
    ];
    assert_eq!(
        assemble(&calls, &NoObserver).unwrap().finish,
        FinishReason::ToolCalls
    );
}

#[test]
fn a_stream_without_done_is_incomplete() {
    let events = [
        chunk(json!({"content": "hi"}), json!("stop")),
        usage_chunk(),
    ];
    assert_eq!(
        assemble(&events, &NoObserver),
        Err(ModelError::StreamIncomplete)
    );
    assert_eq!(
        assemble(&["not json".into()], &NoObserver),
        Err(ModelError::StreamIncomplete)
    );
}

#[test]
fn errors_inside_the_stream_are_classified() {
    let openrouter = json!({"id": "gen-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "provider": "X", "error": {"code": 502, "message": "Provider disconnected"},
            "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]});
    let e = assemble(&[openrouter.to_string()], &NoObserver).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Transient("http_502".into()));
    assert!(e.to_string().contains("Provider disconnected"));

    let quota = json!({"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}});
    let e = assemble(&[quota.to_string()], &NoObserver).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Quota);

    let server = json!({"error": {"message": "The server had an error", "type": "server_error", "code": null}});
    let e = assemble(&[server.to_string()], &NoObserver).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Transient("http_500".into()));

    let overflow = json!({"error": {"message": "This model's maximum context length is 8192 tokens", "type": "invalid_request_error", "code": "context_length_exceeded"}});
    let e = assemble(&[overflow.to_string()], &NoObserver).unwrap_err();
    assert_eq!(e.class(), ErrorClass::ContextOverflow);
}

/// llama-cpp-python 0.3.x: every fragment repeats the call's id and
/// whole name (`llama_chat_format._stream_response_to_function_stream`).
#[test]
fn a_name_repeated_whole_in_every_fragment_is_one_name() {
    let frag = |args: &str| {
        chunk(
            json!({"role": null, "content": null, "function_call": {"name": "bash", "arguments": args},
                    "tool_calls": [{"index": 0, "id": "call__0_bash_cmpl-1", "type": "function",
                        "function": {"name": "bash", "arguments": args}}]}),
            Value::Null,
        )
    };
    let events = [
        chunk(
            json!({"role": "assistant", "content": null, "function_call": null, "tool_calls": null}),
            Value::Null,
        ),
        frag("{\"command\""),
        frag(": \"ls\""),
        frag("}"),
        chunk(
            json!({"role": null, "content": null, "function_call": null, "tool_calls": null}),
            json!("tool_calls"),
        ),
        "[DONE]".to_string(),
    ];
    let r = assemble(&events, &NoObserver).unwrap();
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].name, "bash");
    assert_eq!(r.tool_calls[0].id, "call__0_bash_cmpl-1");
    assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls"}));
    assert!(!r.usage_reported, "llama-cpp-python streams carry no usage");
}

#[test]
fn real_name_fragments_still_join_and_a_late_name_is_a_repeat() {
    let events = [
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "read_", "arguments": ""}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"name": "file"}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\":\"a\"}"}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"name": "file"}}]}),
            json!("tool_calls"),
        ),
        "[DONE]".to_string(),
    ];
    let r = assemble(&events, &NoObserver).unwrap();
    assert_eq!(r.tool_calls[0].name, "read_file");
    assert_eq!(r.tool_calls[0].arguments, json!({"path": "a"}));
}

#[test]
fn huge_indexes_allocate_nothing_and_too_many_calls_fail() {
    let events = [
        chunk(
            json!({"tool_calls": [{"index": 1_000_000_000_000u64, "id": "a", "function": {"name": "bash", "arguments": "{}"}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 50_000_000, "id": "b", "function": {"name": "plan", "arguments": "{}"}}]}),
            json!("tool_calls"),
        ),
        "[DONE]".to_string(),
    ];
    let r = assemble(&events, &NoObserver).unwrap();
    let names: Vec<&str> = r.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["bash", "plan"]);

    let mut asm = ChunkAssembler::default();
    let mut failed = None;
    for i in 0..=MAX_TOOL_CALLS {
        let c = chunk(
            json!({"tool_calls": [{"index": i, "id": format!("c{i}"), "function": {"name": "bash", "arguments": "{}"}}]}),
            Value::Null,
        );
        if let Err(e) = asm.feed(&c, &NoObserver) {
            failed = Some((i, e));
            break;
        }
    }
    let (at, e) = failed.expect("the cap holds");
    assert_eq!(at, MAX_TOOL_CALLS);
    assert_eq!(e.reason(), "stream_incomplete");
    assert!(matches!(e, ModelError::Malformed { .. }));

    let index_too_big = chunk(
        json!({"tool_calls": [{"index": 1e30, "function": {"name": "bash"}}]}),
        Value::Null,
    );
    assert!(ChunkAssembler::default()
        .feed(&index_too_big, &NoObserver)
        .is_err());
}

#[test]
fn a_long_name_fails_the_attempt() {
    let c = chunk(
        json!({"tool_calls": [{"index": 0, "function": {"name": "x".repeat(MAX_TOOL_NAME + 1)}}]}),
        Value::Null,
    );
    assert!(matches!(
        ChunkAssembler::default().feed(&c, &NoObserver),
        Err(ModelError::Malformed { .. })
    ));
}

#[test]
fn a_refusal_delta_makes_a_refusal() {
    let events = [
        chunk(
            json!({"role": "assistant", "content": null, "refusal": ""}),
            Value::Null,
        ),
        chunk(json!({"refusal": "I'm sorry, "}), Value::Null),
        chunk(json!({"refusal": "I cannot help with that."}), Value::Null),
        chunk(json!({}), json!("stop")),
        usage_chunk(),
        "[DONE]".to_string(),
    ];
    assert_eq!(
        assemble(&events, &NoObserver),
        Err(ModelError::Refusal {
            text: "I'm sorry, I cannot help with that.".into()
        })
    );
}

#[test]
fn a_whole_chat_completion_body_is_a_reply() {
    let body = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]},
            "logprobs": null, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
    });
    let mut asm = ChunkAssembler::default();
    Assembly::apply_body(&mut asm, &body.to_string(), &NoObserver).unwrap();
    let r = Assembly::finish(asm).unwrap();
    assert_eq!(r.tool_calls[0].name, "bash");
    assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls"}));
    assert_eq!(r.usage.input_tokens, 9);
    assert!(r.usage_reported);

    let refused = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": "No."}, "finish_reason": "stop"}]});
    let mut asm = ChunkAssembler::default();
    Assembly::apply_body(&mut asm, &refused.to_string(), &NoObserver).unwrap();
    assert_eq!(
        Assembly::finish(asm),
        Err(ModelError::Refusal { text: "No.".into() })
    );
}

#[test]
fn litellm_string_codes_inside_the_stream() {
    let e = json!({"error": {"message": "litellm.RateLimitError: slow down", "type": "None", "param": "None", "code": "429"}});
    let e = assemble(&[e.to_string()], &NoObserver).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Transient("http_429".into()));
}

#[test]
fn a_call_over_the_argument_bound_is_refused_and_the_others_kept() {
    use crate::model::wire::MAX_CALL_ARGUMENTS;
    let big = json!({"content": "x".repeat(MAX_CALL_ARGUMENTS)}).to_string();
    let events = [
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c_big", "function": {"name": "write_file", "arguments": big}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "id": "c_ok", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]}),
            json!("tool_calls"),
        ),
        "[DONE]".to_string(),
    ];
    let r = assemble(&events, &NoObserver).unwrap();
    assert_eq!(r.tool_calls[0].oversized, Some(big.len() as u64));
    assert!(r.tool_calls[0].garbled);
    assert_eq!(r.tool_calls[0].arguments, json!({}));
    assert_eq!(r.tool_calls[0].name, "write_file");
    assert_eq!(r.tool_calls[1].arguments, json!({"command": "ls"}));
    assert_eq!(r.tool_calls[1].oversized, None);

    // The same in a body sent unstreamed, arguments a string or an object.
    for arguments in [json!(big), serde_json::from_str::<Value>(&big).unwrap()] {
        let body = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "c_big", "type": "function", "function": {"name": "write_file", "arguments": arguments}}]}}]});
        let mut asm = ChunkAssembler::default();
        Assembly::apply_body(&mut asm, &body.to_string(), &NoObserver).unwrap();
        let r = Assembly::finish(asm).unwrap();
        assert!(
            r.tool_calls[0].oversized.is_some(),
            "{}",
            &body.to_string()[..80]
        );
        assert_eq!(r.finish, FinishReason::ToolCalls);
    }
}

/// `cached_tokens` are the reads (OpenAI, Azure); OpenRouter adds the
/// writes as `cache_write_tokens`. Counts that lie are cut to the prompt.
#[test]
fn cached_and_written_prompt_tokens_are_read_and_bounded() {
    let with_usage = |usage: Value| {
        let events = [
            chunk(json!({"content": "ok"}), json!("stop")),
            json!({"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage})
                .to_string(),
            "[DONE]".to_string(),
        ];
        assemble(&events, &NoObserver)
            .unwrap_or_else(|e| panic!("{usage}: {e:?}"))
            .usage
    };
    let u = with_usage(json!({"prompt_tokens": 2006, "completion_tokens": 300,
        "prompt_tokens_details": {"cached_tokens": 1920, "cache_write_tokens": 80, "audio_tokens": 0}}));
    assert_eq!(
        (u.input_tokens, u.cached_input_tokens, u.cache_write_tokens),
        (2006, 1920, 80)
    );
    let u = with_usage(json!({"prompt_tokens": 100, "completion_tokens": "12",
        "prompt_tokens_details": {"cached_tokens": 5000}}));
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.cached_input_tokens),
        (100, 12, 100)
    );
    let u = with_usage(
        json!({"prompt_tokens": -3, "completion_tokens": 1, "prompt_tokens_details": "cached"}),
    );
    assert_eq!((u.input_tokens, u.cached_input_tokens), (0, 0));
}
