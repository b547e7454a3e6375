//! The gate: the one place that answers "may this member be asked now,
//! and if not, wait how long or move on why?" (SPEC sections 4, 5 and 13).
//! Read this file to learn why a run retried, waited, switched or probed:
//!
//! - before each request (`MemberTurn::before_send`): a member another run
//!   recorded as cooling down, or that another run of the fleet is probing,
//!   is skipped (`cooldown`) while a later member may be asked; then the
//!   member's published rate limit (`pacing.rs`, SPEC 17) says send, wait
//!   for its reset, or move on (`rate_limit`); a request that is sent gets
//!   its first-event deadline (`deadline.rs`: grown with the request's
//!   size, doubled per retry, remembered for a slow server);
//! - after each transient failure (`MemberTurn::after_failure`): the wait
//!   (a glitch at once, a Retry-After exactly, else backoff), or moving on:
//!   after `switch_after` failures (or, for the chain's last member and a
//!   lone model, `attempts`, with more tries for rate limits within their
//!   own budget: `rate_limit.rs`), on a Retry-After too long to wait, on a
//!   failed probe of another run's record, or when the record now says
//!   cooling;
//! - at a step boundary (`Gate::eligible`, `due_probes`, `next_after`):
//!   which members cooled down enough to be probed, and where a switch goes;
//! - when every member is down and the run may wait (`outage.rs`, SPEC 18):
//!   which member to probe and when, whose turn it is in the fleet, when
//!   another run's probe succeeded; and a failure on the last member that
//!   joins a wait the fleet is already in.
//! - budgets (`budget.rs`, SPEC 19): before each request, a spent budget
//!   skips the member (`budget`) or halts the run; members whose own budget
//!   is spent are neither probed nor switched to.
//!
//! The gate keeps each member's state: when this run left it (its own
//! cooldown, SPEC 5) and, through `shared::SharedRecord`, what the shared
//! record says (other runs' cooldowns, the probe lease, strikes of all
//! runs). `chain.rs` walks the chain and records switches as the gate says;
//! `retry.rs` sends and sleeps as it says; the stores keep facts.

mod budget;
mod deadline;
mod hedge;
mod outage;
mod pacing;
mod rate_limit;
mod reply_cap;
mod shared;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::ratelimit::RateLimits;
use super::reason::{FailureReason, SwitchReason};
use super::ModelError;
use crate::health::{Health, HealthKey, Millis, PaceLimit, PaceSource, Window};
use crate::policy::{FallbackPolicy, RetryPolicy, Wait};
pub(crate) use budget::{BudgetBook, BudgetSpent, Standing};
pub(crate) use hedge::{HedgeTurn, PartnerAdmission};
pub(crate) use outage::{Next, Outage};
pub(crate) use pacing::{LimitLearned, Pacer};
pub(crate) use shared::SharedRecord;
use shared::Strike;

/// Whether a request may be sent now.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Admission {
    /// Send it, giving its first stream event this long (response headers
    /// included).
    Send { first_event_deadline: Duration },
    /// Not yet: wait this long to stay under the member's `limit` from
    /// `source` (SPEC 17, 24; `rate`: the declared or learned window),
    /// then ask again.
    Wait {
        wait: Duration,
        limit: PaceLimit,
        source: PaceSource,
        rate: Option<Window>,
    },
    /// Do not send it: the run moves on to the next member.
    MoveOn(SwitchReason),
    /// Do not send it: the member's published limit resets `reset` from
    /// now, later than `retry.max_backoff`; the run moves on (`rate_limit`),
    /// and an outage wait tries the member again no sooner (SPEC 17, 18).
    PacedAway { reset: Duration },
    /// Do not send it, nor anything more: the run ends (with no member
    /// left to move on to, or for a rule of the whole run).
    Halt(Halt),
}

/// Why a run may send nothing more (`Admission::Halt`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Halt {
    /// Budgets are spent (SPEC 19): the run ends `budget_limit` (exit 3),
    /// its error naming them.
    Budget(BudgetSpent),
}

impl std::fmt::Display for Halt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Halt::Budget(spent) => spent.fmt(f),
        }
    }
}

/// When a sent request's first event came, against the deadline it had.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Timing {
    pub first_event: Option<Duration>,
    pub deadline: Duration,
}

