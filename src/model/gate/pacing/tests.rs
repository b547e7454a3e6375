//! The pacer's decisions (SPEC 17) against an in-memory store and a fake
//! clock, and one retry loop paced for real.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::health::{Health, HealthKey, MemoryStore, PaceLimit, PaceSource};
use crate::model::gate::LimitLearned;
use crate::model::ratelimit::{RateLimits, Window};

const MINUTE: Duration = Duration::from_secs(60);

fn key() -> PaceKey {
    PaceKey::new(
        HealthKey {
            model: "openai/gpt-5".into(),
            endpoint: "http://127.0.0.1:9/v1".into(),
        },
        Some("sk-test"),
    )
}

/// A health handle on a shared memory store with a clock the test moves.
fn health(store: &Arc<Mutex<MemoryStore>>, clock: &Arc<AtomicI64>) -> Health {
    let clock = clock.clone();
    Health::new(Box::new(store.clone()), "test", |_| {})
        .with_clock(move || clock.load(Ordering::SeqCst))
}

fn window(limit: u64, remaining: u64, reset: Duration) -> Option<Window> {
    Some(Window {
        limit: Some(limit),
        remaining,
        reset,
    })
}

fn requests(remaining: u64, reset: Duration) -> RateLimits {
    RateLimits {
        requests: window(100, remaining, reset),
        tokens: None,
    }
}

fn waited(admission: Option<Admission>) -> (Duration, PaceLimit) {
    match admission {
        Some(Admission::Wait { wait, limit, .. }) => (wait, limit),
        other => panic!("expected a wait, got {other:?}"),
    }
}

fn setup() -> (Pacer, Health, Arc<AtomicI64>) {
    let store = Arc::default();
    let clock = Arc::new(AtomicI64::new(1_000_000));
    (Pacer::new(vec![key()]), health(&store, &clock), clock)
}

#[test]
fn a_member_that_published_nothing_is_sent_at_once() {
    let (pacer, health, _) = setup();
    for _ in 0..3 {
        assert_eq!(
            pacer.admit(&health, 0, 1_000_000, MINUTE, true, false),
            None
        );
    }
}

#[test]
fn a_spent_limit_waits_until_its_reset_plus_a_tenth_at_most() {
    let (pacer, health, clock) = setup();
    pacer.heard(&health, 0, &requests(2, Duration::from_secs(20)));
    assert_eq!(pacer.admit(&health, 0, 10, MINUTE, true, false), None);
    assert_eq!(pacer.admit(&health, 0, 10, MINUTE, true, false), None);
    let mut waits = Vec::new();
    for _ in 0..50 {
        let (wait, limit) = waited(pacer.admit(&health, 0, 10, MINUTE, true, false));
        assert_eq!(limit, PaceLimit::Requests);
        assert!(
            wait >= Duration::from_secs(20) && wait <= Duration::from_secs(22),
            "{wait:?}"
        );
        waits.push(wait);
    }
    waits.dedup();
    assert!(waits.len() > 10, "the spread is random: {waits:?}");
    clock.fetch_add(20_000, Ordering::SeqCst);
    assert_eq!(
        pacer.admit(&health, 0, 10, MINUTE, true, false),
        None,
        "after the reset the count starts again from its limit"
    );
}

#[test]
fn tokens_fewer_than_the_estimate_wait_for_their_reset() {
    let (pacer, health, _) = setup();
    let limits = RateLimits {
        requests: window(100, 50, Duration::from_secs(1)),
        tokens: window(30_000, 8_000, Duration::from_secs(6)),
    };
    pacer.heard(&health, 0, &limits);
    let (wait, limit) = waited(pacer.admit(&health, 0, 9_000, MINUTE, true, false));
    assert_eq!(limit, PaceLimit::Tokens);
    assert!(wait >= Duration::from_secs(6), "{wait:?}");
    assert_eq!(pacer.admit(&health, 0, 7_000, MINUTE, true, false), None);
}

