//! The retry loop: one per model request and member. It sends the request,
//! classifies a failure, works out the wait and asks the same model again.
//! It decides nothing about the chain: after each failure, and before each
//! request, it reports what happened to a `Referee` (the chain's rules in
//! `chain.rs`), which says whether to go on, give up or skip the member.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{ErrorClass, FinishReason, Model, ModelError, Request, Response, StreamObserver};
use crate::events::{Emitter, Event};
pub use crate::policy::RetryPolicy;
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
pub struct RequestCtx<'a> {
    pub step: u32,
    pub emitter: &'a Emitter,
    pub stop: &'a Stop,
}

/// A failed attempt with a transient cause, as the loop reports it.
#[derive(Debug)]
pub struct Failed<'a> {
    /// The attempt that failed, counted from 1.
    pub attempt: u32,
    /// The failure reason (`http_503`, `network`, ...).
    pub reason: &'a str,
    /// The server asked for a wait longer than `max_backoff`.
    pub wait_too_long: bool,
}

/// What the referee says after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Wait, then ask the same model again.
    Retry,
    /// Stop here with this failure (`Failure::Model`).
    GiveUp,
    /// Stop here without a retry (`Failure::Skipped`).
    Skip,
}

/// The rules one retry loop runs under, told every fact the loop learns.
/// The chain's rules (`chain::Rules`) are the one implementation.
pub trait Referee: Sync {
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
pub enum Failure {
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
pub async fn request_with_retries(
    model: &dyn Model,
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
        let result = tokio::select! {
            result = model.complete(request, &observer) => result,
            cause = ctx.stop.fired() => return Err(Failure::Stopped(cause)),
        };
        let result = result.and_then(not_empty);
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
        let result =
            request_with_retries(&model, &request, ctx, &policy, &Patient { attempts: 6 }).await;
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
}
