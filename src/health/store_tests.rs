//! The rules every `HealthStore` keeps, run against each store: in memory,
//! SQLite, and a real `redis-server` started on a free loopback port.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod latency;
mod windows;
use super::pacing::{Ask, Heard, PaceKey, PaceLimit, PacingStore, Published, Reservation};
use super::{
    BudgetSlot, BudgetStore, HealthKey, HealthStore, MemoryStore, OutageRecord, OutageStore,
    RedisStore, SqliteStore, Store,
};

fn key() -> HealthKey {
    HealthKey {
        model: "openai/gpt-5".into(),
        endpoint: "http://127.0.0.1:8080/v1".into(),
    }
}

fn other() -> HealthKey {
    HealthKey {
        model: "openai/gpt-5".into(),
        endpoint: "http://127.0.0.1:9090/v1".into(),
    }
}

/// Strikes count within the window until a success; a success clears
/// strikes and cooling; keys differ by endpoint.
fn strikes_and_success(s: &mut dyn Store) {
    assert_eq!(s.read(&key()).unwrap(), Default::default());
    assert_eq!(
        s.record_strike(&key(), "http_503", 1_000, 60_000).unwrap(),
        1
    );
    assert_eq!(
        s.record_strike(&key(), "http_503", 2_000, 60_000).unwrap(),
        2
    );
    assert_eq!(
        s.record_strike(&other(), "http_503", 2_000, 60_000)
            .unwrap(),
        1
    );
    // The first two fall out of the window.
    assert_eq!(
        s.record_strike(&key(), "http_503", 62_500, 60_000).unwrap(),
        1
    );
    s.mark_cooling(&key(), 70_000, "http_503", 62_500, 9)
        .unwrap();
    assert_eq!(s.read(&key()).unwrap().cooling_until, Some(70_000));
    assert_eq!(s.read(&other()).unwrap().cooling_until, None);
    s.record_success(&key(), 63_000).unwrap();
    let r = s.read(&key()).unwrap();
    assert_eq!(r.cooling_until, None);
    assert_eq!(r.last_success_at, Some(63_000));
    assert_eq!(
        s.record_strike(&key(), "network", 64_000, 60_000).unwrap(),
        1
    );
}

/// One holder at a time; the same holder may take it again; an expired
/// lease can be taken; a recorded outcome ends it.
fn probe_lease(s: &mut dyn Store) {
    s.mark_cooling(&key(), 10_000, "http_503", 1_000, 9)
        .unwrap();
    assert!(s.try_lease(&key(), 1, 11_000, 60_000).unwrap());
    assert!(s.try_lease(&key(), 1, 11_001, 60_000).unwrap());
    assert!(!s.try_lease(&key(), 2, 12_000, 60_000).unwrap());
    assert!(s.read(&key()).unwrap().leased_by_other(2, 12_000));
    assert!(!s.read(&key()).unwrap().leased_by_other(1, 12_000));
    // Expired: another holder takes it.
    assert!(s.try_lease(&key(), 2, 71_001, 60_000).unwrap());
    // Another run's cooling record leaves the lease to its owner.
    s.mark_cooling(&key(), 300_000, "http_503", 71_500, 9)
        .unwrap();
    assert!(s.read(&key()).unwrap().leased_by_other(9, 71_600));
    assert!(!s.try_lease(&key(), 3, 71_600, 60_000).unwrap());
    // The probe failed: the holder's renewed cooling ends the lease.
    s.mark_cooling(&key(), 400_000, "http_503", 72_000, 2)
        .unwrap();
    assert_eq!(s.read(&key()).unwrap().lease, None);
    assert!(s.try_lease(&key(), 3, 401_000, 60_000).unwrap());
    // A success ends it too.
    s.record_success(&key(), 402_000).unwrap();
    assert_eq!(s.read(&key()).unwrap().lease, None);
}

/// Strikes kept per model are bounded.
fn strikes_are_bounded(s: &mut dyn Store) {
    let mut last = 0;
    for i in 0..100 {
        last = s
            .record_strike(&key(), "http_503", 1_000 + i, 600_000)
            .unwrap();
    }
    assert_eq!(last, 64);
}

