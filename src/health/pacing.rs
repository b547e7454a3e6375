//! The pacing record (SPEC 17): what a provider last published about one
//! key's rate limits, beside the cooling records of SPEC 13 and in the same
//! stores, so that every run on a key shares its limit.
//!
//! The record keeps facts: each limit's count and when it resets. Its two
//! operations are one atomic step in every store (`PacingStore`), and their
//! rules are written once here, on `PaceRecord`, for the memory and SQLite
//! stores (the Redis store's Lua scripts follow the same rules, and
//! `store_tests.rs` holds all three to them):
//!
//! - **reserve**: a request takes one request and its estimated input
//!   tokens off the record, unless a count is short (no request left, or
//!   fewer tokens than it needs); then nothing is taken and the record says
//!   which limit is short and when it resets. A count whose reset has
//!   passed starts again from its limit (a new count, whose reset the next
//!   response tells), or is forgotten when its limit is unknown.
//! - **give back**: a reservation for a request that was never sent (a
//!   hedge admitted too late to go) returns its request and tokens to the
//!   counts, never above a count's limit, and nothing to a count whose
//!   reset has passed since (a new window owes it nothing).
//! - **hear**: a response's figures may lower a count but never raise it
//!   before its reset has passed (a reply read late must not give back
//!   what other runs reserved since); the first response after a reset
//!   starts the new count.
//!
//! Beside the published counts, each key keeps its declared and learned
//! windows (SPEC 24, `windows.rs`, `learned.rs`): a reservation checks the
//! published counts and every window in the same atomic step, and takes
//! from all of them or from none.
//!
//! Whether to wait, how long and whether to move on instead is the gate's
//! (`model::gate::pacing`).

mod learned;
pub(crate) mod windows;

use std::fmt;

pub use learned::{Learned, SendLog, FORGET_AFTER};
pub use windows::{Ask, Bucket, Dim, PaceSource, Shortfall, Window, WindowState};

use super::{Millis, StoreError};

/// Whose limit a record is: a model spec at an endpoint, on one API key,
/// known only by a one-way fingerprint (never the key).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PaceKey {
    pub model: String,
    pub endpoint: String,
    /// A salted SHA-256 of the key, in hex (empty without a key).
    pub account: String,
}

/// What the key's fingerprint is salted with: a fixed string, so that every
/// run on one key finds the same record, and a table of fingerprints of
/// common words made for other programs does not apply.
const SALT: &[u8] = b"tinyagent pacing record v1\0";

impl PaceKey {
    /// The record of `health`'s model and endpoint on `api_key`, which is
    /// hashed here and goes no further.
    pub fn new(health: super::HealthKey, api_key: Option<&str>) -> PaceKey {
        use sha2::{Digest, Sha256};
        let account = match api_key.filter(|k| !k.is_empty()) {
            None => String::new(),
            Some(api_key) => {
                let digest = Sha256::new()
                    .chain_update(SALT)
                    .chain_update(api_key.as_bytes())
                    .finalize();
                digest[..16].iter().map(|b| format!("{b:02x}")).collect()
            }
        };
        PaceKey {
            model: health.model,
            endpoint: health.endpoint,
            account,
        }
    }
}

/// Which published limit holds a request back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaceLimit {
    Requests,
    Tokens,
}

impl fmt::Display for PaceLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PaceLimit::Requests => "requests",
            PaceLimit::Tokens => "tokens",
        })
    }
}

/// One limit's count in the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    /// The limit itself, when a response stated it.
    pub limit: Option<u64>,
    /// What is left of it, reservations taken off.
    pub remaining: u64,
    /// When it is whole again; `None` for a count that started again at a
    /// reset and awaits its first response.
    pub reset_at: Option<Millis>,
}

/// What a response published about one limit, on the record's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    pub limit: Option<u64>,
    pub remaining: u64,
    pub reset_at: Millis,
}

/// What a response published (either limit may be missing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Heard {
    pub requests: Option<Published>,
    pub tokens: Option<Published>,
}

/// One key's record: a count per published limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PaceRecord {
    pub requests: Option<Count>,
    pub tokens: Option<Count>,
}

/// What a reservation found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reservation {
    /// Taken off the record (or the record holds no count: nothing to take).
    #[default]
    Taken,
    /// Nothing taken: the published `limit` is short until `reset_at`
    /// (`None`: it started again and no response has told its reset yet).
    Short {
        limit: PaceLimit,
        reset_at: Option<Millis>,
    },
    /// Nothing taken: a declared or learned window holds the request back.
    Window(Shortfall),
}

