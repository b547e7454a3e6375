//! Pacing (SPEC 17): whether a member's published rate limit lets a
//! request go now, and if not, how long to wait or whether to move on.
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
//! limits are folded into the record (429s included).

use std::time::Duration;

use super::Admission;
use crate::health::{Health, Heard, PaceKey, Published, Reservation};
use crate::model::ratelimit::{RateLimits, Window};

/// The wait before looking again at a limit that started again at its
/// reset, is spent, and whose new reset no response has told yet (the
/// replies in flight will tell it).
pub(crate) const LOOK_AGAIN: Duration = Duration::from_secs(1);
/// The random spread added to a wait: up to this share of it.
const SPREAD: f64 = 0.1;

/// The run's pacing: each member's record key, or off (`pacing: off`).
pub(crate) struct Pacer {
    /// Chain order; `None` when pacing is off.
    keys: Option<Vec<PaceKey>>,
}

impl Pacer {
    /// Pacing for members whose records are kept under `keys`.
    pub(crate) fn new(keys: Vec<PaceKey>) -> Pacer {
        Pacer { keys: Some(keys) }
    }

    /// No pacing: nothing is reserved, read or waited for.
    pub(crate) fn off() -> Pacer {
        Pacer { keys: None }
    }

    /// Whether member `index` may be sent a request of `tokens` estimated
    /// input tokens now (`None`: nothing holds it back; the request is
    /// reserved), or must wait, or move on when the wait is longer than
    /// `max_backoff` and `can_leave` (there is another member to go to).
    pub(crate) fn admit(
        &self,
        health: &Health,
        index: usize,
        tokens: u64,
        max_backoff: Duration,
        can_leave: bool,
    ) -> Option<Admission> {
        let key = self.keys.as_ref().and_then(|keys| keys.get(index))?;
        let (found, now) = health.pace(|store, now| Ok((store.reserve(key, tokens, now)?, now)));
        let Reservation::Short { limit, reset_at } = found else {
            return None;
        };
        let until_reset = reset_at.map_or(LOOK_AGAIN, |at| {
            Duration::from_millis(at.saturating_sub(now).max(0) as u64)
        });
        if until_reset > max_backoff {
            return Some(if can_leave {
                Admission::PacedAway { reset: until_reset }
            } else {
                Admission::Wait {
                    wait: max_backoff,
                    limit,
                }
            });
        }
        Some(Admission::Wait {
            wait: until_reset + until_reset.mul_f64(SPREAD * fastrand::f64()),
            limit,
        })
    }

    /// Gives back member `index`'s reservation of one request and `tokens`
    /// tokens: its request was never sent (a hedge admitted too late).
    pub(crate) fn give_back(&self, health: &Health, index: usize, tokens: u64) {
        if let Some(key) = self.keys.as_ref().and_then(|keys| keys.get(index)) {
            health.pace(|store, now| store.give_back(key, tokens, now));
        }
    }

    /// Folds the limits a response of member `index` published into its
    /// record.
    pub(crate) fn heard(&self, health: &Health, index: usize, limits: &RateLimits) {
        let Some(key) = self.keys.as_ref().and_then(|keys| keys.get(index)) else {
            return;
        };
        health.pace(|store, now| {
            let at = |w: Window| Published {
                limit: w.limit,
                remaining: w.remaining,
                reset_at: now.saturating_add(w.reset.as_millis().min(i64::MAX as u128) as i64),
            };
            let heard = Heard {
                requests: limits.requests.map(at),
                tokens: limits.tokens.map(at),
            };
            store.hear(key, &heard, now)
        });
    }
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
