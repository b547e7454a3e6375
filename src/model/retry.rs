//! The retry loop: one per member and step. It sends the request
//! (`Turn::send`, through `attempt::Sending`, raced by `hedge.rs` when the
//! turn may hedge), classifies a failure (`decide`), sleeps and asks the
//! same model again. It decides nothing: before each request and after each
//! transient failure it asks its `Referee` (the gate's `MemberTurn`), which
//! says send, wait (a pacing wait, `provider.paced`) or move on, and how
//! long to wait; it hands the referee each response's published limits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod hedged;

pub(crate) use super::attempt::RequestCtx;
use super::attempt::{Accept, Attempted, Deadlines, Place, Sending, Sent};
use super::gate::{Admission, Failed, Halt, Referee, Timing, Verdict};
use super::hedge::Partner;
use super::member::Member;
use super::reason::SwitchReason;
use super::{ErrorClass, ModelError, Request, Response, StreamObserver};
use crate::events::Event;
use crate::stop::StopCause;

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
    /// The turn's hedge became the step's request (SPEC 23): the run moves
    /// to its member.
    Hedged(Box<HedgeWin>),
}

/// A hedge that became the step's request: it won the race at its first
/// event, or went on alone after the original failed (then `reason` is the
/// original's failure), and answered or failed after that.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HedgeWin {
    /// The partner's index in the chain.
    pub to: usize,
    pub reason: SwitchReason,
    /// Requests made to the original member in this step.
    pub attempts: u32,
    /// Its answer, or its failure (its turn goes on from it).
    pub result: Result<Response, (ModelError, Timing)>,
    /// Whether the winner's failed request had shown output.
    pub produced: bool,
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

/// How a turn begins: the hedge it may send (SPEC 23), or the failed
/// first request it goes on from (a hedge that became this member's turn).
#[derive(Default)]
pub(crate) struct Opening<'a> {
    pub hedge: Option<&'a Partner<'a>>,
    pub failed_first: Option<(ModelError, Timing)>,
}

/// Sends `request` to `member` until it answers, fails for a cause that is
/// not transient, or `referee` moves on. Emits each request's record,
/// `provider.retry` for each scheduled retry and `model.attempt_reset` when
/// a failed attempt had streamed output. Requests and waits are raced
/// against `ctx.stop`.
#[cfg(test)]
pub(crate) async fn request_with_retries(
    member: &Member,
    request: &Request<'_>,
    ctx: RequestCtx<'_>,
    referee: &dyn Referee,
) -> Result<Response, Failure> {
    request_with_retries_from(member, request, ctx, referee, Opening::default()).await
}

/// A move-on before a request, naming `last`: the loop's failure that led
/// to it.
fn naming_last_failure(failure: Failure, last: Option<ModelError>) -> Failure {
    match failure {
        Failure::MovedOn {
            reason,
            attempts,
            error: None,
            reset,
        } => Failure::MovedOn {
            reason,
            attempts,
            error: last,
            reset,
        },
        other => other,
    }
}

/// `request_with_retries`, opening as `opening` says: a late first event
/// may be hedged once in the turn (`hedge.rs`); a turn taken over from a
/// failed hedge starts after that failure.
pub(crate) async fn request_with_retries_from(
    member: &Member,
    request: &Request<'_>,
    ctx: RequestCtx<'_>,
    referee: &dyn Referee,
    opening: Opening<'_>,
) -> Result<Response, Failure> {
    // A reply cap lowers this copy's budget.
    let mut request = *request;
    let request = &mut request;
    let mut cap_resends = 0;
    let mut attempt = 1;
    let mut hedge = opening.hedge;
    let mut failed = opening.failed_first;
    // The last failure of this loop, for a move-on before the next request.
    let mut failed_before: Option<ModelError> = None;
    loop {
        if let Some((error, timing)) = failed.take() {
            failed_before = Some(error.clone());
            let next = decide(
                error,
                request,
                ctx,
                referee,
                attempt,
                timing,
                &mut cap_resends,
            )?;
            if let Next::Retry(wait) = next {
                ctx.stop.sleep(wait).await.map_err(Failure::Stopped)?;
                attempt += 1;
            }
        }
        let (paced, first_event_deadline) = admitted(referee, request.spec, ctx, attempt)
            .await
            .map_err(|failure| naming_last_failure(failure, failed_before.take()))?;
        let observer = AttemptObserver {
            ctx,
            produced: AtomicBool::new(false),
        };
        let admitted = Admitted {
            attempt,
            paced_ms: paced.as_millis().min(u64::MAX as u128) as u64,
            first_event_deadline,
        };
        let turn = Turn {
            member,
            ctx,
            referee,
        };
        let sent = turn.send(request, &observer, admitted, &mut hedge).await?;
        let timing = Timing {
            first_event: sent.first_event,
            deadline: first_event_deadline,
        };
        match sent.result {
            Ok(response) => {
                referee.succeeded(timing);
                if response.usage_reported {
                    referee.settled(response.usage.output_tokens);
                }
                announce_limits(referee, request.spec, ctx);
                return Ok(response);
            }
            Err(error) => {
                if observer.produced.load(Ordering::Relaxed) {
                    ctx.emitter.emit(Event::AttemptReset {
                        step: ctx.step,
                        model: request.spec.to_string(),
                    });
                }
                failed = Some((error, timing));
            }
        }
    }
}