/// A failed attempt with a transient cause, as the retry loop reports it.
#[derive(Debug)]
pub(crate) struct Failed<'a> {
    /// The attempt that failed, counted from 1.
    pub attempt: u32,
    pub reason: FailureReason,
    pub error: &'a ModelError,
    pub timing: Timing,
}

/// What to do after a transient failure.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    /// Wait this long, then ask the same member again.
    Retry(Duration),
    /// Stop asking this member in this step: the run moves on (or, at the
    /// chain's end, the step fails).
    MoveOn(SwitchReason),
}

/// What the retry loop asks of the rules it runs under; `MemberTurn` is
/// the one implementation.
pub(crate) trait Referee: Sync {
    /// Before each request: `attempt` (from 1) is the one about to be sent.
    fn before_send(&self, attempt: u32) -> Admission;
    /// The model refused a reply budget above `cap`: whether the request
    /// may be sent again at once with that budget (it lowered the
    /// member's; the same refusal twice is no reason to resend).
    fn reply_cap(&self, cap: u32) -> bool;
    /// After each failure with a transient cause.
    fn after_failure(&self, failed: &Failed<'_>) -> Verdict;
    /// After a successful request.
    fn succeeded(&self, timing: Timing);
    /// After any response that published rate limits (a 429 included).
    fn heard(&self, limits: &RateLimits);
    /// A reply reported it used `output_tokens` (SPEC 24: declared
    /// windows get back what its reservation took beyond that).
    fn settled(&self, _output_tokens: u64) {}
    /// The member's rate-limit changes since the last call, to announce
    /// (`provider.limit_learned`).
    fn limit_notices(&self) -> Vec<LimitLearned> {
        Vec::new()
    }
}

/// Every member's state, and the run's retry and fallback policy.
pub(crate) struct Gate {
    /// Where the shared record keeps each member (chain order).
    keys: Vec<HealthKey>,
    /// When this run last left each member (on the record's clock); `None`
    /// if it never did or the member answered since.
    left_at: Mutex<Vec<Option<Millis>>>,
    record: SharedRecord,
    /// Each member's first-event deadline learned from a slow first event
    /// (`Duration::ZERO`: none yet).
    learned_deadlines: Mutex<Vec<Duration>>,
    /// Each member's reply cap, from its own refusal (`reply_cap.rs`).
    reply_caps: Mutex<Vec<Option<u32>>>,
    retry: RetryPolicy,
    fallback: FallbackPolicy,
    /// `--outage-wait`: how long the run waits when every member is down
    /// (zero: it ends with exit 75 at once).
    outage_wait: Duration,
    /// The run's budgets (`budget.rs`); `None` when it has none.
    budgets: Option<Arc<BudgetBook>>,
    /// Pacing under the members' published rate limits (`pacing.rs`).
    pacer: Pacer,
    /// Hedging late first events (`hedge.rs`, SPEC 23); `None` when off.
    hedging: Option<hedge::Hedging>,
}

impl Gate {
    /// The gate of a chain whose members the shared record keeps under
    /// `keys` (primary first).
    pub(crate) fn new(
        keys: Vec<HealthKey>,
        retry: RetryPolicy,
        fallback: FallbackPolicy,
        health: Health,
    ) -> Gate {
        let fallback =
            FallbackPolicy::new(fallback.switch_after, fallback.cooldown, retry.attempts);
        Gate {
            left_at: Mutex::new(vec![None; keys.len()]),
            learned_deadlines: Mutex::new(vec![Duration::ZERO; keys.len()]),
            reply_caps: Mutex::new(vec![None; keys.len()]),
            keys,
            record: SharedRecord::new(health, fallback.clone()),
            retry,
            fallback,
            outage_wait: Duration::ZERO,
            budgets: None,
            pacer: Pacer::off(),
            hedging: None,
        }
    }

    /// The same gate, pacing as `pacer` says (SPEC 17).
    pub(crate) fn with_pacer(self, pacer: Pacer) -> Gate {
        Gate { pacer, ..self }
    }

    /// The same gate, its pacer knowing each member's declared limits and
    /// reply budget (SPEC 24).
    pub(crate) fn with_pace_limits(self, limits: Vec<(Vec<Window>, Option<u32>)>) -> Gate {
        Gate {
            pacer: self.pacer.with_limits(limits),
            ..self
        }
    }

