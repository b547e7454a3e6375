//! Waiting out an outage (SPEC 18): the gate's answer when every member
//! failed on a transient or quota cause and the run may wait
//! (`--outage-wait`) instead of ending with exit 75. It says which member
//! to ask next and when, whose turn it is in the fleet, when another run's
//! request succeeded, and when a failing request joins a wait the fleet is
//! already in. `chain/wait.rs` walks these rules: it sleeps, sends and
//! records what people see.
//!
//! The schedule belongs to the shared record (SPEC 13), not to one run:
//! - the first waiting run of a fleet schedules each member's first probe
//!   `retry.backoff` after it began waiting; the others find it;
//! - when a probe is due, only the run that takes the member's probe lease
//!   (`OutageStore::take_due_probe`: due and free, in one step) sends it;
//! - a failed probe counts for the fleet, and the fleet's count `n` of
//!   failed probes of the member since it last answered sets the next
//!   interval, `retry.backoff * 2^n` capped at a minute (a server's
//!   Retry-After when longer); the member is recorded as cooling down for
//!   that interval, which ends the lease;
//! - a success any run records is a recovery: the waiting runs go on with
//!   that member within a random spread of `SPREAD` after it;
//! - the other waiting runs read the record (`POLL`) instead of asking.
//!
//! Every request to a member the fleet waits on goes through the same
//! lease (`Gate::fleet_turn`), not only the wait's own probes: a run that
//! has not begun to wait yet (it joins late, or its own retry falls due)
//! sends only when it takes the due probe; else it skips the member, or,
//! on its chain's last member with `--outage-wait`, joins the wait. The
//! lease ends only when its holder records the outcome, and a failed
//! probe's next due time is written before its lease ends
//! (`Gate::probe_failed`), so no run finds the old due time free.
//!
//! With the record off (or broken) the run keeps the same schedule alone.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::shared::LEASE_FOR;
use super::{Admission, Failed, Gate, MemberTurn, TurnKind, Verdict};
use crate::health::Millis;
use crate::model::reason::SwitchReason;

/// The longest interval between two probes of one member.
pub(crate) const MAX_INTERVAL: Duration = Duration::from_secs(60);
/// The shortest first interval: a `retry.backoff` of 0 must not spin.
const MIN_INTERVAL: Duration = Duration::from_millis(50);
/// How often a waiting run reads the shared record for a recovery or the
/// outcome of another run's probe.
pub(crate) const POLL: Duration = Duration::from_secs(1);
/// Runs that learn of a recovery from the record start again within this
/// random spread after it, so a fleet does not all come back at once.
pub(crate) const SPREAD: Duration = Duration::from_secs(5);

/// The interval before the next probe of a member after the fleet's
/// `failures` failed probes of it: `backoff` (at least `MIN_INTERVAL`)
/// doubled for each, capped at `MAX_INTERVAL`; `asked` (a server's
/// Retry-After) when longer.
pub(crate) fn interval(backoff: Duration, failures: u32, asked: Option<Duration>) -> Duration {
    let doubled = backoff
        .max(MIN_INTERVAL)
        .saturating_mul(1u32 << failures.min(16))
        .min(MAX_INTERVAL);
    asked.map_or(doubled, |asked| doubled.max(asked))
}

fn ms(d: Duration) -> Millis {
    d.as_millis().min(Millis::MAX as u128 / 2) as Millis
}

fn duration(ms: Millis) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

/// Whose turn a request to a member is, as the fleet's outage record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FleetTurn {
    /// No waiting run scheduled a probe of it.
    Free,
    /// Its probe is due and this run took the lease: the request is it.
    Probe,
    /// Another run's turn: not due yet, or its lease is held.
    Held,
}

