//! Unit tests of the Responses stream assembler.

use std::sync::Mutex;

use super::*;
use crate::model::ErrorClass;

#[derive(Default)]
struct Seen(Mutex<String>);
impl StreamObserver for Seen {
    fn text_delta(&self, text: &str) {
        self.0.lock().unwrap().push_str(text);
    }
}

fn run(events: &[Value]) -> (Result<Response, ModelError>, String) {
    let seen = Seen::default();
    let mut a = Assembly::default();
    for e in events {
        match a.apply(&e.to_string(), &seen) {
            Ok(Progress::Finished) => return (a.finish(), seen.0.into_inner().unwrap()),
            Ok(Progress::Continue) => {}
            Err(e) => return (Err(e), seen.0.into_inner().unwrap()),
        }
    }
    (
        Err(ModelError::StreamIncomplete),
        seen.0.into_inner().unwrap(),
    )
}

fn completed(status: &str, input: u64, cached: u64, output: u64) -> Value {
    json!({"type": format!("response.{status}"), "sequence_number": 99, "response": {"id": "resp_1", "object": "response", "status": status, "model": "gpt-5-2025-08-07",
        "usage": {"input_tokens": input, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": input + output}}})
}

/// `input_tokens_details.cached_tokens` are the reads, a part of
/// `input_tokens`; a lying count is cut to the input.
#[test]
fn cached_input_is_read_and_bounded() {
    let (r, _) = run(&[completed("completed", 5000, 4864, 10)]);
    let u = r.unwrap().usage;
    assert_eq!((u.input_tokens, u.cached_input_tokens), (5000, 4864));
    let (r, _) = run(&[completed("completed", 50, 4864, 10)]);
    assert_eq!(r.unwrap().usage.cached_input_tokens, 50);
    let mut odd = completed("completed", 50, 0, 10);
    odd["response"]["usage"]["input_tokens_details"] = json!("many");
    odd["response"]["usage"]["output_tokens"] = json!(-4);
    let (r, _) = run(&[odd]);
    let u = r.unwrap().usage;
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.cached_input_tokens),
        (50, 0, 0)
    );
}

#[test]
fn reasoning_text_and_function_call_assemble() {
    let reasoning =
        json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB=="});
    let events = [
        json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1", "status": "in_progress", "usage": null}}),
        json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
        json!({"type": "response.output_item.done", "sequence_number": 2, "output_index": 0, "item": reasoning}),
        json!({"type": "response.output_item.added", "sequence_number": 3, "output_index": 1, "item": {"type": "message", "id": "msg_1", "status": "in_progress", "role": "assistant", "content": []}}),
        json!({"type": "response.output_text.delta", "sequence_number": 4, "item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": "Listing "}),
        json!({"type": "response.output_text.delta", "sequence_number": 5, "item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": "files."}),
        json!({"type": "response.output_item.done", "sequence_number": 6, "output_index": 1, "item": {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": "Listing files.", "annotations": []}]}}),
        json!({"type": "response.output_item.added", "sequence_number": 7, "output_index": 2, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "bash", "arguments": "", "status": "in_progress"}}),
        json!({"type": "response.function_call_arguments.delta", "sequence_number": 8, "item_id": "fc_1", "output_index": 2, "delta": "{\"command\":"}),
        json!({"type": "response.function_call_arguments.delta", "sequence_number": 9, "item_id": "fc_1", "output_index": 2, "delta": "\"ls\"}"}),
        json!({"type": "response.function_call_arguments.done", "sequence_number": 10, "item_id": "fc_1", "output_index": 2, "arguments": "{\"command\":\"ls\"}"}),
        completed("completed", 1200, 1000, 40),
    ];
    let (r, seen) = run(&events);
    let r = r.unwrap();
    assert_eq!(seen, "Listing files.");
    assert_eq!(r.model.as_deref(), Some("gpt-5-2025-08-07"));
    assert_eq!(r.text, "Listing files.");
    assert_eq!(r.finish, FinishReason::ToolCalls);
    assert_eq!(r.tool_calls[0].id, "call_1");
    assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls"}));
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 1200,
            output_tokens: 40,
            cached_input_tokens: 1000,
            ..Usage::default()
        }
    );
    assert_eq!(
        r.extra.unwrap(),
        json!({"responses": {"reasoning": [reasoning]}})
    );
}

#[test]
fn incomplete_is_a_cut_off_reply() {
    let events = [
        json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "Half"}),
        json!({"type": "response.incomplete", "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "usage": {"input_tokens": 5, "output_tokens": 16}}}),
    ];
    let r = run(&events).0.unwrap();
    assert_eq!(r.finish, FinishReason::Length);
    assert_eq!(r.text, "Half");
}

#[test]
fn garbled_arguments_are_marked() {
    let events = [
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "bash", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "{\"command\": \"l"}),
        completed("completed", 1, 0, 1),
    ];
    let r = run(&events).0.unwrap();
    assert!(r.tool_calls[0].garbled);
    assert_eq!(r.tool_calls[0].arguments, json!("{\"command\": \"l"));
}

