//! Strike and cooldown rules over an in-memory store and a fake clock.

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
fn run(store: &Shared, clock: &Arc<AtomicI64>, switch_after: u32, cooldown: Cooldown) -> Health {
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
    fn try_lease(
        &mut self,
        _: &HealthKey,
        _: u64,
        _: Millis,
        _: Millis,
    ) -> Result<bool, StoreError> {
        Err(StoreError("database is locked".into()))
    }
}

#[test]
fn after_a_cooldown_one_run_of_many_probes_and_the_others_skip_until_its_outcome() {
    let (store, clock) = setup();
    let runs: Vec<Health> = (0..3).map(|_| run(&store, &clock, 1, FIVE_MIN)).collect();
    // A fourth run found the model dead and left it.
    let writer = run(&store, &clock, 1, FIVE_MIN);
    writer.left(0, "http_503");
    clock.fetch_add(301_000, Ordering::SeqCst);
    // The first to reach the model after the cooldown takes the lease.
    assert!(!runs[0].cooling_by_others(0), "the first run probes");
    assert!(!runs[0].cooling_by_others(0), "the lease is its own");
    assert!(runs[1].cooling_by_others(0), "another run probes: skip");
    assert!(!runs[2].eligible(0, true), "not eligible while leased");
    // The probe fails: the record is renewed and the lease ends.
    assert!(
        runs[0].strike(0, "http_503", true),
        "a failed probe of another run's record moves on at once"
    );
    assert!(runs[1].cooling_by_others(0));
    clock.fetch_add(301_000, Ordering::SeqCst);
    assert!(!runs[1].cooling_by_others(0), "run 1 probes this time");
    runs[1].success(0);
    assert!(!runs[2].cooling_by_others(0) && runs[2].eligible(0, true));
}

#[test]
fn a_lease_whose_run_died_expires_on_its_own() {
    let (store, clock) = setup();
    let dead = run(&store, &clock, 1, FIVE_MIN);
    let alive = run(&store, &clock, 1, FIVE_MIN);
    dead.left(0, "http_503");
    clock.fetch_add(301_000, Ordering::SeqCst);
    assert!(
        !dead.cooling_by_others(0),
        "dead takes the lease, then dies"
    );
    drop(dead);
    assert!(alive.cooling_by_others(0));
    clock.fetch_add(LEASE_FOR, Ordering::SeqCst);
    assert!(!alive.cooling_by_others(0), "the lease expired");
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