impl MemberTurn<'_> {
    /// Before a request other than an outage wait's own probe: while the
    /// fleet waits on the member, only its due probe is sent (this run
    /// takes the lease), else the member is skipped (`cooldown`): the
    /// chain moves on, or, on its last member with `--outage-wait`, the run
    /// joins the wait. A run that does not wait asks its last member as
    /// always (SPEC 13).
    pub(super) fn outage_admission(&self) -> Option<Admission> {
        if self.kind == TurnKind::WaitProbe {
            return None;
        }
        match self.gate.fleet_turn(self.index) {
            FleetTurn::Free => None,
            FleetTurn::Probe => {
                self.fleet_probe.store(true, Ordering::Relaxed);
                None
            }
            FleetTurn::Held => {
                let skip = self.may_move_on
                    || self.kind == TurnKind::Probe
                    || !self.gate.outage_wait.is_zero();
                skip.then_some(Admission::MoveOn(SwitchReason::Cooldown))
            }
        }
    }

    /// After a failed outage probe: the wait's own is recorded by the wait
    /// (`Outage::failed`); one this turn took from the fleet is recorded
    /// here. Either way the member is left for this step, and the strike
    /// writes no cooling record (that would end the lease before the next
    /// probe is scheduled). `None` for any other request.
    pub(super) fn after_outage_probe(&self, failed: &Failed<'_>) -> Option<Verdict> {
        let taken = self.fleet_probe.swap(false, Ordering::Relaxed);
        if self.kind != TurnKind::WaitProbe && !taken {
            return None;
        }
        let reason = SwitchReason::from(failed.reason);
        self.gate
            .record
            .strike_only(self.key(), &failed.reason.to_string());
        if taken {
            self.gate
                .probe_failed(self.index, &reason, failed.error.retry_after());
        }
        Some(Verdict::MoveOn(reason))
    }
}

/// What a waiting run does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Send member `index` one request now: its probe is due and this run
    /// holds its probe lease.
    Probe(usize),
    /// Another run's request to member `index` succeeded: send it this
    /// step's request `after` this long (the spread).
    Follow { index: usize, after: Duration },
    /// Nothing to do for this long; then ask again.
    Sleep(Duration),
}

/// One member's schedule as this run knows it: a mirror of the record's,
/// and all there is with the record off.
#[derive(Debug, Clone, Copy, Default)]
struct Own {
    failures: u32,
    next_at: Option<Millis>,
}

/// One run's wait: when it began, its own schedule, the recoveries it
/// already followed, and each member's last reason.
#[derive(Debug)]
pub(crate) struct Outage {
    started: Millis,
    own: Vec<Own>,
    /// The last success of each member this run already went on with.
    followed: Vec<Option<Millis>>,
    reasons: Vec<SwitchReason>,
}

impl Gate {
    /// The same gate, waiting up to `wait` when every member is down (zero:
    /// never).
    pub(crate) fn with_outage_wait(self, wait: Duration) -> Gate {
        Gate {
            outage_wait: wait,
            ..self
        }
    }

    /// How long the run waits when every member is down (zero: it does not).
    pub(crate) fn outage_wait(&self) -> Duration {
        self.outage_wait
    }

    /// The run begins waiting; `reasons` holds each member's last reason
    /// (chain order), `last` the member whose failure ended the chain and
    /// the wait its server asked for (a Retry-After), if any. Schedules
    /// each member's first probe unless the fleet already did; member
    /// `last`'s no sooner than its server asked (SPEC 18: a Retry-After is
    /// taken when longer than the interval).
    pub(crate) fn begin_outage(
        &self,
        reasons: Vec<SwitchReason>,
        last: Option<(usize, Duration)>,
    ) -> Outage {
        let now = self.record.now();
        let mut outage = Outage {
            started: now,
            own: vec![Own::default(); self.len()],
            followed: vec![None; self.len()],
            reasons,
        };
        for index in 0..self.len() {
            let asked = last.filter(|(i, _)| *i == index).map(|(_, asked)| asked);
            outage.schedule_first(self, index, now, asked);
        }
        outage
    }

