//! The retry loop's waits and records, on scripted and flaky models.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::events::{Emitter, EventRecord, RequestRecord, Sink};
use crate::health::Health;
use crate::model::gate::Gate;
use crate::model::price::Pricing;
use crate::model::script::ScriptModel;
use crate::model::spec::ModelSpec;
use crate::model::{FinishReason, Model};
use crate::policy::{Cooldown, FallbackPolicy, RetryPolicy};
use crate::stop::Stop;

fn member(spec: &str, model: impl Model + 'static) -> Member {
    Member::new(ModelSpec::parse(spec).unwrap(), Box::new(model), None, None)
}

/// The gate of a lone model: it retries every failure up to
/// `retry.attempts` requests.
fn lone(retry: RetryPolicy) -> Gate {
    let fallback = FallbackPolicy::new(6, Cooldown::Never, retry.attempts);
    let key = member("script/x", ScriptModel::parse("- text: ok\n").unwrap()).health_key;
    Gate::new(vec![key], retry, fallback, Health::off())
}

struct Waits(Arc<Mutex<Vec<f64>>>);
impl Sink for Waits {
    fn handle(&mut self, record: &EventRecord) {
        if let Event::ProviderRetry { wait_seconds, .. } = record.event {
            self.0.lock().unwrap().push(wait_seconds);
        }
    }
}

fn request(spec: &str) -> Request<'_> {
    Request {
        system: "",
        messages: &[],
        tools: &[],
        output_schema: None,
        max_output_tokens: None,
        reasoning_effort: None,
        spec,
        prompt_cache: crate::model::PromptCache::On,
        cache_key: None,
    }
}

/// The `wait_seconds` of each retry of one loop over `script`.
async fn waits_for(script: &str) -> Vec<f64> {
    let waits = Arc::new(Mutex::new(Vec::new()));
    let emitter = Emitter::new("run", vec![Box::new(Waits(waits.clone()))]);
    let stop = Stop::never();
    let ctx = RequestCtx {
        step: 1,
        emitter: &emitter,
        stop: &stop,
    };
    let gate = lone(RetryPolicy {
        backoff: Duration::from_millis(1),
        jitter: 0.0,
        ..RetryPolicy::default()
    });
    let model = member("script/x", ScriptModel::parse(script).unwrap());
    let result = request_with_retries(&model, &request("script/x"), ctx, &gate.turn(0, 0)).await;
    assert!(result.is_ok(), "{result:?}");
    let waits = waits.lock().unwrap().clone();
    waits
}

#[tokio::test]
async fn a_glitch_is_retried_at_once_the_first_time_only() {
    let two = "- error: {kind: stream_incomplete}\n  repeat: 2\n- text: ok\n";
    assert_eq!(waits_for(two).await, vec![0.0, 0.001]);
    let mixed = "- error: {status: 503}\n- error: {kind: stream_incomplete}\n- error: {status: 503}\n- text: ok\n";
    assert_eq!(
        waits_for(mixed).await,
        vec![0.001, 0.0, 0.002],
        "the glitch retried at once does not count in the exponent"
    );
}

#[tokio::test]
async fn an_empty_reply_is_a_glitch_whether_scripted_or_replied() {
    let scripted = "- error: {kind: empty_response}\n- text: ok\n";
    assert_eq!(waits_for(scripted).await, vec![0.0]);
    let blank = "- text: \"\"\n- text: \"  \"\n- text: ok\n";
    assert_eq!(waits_for(blank).await, vec![0.0, 0.001]);
    assert_eq!(
        waits_for("- usage: {input: 5}\n- text: ok\n").await,
        vec![0.0]
    );
}

#[tokio::test]
async fn a_cut_off_reply_is_not_empty() {
    assert!(waits_for("- finish: length\n").await.is_empty());
}

#[tokio::test]
async fn overload_and_connection_failures_always_back_off() {
    let script =
        "- error: {kind: network}\n- error: {kind: timeout}\n- error: {status: 429}\n- text: ok\n";
    assert_eq!(waits_for(script).await, vec![0.001, 0.002, 0.004]);
}

struct Records(Arc<Mutex<Vec<(String, RequestRecord)>>>);
impl Sink for Records {
    fn handle(&mut self, _record: &EventRecord) {}
    fn model_request(&mut self, run_id: &str, _parent: Option<&str>, record: &RequestRecord) {
        self.0
            .lock()
            .unwrap()
            .push((run_id.to_string(), record.clone()));
    }
}

/// Fails with HTTP 503 `failures` times, then answers.
struct Flaky(std::sync::atomic::AtomicU32, u32);
#[async_trait::async_trait]
impl Model for Flaky {
    async fn complete(
        &self,
        _request: &Request<'_>,
        _observer: &dyn StreamObserver,
    ) -> Result<Response, ModelError> {
        if self.0.fetch_add(1, Ordering::Relaxed) < self.1 {
            return Err(ModelError::Status {
                status: 503,
                message: "busy".into(),
                retry_after: None,
            });
        }
        crate::model::watch::note_first_event();
        Ok(Response {
            text: "hi".into(),
            tool_calls: vec![],
            usage: crate::model::Usage {
                input_tokens: 1_000_000,
                output_tokens: 500_000,
                ..Default::default()
            },
            finish: FinishReason::Stop,
            extra: None,
            cost_override: None,
            model: None,
            usage_reported: true,
        })
    }
}

#[tokio::test]
async fn every_attempt_is_recorded_with_its_outcome_and_cost() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let emitter = Emitter::new("r1", vec![Box::new(Records(seen.clone()))]);
    let stop = Stop::never();
    let ctx = RequestCtx {
        step: 4,
        emitter: &emitter,
        stop: &stop,
    };
    let mut flaky = member("gw/m", Flaky(Default::default(), 2))
        .with_endpoint(Some("http://127.0.0.1:9".into()));
    flaky.pricing = Some(Pricing {
        input: 2.0,
        output: 10.0,
        cached_input: 0.5,
        cache_write: 2.0,
    });
    let gate = lone(RetryPolicy {
        backoff: Duration::ZERO,
        jitter: 0.0,
        ..RetryPolicy::default()
    });
    let response = request_with_retries(&flaky, &request("gw/m"), ctx, &gate.turn(0, 0)).await;
    assert!(response.is_ok());
    let seen = seen.lock().unwrap();
    let rows: Vec<(u32, String, Option<u16>, bool)> = seen
        .iter()
        .map(|(_, r)| {
            (
                r.attempt,
                r.outcome.to_string(),
                r.http_status,
                r.first_event_ms.is_some(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (1, "http_503".to_string(), Some(503), false),
            (2, "http_503".to_string(), Some(503), false),
            (3, "ok".to_string(), Some(200), true)
        ]
    );
    let (run_id, last) = &seen[2];
    assert_eq!(run_id, "r1");
    assert_eq!((last.step, last.model.as_str()), (4, "gw/m"));
    assert_eq!(last.provider, "gw");
    assert_eq!(last.endpoint.as_deref(), Some("http://127.0.0.1:9"));
    assert_eq!(
        (last.input_tokens, last.output_tokens),
        (1_000_000, 500_000)
    );
    assert!((last.cost_usd - 7.0).abs() < 1e-9, "{}", last.cost_usd);
    assert!(last.started_at.ends_with('Z'), "{}", last.started_at);
}
