//! One run's view of the shared health record: records strikes, successes
//! and departures, and answers the chain's two questions ("may this member
//! be asked?" and, through `MemberGate`, "skip it before this attempt?").
//!
//! Ownership keeps a single run exactly on SPEC section 5: a cooling record
//! this run wrote itself (by leaving the model, or by strikes that were all
//! its own) is left to the chain's own cooldown; only records other runs
//! wrote (or renewed) make this run skip a model.

use std::sync::Mutex;

use super::{HealthKey, HealthStore, Millis, Record, StoreError};
use crate::policy::{AttemptHook, Cooldown};

/// The longest a cooling record lasts (`cooldown: never` records this).
const MAX_COOLING: Millis = 3_600_000;
/// Strikes of at least the last minute always count.
const MIN_WINDOW: Millis = 60_000;
/// A record whose cooldown ended less than this ago still awaits its probe.
const HALF_OPEN_FOR: Millis = 3_600_000;

/// The writing run's settings: `fallback.switch_after` and `fallback.cooldown`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HealthPolicy {
    pub switch_after: u32,
    pub cooldown: Cooldown,
}

impl HealthPolicy {
    /// How long a cooling record lasts: the cooldown, at most an hour.
    pub fn cooling_ms(&self) -> Millis {
        match self.cooldown {
            Cooldown::Never => MAX_COOLING,
            Cooldown::For(d) => (d.as_millis() as Millis).min(MAX_COOLING),
        }
    }

    /// How far back strikes count: the cooldown, at least a minute.
    pub fn window_ms(&self) -> Millis {
        self.cooling_ms().max(MIN_WINDOW)
    }
}

/// What this run knows about one chain member.
#[derive(Debug)]
struct MemberState {
    key: HealthKey,
    /// The cooling end this run last wrote and still owns.
    own_until: Option<Millis>,
    /// When this run last left the member.
    own_left_at: Option<Millis>,
    /// This run's strikes since its last success on the member.
    own_strikes: Vec<Millis>,
}

struct Inner {
    /// `None` once the store failed (after one warning).
    store: Option<Box<dyn HealthStore>>,
    members: Vec<MemberState>,
}

type Clock = Box<dyn Fn() -> Millis + Send + Sync>;
type Warn = Box<dyn Fn(String) + Send + Sync>;

/// One run's access to the shared record; off when `health_db: off`.
pub struct Health {
    inner: Option<Mutex<Inner>>,
    policy: HealthPolicy,
    clock: Clock,
    warn: Warn,
    label: String,
}

impl Health {
    /// No shared record: the chain behaves as SPEC section 5 alone.
    pub fn off() -> Health {
        Health {
            inner: None,
            policy: HealthPolicy {
                switch_after: 1,
                cooldown: Cooldown::Never,
            },
            clock: Box::new(super::now_millis),
            warn: Box::new(|_| {}),
            label: String::new(),
        }
    }

    /// A view of `store` for the chain members `keys` (primary first).
    /// `label` names the store in the warning, `warn` emits it.
    pub fn new(
        store: Box<dyn HealthStore>,
        keys: Vec<HealthKey>,
        policy: HealthPolicy,
        label: impl Into<String>,
        warn: impl Fn(String) + Send + Sync + 'static,
    ) -> Health {
        let members = keys
            .into_iter()
            .map(|key| MemberState {
                key,
                own_until: None,
                own_left_at: None,
                own_strikes: Vec::new(),
            })
            .collect();
        Health {
            inner: Some(Mutex::new(Inner {
                store: Some(store),
                members,
            })),
            policy,
            clock: Box::new(super::now_millis),
            warn: Box::new(warn),
            label: label.into(),
        }
    }

    /// Replaces the wall clock (tests).
    pub fn with_clock(mut self, clock: impl Fn() -> Millis + Send + Sync + 'static) -> Health {
        self.clock = Box::new(clock);
        self
    }

    /// Runs `f` on the store and member `index`; a store error warns once
    /// and turns the record off for the rest of the run.
    fn with<R>(
        &self,
        index: usize,
        f: impl FnOnce(&mut dyn HealthStore, &mut MemberState, Millis) -> Result<R, StoreError>,
    ) -> Option<R> {
        let mut inner = self
            .inner
            .as_ref()?
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let Inner { store, members } = &mut *inner;
        let member = members.get_mut(index)?;
        let result = f(store.as_deref_mut()?, member, (self.clock)());
        match result {
            Ok(value) => Some(value),
            Err(e) => {
                *store = None;
                (self.warn)(format!(
                    "health record {}: {e}; this run goes on without the shared provider health",
                    self.label
                ));
                None
            }
        }
    }

