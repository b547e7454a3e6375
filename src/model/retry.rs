//! The retry loop: one per member and step. It sends the request (through
//! `attempt::send_once`), classifies a failure, sleeps and asks the same
//! model again. It decides nothing: before each request and after each
//! transient failure it asks its `Referee` (the gate's `MemberTurn`), which
//! says send, wait (a pacing wait, `provider.paced`) or move on, and how
//! long to wait; it hands the referee each response's published limits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::attempt::{send_once, Accept, Attempted, Deadlines, Place};
use super::gate::{Admission, Failed, Halt, Referee, Timing, Verdict};
use super::member::Member;
use super::reason::SwitchReason;
use super::{ErrorClass, ModelError, Request, Response, StreamObserver};
use crate::events::{Emitter, Event};
use crate::stop::{Stop, StopCause};

/// Where a request happens: its step, the event emitter and the run's stop
/// signal.
#[derive(Clone, Copy)]
pub(crate) struct RequestCtx<'a> {
    pub step: u32,
    pub emitter: &'a Emitter,
    pub stop: &'a Stop,
}

/// Why a retry loop ended without a reply. The loop classifies each error
/// once; the chain acts on the variant.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Failure {
    /// A cancel or limit fired during a request or a wait.
    Stopped(StopCause),
    /// The member is done for this step and the run moves on, for `reason`,
    /// after `attempts` requests: a transient failure the referee gave up
    /// on, a quota error, or a skip (`error` is `None` when no request of
    /// this loop failed).
    MovedOn {
        reason: SwitchReason,
        attempts: u32,
        error: Option<ModelError>,
        /// When the member may be asked again, when known without an
        /// error: its published rate limit's reset (a pacing move-on).
        reset: Option<Duration>,
    },
    /// The model reported a context overflow (the agent compacts).
    ContextOverflow(ModelError),
    /// A failure a switch would hide: the step ends with it.
    Fatal(ModelError),
    /// The referee halted the run before this request: nothing more is sent.
    Halted(Halt),
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

/// How often one turn sends a request again at a lower reply cap (a server
/// that keeps naming lower caps is not followed for ever).
const MAX_CAP_RESENDS: u32 = 3;