/// The outage record (SPEC 18): failed probes count until a success after
/// them; the first schedule stands unless replaced; a due probe's lease
/// goes to one holder, and only once it is due.
fn outage_record(s: &mut dyn Store) {
    assert_eq!(s.read_outage(&key()).unwrap(), OutageRecord::default());
    assert_eq!(
        s.schedule_probe(&key(), 2_000, 1_000, false).unwrap(),
        2_000
    );
    assert_eq!(
        s.schedule_probe(&key(), 9_000, 1_001, false).unwrap(),
        2_000,
        "the fleet's first schedule stands"
    );
    assert!(
        !s.take_due_probe(&key(), 1, 1_999, 60_000).unwrap(),
        "not due"
    );
    assert!(s.take_due_probe(&key(), 1, 2_000, 60_000).unwrap());
    assert!(
        s.take_due_probe(&key(), 1, 2_001, 60_000).unwrap(),
        "its own"
    );
    assert!(!s.take_due_probe(&key(), 2, 2_001, 60_000).unwrap(), "held");
    assert!(s.read(&key()).unwrap().leased_by_other(2, 2_001));
    assert_eq!(s.count_failed_probe(&key(), 2_100).unwrap(), 1);
    assert_eq!(s.schedule_probe(&key(), 6_100, 2_100, true).unwrap(), 6_100);
    // The failed probe is recorded: the holder's cooling ends the lease.
    s.mark_cooling(&key(), 6_100, "http_503", 2_100, 1).unwrap();
    assert!(
        !s.take_due_probe(&key(), 2, 6_099, 60_000).unwrap(),
        "not due yet"
    );
    assert!(s.take_due_probe(&key(), 2, 6_100, 60_000).unwrap());
    assert_eq!(s.count_failed_probe(&key(), 6_200).unwrap(), 2);
    assert_eq!(
        s.read_outage(&key()).unwrap(),
        OutageRecord {
            failures: 2,
            next_probe_at: Some(6_100)
        }
    );
    assert_eq!(s.read_outage(&other()).unwrap(), OutageRecord::default());
    assert!(
        !s.take_due_probe(&other(), 1, 9_000, 60_000).unwrap(),
        "nothing scheduled"
    );
    // A success empties it; a new outage counts from 1.
    s.record_success(&key(), 7_000).unwrap();
    assert_eq!(s.read_outage(&key()).unwrap(), OutageRecord::default());
    assert!(!s.take_due_probe(&key(), 3, 7_001, 60_000).unwrap());
    assert_eq!(s.count_failed_probe(&key(), 8_000).unwrap(), 1);
    assert_eq!(s.read_outage(&key()).unwrap().next_probe_at, None);
    assert_eq!(
        s.schedule_probe(&key(), 9_000, 8_000, false).unwrap(),
        9_000
    );
}

/// A slot `start` ms after the hour the tests began in (Redis expires keys
/// at absolute times: they must lie ahead).
fn slot(budget: &str, start: i64) -> BudgetSlot {
    static HOUR: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    let hour = *HOUR.get_or_init(|| super::now_millis() / 3_600_000 * 3_600_000);
    BudgetSlot {
        budget: budget.into(),
        start: hour + start,
        end: hour + start + 3_600_000,
    }
}

/// Spend adds up per slot, to every slot of one call at once; a new
/// period is a new slot; a slot never written reads 0.
fn budget_spend(s: &mut dyn Store) {
    let fleet = slot("hour", 0);
    let opus = slot("hour model=anthropic/claude-opus-4-1", 0);
    assert_eq!(s.spent(&[fleet.clone(), opus.clone()]).unwrap(), [0, 0]);
    assert_eq!(s.spent(&[]).unwrap(), Vec::<i64>::new());
    assert_eq!(
        s.add_spend(&[fleet.clone(), opus.clone()], 120_000_000, 1_000)
            .unwrap(),
        [120_000_000, 120_000_000]
    );
    assert_eq!(
        s.add_spend(std::slice::from_ref(&fleet), 5, 2_000).unwrap(),
        [120_000_005]
    );
    let next = slot("hour", 3_600_000);
    assert_eq!(
        s.add_spend(std::slice::from_ref(&next), 7, 3_600_001)
            .unwrap(),
        [7]
    );
    assert_eq!(
        s.spent(&[opus, fleet, next]).unwrap(),
        [120_000_000, 120_000_005, 7]
    );
}