/// A reservation's outcome, and the learned limit when this step grew it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reserved {
    pub outcome: Reservation,
    pub grown: Option<u64>,
}

/// The pacing records. Each call is one atomic step, safe with other
/// processes calling at once.
pub trait PacingStore: Send {
    /// Takes `ask` off `key`'s record at `now` (one request and its tokens
    /// off the published counts, its need off every window), or finds one
    /// short and takes nothing (`reserve`).
    fn reserve(
        &mut self,
        key: &PaceKey,
        ask: &Ask<'_>,
        now: Millis,
    ) -> Result<Reserved, StoreError>;
    /// Folds what a response published into `key`'s record at `now`
    /// (`PaceRecord::hear`).
    fn hear(&mut self, key: &PaceKey, heard: &Heard, now: Millis) -> Result<(), StoreError>;
    /// Returns a reservation of one request and `tokens` tokens that was
    /// never used to `key`'s record at `now` (`PaceRecord::give_back`).
    fn give_back(&mut self, key: &PaceKey, tokens: u64, now: Millis) -> Result<(), StoreError>;
    /// Gives back `unused` output tokens to `windows` (`WindowState::settle`).
    fn settle(
        &mut self,
        key: &PaceKey,
        windows: &[Window],
        unused: u64,
        now: Millis,
    ) -> Result<(), StoreError>;
    /// A rate-limit refusal at `now` of a request sent at `sent_at`, on a
    /// member with no declared window: learns a limit unless the key
    /// publishes its own (`refused`). The limit when it is new or changed.
    fn refused(
        &mut self,
        key: &PaceKey,
        sent_at: Millis,
        now: Millis,
    ) -> Result<Option<u64>, StoreError>;
    /// The learned limit of `key` at `now`, if one is kept.
    fn learned(&mut self, key: &PaceKey, now: Millis) -> Result<Option<u64>, StoreError>;
}

/// `PacingStore::reserve` on one key's published counts and windows (the
/// memory and SQLite stores): the learned limit ticks first (`tick`); then
/// a short published count, else the window that holds the request back
/// longest, takes nothing; else all are taken from at once.
pub fn reserve(
    record: &mut PaceRecord,
    state: &mut WindowState,
    ask: &Ask<'_>,
    now: Millis,
) -> Reserved {
    let grown = state.tick(now);
    let before = *record;
    let outcome = match record.reserve(ask.input_tokens, now) {
        Reservation::Taken => match state.short(ask, now).filter(|_| !ask.force) {
            Some(short) => {
                *record = before;
                Reservation::Window(short)
            }
            None => {
                state.take(ask, now);
                Reservation::Taken
            }
        },
        short => short,
    };
    Reserved { outcome, grown }
}

/// `PacingStore::refused` on one key: a key that publishes counts learns
/// nothing.
pub fn refused(
    record: &PaceRecord,
    state: &mut WindowState,
    sent_at: Millis,
    now: Millis,
) -> Option<u64> {
    if !record.is_empty() {
        return None;
    }
    state.refused(sent_at, now)
}

impl Count {
    /// The count at `now`: as is before its reset; after it, started again
    /// from its limit, or gone when the limit is unknown.
    fn at(self, now: Millis) -> Option<Count> {
        match self.reset_at {
            Some(reset) if reset <= now => self.limit.map(|limit| Count {
                limit: Some(limit),
                remaining: limit,
                reset_at: None,
            }),
            _ => Some(self),
        }
    }

    /// Whether fewer than `need` are left; a need above the limit itself
    /// asks for a whole window, never more.
    fn short_of(&self, need: u64) -> bool {
        self.remaining < self.limit.map_or(need, |limit| need.min(limit))
    }

    /// This count after a response published `heard`: a new count when
    /// there was none or its reset has passed; else never raised, and its
    /// reset never brought forward.
    fn heard(old: Option<Count>, heard: Published, now: Millis) -> Count {
        let fresh = Count {
            limit: heard.limit,
            remaining: heard.remaining,
            reset_at: Some(heard.reset_at),
        };
        let Some(old) = old.filter(|c| c.reset_at.is_none_or(|reset| reset > now)) else {
            return fresh;
        };
        Count {
            limit: heard.limit.or(old.limit),
            remaining: old.remaining.min(heard.remaining),
            reset_at: Some(
                old.reset_at
                    .map_or(heard.reset_at, |r| r.max(heard.reset_at)),
            ),
        }
    }
}

