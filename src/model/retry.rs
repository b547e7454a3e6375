//! The retry loop: one per model request and member. The only place that
//! decides whether to wait and ask the same model again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use super::http::watch_first_event;
use super::price::Pricing;
use super::{ErrorClass, Model, ModelError, Request, Response, StreamObserver};
use crate::events::{Emitter, Event, RequestRecord};
pub use crate::policy::{AttemptHook, RetryPolicy};
use crate::stop::{Stop, StopCause};

/// What a wait after a failure should be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Wait {
    /// Wait this long, then retry.
    For(Duration),
    /// The server asked for more than `max_backoff`: a chain moves on at once.
    TooLong,
}

impl RetryPolicy {
    /// The wait after the `failed`-th failure (counted from 1):
    /// `backoff * 2^(failed-1)` plus up to `jitter` of it, capped at
    /// `max_backoff`, with the server's Retry-After as a floor. `random` is in
    /// `[0, 1)`. With `can_switch`, a Retry-After beyond the cap is not
    /// waited out.
    pub fn wait_after(
        &self,
        failed: u32,
        retry_after: Option<Duration>,
        random: f64,
        can_switch: bool,
    ) -> Wait {
        let base = self
            .backoff
            .saturating_mul(1u32 << (failed.saturating_sub(1)).min(20));
        let jittered = base.mul_f64(1.0 + self.jitter.max(0.0) * random);
        let mut wait = jittered.min(self.max_backoff);
        if let Some(floor) = retry_after {
            if floor > self.max_backoff {
                if can_switch {
                    return Wait::TooLong;
                }
                wait = self.max_backoff;
            } else {
                wait = wait.max(floor);
            }
        }
        Wait::For(wait)
    }
}

/// Where a request happens: its step, the event emitter and the run's stop
/// signal.
#[derive(Clone, Copy)]
pub struct RequestCtx<'a> {
    pub step: u32,
    pub emitter: &'a Emitter,
    pub stop: &'a Stop,
}

/// How many requests this call may make, and whether a chain member waits
/// behind it.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub max_attempts: u32,
    /// A later chain member exists: a Retry-After beyond the cap gives up now.
    pub can_switch: bool,
}

/// The model a retry loop asks, with what its per-request records need.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub model: &'a dyn Model,
    pub pricing: Option<Pricing>,
    /// `scheme://host:port` of the model's endpoint (`None` for scripts).
    pub endpoint: Option<&'a str>,
}

/// Why a retry loop gave up.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The model's last error, after `attempts` requests.
    Model { error: ModelError, attempts: u32 },
    /// A cancel or limit fired during a request or a wait.
    Stopped(StopCause),
    /// The hook said to skip the model (another run recorded it as cooling
    /// down) before a request; `attempts` requests were made before that.
    Cooling { attempts: u32 },
}

/// Forwards text to the emitter and remembers whether any output arrived,
/// so a failed attempt that showed something can be announced as reset.
struct AttemptObserver<'a> {
    ctx: RequestCtx<'a>,
    produced: AtomicBool,
}

impl StreamObserver for AttemptObserver<'_> {
    fn text_delta(&self, text: &str) {
        self.produced.store(true, Ordering::Relaxed);
        self.ctx.emitter.text_delta(self.ctx.step, text);
    }
    fn tool_call_delta(&self) {
        self.produced.store(true, Ordering::Relaxed);
    }
}

