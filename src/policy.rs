//! Retry and fallback settings (config `retry:` and `fallback:`), as plain
//! values. A leaf module: settings build them, the chain, the adapters'
//! transport and the health record read them, and it imports nothing of ours.

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