/// An attempt the referee let through: its number, the pacing wait before
/// it and its first-event deadline.
#[derive(Clone, Copy)]
struct Admitted {
    attempt: u32,
    paced_ms: u64,
    first_event_deadline: Duration,
}

/// Whose turn the loop is: the member asked, where, and its referee.
#[derive(Clone, Copy)]
struct Turn<'a> {
    member: &'a Member,
    ctx: RequestCtx<'a>,
    referee: &'a dyn Referee,
}

impl Turn<'_> {
    /// Sends one admitted attempt, raced with `hedge` when there is one (a
    /// hedge goes at most once a turn: `hedge` is then cleared), and hands
    /// the referee the limits its response published. Returns the request
    /// that came to an end, its record emitted; a cut one, or a hedge that
    /// became the step's request, ends the turn.
    async fn send(
        self,
        request: &Request<'_>,
        observer: &AttemptObserver<'_>,
        admitted: Admitted,
        hedge: &mut Option<&Partner<'_>>,
    ) -> Result<Sent, Failure> {
        let Turn {
            member,
            ctx,
            referee,
        } = self;
        let sending = Sending {
            member,
            request,
            observer,
            place: Place {
                step: ctx.step,
                attempt: admitted.attempt,
            },
            accept: Accept::NonEmpty,
            deadlines: Deadlines {
                first_event: Some(admitted.first_event_deadline),
                whole: None,
            },
        };
        let sent = match *hedge {
            Some(partner) => {
                let timing = (admitted.paced_ms, admitted.first_event_deadline);
                let (hedged, sent) =
                    hedged::attempt(sending, partner, ctx, referee, timing, &observer.produced)
                        .await;
                if hedged {
                    *hedge = None;
                }
                // A race emits its requests' records itself.
                sent?
            }
            None => {
                let mut sent = sending.send(None, ctx.stop.fired()).await;
                match &mut sent {
                    Attempted::Sent(Sent { record, .. }) | Attempted::Cut(_, record) => {
                        record.paced_ms = admitted.paced_ms;
                        ctx.emitter.model_request(record.clone());
                    }
                }
                sent
            }
        };
        match sent {
            Attempted::Sent(sent) => {
                if let Some(limits) = &sent.limits {
                    referee.heard(limits);
                }
                Ok(sent)
            }
            Attempted::Cut(cause, _) => Err(Failure::Stopped(cause)),
        }
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
    let verdict = referee.after_failure(&failed);
    announce_limits(referee, request.spec, ctx);
    let wait = match verdict {
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
        cause: match &error {
            ModelError::Network { message } if !message.is_empty() => Some(message.clone()),
            _ => None,
        },
    });
    Ok(Next::Retry(wait))
}

/// Emits `provider.limit_learned` for each change of the member's rate
/// limit since the last call (SPEC 24).
fn announce_limits(referee: &dyn Referee, spec: &str, ctx: RequestCtx<'_>) {
    for learned in referee.limit_notices() {
        ctx.emitter.emit(Event::LimitLearned {
            step: ctx.step,
            model: spec.to_string(),
            requests_per_minute: learned.requests_per_minute,
            reason: learned.reason,
        });
    }
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
            } => {
                announce_limits(referee, spec, ctx);
                return Ok((paced, first_event_deadline));
            }
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
            Admission::Wait {
                wait,
                limit,
                source,
                rate,
            } => {
                announce_limits(referee, spec, ctx);
                ctx.emitter.emit(Event::ProviderPaced {
                    step: ctx.step,
                    model: spec.to_string(),
                    wait_seconds: (wait.as_secs_f64() * 1000.0).round() / 1000.0,
                    limit: limit.to_string(),
                    source: source.to_string(),
                    rate: rate.map(|r| r.to_string()),
                });
                let started = Instant::now();
                ctx.stop.sleep(wait).await.map_err(Failure::Stopped)?;
                paced += started.elapsed();
            }
        }
    }
}

#[cfg(test)]
mod tests;
