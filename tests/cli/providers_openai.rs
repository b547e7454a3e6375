//! The Chat Completions adapter against a loopback stub: a tool-using run,
//! the exact request shape, every error class with its request count,
//! Retry-After, stream timeouts, drops, a missing `[DONE]`, garbled tool
//! arguments, and the key staying secret.

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::support::openai::{
    chat_sse_submit, chat_sse_text, chat_sse_tool_call, text_events, tool_call_events,
};
use crate::support::stub::{End, Reply, Stub};
use crate::support::{events, finished, of_type, read_json, TestEnv};

const KEY: &str = "sk-test-Zq8SECRETkey1234567890";

/// Fast retries; stream timeouts at their defaults unless `timeouts`.
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

/// A JSON run of `openai/gpt-5` against `stub`.
fn run(env: &TestEnv, stub: &Stub, args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", KEY)
        .args(["-m", "openai/gpt-5", "--json"])
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    (out.status.code(), events(&out.stdout), stderr)
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
        chat_sse_tool_call("call_abc", "bash", r#"{"command":"echo hello > out.txt"}"#),
        chat_sse_submit("call_def", "wrote out.txt"),
    ]);
    let (code, ev, _) = run(
        &env,
        &stub,
        &[
            "--max-output-tokens",
            "777",
            "--reasoning-effort",
            "low",
            "write out.txt",
        ],
    );
    assert_eq!(code, Some(0));
    assert_eq!(finished(&ev)["status"], "submitted");
    assert_eq!(finished(&ev)["output"], "wrote out.txt");
    assert_eq!(
        std::fs::read_to_string(env.work().join("out.txt")).unwrap(),
        "hello\n"
    );

    let requests = stub.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0];
    assert_eq!(first.method, "POST");
    assert_eq!(first.path, "/v1/chat/completions");
    assert_eq!(
        first.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(first.header("content-type"), Some("application/json"));
    let body = first.json();
    assert_eq!(body["model"], "gpt-5");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(body["max_completion_tokens"], 777);
    assert_eq!(body["reasoning_effort"], "low");
    assert!(body.get("max_tokens").is_none());
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "write out.txt"})
    );
    let tools = body["tools"].as_array().unwrap();
    let bash = tools
        .iter()
        .find(|t| t["function"]["name"] == "bash")
        .expect("bash tool");
    assert_eq!(bash["type"], "function");
    assert_eq!(bash["function"]["parameters"]["type"], "object");
    assert!(bash["function"]["description"]
        .as_str()
        .is_some_and(|d| !d.is_empty()));
    assert!(tools.iter().any(|t| t["function"]["name"] == "submit"));

    // The second request carries the call and its result in OpenAI's form.
    let second = requests[1].json();
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4);
    assert_eq!(
        messages[2],
        json!({"role": "assistant", "content": "", "tool_calls": [{
            "id": "call_abc", "type": "function",
            "function": {"name": "bash", "arguments": "{\"command\":\"echo hello > out.txt\"}"},
        }]})
    );
    assert_eq!(messages[3]["role"], "tool");
    assert_eq!(messages[3]["tool_call_id"], "call_abc");
    assert!(messages[3]["content"].is_string());

    // Usage from the final chunk, priced with gpt-5's built-in price.
    let response = of_type(&ev, "model.response")[0];
    assert_eq!(response["input_tokens"], 100);
    assert_eq!(response["output_tokens"], 20);
    assert_eq!(response["finish_reason"], "tool_calls");
    let cost = response["cost_usd"].as_f64().unwrap();
    let expected = (20.0 * 1.25 + 80.0 * 0.125 + 20.0 * 10.0) / 1e6;
    assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");
    let started = of_type(&ev, "tool.started")[0];
    assert_eq!(started["call_id"], "call_abc");
    assert_eq!(
        started["arguments"],
        json!({"command": "echo hello > out.txt"})
    );
}

