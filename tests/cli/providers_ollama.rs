//! The Ollama adapter against a loopback stub: a tool-using run, the exact
//! `/api/chat` request shape, error classes with their request counts,
//! Retry-After, stream timeouts, drops, a missing `done: true`, garbled
//! arguments, and a named provider's key staying secret.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::ollama::{done_line, message_line, ollama_text, ollama_tool_call, text_lines};
use crate::support::stub::{End, Reply, Stub};
use crate::support::{events, finished, of_type, TestEnv};

fn config(env: &TestEnv, attempts: u32, timeouts: bool) {
    let timeouts = if timeouts {
        "  stream_first_event_timeout: 300ms\n  stream_idle_timeout: 300ms\n"
    } else {
        ""
    };
    env.user_config(&format!(
        "retry:\n  attempts: {attempts}\n  backoff: 1ms\n  max_backoff: 5s\n  jitter: 0\n{timeouts}"
    ));
}

/// A JSON run of `ollama/qwen3` with `OLLAMA_HOST` at the stub.
fn run(env: &TestEnv, stub: &Stub, args: &[&str]) -> (Option<i32>, Vec<Value>) {
    let out = env
        .cmd()
        .env("OLLAMA_HOST", stub.url())
        .args(["-m", "ollama/qwen3", "--json"])
        .args(args)
        .output()
        .unwrap();
    (out.status.code(), events(&out.stdout))
}

fn retry_reasons(ev: &[Value]) -> Vec<String> {
    of_type(ev, "provider.retry")
        .iter()
        .map(|e| e["reason"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_tool_using_run_sends_the_documented_request_shape() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let stub = Stub::sequence(vec![
        ollama_tool_call("bash", json!({"command": "echo hi > out.txt"})),
        ollama_tool_call("submit", json!({"output": "wrote it"})),
    ]);
    let (code, ev) = run(
        &env,
        &stub,
        &[
            "--max-output-tokens",
            "640",
            "--reasoning-effort",
            "medium",
            "write",
        ],
    );
    assert_eq!(code, Some(0));
    assert_eq!(finished(&ev)["status"], "submitted");
    assert_eq!(finished(&ev)["output"], "wrote it");
    assert_eq!(
        std::fs::read_to_string(env.work().join("out.txt")).unwrap(),
        "hi\n"
    );

    let requests = stub.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].path, "/api/chat");
    assert_eq!(
        requests[0].header("authorization"),
        None,
        "ollama takes no key"
    );
    let body = requests[0].json();
    assert_eq!(body["model"], "qwen3");
    assert_eq!(body["stream"], true);
    assert_eq!(body["options"], json!({"num_predict": 640}));
    assert_eq!(body["think"], "medium");
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "write"})
    );
    let tools = body["tools"].as_array().unwrap();
    let bash = tools
        .iter()
        .find(|t| t["function"]["name"] == "bash")
        .expect("bash tool");
    assert_eq!(bash["type"], "function");
    assert_eq!(bash["function"]["parameters"]["type"], "object");

    // The call goes back with object arguments and its result as a `tool`
    // message naming the tool.
    let messages = requests[1].json()["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 4);
    assert_eq!(
        messages[2],
        json!({"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "bash", "arguments": {"command": "echo hi > out.txt"}}}]})
    );
    assert_eq!(messages[3]["role"], "tool");
    assert_eq!(messages[3]["tool_name"], "bash");
    assert!(messages[3]["content"].is_string());

    let response = of_type(&ev, "model.response")[0];
    assert_eq!(response["input_tokens"], 122);
    assert_eq!(response["output_tokens"], 33);
    assert_eq!(response["finish_reason"], "tool_calls");
    assert_eq!(response["cost_usd"], 0.0);
    // Ollama sends no ids: made-up ones tie the call to its events.
    let call_id = of_type(&ev, "assistant.message")[0]["tool_calls"][0]["id"].clone();
    assert!(call_id.as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(of_type(&ev, "tool.started")[0]["call_id"], call_id);
}

#[test]
fn a_text_reply_completes_and_length_is_normalised() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let stub = Stub::sequence(vec![ollama_text("Paris is the capital.")]);
    let (code, ev) = run(&env, &stub, &["capital of France?"]);
    assert_eq!(code, Some(0));
    assert_eq!(finished(&ev)["status"], "completed");
    assert_eq!(finished(&ev)["output"], "Paris is the capital.");

    let mut cut = text_lines("cut off");
    cut.pop();
    cut.push(done_line("length"));
    let stub = Stub::sequence(vec![Reply::ndjson(cut), ollama_text("fine")]);
    let (code, ev) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(0));
    assert_eq!(of_type(&ev, "model.response")[0]["finish_reason"], "length");
}

#[test]
fn server_errors_are_retried_up_to_the_attempts_then_exit_75() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let stub = Stub::sequence(vec![Reply::status(503)]);
    let (code, ev) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(75));
    assert_eq!(stub.count(), 3);
    assert_eq!(retry_reasons(&ev), vec!["http_503", "http_503"]);
}

