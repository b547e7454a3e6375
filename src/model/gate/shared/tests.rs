//! Strike and cooldown records over an in-memory store and a fake clock.
//! What the gate and the chain do with these facts is tested in
//! `model/chain/tests.rs`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::health::MemoryStore;
use crate::policy::Cooldown;

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
fn run(
    store: &Shared,
    clock: &Arc<AtomicI64>,
    switch_after: u32,
    cooldown: Cooldown,
) -> SharedRecord {
    let clock = clock.clone();
    let health = Health::new(Box::new(store.clone()), "test", |_| {})
        .with_clock(move || clock.load(Ordering::SeqCst));
    SharedRecord::new(health, policy(switch_after, cooldown))
}

fn setup() -> (Shared, Arc<AtomicI64>) {
    (Arc::default(), Arc::new(AtomicI64::new(1_000_000)))
}

const FIVE_MIN: Cooldown = Cooldown::For(Duration::from_secs(300));

fn cooling(h: &SharedRecord, k: &HealthKey) -> bool {
    h.elsewhere(k).cooling
}

#[test]
fn strikes_of_several_runs_add_up_to_a_cooling_record() {
    let (store, clock) = setup();
    let a = key("a");
    let runs: Vec<SharedRecord> = (0..3).map(|_| run(&store, &clock, 3, FIVE_MIN)).collect();
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

#[test]
fn after_a_cooldown_one_run_of_many_probes_and_the_others_skip_until_its_outcome() {
    let (store, clock) = setup();
    let a = key("a");
    let runs: Vec<SharedRecord> = (0..3).map(|_| run(&store, &clock, 1, FIVE_MIN)).collect();
    // A fourth run found the model dead and left it.
    run(&store, &clock, 1, FIVE_MIN).left(&a, "http_503");
    clock.fetch_add(301_000, Ordering::SeqCst);
    let seen = runs[0].elsewhere(&a);
    assert!(!seen.cooling && seen.awaiting_probe);
    // The first to reach the model after the cooldown takes the lease.
    assert!(runs[0].take_probe_lease(&a), "the first run probes");
    assert!(runs[0].take_probe_lease(&a), "the lease is its own");
    assert!(!cooling(&runs[0], &a));
    assert!(!runs[1].take_probe_lease(&a), "another run probes");
    assert!(
        cooling(&runs[1], &a) && cooling(&runs[2], &a),
        "held elsewhere"
    );
    // The probe fails: the record is renewed and the lease ends.
    assert_eq!(runs[0].strike(&a, "http_503"), Strike::RenewedElsewhere);
    assert!(cooling(&runs[1], &a));
    clock.fetch_add(301_000, Ordering::SeqCst);
    assert!(runs[1].take_probe_lease(&a), "run 1 probes this time");
    runs[1].success(&a);
    let seen = runs[2].elsewhere(&a);
    assert!(!seen.cooling && !seen.awaiting_probe);
}

#[test]
fn a_lease_whose_run_died_expires_on_its_own() {
    let (store, clock) = setup();
    let a = key("a");
    let dead = run(&store, &clock, 1, FIVE_MIN);
    let alive = run(&store, &clock, 1, FIVE_MIN);
    dead.left(&a, "http_503");
    clock.fetch_add(301_000, Ordering::SeqCst);
    assert!(dead.take_probe_lease(&a), "dead takes the lease, then dies");
    drop(dead);
    assert!(cooling(&alive, &a));
    clock.fetch_add(LEASE_FOR, Ordering::SeqCst);
    assert!(!cooling(&alive, &a), "the lease expired");
    assert!(alive.take_probe_lease(&a));
}

#[test]
fn a_broken_store_warns_once_and_is_then_ignored() {
    let warnings = Arc::new(Mutex::new(Vec::new()));
    let seen = warnings.clone();
    let h = SharedRecord::new(
        Health::new(
            Box::new(crate::health::LockedStore),
            "/x/health.db",
            move |w| seen.lock().unwrap().push(w),
        ),
        policy(1, FIVE_MIN),
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
