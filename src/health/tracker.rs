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
use crate::model::chain::Cooldown;
use crate::model::retry::AttemptHook;

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
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::super::MemoryStore;
    use super::*;

    type Shared = Arc<Mutex<MemoryStore>>;

    fn key(name: &str) -> HealthKey {
        HealthKey {
            model: format!("script/{name}"),
            endpoint: format!("/{name}.yaml"),
        }
    }

    /// A run with chain [a, b] on the shared store and a fake clock.
    fn run(
        store: &Shared,
        clock: &Arc<AtomicI64>,
        switch_after: u32,
        cooldown: Cooldown,
    ) -> Health {
        let clock = clock.clone();
        Health::new(
            Box::new(store.clone()),
            vec![key("a"), key("b")],
            HealthPolicy {
                switch_after,
                cooldown,
            },
            "test",
            |_| {},
        )
        .with_clock(move || clock.load(Ordering::SeqCst))
    }

    fn setup() -> (Shared, Arc<AtomicI64>) {
        (Arc::default(), Arc::new(AtomicI64::new(1_000_000)))
    }

    const FIVE_MIN: Cooldown = Cooldown::For(Duration::from_secs(300));

    #[test]
    fn strikes_of_several_runs_add_up_to_a_cooling_record() {
        let (store, clock) = setup();
        let runs: Vec<Health> = (0..3).map(|_| run(&store, &clock, 3, FIVE_MIN)).collect();
        for r in &runs {
            assert!(!r.cooling_by_others(0));
            assert!(!r.strike(0, "http_503", true));
        }
        // The third strike was another run's for the first two: they skip.
        assert!(runs[0].cooling_by_others(0));
        assert!(runs[1].cooling_by_others(0));
        // The writer's own strike count (1) is below the total: not its own either.
        assert!(runs[2].cooling_by_others(0));
        let gate = runs[0].gate(0, vec![(1, true)], true);
        assert!(gate.skip());
        // Without a chain (or a later member) nothing is skipped.
        assert!(!runs[0].gate(0, vec![], true).skip());
        assert!(!runs[0].gate(0, vec![(1, true)], false).skip());
    }

    #[test]
    fn a_single_runs_own_strikes_and_departures_never_make_it_skip() {
        let (store, clock) = setup();
        let r = run(&store, &clock, 2, FIVE_MIN);
        r.strike(0, "http_503", true);
        r.strike(0, "http_503", true);
        assert!(!r.cooling_by_others(0), "own strikes");
        r.left(0, "http_503");
        assert!(!r.cooling_by_others(0), "own departure");
        assert!(!r.eligible(0, false), "the chain's own cooldown governs");
        assert!(r.eligible(0, true));
        // Another run sees it cooling.
        let other = run(&store, &clock, 2, FIVE_MIN);
        assert!(other.cooling_by_others(0));
        assert!(!other.eligible(0, true));
        assert!(other.eligible(1, true));
    }

    #[test]
    fn strikes_older_than_the_window_do_not_count() {
        let (store, clock) = setup();
        let a = run(&store, &clock, 2, Cooldown::For(Duration::from_secs(1)));
        a.strike(0, "http_503", true);
        // The window is at least a minute: 59 s later it still counts.
        clock.fetch_add(59_000, Ordering::SeqCst);
        let b = run(&store, &clock, 2, Cooldown::For(Duration::from_secs(1)));
        b.strike(0, "http_503", true);
        assert!(a.cooling_by_others(0));
        clock.fetch_add(2_000, Ordering::SeqCst);
        assert!(!a.cooling_by_others(0), "the 1 s cooldown passed");
        // The expired record awaits its probe: one failure renews it.
        let c = run(&store, &clock, 5, FIVE_MIN);
        assert!(
            c.strike(0, "http_503", true),
            "a failed probe moves on at once"
        );
        assert!(a.cooling_by_others(0));
    }

    #[test]
    fn window_is_the_cooldown_but_at_least_a_minute() {
        let long = HealthPolicy {
            switch_after: 1,
            cooldown: FIVE_MIN,
        };
        assert_eq!(long.window_ms(), 300_000);
        let short = HealthPolicy {
            cooldown: Cooldown::For(Duration::from_secs(1)),
            ..long
        };
        assert_eq!(short.window_ms(), 60_000);
        let never = HealthPolicy {
            cooldown: Cooldown::Never,
            ..long
        };
        assert_eq!(never.cooling_ms(), 3_600_000, "never records one hour");
    }

    #[test]
    fn a_success_clears_the_record_for_everyone() {
        let (store, clock) = setup();
        let a = run(&store, &clock, 1, FIVE_MIN);
        let b = run(&store, &clock, 1, FIVE_MIN);
        a.strike(0, "http_503", true);
        a.left(0, "http_503");
        assert!(b.cooling_by_others(0));
        clock.fetch_add(1_000, Ordering::SeqCst);
        b.success(0);
        assert!(!a.cooling_by_others(0));
        // a left the model before the success: it may probe it at once.
        assert!(a.eligible(0, false));
        // And the strikes start again from zero.
        let c = run(&store, &clock, 2, FIVE_MIN);
        c.strike(0, "http_503", true);
        assert!(!a.cooling_by_others(0));
    }

    #[test]
    fn after_the_cooldown_one_failed_probe_renews_the_record() {
        let (store, clock) = setup();
        let a = run(&store, &clock, 6, Cooldown::For(Duration::from_secs(10)));
        a.left(0, "http_503");
        clock.fetch_add(10_000, Ordering::SeqCst);
        let b = run(&store, &clock, 6, Cooldown::For(Duration::from_secs(10)));
        assert!(!b.cooling_by_others(0), "expired");
        assert!(b.strike(0, "http_503", true), "one failure moves b on");
        assert!(a.cooling_by_others(0), "renewed for everyone, a included");
        // A later failure of another run is no probe: it only adds a strike.
        let c = run(&store, &clock, 6, Cooldown::For(Duration::from_secs(10)));
        assert!(!c.strike(0, "http_503", true));
    }

    #[test]
    fn a_runs_own_probe_failure_does_not_move_it_on_early() {
        let (store, clock) = setup();
        let a = run(&store, &clock, 6, Cooldown::For(Duration::from_secs(10)));
        a.left(0, "http_503");
        clock.fetch_add(10_000, Ordering::SeqCst);
        assert!(
            !a.strike(0, "http_503", true),
            "section 5 decides for a single run"
        );
        assert!(!a.cooling_by_others(0));
    }

    #[test]
    fn skipping_does_not_renew_and_zero_cooldown_records_nothing() {
        let (store, clock) = setup();
        let a = run(&store, &clock, 1, Cooldown::For(Duration::from_secs(10)));
        a.left(0, "http_503");
        let b = run(&store, &clock, 1, Cooldown::For(Duration::from_secs(10)));
        for _ in 0..5 {
            assert!(b.gate(0, vec![(1, true)], true).skip());
        }
        clock.fetch_add(10_000, Ordering::SeqCst);
        assert!(
            !b.gate(0, vec![(1, true)], true).skip(),
            "skips did not extend it"
        );

        let (store, clock) = setup();
        let z = run(&store, &clock, 1, Cooldown::For(Duration::ZERO));
        z.strike(0, "http_503", true);
        z.left(0, "http_503");
        let other = run(&store, &clock, 1, Cooldown::For(Duration::ZERO));
        assert!(!other.cooling_by_others(0));
    }

    #[test]
    fn the_last_member_is_asked_when_every_later_one_is_cooling() {
        let (store, clock) = setup();
        let a = run(&store, &clock, 1, FIVE_MIN);
        a.left(0, "http_503");
        a.left(1, "http_503");
        let b = run(&store, &clock, 1, FIVE_MIN);
        assert!(
            !b.gate(0, vec![(1, true)], true).skip(),
            "b/1 is cooling too"
        );
    }

    struct Broken;
    impl HealthStore for Broken {
        fn read(&mut self, _: &HealthKey) -> Result<Record, StoreError> {
            Err(StoreError("database is locked".into()))
        }
        fn record_strike(
            &mut self,
            _: &HealthKey,
            _: &str,
            _: Millis,
            _: Millis,
        ) -> Result<u32, StoreError> {
            Err(StoreError("database is locked".into()))
        }
        fn record_success(&mut self, _: &HealthKey, _: Millis) -> Result<(), StoreError> {
            Err(StoreError("database is locked".into()))
        }
        fn mark_cooling(
            &mut self,
            _: &HealthKey,
            _: Millis,
            _: &str,
            _: Millis,
        ) -> Result<(), StoreError> {
            Err(StoreError("database is locked".into()))
        }
    }

    #[test]
    fn a_broken_store_warns_once_and_is_then_ignored() {
        let warnings = Arc::new(Mutex::new(Vec::new()));
        let seen = warnings.clone();
        let h = Health::new(
            Box::new(Broken),
            vec![key("a"), key("b")],
            HealthPolicy {
                switch_after: 1,
                cooldown: FIVE_MIN,
            },
            "/x/health.db",
            move |w| seen.lock().unwrap().push(w),
        );
        assert!(!h.cooling_by_others(0));
        assert!(!h.strike(0, "http_503", true));
        h.left(0, "http_503");
        assert!(h.eligible(1, true));
        assert!(!h.eligible(1, false));
        let warnings = warnings.lock().unwrap();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("/x/health.db") && warnings[0].contains("locked"));
    }
}