    /// The same gate on another health record (the run's, once it has an
    /// emitter for the record's one warning).
    pub(crate) fn with_health(self, health: Health) -> Gate {
        Gate {
            record: SharedRecord::new(health, self.fallback.clone()),
            ..self
        }
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    /// The rules of a normal turn of member `index` for a request of
    /// `estimated_input_tokens`: `switch_after` requests when a later member
    /// exists, else the whole `retry.attempts`.
    pub(crate) fn turn(&self, index: usize, estimated_input_tokens: u64) -> MemberTurn<'_> {
        let has_next = index + 1 < self.len();
        MemberTurn {
            gate: self,
            index,
            estimated_input_tokens,
            max_attempts: if has_next {
                self.fallback.switch_after
            } else {
                self.retry.attempts.max(1)
            },
            may_move_on: has_next,
            can_leave: has_next,
            rate_limit_room: !has_next,
            kind: TurnKind::Normal,
            fleet_probe: AtomicBool::new(false),
            glitch_retried: AtomicBool::new(false),
            rate_limit_waited: Mutex::new(Duration::ZERO),
            taught: AtomicBool::new(false),
        }
    }

    /// The rules of a probe after a cooldown: one request, never skipped
    /// for another run's record (a limit too long to wait for moves on:
    /// the active member is there).
    pub(crate) fn probe(&self, index: usize, estimated_input_tokens: u64) -> MemberTurn<'_> {
        MemberTurn {
            max_attempts: 1,
            may_move_on: false,
            can_leave: true,
            rate_limit_room: false,
            kind: TurnKind::Probe,
            ..self.turn(index, estimated_input_tokens)
        }
    }

    /// Whether member `index` may be asked at `now`: this run's own
    /// cooldown has passed (or it never left the member, or a success of any
    /// run since cleared it), and no other run's record says it is cooling.
    fn eligible(&self, index: usize, now: Millis) -> bool {
        let record = self.record.elsewhere(&self.keys[index]);
        let Some(left) = self.left_at_mut()[index] else {
            return !record.cooling;
        };
        let since = Duration::from_millis(now.saturating_sub(left).max(0) as u64);
        let cooled = self.fallback.cooldown.has_passed(since);
        let cleared = record.last_success_at.is_some_and(|success| success > left);
        (cooled || cleared) && !record.cooling
    }

    /// Whether another run holds member `index`: it recorded the member as
    /// cooling down, or the cooldown ended and another run of the fleet is
    /// probing it (holds the probe lease). When the record awaits its probe
    /// and the lease is free, this run takes it: its request is the probe.
    fn held_elsewhere(&self, index: usize) -> bool {
        let key = &self.keys[index];
        let record = self.record.elsewhere(key);
        record.cooling || (record.awaiting_probe && !self.record.take_probe_lease(key))
    }

    /// Whether a member after `index` may be asked now.
    fn a_later_member_may_be_asked(&self, index: usize) -> bool {
        let now = self.record.now();
        let blocked = self.budget_blocked();
        (index + 1..self.len()).any(|j| !blocked[j] && self.eligible(j, now))
    }

    /// The member a switch away from `from` goes to: the first later one
    /// that may be asked, else the last whose budgets are not spent (a run
    /// never ends without asking it), else the last. `None` when `from` is
    /// the last.
    pub(crate) fn next_after(&self, from: usize) -> Option<usize> {
        let last = self.len() - 1;
        if from >= last {
            return None;
        }
        let now = self.record.now();
        let blocked = self.budget_blocked();
        (from + 1..=last)
            .find(|&i| !blocked[i] && self.eligible(i, now))
            .or_else(|| (from + 1..=last).rev().find(|&i| !blocked[i]))
            .or(Some(last))
    }

    /// The members before `active` that cooled down enough to be probed at
    /// this step boundary (and whose own budgets are not spent), in chain
    /// order.
    pub(crate) fn due_probes(&self, active: usize) -> Vec<usize> {
        if active == 0 {
            return Vec::new();
        }
        let now = self.record.now();
        let blocked = self.budget_blocked();
        (0..active)
            .filter(|&i| !blocked[i] && self.eligible(i, now))
            .collect()
    }

    /// The run moved away from member `index` for `reason`. A `cooldown`
    /// or `budget` skip leaves the member to the shared record alone; any
    /// other reason starts its cooldown here, and but for `rate_limit` (a
    /// fact of the key's pacing record, not of the model's health) in the
    /// record too.
    pub(crate) fn left(&self, index: usize, reason: &SwitchReason) {
        if matches!(reason, SwitchReason::Cooldown | SwitchReason::Budget) {
            self.left_at_mut()[index] = None;
        } else {
            self.left_at_mut()[index] = Some(self.record.now());
            if *reason != SwitchReason::RateLimit {
                self.record.left(&self.keys[index], &reason.to_string());
            }
        }
    }