#[test]
fn a_named_gateway_gets_its_headers_key_and_the_models_token_cap() {
    let env = TestEnv::new();
    // Gateways (OpenRouter among them) send SSE comments while they wait.
    let mut with_comments = vec![": OPENROUTER PROCESSING\n\n".to_string()];
    with_comments.extend(text_events("All done."));
    let stub = Stub::sequence(vec![Reply::sse(with_comments)]);
    env.user_config(&format!(
        "providers:\n  gateway:\n    api: openai\n    endpoint: {}/v1\n    api_key_env: GATEWAY_KEY\n    headers: {{X-Team: infra}}\n    models:\n      qwen3-coder: {{max_output_tokens: 256}}\n",
        stub.url()
    ));
    let out = env
        .cmd()
        .env("GATEWAY_KEY", KEY)
        .args(["-m", "gateway/qwen3-coder", "--json", "say done"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["status"], "completed");
    assert_eq!(finished(&ev)["output"], "All done.");
    let request = &stub.requests()[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.header("x-team"), Some("infra"));
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let body = request.json();
    assert_eq!(body["model"], "qwen3-coder");
    // Named gateways get the widely supported `max_tokens`, seeded by the model's cap.
    assert_eq!(body["max_tokens"], 256);
    assert!(body.get("max_completion_tokens").is_none());

    // A larger flag is capped by the model's limit; a smaller one wins.
    for (flag, sent) in [("4000", 256), ("100", 100)] {
        let stub = Stub::sequence(vec![chat_sse_text("ok")]);
        env.user_config(&format!(
            "providers:\n  gateway:\n    api: openai\n    endpoint: {}/v1\n    models:\n      qwen3-coder: {{max_output_tokens: 256}}\n",
            stub.url()
        ));
        let out = env
            .cmd()
            .args([
                "-m",
                "gateway/qwen3-coder",
                "--max-output-tokens",
                flag,
                "hi",
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let request = &stub.requests()[0];
        assert_eq!(request.json()["max_tokens"], sent);
        assert_eq!(
            request.header("authorization"),
            None,
            "no key variable: no auth header"
        );
    }
}

#[test]
fn server_errors_are_retried_up_to_the_attempts_then_exit_75() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let stub = Stub::sequence(vec![Reply::status(503)]);
    let (code, ev, _) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(75));
    assert_eq!(stub.count(), 3);
    assert_eq!(retry_reasons(&ev), vec!["http_503", "http_503"]);
    let retry = of_type(&ev, "provider.retry")[0];
    assert_eq!(retry["attempt"], 1);
    assert_eq!(retry["next_attempt"], 2);
    assert_eq!(retry["model"], "openai/gpt-5");
    assert_eq!(finished(&ev)["status"], "error");
}

#[test]
fn retry_after_in_seconds_is_a_floor_on_the_wait() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let stub = Stub::sequence(vec![
        Reply::status(429).header("retry-after", "1"),
        chat_sse_text("after the wait"),
    ]);
    let (code, ev, _) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(0));
    assert_eq!(stub.count(), 2);
    let retry = of_type(&ev, "provider.retry")[0];
    assert_eq!(retry["reason"], "http_429");
    assert_eq!(retry["wait_seconds"], 1.0);
    assert_eq!(finished(&ev)["output"], "after the wait");
}

#[test]
fn retry_after_as_an_http_date_is_honoured() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let when = httpdate_in(Duration::from_secs(4));
    let stub = Stub::sequence(vec![
        Reply::status(429).header("retry-after", &when),
        chat_sse_text("later"),
    ]);
    let (code, ev, _) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(0));
    let wait = of_type(&ev, "provider.retry")[0]["wait_seconds"]
        .as_f64()
        .unwrap();
    // HTTP dates have whole seconds (3 to 4 s ahead when written) and a
    // loaded machine takes time to start the run: well above the 1 ms
    // backoff shows the date was honoured.
    assert!((0.5..=4.0).contains(&wait), "wait_seconds {wait}");
}

/// An HTTP date `d` from now, as a server would send it.
fn httpdate_in(d: Duration) -> String {
    let t = SystemTime::now() + d;
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    // Format by hand: tests do not depend on the httpdate crate.
    let days = secs / 86_400;
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let (y, mo, d) = civil_from_days(days as i64);
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][mo as usize - 1];
    format!("{weekday}, {d:02} {month} {y} {h:02}:{m:02}:{s:02} GMT")
}

/// Days since 1970-01-01 to (year, month, day) (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    (y, m, d)
}

#[test]
fn client_errors_are_not_retried_and_404_hints_at_the_model_name() {
    for status in [400, 401, 403, 404] {
        let env = TestEnv::new();
        config(&env, 3, false);
        let stub = Stub::sequence(vec![Reply::json(
            status,
            &json!({"error": {"message": format!("vendor says {status}"), "type": "invalid_request_error", "param": null, "code": null}}),
        )]);
        let (code, ev, _) = run(&env, &stub, &["hi"]);
        assert_eq!(code, Some(1), "status {status}");
        assert_eq!(stub.count(), 1, "status {status} must not be retried");
        assert!(of_type(&ev, "provider.retry").is_empty());
        let error = finished(&ev)["error"].as_str().unwrap().to_string();
        assert!(error.contains(&format!("vendor says {status}")), "{error}");
        assert_eq!(
            error.contains("model name may be wrong"),
            status == 404,
            "{error}"
        );
    }
}

