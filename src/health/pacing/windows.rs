//! Declared and learned limits (SPEC 24) as windows that refill evenly:
//! a window of `limit` per `per` holds at most `limit` units and gains
//! `limit / per` of them each millisecond. A declared window starts full;
//! the learned one starts empty. A request takes its need off every window
//! that applies, or, when one is short, waits until it holds the need
//! (a need above a whole window waits for a full window, never for ever).
//!
//! `WindowState` is one key's state in the pacing record beside the
//! published counts (`PaceRecord`): the level of each window, the learned
//! limit (`learned.rs`) and the sends of the last minutes. The memory and
//! SQLite stores apply these rules; the Redis store's Lua follows them,
//! and `store_tests.rs` holds all three to them.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::learned::{Learned, SendLog, FORGET_AFTER, MINUTE};
use super::{Millis, PaceLimit};

/// What a window counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    Requests,
    InputTokens,
    OutputTokens,
    /// Input and output together.
    Tokens,
}

impl Dim {
    /// The config key that declares it.
    pub fn key(self) -> &'static str {
        match self {
            Dim::Requests => "requests",
            Dim::InputTokens => "input_tokens",
            Dim::OutputTokens => "output_tokens",
            Dim::Tokens => "tokens",
        }
    }

    /// Its number in a record (and in the Redis scripts' arguments).
    pub(crate) fn code(self) -> u8 {
        match self {
            Dim::Requests => 1,
            Dim::InputTokens => 2,
            Dim::OutputTokens => 3,
            Dim::Tokens => 4,
        }
    }

    /// The published limit it reads as (`provider.paced`'s `limit`).
    pub fn pace_limit(self) -> PaceLimit {
        match self {
            Dim::Requests => PaceLimit::Requests,
            _ => PaceLimit::Tokens,
        }
    }

    fn words(self) -> &'static str {
        match self {
            Dim::Requests => "requests",
            Dim::InputTokens => "input tokens",
            Dim::OutputTokens => "output tokens",
            Dim::Tokens => "tokens",
        }
    }
}

/// One limit: `limit` units of `dim` per `per_ms`, refilling evenly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Window {
    pub dim: Dim,
    pub limit: u64,
    pub per_ms: Millis,
}

impl fmt::Display for Window {
    /// `24 requests/min`, `200000 input tokens/h`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per = match self.per_ms {
            1_000 => "s",
            60_000 => "min",
            3_600_000 => "h",
            86_400_000 => "day",
            _ => {
                return write!(
                    f,
                    "{} {} per {}ms",
                    self.limit,
                    self.dim.words(),
                    self.per_ms
                )
            }
        };
        write!(f, "{} {}/{per}", self.limit, self.dim.words())
    }
}

/// What one request asks of the windows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ask<'a> {
    /// The estimated input tokens (SPEC 17's estimate).
    pub input_tokens: u64,
    /// The reply budget, taken as output tokens until the usage is known.
    pub output_tokens: u64,
    /// The declared windows of the member.
    pub windows: &'a [Window],
    /// Taken off the windows even when one is short: a retry of the
    /// refusal that taught the limit goes as SPEC 4 says, and counts.
    pub force: bool,
}

impl Ask<'_> {
    /// A request of `tokens` estimated input tokens and no declared window.
    pub fn tokens(tokens: u64) -> Ask<'static> {
        Ask {
            input_tokens: tokens,
            output_tokens: 0,
            windows: &[],
            force: false,
        }
    }

    /// What this request takes off a window counting `dim`.
    pub fn need(&self, dim: Dim) -> u64 {
        match dim {
            Dim::Requests => 1,
            Dim::InputTokens => self.input_tokens,
            Dim::OutputTokens => self.output_tokens,
            Dim::Tokens => self.input_tokens.saturating_add(self.output_tokens),
        }
    }
}

/// Where a limit came from (SPEC 24's `source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaceSource {
    Published,
    Declared,
    Learned,
}

impl fmt::Display for PaceSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PaceSource::Published => "published",
            PaceSource::Declared => "declared",
            PaceSource::Learned => "learned",
        })
    }
}

/// How far a window's refill trails the clock: the provider counts a
/// request when it arrives, a little after it was reserved here (a first
/// request on a new connection later than the next one), so a window that
/// refilled on time would let a request in just before the provider's
/// own window holds it.
pub(crate) const REFILL_LAG: Millis = 250;

/// One window's level: units held at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    pub level: f64,
    pub at: Millis,
}

impl Bucket {
    /// A full window at `now`.
    pub fn full(w: &Window, now: Millis) -> Bucket {
        Bucket {
            level: w.limit as f64,
            at: now,
        }
    }

    /// The level at `now`, refilled evenly and never above the limit. A
    /// clock that went back keeps the level; one that went back further
    /// than a whole window restarts the time base there.
    pub fn refill(&mut self, w: &Window, now: Millis) {
        let now = now.saturating_sub(REFILL_LAG);
        let limit = w.limit as f64;
        if now >= self.at {
            let gained = (now - self.at) as f64 * limit / w.per_ms.max(1) as f64;
            self.level = (self.level + gained).min(limit);
            self.at = now;
        } else if self.at - now > w.per_ms {
            self.at = now;
        }
        if !self.level.is_finite() {
            self.level = limit;
        }
    }

    /// When the window (refilled) holds `need` (capped at the whole
    /// window); `None` when it does now. A window owes at most one whole
    /// window (`take`), so no wait is longer than two.
    pub fn ready_at(&self, w: &Window, need: u64) -> Option<Millis> {
        let want = need.min(w.limit) as f64;
        if self.level >= want {
            return None;
        }
        let ms = (want - self.level) * w.per_ms as f64 / w.limit.max(1) as f64;
        let ms = (ms.ceil() as Millis).clamp(1, w.per_ms.max(1).saturating_mul(2));
        Some(self.at.saturating_add(ms).saturating_add(REFILL_LAG))
    }
}