fn pace_key(account: &str) -> PaceKey {
    PaceKey {
        model: "openai/gpt-5".into(),
        endpoint: "http://127.0.0.1:8080/v1".into(),
        account: account.into(),
    }
}

fn requests(limit: u64, remaining: u64, reset_at: i64) -> Heard {
    Heard {
        requests: Some(Published {
            limit: Some(limit),
            remaining,
            reset_at,
        }),
        tokens: None,
    }
}

/// A reservation of one request and `tokens` input tokens, no window.
fn take<S: PacingStore + ?Sized>(s: &mut S, k: &PaceKey, tokens: u64, now: i64) -> Reservation {
    let reserved = s.reserve(k, &Ask::tokens(tokens), now).unwrap();
    assert_eq!(reserved.grown, None);
    reserved.outcome
}

fn short(limit: PaceLimit, reset_at: Option<i64>) -> Reservation {
    Reservation::Short { limit, reset_at }
}

/// Requests: reservations take one each until none is left; a late reply
/// never gives units back; past the reset the count starts again from its
/// limit; the first reply after that tells the new reset.
fn pacing_requests(s: &mut dyn PacingStore) {
    let k = pace_key("a1");
    assert_eq!(take(s, &k, 100, 500), Reservation::Taken, "unknown key");
    s.hear(&k, &requests(3, 2, 10_000), 1_000).unwrap();
    assert_eq!(take(s, &k, 100, 1_001), Reservation::Taken);
    assert_eq!(take(s, &k, 100, 1_002), Reservation::Taken);
    let spent = short(PaceLimit::Requests, Some(10_000));
    assert_eq!(take(s, &k, 100, 1_003), spent);
    s.hear(&k, &requests(3, 1, 9_000), 1_004).unwrap();
    assert_eq!(take(s, &k, 100, 1_005), spent, "never raised");
    assert_eq!(
        take(s, &pace_key("b2"), 100, 1_006),
        Reservation::Taken,
        "another key's record"
    );
    for now in [10_000, 10_001, 10_002] {
        assert_eq!(take(s, &k, 100, now), Reservation::Taken, "{now}");
    }
    assert_eq!(take(s, &k, 100, 10_003), short(PaceLimit::Requests, None));
    s.hear(&k, &requests(3, 0, 70_000), 10_500).unwrap();
    assert_eq!(
        take(s, &k, 100, 10_600),
        short(PaceLimit::Requests, Some(70_000))
    );
}

/// Tokens: a request takes its estimate; one larger than what is left
/// waits; one larger than the whole limit waits for a full window only;
/// when both counts are short the later reset is named; a count past its
/// reset with no known limit is forgotten.
fn pacing_tokens(s: &mut dyn PacingStore) {
    let k = pace_key("t1");
    let heard = Heard {
        requests: Some(Published {
            limit: None,
            remaining: 0,
            reset_at: 4_000,
        }),
        tokens: Some(Published {
            limit: Some(1_000),
            remaining: 500,
            reset_at: 5_000,
        }),
    };
    s.hear(&k, &heard, 1_000).unwrap();
    assert_eq!(
        take(s, &k, 600, 1_001),
        short(PaceLimit::Tokens, Some(5_000)),
        "both short: the later reset"
    );
    // The requests' count is forgotten at its reset (no limit known).
    assert_eq!(
        take(s, &k, 600, 4_000),
        short(PaceLimit::Tokens, Some(5_000))
    );
    assert_eq!(take(s, &k, 400, 4_001), Reservation::Taken);
    assert_eq!(
        take(s, &k, 200, 4_002),
        short(PaceLimit::Tokens, Some(5_000))
    );
    assert_eq!(
        take(s, &k, 9_999, 5_000),
        Reservation::Taken,
        "a full window"
    );
    assert_eq!(take(s, &k, 1, 5_001), short(PaceLimit::Tokens, None));
}

