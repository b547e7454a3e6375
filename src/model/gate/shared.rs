//! What the shared health record (SPEC 13) means for this run: a member
//! cooling down because of other runs, strikes of all runs reaching
//! `switch_after`, a failed probe renewing another run's record, and the
//! probe lease. The store (`health::Health`) only keeps the facts; the
//! gate (`gate/mod.rs`) asks this view and decides.
//!
//! Ownership keeps a single run exactly on SPEC section 5: a cooling record
//! this run wrote itself (by leaving the model, or by strikes that were all
//! its own) is not reported as "cooling elsewhere"; only records other runs
//! wrote (or renewed) are.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::health::{Health, HealthKey, Millis};
use crate::policy::{FallbackPolicy, PROBE_WINDOW};

/// How long a probe lease lasts when its run dies before recording the
/// probe's outcome (a live run ends it sooner, by recording the outcome).
pub(crate) const LEASE_FOR: Millis = 60_000;

fn ms(d: std::time::Duration) -> Millis {
    d.as_millis().min(Millis::MAX as u128) as Millis
}

/// Whether a record's cooldown has ended and it awaits its probe at `now`.
fn awaiting_probe(cooling_until: Option<Millis>, now: Millis) -> bool {
    cooling_until.is_some_and(|until| until <= now && now - until < ms(PROBE_WINDOW))
}

/// What the shared record says about a model, as seen by this run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Elsewhere {
    /// Another run recorded (or renewed) the model as cooling down, and that
    /// cooldown has not ended; or it ended and another run of the fleet holds
    /// the probe lease (it is probing the model now).
    pub cooling: bool,
    /// The record's cooldown has ended and it awaits its probe: whoever asks
    /// the model next should hold the probe lease (`take_probe_lease`).
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

/// This run's view of the shared record, under the run's fallback policy.
pub(crate) struct SharedRecord {
    health: Health,
    policy: FallbackPolicy,
    owned: Mutex<HashMap<HealthKey, Owned>>,
}

impl SharedRecord {
    pub(crate) fn new(health: Health, policy: FallbackPolicy) -> SharedRecord {
        SharedRecord {
            health,
            policy,
            owned: Mutex::new(HashMap::new()),
        }
    }

    /// The store this view reads (the pacing records and the outage
    /// record live there too).
    pub(crate) fn health(&self) -> &Health {
        &self.health
    }

    /// The current time on the run's clock.
    pub(crate) fn now(&self) -> Millis {
        self.health.now()
    }

    /// Records the model as cooling down until `until` (a failed outage
    /// probe: the next interval), a record this run owns; it ends the
    /// probe lease.
    pub(super) fn cool_until(&self, key: &HealthKey, until: Millis, reason: &str) {
        let written = self
            .health
            .with(|store, now| store.mark_cooling(key, until, reason, now, self.health.token()));
        if written.is_some() {
            self.mine(key, |mine| mine.until = Some(until));
        }
    }

    /// Runs `f` with what this run owns of `key`.
    fn mine<R>(&self, key: &HealthKey, f: impl FnOnce(&mut Owned) -> R) -> R {
        let mut owned = self.owned.lock().unwrap_or_else(|e| e.into_inner());
        match owned.get_mut(key) {
            Some(mine) => f(mine),
            None => f(owned.entry(key.clone()).or_default()),
        }
    }

    /// What the record says about `key` (nothing when off or broken).
    pub(crate) fn elsewhere(&self, key: &HealthKey) -> Elsewhere {
        let token = self.health.token();
        let Some((record, now)) = self.health.with(|store, now| Ok((store.read(key)?, now))) else {
            return Elsewhere::default();
        };
        let mine = self.mine(key, |mine| mine.until);
        let awaiting_probe = awaiting_probe(record.cooling_until, now);
        let cooling = record
            .cooling_until
            .is_some_and(|until| until > now && Some(until) != mine);
        Elsewhere {
            cooling: cooling || (awaiting_probe && record.leased_by_other(token, now)),
            awaiting_probe,
            last_success_at: record.last_success_at,
        }
    }

    /// Takes the probe lease of a model whose record awaits its probe, so
    /// that one run of the fleet probes it at a time; `false` when another
    /// run holds it. The lease ends when the outcome is recorded (`strike`,
    /// `success`), or after `LEASE_FOR` if this run dies first. With the
    /// record off or broken there is nobody to share with: `true`.
    pub(crate) fn take_probe_lease(&self, key: &HealthKey) -> bool {
        let token = self.health.token();
        self.health
            .with(|store, now| store.try_lease(key, token, now, LEASE_FOR))
            .unwrap_or(true)
    }

    /// This run left the model (any switch but a skip): it cools down for
    /// everyone until now + the recorded cooldown (nothing with a zero one).
    pub(crate) fn left(&self, key: &HealthKey, reason: &str) {
        let cooling = ms(self.policy.cooldown.recorded());
        if cooling == 0 {
            return;
        }
        let token = self.health.token();
        let written = self.health.with(|store, now| {
            store.mark_cooling(key, now + cooling, reason, now, token)?;
            Ok(now + cooling)
        });
        if let Some(until) = written {
            self.mine(key, |mine| mine.until = Some(until));
        }
    }

    /// Records a transient failure of the model. Strikes of all runs that
    /// reach `switch_after`, or the failure of a probe after a cooling
    /// record ended, (re)write the cooling record.
    pub(crate) fn strike(&self, key: &HealthKey, reason: &str) -> Strike {
        let window = ms(self.policy.cooldown.strike_window());
        let cooling = ms(self.policy.cooldown.recorded());
        let switch_after = self.policy.switch_after;
        let token = self.health.token();
        let outcome = self.health.with(|store, now| {
            let before = store.read(key)?.cooling_until;
            let strikes = store.record_strike(key, reason, now, window)?;
            let probe = awaiting_probe(before, now);
            if cooling == 0 || (!probe && strikes < switch_after) {
                return Ok((now, strikes, None));
            }
            store.mark_cooling(key, now + cooling, reason, now, token)?;
            Ok((now, strikes, Some((before, probe))))
        });
        let Some((now, strikes, written)) = outcome else {
            return Strike::Counted;
        };
        self.mine(key, |mine| {
            mine.strikes.retain(|&t| t > now - window);
            mine.strikes.push(now);
            let Some((before, probe)) = written else {
                return Strike::Counted;
            };
            let ours = if probe {
                before == mine.until
            } else {
                strikes as usize <= mine.strikes.len()
            };
            if ours {
                mine.until = Some(now + cooling);
            }
            if probe && !ours {
                Strike::RenewedElsewhere
            } else {
                Strike::Counted
            }
        })
    }

    /// Records a transient failure of a probe in an outage (SPEC 18) as a
    /// strike only: its cooling record, which ends the probe lease, is
    /// written once the fleet's next probe is scheduled (`Gate::probe_failed`).
    pub(crate) fn strike_only(&self, key: &HealthKey, reason: &str) {
        let window = ms(self.policy.cooldown.strike_window());
        self.health
            .with(|store, now| store.record_strike(key, reason, now, window));
    }

    /// The model answered: its strikes and cooling record are cleared for
    /// everyone.
    pub(crate) fn success(&self, key: &HealthKey) {
        self.mine(key, |mine| *mine = Owned::default());
        self.health
            .with(|store, now| store.record_success(key, now));
    }
}

#[cfg(test)]
mod tests;