#[test]
fn retry_after_is_honoured() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let stub = Stub::sequence(vec![
        Reply::status(429).header("retry-after", "1"),
        ollama_text("ok"),
    ]);
    let (code, ev) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(0));
    assert_eq!(of_type(&ev, "provider.retry")[0]["wait_seconds"], 1.0);
}

#[test]
fn an_unknown_model_is_a_404_with_the_hint_and_no_retry() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let stub = Stub::sequence(vec![Reply::json(
        404,
        &json!({"error": "model \"qwen3\" not found, try pulling it first"}),
    )]);
    let (code, ev) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(1));
    assert_eq!(stub.count(), 1);
    let error = finished(&ev)["error"].as_str().unwrap().to_string();
    assert!(error.contains("not found, try pulling it first"), "{error}");
    assert!(error.contains("model name may be wrong"), "{error}");
    for status in [400, 401, 403] {
        let stub = Stub::sequence(vec![Reply::status(status)]);
        let (code, _) = run(&env, &stub, &["hi"]);
        assert_eq!((code, stub.count()), (Some(1), 1), "status {status}");
    }
}

#[test]
fn stalls_before_and_during_the_stream_time_out_and_retry() {
    let env = TestEnv::new();
    config(&env, 3, true);
    let stub = Stub::sequence(vec![
        ollama_text("slow").delay(Duration::from_secs(3)),
        Reply::ndjson(text_lines("one two three")).cut_after(2, End::Stall(Duration::from_secs(3))),
        ollama_text("one two three"),
    ]);
    let (code, ev) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(0));
    assert_eq!(stub.count(), 3);
    assert_eq!(retry_reasons(&ev), vec!["timeout", "timeout"]);
    assert_eq!(
        of_type(&ev, "model.attempt_reset").len(),
        1,
        "only the mid-stream stall had output"
    );
    assert_eq!(finished(&ev)["output"], "one two three");
}

/// An NDJSON reply sending `lines` whole, then one byte every 200 ms for
/// 12 s without ever ending a line.
fn trickle_after(lines: Vec<Value>) -> Reply {
    let mut reply = Reply::ndjson(lines);
    reply
        .chunks
        .extend((0..60).map(|_| (Duration::from_millis(200), b"x".to_vec())));
    reply
}

/// Runs `stub` with a 1 s first-event and idle timeout and two attempts:
/// the exit code, the events and how long the run took.
fn run_timed(stub: &Stub) -> (Option<i32>, Vec<Value>, Duration) {
    let env = TestEnv::new();
    env.user_config(
        "health_db: off\nretry: {attempts: 2, backoff: 1ms, jitter: 0, stream_first_event_timeout: 1s, stream_idle_timeout: 1s}\n",
    );
    let started = std::time::Instant::now();
    let (code, ev) = run(&env, stub, &["hi"]);
    (code, ev, started.elapsed())
}

/// `deadline_seconds` of each `provider.retry`.
fn retry_deadlines(ev: &[Value]) -> Vec<f64> {
    of_type(ev, "provider.retry")
        .iter()
        .map(|e| e["deadline_seconds"].as_f64().unwrap_or(-1.0))
        .collect()
}