#[test]
fn insufficient_quota_is_not_retried() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let stub = Stub::sequence(vec![Reply::json(
        429,
        &json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.",
                          "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}),
    )]);
    let (code, ev, _) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(75));
    assert_eq!(stub.count(), 1);
    assert!(of_type(&ev, "provider.retry").is_empty());
    assert!(finished(&ev)["error"].as_str().unwrap().contains("quota"));
}

#[test]
fn a_stall_before_the_first_byte_times_out_and_retries() {
    let env = TestEnv::new();
    config(&env, 3, true);
    let stub = Stub::sequence(vec![
        chat_sse_text("slow").delay(Duration::from_secs(3)),
        chat_sse_text("fast"),
    ]);
    let (code, ev, _) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(0));
    assert_eq!(stub.count(), 2);
    assert_eq!(retry_reasons(&ev), vec!["timeout"]);
    assert!(
        of_type(&ev, "model.attempt_reset").is_empty(),
        "nothing was streamed"
    );
    assert_eq!(finished(&ev)["output"], "fast");
}

#[test]
fn a_stall_mid_stream_times_out_resets_and_retries() {
    let env = TestEnv::new();
    config(&env, 3, true);
    let stub = Stub::sequence(vec![
        Reply::sse(text_events("Hello there world"))
            .cut_after(3, End::Stall(Duration::from_secs(3))),
        chat_sse_text("Hello there world"),
    ]);
    let (code, ev, _) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(0));
    assert_eq!(stub.count(), 2);
    assert_eq!(retry_reasons(&ev), vec!["timeout"]);
    assert_eq!(of_type(&ev, "model.attempt_reset").len(), 1);
    assert_eq!(finished(&ev)["output"], "Hello there world");
}

#[test]
fn a_drop_mid_stream_retries_without_duplicated_text() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let stub = Stub::sequence(vec![
        Reply::sse(text_events("The answer is 42")).cut_after(3, End::Drop),
        chat_sse_text("The answer is 42"),
    ]);
    let (code, ev, _) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(0));
    assert_eq!(stub.count(), 2);
    assert_eq!(retry_reasons(&ev), vec!["network"]);
    let reset = of_type(&ev, "model.attempt_reset");
    assert_eq!(reset.len(), 1);
    assert_eq!(reset[0]["model"], "openai/gpt-5");
    assert_eq!(
        of_type(&ev, "assistant.message")[0]["text"],
        "The answer is 42"
    );
    assert_eq!(finished(&ev)["output"], "The answer is 42");
}

#[test]
fn a_drop_during_tool_call_arguments_resets_too() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let stub = Stub::sequence(vec![
        Reply::sse(tool_call_events(
            "call_1",
            "bash",
            r#"{"command":"touch dropped"}"#,
        ))
        .cut_after(2, End::Drop),
        chat_sse_submit("call_2", "ok"),
    ]);
    let (code, ev, _) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(0));
    assert_eq!(of_type(&ev, "model.attempt_reset").len(), 1);
    assert!(
        !env.work().join("dropped").exists(),
        "a partial call never runs"
    );
}

#[test]
fn a_stream_without_done_retries_as_incomplete() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let mut no_done = text_events("partial");
    no_done.pop();
    let stub = Stub::sequence(vec![Reply::sse(no_done), chat_sse_text("complete")]);
    let (code, ev, _) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(0));
    assert_eq!(stub.count(), 2);
    assert_eq!(retry_reasons(&ev), vec!["stream_incomplete"]);
    assert_eq!(finished(&ev)["output"], "complete");
}

#[test]
fn an_error_inside_the_stream_is_classified_and_retried() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let error = crate::support::openai::data(
        &json!({"error": {"message": "The server had an error while processing your request.", "type": "server_error", "param": null, "code": null}}),
    );
    let stub = Stub::sequence(vec![Reply::sse(vec![error]), chat_sse_text("recovered")]);
    let (code, ev, _) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(0));
    assert_eq!(retry_reasons(&ev), vec!["http_500"]);
    assert_eq!(finished(&ev)["output"], "recovered");
}