impl PaceRecord {
    /// Whether the record holds no count at all.
    pub fn is_empty(&self) -> bool {
        self.requests.is_none() && self.tokens.is_none()
    }

    /// Takes one request and `tokens` tokens at `now` unless a count is
    /// short; a count past its reset starts again first. When both are
    /// short, the one that resets last is named (`None`, unknown, last of all).
    pub fn reserve(&mut self, tokens: u64, now: Millis) -> Reservation {
        self.requests = self.requests.and_then(|c| c.at(now));
        self.tokens = self.tokens.and_then(|c| c.at(now));
        let short = [
            (PaceLimit::Requests, self.requests.filter(|c| c.short_of(1))),
            (
                PaceLimit::Tokens,
                self.tokens.filter(|c| c.short_of(tokens)),
            ),
        ]
        .into_iter()
        .filter_map(|(limit, count)| Some((limit, count?.reset_at)))
        .max_by_key(|(_, reset)| reset.unwrap_or(Millis::MAX));
        if let Some((limit, reset_at)) = short {
            return Reservation::Short { limit, reset_at };
        }
        if let Some(c) = &mut self.requests {
            c.remaining -= 1;
        }
        if let Some(c) = &mut self.tokens {
            c.remaining = c.remaining.saturating_sub(tokens);
        }
        Reservation::Taken
    }

    /// Returns one request and `tokens` tokens a reservation took for a
    /// request never sent: never above a count's limit, nothing to a count
    /// past its reset (a new window owes the reservation nothing).
    pub fn give_back(&mut self, tokens: u64, now: Millis) {
        for (count, n) in [(&mut self.requests, 1), (&mut self.tokens, tokens)] {
            if let Some(c) = count
                .as_mut()
                .filter(|c| c.reset_at.is_none_or(|r| r > now))
            {
                let raised = c.remaining.saturating_add(n);
                c.remaining = c.limit.map_or(raised, |limit| raised.min(limit));
            }
        }
    }

    /// Folds a response's figures in at `now` (`Count::heard`).
    pub fn hear(&mut self, heard: &Heard, now: Millis) {
        if let Some(p) = heard.requests {
            self.requests = Some(Count::heard(self.requests, p, now));
        }
        if let Some(p) = heard.tokens {
            self.tokens = Some(Count::heard(self.tokens, p, now));
        }
    }