#[test]
fn bytes_that_never_end_a_first_line_run_into_the_first_event_deadline() {
    let stub = Stub::sequence(vec![trickle_after(vec![]), ollama_text("ok")]);
    let (code, ev, took) = run_timed(&stub);
    assert_eq!(code, Some(0), "{ev:?}");
    assert_eq!(retry_reasons(&ev), ["timeout"]);
    let deadlines = retry_deadlines(&ev);
    assert!((1.0..1.5).contains(&deadlines[0]), "{deadlines:?}");
    assert_eq!(finished(&ev)["output"], "ok");
    assert!(took < Duration::from_secs(6), "{took:?}");
}

#[test]
fn bytes_that_never_end_a_later_line_run_into_the_idle_deadline() {
    let first = message_line(json!({"role": "assistant", "content": "partial "}));
    let stub = Stub::sequence(vec![trickle_after(vec![first]), ollama_text("whole")]);
    let (code, ev, took) = run_timed(&stub);
    assert_eq!(code, Some(0), "{ev:?}");
    assert_eq!(retry_reasons(&ev), ["timeout"]);
    assert_eq!(retry_deadlines(&ev), [1.0], "the idle limit ran out");
    assert_eq!(finished(&ev)["output"], "whole");
    assert!(took < Duration::from_secs(6), "{took:?}");
}

#[test]
fn a_drop_mid_stream_retries_without_duplicated_text() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let stub = Stub::sequence(vec![
        Reply::ndjson(text_lines("The answer is 42")).cut_after(2, End::Drop),
        ollama_text("The answer is 42"),
    ]);
    let (code, ev) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(0));
    assert_eq!(retry_reasons(&ev), vec!["network"]);
    assert_eq!(of_type(&ev, "model.attempt_reset").len(), 1);
    assert_eq!(
        of_type(&ev, "assistant.message")[0]["text"],
        "The answer is 42"
    );
    assert_eq!(finished(&ev)["output"], "The answer is 42");
}

#[test]
fn a_stream_without_done_retries_as_incomplete() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let mut no_done = text_lines("partial");
    no_done.pop();
    let stub = Stub::sequence(vec![Reply::ndjson(no_done), ollama_text("complete")]);
    let (code, ev) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(0));
    assert_eq!(retry_reasons(&ev), vec!["stream_incomplete"]);
    assert_eq!(finished(&ev)["output"], "complete");
}

#[test]
fn garbled_string_arguments_are_not_executed() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let garbled = Reply::ndjson(vec![
        message_line(json!({"role": "assistant", "content": "",
            "tool_calls": [{"function": {"name": "bash", "arguments": "{\"command\": \"touch garbled"}}]})),
        done_line("stop"),
    ]);
    let stub = Stub::sequence(vec![
        garbled,
        ollama_tool_call("submit", json!({"output": "ok"})),
    ]);
    let (code, ev) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(0));
    assert!(!env.work().join("garbled").exists());
    assert!(of_type(&ev, "provider.retry").is_empty());
    assert_eq!(of_type(&ev, "tool.finished")[0]["ok"], false);
    // Ollama wants object arguments: the garbled call goes back empty.
    let messages = stub.requests()[1].json()["messages"].clone();
    assert_eq!(
        messages[2]["tool_calls"][0]["function"]["arguments"],
        json!({})
    );
}

#[test]
fn a_named_ollama_provider_sends_its_key_and_never_shows_it() {
    const KEY: &str = "ollama-cloud-SECRET-0987654321";
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![Reply::status(503), ollama_text("hello")]);
    env.user_config(&format!(
        "retry: {{attempts: 3, backoff: 1ms, jitter: 0}}\nproviders:\n  cloud:\n    api: ollama\n    endpoint: {}\n    api_key_env: CLOUD_KEY\n    models:\n      gpt-oss:120b: {{max_output_tokens: 2048}}\n",
        stub.url()
    ));
    let trajectory = env.file("t.json");
    let out = env
        .cmd()
        .env("CLOUD_KEY", KEY)
        .args(["-m", "cloud/gpt-oss:120b", "--json", "-o"])
        .arg(&trajectory)
        .arg("hi")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let request = &stub.requests()[1];
    assert_eq!(request.path, "/api/chat");
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(request.json()["model"], "gpt-oss:120b");
    assert_eq!(request.json()["options"]["num_predict"], 2048);
    for text in [
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
        std::fs::read_to_string(&trajectory).unwrap(),
    ] {
        assert!(!text.contains(KEY));
    }
}
