//! The retry loop: one per model request and member. It sends the request,
//! classifies a failure, works out the wait and asks the same model again.
//! It decides nothing about the chain: after each failure, and before each
//! request, it reports what happened to a `Referee` (the chain's rules in
//! `chain.rs`), which says whether to go on, give up or skip the member.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use super::http::watch_first_event;
use super::price::Pricing;
use super::{ErrorClass, FinishReason, Model, ModelError, Request, Response, StreamObserver};
use crate::events::{Emitter, Event, RequestRecord};
pub(crate) use crate::policy::RetryPolicy;
use crate::stop::{Stop, StopCause};

/// The wait before a retry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Wait {
    /// Wait this long, then retry.
    For(Duration),
    /// The server asked for a wait longer than `max_backoff`. If the referee
    /// says to go on anyway, the loop waits `max_backoff`.
    TooLong,
}

impl RetryPolicy {
    /// The wait after a failure that backs off, the `n`-th of the loop to
    /// do so (counted from 1): the server's Retry-After exactly, when it
    /// sent one (beyond `max_backoff` it is `Wait::TooLong`); else
    /// `backoff * 2^(n-1)` plus up to `jitter` of it, capped at
    /// `max_backoff`. `random` is in `[0, 1)`.
    pub fn wait_after(&self, n: u32, retry_after: Option<Duration>, random: f64) -> Wait {
        match retry_after {
            Some(asked) if asked > self.max_backoff => Wait::TooLong,
            Some(asked) => Wait::For(asked),
            None => {
                let base = self
                    .backoff
                    .saturating_mul(1u32 << (n.saturating_sub(1)).min(20));
                let jittered = base.mul_f64(1.0 + self.jitter.max(0.0) * random);
                Wait::For(jittered.min(self.max_backoff))
            }
        }
    }
}

/// Where a request happens: its step, the event emitter and the run's stop
/// signal.
#[derive(Clone, Copy)]
pub(crate) struct RequestCtx<'a> {
    pub step: u32,
    pub emitter: &'a Emitter,
    pub stop: &'a Stop,
}

/// A failed attempt with a transient cause, as the loop reports it.
#[derive(Debug)]
pub(crate) struct Failed<'a> {
    /// The attempt that failed, counted from 1.
    pub attempt: u32,
    /// The failure reason (`http_503`, `network`, ...).
    pub reason: &'a str,
    /// The server asked for a wait longer than `max_backoff`.
    pub wait_too_long: bool,
}

/// What the referee says after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Wait, then ask the same model again.
    Retry,
    /// Stop here with this failure (`Failure::Model`).
    GiveUp,
    /// Stop here without a retry (`Failure::Skipped`).
    Skip,
}