/// The window that holds a request back, and until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shortfall {
    pub window: Window,
    pub source: PaceSource,
    pub ready_at: Millis,
}

/// Most window levels one key keeps (declared windows are few; a record
/// someone filled with more is cut back).
const MAX_BUCKETS: usize = 32;

/// The learned limit's window id.
pub(crate) const LEARNED_ID: &str = "learned";

/// One key's declared and learned windows, and its recent sends.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowState {
    /// Levels by window id (`Window::id`, or `learned`).
    #[serde(default)]
    pub buckets: Vec<(String, Bucket)>,
    #[serde(default)]
    pub learned: Option<Learned>,
    #[serde(default)]
    pub sends: SendLog,
}

impl Window {
    /// The id of a declared window's level in the record.
    pub fn id(&self) -> String {
        format!("{}:{}:{}", self.dim.code(), self.limit, self.per_ms)
    }
}

impl WindowState {
    /// Reads a stored state; anything that is not one is a fresh state.
    pub fn parse(text: &str) -> WindowState {
        if text.len() > 64 * 1024 {
            return WindowState::default();
        }
        let mut state: WindowState = serde_json::from_str(text).unwrap_or_default();
        state.buckets.truncate(MAX_BUCKETS);
        state.sends.bound();
        state
    }

    /// The state as stored.
    pub fn text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Whether it holds nothing worth keeping.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty() && self.learned.is_none() && self.sends.is_empty()
    }

    fn bucket(&mut self, id: &str) -> Option<&mut Bucket> {
        self.buckets
            .iter_mut()
            .find(|(i, _)| i == id)
            .map(|(_, b)| b)
    }

    /// Every window that applies, with its level at `now` (a declared
    /// window seen for the first time starts full).
    fn levels(&mut self, ask: &Ask<'_>, now: Millis) -> Vec<(Window, PaceSource, String)> {
        self.forget_windows_but(ask.windows);
        let mut all: Vec<(Window, PaceSource, String)> = ask
            .windows
            .iter()
            .map(|w| (*w, PaceSource::Declared, w.id()))
            .collect();
        if let Some(learned) = &self.learned {
            all.push((learned.window(), PaceSource::Learned, LEARNED_ID.into()));
        }
        for (w, _, id) in &all {
            match self.buckets.iter().position(|(i, _)| i == id) {
                Some(at) => self.buckets[at].1.refill(w, now),
                None if self.buckets.len() < MAX_BUCKETS => {
                    self.buckets.push((id.clone(), Bucket::full(w, now)))
                }
                None => {}
            }
        }
        all
    }

    /// The window that holds `ask` back longest at `now`, if any (levels
    /// refilled on the way).
    pub fn short(&mut self, ask: &Ask<'_>, now: Millis) -> Option<Shortfall> {
        let all = self.levels(ask, now);
        all.into_iter()
            .filter_map(|(w, source, id)| {
                let ready_at = self.bucket(&id)?.ready_at(&w, ask.need(w.dim))?;
                Some(Shortfall {
                    window: w,
                    source,
                    ready_at: ready_at.max(now.saturating_add(1)),
                })
            })
            .max_by_key(|s| s.ready_at)
    }

    /// Takes `ask`'s need off every window that applies and logs the send
    /// (call after `short` found none short).
    pub fn take(&mut self, ask: &Ask<'_>, now: Millis) {
        for (w, _, id) in self.levels(ask, now) {
            if let Some(b) = self.bucket(&id) {
                // A request above what is held overdraws the window, by
                // one whole window at most.
                b.level = (b.level - ask.need(w.dim) as f64).max(-(w.limit as f64));
            }
        }
        if let Some(learned) = &mut self.learned {
            learned.minute_sent = learned.minute_sent.saturating_add(1);
        }
        self.sends.log(now);
    }

    /// Gives `unused` output tokens back to the declared windows that
    /// count output (the reply used less than its budget), never above a
    /// full window.
    pub fn settle(&mut self, windows: &[Window], unused: u64, now: Millis) {
        for w in windows
            .iter()
            .filter(|w| matches!(w.dim, Dim::OutputTokens | Dim::Tokens))
        {
            if let Some(b) = self.bucket(&w.id()) {
                b.refill(w, now);
                b.level = (b.level + unused as f64).min(w.limit as f64);
            }
        }
    }

    /// Drops the learned window's level with the limit (forgotten).
    pub(crate) fn drop_learned(&mut self) {
        self.learned = None;
        self.buckets.retain(|(id, _)| id != LEARNED_ID);
    }

    /// Sets the learned window's level to empty at `now`.
    pub(crate) fn empty_learned(&mut self, now: Millis) {
        let empty = Bucket {
            level: 0.0,
            at: now,
        };
        match self.bucket(LEARNED_ID) {
            Some(b) => *b = empty,
            None => self.buckets.push((LEARNED_ID.into(), empty)),
        }
    }

    /// Drops the levels of declared windows no longer in `keep` when the
    /// record holds too many (a config changed between runs).
    pub fn forget_windows_but(&mut self, keep: &[Window]) {
        if self.buckets.len() < MAX_BUCKETS {
            return;
        }
        let ids: Vec<String> = keep.iter().map(Window::id).collect();
        self.buckets
            .retain(|(id, _)| id == LEARNED_ID || ids.contains(id));
    }
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

#[cfg(test)]
mod tests;
