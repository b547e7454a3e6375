//! Pacing (SPEC 17, 24): whether a member's published, declared or
//! learned rate limit lets a request go now, and if not, how long to wait
//! or whether to move on. One engine for all three sources: the record
//! (`health::PacingStore`) reserves against all of them at once.
//!
//! Before each request (first attempt, retry or probe) the pacer reserves
//! the request on the shared pacing record (`health::PacingStore`): one
//! request and the request's estimated input tokens, in one atomic step.
//! When a count is short and its reset is ahead, the request waits until
//! the reset plus a random spread of up to a tenth of the wait (so runs
//! waiting on one key do not all send at the reset), then asks again. A
//! wait longer than `retry.max_backoff` is a Retry-After too long to wait
//! out: with somewhere to go the run moves on (`rate_limit`); without, it
//! waits `max_backoff` and looks again. After each response, its published
//! limits are folded into the record (429s included), and its usage gives
//! back the output tokens a declared window took beyond it. A rate-limit
//! refusal of a member with no declared limit teaches the record one
//! (`health/pacing/learned.rs`); each change is announced once
//! (`take_notices`: `provider.limit_learned`).

use std::sync::Mutex;
use std::time::Duration;

use super::Admission;
use crate::health::{
    Ask, Health, Heard, Millis, PaceKey, PaceSource, Published, Reservation, Reserved, Window,
};
use crate::model::ratelimit::{RateLimits, Window as Heard1};

/// The wait before looking again at a limit that started again at its
/// reset, is spent, and whose new reset no response has told yet (the
/// replies in flight will tell it).
pub(crate) const LOOK_AGAIN: Duration = Duration::from_secs(1);
/// The random spread added to a wait: up to this share of it.
const SPREAD: f64 = 0.1;
/// The reply budget a request is taken as when it sets none (the
/// provider's own default is not known here).
pub(crate) const DEFAULT_REPLY_BUDGET: u64 = 4096;

/// A member's limit changed (SPEC 24): `provider.limit_learned`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LimitLearned {
    pub requests_per_minute: u64,
    /// The refusal's reason, or `increase`.
    pub reason: String,
}

/// One member's pacing: its record, declared windows and reply budget,
/// and what its last reservation took.
struct Paced {
    key: PaceKey,
    declared: Vec<Window>,
    reply_budget: u64,
    /// When the last request was reserved (on the record's clock).
    sent_at: Millis,
    /// The output tokens the last reservation took.
    reserved_output: u64,
    /// Limit changes not yet announced.
    notices: Vec<LimitLearned>,
}

/// The run's pacing: each member's record key and declared limits, or
/// off (`pacing: off`).
pub(crate) struct Pacer {
    /// Chain order; `None` when pacing is off.
    members: Option<Mutex<Vec<Paced>>>,
}

impl Pacer {
    /// Pacing for members whose records are kept under `keys`.
    pub(crate) fn new(keys: Vec<PaceKey>) -> Pacer {
        let members = keys
            .into_iter()
            .map(|key| Paced {
                key,
                declared: Vec::new(),
                reply_budget: DEFAULT_REPLY_BUDGET,
                sent_at: Millis::MIN,
                reserved_output: 0,
                notices: Vec::new(),
            })
            .collect();
        Pacer {
            members: Some(Mutex::new(members)),
        }
    }

    /// No pacing: nothing is reserved, read, learned or waited for.
    pub(crate) fn off() -> Pacer {
        Pacer { members: None }
    }

    /// The same pacer with each member's declared windows and reply
    /// budget (chain order; SPEC 24).
    pub(crate) fn with_limits(self, limits: Vec<(Vec<Window>, Option<u32>)>) -> Pacer {
        if let Some(members) = &self.members {
            let mut members = members.lock().unwrap_or_else(|e| e.into_inner());
            for (m, (declared, budget)) in members.iter_mut().zip(limits) {
                m.declared = declared;
                m.reply_budget = budget.map_or(DEFAULT_REPLY_BUDGET, u64::from);
            }
        }
        self
    }

    fn member<R>(&self, index: usize, f: impl FnOnce(&mut Paced) -> R) -> Option<R> {
        let mut members = self
            .members
            .as_ref()?
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        members.get_mut(index).map(f)
    }

