//! Strike and cooldown records over an in-memory store and a fake clock.
//! What the chain does with these facts is tested in `model/chain/tests.rs`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::super::{MemoryStore, Record};
use super::*;

type Shared = Arc<Mutex<MemoryStore>>;

fn key(name: &str) -> HealthKey {
    HealthKey {
        model: format!("script/{name}"),
        endpoint: format!("/{name}.yaml"),
    }
}

fn policy(switch_after: u32, cooldown: Cooldown) -> FallbackPolicy {
    FallbackPolicy {
        switch_after,
        cooldown,
    }
}

/// A run on the shared store and a fake clock.
fn run(store: &Shared, clock: &Arc<AtomicI64>, switch_after: u32, cooldown: Cooldown) -> Health {
    let clock = clock.clone();
    Health::new(
        Box::new(store.clone()),
        policy(switch_after, cooldown),
        "test",
        |_| {},
    )
    .with_clock(move || clock.load(Ordering::SeqCst))
}

fn setup() -> (Shared, Arc<AtomicI64>) {
    (Arc::default(), Arc::new(AtomicI64::new(1_000_000)))
}

const FIVE_MIN: Cooldown = Cooldown::For(Duration::from_secs(300));

fn cooling(h: &Health, k: &HealthKey) -> bool {
    h.elsewhere(k).cooling
}

#[test]
fn strikes_of_several_runs_add_up_to_a_cooling_record() {
    let (store, clock) = setup();
    let a = key("a");
    let runs: Vec<Health> = (0..3).map(|_| run(&store, &clock, 3, FIVE_MIN)).collect();
    for r in &runs {
        assert!(!cooling(r, &a));
        assert_eq!(r.strike(&a, "http_503"), Strike::Counted);
    }
    // The third strike was another run's for the first two.
    assert!(cooling(&runs[0], &a));
    assert!(cooling(&runs[1], &a));
    // The writer's own strike count (1) is below the total: not its own either.
    assert!(cooling(&runs[2], &a));
    assert!(!cooling(&runs[0], &key("b")), "other keys are untouched");
}

#[test]
fn a_single_runs_own_strikes_and_departures_are_not_cooling_elsewhere() {
    let (store, clock) = setup();
    let a = key("a");
    let r = run(&store, &clock, 2, FIVE_MIN);
    r.strike(&a, "http_503");
    r.strike(&a, "http_503");
    assert!(!cooling(&r, &a), "own strikes");
    r.left(&a, "http_503");
    assert!(!cooling(&r, &a), "own departure");
    // Another run sees it cooling.
    let other = run(&store, &clock, 2, FIVE_MIN);
    assert!(cooling(&other, &a));
}

#[test]
fn strikes_older_than_the_window_do_not_count() {
    let (store, clock) = setup();
    let k = key("a");
    let a = run(&store, &clock, 2, Cooldown::For(Duration::from_secs(1)));
    a.strike(&k, "http_503");
    // The window is at least a minute: 59 s later it still counts.
    clock.fetch_add(59_000, Ordering::SeqCst);
    let b = run(&store, &clock, 2, Cooldown::For(Duration::from_secs(1)));
    b.strike(&k, "http_503");
    assert!(cooling(&a, &k));
    clock.fetch_add(2_000, Ordering::SeqCst);
    assert!(!cooling(&a, &k), "the 1 s cooldown passed");
    // The expired record awaits its probe: one failure renews it.
    let c = run(&store, &clock, 5, FIVE_MIN);
    assert_eq!(c.strike(&k, "http_503"), Strike::RenewedElsewhere);
    assert!(cooling(&a, &k));
}

#[test]
fn window_is_the_cooldown_but_at_least_a_minute() {
    assert_eq!(window_ms(&policy(1, FIVE_MIN)), 300_000);
    let short = policy(1, Cooldown::For(Duration::from_secs(1)));
    assert_eq!(window_ms(&short), 60_000);
    assert_eq!(
        cooling_ms(&policy(1, Cooldown::Never)),
        3_600_000,
        "never records one hour"
    );
}

#[test]
fn a_success_clears_the_record_for_everyone() {
    let (store, clock) = setup();
    let k = key("a");
    let a = run(&store, &clock, 1, FIVE_MIN);
    let b = run(&store, &clock, 1, FIVE_MIN);
    a.strike(&k, "http_503");
    a.left(&k, "http_503");
    assert!(cooling(&b, &k));
    clock.fetch_add(1_000, Ordering::SeqCst);
    b.success(&k);
    assert!(!cooling(&a, &k));
    assert_eq!(a.elsewhere(&k).last_success_at, Some(1_001_000));
    // And the strikes start again from zero.
    let c = run(&store, &clock, 2, FIVE_MIN);
    c.strike(&k, "http_503");
    assert!(!cooling(&a, &k));
}

#[test]
fn after_the_cooldown_one_failed_probe_renews_the_record() {
    let (store, clock) = setup();
    let k = key("a");
    let ten = Cooldown::For(Duration::from_secs(10));
    let a = run(&store, &clock, 6, ten);
    a.left(&k, "http_503");
    clock.fetch_add(10_000, Ordering::SeqCst);
    let b = run(&store, &clock, 6, ten);
    assert!(!cooling(&b, &k), "expired");
    assert_eq!(b.strike(&k, "http_503"), Strike::RenewedElsewhere);
    assert!(cooling(&a, &k), "renewed for everyone, a included");
    // A later failure of another run is no probe: it only adds a strike.
    let c = run(&store, &clock, 6, ten);
    assert_eq!(c.strike(&k, "http_503"), Strike::Counted);
}

#[test]
fn a_runs_own_probe_failure_renews_nothing_of_others() {
    let (store, clock) = setup();
    let k = key("a");
    let a = run(&store, &clock, 6, Cooldown::For(Duration::from_secs(10)));
    a.left(&k, "http_503");
    clock.fetch_add(10_000, Ordering::SeqCst);
    assert_eq!(
        a.strike(&k, "http_503"),
        Strike::Counted,
        "section 5 decides for a single run"
    );
    assert!(!cooling(&a, &k));
}

#[test]
fn reading_does_not_renew_and_zero_cooldown_records_nothing() {
    let (store, clock) = setup();
    let k = key("a");
    let a = run(&store, &clock, 1, Cooldown::For(Duration::from_secs(10)));
    a.left(&k, "http_503");
    let b = run(&store, &clock, 1, Cooldown::For(Duration::from_secs(10)));
    for _ in 0..5 {
        assert!(cooling(&b, &k));
    }
    clock.fetch_add(10_000, Ordering::SeqCst);
    assert!(!cooling(&b, &k), "reads did not extend it");

    let (store, clock) = setup();
    let z = run(&store, &clock, 1, Cooldown::For(Duration::ZERO));
    z.strike(&k, "http_503");
    z.left(&k, "http_503");
    let other = run(&store, &clock, 1, Cooldown::For(Duration::ZERO));
    assert!(!cooling(&other, &k));
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
        policy(1, FIVE_MIN),
        "/x/health.db",
        move |w| seen.lock().unwrap().push(w),
    );
    let k = key("a");
    assert_eq!(h.elsewhere(&k), Elsewhere::default());
    assert_eq!(h.strike(&k, "http_503"), Strike::Counted);
    h.left(&k, "http_503");
    h.success(&k);
    let warnings = warnings.lock().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("/x/health.db") && warnings[0].contains("locked"));
}