#[test]
fn garbled_tool_arguments_are_not_executed_and_use_no_retry() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let stub = Stub::sequence(vec![
        chat_sse_tool_call("call_bad", "bash", r#"{"command": "touch garbled"#),
        chat_sse_submit("call_ok", "gave up"),
    ]);
    let (code, ev, _) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(0));
    assert!(!env.work().join("garbled").exists());
    assert!(of_type(&ev, "provider.retry").is_empty());
    let finished_tool = of_type(&ev, "tool.finished")[0];
    assert_eq!(finished_tool["call_id"], "call_bad");
    assert_eq!(finished_tool["ok"], false);
    // The model is told in a tool message answering that call.
    let messages = stub.requests()[1].json()["messages"].clone();
    let result = messages.as_array().unwrap().last().unwrap().clone();
    assert_eq!(result["role"], "tool");
    assert_eq!(result["tool_call_id"], "call_bad");
    assert!(result["content"]
        .as_str()
        .unwrap()
        .contains("not valid JSON"));
    assert_eq!(
        messages[2]["tool_calls"][0]["function"]["arguments"],
        r#"{"command": "touch garbled"#
    );
}

#[test]
fn a_cut_off_reply_is_length_and_its_calls_do_not_run() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let mut cut = tool_call_events("call_1", "bash", r#"{"command":"touch cut"}"#);
    cut[3] = crate::support::openai::chunk(json!({}), Some("length"));
    let stub = Stub::sequence(vec![Reply::sse(cut), chat_sse_submit("call_2", "ok")]);
    let (code, ev, _) = run(&env, &stub, &["hi"]);
    assert_eq!(code, Some(0));
    assert_eq!(of_type(&ev, "model.response")[0]["finish_reason"], "length");
    assert!(!env.work().join("cut").exists());
}

#[test]
fn the_key_never_appears_in_any_output() {
    let env = TestEnv::new();
    config(&env, 3, false);
    let trajectory = env.file("run.json");
    let stub = Stub::sequence(vec![
        Reply::status(503),
        Reply::sse(text_events("partial answer")).cut_after(2, End::Drop),
        chat_sse_tool_call(
            "call_1",
            "bash",
            r#"{"command":"echo $OPENAI_API_KEY | wc -c"}"#,
        ),
        chat_sse_submit("call_2", "done"),
    ]);
    let traj = trajectory.display().to_string();
    let (code, ev, stderr) = run(&env, &stub, &["-o", &traj, "hi"]);
    assert_eq!(code, Some(0));
    let stdout = serde_json::to_string(&ev).unwrap();
    assert!(!stdout.contains(KEY) && !stdout.contains("Zq8SECRET"));
    assert!(!stderr.contains(KEY));
    let doc = std::fs::read_to_string(&trajectory).unwrap();
    assert!(!doc.contains(KEY));
    assert_eq!(read_json(&trajectory)["status"], "submitted");

    // Human mode, with a fatal error whose message comes from the vendor.
    let stub = Stub::sequence(vec![Reply::json(
        401,
        &json!({"error": {"message": "Incorrect API key provided: sk-test-****7890.", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}),
    )]);
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", KEY)
        .args(["-m", "openai/gpt-5", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("Incorrect API key provided"), "{all}");
    assert!(!all.contains(KEY));
}

/// A named provider's `env_headers` (codex-rs's `env_http_headers`): the
/// header's value is read from a variable, never written in the config; an
/// unset variable sends no header.
#[test]
fn a_named_provider_takes_a_header_from_an_environment_variable() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![chat_sse_text("ok"), chat_sse_text("ok")]);
    env.user_config(&format!(
        "providers:\n  gateway:\n    api: openai\n    endpoint: {}/v1\n    headers: {{X-Team: infra}}\n    env_headers: {{X-Team-Token: TEAM_TOKEN_VAR, X-Unset: NOT_SET_VAR}}\n",
        stub.url()
    ));
    let out = env
        .cmd()
        .env("TEAM_TOKEN_VAR", "team-secret-1")
        .env_remove("NOT_SET_VAR")
        .args(["-m", "gateway/qwen3-coder", "--json", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let request = &stub.requests()[0];
    assert_eq!(request.header("x-team-token"), Some("team-secret-1"));
    assert_eq!(request.header("x-team"), Some("infra"));
    assert_eq!(request.header("x-unset"), None);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("team-secret-1"));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("team-secret-1"));
}
