//! Hedged first events (SPEC 23): a request whose first stream event is
//! late also goes to the next member, and the first to send an event wins.
//! Loopback stubs that stall on cue and scripted members that take their
//! time play the late and the quick providers.

use std::time::{Duration, Instant};

use rusqlite::Connection;
use serde_json::{json, Value};

use crate::support::openai::{chat_sse_submit, chat_sse_text};
use crate::support::stub::{End, Reply, Stub};
use crate::support::{events, finished, of_type, read_json, TestEnv};

pub(super) const FAST_RETRY: &str =
    "retry: {attempts: 3, backoff: 1ms, max_backoff: 5ms, jitter: 0}\n";

pub(super) struct Run {
    pub code: Option<i32>,
    pub events: Vec<Value>,
    pub stderr: String,
    pub took: Duration,
}

pub(super) fn run(env: &TestEnv, config: &str, args: &[&str]) -> Run {
    let cfg = env.write("config.yaml", &format!("health_db: off\n{config}"));
    let started = Instant::now();
    let out = env
        .cmd()
        .env("SLOW_KEY", "sk-test-slow")
        .env("FAST_KEY", "sk-test-fast")
        .args(["-c", cfg.to_str().unwrap(), "--json"])
        .args(args)
        .arg("task")
        .output()
        .unwrap();
    Run {
        code: out.status.code(),
        events: events(&out.stdout),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: started.elapsed(),
    }
}

/// Two OpenAI-compatible providers on loopback stubs, each with one priced
/// model `m`: `slow/m` (the primary) and `fast/m`.
pub(super) fn providers(slow: &Stub, fast: &Stub) -> String {
    let provider = |name: &str, stub: &Stub, key: &str| {
        format!(
            "  {name}:\n    api: openai\n    endpoint: {}/v1\n    api_key_env: {key}\n    models:\n      m: {{input_price: 2.0, output_price: 8.0}}\n",
            stub.url()
        )
    };
    format!(
        "providers:\n{}{}",
        provider("slow", slow, "SLOW_KEY"),
        provider("fast", fast, "FAST_KEY")
    )
}

/// `(model, attempt, first_event_ms, outcome, http_status, input_tokens,
/// output_tokens, cost_usd)` of every request, in order.
pub(super) type Row = (String, i64, Option<i64>, String, Option<i64>, i64, i64, f64);

pub(super) fn rows(db: &std::path::Path) -> Vec<Row> {
    let conn = Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT model, attempt, first_event_ms, outcome, http_status, input_tokens,
                    output_tokens, cost_usd FROM model_requests ORDER BY rowid",
        )
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
            ))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

fn warnings(events: &[Value]) -> Vec<String> {
    of_type(events, "warning")
        .iter()
        .map(|w| w["message"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_silent_primary_is_hedged_and_the_fallback_answers_within_seconds() {
    // The primary sends its headers and then nothing for a minute: headers
    // are no stream event.
    let slow = Stub::sequence(vec![
        Reply::sse(vec![]).cut_after(0, End::Stall(Duration::from_secs(60)))
    ]);
    let fast = Stub::sequence(vec![chat_sse_submit("c1", "answered-by-fast")]);
    let env = TestEnv::new();
    let db = env.file("log.db");
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
            "500ms",
            "--log-db",
            db.to_str().unwrap(),
            "-o",
            traj.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.took < Duration::from_secs(5), "took {:?}", r.took);
    let end = finished(&r.events);
    assert_eq!(end["output"], "answered-by-fast");
    assert_eq!(end["active_model"], "fast/m");
    assert_eq!(end["model_fallbacks"], 1);

    let hedge = of_type(&r.events, "model.hedge");
    assert_eq!(hedge.len(), 1, "{:?}", r.events);
    assert_eq!(hedge[0]["step"], 1);
    assert_eq!(hedge[0]["from"], "slow/m");
    assert_eq!(hedge[0]["to"], "fast/m");
    let after = hedge[0]["after_seconds"].as_f64().unwrap();
    assert!((0.5..1.5).contains(&after), "{after}");
    let settled = of_type(&r.events, "model.hedge_settled");
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0]["winner"], "fast/m");
    assert_eq!(settled[0]["loser"], "slow/m");
    assert!(settled[0]["winner_first_event_ms"].as_u64().unwrap() < 2000);
    let fallback = of_type(&r.events, "model.fallback");
    assert_eq!(fallback.len(), 1);
    assert_eq!(
        (
            &fallback[0]["from"],
            &fallback[0]["to"],
            &fallback[0]["reason"],
            &fallback[0]["attempts"]
        ),
        (
            &json!("slow/m"),
            &json!("fast/m"),
            &json!("hedge"),
            &json!(1)
        )
    );

    let line =
        format!("model hedge: slow/m + fast/m at step 1 ({after:.1}s without a first event)\n");
    assert!(r.stderr.contains(&line), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("model fallback: slow/m -> fast/m (hedge) at step 1\n"),
        "{}",
        r.stderr
    );

    let rows = rows(&db);
    assert_eq!(rows.len(), 2, "{rows:?}");
    let loser = rows.iter().find(|r| r.0 == "slow/m").unwrap();
    assert_eq!(loser.3, "hedged_out");
    assert_eq!(loser.1, 1);
    assert_eq!(loser.2, None, "no first event came");
    assert_eq!(loser.4, Some(200), "its headers came");
    assert!(loser.5 > 0, "its estimated input: {loser:?}");
    assert_eq!(loser.6, 0);
    let loser_cost = loser.5 as f64 * 2.0 / 1e6;
    assert!((loser.7 - loser_cost).abs() < 1e-12, "{loser:?}");
    let winner = rows.iter().find(|r| r.0 == "fast/m").unwrap();
    assert_eq!((winner.3.as_str(), winner.4), ("ok", Some(200)));
    let cost = end["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - (winner.7 + loser.7)).abs() < 1e-9,
        "the loser's estimate is in the run's cost: {cost} vs {rows:?}"
    );

    let t = read_json(&traj);
    assert_eq!(
        t["hedges"],
        json!([{"step": 1, "from": "slow/m", "to": "fast/m", "winner": "fast/m"}])
    );
    assert_eq!(t["model_switches"][0]["reason"], "hedge");
    assert_eq!(slow.count(), 1, "a hedge is never retried on the original");
}