    /// Whether member `index` may be sent a request of `tokens` estimated
    /// input tokens now (`None`: nothing holds it back; the request is
    /// reserved), or must wait, or move on when the wait is longer than
    /// `max_backoff` and `can_leave` (there is another member to go to).
    /// With `force` the declared and learned windows take it even when
    /// short (a retry of the refusal that taught the limit).
    pub(crate) fn admit(
        &self,
        health: &Health,
        index: usize,
        tokens: u64,
        max_backoff: Duration,
        can_leave: bool,
        force: bool,
    ) -> Option<Admission> {
        let (key, declared, output) = self.member(index, |m| {
            (m.key.clone(), m.declared.clone(), m.reply_budget)
        })?;
        let ask = Ask {
            input_tokens: tokens,
            output_tokens: output,
            windows: &declared,
            force,
        };
        let (found, now) = health.pace(|store, now| Ok((store.reserve(&key, &ask, now)?, now)));
        let Reserved { outcome, grown } = found;
        self.member(index, |m| {
            if let Some(rpm) = grown {
                m.notices.push(LimitLearned {
                    requests_per_minute: rpm,
                    reason: "increase".into(),
                });
            }
            if outcome == Reservation::Taken {
                // A forced retry's refusal teaches nothing new: the limit
                // was set by the refusal it retries.
                if !force {
                    m.sent_at = now;
                }
                m.reserved_output = output;
            }
        });
        let (until, limit, source, rate) = match outcome {
            Reservation::Taken => return None,
            Reservation::Short { limit, reset_at } => (
                reset_at.map_or(LOOK_AGAIN, |at| until(at, now)),
                limit,
                PaceSource::Published,
                None,
            ),
            Reservation::Window(short) => (
                until(short.ready_at, now),
                short.window.dim.pace_limit(),
                short.source,
                Some(short.window),
            ),
        };
        if until > max_backoff {
            return Some(if can_leave {
                Admission::PacedAway { reset: until }
            } else {
                Admission::Wait {
                    wait: max_backoff,
                    limit,
                    source,
                    rate,
                }
            });
        }
        Some(Admission::Wait {
            wait: until + until.mul_f64(SPREAD * fastrand::f64()),
            limit,
            source,
            rate,
        })
    }

    /// Gives back member `index`'s reservation of one request and `tokens`
    /// tokens: its request was never sent (a hedge admitted too late).
    pub(crate) fn give_back(&self, health: &Health, index: usize, tokens: u64) {
        if let Some(key) = self.member(index, |m| m.key.clone()) {
            health.pace(|store, now| store.give_back(&key, tokens, now));
        }
    }

    /// Folds the limits a response of member `index` published into its
    /// record.
    pub(crate) fn heard(&self, health: &Health, index: usize, limits: &RateLimits) {
        let Some(key) = self.member(index, |m| m.key.clone()) else {
            return;
        };
        health.pace(|store, now| {
            let at = |w: Heard1| Published {
                limit: w.limit,
                remaining: w.remaining,
                reset_at: now.saturating_add(w.reset.as_millis().min(i64::MAX as u128) as i64),
            };
            let heard = Heard {
                requests: limits.requests.map(at),
                tokens: limits.tokens.map(at),
            };
            store.hear(&key, &heard, now)
        });
    }

    /// Member `index`'s reply used `output_tokens`: what its reservation
    /// took beyond that goes back to the windows that count output.
    pub(crate) fn settle(&self, health: &Health, index: usize, output_tokens: u64) {
        let Some((key, declared, unused)) = self.member(index, |m| {
            let unused = m.reserved_output.saturating_sub(output_tokens);
            m.reserved_output = 0;
            (m.key.clone(), m.declared.clone(), unused)
        }) else {
            return;
        };
        if unused == 0 || declared.is_empty() {
            return;
        }
        health.pace(|store, now| store.settle(&key, &declared, unused, now));
    }

    /// Member `index` was refused with a rate limit (`reason`): a member
    /// with no declared limit learns one from it, unless its key publishes
    /// its own (SPEC 24). Whether this refusal set or changed the limit.
    pub(crate) fn refused(&self, health: &Health, index: usize, reason: &str) -> bool {
        let Some((key, sent_at)) = self
            .member(index, |m| {
                m.declared.is_empty().then(|| (m.key.clone(), m.sent_at))
            })
            .flatten()
        else {
            return false;
        };
        let learned = health.pace(|store, now| store.refused(&key, sent_at, now));
        let Some(rpm) = learned else {
            return false;
        };
        self.member(index, |m| {
            m.notices.push(LimitLearned {
                requests_per_minute: rpm,
                reason: reason.to_string(),
            })
        });
        true
    }

    /// The limit changes of member `index` not yet announced.
    pub(crate) fn take_notices(&self, index: usize) -> Vec<LimitLearned> {
        self.member(index, |m| std::mem::take(&mut m.notices))
            .unwrap_or_default()
    }
}

/// The time from `now` to `at`, never negative.
fn until(at: Millis, now: Millis) -> Duration {
    Duration::from_millis(at.saturating_sub(now).max(0) as u64)
}

impl super::Gate {
    /// Folds `limits` into member `index`'s pacing record, as a response of
    /// it would (tests of the rules that read the record).
    #[cfg(test)]
    pub(crate) fn hear(&self, index: usize, limits: &RateLimits) {
        self.pacer.heard(self.record.health(), index, limits);
    }
}

#[cfg(test)]
mod tests;
