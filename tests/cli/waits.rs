//! How long the retry loop waits (SPEC 4 "Waits"), measured where it shows:
//! the gaps between requests at a loopback stub, and `wait_seconds` on
//! `provider.retry`. Bounds are generous: each test sets a backoff far from
//! the wait it expects, so a loaded machine cannot blur the two.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::openai::{chat_sse_text, text_events};
use crate::support::stub::{End, Reply, Stub};
use crate::support::{events, finished, of_type, TestEnv};

/// A JSON run of `openai/gpt-5` against `stub` with `retry` as the user
/// config's `retry:` block (none: the defaults).
fn run(stub: &Stub, retry: Option<&str>) -> Vec<Value> {
    let env = TestEnv::new();
    let health = "health_db: off\n";
    match retry {
        Some(retry) => env.user_config(&format!("retry: {retry}\n{health}")),
        None => env.user_config(health),
    };
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", "sk-test-waits")
        .args(["-m", "openai/gpt-5", "--json", "say hi"])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{ev:?}");
    assert_eq!(finished(&ev)["status"], "completed");
    ev
}

/// `(reason, wait_seconds)` of each `provider.retry`.
fn retries(ev: &[Value]) -> Vec<(String, f64)> {
    of_type(ev, "provider.retry")
        .iter()
        .map(|e| {
            (
                e["reason"].as_str().unwrap().to_string(),
                e["wait_seconds"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// A reply whose stream is cut after its first chunk (after the 200).
fn dropped() -> Reply {
    chat_sse_text("never finished").cut_after(1, End::Drop)
}

#[test]
fn a_stream_dropped_mid_reply_is_retried_at_once() {
    let stub = Stub::sequence(vec![dropped(), chat_sse_text("hi")]);
    let ev = run(&stub, Some("{backoff: 10s, jitter: 0}"));
    assert_eq!(retries(&ev), vec![("network".to_string(), 0.0)]);
    let gaps = stub.gaps();
    assert_eq!(gaps.len(), 1);
    assert!(gaps[0] < secs(5.0), "no 10 s backoff: {gaps:?}");
}

#[test]
fn a_stream_without_its_finish_marker_is_retried_at_once() {
    let mut events = text_events("no done");
    events.pop();
    let stub = Stub::sequence(vec![Reply::sse(events), chat_sse_text("hi")]);
    let ev = run(&stub, Some("{backoff: 10s, jitter: 0}"));
    assert_eq!(retries(&ev), vec![("stream_incomplete".to_string(), 0.0)]);
    assert!(stub.gaps()[0] < secs(5.0), "{:?}", stub.gaps());
}

#[test]
fn a_second_glitch_backs_off() {
    let stub = Stub::sequence(vec![dropped(), dropped(), chat_sse_text("hi")]);
    let ev = run(&stub, Some("{backoff: 400ms, jitter: 0}"));
    assert_eq!(
        retries(&ev),
        vec![("network".to_string(), 0.0), ("network".to_string(), 0.4)]
    );
    let gaps = stub.gaps();
    assert!(gaps[1] >= secs(0.4), "the second glitch waits: {gaps:?}");
}

#[test]
fn an_overloaded_server_is_backed_off_from() {
    let stub = Stub::sequence(vec![Reply::status(503), chat_sse_text("hi")]);
    let ev = run(&stub, Some("{backoff: 400ms, jitter: 0}"));
    assert_eq!(retries(&ev), vec![("http_503".to_string(), 0.4)]);
    assert!(stub.gaps()[0] >= secs(0.4), "{:?}", stub.gaps());
}

#[test]
fn retry_after_is_the_wait_exactly_not_a_floor() {
    // A 10 s backoff would dwarf the 1 s the server asked for.
    let stub = Stub::sequence(vec![
        Reply::status(503).header("retry-after", "1"),
        chat_sse_text("hi"),
    ]);
    let ev = run(&stub, Some("{backoff: 10s, jitter: 0.5}"));
    assert_eq!(retries(&ev), vec![("http_503".to_string(), 1.0)]);
    let gap = stub.gaps()[0];
    assert!(gap >= secs(1.0) && gap < secs(6.0), "about 1 s: {gap:?}");
}

#[test]
fn a_retry_after_in_the_body_is_the_wait_too() {
    let body =
        json!({"error": {"message": "slow down", "type": "rate_limit_error"}, "retry_after": 1});
    let stub = Stub::sequence(vec![Reply::json(429, &body), chat_sse_text("hi")]);
    let ev = run(&stub, Some("{backoff: 10s, jitter: 0}"));
    assert_eq!(retries(&ev), vec![("http_429".to_string(), 1.0)]);
    let gap = stub.gaps()[0];
    assert!(gap >= secs(1.0) && gap < secs(6.0), "about 1 s: {gap:?}");
}

#[test]
fn the_default_backoff_is_half_a_second() {
    let stub = Stub::sequence(vec![Reply::status(500), chat_sse_text("hi")]);
    let ev = run(&stub, None);
    let waits = retries(&ev);
    assert_eq!(waits.len(), 1);
    // 500 ms plus up to half of it in jitter.
    assert!((0.5..=0.75).contains(&waits[0].1), "{waits:?}");
    assert!(stub.gaps()[0] >= secs(0.5));
}

#[test]
fn a_refused_connection_backs_off() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let env = TestEnv::new();
    env.user_config("retry: {attempts: 2, backoff: 300ms, jitter: 0}\nhealth_db: off\n");
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("http://127.0.0.1:{port}/v1"))
        .env("OPENAI_API_KEY", "sk-test-waits")
        .args(["-m", "openai/gpt-5", "--json", "say hi"])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert_eq!(retries(&ev), vec![("network".to_string(), 0.3)]);
}

/// A well-formed stream that finishes (`stop`, usage, `[DONE]`) with no text
/// and no tool calls, as a gateway sends when it hides an upstream failure.
fn empty_stream() -> Reply {
    use crate::support::openai::{chunk, done, usage_chunk};
    Reply::sse(vec![
        chunk(
            json!({"role": "assistant", "content": "", "refusal": null}),
            None,
        ),
        chunk(json!({}), Some("stop")),
        usage_chunk(50, 0, 0),
        done(),
    ])
}

#[test]
fn an_empty_reply_is_retried_at_once_and_never_the_answer() {
    let stub = Stub::sequence(vec![empty_stream(), chat_sse_text("the real answer")]);
    let ev = run(&stub, Some("{backoff: 10s, jitter: 0}"));
    assert_eq!(retries(&ev), vec![("empty_response".to_string(), 0.0)]);
    assert_eq!(finished(&ev)["output"], "the real answer");
    assert_eq!(
        of_type(&ev, "model.response").len(),
        1,
        "the empty one is no response"
    );
    assert!(stub.gaps()[0] < secs(5.0), "{:?}", stub.gaps());
}

#[test]
fn empty_replies_count_toward_switch_after() {
    let env = TestEnv::new();
    env.user_config("retry: {attempts: 3, backoff: 1ms, jitter: 0}\nhealth_db: off\n");
    let fallback = env.script("fallback.yaml", "- text: from the fallback\n");
    let stub = Stub::sequence(vec![empty_stream()]);
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", "sk-test-waits")
        .args([
            "-m",
            "openai/gpt-5",
            "--fallback-model",
            &fallback,
            "--json",
            "hi",
        ])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{ev:?}");
    let switch = of_type(&ev, "model.fallback")[0];
    assert_eq!(switch["reason"], "empty_response");
    assert_eq!(switch["attempts"], 3);
    assert_eq!(stub.count(), 3);
    assert_eq!(finished(&ev)["output"], "from the fallback");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "model fallback: openai/gpt-5 -> {fallback} (empty_response) at step 1"
        )),
        "{stderr}"
    );
}

#[test]
fn a_scripted_reply_with_neither_text_nor_tool_calls_is_empty() {
    let env = TestEnv::new();
    env.user_config("retry: {backoff: 1ms, jitter: 0}\nhealth_db: off\n");
    let model = env.script(
        "s.yaml",
        "- usage: {input: 10, output: 0}\n- error: {kind: empty_response}\n- text: at last\n",
    );
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "hi"])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{ev:?}");
    // The first empty reply is retried at once, the second backs off.
    assert_eq!(
        retries(&ev),
        vec![
            ("empty_response".to_string(), 0.0),
            ("empty_response".to_string(), 0.001)
        ]
    );
    assert_eq!(finished(&ev)["output"], "at last");
}