/// Sends `request` to `model` until it succeeds, fails for a reason that
/// waiting won't fix, `hook` says to stop, or `budget` runs out; `hook` is
/// consulted before each request and told of each outcome. Emits
/// `provider.retry` for each scheduled retry and `model.attempt_reset` when
/// a failed attempt had streamed output. The request is raced against
/// `ctx.stop`.
pub async fn request_with_retries_gated(
    target: Target<'_>,
    request: &Request<'_>,
    ctx: RequestCtx<'_>,
    policy: &RetryPolicy,
    budget: Budget,
    hook: &dyn AttemptHook,
) -> Result<Response, Failure> {
    let mut attempt = 1;
    loop {
        if let Some(cause) = ctx.stop.pending() {
            return Err(Failure::Stopped(cause));
        }
        if hook.skip() {
            return Err(Failure::Cooling {
                attempts: attempt - 1,
            });
        }
        let observer = AttemptObserver {
            ctx,
            produced: AtomicBool::new(false),
        };
        let record = RecordStart::now(target, request, ctx, attempt);
        let result = tokio::select! {
            (result, first) = watch_first_event(target.model.complete(request, &observer)) => {
                record.finish(first, Some(&result));
                result
            }
            cause = ctx.stop.fired() => {
                record.finish(None, None);
                return Err(Failure::Stopped(cause));
            }
        };
        let error = match result {
            Ok(response) => {
                hook.succeeded();
                return Ok(response);
            }
            Err(error) => error,
        };
        if observer.produced.load(Ordering::Relaxed) {
            ctx.emitter.emit(Event::AttemptReset {
                step: ctx.step,
                model: request.spec.to_string(),
            });
        }
        let ErrorClass::Transient(reason) = error.class() else {
            return Err(Failure::Model {
                error,
                attempts: attempt,
            });
        };
        let give_up = hook.failed(&reason);
        if attempt >= budget.max_attempts || give_up {
            return Err(Failure::Model {
                error,
                attempts: attempt,
            });
        }
        let wait = match policy.wait_after(
            attempt,
            error.retry_after(),
            fastrand::f64(),
            budget.can_switch,
        ) {
            Wait::For(wait) => wait,
            Wait::TooLong => {
                return Err(Failure::Model {
                    error,
                    attempts: attempt,
                })
            }
        };
        if hook.skip() {
            return Err(Failure::Cooling { attempts: attempt });
        }
        ctx.emitter.emit(Event::ProviderRetry {
            step: ctx.step,
            model: request.spec.to_string(),
            attempt,
            next_attempt: attempt + 1,
            wait_seconds: (wait.as_secs_f64() * 1000.0).round() / 1000.0,
            reason,
        });
        if let Err(cause) = ctx.stop.sleep(wait).await {
            return Err(Failure::Stopped(cause));
        }
        attempt += 1;
    }
}

/// A request as it was sent, for its `RequestRecord`.
struct RecordStart<'a> {
    target: Target<'a>,
    spec: &'a str,
    ctx: RequestCtx<'a>,
    attempt: u32,
    started: Instant,
    started_at: SystemTime,
}

impl<'a> RecordStart<'a> {
    fn now(target: Target<'a>, request: &Request<'a>, ctx: RequestCtx<'a>, attempt: u32) -> Self {
        RecordStart {
            target,
            spec: request.spec,
            ctx,
            attempt,
            started: Instant::now(),
            started_at: SystemTime::now(),
        }
    }

