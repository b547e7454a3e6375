//! The Anthropic Messages adapter end to end, over a loopback stub: request
//! shape, tool results, error classes and request counts, stream timeouts,
//! drops, missing `message_stop`, thinking replay, garbled input, secrets.

use std::time::Duration;

use serde_json::json;

use crate::support::anthropic::{
    self as wire, error_reply, message, text_block, text_reply, thinking_block, tool_reply,
    tool_use_block,
};
use crate::support::stub::{End, Reply, Stub};
use crate::support::{
    assert_secret_absent, events, finished, of_type, read_json, retry_reasons, TestEnv,
};

const MODEL: &str = "anthropic/claude-sonnet-4-5";
const KEY: &str = "sk-ant-test-9f8e7d6c5b4a";

/// Fast retries; timeouts short enough for stall tests.
const RETRY: &str = "retry: {attempts: 3, backoff: 1ms, max_backoff: 20ms, jitter: 0, stream_first_event_timeout: 300ms, stream_idle_timeout: 300ms}\n";

/// A user config of `config` plus the fast `RETRY` unless it has its own.
fn env_with(config: &str) -> TestEnv {
    let env = TestEnv::new();
    let retry = if config.contains("retry:") { "" } else { RETRY };
    env.user_config(&format!("health_db: off\n{retry}{config}"));
    env
}

fn cmd(env: &TestEnv, stub: &Stub) -> assert_cmd::Command {
    let mut cmd = env.cmd();
    cmd.env("ANTHROPIC_BASE_URL", stub.url())
        .env("ANTHROPIC_API_KEY", KEY);
    cmd
}

fn submit(id: &str) -> Reply {
    tool_reply(id, "submit", json!({"output": "done"}))
}

#[test]
fn a_tool_using_run_sends_the_documented_request_shape() {
    let env = env_with("");
    let stub = Stub::sequence(vec![
        tool_reply(
            "toolu_01A",
            "write_file",
            json!({"path": "note.txt", "content": "hi\n"}),
        ),
        submit("toolu_01B"),
    ]);
    let traj = env.file("traj.json");
    let out = cmd(&env, &stub)
        .args(["-m", MODEL, "--json", "-o"])
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
    assert_eq!(finished(&ev)["status"], "submitted");
    let responses = of_type(&ev, "model.response");
    assert_eq!(responses[0]["input_tokens"], 25);
    assert_eq!(responses[0]["output_tokens"], 15);
    assert_eq!(responses[0]["finish_reason"], "tool_calls");
    assert!(responses[0]["cost_usd"].as_f64().unwrap() > 0.0);

    let reqs = stub.requests();
    assert_eq!(reqs.len(), 2);
    let first = &reqs[0];
    assert_eq!(first.method, "POST");
    assert_eq!(first.path, "/v1/messages");
    assert_eq!(first.header("x-api-key"), Some(KEY));
    assert_eq!(first.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(first.header("authorization"), None);
    let body = first.json();
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(body["stream"], true);
    assert_eq!(body["max_tokens"], 16000);
    // The system prompt is one text block ending the stable prefix (SPEC 25).
    assert!(body["system"][0]["text"].as_str().unwrap().len() > 20);
    assert_eq!(
        body["system"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert!(body.get("thinking").is_none());
    let tools = body["tools"].as_array().unwrap();
    let write = tools
        .iter()
        .find(|t| t["name"] == "write_file")
        .expect("write_file offered");
    assert!(write["description"].as_str().is_some());
    assert_eq!(write["input_schema"]["type"], "object");
    assert_eq!(body["messages"][0]["role"], "user");
    assert_eq!(body["messages"][0]["content"][0]["text"], "write a note");

    let second = reqs[1].json();
    let msgs = second["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    assert_eq!(
        msgs[1],
        json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_01A", "name": "write_file", "input": {"path": "note.txt", "content": "hi\n"}}
        ]})
    );
    assert_eq!(msgs[2]["role"], "user");
    let result = &msgs[2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "toolu_01A");
    assert!(result["content"].as_str().is_some());
    assert_secret_absent(KEY, &out, &[&traj]);
}

