//! The race of a hedged request (SPEC 23), at the level of one request:
//! the original goes out alone; when it has sent no stream event after the
//! gate's delay (`gate/hedge.rs` says whether, when and to whom), the same
//! request goes to the partner too, and the first of the two to send a
//! stream event is the step's request. The other is cut at once (its
//! connection closed, its output never seen: each side's text is held
//! back until it is the winner) and recorded `hedged_out`, its estimated
//! input charged at its price. One that fails before either sent an event
//! leaves the other to go on alone. The retry loop (`retry.rs`) decides
//! what each ending means for the turn.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use super::attempt::{Accept, Attempted, Cut, Deadlines, Place, RequestCtx, Sending, Sent};
use super::gate::{HedgeTurn, PartnerAdmission};
use super::member::Member;
use super::{Request, Usage};
use crate::events::Event;
use crate::reason::RequestOutcome;
use crate::stop::StopCause;

mod sides;

use sides::{Race, SideObserver};

/// A hedge as the trajectory's `hedges` lists it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Hedge {
    pub step: u32,
    pub from: String,
    pub to: String,
    /// The spec whose request was the step's; `null` when both failed.
    pub winner: Option<String>,
}

/// What a chain keeps of its hedges: the trajectory's list, and the
/// losers' estimated costs not yet counted by the run.
#[derive(Debug, Default)]
pub(crate) struct HedgeLog {
    hedges: Mutex<Vec<Hedge>>,
    charges: Mutex<Vec<(String, f64)>>,
}

