//! `retry:` and `fallback:` into the `RetryPolicy` and `FallbackPolicy`
//! the chain and its retry loop run under.

use crate::cli::Cli;
use crate::config::parse_hedge_after;
use crate::config::Config;
use crate::policy::{FallbackPolicy, HedgePolicy, RetryPolicy};
use crate::setup::SetupError;

use super::defaults;

/// The retry policy: each key over `RetryPolicy::default()`.
pub(super) fn retry(config: &Config) -> Result<RetryPolicy, SetupError> {
    let defaults = RetryPolicy::default();
    let r = &config.retry;
    let retry = RetryPolicy {
        attempts: r.attempts.unwrap_or(defaults.attempts),
        backoff: r.backoff.unwrap_or(defaults.backoff),
        max_backoff: r.max_backoff.unwrap_or(defaults.max_backoff),
        jitter: r.jitter.unwrap_or(defaults.jitter),
        stream_first_event_timeout: r
            .stream_first_event_timeout
            .unwrap_or(defaults.stream_first_event_timeout),
        stream_idle_timeout: r
            .stream_idle_timeout
            .unwrap_or(defaults.stream_idle_timeout),
        // Never fewer than `attempts`.
        rate_limit_attempts: r
            .rate_limit_attempts
            .unwrap_or(defaults.rate_limit_attempts)
            .max(r.attempts.unwrap_or(defaults.attempts)),
        rate_limit_budget: r.rate_limit_budget.unwrap_or(defaults.rate_limit_budget),
    };
    if !(0.0..=10.0).contains(&retry.jitter) {
        return Err(SetupError(
            "config retry.jitter: must be between 0 and 10".into(),
        ));
    }
    Ok(retry)
}

/// The fallback policy; `switch_after` defaults to `retry.attempts`.
pub(super) fn fallback(config: &Config, retry: &RetryPolicy) -> Result<FallbackPolicy, SetupError> {
    let cooldown = config.fallback.cooldown.unwrap_or(defaults::COOLDOWN);
    let switch_after = config.fallback.switch_after.unwrap_or(retry.attempts);
    Ok(FallbackPolicy::new(switch_after, cooldown, retry.attempts))
}

/// Hedging (SPEC 23): `--hedge-after` over `fallback.hedge_after` (both
/// `off` by default), and `fallback.hedge_budget` (10 %).
pub(super) fn hedge(cli: &Cli, config: &Config) -> Result<HedgePolicy, SetupError> {
    let defaults = HedgePolicy::default();
    let after = match &cli.hedge_after {
        Some(text) => {
            parse_hedge_after(text).map_err(|e| SetupError(format!("--hedge-after: {e}")))?
        }
        None => config.fallback.hedge_after.unwrap_or(defaults.after),
    };
    Ok(HedgePolicy {
        after,
        budget: config.fallback.hedge_budget.unwrap_or(defaults.budget),
    })
}
