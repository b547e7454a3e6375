//! One run's view of the shared health record. It records what happened
//! (strikes, successes, departures) and reports what the record says (a
//! member cooling down because of other runs, a success since a time, a
//! failure that renewed another run's record); `model::chain` alone decides
//! what to do with those facts.
//!
//! Ownership keeps a single run exactly on SPEC section 5: a cooling record
//! this run wrote itself (by leaving the model, or by strikes that were all
//! its own) is not reported as "cooling elsewhere"; only records other runs
//! wrote (or renewed) are.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{HealthKey, HealthStore, Millis, Record, StoreError};
use crate::policy::{Cooldown, FallbackPolicy};

/// The longest a cooling record lasts (`cooldown: never` records this).
const MAX_COOLING: Millis = 3_600_000;
/// Strikes of at least the last minute always count.
const MIN_WINDOW: Millis = 60_000;
/// A record whose cooldown ended less than this ago still awaits its probe.
const HALF_OPEN_FOR: Millis = 3_600_000;
/// How long a probe lease lasts when its run dies before recording the
/// probe's outcome (a live run ends it sooner, by recording the outcome).
pub(crate) const LEASE_FOR: Millis = 60_000;

/// Whether a record's cooldown has ended and it awaits its probe.
fn awaiting_probe(record: &Record, now: Millis) -> bool {
    record
        .cooling_until
        .is_some_and(|until| until <= now && now - until < HALF_OPEN_FOR)
}

/// How long a cooling record written under `policy` lasts: the cooldown, at
/// most an hour.
pub(super) fn cooling_ms(policy: &FallbackPolicy) -> Millis {
    match policy.cooldown {
        Cooldown::Never => MAX_COOLING,
        Cooldown::For(d) => (d.as_millis() as Millis).min(MAX_COOLING),
    }
}

/// How far back strikes count under `policy`: the cooldown, at least a minute.
pub(super) fn window_ms(policy: &FallbackPolicy) -> Millis {
    cooling_ms(policy).max(MIN_WINDOW)
}

/// What the shared record says about a model, as seen by this run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Elsewhere {
    /// Another run recorded (or renewed) the model as cooling down, and that
    /// cooldown has not ended; or it ended and another run of the fleet holds
    /// the probe lease (it is probing the model now).
    pub cooling: bool,
    /// The record's cooldown has ended and it awaits its probe: whoever asks
    /// the model next should hold the probe lease (`Health::take_probe_lease`).
    pub awaiting_probe: bool,
    /// The last successful request any run made to the model.
    pub last_success_at: Option<Millis>,
}

/// What recording a strike found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strike {
    /// Counted; the record says nothing more.
    Counted,
    /// The failure was the first request after another run's cooling record
    /// ended (its probe): the record is renewed for everyone.
    RenewedElsewhere,
}

/// The cooling records this run wrote for one model.
#[derive(Debug, Default)]
struct Owned {
    /// The cooling end this run last wrote and still owns.
    until: Option<Millis>,
    /// This run's strikes since its last success on the model.
    strikes: Vec<Millis>,
}

struct Inner {
    /// `None` once the store failed (after one warning).
    store: Option<Box<dyn HealthStore>>,
    owned: HashMap<HealthKey, Owned>,
}

type Clock = Box<dyn Fn() -> Millis + Send + Sync>;
type Warn = Box<dyn Fn(String) + Send + Sync>;

/// One run's access to the shared record; off when `health_db: off`. Its
/// clock is also the chain's clock for its own cooldowns.
pub struct Health {
    inner: Option<Mutex<Inner>>,
    policy: FallbackPolicy,
    clock: Clock,
    warn: Warn,
    label: String,
    /// This run's probe-lease token.
    token: u64,
}

impl Health {
    /// No shared record: the chain behaves as SPEC section 5 alone.
    pub(crate) fn off() -> Health {
        Health {
            inner: None,
            policy: FallbackPolicy {
                switch_after: 1,
                cooldown: Cooldown::Never,
            },
            clock: Box::new(super::now_millis),
            warn: Box::new(|_| {}),
            label: String::new(),
            token: 0,
        }
    }

    /// A view of `store` for a run with the fallback settings `policy`.
    /// `label` names the store in the warning, `warn` emits it.
    pub fn new(
        store: Box<dyn HealthStore>,
        policy: FallbackPolicy,
        label: impl Into<String>,
        warn: impl Fn(String) + Send + Sync + 'static,
    ) -> Health {
        Health {
            inner: Some(Mutex::new(Inner {
                store: Some(store),
                owned: HashMap::new(),
            })),
            policy,
            clock: Box::new(super::now_millis),
            warn: Box::new(warn),
            label: label.into(),
            token: fastrand::u64(1..),
        }
    }

