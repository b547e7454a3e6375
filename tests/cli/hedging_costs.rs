//! What a hedge costs and where it shows (SPEC 23): the loser's row when
//! no response came, its estimated input counted in the run's budgets, and
//! the trajectory's `hedges` only when a hedge was sent.

use std::time::Duration;

use rusqlite::Connection;

use super::hedging::{providers, rows, run, FAST_RETRY};
use crate::support::openai::chat_sse_submit;
use crate::support::stub::Stub;
use crate::support::{events, finished, of_type, read_json, TestEnv};

#[test]
fn a_loser_without_a_response_has_no_status_and_its_estimate_is_spent_in_the_budgets() {
    // The primary sends not even its headers for half a minute.
    let slow = Stub::sequence(vec![
        chat_sse_submit("c1", "by-slow").delay(Duration::from_secs(30))
    ]);
    let fast = Stub::sequence(vec![chat_sse_submit("c1", "by-fast")]);
    let env = TestEnv::new();
    let health = env.file("health.db");
    let db = env.file("log.db");
    let config = format!(
        "health_db: {}\nbudgets: [{{usd: 50, per: day}}, {{usd: 50, per: day, model: slow/m}}]\n{}",
        health.display(),
        providers(&slow, &fast)
    );
    let cfg = env.write("costs.yaml", &config);
    let out = env
        .cmd()
        .env("SLOW_KEY", "sk-test-slow")
        .env("FAST_KEY", "sk-test-fast")
        .args(["-c", cfg.to_str().unwrap(), "--json"])
        .args(["-m", "slow/m", "--fallback-model", "fast/m"])
        .args(["--hedge-after", "300ms", "--log-db", db.to_str().unwrap()])
        .arg("task")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["output"], "by-fast");

    let rows = rows(&db);
    assert_eq!(rows.len(), 2, "{rows:?}");
    let loser = rows.iter().find(|r| r.0 == "slow/m").unwrap();
    assert_eq!(loser.3, "hedged_out");
    assert_eq!(
        (loser.2, loser.4),
        (None, None),
        "no response came: {loser:?}"
    );
    assert!(loser.5 > 0, "{loser:?}");
    assert_eq!(loser.6, 0);
    assert!(
        (loser.7 - loser.5 as f64 * 2.0 / 1e6).abs() < 1e-12,
        "{loser:?}"
    );
    let winner = rows.iter().find(|r| r.0 == "fast/m").unwrap();
    assert_eq!(winner.3, "ok");

    let cost = finished(&ev)["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - (winner.7 + loser.7)).abs() < 1e-9,
        "{cost} {rows:?}"
    );
    // Both budgets the loser matches were charged its estimate; the run's
    // whole budget its cost and the winner's.
    let conn = Connection::open(&health).unwrap();
    let spent = |budget: &str| -> f64 {
        let nano: i64 = conn
            .query_row(
                "SELECT spent_nano_usd FROM budget_spend WHERE budget = ?1",
                [budget],
                |r| r.get(0),
            )
            .unwrap();
        nano as f64 / 1e9
    };
    assert!(
        (spent("day") - cost).abs() < 1e-8,
        "{} vs {cost}",
        spent("day")
    );
    let by_slow = spent("day model=slow/m");
    assert!((by_slow - loser.7).abs() < 1e-8, "{by_slow} vs {loser:?}");
}

#[test]
fn no_hedges_in_the_trajectory_when_none_was_sent() {
    let slow = Stub::sequence(vec![chat_sse_submit("c1", "by-slow")]);
    let fast = Stub::sequence(vec![chat_sse_submit("c1", "by-fast")]);
    let env = TestEnv::new();
    let traj = env.file("t.json");
    let r = run(
        &env,
        &providers(&slow, &fast),
        &[
            "-m",
            "slow/m",
            "--fallback-model",
            "fast/m",
            "--hedge-after",
            "5s",
            "-o",
            traj.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(finished(&r.events)["output"], "by-slow");
    assert!(of_type(&r.events, "model.hedge").is_empty());
    let t = read_json(&traj);
    assert!(t.get("hedges").is_none(), "{t}");
    assert_eq!(fast.count(), 0);
}

#[test]
fn an_original_that_fails_first_leaves_the_hedge_to_win_as_a_switch() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n  delay: 300ms\n");
    let b = env.script(
        "b.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: by-b}}\n  delay: 700ms\n",
    );
    let db = env.file("log.db");
    let r = run(
        &env,
        FAST_RETRY,
        &[
            "-m",
            &a,
            "--fallback-model",
            &b,
            "--hedge-after",
            "100ms",
            "--log-db",
            db.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(finished(&r.events)["output"], "by-b");
    let fallback = of_type(&r.events, "model.fallback");
    assert_eq!(fallback.len(), 1, "{:?}", r.events);
    assert_eq!(fallback[0]["reason"], "hedge");
    assert_eq!(fallback[0]["attempts"], 1);
    let settled = of_type(&r.events, "model.hedge_settled");
    assert_eq!(settled.len(), 1);
    assert_eq!(
        (&settled[0]["winner"], &settled[0]["loser"]),
        (&b.as_str().into(), &a.as_str().into())
    );
    assert!(
        of_type(&r.events, "provider.retry").is_empty(),
        "the original is not retried"
    );
    let outcomes: Vec<(String, String)> = rows(&db).into_iter().map(|r| (r.0, r.3)).collect();
    assert_eq!(
        outcomes,
        [
            (a.clone(), "http_503".to_string()),
            (b.clone(), "ok".to_string())
        ]
    );
}
