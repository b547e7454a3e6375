//! Retry and fallback settings (config `retry:` and `fallback:`), as plain
//! values with the arithmetic that belongs to them: the backoff schedule,
//! and the cooldown's two meanings (this run's own, and the shared
//! record's, capped at an hour). A leaf module: settings build them, the
//! gate (`model/gate/`) and the adapters' transport read them, and it
//! imports nothing of ours.

use std::time::Duration;

/// Retry settings (config `retry:`).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Requests per model per step, the first included.
    pub attempts: u32,
    pub backoff: Duration,
    pub max_backoff: Duration,
    pub jitter: f64,
    pub stream_first_event_timeout: Duration,
    pub stream_idle_timeout: Duration,
    /// Tries a 429 or an overload (529) gets, the first included (never
    /// fewer than `attempts`).
    pub rate_limit_attempts: u32,
    /// The most a step waits on 429s and overloads before tries beyond
    /// `attempts` stop.
    pub rate_limit_budget: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 6,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(60),
            jitter: 0.5,
            stream_first_event_timeout: Duration::from_secs(30),
            stream_idle_timeout: Duration::from_secs(180),
            rate_limit_attempts: 8,
            rate_limit_budget: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    /// The stream timeouts every HTTP adapter applies.
    pub fn stream_timeouts(&self) -> StreamTimeouts {
        StreamTimeouts {
            first_event: self.stream_first_event_timeout,
            idle: self.stream_idle_timeout,
        }
    }
}

/// What adapters need of the retry policy: how long a streamed reply may
/// take to start, and to go quiet between events.
#[derive(Debug, Clone, Copy)]
pub struct StreamTimeouts {
    pub first_event: Duration,
    pub idle: Duration,
}

/// The wait before a retry, as the backoff schedule gives it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Wait {
    /// Wait this long, then retry.
    For(Duration),
    /// The server asked for a wait longer than `max_backoff`: not waited
    /// out with a fallback chain; without one, the run waits `max_backoff`.
    TooLong,
}

impl RetryPolicy {
    /// The wait after a failure that backs off, the `n`-th of the loop to
    /// do so (counted from 1): the server's Retry-After exactly, when it
    /// sent one (beyond `max_backoff` it is `Wait::TooLong`); else
    /// `backoff * 2^(n-1)` plus up to `jitter` of it, capped at
    /// `max_backoff`. `random` is in `[0, 1)`.
    pub fn wait_after(&self, n: u32, retry_after: Option<Duration>, random: f64) -> Wait {
        match retry_after {
            Some(asked) if asked > self.max_backoff => Wait::TooLong,
            Some(asked) => Wait::For(asked),
            None => {
                let base = self
                    .backoff
                    .saturating_mul(1u32 << (n.saturating_sub(1)).min(20));
                let jittered = base.mul_f64(1.0 + self.jitter.max(0.0) * random);
                Wait::For(jittered.min(self.max_backoff))
            }
        }
    }
}

/// The longest the shared health record keeps a model cooling down
/// (`cooldown: never` records this long; SPEC 13).
pub const MAX_RECORDED_COOLDOWN: Duration = Duration::from_secs(3600);
/// Strikes of at least the last minute always count (SPEC 13).
const MIN_STRIKE_WINDOW: Duration = Duration::from_secs(60);
/// A shared record whose cooldown ended less than this ago still awaits its
/// probe (one request, under the fleet's probe lease).
pub const PROBE_WINDOW: Duration = Duration::from_secs(3600);

/// How long a member that was left is skipped: the cooldown policy. It has
/// two readings, one per owner of a cooldown: this run's own (SPEC 5:
/// `never` stays away for good) and the shared record's (SPEC 13: at most
/// an hour, `never` included), so that a dead run's record cannot block a
/// fleet for longer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cooldown {
    For(Duration),
    /// Never return to a member that was left.
    Never,
}

impl Cooldown {
    /// This run's own rule: whether a member it left `since` ago may be
    /// asked again.
    pub fn has_passed(self, since: Duration) -> bool {
        match self {
            Cooldown::Never => false,
            Cooldown::For(cooldown) => since >= cooldown,
        }
    }

    /// How long the shared record keeps a member this run left (or struck
    /// out) cooling down: the cooldown, at most an hour.
    pub fn recorded(self) -> Duration {
        match self {
            Cooldown::Never => MAX_RECORDED_COOLDOWN,
            Cooldown::For(d) => d.min(MAX_RECORDED_COOLDOWN),
        }
    }

    /// How far back strikes count toward `switch_after`: the recorded
    /// cooldown, at least a minute.
    pub fn strike_window(self) -> Duration {
        self.recorded().max(MIN_STRIKE_WINDOW)
    }
}

/// Switching settings (config `fallback:`).
#[derive(Debug, Clone, PartialEq)]
pub struct FallbackPolicy {
    /// Transient failures on a member before moving on (1 to
    /// `retry.attempts`: `new` clamps it, the one place that does).
    pub switch_after: u32,
    pub cooldown: Cooldown,
}