#[test]
fn max_tokens_come_from_the_flag_or_the_named_model_and_effort_enables_thinking() {
    let env = env_with("");
    let stub = Stub::sequence(vec![text_reply("ok")]);
    env.write(
        "gw.yaml",
        &format!(
            "providers:\n  gw:\n    api: anthropic\n    endpoint: {}\n    api_key_env: GW_KEY\n    headers: {{X-Team: infra}}\n    models:\n      claude-opus-4-1: {{max_output_tokens: 1234}}\n",
            stub.url()
        ),
    );
    env.cmd()
        .env("GW_KEY", KEY)
        .args(["-c"])
        .arg(env.file("gw.yaml"))
        .args(["-m", "gw/claude-opus-4-1", "hi"])
        .assert()
        .success();
    cmd(&env, &stub)
        .args([
            "-m",
            MODEL,
            "--max-output-tokens",
            "30000",
            "--reasoning-effort",
            "medium",
            "hi",
        ])
        .assert()
        .success();
    let reqs = stub.requests();
    assert_eq!(reqs[0].path, "/v1/messages");
    assert_eq!(reqs[0].header("x-team"), Some("infra"));
    assert_eq!(reqs[0].header("x-api-key"), Some(KEY));
    assert_eq!(reqs[0].json()["max_tokens"], 1234);
    assert_eq!(reqs[0].json()["model"], "claude-opus-4-1");
    let body = reqs[1].json();
    assert_eq!(body["max_tokens"], 30000);
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 10240})
    );
}

