//! A named provider's `stream: false` and `tool_choice` (SPEC 3): what
//! llama-cpp-python's `chatml-function-calling` needs before it calls a tool
//! (it ignores tools without a `tool_choice`, and cannot stream an "auto"
//! one). The replies are the one-body form that server sends.

use serde_json::{json, Value};

use crate::support::stub::{Reply, Stub};
use crate::support::{events, finished, of_type, TestEnv};

/// A non-streamed llama-cpp-python 0.3.x reply carrying one tool call, as
/// it answered a real request (with its legacy `function_call` twin).
fn llama_cpp_body(name: &str, args: &str) -> Value {
    json!({"id": "chatcmpl-fab2951f", "object": "chat.completion", "created": 1796127647,
        "model": "smollm2",
        "choices": [{"index": 0, "message": {"content": null, "tool_calls": [
            {"id": format!("call__0_{name}_cmpl-0eee06e1"), "type": "function",
             "function": {"name": name, "arguments": args}}],
            "role": "assistant", "function_call": {"name": format!("{name}:"), "arguments": args}},
            "logprobs": null, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 258, "completion_tokens": 13, "total_tokens": 271}})
}

fn config(stub: &Stub, api: &str, extra: &str) -> String {
    let endpoint = match api {
        "anthropic" => stub.url(),
        _ => format!("{}/v1", stub.url()),
    };
    format!(
        "health_db: off\nretry: {{attempts: 1, stream_first_event_timeout: 300ms, stream_idle_timeout: 5s}}\n\
         providers:\n  local:\n    api: {api}\n    endpoint: {endpoint}\n{extra}"
    )
}

#[test]
fn an_unstreamed_provider_runs_a_whole_tool_run_with_tool_choice_auto() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![
        Reply::json(
            200,
            &llama_cpp_body("bash", r#"{"command": "echo compat-ok"}"#),
        ),
        Reply::json(200, &llama_cpp_body("submit", r#"{"output": "compat-ok"}"#)),
    ]);
    env.user_config(&config(
        &stub,
        "openai",
        "    stream: false\n    tool_choice: auto\n",
    ));
    let out = env
        .cmd()
        .args(["-m", "local/smollm2", "--json", "run echo"])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{ev:?}");
    assert_eq!(finished(&ev)["output"], "compat-ok");
    let ran = of_type(&ev, "tool.finished");
    assert_eq!(ran.len(), 2, "{ran:?}");
    let requests = stub.requests();
    assert_eq!(requests.len(), 2);
    for req in &requests {
        let body = req.json();
        assert_eq!(body["stream"], false, "{body}");
        assert!(body.get("stream_options").is_none(), "{body}");
        assert_eq!(body["tool_choice"], "auto", "{body}");
    }
    // The second request carries the tool result back, in a form the
    // server accepts.
    let second = requests[1].json();
    let assistant = &second["messages"].as_array().unwrap()[2];
    assert_eq!(assistant["content"], "");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "bash");
}

/// A run against a provider configured with `extra` whose only reply, a
/// submit of `output`, takes 900 ms to start.
fn slow_reply_run(extra: &str, output: &str) -> (Option<i32>, Vec<Value>, Value) {
    let env = TestEnv::new();
    let body = llama_cpp_body("submit", &json!({"output": output}).to_string());
    let stub = Stub::sequence(vec![
        Reply::json(200, &body).delay(std::time::Duration::from_millis(900))
    ]);
    env.user_config(&config(&stub, "openai", extra));
    let out = env
        .cmd()
        .args(["-m", "local/smollm2", "--json", "go"])
        .output()
        .unwrap();
    let request = stub.requests()[0].json();
    (out.status.code(), events(&out.stdout), request)
}

#[test]
fn an_unstreamed_reply_may_take_as_long_as_the_idle_limit() {
    // Headers come only once the whole reply is written: the first-event
    // limit (300 ms) would end a streamed request, not this one.
    let (code, ev, request) = slow_reply_run("    stream: false\n", "slow but whole");
    assert_eq!(code, Some(0), "{ev:?}");
    assert_eq!(finished(&ev)["output"], "slow but whole");
    assert!(request.get("tool_choice").is_none());
}

#[test]
fn streaming_providers_keep_their_first_event_limit() {
    let (code, ev, request) = slow_reply_run("", "too late");
    assert_ne!(code, Some(0), "{ev:?}");
    assert_eq!(request["stream"], true);
    assert!(request.get("tool_choice").is_none());
}

#[test]
fn tool_choice_required_is_sent_in_the_anthropic_form() {
    let env = TestEnv::new();
    let reply = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "submit", "input": {"output": "done"}}],
        "stop_reason": "tool_use", "stop_sequence": null, "usage": {"input_tokens": 30, "output_tokens": 5}});
    let stub = Stub::sequence(vec![Reply::json(200, &reply)]);
    env.user_config(&config(
        &stub,
        "anthropic",
        "    stream: false\n    tool_choice: required\n",
    ));
    let out = env
        .cmd()
        .args(["-m", "local/m", "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let req = stub.requests()[0].json();
    assert_eq!(req["tool_choice"], json!({"type": "any"}));
    assert_eq!(req["stream"], false);
}

#[test]
fn bad_values_are_setup_errors() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![Reply::status(500)]);
    env.user_config(&config(&stub, "openai", "    tool_choice: sometimes\n"));
    let out = env.cmd().args(["-m", "local/m", "go"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tool_choice"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    env.user_config(&config(&stub, "ollama", "    tool_choice: auto\n"));
    let out = env.cmd().args(["-m", "local/m", "go"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tool_choice") && err.contains("ollama"),
        "{err}"
    );
    assert_eq!(stub.count(), 0);
}