impl HedgeLog {
    /// Every hedge sent so far.
    pub(crate) fn hedges(&self) -> Vec<Hedge> {
        self.hedges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The losers' costs, by spec, since the last call.
    pub(crate) fn take_charges(&self) -> Vec<(String, f64)> {
        std::mem::take(&mut *self.charges.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn push(&self, hedge: Hedge) {
        self.hedges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(hedge);
    }

    fn charge(&self, spec: &str, usd: f64) {
        self.charges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((spec.to_string(), usd));
    }
}

/// The partner of a turn that may be hedged: its member, its request (the
/// same prompt, for its spec), the gate's hedge rules, and where the hedge
/// is logged.
pub(crate) struct Partner<'a> {
    pub member: &'a Member,
    pub request: Request<'a>,
    pub rules: HedgeTurn<'a>,
    /// The request's estimated input tokens (a loser is charged for them).
    pub estimated_input_tokens: u64,
    pub log: &'a HedgeLog,
}

/// One side of the race.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Original = 1,
    Hedge = 2,
}

/// How a race came out.
pub(crate) struct Raced {
    /// The original's end (its record already emitted); `None` when it
    /// lost and was cut.
    pub original: Option<Attempted<StopCause>>,
    /// The hedge's end with the deadline it had, when one was sent and
    /// not cut (its record is already emitted).
    pub hedge: Option<(Sent, Duration)>,
    /// Whose first event came first.
    pub winner: Option<Side>,
    /// Whether a hedge was sent.
    pub hedged: bool,
}

/// Why a side's request was cut.
enum RaceCut {
    Stopped(StopCause),
    Lost,
}

/// A loser's record says `hedged_out` from the start.
impl Cut for RaceCut {
    fn outcome(&self) -> RequestOutcome {
        match self {
            RaceCut::Stopped(cause) => cause.outcome(),
            RaceCut::Lost => RequestOutcome::HedgedOut,
        }
    }
}

type Flight<'a> = Pin<Box<dyn Future<Output = Attempted<RaceCut>> + Send + 'a>>;
type Admitting = Pin<Box<dyn Future<Output = PartnerAdmission> + Send>>;

/// Sends `original` (its request to the turn's member, with the turn's
/// observer) and, if it is late, the same request to `partner`, and races
/// them. `paced_ms` is the original's pacing wait (for its record). Every
/// request's record is emitted here, in the order the requests ended.
pub(crate) async fn race(
    original: Sending<'_>,
    partner: &Partner<'_>,
    ctx: RequestCtx<'_>,
    paced_ms: u64,
) -> Raced {
    let race = Arc::new(Race::default());
    let original_observer = SideObserver::new(Side::Original, &race, original.observer);
    let hedge_observer = SideObserver::new(Side::Hedge, &race, original.observer);
    let from = original.member;
    let flight = Sending {
        observer: &original_observer,
        ..original
    }
    .send(
        Some(race.hook(Side::Original)),
        cut(ctx, &race, Side::Original),
    );
    let mut racing = Racing {
        race: &race,
        partner,
        ctx,
        from,
        sent_at: Instant::now(),
        first: Some(Box::pin(flight)),
        second: None,
        timer: Some(Box::pin(tokio::time::sleep(partner.rules.after))),
        admitting: None,
        ends: Ends::default(),
    };
    std::future::poll_fn(|cx| racing.poll(cx, &hedge_observer)).await;
    let (winner, ends) = (race.winner(), racing.ends);
    let hedge_deadline = ends.hedge_deadline;
    if hedge_deadline.is_some() {
        settle(partner, from, ctx, winner, &ends.original, &ends.hedge);
    }
    // A winner's held-back output goes out now (it normally went at once).
    match winner {
        Some(Side::Original) => original_observer.flush(),
        Some(Side::Hedge) => hedge_observer.flush(),
        None => {}
    }
    let timing = (paced_ms, hedge_deadline.unwrap_or_default());
    let (original, hedge) = recorded(ends, (from, partner), ctx, timing);
    Raced {
        original,
        hedge,
        winner,
        hedged: hedge_deadline.is_some(),
    }
}

/// What the race's two requests came to, as they end.
#[derive(Default)]
struct Ends {
    original: Option<Attempted<RaceCut>>,
    hedge: Option<Attempted<RaceCut>>,
    /// Which ended first (their records go out in that order).
    first: Option<Side>,
    /// The hedge's first-event deadline, once one was sent.
    hedge_deadline: Option<Duration>,
}

/// A race under way: the two requests in flight, the delay before a hedge
/// and the partner's admission, and what has ended so far.
struct Racing<'r, 'a> {
    race: &'r Arc<Race>,
    partner: &'r Partner<'a>,
    ctx: RequestCtx<'r>,
    from: &'r Member,
    sent_at: Instant,
    first: Option<Flight<'r>>,
    second: Option<Flight<'r>>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The partner's admission, on a blocking thread while the original is
    /// read.
    admitting: Option<Admitting>,
    ends: Ends,
}

impl<'r> Racing<'r, '_> {
    /// One turn of the race: a hedge when the original is late, both sides
    /// polled. Ready once the original ended (no hedge goes after that,
    /// and an admission still running gives back what it took on its own)
    /// and so did the hedge, if one went.
    fn poll(
        &mut self,
        cx: &mut std::task::Context<'_>,
        hedge_observer: &'r SideObserver<'r>,
    ) -> Poll<()> {
        self.hedge_when_late(cx, hedge_observer);
        self.poll_sides(cx);
        if self.first.is_none() && self.second.is_none() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Once the delay ran out with the original still late and within the
    /// budget, asks for the partner's admission; once admitted, with the
    /// original still late, sends the hedge.
    fn hedge_when_late(
        &mut self,
        cx: &mut std::task::Context<'_>,
        hedge_observer: &'r SideObserver<'r>,
    ) {
        let (partner, ctx) = (self.partner, self.ctx);
        if self
            .timer
            .as_mut()
            .is_some_and(|t| t.as_mut().poll(cx).is_ready())
        {
            self.timer = None;
            if self.still_late() && within_budget(partner, ctx) {
                self.admitting = Some(Box::pin(partner.rules.admission()));
            }
        }
        let Some(admitted) = self.admitting.as_mut().and_then(|a| ready(a.as_mut(), cx)) else {
            return;
        };
        self.admitting = None;
        // The original may have sent its first event meanwhile; then the
        // admission is dropped, giving back what it took.
        if !self.still_late() {
            return;
        }
        if let Some(deadline) = partner.rules.admitted(admitted) {
            announce(partner, self.from, ctx, self.sent_at);
            self.ends.hedge_deadline = Some(deadline);
            let sending = hedge_sending(partner, hedge_observer, ctx.step, deadline);
            self.second = Some(Box::pin(sending.send(
                Some(self.race.hook(Side::Hedge)),
                cut(ctx, self.race, Side::Hedge),
            )));
        }
    }

    /// Polls both sides, again while a poll set the winner: the loser is
    /// cut at its next.
    fn poll_sides(&mut self, cx: &mut std::task::Context<'_>) {
        loop {
            let before = self.race.winner();
            poll_side(&mut self.first, &mut self.ends.original, cx);
            poll_side(&mut self.second, &mut self.ends.hedge, cx);
            if self.ends.first.is_none() {
                self.ends.first = match (&self.ends.original, &self.ends.hedge) {
                    (Some(_), _) => Some(Side::Original),
                    (None, Some(_)) => Some(Side::Hedge),
                    (None, None) => None,
                };
            }
            if self.race.winner() == before {
                break;
            }
        }
    }

    /// Whether the original is still without a first event and may be
    /// hedged: not ended, not beaten, no cancel or limit pending.
    fn still_late(&self) -> bool {
        self.ends.original.is_none()
            && self.race.winner().is_none()
            && self.ctx.stop.pending().is_none()
    }
}

/// Both sides' ends with their records emitted, in the order the requests
/// ended; `paced_ms` is the original's pacing wait and `hedge_deadline`
/// the hedge's first-event deadline.
fn recorded(
    ends: Ends,
    (from, partner): (&Member, &Partner<'_>),
    ctx: RequestCtx<'_>,
    (paced_ms, hedge_deadline): (u64, Duration),
) -> (Option<Attempted<StopCause>>, Option<(Sent, Duration)>) {
    let original_first = ends.first != Some(Side::Hedge);
    let (mut original_end, mut hedge_end) = (ends.original, ends.hedge);
    let mut original = None;
    let mut hedge = None;
    for side in [original_first, !original_first] {
        if side {
            original = original_end
                .take()
                .and_then(|end| original_recorded(end, from, partner, ctx, paced_ms));
        } else {
            hedge = hedge_end
                .take()
                .and_then(|end| hedge_recorded(end, partner, ctx, hedge_deadline));
        }
    }
    (original, hedge)
}

/// The original's end, its record emitted; `None` when it lost.
fn original_recorded(
    end: Attempted<RaceCut>,
    from: &Member,
    partner: &Partner<'_>,
    ctx: RequestCtx<'_>,
    paced_ms: u64,
) -> Option<Attempted<StopCause>> {
    Some(match side_end(end, from, partner, ctx, paced_ms)? {
        Attempted::Sent(mut sent) => {
            sent.record.paced_ms = paced_ms;
            ctx.emitter.model_request(sent.record.clone());
            Attempted::Sent(sent)
        }
        Attempted::Cut(cause, record) => {
            ctx.emitter.model_request(record.clone());
            Attempted::Cut(cause, record)
        }
    })
}

/// The hedge's end with its deadline, its record emitted and its published
/// limits heard; `None` when it lost or was stopped.
fn hedge_recorded(
    end: Attempted<RaceCut>,
    partner: &Partner<'_>,
    ctx: RequestCtx<'_>,
    deadline: Duration,
) -> Option<(Sent, Duration)> {
    match side_end(end, partner.member, partner, ctx, 0)? {
        Attempted::Sent(sent) => {
            if let Some(limits) = &sent.limits {
                super::gate::Referee::heard(&partner.rules.partner, limits);
            }
            ctx.emitter.model_request(sent.record.clone());
            Some((sent, deadline))
        }
        Attempted::Cut(_, record) => {
            ctx.emitter.model_request(record);
            None
        }
    }
}

/// Polls one side's request, keeping its end once it has one.
fn poll_side<'a>(
    flight: &mut Option<Flight<'a>>,
    end: &mut Option<Attempted<RaceCut>>,
    cx: &mut std::task::Context<'_>,
) {
    if let Some(request) = flight.as_mut() {
        if let Poll::Ready(done) = request.as_mut().poll(cx) {
            *end = Some(done);
            // Dropped at once: a cut request's connection closes now.
            *flight = None;
        }
    }
}

/// A side's request is cut by the run's stop, or once the other side won.
async fn cut(ctx: RequestCtx<'_>, race: &Race, side: Side) -> RaceCut {
    tokio::select! {
        cause = ctx.stop.fired() => RaceCut::Stopped(cause),
        () = race.lost(side) => RaceCut::Lost,
    }
}

/// Whether the run's hedge budget lets one more hedge go; its first
/// refusal is the run's one warning.
fn within_budget(partner: &Partner<'_>, ctx: RequestCtx<'_>) -> bool {
    match partner.rules.within_budget() {
        Ok(()) => true,
        Err(over) => {
            if over.first {
                ctx.emitter.warn(format!(
                    "hedge budget reached: hedges are held to {} of this run's requests (fallback.hedge_budget); later late first events are not hedged",
                    partner.rules.budget_percent()
                ));
            }
            false
        }
    }
}

/// A hedge goes: `model.hedge` and its stderr line.
fn announce(partner: &Partner<'_>, from: &Member, ctx: RequestCtx<'_>, sent_at: Instant) {
    ctx.emitter.emit(Event::ModelHedge {
        step: ctx.step,
        from: from.spec.to_string(),
        to: partner.member.spec.to_string(),
        after_seconds: (sent_at.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
    });
}

/// A future's output if it is ready now.
fn ready<T>(
    future: Pin<&mut (dyn Future<Output = T> + Send)>,
    cx: &mut std::task::Context<'_>,
) -> Option<T> {
    match future.poll(cx) {
        Poll::Ready(value) => Some(value),
        Poll::Pending => None,
    }
}

/// The hedge's request: the partner's, its first attempt in the step.
fn hedge_sending<'a>(
    partner: &'a Partner<'a>,
    observer: &'a SideObserver<'a>,
    step: u32,
    deadline: Duration,
) -> Sending<'a> {
    Sending {
        member: partner.member,
        request: &partner.request,
        observer,
        place: Place { step, attempt: 1 },
        accept: Accept::NonEmpty,
        deadlines: Deadlines {
            first_event: Some(deadline),
            whole: None,
        },
    }
}