    /// Member `index` answered: this run's cooldown of it is over.
    pub(crate) fn answered(&self, index: usize) {
        self.left_at_mut()[index] = None;
    }

    fn left_at_mut(&self) -> std::sync::MutexGuard<'_, Vec<Option<Millis>>> {
        self.left_at.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The first-event deadline member `index` starts its requests with
    /// since it was slow once (`Duration::ZERO`: never was).
    fn learned_deadline(&self, index: usize) -> Duration {
        self.learned_deadlines
            .lock()
            .unwrap_or_else(|e| e.into_inner())[index]
    }

    /// Member `index`'s first event came late under `deadline`: later
    /// requests start with it.
    fn learn_deadline(&self, index: usize, deadline: Duration) {
        let mut learned = self
            .learned_deadlines
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        learned[index] = learned[index].max(deadline);
    }
}

/// Which requests a `MemberTurn` sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TurnKind {
    /// A member's turn in a step.
    Normal,
    /// One request after a cooldown, or after another run's recovery.
    Probe,
    /// An outage wait's probe: the run took the member's probe lease
    /// (`Outage::next`), and the wait records its outcome (`Outage::failed`).
    WaitProbe,
}

/// The rules one member's retry loop runs under in one step: a normal turn
/// or a probe.
pub(crate) struct MemberTurn<'g> {
    gate: &'g Gate,
    index: usize,
    /// The size of the request, which its first-event deadline grows with
    /// and pacing reserves.
    estimated_input_tokens: u64,
    /// Requests before giving up on the member.
    max_attempts: u32,
    /// A later member exists and this is not a probe: the loop may end
    /// early (long Retry-After, renewed record, skip) for the chain to move on.
    may_move_on: bool,
    /// The run has another member to go to (a later one, or after a probe
    /// the active one): a pacing wait too long to wait out moves on.
    can_leave: bool,
    /// The chain's last member or a lone model, not a probe: rate limits get
    /// their own, larger budget of tries.
    rate_limit_room: bool,
    kind: TurnKind,
    /// The request being sent took the fleet's due outage probe of the
    /// member (`Gate::fleet_turn`): its failure is recorded as the fleet's.
    fleet_probe: AtomicBool,
    /// Whether a glitch was already retried at once in this loop.
    glitch_retried: AtomicBool,
    /// What this turn has waited on rate limits so far.
    rate_limit_waited: Mutex<Duration>,
    /// A refusal in this turn set or changed the member's learned limit
    /// (its retries are not held by it: SPEC 24).
    taught: AtomicBool,
}

impl MemberTurn<'_> {
    fn key(&self) -> &HealthKey {
        &self.gate.keys[self.index]
    }

    /// Whether another run's record makes this member one to skip: it is
    /// held elsewhere and a later member may be asked (the last member is
    /// always asked; a run without a chain never skips).
    fn skip_for_cooldown(&self) -> bool {
        // Asked first, on every turn: it takes the probe lease when this
        // request would be the probe of another run's ended cooldown.
        let held = self.gate.held_elsewhere(self.index);
        self.may_move_on && held && self.gate.a_later_member_may_be_asked(self.index)
    }

    /// The wait before the next attempt: a glitch (the server had answered
    /// 200) is retried at once the first time; every other failure, and a
    /// second glitch, backs off, the exponent counting only the failures
    /// that backed off.
    fn wait(&self, failed: &Failed<'_>) -> Wait {
        if failed.error.after_ok() && !self.glitch_retried.swap(true, Ordering::Relaxed) {
            return Wait::For(Duration::ZERO);
        }
        let n = failed.attempt - u32::from(self.glitch_retried.load(Ordering::Relaxed));
        self.gate
            .retry
            .wait_after(n, failed.error.retry_after(), fastrand::f64())
    }

    /// How long a wait is when it is waited out: a Retry-After too long to
    /// wait is `max_backoff` (a run without a chain looks again then).
    fn waited_out(&self, wait: Wait) -> Duration {
        match wait {
            Wait::For(wait) => wait,
            Wait::TooLong => self.gate.retry.max_backoff,
        }
    }
}

