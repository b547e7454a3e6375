//! Tests of `model::anthropic::stream`.

use std::sync::Mutex;

use super::*;
use crate::model::ErrorClass;

#[derive(Default)]
struct Seen {
    text: Mutex<String>,
    tool_deltas: Mutex<usize>,
}
impl StreamObserver for Seen {
    fn text_delta(&self, text: &str) {
        self.text.lock().unwrap().push_str(text);
    }
    fn tool_call_delta(&self) {
        *self.tool_deltas.lock().unwrap() += 1;
    }
}

fn run(events: &[Value]) -> (Result<Response, ModelError>, Seen) {
    let seen = Seen::default();
    let mut a = Assembly::default();
    for e in events {
        match a.apply(&e.to_string(), &seen) {
            Ok(Progress::Finished) => return (a.finish(), seen),
            Ok(Progress::Continue) => {}
            Err(e) => return (Err(e), seen),
        }
    }
    (Err(ModelError::StreamIncomplete), seen)
}

fn start(input: u64, read: u64, created: u64) -> Value {
    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5", "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input, "cache_creation_input_tokens": created, "cache_read_input_tokens": read, "output_tokens": 1}}})
}

#[test]
fn a_tool_use_reopened_with_the_same_id_is_one_call() {
    let mut a = Assembly::default();
    let start = |i: usize| json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": "call_1", "name": "bash", "input": {}}});
    let delta = |i: usize, p: &str| json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": p}});
    for event in [
        start(1),
        delta(1, "{\"command\""),
        start(2),
        delta(2, ": \"ls\"}"),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}}),
        json!({"type": "message_stop"}),
    ] {
        a.apply(&event.to_string(), &crate::model::NoObserver)
            .unwrap();
    }
    let r = a.finish().unwrap();
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].name, "bash");
    assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls"}));
}

#[test]
fn text_thinking_and_tool_use_assemble() {
    let events = [
        start(20, 1000, 50),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me "}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "look."}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM=="}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va=="}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "ping"}),
        json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "Listing "}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "files."}}),
        json!({"type": "content_block_stop", "index": 2}),
        json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "toolu_01", "name": "bash", "input": {}}}),
        json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "{\"command\": \"l"}}),
        json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "s\"}"}}),
        json!({"type": "content_block_stop", "index": 3}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 89}}),
        json!({"type": "message_stop"}),
    ];
    let (response, seen) = run(&events);
    let r = response.unwrap();
    assert_eq!(r.model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(r.text, "Listing files.");
    assert_eq!(*seen.text.lock().unwrap(), "Listing files.");
    assert!(*seen.tool_deltas.lock().unwrap() > 0);
    assert_eq!(r.finish, FinishReason::ToolCalls);
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].id, "toolu_01");
    assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls"}));
    assert!(!r.tool_calls[0].garbled);
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 1070,
            output_tokens: 89,
            cached_input_tokens: 1000,
            cache_write_tokens: 50,
            cache_write_1h_tokens: 0,
        }
    );
    assert_eq!(
        r.extra.unwrap(),
        json!({"anthropic": {"content": [
            {"type": "thinking", "thinking": "Let me look.", "signature": "EqQBCgIYAhIM=="},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va=="},
        ]}})
    );
}

#[test]
fn garbled_input_is_marked_and_kept_raw() {
    let events = [
        start(10, 0, 0),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_02", "name": "write_file", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"a.txt\", \"content"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 9}}),
        json!({"type": "message_stop"}),
    ];
    let r = run(&events).0.unwrap();
    assert!(r.tool_calls[0].garbled);
    assert_eq!(
        r.tool_calls[0].arguments,
        json!("{\"path\": \"a.txt\", \"content")
    );
    assert!(r.extra.is_none());
}

#[test]
fn stop_reasons_normalise() {
    for (reason, finish) in [
        ("end_turn", FinishReason::Stop),
        ("max_tokens", FinishReason::Length),
        ("stop_sequence", FinishReason::Stop),
    ] {
        let events = [
            start(1, 0, 0),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "hi"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null}, "usage": {"output_tokens": 2}}),
            json!({"type": "message_stop"}),
        ];
        let r = run(&events).0.unwrap();
        assert_eq!(r.finish, finish, "{reason}");
        assert_eq!(r.text, "hi");
    }
}

#[test]
fn in_stream_errors_are_classified() {
    let overloaded =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let err = run(&[start(1, 0, 0), overloaded]).0.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Transient("http_529".into()));
    let invalid = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 200001 tokens > 200000 maximum"}});
    assert_eq!(
        run(&[invalid]).0.unwrap_err().class(),
        ErrorClass::ContextOverflow
    );
    let billing = json!({"type": "error", "error": {"type": "billing_error", "message": "no"}});
    assert_eq!(run(&[billing]).0.unwrap_err().class(), ErrorClass::Quota);
}

#[test]
fn a_stream_without_message_stop_is_incomplete() {
    let events = [
        start(1, 0, 0),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}),
    ];
    assert_eq!(run(&events).0.unwrap_err(), ModelError::StreamIncomplete);
}

#[test]
fn non_json_data_fails_the_attempt() {
    let mut a = Assembly::default();
    assert_eq!(
        a.apply("not json", &crate::model::NoObserver),
        Err(ModelError::StreamIncomplete)
    );
}