#[test]
fn a_wait_past_max_backoff_moves_on_or_waits_max_backoff() {
    let (pacer, health, _) = setup();
    pacer.heard(&health, 0, &requests(0, Duration::from_secs(90)));
    assert_eq!(
        pacer.admit(&health, 0, 1, MINUTE, true, false),
        Some(Admission::PacedAway {
            reset: Duration::from_secs(90)
        }),
        "with somewhere to go: `rate_limit`, the reset known"
    );
    assert_eq!(
        pacer.admit(&health, 0, 1, MINUTE, false, false),
        Some(Admission::Wait {
            wait: MINUTE,
            limit: PaceLimit::Requests,
            source: crate::health::PaceSource::Published,
            rate: None,
        }),
        "without: max_backoff, then look again"
    );
}

#[test]
fn a_count_started_again_and_spent_looks_again_shortly() {
    let (pacer, health, clock) = setup();
    pacer.heard(&health, 0, &requests(0, Duration::from_secs(1)));
    clock.fetch_add(1_000, Ordering::SeqCst);
    for _ in 0..100 {
        assert_eq!(pacer.admit(&health, 0, 1, MINUTE, true, false), None);
    }
    let (wait, _) = waited(pacer.admit(&health, 0, 1, MINUTE, true, false));
    assert!(
        wait >= LOOK_AGAIN && wait <= LOOK_AGAIN.mul_f64(1.1),
        "{wait:?}"
    );
}

#[test]
fn pacing_off_reads_and_reserves_nothing() {
    let (_, health, _) = setup();
    let off = Pacer::off();
    off.heard(&health, 0, &requests(0, Duration::from_secs(30)));
    assert_eq!(off.admit(&health, 0, 1, MINUTE, true, false), None);
    let on = Pacer::new(vec![key()]);
    assert_eq!(
        on.admit(&health, 0, 1, MINUTE, true, false),
        None,
        "nothing was recorded"
    );
}

#[test]
fn without_a_shared_record_the_run_paces_itself_in_memory() {
    let pacer = Pacer::new(vec![key()]);
    let health = Health::off();
    pacer.heard(&health, 0, &requests(0, Duration::from_secs(30)));
    let (wait, _) = waited(pacer.admit(&health, 0, 1, MINUTE, true, false));
    assert!(wait >= Duration::from_secs(29), "{wait:?}");
}

#[test]
fn a_failing_store_warns_once_and_pacing_goes_on_in_memory() {
    let warnings = Arc::new(Mutex::new(Vec::new()));
    let seen = warnings.clone();
    let health = Health::new(
        Box::new(crate::health::LockedStore),
        "/x/health.db",
        move |w| seen.lock().unwrap().push(w),
    );
    let pacer = Pacer::new(vec![key()]);
    pacer.heard(&health, 0, &requests(0, Duration::from_secs(30)));
    assert!(matches!(
        pacer.admit(&health, 0, 1, MINUTE, true, false),
        Some(Admission::Wait { .. })
    ));
    let warnings = warnings.lock().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("/x/health.db") && warnings[0].contains("locked"));
}