/// A duration as the events give it: seconds, to the millisecond.
fn seconds(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// For a timeout, the deadline that ran out: the reader's own when it says
/// (the idle limit, or the first-event one), else the one the gate set.
fn deadline_that_ran_out(
    error: &ModelError,
    first_event_deadline: std::time::Duration,
) -> Option<std::time::Duration> {
    match error {
        ModelError::Timeout { deadline, .. } => Some(deadline.unwrap_or(first_event_deadline)),
        _ => None,
    }
}

/// Sends `request` to `member` until it answers, fails for a cause that is
/// not transient, or `referee` moves on. Emits each request's record,
/// `provider.retry` for each scheduled retry and `model.attempt_reset` when
/// a failed attempt had streamed output. Requests and waits are raced
/// against `ctx.stop`.
pub(crate) async fn request_with_retries(
    member: &Member,
    request: &Request<'_>,
    ctx: RequestCtx<'_>,
    referee: &dyn Referee,
) -> Result<Response, Failure> {
    // A reply cap lowers this copy's budget.
    let mut request = *request;
    let request = &mut request;
    let mut cap_resends = 0;
    let mut attempt = 1;
    // The last failure of this loop, for a move-on before the next request.
    let mut failed_before: Option<ModelError> = None;
    loop {
        let (paced, first_event_deadline) = admitted(referee, request.spec, ctx, attempt)
            .await
            .map_err(|failure| match failure {
                Failure::MovedOn {
                    reason,
                    attempts,
                    error: None,
                    reset,
                } => Failure::MovedOn {
                    reason,
                    attempts,
                    error: failed_before.take(),
                    reset,
                },
                other => other,
            })?;
        let observer = AttemptObserver {
            ctx,
            produced: AtomicBool::new(false),
        };
        let place = Place {
            step: ctx.step,
            attempt,
        };
        let sent = send_once(
            member,
            request,
            &observer,
            place,
            Accept::NonEmpty,
            Deadlines {
                first_event: Some(first_event_deadline),
                whole: None,
            },
            ctx.stop.fired(),
        )
        .await;
        let paced_ms = paced.as_millis().min(u64::MAX as u128) as u64;
        let mut sent = match sent {
            Attempted::Sent(sent) => sent,
            Attempted::Cut(cause, mut record) => {
                record.paced_ms = paced_ms;
                ctx.emitter.model_request(record);
                return Err(Failure::Stopped(cause));
            }
        };
        if let Some(limits) = &sent.limits {
            referee.heard(limits);
        }
        sent.record.paced_ms = paced_ms;
        ctx.emitter.model_request(sent.record);
        let timing = Timing {
            first_event: sent.first_event,
            deadline: first_event_deadline,
        };
        let error = match sent.result {
            Ok(response) => {
                referee.succeeded(timing);
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
        failed_before = Some(error.clone());
        let wait = match decide(
            error,
            request,
            ctx,
            referee,
            attempt,
            timing,
            &mut cap_resends,
        )? {
            Next::Resend => continue,
            Next::Retry(wait) => wait,
        };
        if let Err(cause) = ctx.stop.sleep(wait).await {
            return Err(Failure::Stopped(cause));
        }
        attempt += 1;
    }
}

/// What the retry loop does after a failed request.
enum Next {
    /// Send the same attempt again at once, with the lower reply budget.
    Resend,
    /// Wait this long, then send the next attempt.
    Retry(Duration),
}

/// Classifies a failed request once and decides what comes next: a reply
/// cap the referee accepts is resent at once (at most `MAX_CAP_RESENDS`
/// times a turn, with a warning); a transient failure waits as `referee`
/// says (announced by `provider.retry`) or moves on; a quota error moves
/// on; anything else ends the loop with its `Failure`.
fn decide(
    error: ModelError,
    request: &mut Request<'_>,
    ctx: RequestCtx<'_>,
    referee: &dyn Referee,
    attempt: u32,
    timing: Timing,
    cap_resends: &mut u32,
) -> Result<Next, Failure> {
    let reason = match error.class() {
        ErrorClass::Transient(reason) => reason,
        ErrorClass::Quota => {
            return Err(Failure::MovedOn {
                reason: error.reason().into(),
                attempts: attempt,
                error: Some(error),
                reset: None,
            })
        }
        ErrorClass::ContextOverflow => return Err(Failure::ContextOverflow(error)),
        ErrorClass::ReplyCap(cap) => {
            // Sent again at once with the budget the model allows,
            // without using up a retry; a refusal it repeats is final.
            if *cap_resends < MAX_CAP_RESENDS && referee.reply_cap(cap) {
                *cap_resends += 1;
                ctx.emitter.warn(format!(
                    "{} refused a reply budget above {cap} tokens: its requests now ask for at most {cap}",
                    request.spec
                ));
                request.max_output_tokens =
                    Some(request.max_output_tokens.map_or(cap, |b| b.min(cap)));
                return Ok(Next::Resend);
            }
            return Err(Failure::Fatal(error));
        }
        ErrorClass::Fatal => return Err(Failure::Fatal(error)),
    };
    let failed = Failed {
        attempt,
        reason,
        error: &error,
        timing,
    };
    let wait = match referee.after_failure(&failed) {
        Verdict::Retry(wait) => wait,
        Verdict::MoveOn(reason) => {
            return Err(Failure::MovedOn {
                reason,
                attempts: attempt,
                error: Some(error),
                reset: None,
            })
        }
    };
    ctx.emitter.emit(Event::ProviderRetry {
        step: ctx.step,
        model: request.spec.to_string(),
        attempt,
        next_attempt: attempt + 1,
        wait_seconds: seconds(wait),
        reason,
        deadline_seconds: deadline_that_ran_out(&error, timing.deadline).map(seconds),
    });
    Ok(Next::Retry(wait))
}

/// Asks `referee` until it says send, waiting out each pacing wait it asks
/// for (`provider.paced`) against `ctx.stop`; returns the time waited and
/// the request's first-event deadline.
async fn admitted(
    referee: &dyn Referee,
    spec: &str,
    ctx: RequestCtx<'_>,
    attempt: u32,
) -> Result<(Duration, Duration), Failure> {
    let mut paced = Duration::ZERO;
    loop {
        if let Some(cause) = ctx.stop.pending() {
            return Err(Failure::Stopped(cause));
        }
        match referee.before_send(attempt) {
            Admission::Send {
                first_event_deadline,
            } => return Ok((paced, first_event_deadline)),
            Admission::MoveOn(reason) => {
                return Err(Failure::MovedOn {
                    reason,
                    attempts: attempt - 1,
                    error: None,
                    reset: None,
                })
            }
            Admission::PacedAway { reset } => {
                return Err(Failure::MovedOn {
                    reason: SwitchReason::RateLimit,
                    attempts: attempt - 1,
                    error: None,
                    reset: Some(reset),
                })
            }
            Admission::Halt(halt) => return Err(Failure::Halted(halt)),
            Admission::Wait { wait, limit } => {
                ctx.emitter.emit(Event::ProviderPaced {
                    step: ctx.step,
                    model: spec.to_string(),
                    wait_seconds: (wait.as_secs_f64() * 1000.0).round() / 1000.0,
                    limit: limit.to_string(),
                });
                let started = Instant::now();
                ctx.stop.sleep(wait).await.map_err(Failure::Stopped)?;
                paced += started.elapsed();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;
    use crate::events::{EventRecord, RequestRecord, Sink};
    use crate::health::Health;
    use crate::model::gate::Gate;
    use crate::model::price::Pricing;
    use crate::model::script::ScriptModel;
    use crate::model::spec::ModelSpec;
    use crate::model::{FinishReason, Model};
    use crate::policy::{Cooldown, FallbackPolicy, RetryPolicy};

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
        let result =
            request_with_retries(&model, &request("script/x"), ctx, &gate.turn(0, 0)).await;
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
        let mut flaky = member("gw/m", Flaky(Default::default(), 2))
            .with_endpoint(Some("http://127.0.0.1:9".into()));
        flaky.pricing = Some(Pricing {
            input: 2.0,
            output: 10.0,
            cached_input: 0.5,
        });
        let gate = lone(RetryPolicy {
            backoff: Duration::ZERO,
            jitter: 0.0,
            ..RetryPolicy::default()
        });
        let response = request_with_retries(&flaky, &request("gw/m"), ctx, &gate.turn(0, 0)).await;
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
                (3, "ok", Some(200), true)
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
