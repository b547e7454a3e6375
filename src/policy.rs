//! Retry and fallback settings (config `retry:` and `fallback:`), as plain
//! values. A leaf module: settings build them, the chain and the health
//! record read them, and it imports nothing of ours.

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
        }
    }
}

/// How long a member that was left is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cooldown {
    For(Duration),
    /// Never return to a member that was left.
    Never,
}

/// Switching settings (config `fallback:`).
#[derive(Debug, Clone, PartialEq)]
pub struct FallbackPolicy {
    /// Transient failures on a member before moving on (at most `retry.attempts`).
    pub switch_after: u32,
    pub cooldown: Cooldown,
}