/// A reservation never used is given back: never above the limit, and
/// not to a count whose reset has passed; a key with no record is left
/// without one.
fn pacing_give_back(s: &mut dyn PacingStore) {
    let k = pace_key("g1");
    s.give_back(&k, 100, 500).unwrap();
    assert_eq!(take(s, &k, 100, 501), Reservation::Taken);
    let heard = Heard {
        requests: Some(Published {
            limit: Some(2),
            remaining: 1,
            reset_at: 10_000,
        }),
        tokens: Some(Published {
            limit: Some(1_000),
            remaining: 300,
            reset_at: 10_000,
        }),
    };
    s.hear(&k, &heard, 1_000).unwrap();
    assert_eq!(take(s, &k, 300, 1_001), Reservation::Taken);
    let spent = short(PaceLimit::Tokens, Some(10_000));
    assert_eq!(take(s, &k, 1, 1_002), spent);
    s.give_back(&k, 300, 1_003).unwrap();
    // Back to one request and 300 tokens: taken once more, then short.
    assert_eq!(take(s, &k, 300, 1_004), Reservation::Taken);
    assert_eq!(take(s, &k, 1, 1_005), spent);
    // Never above the limit: two give-backs of 900 leave 1 000 tokens and
    // two requests.
    s.give_back(&k, 900, 1_006).unwrap();
    s.give_back(&k, 900, 1_007).unwrap();
    assert_eq!(take(s, &k, 1_000, 1_008), Reservation::Taken);
    assert_eq!(take(s, &k, 1, 1_009), spent);
    // Past the reset the counts start a new window: nothing given back
    // to them (two requests in it, not three).
    s.give_back(&k, 100, 10_500).unwrap();
    assert_eq!(take(s, &k, 0, 10_501), Reservation::Taken);
    assert_eq!(take(s, &k, 0, 10_502), Reservation::Taken);
    assert_eq!(take(s, &k, 0, 10_503), short(PaceLimit::Requests, None));
}

/// A lease held for no time at all (a probe lease given up unused) is
/// free for another holder at once.
fn lease_given_up(s: &mut dyn Store) {
    s.mark_cooling(&key(), 10_000, "http_503", 1_000, 9)
        .unwrap();
    assert!(s.try_lease(&key(), 1, 11_000, 60_000).unwrap());
    assert!(!s.try_lease(&key(), 2, 11_500, 60_000).unwrap());
    assert!(s.try_lease(&key(), 1, 12_000, 0).unwrap());
    assert!(!s.read(&key()).unwrap().leased_by_other(2, 12_000));
    assert!(s.try_lease(&key(), 2, 12_000, 60_000).unwrap());
    // Given up by another than its holder: the holder keeps it.
    assert!(!s.try_lease(&key(), 1, 12_500, 0).unwrap());
    assert!(s.read(&key()).unwrap().leased_by_other(1, 12_500));
}

fn all_rules(make: &dyn Fn() -> Box<dyn Store>) {
    strikes_and_success(&mut *make());
    probe_lease(&mut *make());
    strikes_are_bounded(&mut *make());
    outage_record(&mut *make());
    budget_spend(&mut *make());
    pacing_requests(&mut *make());
    pacing_tokens(&mut *make());
    pacing_give_back(&mut *make());
    lease_given_up(&mut *make());
    latency::first_events_keep_the_last_fifty(&mut *make());
    windows::all_rules(make);
}

#[test]
fn memory_store_keeps_the_rules() {
    all_rules(&|| Box::new(MemoryStore::default()));
}

#[test]
fn sqlite_store_keeps_the_rules() {
    all_rules(&|| Box::new(SqliteStore::in_memory().unwrap()));
}

/// Four threads on their own connections reserve at once: exactly the
/// units the record holds are taken, never one more.
fn reservations_never_overspend(make: &(dyn Fn() -> Box<dyn Store> + Sync)) {
    let k = pace_key("fleet");
    make()
        .hear(&k, &requests(1_000, 50, i64::MAX / 2), 1)
        .unwrap();
    let taken = std::sync::atomic::AtomicU32::new(0);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let mut s = make();
                for i in 0..20 {
                    if take(&mut *s, &k, 0, 2 + i) == Reservation::Taken {
                        taken.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            });
        }
    });
    assert_eq!(taken.into_inner(), 50);
}