impl FallbackPolicy {
    /// The policy for config `fallback:` under `retry.attempts`: a
    /// `switch_after` larger than `attempts` acts as `attempts`.
    pub fn new(switch_after: u32, cooldown: Cooldown, attempts: u32) -> FallbackPolicy {
        FallbackPolicy {
            switch_after: switch_after.clamp(1, attempts.max(1)),
            cooldown,
        }
    }
}

/// When a late first event is hedged (`fallback.hedge_after`,
/// `--hedge-after`; SPEC 23).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HedgeAfter {
    /// Never (the default).
    #[default]
    Off,
    /// After this long without a first event.
    After(Duration),
    /// At twice the 95th percentile of the model's recorded first-event
    /// times, grown for the request's size, never before 5 s.
    Auto,
}

/// Hedging settings (`fallback.hedge_after`, `fallback.hedge_budget`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HedgePolicy {
    pub after: HedgeAfter,
    /// The most of a run's requests that may be hedges, 0 to 1 (the run's
    /// first hedge is always allowed).
    pub budget: f64,
}

/// `fallback.hedge_budget`'s default: 10 %.
pub const DEFAULT_HEDGE_BUDGET: f64 = 0.10;

impl Default for HedgePolicy {
    fn default() -> Self {
        HedgePolicy {
            after: HedgeAfter::Off,
            budget: DEFAULT_HEDGE_BUDGET,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cooldown_has_two_readings() {
        let five = Cooldown::For(Duration::from_secs(300));
        assert!(!five.has_passed(Duration::from_secs(299)));
        assert!(five.has_passed(Duration::from_secs(300)));
        assert!(!Cooldown::Never.has_passed(Duration::from_secs(86_400 * 365)));
        assert_eq!(five.recorded(), Duration::from_secs(300));
        assert_eq!(
            Cooldown::Never.recorded(),
            MAX_RECORDED_COOLDOWN,
            "never records one hour"
        );
        let day = Cooldown::For(Duration::from_secs(86_400));
        assert_eq!(day.recorded(), MAX_RECORDED_COOLDOWN);
    }

    #[test]
    fn the_strike_window_is_the_cooldown_but_at_least_a_minute() {
        assert_eq!(
            Cooldown::For(Duration::from_secs(300)).strike_window(),
            Duration::from_secs(300)
        );
        assert_eq!(
            Cooldown::For(Duration::from_secs(1)).strike_window(),
            Duration::from_secs(60)
        );
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            jitter: 0.5,
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn backoff_doubles_from_the_first_wait() {
        let p = policy();
        assert_eq!(
            p.wait_after(1, None, 0.0),
            Wait::For(Duration::from_secs(1))
        );
        assert_eq!(
            p.wait_after(2, None, 0.0),
            Wait::For(Duration::from_secs(2))
        );
        assert_eq!(
            p.wait_after(5, None, 0.0),
            Wait::For(Duration::from_secs(16))
        );
    }

    #[test]
    fn jitter_adds_up_to_its_fraction() {
        let p = policy();
        assert_eq!(
            p.wait_after(2, None, 0.999_999_999),
            Wait::For(Duration::from_secs(2).mul_f64(1.0 + 0.5 * 0.999_999_999))
        );
    }

    #[test]
    fn capped_at_max_backoff() {
        let p = policy();
        assert_eq!(
            p.wait_after(10, None, 0.9),
            Wait::For(Duration::from_secs(60))
        );
    }

    #[test]
    fn retry_after_is_the_wait_exactly() {
        let p = policy();
        assert_eq!(
            p.wait_after(1, Some(Duration::from_secs(7)), 0.9),
            Wait::For(Duration::from_secs(7))
        );
        assert_eq!(
            p.wait_after(5, Some(Duration::from_secs(3)), 0.9),
            Wait::For(Duration::from_secs(3)),
            "not the larger backoff, no jitter"
        );
        assert_eq!(
            p.wait_after(1, Some(Duration::from_secs(60)), 0.0),
            Wait::For(Duration::from_secs(60)),
            "max_backoff itself is waited"
        );
    }

    #[test]
    fn the_default_backoff_is_half_a_second() {
        assert_eq!(RetryPolicy::default().backoff, Duration::from_millis(500));
    }

    #[test]
    fn a_retry_after_beyond_the_cap_is_reported_too_long() {
        let p = policy();
        let long = Some(Duration::from_secs(3600));
        assert_eq!(p.wait_after(1, long, 0.0), Wait::TooLong);
    }

    #[test]
    fn switch_after_is_clamped_once() {
        let c = Cooldown::Never;
        assert_eq!(FallbackPolicy::new(9, c, 6).switch_after, 6);
        assert_eq!(FallbackPolicy::new(0, c, 6).switch_after, 1);
        assert_eq!(FallbackPolicy::new(2, c, 6).switch_after, 2);
    }
}