    /// The furthest reset the record holds (for how long a store keeps it).
    pub fn last_reset(&self) -> Option<Millis> {
        [self.requests, self.tokens]
            .into_iter()
            .flatten()
            .filter_map(|c| c.reset_at)
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_known_by_a_fingerprint_only() {
        let health = || super::super::HealthKey {
            model: "openai/gpt-5".into(),
            endpoint: "https://api.openai.com/v1".into(),
        };
        let a = PaceKey::new(health(), Some("sk-proj-SECRET-1"));
        assert_eq!(a, PaceKey::new(health(), Some("sk-proj-SECRET-1")));
        assert_ne!(
            a.account,
            PaceKey::new(health(), Some("sk-proj-SECRET-2")).account
        );
        assert_eq!(a.account.len(), 32);
        assert!(a.account.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(!format!("{a:?}").contains("SECRET"));
        assert_eq!(PaceKey::new(health(), None).account, "");
        assert_eq!(PaceKey::new(health(), Some("")).account, "");
    }

    fn count(limit: Option<u64>, remaining: u64, reset_at: Option<Millis>) -> Option<Count> {
        Some(Count {
            limit,
            remaining,
            reset_at,
        })
    }

    fn published(limit: u64, remaining: u64, reset_at: Millis) -> Published {
        Published {
            limit: Some(limit),
            remaining,
            reset_at,
        }
    }

    #[test]
    fn a_reservation_takes_a_request_and_its_tokens() {
        let mut r = PaceRecord {
            requests: count(Some(10), 2, Some(5_000)),
            tokens: count(Some(1000), 700, Some(5_000)),
        };
        assert_eq!(r.reserve(300, 1_000), Reservation::Taken);
        assert_eq!(r.requests.unwrap().remaining, 1);
        assert_eq!(r.tokens.unwrap().remaining, 400);
        assert_eq!(
            r.reserve(500, 1_001),
            Reservation::Short {
                limit: PaceLimit::Tokens,
                reset_at: Some(5_000)
            },
            "fewer tokens left than the request's estimate"
        );
        assert_eq!(r.tokens.unwrap().remaining, 400, "nothing taken");
        assert_eq!(r.reserve(400, 1_002), Reservation::Taken);
        assert_eq!(
            r.reserve(0, 1_003),
            Reservation::Short {
                limit: PaceLimit::Requests,
                reset_at: Some(5_000)
            }
        );
    }

    #[test]
    fn an_empty_record_takes_nothing_and_never_holds_back() {
        let mut r = PaceRecord::default();
        assert_eq!(r.reserve(1_000_000, 1), Reservation::Taken);
        assert!(r.is_empty());
    }

    #[test]
    fn a_count_past_its_reset_starts_again_from_its_limit() {
        let mut r = PaceRecord {
            requests: count(Some(3), 0, Some(5_000)),
            tokens: count(None, 0, Some(4_000)),
        };
        assert!(matches!(r.reserve(10, 4_999), Reservation::Short { .. }));
        assert_eq!(r.reserve(10, 5_000), Reservation::Taken);
        assert_eq!(r.requests, count(Some(3), 2, None));
        assert_eq!(r.tokens, None, "no limit known: forgotten");
        r.reserve(0, 5_001);
        r.reserve(0, 5_002);
        assert_eq!(
            r.reserve(0, 5_003),
            Reservation::Short {
                limit: PaceLimit::Requests,
                reset_at: None
            },
            "spent again before any response told the new reset"
        );
    }

    #[test]
    fn a_request_larger_than_the_whole_limit_waits_for_a_full_window_only() {
        let mut r = PaceRecord {
            requests: None,
            tokens: count(Some(1000), 1000, Some(9_000)),
        };
        assert_eq!(r.reserve(5_000, 1), Reservation::Taken);
        assert_eq!(r.tokens.unwrap().remaining, 0);
    }

    #[test]
    fn when_both_are_short_the_later_reset_is_named() {
        let mut r = PaceRecord {
            requests: count(Some(3), 0, Some(5_000)),
            tokens: count(Some(9), 0, Some(8_000)),
        };
        assert_eq!(
            r.reserve(1, 1),
            Reservation::Short {
                limit: PaceLimit::Tokens,
                reset_at: Some(8_000)
            }
        );
    }

    #[test]
    fn a_response_lowers_counts_but_never_raises_them_before_the_reset() {
        let mut r = PaceRecord::default();
        r.hear(
            &Heard {
                requests: Some(published(10, 8, 60_000)),
                tokens: None,
            },
            1_000,
        );
        assert_eq!(r.requests, count(Some(10), 8, Some(60_000)), "a new count");
        r.reserve(0, 1_100);
        r.reserve(0, 1_200);
        // A late reply says 7: the record keeps its 6.
        r.hear(
            &Heard {
                requests: Some(published(10, 7, 59_000)),
                tokens: None,
            },
            1_300,
        );
        assert_eq!(r.requests, count(Some(10), 6, Some(60_000)), "never raised");
        r.hear(
            &Heard {
                requests: Some(published(10, 2, 61_000)),
                tokens: None,
            },
            1_400,
        );
        assert_eq!(r.requests, count(Some(10), 2, Some(61_000)), "lowered");
        // The reset passed: the first response starts the new count.
        r.hear(
            &Heard {
                requests: Some(published(10, 9, 121_000)),
                tokens: None,
            },
            61_500,
        );
        assert_eq!(r.requests, count(Some(10), 9, Some(121_000)));
    }

    #[test]
    fn the_first_response_after_a_restart_tells_the_reset() {
        let mut r = PaceRecord {
            requests: count(Some(10), 0, Some(5_000)),
            tokens: None,
        };
        r.reserve(0, 6_000);
        assert_eq!(r.requests, count(Some(10), 9, None));
        r.hear(
            &Heard {
                requests: Some(published(10, 9, 65_000)),
                tokens: None,
            },
            6_100,
        );
        assert_eq!(r.requests, count(Some(10), 9, Some(65_000)));
        assert_eq!(r.last_reset(), Some(65_000));
    }
}