#[test]
fn the_original_winning_changes_nothing() {
    let env = TestEnv::new();
    let a = env.script(
        "a.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: by-a}}\n  delay: 400ms\n",
    );
    let b = env.script(
        "b.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: by-b}}\n  delay: 5s\n",
    );
    let db = env.file("log.db");
    let traj = env.file("t.json");
    let r = run(
        &env,
        "",
        &[
            "-m",
            &a,
            "--fallback-model",
            &b,
            "--hedge-after",
            "100ms",
            "--log-db",
            db.to_str().unwrap(),
            "-o",
            traj.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.took < Duration::from_secs(4),
        "the loser is not waited for"
    );
    assert_eq!(finished(&r.events)["output"], "by-a");
    assert_eq!(finished(&r.events)["active_model"], a.as_str());
    assert_eq!(of_type(&r.events, "model.hedge").len(), 1);
    let settled = of_type(&r.events, "model.hedge_settled");
    assert_eq!(settled[0]["winner"], a.as_str());
    assert_eq!(settled[0]["loser"], b.as_str());
    assert!(settled[0]["winner_first_event_ms"].as_u64().unwrap() >= 400);
    assert!(of_type(&r.events, "model.fallback").is_empty());
    assert!(!r.stderr.contains("model fallback"), "{}", r.stderr);
    let mut outcomes: Vec<(String, String)> = rows(&db).into_iter().map(|r| (r.0, r.3)).collect();
    outcomes.sort();
    assert_eq!(
        outcomes,
        [
            (a.clone(), "ok".to_string()),
            (b.clone(), "hedged_out".to_string()),
        ]
    );
    let t = read_json(&traj);
    assert_eq!(
        t["hedges"],
        json!([{"step": 1, "from": a, "to": b, "winner": a}])
    );
    assert!(t.get("model_switches").is_none());
}

#[test]
fn a_partner_that_fails_fast_leaves_the_original_to_answer() {
    for (partner, outcome) in [
        ("- error: {status: 401}\n", "http_401"),
        ("- error: {status: 503}\n", "http_503"),
    ] {
        let env = TestEnv::new();
        let a = env.script(
            "a.yaml",
            "- tool_calls:\n  - {name: submit, arguments: {output: by-a}}\n  delay: 500ms\n",
        );
        let b = env.script("b.yaml", partner);
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
        assert_eq!(r.code, Some(0), "{outcome}: {}", r.stderr);
        assert_eq!(finished(&r.events)["output"], "by-a");
        assert!(of_type(&r.events, "model.fallback").is_empty());
        let settled = of_type(&r.events, "model.hedge_settled");
        assert_eq!(settled.len(), 1, "{outcome}");
        assert_eq!(settled[0]["winner"], a.as_str());
        let outcomes: Vec<(String, String)> = rows(&db).into_iter().map(|r| (r.0, r.3)).collect();
        assert_eq!(
            outcomes,
            [
                (b.clone(), outcome.to_string()),
                (a.clone(), "ok".to_string())
            ]
        );
    }
}

#[test]
fn both_failing_goes_on_from_the_hedge_member_with_nothing_sent_twice() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n  delay: 300ms\n");
    let b = env.script(
        "b.yaml",
        "- error: {status: 503}\n  delay: 400ms\n- tool_calls:\n  - {name: submit, arguments: {output: by-b}}\n",
    );
    let db = env.file("log.db");
    let traj = env.file("t.json");
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
            "-o",
            traj.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(finished(&r.events)["output"], "by-b");
    let fallback = of_type(&r.events, "model.fallback");
    assert_eq!(fallback.len(), 1);
    assert_eq!(fallback[0]["reason"], "http_503");
    assert_eq!(fallback[0]["attempts"], 1);
    let retries = of_type(&r.events, "provider.retry");
    assert_eq!(retries.len(), 1, "b's own retry: {retries:?}");
    assert_eq!(retries[0]["model"], b.as_str());
    let requests: Vec<(String, i64, String)> =
        rows(&db).into_iter().map(|r| (r.0, r.1, r.3)).collect();
    assert_eq!(
        requests,
        [
            (a.clone(), 1, "http_503".to_string()),
            (b.clone(), 1, "http_503".to_string()),
            (b.clone(), 2, "ok".to_string()),
        ]
    );
    let t = read_json(&traj);
    assert_eq!(
        t["hedges"],
        json!([{"step": 1, "from": a, "to": b, "winner": null}])
    );
}