    /// The rules of an outage wait's probe of member `index`, whose probe
    /// lease this run took (`Outage::next`): one request, its outcome
    /// recorded by the wait (`Outage::failed`).
    pub(crate) fn wait_probe(&self, index: usize, estimated_input_tokens: u64) -> MemberTurn<'_> {
        MemberTurn {
            kind: TurnKind::WaitProbe,
            ..self.probe(index, estimated_input_tokens)
        }
    }

    /// What the fleet's outage record says of a request to member `index`
    /// now: nothing (no waiting run scheduled a probe of it), the request
    /// is the fleet's due probe and this run took its lease, or it is
    /// another run's turn (not due yet, or its lease is held).
    fn fleet_turn(&self, index: usize) -> FleetTurn {
        let key = &self.keys[index];
        let token = self.record.health().token();
        self.record
            .health()
            .with(|store, now| {
                if store.read_outage(key)?.next_probe_at.is_none() {
                    return Ok(FleetTurn::Free);
                }
                Ok(if store.take_due_probe(key, token, now, LEASE_FOR)? {
                    FleetTurn::Probe
                } else {
                    FleetTurn::Held
                })
            })
            .unwrap_or(FleetTurn::Free)
    }

    /// A probe of member `index` in an outage failed for `reason` (the
    /// server asked for `asked` more): one more failed probe for the fleet,
    /// the next one scheduled after the interval its count gives, then the
    /// member recorded as cooling down until then, which ends this run's
    /// lease: in that order, so no run finds the old due time free.
    /// Returns the fleet's count and the next due time; `None` with the
    /// record off.
    fn probe_failed(
        &self,
        index: usize,
        reason: &SwitchReason,
        asked: Option<Duration>,
    ) -> Option<(u32, Millis)> {
        let key = &self.keys[index];
        let health = self.record.health();
        let failures = health.with(|store, now| store.count_failed_probe(key, now))?;
        let at = self.record.now() + ms(interval(self.retry.backoff, failures, asked));
        health.with(|store, now| store.schedule_probe(key, at, now, true))?;
        self.record.cool_until(key, at, &reason.to_string());
        Some((failures, at))
    }

    /// Whether a failed request to member `index` joins a wait its fleet is
    /// already in, instead of spending the rest of its retries: the run
    /// waits out outages, and the shared record says the member is down
    /// (cooling down, or a waiting run scheduled its next probe).
    pub(crate) fn joins_the_wait(&self, index: usize) -> bool {
        if self.outage_wait.is_zero() {
            return false;
        }
        let key = &self.keys[index];
        self.record
            .health()
            .with(|store, now| {
                let cooling = store.read(key)?.cooling_until.is_some_and(|u| u > now);
                Ok(cooling || store.read_outage(key)?.next_probe_at.is_some())
            })
            .unwrap_or(false)
    }
}

impl Outage {
    /// Each member's last reason (chain order).
    pub(crate) fn reasons(&self) -> &[SwitchReason] {
        &self.reasons
    }

    /// What to do now: follow a recovery another run recorded, else probe
    /// the first member (chain order) whose probe is due and whose lease
    /// this run takes, else sleep until the next one is due (reading the
    /// record again within `POLL` when it is shared). Members whose own
    /// budget is spent (SPEC 19) are not probed; when that is all of them,
    /// the first is asked at once, so its budget ends the run.
    pub(crate) fn next(&mut self, gate: &Gate) -> Next {
        let now = gate.record.now();
        let blocked = gate.budget_blocked();
        if blocked.iter().all(|b| *b) {
            return Next::Probe(0);
        }
        if let Some(follow) = self.follow(gate, now) {
            return follow;
        }
        let shared = gate.record.health().with(|_, _| Ok(())).is_some();
        let mut wake = if shared { POLL } else { MAX_INTERVAL };
        for index in (0..gate.len()).filter(|i| !blocked[*i]) {
            let due = self.due_at(gate, index, now);
            if due > now {
                wake = wake.min(duration(due - now));
            } else if self.take(gate, index) {
                return Next::Probe(index);
            }
        }
        Next::Sleep(wake)
    }

    /// A request of this wait to member `index` failed for `reason` (the
    /// server asked for `asked` more): one more failed probe for the fleet,
    /// the next one scheduled after the interval its count gives, and the
    /// member recorded as cooling down until then (ending the lease).
    pub(crate) fn failed(
        &mut self,
        gate: &Gate,
        index: usize,
        reason: SwitchReason,
        asked: Option<Duration>,
    ) {
        let own = &mut self.own[index];
        *own = match gate.probe_failed(index, &reason, asked) {
            Some((failures, at)) => Own {
                failures,
                next_at: Some(at),
            },
            None => {
                let failures = own.failures + 1;
                let at = gate.record.now() + ms(interval(gate.retry.backoff, failures, asked));
                Own {
                    failures,
                    next_at: Some(at),
                }
            }
        };
        self.reasons[index] = reason;
    }

