//! The first-event deadline of one request (SPEC 4 "Deadlines that fit the
//! request"): `retry.stream_first_event_timeout`, plus 10 s for every 100K
//! tokens of the request's estimated input (in proportion), doubled on each
//! retry of the same request, never past `retry.stream_idle_timeout`. A
//! member whose first event once came after more than half of its deadline
//! starts its later requests in the run with that longer deadline.

use std::time::Duration;

use super::{MemberTurn, Timing};
use crate::policy::RetryPolicy;

/// How much a request's first-event deadline grows per token of input.
const GROWTH_PER_100K_TOKENS: Duration = Duration::from_secs(10);

/// The deadline for attempt `attempt` (from 1) of a request of
/// `estimated_input_tokens`, starting from `learned` when it is longer.
pub(super) fn first_event_deadline(
    retry: &RetryPolicy,
    estimated_input_tokens: u64,
    learned: Duration,
    attempt: u32,
) -> Duration {
    let configured = retry.stream_first_event_timeout;
    let growth = size_growth(estimated_input_tokens);
    let base = configured.saturating_add(growth).max(learned);
    let doubled = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    doubled.min(retry.stream_idle_timeout).max(configured)
}

/// What a request of `estimated_input_tokens` adds to its first-event
/// deadline (and to an `auto` hedge delay): 10 s per 100K, in proportion.
pub(super) fn size_growth(estimated_input_tokens: u64) -> Duration {
    GROWTH_PER_100K_TOKENS.mul_f64(estimated_input_tokens as f64 / 100_000.0)
}

/// Whether a request's timing says its server is slow to start: its first
/// event came after more than half of its deadline.
pub(super) fn was_slow(timing: Timing) -> bool {
    timing
        .first_event
        .is_some_and(|first| first > timing.deadline / 2)
}

impl MemberTurn<'_> {
    /// This turn's deadline for attempt `attempt`.
    pub(super) fn first_event_deadline(&self, attempt: u32) -> Duration {
        let learned = self.gate.learned_deadline(self.index);
        first_event_deadline(
            &self.gate.retry,
            self.estimated_input_tokens,
            learned,
            attempt,
        )
    }

    /// Remembers a slow first event: later requests to this member start
    /// with the deadline this one had.
    pub(super) fn learn(&self, timing: Timing) {
        if was_slow(timing) {
            self.gate.learn_deadline(self.index, timing.deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(first: u64, idle: u64) -> RetryPolicy {
        RetryPolicy {
            stream_first_event_timeout: Duration::from_secs(first),
            stream_idle_timeout: Duration::from_secs(idle),
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn grows_with_the_request_and_doubles_per_retry_up_to_the_idle_limit() {
        let r = retry(30, 180);
        let secs = |tokens, attempt| first_event_deadline(&r, tokens, Duration::ZERO, attempt);
        assert_eq!(secs(0, 1), Duration::from_secs(30));
        assert_eq!(secs(100_000, 1), Duration::from_secs(40));
        assert_eq!(secs(50_000, 1), Duration::from_secs(35), "in proportion");
        assert_eq!(secs(600_000, 1), Duration::from_secs(90));
        assert_eq!(secs(0, 2), Duration::from_secs(60));
        assert_eq!(secs(0, 3), Duration::from_secs(120));
        assert_eq!(
            secs(0, 4),
            Duration::from_secs(180),
            "never past the idle limit"
        );
        assert_eq!(secs(0, 40), Duration::from_secs(180));
        assert_eq!(secs(u64::MAX, 1), Duration::from_secs(180));
    }

    #[test]
    fn a_learned_deadline_is_the_floor_and_the_configured_one_is_never_cut() {
        let r = retry(30, 180);
        let learned = Duration::from_secs(60);
        assert_eq!(first_event_deadline(&r, 0, learned, 1), learned);
        assert_eq!(
            first_event_deadline(&r, 0, learned, 2),
            Duration::from_secs(120)
        );
        // A first-event timeout configured above the idle limit stays.
        let odd = retry(300, 180);
        assert_eq!(
            first_event_deadline(&odd, 0, Duration::ZERO, 1),
            Duration::from_secs(300)
        );
    }

    #[test]
    fn a_first_event_past_half_the_deadline_is_slow() {
        let deadline = Duration::from_secs(60);
        let at = |s| Timing {
            first_event: Some(Duration::from_secs(s)),
            deadline,
        };
        assert!(!was_slow(at(30)));
        assert!(was_slow(at(31)));
        assert!(!was_slow(Timing {
            first_event: None,
            deadline
        }));
    }
}