    /// Replaces the wall clock (tests).
    #[cfg(test)]
    pub(crate) fn with_clock(
        mut self,
        clock: impl Fn() -> Millis + Send + Sync + 'static,
    ) -> Health {
        self.clock = Box::new(clock);
        self
    }

    /// The current time on this run's clock.
    pub(crate) fn now(&self) -> Millis {
        (self.clock)()
    }

    /// Runs `f` on the store and what this run owns of `key`; a store error
    /// warns once and turns the record off for the rest of the run.
    fn with<R>(
        &self,
        key: &HealthKey,
        f: impl FnOnce(&mut dyn HealthStore, &mut Owned, Millis) -> Result<R, StoreError>,
    ) -> Option<R> {
        let mut inner = self
            .inner
            .as_ref()?
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let Inner { store, owned } = &mut *inner;
        let store = store.as_deref_mut()?;
        let mine = match owned.get_mut(key) {
            Some(mine) => mine,
            None => owned.entry(key.clone()).or_default(),
        };
        let result = f(store, mine, self.now());
        match result {
            Ok(value) => Some(value),
            Err(e) => {
                inner.store = None;
                (self.warn)(format!(
                    "health record {}: {e}; this run goes on without the shared provider health",
                    self.label
                ));
                None
            }
        }
    }

    /// What the record says about `key` (nothing when off or broken).
    pub fn elsewhere(&self, key: &HealthKey) -> Elsewhere {
        self.with(key, |store, mine, now| {
            let record = store.read(key)?;
            let awaiting_probe = awaiting_probe(&record, now);
            let cooling = record
                .cooling_until
                .is_some_and(|until| until > now && Some(until) != mine.until);
            Ok(Elsewhere {
                cooling: cooling || (awaiting_probe && record.leased_by_other(self.token, now)),
                awaiting_probe,
                last_success_at: record.last_success_at,
            })
        })
        .unwrap_or_default()
    }

    /// Takes the probe lease of a model whose record awaits its probe, so
    /// that one run of the fleet probes it at a time; `false` when another
    /// run holds it. The lease ends when the outcome is recorded (`strike`,
    /// `success`), or after `LEASE_FOR` if this run dies first. With the
    /// record off or broken there is nobody to share with: `true`.
    pub(crate) fn take_probe_lease(&self, key: &HealthKey) -> bool {
        let token = self.token;
        self.with(key, |store, _, now| {
            store.try_lease(key, token, now, LEASE_FOR)
        })
        .unwrap_or(true)
    }

    /// This run left the model (any switch but a skip): it cools down for
    /// everyone until now + the cooldown (nothing with a zero cooldown).
    pub(crate) fn left(&self, key: &HealthKey, reason: &str) {
        let cooling = cooling_ms(&self.policy);
        self.with(key, |store, mine, now| {
            if cooling > 0 {
                store.mark_cooling(key, now + cooling, reason, now)?;
                mine.until = Some(now + cooling);
            }
            Ok(())
        });
    }

    /// Records a transient failure of the model. Strikes of all runs that
    /// reach `switch_after`, or the failure of a probe after a cooling
    /// record ended, (re)write the cooling record.
    pub(crate) fn strike(&self, key: &HealthKey, reason: &str) -> Strike {
        let policy = &self.policy;
        self.with(key, |store, mine, now| {
            let before = store.read(key)?.cooling_until;
            let window = window_ms(policy);
            let strikes = store.record_strike(key, reason, now, window)?;
            mine.strikes.retain(|&t| t > now - window);
            mine.strikes.push(now);
            let cooling = cooling_ms(policy);
            if cooling == 0 {
                return Ok(Strike::Counted);
            }
            let probe = before.is_some_and(|until| until <= now && now - until < HALF_OPEN_FOR);
            if !probe && strikes < policy.switch_after {
                return Ok(Strike::Counted);
            }
            let until = now + cooling;
            store.mark_cooling(key, until, reason, now)?;
            let ours = if probe {
                before == mine.until
            } else {
                strikes as usize <= mine.strikes.len()
            };
            if ours {
                mine.until = Some(until);
            }
            Ok(if probe && !ours {
                Strike::RenewedElsewhere
            } else {
                Strike::Counted
            })
        })
        .unwrap_or(Strike::Counted)
    }

    /// The model answered: its strikes and cooling record are cleared for
    /// everyone.
    pub(crate) fn success(&self, key: &HealthKey) {
        self.with(key, |store, mine, now| {
            *mine = Owned::default();
            store.record_success(key, now)
        });
    }
}

#[cfg(test)]
mod tests;
