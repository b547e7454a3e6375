//! The OpenAI Responses adapter end to end, over a loopback stub: request
//! shape, function-call outputs, error classes and request counts, stream
//! timeouts, drops, missing `response.completed`, reasoning replay, garbled
//! arguments, secrets.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::responses::{error_reply, text_reply, tool_reply, Stream};
use crate::support::stub::{End, Reply, Stub};
use crate::support::{
    assert_secret_absent, events, finished, of_type, read_json, retry_reasons, TestEnv,
};

const MODEL: &str = "responses/gpt-5";
const KEY: &str = "sk-proj-test-0a1b2c3d4e5f";

const RETRY: &str = "retry: {attempts: 3, backoff: 1ms, max_backoff: 20ms, jitter: 0, stream_first_event_timeout: 300ms, stream_idle_timeout: 300ms}\n";

fn env_with(config: &str) -> TestEnv {
    let env = TestEnv::new();
    let retry = if config.contains("retry:") { "" } else { RETRY };
    env.user_config(&format!("health_db: off\n{retry}{config}"));
    env
}

fn cmd(env: &TestEnv, stub: &Stub) -> assert_cmd::Command {
    let mut cmd = env.cmd();
    cmd.env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", KEY);
    cmd
}

fn submit(call_id: &str) -> Reply {
    tool_reply(call_id, "submit", json!({"output": "done"}))
}

#[test]
fn a_tool_using_run_sends_the_documented_request_shape() {
    let env = env_with("");
    let stub = Stub::sequence(vec![
        tool_reply(
            "call_A1",
            "write_file",
            json!({"path": "note.txt", "content": "hi\n"}),
        ),
        submit("call_A2"),
    ]);
    let traj = env.file("traj.json");
    let out = cmd(&env, &stub)
        .args([
            "-m",
            MODEL,
            "--json",
            "--max-output-tokens",
            "5000",
            "--reasoning-effort",
            "high",
            "-o",
        ])
        .arg(&traj)
        .arg("write a note")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(env.work().join("note.txt")).unwrap(),
        "hi\n"
    );
    let ev = events(&out.stdout);
    let responses = of_type(&ev, "model.response");
    assert_eq!(responses[0]["input_tokens"], 25);
    assert_eq!(responses[0]["output_tokens"], 15);
    assert_eq!(responses[0]["finish_reason"], "tool_calls");

    let reqs = stub.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].method, "POST");
    assert_eq!(reqs[0].path, "/v1/responses");
    assert_eq!(
        reqs[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let body = reqs[0].json();
    assert_eq!(body["model"], "gpt-5");
    assert_eq!(body["stream"], true);
    assert_eq!(body["store"], false);
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(body["max_output_tokens"], 5000);
    assert_eq!(body["reasoning"], json!({"effort": "high"}));
    assert!(body["instructions"].as_str().unwrap().len() > 20);
    assert_eq!(
        body["input"],
        json!([{"role": "user", "content": "write a note"}])
    );
    let write = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "write_file")
        .expect("write_file");
    assert_eq!(write["type"], "function");
    assert_eq!(write["parameters"]["type"], "object");

    let input = reqs[1].json()["input"].clone();
    assert_eq!(input.as_array().unwrap().len(), 3);
    assert_eq!(input[1]["type"], "function_call");
    assert_eq!(input[1]["call_id"], "call_A1");
    assert_eq!(input[1]["name"], "write_file");
    let args: Value = serde_json::from_str(input[1]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"path": "note.txt", "content": "hi\n"}));
    assert_eq!(input[2]["type"], "function_call_output");
    assert_eq!(input[2]["call_id"], "call_A1");
    assert!(input[2]["output"].as_str().is_some());
    assert_secret_absent(KEY, &out, &[&traj]);
}