    /// How long until this run tries a member next (zero when one is due).
    pub(crate) fn next_try(&self, gate: &Gate) -> Duration {
        let now = gate.record.now();
        (0..gate.len())
            .filter_map(|index| {
                let key = &gate.keys[index];
                gate.record
                    .health()
                    .with(|store, _| store.read_outage(key))
                    .and_then(|record| record.next_probe_at)
                    .or(self.own[index].next_at)
            })
            .map(|at| duration(at - now))
            .min()
            .unwrap_or_default()
    }

    /// A success of a member recorded since the wait began (by any run)
    /// that this run has not followed yet: follow it at a random point
    /// within `SPREAD` after it.
    fn follow(&mut self, gate: &Gate, now: Millis) -> Option<Next> {
        for index in 0..gate.len() {
            let key = &gate.keys[index];
            let record = gate.record.health().with(|store, _| store.read(key))?;
            let Some(at) = record.last_success_at else {
                continue;
            };
            if at <= self.started || self.followed[index].is_some_and(|seen| at <= seen) {
                continue;
            }
            self.followed[index] = Some(at);
            let start = at + (ms(SPREAD) as f64 * fastrand::f64()) as Millis;
            let after = duration(start - now);
            return Some(Next::Follow { index, after });
        }
        None
    }

    /// Member `index`'s first probe of this wait: as `due_at`, but no
    /// sooner than `asked` from now (the wait the server asked for in the
    /// failure that ended the chain), moving the fleet's schedule later
    /// when it is sooner.
    fn schedule_first(&mut self, gate: &Gate, index: usize, now: Millis, asked: Option<Duration>) {
        let Some(asked) = asked else {
            self.due_at(gate, index, now);
            return;
        };
        let key = &gate.keys[index];
        let backoff = gate.retry.backoff;
        let shared = gate.record.health().with(|store, now| {
            let record = store.read_outage(key)?;
            let wanted = now + ms(interval(backoff, record.failures, Some(asked)));
            let at = match record.next_probe_at {
                Some(at) if at >= wanted => at,
                _ => store.schedule_probe(key, wanted, now, true)?,
            };
            Ok((at, record.failures))
        });
        let own = &mut self.own[index];
        *own = match shared {
            Some((at, failures)) => Own {
                failures,
                next_at: Some(at),
            },
            None => Own {
                failures: own.failures,
                next_at: Some(now + ms(interval(backoff, own.failures, Some(asked)))),
            },
        };
    }

    /// When member `index`'s next probe is due: the record's schedule,
    /// which this run sets (one interval from now) when it has none, and
    /// keeps a copy of; its own copy with the record off (so a record that
    /// fails mid-wait leaves the run on the fleet's last schedule).
    fn due_at(&mut self, gate: &Gate, index: usize, now: Millis) -> Millis {
        let key = &gate.keys[index];
        let backoff = gate.retry.backoff;
        let shared = gate.record.health().with(|store, now| {
            let record = store.read_outage(key)?;
            let at = match record.next_probe_at {
                Some(at) => at,
                None => {
                    let at = now + ms(interval(backoff, record.failures, None));
                    store.schedule_probe(key, at, now, false)?
                }
            };
            Ok((at, record.failures))
        });
        let own = &mut self.own[index];
        match shared {
            Some((at, failures)) => {
                *own = Own {
                    failures,
                    next_at: Some(at),
                };
                at
            }
            None => *own
                .next_at
                .get_or_insert(now + ms(interval(backoff, own.failures, None))),
        }
    }

    /// Takes member `index`'s probe lease if its probe is due and no other
    /// run holds it; with the record off there is nobody to share with.
    fn take(&self, gate: &Gate, index: usize) -> bool {
        let key = &gate.keys[index];
        let token = gate.record.health().token();
        gate.record
            .health()
            .with(|store, now| store.take_due_probe(key, token, now, LEASE_FOR))
            .unwrap_or(true)
    }
}

#[cfg(test)]
mod tests;
