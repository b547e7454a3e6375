//! One attempt of a turn that may be hedged: the race (`model/hedge.rs`)
//! and what its ending means for the turn (SPEC 23). The original's end
//! goes back to the loop as any request's would; a hedge that became the
//! step's request ends the turn (`Failure::Hedged`), the chain moving to
//! its member. A failure counts for its own model: the original's through
//! the turn's referee, the hedge's through the partner's rules; a hedge
//! that lost by failing (the original answered, or its failure was not
//! transient) loses quietly.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{Failure, HedgeWin, RequestCtx};
use crate::model::attempt::{Attempted, Sending, Sent};
use crate::model::gate::{Failed, Referee, Timing};
use crate::model::hedge::{race, Partner, Side};
use crate::model::reason::SwitchReason;
use crate::model::{ErrorClass, ModelError};
use crate::stop::StopCause;

/// Sends the attempt `sending` (paced as long as its first part says, under
/// the deadline its second says) with `partner` as its hedge; `produced`
/// says whether the winner showed output. Returns whether
/// a hedge was sent, and the original's end for the loop (its record
/// already emitted), or the failure that ends the turn.
pub(super) async fn attempt(
    sending: Sending<'_>,
    partner: &Partner<'_>,
    ctx: RequestCtx<'_>,
    referee: &dyn Referee,
    (paced_ms, deadline): (u64, Duration),
    produced: &AtomicBool,
) -> (bool, Result<Attempted<StopCause>, Failure>) {
    let attempts = sending.place.attempt;
    let raced = race(sending, partner, ctx, paced_ms).await;
    let hedge_won = raced.winner == Some(Side::Hedge);
    let outcome = match (raced.original, raced.hedge) {
        (original, None) => original.ok_or_else(|| {
            // The original lost and the hedge was then stopped.
            Failure::Stopped(ctx.stop.pending().unwrap_or(StopCause::Interrupted))
        }),
        (None, Some((hedge, hedge_deadline))) => Err(won(
            partner,
            hedge,
            hedge_deadline,
            SwitchReason::Hedge,
            attempts,
        )),
        (Some(Attempted::Cut(cause, record)), Some(_)) => Ok(Attempted::Cut(cause, record)),
        (Some(Attempted::Sent(original)), Some((hedge, hedge_deadline))) => {
            let hedge_timing = Timing {
                first_event: hedge.first_event,
                deadline: hedge_deadline,
            };
            let original_reason = transient(&original);
            let hedge_answered = hedge.result.is_ok();
            let hedge_reason = hedge.result.as_ref().err().and_then(transient_reason);
            if hedge_won || (hedge_answered && original.result.is_err()) {
                // The original failed before the hedge's first event: the
                // hedge that answers is the winner, a switch of reason
                // `hedge` like any winning hedge.
                count_original(original, referee, deadline, attempts);
                Err(won(
                    partner,
                    hedge,
                    hedge_deadline,
                    SwitchReason::Hedge,
                    attempts,
                ))
            } else {
                match (original_reason, hedge_reason, raced.winner, hedge.result) {
                    (Some(reason), Some(_), None, Err(error)) => {
                        // Both failed before either sent an event: the step
                        // goes on from the hedge's member, as its failure says.
                        count_original(original, referee, deadline, attempts);
                        Err(Failure::Hedged(Box::new(HedgeWin {
                            to: partner.rules.to,
                            reason: reason.into(),
                            attempts,
                            result: Err((error, hedge_timing)),
                            produced: false,
                        })))
                    }
                    (_, _, _, result) => {
                        lost_quietly(partner, result.as_ref().err(), hedge_timing);
                        Ok(Attempted::Sent(original))
                    }
                }
            }
        }
    };
    let outcome = outcome.map_err(|mut failure| {
        if let Failure::Hedged(win) = &mut failure {
            win.produced = produced.load(Ordering::Relaxed);
        }
        failure
    });
    (raced.hedged, outcome)
}

/// The hedge became the step's request: its success clears its record.
fn won(
    partner: &Partner<'_>,
    hedge: Sent,
    deadline: Duration,
    reason: SwitchReason,
    attempts: u32,
) -> Failure {
    let timing = Timing {
        first_event: hedge.first_event,
        deadline,
    };
    let result = match hedge.result {
        Ok(response) => {
            partner.rules.partner.succeeded(timing);
            Ok(response)
        }
        Err(error) => Err((error, timing)),
    };
    Failure::Hedged(Box::new(HedgeWin {
        to: partner.rules.to,
        reason,
        attempts,
        result,
        produced: false,
    }))
}

/// The original failed while its hedge became the step's request: its
/// published limits and its strike count, as any failure's.
fn count_original(original: Sent, referee: &dyn Referee, deadline: Duration, attempt: u32) {
    if let Some(limits) = &original.limits {
        referee.heard(limits);
    }
    let timing = Timing {
        first_event: original.first_event,
        deadline,
    };
    if let Err(error) = &original.result {
        if let Some(reason) = transient_reason(error) {
            let _ = referee.after_failure(&Failed {
                attempt,
                reason,
                error,
                timing,
            });
        }
    }
}

/// A hedge that failed while the original goes on: a transient failure is
/// a strike on its member, anything else is only its record.
fn lost_quietly(partner: &Partner<'_>, failure: Option<&ModelError>, timing: Timing) {
    if let Some(error) = failure {
        if let Some(reason) = transient_reason(error) {
            let _ = partner.rules.partner.after_failure(&Failed {
                attempt: 1,
                reason,
                error,
                timing,
            });
        }
    }
}

fn transient(sent: &Sent) -> Option<crate::model::reason::FailureReason> {
    sent.result.as_ref().err().and_then(transient_reason)
}

fn transient_reason(error: &ModelError) -> Option<crate::model::reason::FailureReason> {
    match error.class() {
        ErrorClass::Transient(reason) => Some(reason),
        _ => None,
    }
}