/// A side's end, or `None` for a loser: its record (outcome `hedged_out`,
/// the estimated input at its price, charged to the run) is emitted here.
fn side_end(
    end: Attempted<RaceCut>,
    member: &Member,
    partner: &Partner<'_>,
    ctx: RequestCtx<'_>,
    paced_ms: u64,
) -> Option<Attempted<StopCause>> {
    match end {
        Attempted::Sent(sent) => Some(Attempted::Sent(sent)),
        Attempted::Cut(RaceCut::Stopped(cause), mut record) => {
            record.paced_ms = paced_ms;
            Some(Attempted::Cut(cause, record))
        }
        Attempted::Cut(RaceCut::Lost, mut record) => {
            let tokens = partner.estimated_input_tokens;
            let cost = member.pricing.map_or(0.0, |p| {
                p.cost(&Usage {
                    input_tokens: tokens,
                    ..Usage::default()
                })
            });
            record.input_tokens = tokens;
            record.output_tokens = 0;
            record.cost_usd = cost;
            record.paced_ms = paced_ms;
            partner.log.charge(member.spec.as_str(), cost);
            ctx.emitter.model_request(record);
            None
        }
    }
}

/// The time to a side's first event, when it came to an end with one.
fn first_event_ms(end: &Option<Attempted<RaceCut>>) -> Option<u64> {
    match end {
        Some(Attempted::Sent(sent)) => sent.record.first_event_ms,
        _ => None,
    }
}