impl MemberTurn<'_> {
    /// What `before_send` decides, without counting the request for the
    /// hedge budget (a hedge's admission counts it once it is sent).
    fn admission(&self, attempt: u32) -> Admission {
        if let Some(admission) = self.budget_admission() {
            return admission;
        }
        if let Some(admission) = self.outage_admission() {
            return admission;
        }
        if self.skip_for_cooldown() {
            return Admission::MoveOn(SwitchReason::Cooldown);
        }
        let gate = self.gate;
        let paced = gate.pacer.admit(
            gate.record.health(),
            self.index,
            self.estimated_input_tokens,
            gate.retry.max_backoff,
            // A turn whose refusal taught the limit retries as SPEC 4 says
            // rather than leaving for it (below).
            self.can_leave && !self.taught.load(Ordering::Relaxed),
            self.taught.load(Ordering::Relaxed),
        );
        let send = Admission::Send {
            first_event_deadline: self.first_event_deadline(attempt),
        };
        if let Some(Admission::Wait {
            wait,
            source: PaceSource::Learned,
            ..
        }) = &paced
        {
            // The retries of SPEC 4 still apply to the refusal that taught
            // the limit: they go as section 4 says; the limit paces the
            // next requests (SPEC 24).
            if self.taught.load(Ordering::Relaxed) {
                return send;
            }
            // A learned limit is a refusal's wait: it counts toward the
            // step's rate-limit budget, so a server that refuses
            // everything ends the step as SPEC 4 says.
            if !self.within_rate_limit_budget(*wait) {
                return Admission::MoveOn(SwitchReason::RateLimit);
            }
        }
        paced.unwrap_or(Admission::Send {
            first_event_deadline: self.first_event_deadline(attempt),
        })
    }
}

impl Referee for MemberTurn<'_> {
    fn before_send(&self, attempt: u32) -> Admission {
        let admission = self.admission(attempt);
        if let (Admission::Send { .. }, Some(hedging)) = (&admission, &self.gate.hedging) {
            hedging.count_request();
        }
        admission
    }

    fn after_failure(&self, failed: &Failed<'_>) -> Verdict {
        self.learn(failed.timing);
        if failed.reason == FailureReason::Http(429) {
            let gate = self.gate;
            if gate
                .pacer
                .refused(gate.record.health(), self.index, &failed.reason.to_string())
            {
                self.taught.store(true, Ordering::Relaxed);
            }
        }
        if let Some(verdict) = self.after_outage_probe(failed) {
            return verdict;
        }
        let strike = self
            .gate
            .record
            .strike(self.key(), &failed.reason.to_string());
        let wait = self.wait(failed);
        if !self.may_try_again(failed, wait) {
            // Switch after N (or, without a chain, the retry budget is spent).
            return Verdict::MoveOn(failed.reason.into());
        }
        if !self.may_move_on && self.gate.joins_the_wait(self.index) {
            // The last member, with --outage-wait, that the fleet already
            // found down: wait with the fleet (SPEC 18) rather than spend
            // the rest of the retries.
            return Verdict::MoveOn(failed.reason.into());
        }
        if self.may_move_on && (wait == Wait::TooLong || strike == Strike::RenewedElsewhere) {
            // Not waited out with a chain: a Retry-After beyond
            // `max_backoff`, or this failure was the probe of another run's
            // record. Without a chain the loop waits `max_backoff` instead.
            return Verdict::MoveOn(failed.reason.into());
        }
        if self.skip_for_cooldown() {
            return Verdict::MoveOn(SwitchReason::Cooldown);
        }
        let wait = self.waited_out(wait);
        self.count_rate_limit_wait(failed, wait);
        Verdict::Retry(wait)
    }

    fn reply_cap(&self, cap: u32) -> bool {
        self.gate.learn_reply_cap(self.index, cap)
    }

    fn succeeded(&self, timing: Timing) {
        self.learn(timing);
        if let Some(first_event) = timing.first_event {
            self.gate.record_first_event(self.index, first_event);
        }
        self.gate.record.success(self.key());
    }

    fn heard(&self, limits: &RateLimits) {
        let gate = self.gate;
        gate.pacer.heard(gate.record.health(), self.index, limits);
    }

    fn settled(&self, output_tokens: u64) {
        let gate = self.gate;
        gate.pacer
            .settle(gate.record.health(), self.index, output_tokens);
    }

    fn limit_notices(&self) -> Vec<LimitLearned> {
        self.gate.pacer.take_notices(self.index)
    }
}