#[test]
fn a_refusal_teaches_a_limit_once_and_the_next_request_waits_for_it() {
    let (pacer, health, clock) = setup();
    for _ in 0..10 {
        assert_eq!(pacer.admit(&health, 0, 1, MINUTE, true, false), None);
        clock.fetch_add(1_000, Ordering::SeqCst);
    }
    pacer.refused(&health, 0, "http_429");
    // A second refusal of the same request changes nothing.
    pacer.refused(&health, 0, "http_429");
    assert_eq!(
        pacer.take_notices(0),
        [LimitLearned {
            requests_per_minute: 7,
            reason: "http_429".into()
        }]
    );
    assert!(pacer.take_notices(0).is_empty(), "announced once");
    match pacer.admit(&health, 0, 1, MINUTE, true, false) {
        Some(Admission::Wait {
            wait,
            source: PaceSource::Learned,
            rate: Some(rate),
            ..
        }) => {
            assert_eq!(rate.to_string(), "7 requests/min");
            // One request of seven a minute, from an empty window.
            assert!(wait >= Duration::from_millis(8_571), "{wait:?}");
            assert!(wait <= Duration::from_millis(9_800), "{wait:?}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_declared_window_paces_and_the_unused_reply_budget_comes_back() {
    let (pacer, health, clock) = setup();
    let out = crate::health::Window {
        dim: crate::health::Dim::OutputTokens,
        limit: 1_000,
        per_ms: 60_000,
    };
    let pacer = pacer.with_limits(vec![(vec![out], Some(800))]);
    assert_eq!(pacer.admit(&health, 0, 1, MINUTE, true, false), None);
    match pacer.admit(&health, 0, 1, MINUTE, true, false) {
        Some(Admission::Wait { source, limit, .. }) => {
            assert_eq!((source, limit), (PaceSource::Declared, PaceLimit::Tokens))
        }
        other => panic!("{other:?}"),
    }
    // The reply used 100 of its 800: 700 go back, 800 are held again.
    pacer.settle(&health, 0, 100);
    clock.fetch_add(1, Ordering::SeqCst);
    assert_eq!(pacer.admit(&health, 0, 1, MINUTE, true, false), None);
    // Refusals of a member with a declared limit teach nothing.
    pacer.refused(&health, 0, "http_429");
    assert!(pacer.take_notices(0).is_empty());
}

mod paced_loop {
    use super::*;
    use crate::events::{Emitter, Event, EventRecord, RequestRecord, Sink};
    use crate::model::gate::Gate;
    use crate::model::member::Member;
    use crate::model::retry::{request_with_retries, RequestCtx};
    use crate::model::script::ScriptModel;
    use crate::model::spec::ModelSpec;
    use crate::model::Request;
    use crate::policy::{Cooldown, FallbackPolicy, RetryPolicy};
    use crate::stop::Stop;

    #[derive(Default, Clone)]
    struct Seen {
        paced: Arc<Mutex<Vec<(f64, String)>>>,
        records: Arc<Mutex<Vec<RequestRecord>>>,
    }
    impl Sink for Seen {
        fn handle(&mut self, record: &EventRecord) {
            if let Event::ProviderPaced {
                wait_seconds,
                limit,
                ..
            } = &record.event
            {
                self.paced
                    .lock()
                    .unwrap()
                    .push((*wait_seconds, limit.clone()));
            }
        }
        fn model_request(&mut self, _: &str, _: Option<&str>, record: &RequestRecord) {
            self.records.lock().unwrap().push(record.clone());
        }
    }

    /// A lone scripted member paced on a real clock: the request waits out
    /// the reset (`provider.paced`), is sent, and its record says how long.
    #[tokio::test]
    async fn a_paced_request_says_so_and_records_its_wait() {
        let member = Member::new(
            ModelSpec::parse("script/x").unwrap(),
            Box::new(ScriptModel::parse("- text: ok\n").unwrap()),
            None,
            None,
        )
        .with_pace_key(key());
        let retry = RetryPolicy::default();
        let fallback = FallbackPolicy::new(6, Cooldown::Never, retry.attempts);
        let health = Health::new(Box::new(MemoryStore::default()), "test", |_| {});
        let gate = Gate::new(vec![member.health_key.clone()], retry, fallback, health)
            .with_pacer(Pacer::new(vec![key()]));
        gate.pacer.heard(
            gate.record.health(),
            0,
            &requests(0, Duration::from_millis(300)),
        );
        let seen = Seen::default();
        let emitter = Emitter::new("run", vec![Box::new(seen.clone())]);
        let stop = Stop::never();
        let ctx = RequestCtx {
            step: 1,
            emitter: &emitter,
            stop: &stop,
        };
        let request = Request {
            system: "",
            messages: &[],
            tools: &[],
            output_schema: None,
            max_output_tokens: None,
            reasoning_effort: None,
            spec: "script/x",
            prompt_cache: crate::model::PromptCache::On,
            cache_key: None,
        };
        let started = std::time::Instant::now();
        let answer = request_with_retries(&member, &request, ctx, &gate.turn(0, 10)).await;
        assert!(answer.is_ok(), "{answer:?}");
        assert!(started.elapsed() >= Duration::from_millis(290));
        let paced = seen.paced.lock().unwrap().clone();
        assert_eq!(paced.len(), 1, "{paced:?}");
        assert!(paced[0].0 >= 0.29 && paced[0].0 <= 0.331, "{paced:?}");
        assert_eq!(paced[0].1, "requests");
        let records = seen.records.lock().unwrap();
        assert_eq!(records.len(), 1);
        assert!(records[0].paced_ms >= 290, "{}", records[0].paced_ms);
        assert_eq!(records[0].http_status, Some(200));
    }
}
