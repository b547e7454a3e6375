//! How many tries a member gets in one turn (SPEC 4 "Rate limits get a
//! budget of their own"): `switch_after` in a chain, `attempts` for the
//! chain's last member and a lone model; and for those two, a 429 or an
//! overload (529) is tried up to `retry.rate_limit_attempts` times as long
//! as the turn's waits on rate limits add up to at most
//! `retry.rate_limit_budget`. Rate limits clear within a minute; a 503
//! often does not.

use std::time::Duration;

use super::{Failed, MemberTurn};
use crate::model::reason::FailureReason;
use crate::policy::Wait;

/// Whether a failure is a rate limit or an overload: it clears by waiting.
pub(super) fn is_rate_limit(reason: FailureReason) -> bool {
    matches!(reason, FailureReason::Http(429) | FailureReason::Http(529))
}

impl MemberTurn<'_> {
    /// Whether the member may be asked again after `failed`, whose wait
    /// would be `wait`.
    pub(super) fn may_try_again(&self, failed: &Failed<'_>, wait: Wait) -> bool {
        if failed.attempt < self.max_attempts {
            return true;
        }
        if !(self.rate_limit_room && is_rate_limit(failed.reason)) {
            return false;
        }
        let retry = &self.gate.retry;
        let waited = *self
            .rate_limit_waited
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        failed.attempt < retry.rate_limit_attempts.max(self.max_attempts)
            && waited.saturating_add(self.waited_out(wait)) <= retry.rate_limit_budget
    }

    /// Adds a pacing wait for a learned limit to the turn's waits on rate
    /// limits; whether they still fit `retry.rate_limit_budget`.
    pub(super) fn within_rate_limit_budget(&self, wait: Duration) -> bool {
        let mut waited = self
            .rate_limit_waited
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *waited = waited.saturating_add(wait);
        *waited <= self.gate.retry.rate_limit_budget
    }

    /// Adds a wait after a rate limit to the turn's budget.
    pub(super) fn count_rate_limit_wait(&self, failed: &Failed<'_>, wait: Duration) {
        if is_rate_limit(failed.reason) {
            let mut waited = self
                .rate_limit_waited
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            *waited = waited.saturating_add(wait);
        }
    }
}
