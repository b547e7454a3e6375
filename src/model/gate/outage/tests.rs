//! The outage rules over an in-memory store and a fake clock: the interval
//! schedule, one probe per interval for a fleet (the probe lease), a
//! recovery another run recorded, the schedule of a run alone. What the
//! chain does with them is tested in `model/chain/tests.rs`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::health::{Health, HealthKey, MemoryStore};
use crate::model::reason::FailureReason;
use crate::policy::{Cooldown, FallbackPolicy, RetryPolicy};

type Shared = Arc<Mutex<MemoryStore>>;

fn key(name: &str) -> HealthKey {
    HealthKey {
        model: format!("script/{name}"),
        endpoint: format!("/{name}.yaml"),
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// A run's gate over `members` on the shared store (`None`: record off)
/// and the fake clock, `retry.backoff` 1 s, waiting up to an hour.
fn gate(members: &[&str], store: Option<&Shared>, clock: &Arc<AtomicI64>) -> Gate {
    let clock = clock.clone();
    let health = match store {
        Some(store) => Health::new(Box::new(store.clone()), "test", |_| {}),
        None => Health::off(),
    }
    .with_clock(move || clock.load(Ordering::SeqCst));
    let retry = RetryPolicy {
        attempts: 3,
        backoff: Duration::from_secs(1),
        ..RetryPolicy::default()
    };
    let fallback = FallbackPolicy::new(3, Cooldown::For(Duration::from_secs(300)), 3);
    Gate::new(
        members.iter().map(|m| key(m)).collect(),
        retry,
        fallback,
        health,
    )
    .with_outage_wait(Duration::from_secs(3600))
}

fn down(n: usize) -> Vec<SwitchReason> {
    vec![SwitchReason::Failed(FailureReason::Http(503)); n]
}

/// The failures that found every member down, as a run's retry loop
/// records them before it begins to wait.
fn discover(g: &Gate) {
    for k in &g.keys {
        g.record.strike(k, "http_503");
    }
}

fn failed_503() -> SwitchReason {
    SwitchReason::Failed(FailureReason::Http(503))
}

#[test]
fn the_interval_doubles_from_the_backoff_up_to_a_minute() {
    let half = Duration::from_millis(500);
    let schedule: Vec<Duration> = (0..9).map(|n| interval(half, n, None)).collect();
    assert_eq!(
        schedule,
        [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0].map(secs)
    );
    assert_eq!(interval(half, 1_000, None), MAX_INTERVAL, "no overflow");
    assert_eq!(
        interval(half, 2, Some(secs(90.0))),
        secs(90.0),
        "a longer Retry-After wins, past the cap"
    );
    assert_eq!(
        interval(half, 2, Some(secs(0.1))),
        secs(2.0),
        "a shorter one does not"
    );
    assert_eq!(interval(Duration::ZERO, 0, None), secs(0.05), "never 0");
}

#[test]
fn a_fleet_sends_one_probe_per_interval() {
    let store = Shared::default();
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let gates: Vec<Gate> = (0..4).map(|_| gate(&["a"], Some(&store), &clock)).collect();
    let mut waits: Vec<Outage> = gates
        .iter()
        .map(|g| g.begin_outage(down(1), None))
        .collect();
    // The first waiting run scheduled the first probe one backoff on.
    for (g, w) in gates.iter().zip(&mut waits) {
        assert_eq!(w.next(g), Next::Sleep(secs(1.0)));
    }
    let mut probes_at = Vec::new();
    for tick in 0..40 {
        let now = 1_000_000 + tick * 500;
        clock.store(now, Ordering::SeqCst);
        let probing: Vec<usize> = (0..gates.len())
            .filter(|&i| waits[i].next(&gates[i]) == Next::Probe(0))
            .collect();
        assert!(probing.len() <= 1, "at {now}: {probing:?} all probe");
        for i in probing {
            probes_at.push(now - 1_000_000);
            waits[i].failed(&gates[i], 0, failed_503(), None);
        }
    }
    // Due at 1 s, then 2 s, 4 s, 8 s after each failure.
    assert_eq!(probes_at, [1_000, 3_000, 7_000, 15_000]);
    // At 19.5 s every run reads the fleet's next probe (31 s) from the
    // record, whichever of them sent the last one.
    for (g, w) in gates.iter().zip(&waits) {
        assert_eq!(w.next_try(g), secs(11.5), "{:?}", w.own);
    }
}

#[test]
fn while_another_run_holds_the_lease_the_others_read_the_record() {
    let store = Shared::default();
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let (a, b) = (
        gate(&["a"], Some(&store), &clock),
        gate(&["a"], Some(&store), &clock),
    );
    let (mut wa, mut wb) = (a.begin_outage(down(1), None), b.begin_outage(down(1), None));
    clock.fetch_add(1_000, Ordering::SeqCst);
    assert_eq!(wa.next(&a), Next::Probe(0));
    // a's probe is on its way: b polls.
    assert_eq!(wb.next(&b), Next::Sleep(POLL));
    assert_eq!(wb.next(&b), Next::Sleep(POLL));
    wa.failed(&a, 0, failed_503(), Some(secs(30.0)));
    // The server asked for 30 s: that is the fleet's next interval.
    assert_eq!(wb.next_try(&b), secs(30.0));
    assert_eq!(wb.next(&b), Next::Sleep(POLL));
    let record = b.record.elsewhere(&key("a"));
    assert!(record.cooling, "cooling for the interval, for everyone");
}

#[test]
fn a_lease_held_by_a_run_that_died_expires() {
    let store = Shared::default();
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let (a, b) = (
        gate(&["a"], Some(&store), &clock),
        gate(&["a"], Some(&store), &clock),
    );
    let (mut wa, mut wb) = (a.begin_outage(down(1), None), b.begin_outage(down(1), None));
    clock.fetch_add(1_000, Ordering::SeqCst);
    assert_eq!(wa.next(&a), Next::Probe(0));
    drop(wa);
    clock.fetch_add(LEASE_FOR - 1, Ordering::SeqCst);
    assert_eq!(wb.next(&b), Next::Sleep(POLL));
    clock.fetch_add(1, Ordering::SeqCst);
    assert_eq!(wb.next(&b), Next::Probe(0));
}

#[test]
fn a_success_another_run_recorded_is_followed_once_within_the_spread() {
    let store = Shared::default();
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let (a, b) = (
        gate(&["a", "b"], Some(&store), &clock),
        gate(&["a", "b"], Some(&store), &clock),
    );
    discover(&a);
    let mut wa = a.begin_outage(down(2), None);
    clock.fetch_add(2_000, Ordering::SeqCst);
    // A run that is not waiting answers on b.
    let outsider = gate(&["a", "b"], Some(&store), &clock);
    outsider.record.success(&key("b"));
    match wa.next(&a) {
        Next::Follow { index: 1, after } => assert!(after <= SPREAD, "{after:?}"),
        other => panic!("{other:?}"),
    }
    // The same success is not followed twice (the request may fail).
    assert!(!matches!(wa.next(&a), Next::Follow { .. }));
    // A success recorded before the wait began is no recovery.
    let mut wb = b.begin_outage(down(2), None);
    assert!(!matches!(wb.next(&b), Next::Follow { .. }));
}

#[test]
fn the_first_probe_follows_the_chain_order() {
    let store = Shared::default();
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let g = gate(&["a", "b"], Some(&store), &clock);
    let mut w = g.begin_outage(down(2), None);
    clock.fetch_add(1_000, Ordering::SeqCst);
    assert_eq!(w.next(&g), Next::Probe(0));
    w.failed(&g, 0, failed_503(), None);
    assert_eq!(
        w.next(&g),
        Next::Probe(1),
        "one request at a time, in order"
    );
    w.failed(&g, 1, SwitchReason::Failed(FailureReason::Network), None);
    assert_eq!(w.reasons()[1].to_string(), "network");
    assert_eq!(w.next(&g), Next::Sleep(POLL));
}

#[test]
fn a_run_alone_keeps_the_same_schedule_without_the_record() {
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let g = gate(&["a"], None, &clock);
    let mut w = g.begin_outage(down(1), None);
    assert_eq!(w.next(&g), Next::Sleep(secs(1.0)));
    let mut probes_at = Vec::new();
    for tick in 0..40 {
        clock.store(1_000_000 + tick * 500, Ordering::SeqCst);
        if w.next(&g) == Next::Probe(0) {
            probes_at.push(tick * 500);
            w.failed(&g, 0, failed_503(), None);
        }
    }
    assert_eq!(probes_at, [1_000, 3_000, 7_000, 15_000]);
}

#[test]
fn a_failure_joins_a_wait_only_when_the_run_waits_and_the_fleet_found_the_model_down() {
    let store = Shared::default();
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let g = gate(&["a"], Some(&store), &clock);
    assert!(!g.joins_the_wait(0), "nothing recorded");
    let waiting = gate(&["a"], Some(&store), &clock);
    let _w = waiting.begin_outage(down(1), None);
    assert!(g.joins_the_wait(0), "a run of the fleet waits on it");
    let no_wait = gate(&["a"], Some(&store), &clock).with_outage_wait(Duration::ZERO);
    assert!(!no_wait.joins_the_wait(0), "a run without --outage-wait");
    let other = Shared::default();
    let fresh = gate(&["a"], Some(&other), &clock);
    fresh.record.left(&key("a"), "http_503");
    assert!(fresh.joins_the_wait(0), "cooling");
    fresh.record.success(&key("a"));
    assert!(!fresh.joins_the_wait(0), "answered since");
}

#[test]
fn the_first_probe_waits_for_the_retry_after_of_the_failure_that_ended_the_chain() {
    for store in [Some(Shared::default()), None] {
        let clock = Arc::new(AtomicI64::new(1_000_000));
        let g = gate(&["a", "b"], store.as_ref(), &clock);
        // b's server asked for 3 s; a's first probe is one backoff on.
        let mut w = g.begin_outage(down(2), Some((1, secs(3.0))));
        assert_eq!(w.next_try(&g), secs(1.0));
        assert_eq!(w.own[1].next_at, Some(1_003_000));
        clock.fetch_add(2_999, Ordering::SeqCst);
        assert_eq!(w.next(&g), Next::Probe(0));
        w.failed(&g, 0, failed_503(), None);
        assert_eq!(w.next(&g), Next::Sleep(Duration::from_millis(1)));
        clock.fetch_add(1, Ordering::SeqCst);
        assert_eq!(w.next(&g), Next::Probe(1));
    }
    // A fleet's schedule sooner than the server asked is moved later.
    let store = Shared::default();
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let (a, b) = (
        gate(&["a"], Some(&store), &clock),
        gate(&["a"], Some(&store), &clock),
    );
    let _wa = a.begin_outage(down(1), None);
    let wb = b.begin_outage(down(1), Some((0, secs(5.0))));
    assert_eq!(wb.next_try(&b), secs(5.0));
}

#[test]
fn a_run_that_has_not_begun_to_wait_sends_only_the_fleets_due_probe() {
    use crate::model::gate::{Referee, Timing};
    use crate::model::ModelError;
    let store = Shared::default();
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let waiting = gate(&["a"], Some(&store), &clock);
    let mut w = waiting.begin_outage(down(1), None);
    let late = gate(&["a"], Some(&store), &clock);
    assert_eq!(
        late.turn(0, 0).before_send(1),
        Admission::MoveOn(SwitchReason::Cooldown),
        "not due: the run joins the wait"
    );
    clock.fetch_add(1_000, Ordering::SeqCst);
    let turn = late.turn(0, 0);
    assert!(
        matches!(turn.before_send(1), Admission::Send { .. }),
        "due: its request is the fleet's probe"
    );
    assert_eq!(w.next(&waiting), Next::Sleep(POLL), "the lease is held");
    let error = ModelError::Status {
        status: 503,
        message: String::new(),
        retry_after: None,
    };
    let failed = Failed {
        attempt: 1,
        reason: FailureReason::Http(503),
        error: &error,
        timing: Timing {
            first_event: None,
            deadline: Duration::from_secs(1),
        },
    };
    assert_eq!(turn.after_failure(&failed), Verdict::MoveOn(failed_503()));
    // Counted for the fleet: the next probe is two backoffs on, for all.
    assert_eq!(w.next_try(&waiting), secs(2.0));
    assert_eq!(w.next(&waiting), Next::Sleep(POLL));
    // A run without --outage-wait asks its last member as always.
    let alone = gate(&["a"], Some(&store), &clock).with_outage_wait(Duration::ZERO);
    assert!(matches!(
        alone.turn(0, 0).before_send(1),
        Admission::Send { .. }
    ));
}