#[test]
fn overloaded_529_is_retried_until_the_rate_limit_attempts_run_out() {
    // An overload is tried like a rate limit (SPEC 4): up to
    // `retry.rate_limit_attempts` (8 by default), not `attempts` (3).
    let env = env_with("");
    let stub = Stub::sequence(vec![error_reply(529, "overloaded_error", "Overloaded")]);
    let out = cmd(&env, &stub)
        .args(["-m", MODEL, "--json", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert_eq!(stub.count(), 8);
    let ev = events(&out.stdout);
    assert_eq!(retry_reasons(&ev), ["http_529"; 7]);
    let fin = finished(&ev);
    assert_eq!(fin["status"], "error");
    assert!(
        fin["error"].as_str().unwrap().contains("Overloaded"),
        "{fin}"
    );
    assert_secret_absent(KEY, &out, &[]);
}

#[test]
fn retry_after_seconds_and_http_dates_are_a_floor_on_the_wait() {
    let env = env_with("retry: {attempts: 3, backoff: 1ms, max_backoff: 10s, jitter: 0}\n");
    let date = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(5));
    let stub = Stub::sequence(vec![
        error_reply(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
        )
        .header("retry-after", "1"),
        error_reply(429, "rate_limit_error", "slow down").header("retry-after", &date),
        text_reply("fine"),
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
    assert_eq!(stub.count(), 3);
    let ev = events(&out.stdout);
    let retries = of_type(&ev, "provider.retry");
    assert_eq!(retries.len(), 2);
    assert_eq!(retries[0]["reason"], "http_429");
    assert!(
        retries[0]["wait_seconds"].as_f64().unwrap() >= 1.0,
        "{}",
        retries[0]
    );
    let dated = retries[1]["wait_seconds"].as_f64().unwrap();
    // The date is whole seconds and the first wait and the runs take time:
    // anything well above the 2 ms backoff shows the date was honoured.
    assert!((0.5..=5.0).contains(&dated), "{}", retries[1]);
}

#[test]
fn client_errors_are_not_retried_and_404_hints_at_the_model_name() {
    for (status, kind, msg) in [
        (
            400,
            "invalid_request_error",
            "messages: text content blocks must be non-empty",
        ),
        (401, "authentication_error", "invalid x-api-key"),
        (
            403,
            "permission_error",
            "Your API key does not have permission to use the specified resource.",
        ),
        (404, "not_found_error", "model: claude-sonnet-9"),
    ] {
        let env = env_with("");
        let stub = Stub::sequence(vec![error_reply(status, kind, msg)]);
        let out = cmd(&env, &stub).args(["-m", MODEL, "hi"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{status}: {stderr}");
        assert_eq!(stub.count(), 1, "{status} was retried");
        assert!(stderr.contains(msg), "{status}: {stderr}");
        assert_eq!(
            stderr.contains("model name may be wrong"),
            status == 404,
            "{stderr}"
        );
        assert_secret_absent(KEY, &out, &[]);
    }
}

#[test]
fn a_low_credit_balance_is_quota_and_moves_the_chain_at_once() {
    let low = || {
        error_reply(
            400,
            "invalid_request_error",
            "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.",
        )
    };
    let env = env_with("");
    let stub = Stub::sequence(vec![low()]);
    let out = cmd(&env, &stub)
        .args(["-m", MODEL, "--json", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert_eq!(stub.count(), 1);
    assert!(retry_reasons(&events(&out.stdout)).is_empty());

    let backup = env.script("backup.yaml", "- text: from the backup\n");
    let stub = Stub::sequence(vec![low()]);
    let out = cmd(&env, &stub)
        .args(["-m", MODEL, "--fallback-model", &backup, "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stub.count(), 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "model fallback: {MODEL} -> {backup} (quota) at step 1"
        )),
        "{stderr}"
    );
}

#[test]
fn stalls_before_the_first_event_and_mid_stream_time_out_and_retry() {
    let env = env_with("retry: {attempts: 4, backoff: 1ms, max_backoff: 20ms, jitter: 0, stream_first_event_timeout: 300ms, stream_idle_timeout: 300ms}\n");
    let stall = End::Stall(Duration::from_secs(2));
    let stub = Stub::sequence(vec![
        text_reply("never").delay(Duration::from_secs(2)),
        Reply::sse(vec![]).end(stall),
        Reply::sse(message(vec![text_block(0, &["Hel", "lo"])], "end_turn")).cut_after(4, stall),
        text_reply("Hello"),
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
    assert_eq!(stub.count(), 4);
    let ev = events(&out.stdout);
    assert_eq!(retry_reasons(&ev), ["timeout", "timeout", "timeout"]);
    assert_eq!(of_type(&ev, "model.attempt_reset").len(), 1);
    assert_eq!(finished(&ev)["output"], "Hello");
}

#[test]
fn a_drop_mid_stream_retries_without_duplicated_text() {
    let env = env_with("");
    let full = message(vec![text_block(0, &["Hello ", "wor", "ld"])], "end_turn");
    let stub = Stub::sequence(vec![
        Reply::sse(full.clone()).cut_after(5, End::Drop),
        Reply::sse(full),
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
    let ev = events(&out.stdout);
    assert_eq!(retry_reasons(&ev), ["network"]);
    let reset = of_type(&ev, "model.attempt_reset");
    assert_eq!(reset.len(), 1);
    assert_eq!(reset[0]["model"], MODEL);
    assert_eq!(of_type(&ev, "assistant.message")[0]["text"], "Hello world");
    assert_eq!(finished(&ev)["output"], "Hello world");

    let stub = Stub::sequence(vec![
        Reply::sse(message(
            vec![text_block(0, &["Hello ", "wor", "ld"])],
            "end_turn",
        ))
        .cut_after(5, End::Drop),
        text_reply("Hello world"),
    ]);
    let out = cmd(&env, &stub).args(["-m", MODEL, "hi"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Hello world\n");
}

#[test]
fn a_stream_without_message_stop_or_with_an_error_event_is_retried() {
    let env = env_with("");
    let mut no_stop = message(vec![text_block(0, &["partial"])], "end_turn");
    no_stop.pop();
    let overloaded = vec![
        wire::message_start(25, 0),
        wire::ping(),
        wire::error_event("overloaded_error", "Overloaded"),
    ];
    let stub = Stub::sequence(vec![
        Reply::sse(no_stop),
        Reply::sse(overloaded),
        text_reply("whole"),
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
    assert_eq!(stub.count(), 3);
    let ev = events(&out.stdout);
    assert_eq!(retry_reasons(&ev), ["stream_incomplete", "http_529"]);
    assert_eq!(finished(&ev)["output"], "whole");
}

fn thinking_then_tool() -> Reply {
    Reply::sse(message(
        vec![
            thinking_block(
                0,
                "The user wants a file listing.",
                "EqQBCgIYAhIM1gbcDa9GJwZA2b3h",
            ),
            wire::redacted_thinking_block(1, "EmwKAhgBEgy3va3pzix/LafPsn4a"),
            text_block(2, &["Listing."]),
            tool_use_block(3, "toolu_01T1", "list_files", &["{\"path\":", " \".\"}"]),
        ],
        "tool_use",
    ))
}

#[test]
fn thinking_blocks_are_kept_in_the_trajectory_and_replayed_to_the_same_model() {
    let env = env_with("");
    let stub = Stub::sequence(vec![thinking_then_tool(), submit("toolu_01T2")]);
    let traj = env.file("traj.json");
    let out = cmd(&env, &stub)
        .args(["-m", MODEL, "--reasoning-effort", "low", "-o"])
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
    let kept = json!([
        {"type": "thinking", "thinking": "The user wants a file listing.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
    ]);
    let doc = read_json(&traj);
    let assistant = doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(assistant["model"], MODEL);
    assert_eq!(assistant["extra"], json!({"anthropic": {"content": kept}}));

    let reqs = stub.requests();
    assert_eq!(
        reqs[0].json()["thinking"],
        json!({"type": "enabled", "budget_tokens": 4096})
    );
    let replayed = &reqs[1].json()["messages"][1]["content"];
    assert_eq!(replayed[0], kept[0]);
    assert_eq!(replayed[1], kept[1]);
    assert_eq!(replayed[2], json!({"type": "text", "text": "Listing."}));
    assert_eq!(replayed[3]["type"], "tool_use");
    assert_eq!(replayed[3]["input"], json!({"path": "."}));
    assert_secret_absent(KEY, &out, &[&traj]);
}

#[test]
fn thinking_blocks_are_left_out_for_another_model() {
    let env = env_with("fallback: {switch_after: 1}\n");
    let stub = Stub::start(|i, _| match i {
        0 => thinking_then_tool(),
        1 => error_reply(529, "overloaded_error", "Overloaded"),
        _ => submit("toolu_01T3"),
    });
    let backup = "anthropic/claude-haiku-4-5";
    let out = cmd(&env, &stub)
        .args(["-m", MODEL, "--fallback-model", backup, "list"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reqs = stub.requests();
    assert_eq!(reqs.len(), 3);
    let body = reqs[2].json();
    assert_eq!(body["model"], "claude-haiku-4-5");
    let content = body["messages"][1]["content"].as_array().unwrap();
    let kinds: Vec<&str> = content
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["text", "tool_use"]);
}

#[test]
fn garbled_tool_input_is_not_run_and_the_model_is_asked_again() {
    let env = env_with("");
    let garbled = Reply::sse(message(
        vec![tool_use_block(
            0,
            "toolu_01G",
            "write_file",
            &["{\"path\": \"x.txt\",", " \"content\": \"hi"],
        )],
        "tool_use",
    ));
    let stub = Stub::sequence(vec![garbled, submit("toolu_01H")]);
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
    let ev = events(&out.stdout);
    assert!(retry_reasons(&ev).is_empty());
    let done = of_type(&ev, "tool.finished");
    assert_eq!(done[0]["ok"], false);
    let second = stub.requests()[1].json();
    let result = &second["messages"][2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "toolu_01G");
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{result}"
    );
}

#[test]
fn a_reply_cut_off_at_max_tokens_runs_no_tools() {
    let env = env_with("");
    let cut = Reply::sse(message(
        vec![tool_use_block(
            0,
            "toolu_01C",
            "write_file",
            &["{\"path\": \"y.txt\", \"content\": \"a\"}"],
        )],
        "max_tokens",
    ));
    let stub = Stub::sequence(vec![cut]);
    let out = cmd(&env, &stub)
        .args(["-m", MODEL, "--json", "write"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(!env.work().join("y.txt").exists());
    let ev = events(&out.stdout);
    assert_eq!(of_type(&ev, "model.response")[0]["finish_reason"], "length");
    assert_eq!(finished(&ev)["status"], "output_truncated");
    assert_eq!(stub.count(), 3);
}