/// The rules one retry loop runs under, told every fact the loop learns.
/// The chain's rules (`chain::Rules`) are the one implementation.
pub(crate) trait Referee: Sync {
    /// Before each request (the first included): `true` ends the loop with
    /// `Failure::Skipped` before the request is sent.
    fn skip(&self) -> bool;
    /// After each failure with a transient cause.
    fn after_failure(&self, failed: &Failed<'_>) -> Verdict;
    /// After a successful request.
    fn succeeded(&self);
}

/// Why a retry loop ended without a reply.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Failure {
    /// The model's last error, after `attempts` requests: a cause that is
    /// not transient, or a transient one the referee gave up on.
    Model { error: ModelError, attempts: u32 },
    /// A cancel or limit fired during a request or a wait.
    Stopped(StopCause),
    /// The referee skipped the member after `attempts` requests.
    Skipped { attempts: u32 },
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

/// A reply that finished properly but holds no text and no tool calls is
/// no answer: failure `empty_response` (SPEC 4 "Empty reply"), retried like
/// a glitch. A cut-off reply (`length`) is left to the truncation rule.
fn not_empty(response: Response) -> Result<Response, ModelError> {
    let empty = response.text.trim().is_empty()
        && response.tool_calls.is_empty()
        && response.finish != FinishReason::Length;
    if empty {
        Err(ModelError::EmptyResponse)
    } else {
        Ok(response)
    }
}

/// Sends `request` to `model` until it succeeds, fails for a cause that is
/// not transient, or `referee` ends the loop. Emits `provider.retry` for each
/// scheduled retry and `model.attempt_reset` when a failed attempt had
/// streamed output. Requests and waits are raced against `ctx.stop`.
pub(crate) async fn request_with_retries(
    target: Target<'_>,
    request: &Request<'_>,
    ctx: RequestCtx<'_>,
    policy: &RetryPolicy,
    referee: &dyn Referee,
) -> Result<Response, Failure> {
    let mut attempt = 1;
    // Whether a glitch was already retried at once in this loop.
    let mut glitch_retried = false;
    loop {
        if let Some(cause) = ctx.stop.pending() {
            return Err(Failure::Stopped(cause));
        }
        if referee.skip() {
            return Err(Failure::Skipped {
                attempts: attempt - 1,
            });
        }
        let observer = AttemptObserver {
            ctx,
            produced: AtomicBool::new(false),
        };
        let record = RecordStart::now(target, request, ctx, attempt);
        let (result, first) = tokio::select! {
            sent = watch_first_event(target.model.complete(request, &observer)) => sent,
            cause = ctx.stop.fired() => {
                record.finish(None, None);
                return Err(Failure::Stopped(cause));
            }
        };
        let result = result.and_then(not_empty);
        record.finish(first, Some(&result));
        let error = match result {
            Ok(response) => {
                referee.succeeded();
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
        // A glitch (the server had answered 200) is retried at once, the
        // first time; every other failure, and a second glitch, backs off,
        // the exponent counting only the failures that backed off.
        let wait = if error.after_ok() && !glitch_retried {
            glitch_retried = true;
            Wait::For(Duration::ZERO)
        } else {
            let n = attempt - u32::from(glitch_retried);
            policy.wait_after(n, error.retry_after(), fastrand::f64())
        };
        let failed = Failed {
            attempt,
            reason: &reason,
            wait_too_long: wait == Wait::TooLong,
        };
        match referee.after_failure(&failed) {
            Verdict::Retry => {}
            Verdict::GiveUp => {
                return Err(Failure::Model {
                    error,
                    attempts: attempt,
                })
            }
            Verdict::Skip => return Err(Failure::Skipped { attempts: attempt }),
        }
        let wait = match wait {
            Wait::For(wait) => wait,
            Wait::TooLong => policy.max_backoff,
        };
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

/// The model a retry loop asks, with what its per-request records need.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub model: &'a dyn Model,
    pub pricing: Option<Pricing>,
    /// `scheme://host:port` of the model's endpoint (`None` for scripts).
    pub endpoint: Option<&'a str>,
}

impl<'a> Target<'a> {
    /// A model with no price and no endpoint (tests).
    #[cfg(test)]
    pub(crate) fn bare(model: &'a dyn Model) -> Self {
        Target {
            model,
            pricing: None,
            endpoint: None,
        }
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
            response_model: result
                .and_then(|r| r.as_ref().ok())
                .and_then(|r| r.model.clone()),
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::events::{EventRecord, Sink};
    use crate::model::script::ScriptModel;

    /// Retries every failure up to `attempts` requests.
    struct Patient {
        attempts: u32,
    }
    impl Referee for Patient {
        fn skip(&self) -> bool {
            false
        }
        fn after_failure(&self, failed: &Failed<'_>) -> Verdict {
            if failed.attempt >= self.attempts {
                Verdict::GiveUp
            } else {
                Verdict::Retry
            }
        }
        fn succeeded(&self) {}
    }

    struct Waits(Arc<Mutex<Vec<f64>>>);
    impl Sink for Waits {
        fn handle(&mut self, record: &EventRecord) {
            if let Event::ProviderRetry { wait_seconds, .. } = record.event {
                self.0.lock().unwrap().push(wait_seconds);
            }
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
        let request = Request {
            system: "",
            messages: &[],
            tools: &[],
            output_schema: None,
            max_output_tokens: None,
            reasoning_effort: None,
            spec: "script/x",
        };
        let policy = RetryPolicy {
            backoff: Duration::from_millis(1),
            jitter: 0.0,
            ..RetryPolicy::default()
        };
        let model = ScriptModel::parse(script).unwrap();
        let result = request_with_retries(
            Target::bare(&model),
            &request,
            ctx,
            &policy,
            &Patient { attempts: 6 },
        )
        .await;
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
        let script = "- error: {kind: network}\n- error: {kind: timeout}\n- error: {status: 429}\n- text: ok\n";
        assert_eq!(waits_for(script).await, vec![0.001, 0.002, 0.004]);
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
            p.wait_after(1, None, 0.0),
            Wait::For(Duration::from_secs(1))
        );
        assert_eq!(
            p.wait_after(2, None, 0.0),
            Wait::For(Duration::from_secs(2))
        );
        assert_eq!(
            p.wait_after(5, None, 0.0),
            Wait::For(Duration::from_secs(16))
        );
    }

    #[test]
    fn jitter_adds_up_to_its_fraction() {
        let p = policy();
        assert_eq!(
            p.wait_after(2, None, 0.999_999_999),
            Wait::For(Duration::from_secs(2).mul_f64(1.0 + 0.5 * 0.999_999_999))
        );
    }

    #[test]
    fn capped_at_max_backoff() {
        let p = policy();
        assert_eq!(
            p.wait_after(10, None, 0.9),
            Wait::For(Duration::from_secs(60))
        );
    }

    #[test]
    fn retry_after_is_the_wait_exactly() {
        let p = policy();
        assert_eq!(
            p.wait_after(1, Some(Duration::from_secs(7)), 0.9),
            Wait::For(Duration::from_secs(7))
        );
        assert_eq!(
            p.wait_after(5, Some(Duration::from_secs(3)), 0.9),
            Wait::For(Duration::from_secs(3)),
            "not the larger backoff, no jitter"
        );
        assert_eq!(
            p.wait_after(1, Some(Duration::from_secs(60)), 0.0),
            Wait::For(Duration::from_secs(60)),
            "max_backoff itself is waited"
        );
    }

    #[test]
    fn the_default_backoff_is_half_a_second() {
        assert_eq!(RetryPolicy::default().backoff, Duration::from_millis(500));
    }

    #[test]
    fn a_retry_after_beyond_the_cap_is_reported_too_long() {
        let p = policy();
        let long = Some(Duration::from_secs(3600));
        assert_eq!(p.wait_after(1, long, 0.0), Wait::TooLong);
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
            crate::model::http::note_first_event();
            Ok(Response {
                text: "hi".into(),
                tool_calls: vec![],
                usage: crate::model::Usage {
                    input_tokens: 1_000_000,
                    output_tokens: 500_000,
                    cached_input_tokens: 0,
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
        let response =
            request_with_retries(target, &request, ctx, &policy, &Patient { attempts: 6 }).await;
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
}