#[test]
fn the_hedge_budget_holds_back_later_hedges_with_one_warning() {
    let env = TestEnv::new();
    let step = "- tool_calls:\n  - {name: bash, arguments: {command: 'true'}}\n  delay: 300ms\n";
    let a = env.script(
        "a.yaml",
        &format!(
            "{step}{step}{step}- tool_calls:\n  - {{name: submit, arguments: {{output: by-a}}}}\n  delay: 300ms\n"
        ),
    );
    let b = env.script("b.yaml", "- text: late\n  delay: 10s\n");
    let r = run(
        &env,
        "fallback: {hedge_after: 100ms, hedge_budget: 2.5%}\n",
        &["-m", &a, "--fallback-model", &b],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(finished(&r.events)["steps"], 4);
    assert_eq!(
        of_type(&r.events, "model.hedge").len(),
        1,
        "the first hedge is always allowed"
    );
    let held: Vec<String> = warnings(&r.events)
        .into_iter()
        .filter(|w| w.contains("hedge budget"))
        .collect();
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(held[0].contains("held to 2.5% of"), "{held:?}");
}

#[test]
fn a_first_event_then_a_stall_is_not_hedged() {
    // The first reply sends one event and goes silent: the idle timeout
    // handles it (SPEC 4), not a hedge; the retry answers.
    let slow = Stub::sequence(vec![
        chat_sse_text("partial answer").cut_after(1, End::Stall(Duration::from_secs(5))),
        chat_sse_submit("c1", "by-slow"),
    ]);
    let fast = Stub::sequence(vec![chat_sse_submit("c1", "by-fast")]);
    let env = TestEnv::new();
    let config = format!(
        "retry: {{backoff: 1ms, jitter: 0, stream_idle_timeout: 800ms}}\n{}",
        providers(&slow, &fast)
    );
    let r = run(
        &env,
        &config,
        &[
            "-m",
            "slow/m",
            "--fallback-model",
            "fast/m",
            "--hedge-after",
            "200ms",
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(finished(&r.events)["output"], "by-slow");
    assert!(
        of_type(&r.events, "model.hedge").is_empty(),
        "{:?}",
        r.events
    );
    assert_eq!(fast.count(), 0);
    assert_eq!(of_type(&r.events, "provider.retry")[0]["reason"], "timeout");
}

#[test]
fn without_hedge_after_a_late_first_event_is_waited_for() {
    let env = TestEnv::new();
    let a = env.script(
        "a.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: by-a}}\n  delay: 600ms\n",
    );
    let b = env.script("b.yaml", "- text: never asked\n");
    let r = run(&env, "", &["-m", &a, "--fallback-model", &b]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(of_type(&r.events, "model.hedge").is_empty());
    // The flag's `off` wins over the config's duration.
    let r = run(
        &env,
        "fallback: {hedge_after: 100ms}\n",
        &["-m", &a, "--fallback-model", &b, "--hedge-after", "off"],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(of_type(&r.events, "model.hedge").is_empty());
}

#[test]
fn hedge_settings_are_validated_naming_the_key_and_the_file() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- text: hi\n");
    for (yaml, key) in [
        ("fallback: {hedge_after: soon}\n", "hedge_after"),
        ("fallback: {hedge_after: 5}\n", "hedge_after"),
        ("fallback: {hedge_budget: 150%}\n", "hedge_budget"),
        ("fallback: {hedge_budget: 10}\n", "hedge_budget"),
        ("fallback: {hedge_budget: -1%}\n", "hedge_budget"),
    ] {
        let file = env.write("c.yaml", yaml);
        let out = env
            .cmd()
            .args(["-m", &a, "-c", file.to_str().unwrap(), "t"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{yaml}: {stderr}");
        assert!(stderr.starts_with("tinyagent: error: "), "{stderr}");
        assert!(stderr.contains(key), "{yaml}: {stderr}");
        assert!(stderr.contains("c.yaml"), "{yaml}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    let out = env
        .cmd()
        .args(["-m", &a, "--hedge-after", "soon", "t"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--hedge-after"), "{stderr}");
    for good in [
        "fallback: {hedge_after: auto, hedge_budget: 25%}\n",
        "fallback: {hedge_after: off}\n",
    ] {
        let file = env.write("c.yaml", good);
        let out = env
            .cmd()
            .args(["-m", &a, "-c", file.to_str().unwrap(), "t"])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{good}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
