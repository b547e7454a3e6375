//! Rate limits get a budget of their own (SPEC 4): a 429 or an overload is
//! tried up to `retry.rate_limit_attempts` times while the step's waits on
//! them stay within `retry.rate_limit_budget`; other transient failures
//! stop after `attempts`.

use serde_json::Value;

use crate::support::openai::chat_sse_text;
use crate::support::stub::{Reply, Stub};
use crate::support::{events, finished, of_type, TestEnv};

/// A JSON run of `openai/gpt-5` (no chain) against `stub` under `retry`.
fn run(stub: &Stub, retry: &str) -> (Option<i32>, Vec<Value>) {
    let env = TestEnv::new();
    env.user_config(&format!("retry: {retry}\nhealth_db: off\n"));
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", "sk-test-rate-limits")
        .args(["-m", "openai/gpt-5", "--json", "go"])
        .output()
        .unwrap();
    (out.status.code(), events(&out.stdout))
}

/// `n` replies of `status`, then a text answer.
fn failing(status: u16, n: usize) -> Stub {
    let mut replies = vec![Reply::status(status); n];
    replies.push(chat_sse_text("through"));
    Stub::sequence(replies)
}

#[test]
fn a_rate_limit_storm_outlasts_attempts() {
    let stub = failing(429, 7);
    let (code, ev) = run(&stub, "{attempts: 2, backoff: 10ms, jitter: 0}");
    assert_eq!(code, Some(0), "{ev:?}");
    assert_eq!(finished(&ev)["output"], "through");
    assert_eq!(stub.count(), 8, "eight tries by default");
    assert_eq!(of_type(&ev, "provider.retry").len(), 7);
}

#[test]
fn an_overload_gets_the_same_budget_and_a_503_does_not() {
    let stub = failing(529, 5);
    let (code, _) = run(&stub, "{attempts: 2, backoff: 10ms, jitter: 0}");
    assert_eq!(code, Some(0));
    let stub = failing(503, 5);
    let (code, ev) = run(&stub, "{attempts: 2, backoff: 10ms, jitter: 0}");
    assert_eq!(code, Some(75), "{ev:?}");
    assert_eq!(stub.count(), 2);
}

#[test]
fn rate_limit_attempts_sets_the_tries() {
    let stub = failing(429, 7);
    let (code, _) = run(
        &stub,
        "{attempts: 2, rate_limit_attempts: 4, backoff: 10ms, jitter: 0}",
    );
    assert_eq!(code, Some(75));
    assert_eq!(stub.count(), 4);
    // Never fewer than attempts.
    let stub = failing(429, 7);
    let (code, _) = run(
        &stub,
        "{attempts: 3, rate_limit_attempts: 1, backoff: 10ms, jitter: 0}",
    );
    assert_eq!(code, Some(75));
    assert_eq!(stub.count(), 3);
}

#[test]
fn the_tries_past_attempts_stop_at_the_budget() {
    // Waits of 100, 200, 400 ms: the third try (past attempts: 2) waits
    // 200 ms more (300 in all, within 350 ms); a fourth would pass it.
    let stub = failing(429, 7);
    let (code, ev) = run(
        &stub,
        "{attempts: 2, rate_limit_budget: 350ms, backoff: 100ms, jitter: 0}",
    );
    assert_eq!(code, Some(75), "{ev:?}");
    assert_eq!(stub.count(), 3);
}
