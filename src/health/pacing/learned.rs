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

use serde::{Deserialize, Serialize};

use super::windows::{Dim, Window, WindowState};
use super::Millis;

const MINUTE: Millis = 60_000;
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
    /// Its window: `rpm` requests a minute.
    pub fn window(&self) -> Window {
        Window {
            dim: Dim::Requests,
            limit: self.rpm.max(1),
            per_ms: MINUTE,
        }
    }

    /// A limit set at `now` to seven tenths of `sent` (at least 1).
    fn set(sent: u64, now: Millis) -> Learned {
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

impl WindowState {
    /// The learned limit at `now`: forgotten an hour after its last
    /// refusal; grown by a tenth (at least 1) for a whole minute that ended
    /// without a refusal and with sends at nine tenths of it or more.
    /// Returns the new limit when it grew.
    pub fn tick(&mut self, now: Millis) -> Option<u64> {
        let learned = self.learned.as_mut()?;
        if now.saturating_sub(learned.refused_at) >= FORGET_AFTER {
            self.drop_learned();
            return None;
        }
        if now < learned.minute_start.saturating_add(MINUTE) {
            return None;
        }
        let ended = learned.minute_start + MINUTE;
        let grown =
            (learned.minute_sent.saturating_mul(10) >= learned.rpm.saturating_mul(9)).then(|| {
                learned.rpm = learned.rpm.saturating_add((learned.rpm / 10).max(1));
                learned.changed_at = ended;
                learned.rpm
            });
        // Minutes after the first that ended since had no sends counted.
        let whole = (now - learned.minute_start) / MINUTE;
        learned.minute_start = learned.minute_start.saturating_add(whole * MINUTE);
        learned.minute_sent = 0;
        grown
    }

    /// A refusal at `now` of a request sent at `sent_at`: the limit is set
    /// to seven tenths of the last minute's sends, and its window emptied.
    /// Returns the limit when it is new or changed; a request sent before
    /// the limit was last set changes nothing.
    pub fn refused(&mut self, sent_at: Millis, now: Millis) -> Option<u64> {
        let before = self.learned;
        if before.is_some_and(|l| l.changed_at > sent_at) {
            if let Some(l) = &mut self.learned {
                l.refused_at = l.refused_at.max(now);
            }
            return None;
        }
        let learned = Learned::set(self.sends.last_minute(now), now);
        self.learned = Some(learned);
        self.empty_learned(now);
        (before.map(|b| b.rpm) != Some(learned.rpm)).then_some(learned.rpm)
    }

    /// The learned limit at `now`, if one is kept.
    pub fn learned_rpm(&self, now: Millis) -> Option<u64> {
        self.learned
            .filter(|l| now.saturating_sub(l.refused_at) < FORGET_AFTER)
            .map(|l| l.rpm)
    }
}