    fn read(&self, index: usize) -> Option<(Record, Millis, Option<Millis>, Option<Millis>)> {
        self.with(index, |store, m, now| {
            Ok((store.read(&m.key)?, now, m.own_until, m.own_left_at))
        })
    }

    /// Whether another run recorded member `index` as cooling down now.
    pub fn cooling_by_others(&self, index: usize) -> bool {
        self.read(index).is_some_and(|(record, now, own_until, _)| {
            record
                .cooling_until
                .is_some_and(|until| until > now && Some(until) != own_until)
        })
    }

    /// Whether member `index` may be asked, given whether the run's own
    /// cooldown for it has passed: not while another run's record says it
    /// is cooling; and at once if a success cleared the record after this
    /// run left it.
    pub fn eligible(&self, index: usize, locally_expired: bool) -> bool {
        let Some((record, now, own_until, own_left_at)) = self.read(index) else {
            return locally_expired;
        };
        let others_cooling = record
            .cooling_until
            .is_some_and(|until| until > now && Some(until) != own_until);
        let recovered = match (own_left_at, record.last_success_at) {
            (Some(left), Some(success)) => success > left,
            _ => false,
        };
        (locally_expired || recovered) && !others_cooling
    }

    /// This run left member `index` (any switch but a skip): it cools down
    /// for everyone until now + the cooldown.
    pub fn left(&self, index: usize, reason: &str) {
        let cooling = self.policy.cooling_ms();
        self.with(index, |store, m, now| {
            m.own_left_at = Some(now);
            if cooling > 0 {
                store.mark_cooling(&m.key, now + cooling, reason, now)?;
                m.own_until = Some(now + cooling);
            }
            Ok(())
        });
    }

    /// Records a transient failure of member `index`. Returns whether the
    /// run should move on at once: the failure was the probe of a record
    /// another run wrote, and `can_move_on`.
    pub fn strike(&self, index: usize, reason: &str, can_move_on: bool) -> bool {
        let policy = self.policy;
        self.with(index, |store, m, now| {
            let before = store.read(&m.key)?.cooling_until;
            let window = policy.window_ms();
            let strikes = store.record_strike(&m.key, reason, now, window)?;
            m.own_strikes.retain(|&t| t > now - window);
            m.own_strikes.push(now);
            let cooling = policy.cooling_ms();
            if cooling == 0 {
                return Ok(false);
            }
            let probe = before.is_some_and(|until| until <= now && now - until < HALF_OPEN_FOR);
            if !probe && strikes < policy.switch_after {
                return Ok(false);
            }
            let until = now + cooling;
            store.mark_cooling(&m.key, until, reason, now)?;
            let ours = if probe {
                before == m.own_until
            } else {
                strikes as usize <= m.own_strikes.len()
            };
            if ours {
                m.own_until = Some(until);
            }
            Ok(probe && !ours && can_move_on)
        })
        .unwrap_or(false)
    }

    /// Member `index` answered: its strikes and cooling record are cleared
    /// for everyone.
    pub fn success(&self, index: usize) {
        self.with(index, |store, m, now| {
            m.own_strikes.clear();
            m.own_until = None;
            m.own_left_at = None;
            store.record_success(&m.key, now)
        });
    }

    /// The retry-loop hook for member `index`. `later` lists the members
    /// after it with whether the run's own cooldown for each has passed;
    /// without `gating` (probes, runs without a chain) nothing is skipped.
    pub fn gate(&self, index: usize, later: Vec<(usize, bool)>, gating: bool) -> MemberGate<'_> {
        MemberGate {
            health: self,
            index,
            later,
            gating,
        }
    }
}

/// Plugs the record into `retry::request_with_retries_gated` for one member.
pub struct MemberGate<'a> {
    health: &'a Health,
    index: usize,
    later: Vec<(usize, bool)>,
    gating: bool,
}

impl AttemptHook for MemberGate<'_> {
    fn skip(&self) -> bool {
        self.gating
            && !self.later.is_empty()
            && self.health.cooling_by_others(self.index)
            && self
                .later
                .iter()
                .any(|&(j, expired)| self.health.eligible(j, expired))
    }

    fn failed(&self, reason: &str) -> bool {
        self.health
            .strike(self.index, reason, self.gating && !self.later.is_empty())
    }

    fn succeeded(&self) {
        self.health.success(self.index);
    }
}

#[cfg(test)]
mod tests;