#[test]
fn sqlite_reservations_are_atomic_across_connections() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("health.db");
    reservations_never_overspend(&|| Box::new(SqliteStore::open(&path).unwrap()));
}

/// A `redis-server` of its own on a free loopback port, persistence off,
/// stopped when dropped.
pub(crate) struct RedisServer {
    child: Child,
    pub port: u16,
}

impl RedisServer {
    pub fn start(extra: &[&str]) -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is needed for these tests (.ci/run installs it)");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        RedisServer { child, port }
    }

    pub fn url(&self, db: u32) -> String {
        format!("redis://127.0.0.1:{}/{db}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn redis_store_keeps_the_rules() {
    let server = RedisServer::start(&[]);
    let db = std::sync::atomic::AtomicU32::new(0);
    all_rules(&|| -> Box<dyn Store> {
        // A fresh database for each rule.
        let n = db.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::new(RedisStore::connect(&server.url(n), None).unwrap())
    });
}

#[test]
fn redis_reservations_are_atomic_across_connections() {
    let server = RedisServer::start(&[]);
    reservations_never_overspend(&|| Box::new(RedisStore::connect(&server.url(0), None).unwrap()));
}

#[test]
fn redis_pacing_records_expire_an_hour_after_their_last_reset() {
    let server = RedisServer::start(&[]);
    let mut s = RedisStore::connect(&server.url(0), None).unwrap();
    let now = super::now_millis();
    s.hear(&pace_key("ttl"), &requests(10, 5, now + 60_000), now)
        .unwrap();
    let mut conn = redis::Client::open(server.url(0))
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("tinyagent:pace:*")
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        keys,
        ["tinyagent:pace:openai/gpt-5|http://127.0.0.1:8080/v1|ttl"]
    );
    let ttl: i64 = redis::cmd("PTTL").arg(&keys[0]).query(&mut conn).unwrap();
    assert!(ttl > 3_600_000 && ttl <= 3_660_000, "{ttl}");
}

#[test]
fn redis_records_expire_on_their_own() {
    let server = RedisServer::start(&[]);
    let mut s = RedisStore::connect(&server.url(0), None).unwrap();
    s.record_strike(&key(), "http_503", 1_000, 60_000).unwrap();
    s.mark_cooling(&key(), 301_000, "http_503", 1_000, 9)
        .unwrap();
    let mut conn = redis::Client::open(server.url(0))
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("tinyagent:*")
        .query(&mut conn)
        .unwrap();
    assert_eq!(keys.len(), 2, "{keys:?}");
    for k in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut conn).unwrap();
        assert!(ttl > 0 && ttl <= 300_000 + 3_600_000, "{k}: {ttl}");
    }
    // The outage record lasts an hour past the probe it schedules.
    s.schedule_probe(&key(), 61_000, 1_000, true).unwrap();
    let ttl: i64 = redis::cmd("PTTL")
        .arg("tinyagent:outage:openai/gpt-5|http://127.0.0.1:8080/v1")
        .query(&mut conn)
        .unwrap();
    assert!(ttl > 3_600_000 && ttl <= 60_000 + 3_600_000, "{ttl}");
}

#[test]
fn a_password_comes_from_the_url_or_the_variable_and_is_never_shown() {
    let server = RedisServer::start(&["--requirepass", "s3cret-pw"]);
    let with = format!("redis://:s3cret-pw@127.0.0.1:{}/0", server.port);
    assert!(RedisStore::connect(&with, None).is_ok());
    assert!(RedisStore::connect(&server.url(0), Some("s3cret-pw".into())).is_ok());
    let wrong = format!("redis://:wrong-pw@127.0.0.1:{}/0", server.port);
    let e = RedisStore::connect(&wrong, None).err().unwrap().to_string();
    assert!(!e.contains("wrong-pw"), "{e}");
    let e = RedisStore::connect(&server.url(0), None)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("password") || e.contains("auth"), "{e}");
    assert_eq!(
        super::redis::redacted(&with),
        format!("redis://:***@127.0.0.1:{}/0", server.port)
    );
}

