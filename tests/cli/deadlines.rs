//! First-event deadlines that fit the request (SPEC 4 "Deadlines that fit
//! the request"): grown with the request's size, doubled on each retry,
//! remembered for a slow server, and named when they run out. A loopback
//! stub holds back its response headers to play a server slow to start.

use std::time::Duration;

use serde_json::Value;

use crate::support::openai::{chat_sse_submit, chat_sse_text, chat_sse_tool_call};
use crate::support::stub::{Reply, Stub};
use crate::support::{events, finished, of_type, TestEnv};

/// A JSON run of `openai/gpt-5` against `stub` under `retry` (the user
/// config's `retry:` block), with `task` as its task.
fn run(stub: &Stub, retry: &str, task: &str) -> (Option<i32>, Vec<Value>, String) {
    let env = TestEnv::new();
    env.user_config(&format!("retry: {retry}\nhealth_db: off\n"));
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", "sk-test-deadlines")
        .args(["-m", "openai/gpt-5", "--json", task])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    (out.status.code(), events(&out.stdout), stderr)
}

/// The deadline a request of this test's size gets beyond the configured
/// one: the system prompt and the tools' schemas are a few thousand tokens.
const PROMPT_GROWTH: f64 = 0.15;

/// Whether `deadline` is `configured` grown for a short request.
fn about(deadline: Option<f64>, configured: f64) -> bool {
    deadline.is_some_and(|d| d >= configured && d < configured + PROMPT_GROWTH)
}

/// `(reason, deadline_seconds)` of each `provider.retry`.
fn retries(ev: &[Value]) -> Vec<(String, Option<f64>)> {
    of_type(ev, "provider.retry")
        .iter()
        .map(|e| {
            (
                e["reason"].as_str().unwrap().to_string(),
                e["deadline_seconds"].as_f64(),
            )
        })
        .collect()
}

#[test]
fn a_slow_server_gets_through_on_a_retry_and_is_then_given_the_longer_deadline() {
    // Every reply takes 1.5 times the configured first-event deadline to
    // start. The first request times out at 0.4 s; its retry gets 0.8 s and
    // succeeds; every later step starts with 0.8 s: one timeout in the run,
    // not one per step.
    let delay = Duration::from_millis(600);
    let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = requests.clone();
    let mut replies: Vec<Reply> = (0..4)
        .map(|i| chat_sse_tool_call(&format!("c{i}"), "bash", r#"{"command":"true"}"#))
        .collect();
    replies.push(chat_sse_submit("c9", "done"));
    // The first request is the one that times out; the stub moves on to
    // the next reply only once a request was answered in time.
    let stub = Stub::start(move |i, _| {
        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let step = i.saturating_sub(1);
        replies[step.min(replies.len() - 1)].clone().delay(delay)
    });
    let retry = "{stream_first_event_timeout: 400ms, backoff: 10ms, jitter: 0}";
    let (code, ev, stderr) = run(&stub, retry, "go");
    assert_eq!(code, Some(0), "{ev:?}\n{stderr}");
    assert_eq!(finished(&ev)["status"], "submitted");
    assert_eq!(finished(&ev)["steps"], 5);
    let retries = retries(&ev);
    assert_eq!(
        retries.len(),
        1,
        "one timeout in the whole run: {retries:?}"
    );
    assert_eq!(retries[0].0, "timeout");
    assert!(about(retries[0].1, 0.4), "{retries:?}");
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 6);
}

#[test]
fn the_retry_line_names_the_deadline_that_ran_out() {
    let stub = Stub::sequence(vec![chat_sse_text("late").delay(Duration::from_millis(600))]);
    let env = TestEnv::new();
    env.user_config(
        "retry: {stream_first_event_timeout: 400ms, backoff: 10ms, jitter: 0}\nhealth_db: off\n",
    );
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", "sk-test-deadlines")
        .args(["-m", "openai/gpt-5", "go"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("retrying openai/gpt-5 in 0.0s (timeout after 0.4"),
        "{stderr}"
    );
}

#[test]
fn without_room_to_double_every_try_times_out_at_its_own_deadline() {
    // The idle limit caps the doubling: about 0.3 s, then 0.5 s (not 0.6 s).
    let stub = Stub::sequence(vec![chat_sse_text("late").delay(Duration::from_millis(900))]);
    let retry = "{attempts: 2, stream_first_event_timeout: 300ms, stream_idle_timeout: 500ms, backoff: 10ms, jitter: 0}";
    let (code, ev, stderr) = run(&stub, retry, "go");
    assert_eq!(code, Some(75), "{ev:?}\n{stderr}");
    let retries = retries(&ev);
    assert_eq!(retries.len(), 1);
    assert!(about(retries[0].1, 0.3), "{retries:?}");
    assert_eq!(stub.count(), 2);
    let error = finished(&ev)["error"].as_str().unwrap().to_string();
    assert!(error.contains("timeout"), "{error}");
}

#[test]
fn a_long_prompt_gets_a_longer_first_deadline() {
    // About 15K tokens of task: 0.3 s + 10 s per 100K tokens is 1.8 s, so a
    // server that needs 0.9 s to start on it answers the first request.
    let task = "word ".repeat(12_000);
    let stub = Stub::sequence(vec![
        chat_sse_text("read it").delay(Duration::from_millis(900))
    ]);
    let retry = "{stream_first_event_timeout: 300ms, backoff: 10ms, jitter: 0}";
    let (code, ev, stderr) = run(&stub, retry, &task);
    assert_eq!(code, Some(0), "{ev:?}\n{stderr}");
    assert!(retries(&ev).is_empty(), "{:?}", retries(&ev));
    assert_eq!(stub.count(), 1);

    // The same server with a short task times out first.
    let stub = Stub::sequence(vec![
        chat_sse_text("read it").delay(Duration::from_millis(900))
    ]);
    let (code, ev, _) = run(&stub, retry, "short");
    assert_eq!(code, Some(0));
    let retries = retries(&ev);
    assert_eq!(retries[0].0, "timeout");
    assert!(about(retries[0].1, 0.3), "{retries:?}");
}

#[test]
fn other_failures_carry_no_deadline() {
    let stub = Stub::sequence(vec![Reply::status(503), chat_sse_text("hi")]);
    let (code, ev, _) = run(&stub, "{backoff: 10ms, jitter: 0}", "go");
    assert_eq!(code, Some(0));
    let retry = of_type(&ev, "provider.retry")[0].clone();
    assert!(retry.get("deadline_seconds").is_none(), "{retry}");
}