#[test]
fn failures_are_classified() {
    let failed = json!({"type": "response.failed", "response": {"status": "failed", "error": {"code": "server_error", "message": "The server had an error"}}});
    assert_eq!(
        run(&[failed]).0.unwrap_err().class(),
        ErrorClass::Transient("http_500".into())
    );
    let quota = json!({"type": "error", "code": "insufficient_quota", "message": "You exceeded your current quota", "param": null, "sequence_number": 1});
    assert_eq!(run(&[quota]).0.unwrap_err().class(), ErrorClass::Quota);
    let overflow = json!({"type": "response.failed", "response": {"error": {"code": "context_length_exceeded", "message": "Your input exceeds the context window of this model."}}});
    assert_eq!(
        run(&[overflow]).0.unwrap_err().class(),
        ErrorClass::ContextOverflow
    );
}

#[test]
fn a_stream_without_a_terminal_event_is_incomplete() {
    let events = [json!({"type": "response.output_text.delta", "output_index": 0, "delta": "hi"})];
    assert_eq!(run(&events).0.unwrap_err(), ModelError::StreamIncomplete);
}

#[test]
fn a_refusal_part_is_a_refusal() {
    let events = [
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_1", "status": "in_progress", "role": "assistant", "content": []}}),
        json!({"type": "response.content_part.added", "output_index": 0, "content_index": 0, "part": {"type": "refusal", "refusal": ""}}),
        json!({"type": "response.refusal.delta", "output_index": 0, "content_index": 0, "delta": "I can't "}),
        json!({"type": "response.refusal.delta", "output_index": 0, "content_index": 0, "delta": "help."}),
        json!({"type": "response.refusal.done", "output_index": 0, "content_index": 0, "refusal": "I can't help."}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help."}]}}),
        completed("completed", 1, 0, 1),
    ];
    let (r, seen) = run(&events);
    assert_eq!(
        r,
        Err(ModelError::Refusal {
            text: "I can't help.".into()
        })
    );
    assert!(seen.is_empty(), "a refusal is not shown as text");
    // Only in the finished item.
    let done_only = [events[5].clone(), completed("completed", 1, 0, 1)];
    assert_eq!(
        run(&done_only).0,
        Err(ModelError::Refusal {
            text: "I can't help.".into()
        })
    );
}

#[test]
fn string_and_numeric_codes_in_error_events() {
    let litellm =
        json!({"type": "error", "code": "429", "message": "rate limited", "sequence_number": 3});
    assert_eq!(
        run(&[litellm]).0.unwrap_err().class(),
        ErrorClass::Transient("http_429".into())
    );
    let numeric = json!({"type": "error", "error": {"code": 503, "message": "busy"}});
    assert_eq!(
        run(&[numeric]).0.unwrap_err().class(),
        ErrorClass::Transient("http_503".into())
    );
}

#[test]
fn a_whole_response_body_is_a_reply() {
    let body = json!({"id": "resp_1", "object": "response", "status": "completed", "error": null,
        "output": [{"type": "message", "id": "m", "role": "assistant", "content": [{"type": "output_text", "text": "Hi.", "annotations": []}]},
                   {"type": "function_call", "id": "fc", "call_id": "call_1", "name": "bash", "arguments": "{\"command\":\"ls\"}"}],
        "usage": {"input_tokens": 4, "output_tokens": 2}});
    let mut a = Assembly::default();
    a.apply_response(&body.to_string(), &crate::model::NoObserver)
        .unwrap();
    let r = a.finish().unwrap();
    assert_eq!(r.text, "Hi.");
    assert_eq!(r.tool_calls[0].id, "call_1");
    assert!(r.usage_reported);
}

#[test]
fn a_function_call_over_the_argument_bound_is_refused_whatever_repeats_it() {
    use crate::model::wire::MAX_CALL_ARGUMENTS;
    let big = json!({"content": "x".repeat(MAX_CALL_ARGUMENTS)}).to_string();
    let item = |args: &str| json!({"type": "function_call", "id": "fc_1", "call_id": "call_big", "name": "write_file", "arguments": args});
    let events = [
        json!({"type": "response.output_item.added", "output_index": 0, "item": item("")}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": big}),
        json!({"type": "response.function_call_arguments.done", "output_index": 0, "arguments": big}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item(&big)}),
        json!({"type": "response.output_item.added", "output_index": 1, "item": {"type": "function_call", "id": "fc_2", "call_id": "call_ok", "name": "bash", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{\"command\":\"ls\"}"}),
        completed("completed", 10, 0, 5),
    ];
    let r = run(&events).0.unwrap();
    assert_eq!(r.tool_calls[0].oversized, Some(big.len() as u64));
    assert_eq!(r.tool_calls[0].arguments, json!({}));
    assert_eq!(r.tool_calls[0].id, "call_big");
    assert_eq!(r.tool_calls[1].arguments, json!({"command": "ls"}));

    let body = json!({"status": "completed", "output": [item(&big)], "usage": {"input_tokens": 1, "output_tokens": 1}});
    let mut a = Assembly::default();
    a.apply_response(&body.to_string(), &crate::model::NoObserver)
        .unwrap();
    assert!(a.finish().unwrap().tool_calls[0].oversized.is_some());
}
