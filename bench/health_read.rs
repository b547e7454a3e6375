//! The cost of the shared health record per request: a read of one key (what
//! the retry loop does before each attempt) and the writes a failure or a
//! success makes, against a real WAL file, and against Redis when
//! `TINYAGENT_BENCH_REDIS=redis://127.0.0.1:PORT/0` names a server (one on
//! loopback: `bench/fleet.sh` starts one). Run: `cargo bench --bench health_read`.

use std::time::{Duration, Instant};

use tinyagent::health::{
    Ask, Dim, Health, HealthKey, HealthStore, PaceKey, PacingStore, RedisStore, SqliteStore, Window,
};

fn key(i: usize) -> HealthKey {
    HealthKey {
        model: format!("openai/model-{i}"),
        endpoint: "http://127.0.0.1:8080/v1".into(),
    }
}

fn per_call(n: u32, mut f: impl FnMut(u32)) -> Duration {
    let start = Instant::now();
    for i in 0..n {
        f(i);
    }
    start.elapsed() / n
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn main() {
    let dir = std::env::temp_dir().join(format!("tinyagent-health-bench-{}", std::process::id()));
    let path = dir.join("health.db");
    let mut store = SqliteStore::open(&path).expect("open");
    // A record with a few dozen models, one of them cooling down.
    for i in 0..32 {
        store
            .record_strike(&key(i), "http_503", 1_000, 60_000)
            .unwrap();
    }
    store
        .mark_cooling(&key(0), i64::MAX / 2, "http_503", 1_000, 1)
        .unwrap();

    let rounds = 7;
    let n = 20_000;
    let read = median(
        (0..rounds)
            .map(|_| {
                per_call(n, |i| {
                    store.read(&key(i as usize % 32)).unwrap();
                })
            })
            .collect(),
    );
    let strike = median(
        (0..rounds)
            .map(|_| {
                per_call(500, |i| {
                    store
                        .record_strike(&key(1), "http_503", 2_000 + i as i64, 60_000)
                        .unwrap();
                })
            })
            .collect(),
    );
    let success = median(
        (0..rounds)
            .map(|_| {
                per_call(n, |_| {
                    store.record_success(&key(2), 3_000).unwrap();
                })
            })
            .collect(),
    );

    // Through the run's handle, as the gate reads before each attempt.
    let health = Health::new(
        Box::new(SqliteStore::open(&path).expect("open")),
        "bench",
        |w| eprintln!("{w}"),
    );
    let gate = median(
        (0..rounds)
            .map(|_| {
                per_call(n, |_| {
                    std::hint::black_box(health.with(|store, _| store.read(&key(5))));
                })
            })
            .collect(),
    );
    let gate_cooling = median(
        (0..rounds)
            .map(|_| {
                per_call(n, |_| {
                    std::hint::black_box(health.with(|store, _| store.read(&key(0))));
                })
            })
            .collect(),
    );

    // A reservation on a declared window (SPEC 24): one transaction.
    let declared = [Window {
        dim: Dim::Requests,
        limit: 1_000_000_000,
        per_ms: 60_000,
    }];
    let pace = PaceKey {
        model: "bedrock/m".into(),
        endpoint: "https://bedrock-runtime.us-east-1.amazonaws.com".into(),
        account: String::new(),
    };
    let ask = Ask {
        input_tokens: 1_000,
        output_tokens: 4_096,
        windows: &declared,
        force: false,
    };
    let reserve = median(
        (0..rounds)
            .map(|r| {
                per_call(500, |i| {
                    store
                        .reserve(&pace, &ask, 5_000 + (r * 1_000 + i as usize) as i64)
                        .unwrap();
                })
            })
            .collect(),
    );
    println!(
        "pacing reserve (declared window, WAL):    {:>8.1} µs",
        reserve.as_secs_f64() * 1e6
    );
    println!(
        "read one key (store):                     {:>8.1} µs",
        read.as_secs_f64() * 1e6
    );
    println!(
        "gate check, model healthy (Health):       {:>8.1} µs",
        gate.as_secs_f64() * 1e6
    );
    println!(
        "gate check, model cooling (Health):       {:>8.1} µs",
        gate_cooling.as_secs_f64() * 1e6
    );
    println!(
        "success on a clean record (read only):    {:>8.1} µs",
        success.as_secs_f64() * 1e6
    );
    println!(
        "strike (write transaction, WAL):          {:>8.1} µs",
        strike.as_secs_f64() * 1e6
    );
    if let Ok(url) = std::env::var("TINYAGENT_BENCH_REDIS") {
        redis(&url, rounds);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same calls against a Redis server: one round trip each.
fn redis(url: &str, rounds: usize) {
    let mut store = RedisStore::connect(url, None).expect("connect to Redis");
    let n = 2_000;
    let mut row = |label: &str, f: &mut dyn FnMut(&mut RedisStore, u32)| {
        let d = median(
            (0..rounds)
                .map(|_| per_call(n, |i| f(&mut store, i)))
                .collect(),
        );
        println!("redis {label:36} {:>8.1} µs", d.as_secs_f64() * 1e6);
    };
    row("read one key:", &mut |s, i| {
        s.read(&key(i as usize % 32)).unwrap();
    });
    row("strike (Lua script):", &mut |s, i| {
        s.record_strike(&key(1), "http_503", 2_000 + i as i64, 60_000)
            .unwrap();
    });
    row("success on a clean record:", &mut |s, _| {
        s.record_success(&key(2), 3_000).unwrap();
    });
    row("probe lease:", &mut |s, i| {
        s.try_lease(&key(3), 7, 4_000 + i as i64, 60_000).unwrap();
    });
}
