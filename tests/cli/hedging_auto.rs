//! `fallback.hedge_after: auto` (SPEC 23): the delay learned from the
//! model's first-event times, in the shared health record or, with
//! `health_db: off`, in the run's own memory.

use std::time::Duration;

use rusqlite::Connection;

use super::hedging::{providers, run};
use crate::support::openai::{chat_sse_submit, chat_sse_tool_call};
use crate::support::stub::{End, Reply, Stub};
use crate::support::{events, finished, of_type, TestEnv};

#[test]
fn auto_hedges_at_twice_the_recorded_p95_from_the_health_record() {
    // The primary answers at once the first time, then goes silent.
    let slow = Stub::start(|i, _| {
        if i == 0 {
            chat_sse_submit("c1", "by-slow")
        } else {
            Reply::sse(vec![]).cut_after(0, End::Stall(Duration::from_secs(30)))
        }
    });
    let fast = Stub::sequence(vec![chat_sse_submit("c1", "by-fast")]);
    let env = TestEnv::new();
    let health = env.file("health.db");
    let config = format!(
        "health_db: {}\n{}",
        health.display(),
        providers(&slow, &fast)
    );
    let cfg = env.write("auto.yaml", &config);
    let args = |cfg: &std::path::Path| {
        let mut cmd = env.cmd();
        cmd.env("SLOW_KEY", "sk-test-slow")
            .env("FAST_KEY", "sk-test-fast")
            .args(["-c", cfg.to_str().unwrap(), "--json"])
            .args(["-m", "slow/m", "--fallback-model", "fast/m"])
            .args(["--hedge-after", "auto", "task"]);
        cmd
    };
    let first = args(&cfg).output().unwrap();
    assert_eq!(first.status.code(), Some(0));
    // The record learned that first event; 49 more successes of 2.6 s make
    // its 95th percentile 2.6 s, so the hedge goes at 5.2 s.
    let conn = Connection::open(&health).unwrap();
    let (model, endpoint): (String, String) = conn
        .query_row("SELECT model, endpoint FROM model_first_events", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(model, "slow/m");
    for _ in 0..49 {
        conn.execute(
            "INSERT INTO model_first_events (model, endpoint, first_event_ms, recorded_at)
             VALUES (?1, ?2, 2600, 0)",
            (&model, &endpoint),
        )
        .unwrap();
    }
    drop(conn);
    let second = args(&cfg).output().unwrap();
    let ev = events(&second.stdout);
    assert_eq!(
        second.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(finished(&ev)["output"], "by-fast");
    let hedge = of_type(&ev, "model.hedge");
    assert_eq!(hedge.len(), 1, "{ev:?}");
    let after = hedge[0]["after_seconds"].as_f64().unwrap();
    assert!((5.2..6.5).contains(&after), "{after}");
}

#[test]
fn auto_learns_from_the_runs_own_requests_with_the_health_record_off() {
    // Ten quick steps teach the run the primary's first-event times; the
    // eleventh request stalls and is hedged at the 5 s floor, not at the
    // 20 s of a model with fewer than ten known.
    let slow = Stub::start(|i, _| {
        if i < 10 {
            chat_sse_tool_call(&format!("c{i}"), "bash", r#"{"command":"true"}"#)
        } else {
            Reply::sse(vec![]).cut_after(0, End::Stall(Duration::from_secs(40)))
        }
    });
    let fast = Stub::sequence(vec![chat_sse_submit("c1", "by-fast")]);
    let env = TestEnv::new();
    let r = run(
        &env,
        &providers(&slow, &fast),
        &[
            "-m",
            "slow/m",
            "--fallback-model",
            "fast/m",
            "--hedge-after",
            "auto",
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(finished(&r.events)["output"], "by-fast");
    let hedge = of_type(&r.events, "model.hedge");
    assert_eq!(hedge.len(), 1, "{:?}", r.events);
    assert_eq!(hedge[0]["step"], 11);
    let after = hedge[0]["after_seconds"].as_f64().unwrap();
    assert!((5.0..6.5).contains(&after), "{after}");
    assert!(r.took < Duration::from_secs(15), "took {:?}", r.took);
}