#[test]
fn an_unreachable_or_silent_redis_fails_within_the_bound() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    assert!(RedisStore::connect(&format!("redis://127.0.0.1:{port}/0"), None).is_err());
    // A server that accepts and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "redis://127.0.0.1:{}/0",
        silent.local_addr().unwrap().port()
    );
    let e = RedisStore::connect(&url, None).err().unwrap().to_string();
    assert!(e.contains("200 ms"), "{e}");
    // Generous: two bounded attempts on a loaded machine.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// Runs `threads` handles on one store at once, each adding 1 nano-dollar
/// `each` times to two slots; returns what the store holds then.
fn add_in_parallel(
    make: &(dyn Fn() -> Box<dyn Store> + Sync),
    threads: usize,
    each: usize,
) -> Vec<i64> {
    let slots = [slot("day", 0), slot("day provider=openai", 0)];
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let mut store = make();
                for i in 0..each {
                    store.add_spend(&slots, 1, i as i64).unwrap();
                }
            });
        }
    });
    make().spent(&slots).unwrap()
}

#[test]
fn parallel_runs_never_lose_an_addition_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("health.db");
    let make = || Box::new(SqliteStore::open(&path).unwrap()) as Box<dyn Store>;
    assert_eq!(add_in_parallel(&make, 4, 50), [200, 200]);
}

#[test]
fn parallel_runs_never_lose_an_addition_in_redis() {
    let server = RedisServer::start(&[]);
    let make = || Box::new(RedisStore::connect(&server.url(0), None).unwrap()) as Box<dyn Store>;
    assert_eq!(add_in_parallel(&make, 4, 50), [200, 200]);
}

#[test]
fn redis_budget_totals_expire_after_their_period() {
    let server = RedisServer::start(&[]);
    let mut s = RedisStore::connect(&server.url(0), None).unwrap();
    let now = super::now_millis();
    let period = BudgetSlot {
        budget: "day".into(),
        start: now - 1_000,
        end: now + 86_400_000,
    };
    s.add_spend(&[period], 42, now).unwrap();
    let mut conn = redis::Client::open(server.url(0))
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("tinyagent:budget:*")
        .query(&mut conn)
        .unwrap();
    assert_eq!(keys, [format!("tinyagent:budget:day@{}", now - 1_000)]);
    let ttl: i64 = redis::cmd("PTTL").arg(&keys[0]).query(&mut conn).unwrap();
    let keep = super::budget::KEEP_AFTER_END;
    assert!(
        ttl > 86_400_000 && ttl <= 86_400_000 + keep,
        "expires after the period's end: {ttl}"
    );
}

#[test]
fn many_runs_opening_a_new_file_at_once_all_get_the_record() {
    // Runs of a fleet started together on a fresh machine all open (and
    // create, and switch to WAL) the same new file at once.
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("health.db");
        let opened: Vec<bool> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| SqliteStore::open(&path).is_ok()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(opened.iter().all(|ok| *ok), "{opened:?}");
    }
}

#[test]
fn redis_reads_garbage_in_a_windows_record_as_fresh() {
    let server = RedisServer::start(&[]);
    let mut s = RedisStore::connect(&server.url(0), None).unwrap();
    let client = redis::Client::open(server.url(0)).unwrap();
    let write = |garbage: &str| {
        let mut conn = client.get_connection().unwrap();
        let _: () = redis::cmd("HSET")
            .arg("tinyagent:pace:openai/gpt-5|http://127.0.0.1:8080/v1|hostile")
            .arg("w")
            .arg(garbage)
            .query(&mut conn)
            .unwrap();
    };
    windows::hostile_windows(&mut s, &write);
}

#[test]
fn sqlite_reads_garbage_in_a_windows_record_as_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("health.db");
    let mut s = SqliteStore::open(&path).unwrap();
    let write = |garbage: &str| {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "INSERT OR REPLACE INTO pace_windows VALUES ('openai/gpt-5', 'http://127.0.0.1:8080/v1', 'hostile', ?1, 0)",
            [garbage],
        )
        .unwrap();
    };
    windows::hostile_windows(&mut s, &write);
}