#[test]
fn server_errors_are_retried_and_client_errors_are_not() {
    let env = env_with("");
    let stub = Stub::sequence(vec![error_reply(
        500,
        "server_error",
        None,
        "The server had an error while processing your request.",
    )]);
    let out = cmd(&env, &stub)
        .args(["-m", MODEL, "--json", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert_eq!(stub.count(), 3);
    assert_eq!(
        retry_reasons(&events(&out.stdout)),
        ["http_500", "http_500"]
    );

    for (status, kind, code) in [
        (400, "invalid_request_error", None),
        (401, "invalid_request_error", Some("invalid_api_key")),
        (
            403,
            "invalid_request_error",
            Some("unsupported_country_region_territory"),
        ),
        (404, "invalid_request_error", Some("model_not_found")),
    ] {
        let stub = Stub::sequence(vec![error_reply(
            status,
            kind,
            code,
            "The model `gpt-9` does not exist or you do not have access to it.",
        )]);
        let out = cmd(&env, &stub).args(["-m", MODEL, "hi"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{status}: {stderr}");
        assert_eq!(stub.count(), 1, "{status} was retried");
        assert_eq!(
            stderr.contains("model name may be wrong"),
            status == 404,
            "{stderr}"
        );
        assert_secret_absent(KEY, &out, &[]);
    }
}

#[test]
fn insufficient_quota_is_not_retried_but_a_rate_limit_honours_retry_after() {
    let env = env_with("retry: {attempts: 3, backoff: 1ms, max_backoff: 10s, jitter: 0}\n");
    let stub = Stub::sequence(vec![error_reply(
        429,
        "insufficient_quota",
        Some("insufficient_quota"),
        "You exceeded your current quota, please check your plan and billing details.",
    )]);
    let out = cmd(&env, &stub)
        .args(["-m", MODEL, "--json", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert_eq!(stub.count(), 1);

    let stub = Stub::sequence(vec![
        error_reply(
            429,
            "requests",
            Some("rate_limit_exceeded"),
            "Rate limit reached",
        )
        .header("retry-after", "1"),
        text_reply("fine"),
    ]);
    let out = cmd(&env, &stub)
        .args(["-m", MODEL, "--json", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    let retry = of_type(&ev, "provider.retry");
    assert_eq!(retry[0]["reason"], "http_429");
    assert!(retry[0]["wait_seconds"].as_f64().unwrap() >= 1.0);
}

#[test]
fn stalls_drops_failed_and_unfinished_streams_are_retried() {
    let env = env_with("retry: {attempts: 6, backoff: 1ms, max_backoff: 20ms, jitter: 0, stream_first_event_timeout: 300ms, stream_idle_timeout: 300ms}\n");
    let stall = End::Stall(Duration::from_secs(2));
    let answer = || Stream::new().text(&["Hello ", "wor", "ld"]);
    let stub = Stub::sequence(vec![
        text_reply("never").delay(Duration::from_secs(2)),
        Reply::sse(answer().completed(1, 0, 1)).cut_after(6, stall),
        Reply::sse(answer().completed(1, 0, 1)).cut_after(6, End::Drop),
        Reply::sse(answer().unfinished()),
        Reply::sse(Stream::new().failed("server_error", "The server had an error")),
        Reply::sse(answer().completed(1, 0, 1)),
    ]);
    let out = cmd(&env, &stub)
        .args(["-m", MODEL, "--json", "hi"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stub.count(), 6);
    let ev = events(&out.stdout);
    assert_eq!(
        retry_reasons(&ev),
        [
            "timeout",
            "timeout",
            "network",
            "stream_incomplete",
            "http_500"
        ]
    );
    assert_eq!(of_type(&ev, "model.attempt_reset").len(), 3);
    assert_eq!(finished(&ev)["output"], "Hello world");

    let stub = Stub::sequence(vec![
        Reply::sse(answer().completed(1, 0, 1)).cut_after(6, End::Drop),
        Reply::sse(answer().completed(1, 0, 1)),
    ]);
    let out = cmd(&env, &stub).args(["-m", MODEL, "hi"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Hello world\n");
}

#[test]
fn reasoning_items_are_kept_and_replayed_only_to_the_same_model() {
    let env = env_with("");
    let first = Stream::new()
        .reasoning("rs_01", "gAAAAABo-encrypted-1")
        .text(&["Listing."])
        .function_call("call_R1", "list_files", &["{\"path\":", "\".\"}"], true)
        .completed(100, 80, 20);
    let stub = Stub::sequence(vec![Reply::sse(first), text_reply("ok")]);
    let traj = env.file("traj.json");
    let out = cmd(&env, &stub)
        .args(["-m", MODEL, "--json", "-o"])
        .arg(&traj)
        .arg("list")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = read_json(&traj);
    assert_eq!(doc["totals"]["cached_input_tokens"], 80);
    let assistant = &doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap()
        .clone();
    assert_eq!(assistant["model"], MODEL);
    assert_eq!(
        assistant["extra"],
        json!({"responses": {"reasoning": [{"type": "reasoning", "id": "rs_01", "summary": [], "encrypted_content": "gAAAAABo-encrypted-1"}]}})
    );
    let second = stub.requests()[1].json();
    assert_eq!(
        second["input"][1],
        json!({"type": "reasoning", "summary": [], "encrypted_content": "gAAAAABo-encrypted-1"})
    );
    assert_eq!(
        second["input"][2],
        json!({"role": "assistant", "content": "Listing."})
    );
    assert_eq!(second["input"][3]["type"], "function_call");
    assert_secret_absent(KEY, &out, &[&traj]);
}

#[test]
fn reasoning_items_are_left_out_for_another_model() {
    let env = env_with("fallback: {switch_after: 1}\n");
    let first = Stream::new()
        .reasoning("rs_01", "gAAAAABo-encrypted-1")
        .function_call("call_R1", "list_files", &["{\"path\": \".\"}"], true)
        .completed(10, 0, 5);
    let stub = Stub::start(move |i, _| match i {
        0 => Reply::sse(first.clone()),
        1 => error_reply(503, "server_error", None, "overloaded"),
        _ => submit("call_R2"),
    });
    let out = cmd(&env, &stub)
        .args([
            "-m",
            MODEL,
            "--fallback-model",
            "responses/gpt-5-mini",
            "list",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let third = stub.requests()[2].json();
    assert_eq!(third["model"], "gpt-5-mini");
    let kinds: Vec<Value> = third["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].clone())
        .collect();
    assert_eq!(
        kinds,
        [
            Value::Null,
            json!("function_call"),
            json!("function_call_output")
        ]
    );
}

#[test]
fn garbled_arguments_are_not_run_and_incomplete_replies_run_no_tools() {
    let env = env_with("");
    let garbled = Stream::new()
        .function_call(
            "call_G1",
            "write_file",
            &["{\"path\": \"x.txt\", \"content\": \"h"],
            false,
        )
        .completed(5, 0, 5);
    let cut = Stream::new()
        .function_call(
            "call_G2",
            "write_file",
            &["{\"path\": \"y.txt\", \"content\": \"a\"}"],
            true,
        )
        .incomplete();
    let stub = Stub::sequence(vec![
        Reply::sse(garbled),
        Reply::sse(cut),
        submit("call_G3"),
    ]);
    let out = cmd(&env, &stub)
        .args(["-m", MODEL, "--json", "write"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!env.work().join("x.txt").exists());
    assert!(!env.work().join("y.txt").exists());
    let ev = events(&out.stdout);
    assert!(retry_reasons(&ev).is_empty());
    let finishes: Vec<&Value> = of_type(&ev, "model.response")
        .iter()
        .map(|e| &e["finish_reason"])
        .collect();
    assert_eq!(
        finishes,
        [&json!("tool_calls"), &json!("length"), &json!("tool_calls")]
    );
    let second = stub.requests()[1].json();
    let output = &second["input"][2];
    assert_eq!(output["type"], "function_call_output");
    assert_eq!(output["call_id"], "call_G1");
    assert!(
        output["output"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{output}"
    );
}