#[test]
fn stop_reason_refusal_is_a_refusal_with_the_text() {
    let events = [
        start(1, 0, 0),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "I can't help with that."}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_sequence": null}, "usage": {"output_tokens": 7}}),
        json!({"type": "message_stop"}),
    ];
    assert_eq!(
        run(&events).0,
        Err(ModelError::Refusal {
            text: "I can't help with that.".into()
        })
    );
    let bare = [
        start(1, 0, 0),
        json!({"type": "message_delta", "delta": {"stop_reason": "refusal"}, "usage": {"output_tokens": 0}}),
        json!({"type": "message_stop"}),
    ];
    let Err(ModelError::Refusal { text }) = run(&bare).0 else {
        panic!("a refusal")
    };
    assert!(text.contains("refusal"));
}

/// LiteLLM's `/v1/messages` sends errors as `data: {"error": {...}}`,
/// with no event type and the code as a string.
#[test]
fn an_error_without_an_event_type_is_classified() {
    let litellm = json!({"error": {"message": "rate limited", "type": "None", "param": "None", "code": "429"}});
    assert_eq!(
        run(&[start(1, 0, 0), litellm]).0.unwrap_err().class(),
        ErrorClass::Transient("http_429".into())
    );
}

#[test]
fn a_whole_message_body_is_a_reply() {
    let body = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "text", "text": "Listing."}, {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 5}});
    let mut a = Assembly::default();
    a.apply_message(&body.to_string(), &crate::model::NoObserver)
        .unwrap();
    let r = a.finish().unwrap();
    assert_eq!(r.text, "Listing.");
    assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls"}));
    assert_eq!(r.usage.input_tokens, 12);
    assert!(r.usage_reported);
}

#[test]
fn a_tool_use_over_the_argument_bound_is_refused_and_the_others_kept() {
    use crate::model::wire::MAX_CALL_ARGUMENTS;
    let big = json!({"content": "x".repeat(MAX_CALL_ARGUMENTS)});
    let events = [
        start(10, 0, 0),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_big", "name": "write_file", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": big.to_string()}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_ok", "name": "bash", "input": {"command": "ls"}}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop"}),
    ];
    let r = run(&events).0.unwrap();
    assert_eq!(
        r.tool_calls[0].oversized,
        Some(big.to_string().len() as u64)
    );
    assert!(r.tool_calls[0].garbled);
    assert_eq!(r.tool_calls[0].arguments, json!({}));
    assert_eq!(r.tool_calls[1].arguments, json!({"command": "ls"}));

    let body = json!({"type": "message", "content": [{"type": "tool_use", "id": "toolu_big", "name": "write_file", "input": big}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}});
    let mut a = Assembly::default();
    a.apply_message(&body.to_string(), &crate::model::NoObserver)
        .unwrap();
    assert!(a.finish().unwrap().tool_calls[0].oversized.is_some());
}

/// Anthropic's `input_tokens` leaves out the cache reads and writes; the
/// writes' lifetimes come in `cache_creation`, and a later `message_delta`
/// replaces the counts it repeats.
#[test]
fn cache_reads_and_writes_are_read_with_their_lifetimes() {
    let usage = json!({"input_tokens": 12, "cache_creation_input_tokens": 3000, "cache_read_input_tokens": 40000, "output_tokens": 1,
        "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000}});
    let events = [
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5", "usage": usage}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7, "input_tokens": 12, "cache_creation_input_tokens": 3000, "cache_read_input_tokens": 40000}}),
        json!({"type": "message_stop"}),
    ];
    let r = run(&events).0.unwrap();
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 43_012,
            output_tokens: 7,
            cached_input_tokens: 40_000,
            cache_write_tokens: 3000,
            cache_write_1h_tokens: 2000,
        }
    );
}

/// Counts that lie (strings, negatives, a `cache_creation` that is no
/// object, absurd sizes) are taken as not reported or cut, never failing
/// the reply and never adding up past the input.
#[test]
fn hostile_usage_counts_neither_fail_the_reply_nor_overflow() {
    for usage in [
        json!({"input_tokens": "12", "cache_read_input_tokens": -5, "cache_creation_input_tokens": "lots", "output_tokens": 3.5, "cache_creation": "5m"}),
        json!({"input_tokens": u64::MAX, "cache_read_input_tokens": u64::MAX, "cache_creation_input_tokens": u64::MAX, "output_tokens": u64::MAX,
               "cache_creation": {"ephemeral_1h_input_tokens": u64::MAX}}),
        json!("usage"),
        json!([1, 2]),
    ] {
        let events = [
            json!({"type": "message_start", "message": {"model": "claude-sonnet-4-5", "usage": usage}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "ok"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": usage}),
            json!({"type": "message_stop"}),
        ];
        let r = run(&events).0.unwrap_or_else(|e| panic!("{usage}: {e:?}"));
        let u = r.usage;
        assert!(
            u.cached_input_tokens + u.cache_write_tokens <= u.input_tokens,
            "{u:?}"
        );
        assert!(u.cache_write_1h_tokens <= u.cache_write_tokens, "{u:?}");
        assert!(
            u.input_tokens <= crate::conversation::MAX_RESPONSE_TOKENS,
            "{u:?}"
        );
    }
}