fn answered(end: &Option<Attempted<RaceCut>>) -> bool {
    matches!(end, Some(Attempted::Sent(sent)) if sent.result.is_ok())
}

/// Records how a sent hedge came out: `model.hedge_settled` when one side
/// won at its first event, and the trajectory's entry.
fn settle(
    partner: &Partner<'_>,
    from: &Member,
    ctx: RequestCtx<'_>,
    winner: Option<Side>,
    original_end: &Option<Attempted<RaceCut>>,
    hedge_end: &Option<Attempted<RaceCut>>,
) {
    let from_spec = from.spec.to_string();
    let to_spec = partner.member.spec.to_string();
    let winner = winner.or(if answered(original_end) {
        Some(Side::Original)
    } else if answered(hedge_end) {
        Some(Side::Hedge)
    } else {
        None
    });
    let (winner_spec, loser_spec, first_event) = match winner {
        Some(Side::Original) => (Some(&from_spec), &to_spec, first_event_ms(original_end)),
        Some(Side::Hedge) => (Some(&to_spec), &from_spec, first_event_ms(hedge_end)),
        None => (None, &to_spec, None),
    };
    if let Some(winner_spec) = winner_spec {
        ctx.emitter.emit(Event::ModelHedgeSettled {
            step: ctx.step,
            winner: winner_spec.clone(),
            loser: loser_spec.clone(),
            winner_first_event_ms: first_event.unwrap_or(0),
        });
    }
    partner.log.push(Hedge {
        step: ctx.step,
        from: from_spec.clone(),
        to: to_spec.clone(),
        winner: winner_spec.cloned(),
    });
}
