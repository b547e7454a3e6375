//! The retry loop: one per model request and member. The only place that
//! decides whether to wait and ask the same model again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{ErrorClass, Model, ModelError, Request, Response, StreamObserver};
use crate::events::{Emitter, Event};
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

/// A hook that changes nothing.
pub struct NoHook;
impl AttemptHook for NoHook {}

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
/// waiting won't fix, or `budget` runs out. Emits `provider.retry` for each
/// scheduled retry and `model.attempt_reset` when a failed attempt had
/// streamed output. The request is raced against `ctx.stop`.
pub async fn request_with_retries(
    model: &dyn Model,
    request: &Request<'_>,
    ctx: RequestCtx<'_>,
    policy: &RetryPolicy,
    budget: Budget,
) -> Result<Response, Failure> {
    request_with_retries_gated(model, request, ctx, policy, budget, &NoHook).await
}

/// `request_with_retries` with `hook` consulted before each request and
/// told of each outcome.
pub async fn request_with_retries_gated(
    model: &dyn Model,
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
        let result = tokio::select! {
            result = model.complete(request, &observer) => result,
            cause = ctx.stop.fired() => return Err(Failure::Stopped(cause)),
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

#[cfg(test)]
mod tests {
    use super::*;

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
