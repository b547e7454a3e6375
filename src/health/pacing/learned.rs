//! Learned limits (SPEC 24): a member that publishes and declares nothing
//! learns its key's limit from a refusal, as TCP learns a path's capacity:
//! a refusal sets the limit to seven tenths of what the fleet sent in the
//! minute before (never below one request a minute), and each whole minute
//! without a refusal in which the fleet sent nine tenths of the limit or
//! more grows it by a tenth (at least one). Decreasing by a factor and
//! growing by a step, a fleet settles just under the key's real limit.
//! The limit is forgotten an hour after its last refusal.
//!
//! A refusal of a request sent before the limit was last set says nothing
//! new (the limit already answers it), so a burst of refusals in flight
//! lowers the limit once, as TCP halves its window once per loss event.
//! The rules that move the limit are `WindowState`'s (`windows.rs`).

use serde::{Deserialize, Serialize};

use super::Millis;

pub(super) const MINUTE: Millis = 60_000;
/// How long a learned limit outlives its last refusal.
pub const FORGET_AFTER: Millis = 3_600_000;
/// How many seconds of sends a key keeps (enough for the minute before
/// any refusal).
const KEEP_SECONDS: i64 = 120;

/// A limit learned from refusals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Learned {
    /// The limit, in requests a minute.
    pub rpm: u64,
    /// When it was learned or last changed.
    pub changed_at: Millis,
    /// The last refusal.
    pub refused_at: Millis,
    /// The start of the whole minute being counted.
    pub minute_start: Millis,
    /// Requests sent since `minute_start`.
    pub minute_sent: u64,
}

impl Learned {
    /// A limit set at `now` to seven tenths of `sent` (at least 1).
    pub(super) fn set(sent: u64, now: Millis) -> Learned {
        Learned {
            rpm: (sent.saturating_mul(7) / 10).max(1),
            changed_at: now,
            refused_at: now,
            minute_start: now,
            minute_sent: 0,
        }
    }
}

/// Requests sent per second, the last `KEEP_SECONDS` of them, oldest
/// first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SendLog(pub Vec<(i64, u64)>);

impl SendLog {
    /// Counts one send at `now`.
    pub fn log(&mut self, now: Millis) {
        let second = now.div_euclid(1000);
        self.0
            .retain(|(s, _)| *s > second - KEEP_SECONDS && *s <= second);
        match self.0.last_mut() {
            Some((s, n)) if *s == second => *n = n.saturating_add(1),
            _ => self.0.push((second, 1)),
        }
    }

    /// The sends in the minute up to `now` (its second included).
    pub fn last_minute(&self, now: Millis) -> u64 {
        let second = now.div_euclid(1000);
        self.0
            .iter()
            .filter(|(s, _)| *s > second - 60 && *s <= second)
            .map(|(_, n)| *n)
            .fold(0, u64::saturating_add)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Cuts a log read from a record down to its bound.
    pub fn bound(&mut self) {
        let len = self.0.len();
        if len > KEEP_SECONDS as usize {
            self.0.drain(..len - KEEP_SECONDS as usize);
        }
    }
}