    /// Emits the record of this request. A request cut short by a cancel or
    /// limit (`result` is `None`) has outcome `interrupted`.
    fn finish(self, first: Option<Instant>, result: Option<&Result<Response, ModelError>>) {
        let ms = |d: Duration| d.as_millis().min(u64::MAX as u128) as u64;
        let (outcome, http_status, input_tokens, output_tokens, cost_usd) = match result {
            Some(Ok(response)) => {
                let cost = response.cost_override.unwrap_or_else(|| {
                    self.target
                        .pricing
                        .map(|p| p.cost(&response.usage))
                        .unwrap_or(0.0)
                });
                let usage = &response.usage;
                (
                    "ok".to_string(),
                    None,
                    usage.input_tokens,
                    usage.output_tokens,
                    cost,
                )
            }
            None => ("interrupted".to_string(), None, 0, 0, 0.0),
            Some(Err(error)) => {
                let status = match error {
                    ModelError::Status { status, .. } | ModelError::Quota { status, .. } => {
                        Some(*status)
                    }
                    _ => None,
                };
                (error.reason(), status, 0, 0, 0.0)
            }
        };
        self.ctx.emitter.model_request(RequestRecord {
            step: self.ctx.step,
            model: self.spec.to_string(),
            provider: self.spec.split('/').next().unwrap_or_default().to_string(),
            endpoint: self.target.endpoint.map(str::to_string),
            attempt: self.attempt,
            started_at: humantime::format_rfc3339_millis(self.started_at).to_string(),
            first_event_ms: first.map(|t| ms(t.saturating_duration_since(self.started))),
            duration_ms: ms(self.started.elapsed()),
            outcome,
            http_status,
            input_tokens,
            output_tokens,
            cost_usd,
            response_model: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{EventRecord, Sink};
    use crate::model::{FinishReason, Usage};
    use std::sync::{Arc, Mutex};

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
            crate::model::http::note_first_event();
            Ok(Response {
                text: "hi".into(),
                tool_calls: vec![],
                usage: Usage {
                    input_tokens: 1_000_000,
                    output_tokens: 500_000,
                    cached_input_tokens: 0,
                },
                finish: FinishReason::Stop,
                extra: None,
                cost_override: None,
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
        let model = Flaky(Default::default(), 2);
        let target = Target {
            model: &model,
            pricing: Some(Pricing {
                input: 2.0,
                output: 10.0,
                cached_input: 0.5,
            }),
            endpoint: Some("http://127.0.0.1:9"),
        };
        let request = Request {
            system: "",
            messages: &[],
            tools: &[],
            output_schema: None,
            max_output_tokens: None,
            reasoning_effort: None,
            spec: "gw/m",
        };
        let policy = RetryPolicy {
            backoff: Duration::ZERO,
            jitter: 0.0,
            ..RetryPolicy::default()
        };
        let budget = Budget {
            max_attempts: 6,
            can_switch: false,
        };
        struct NoHook;
        impl AttemptHook for NoHook {}
        let response =
            request_with_retries_gated(target, &request, ctx, &policy, budget, &NoHook).await;
        assert!(response.is_ok());
        let seen = seen.lock().unwrap();
        let rows: Vec<(u32, &str, Option<u16>, bool)> = seen
            .iter()
            .map(|(_, r)| {
                (
                    r.attempt,
                    r.outcome.as_str(),
                    r.http_status,
                    r.first_event_ms.is_some(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (1, "http_503", Some(503), false),
                (2, "http_503", Some(503), false),
                (3, "ok", None, true)
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

    fn policy() -> RetryPolicy {
        RetryPolicy {
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            jitter: 0.5,
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn backoff_doubles_from_the_first_wait() {
        let p = policy();
        assert_eq!(
            p.wait_after(1, None, 0.0, false),
            Wait::For(Duration::from_secs(1))
        );
        assert_eq!(
            p.wait_after(2, None, 0.0, false),
            Wait::For(Duration::from_secs(2))
        );
        assert_eq!(
            p.wait_after(5, None, 0.0, false),
            Wait::For(Duration::from_secs(16))
        );
    }

    #[test]
    fn jitter_adds_up_to_its_fraction() {
        let p = policy();
        assert_eq!(
            p.wait_after(2, None, 0.999_999_999, false),
            Wait::For(Duration::from_secs(2).mul_f64(1.0 + 0.5 * 0.999_999_999))
        );
    }

    #[test]
    fn capped_at_max_backoff() {
        let p = policy();
        assert_eq!(
            p.wait_after(10, None, 0.9, false),
            Wait::For(Duration::from_secs(60))
        );
    }

    #[test]
    fn retry_after_is_a_floor() {
        let p = policy();
        assert_eq!(
            p.wait_after(1, Some(Duration::from_secs(7)), 0.0, false),
            Wait::For(Duration::from_secs(7))
        );
        assert_eq!(
            p.wait_after(5, Some(Duration::from_secs(3)), 0.0, false),
            Wait::For(Duration::from_secs(16))
        );
    }

    #[test]
    fn long_retry_after_switches_with_a_chain_and_caps_without() {
        let p = policy();
        let long = Some(Duration::from_secs(3600));
        assert_eq!(p.wait_after(1, long, 0.0, true), Wait::TooLong);
        assert_eq!(
            p.wait_after(1, long, 0.0, false),
            Wait::For(Duration::from_secs(60))
        );
    }
}
