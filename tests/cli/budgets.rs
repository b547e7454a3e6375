//! Budgets across runs (SPEC section 19), from the outside: a loopback
//! OpenAI-compatible server whose replies report fixed usage, priced by the
//! config (`gw/big` costs $0.12 per tool-call reply, `gw/small` $0.012),
//! the health record's SQLite file, and a real redis-server shared by two
//! simulated machines.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{Datelike, Days, Utc};
use rusqlite::Connection;
use serde_json::{json, Value};

use crate::support::openai::{chat_sse_submit, chat_sse_tool_call};
use crate::support::redis::RedisServer;
use crate::support::stub::Stub;
use crate::support::{events, finished, of_type, read_json, TestEnv};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

/// A server for both models: `big` calls `bash` (`true`) on every request
/// up to `big_steps` and submits after; `small` submits at once. Every
/// tool-call reply reports 100 input tokens (80 cached) and 20 output.
fn server(big_steps: usize) -> Stub {
    Stub::start(move |n, req| {
        let body = req.json();
        if body["model"] == "big" && n < big_steps {
            chat_sse_tool_call(&format!("call_{n}"), "bash", r#"{"command":"true"}"#)
        } else {
            chat_sse_submit(&format!("call_{n}"), &format!("done by {}", body["model"]))
        }
    })
}

/// The provider `gw` on `stub`, then `more` (budgets, health_db...).
fn config(stub: &Stub, more: &str) -> String {
    format!(
        "providers:
  gw:
    api: openai
    endpoint: {}/v1
    models:
      big: {{input_price: 1000, output_price: 1000, cached_input_price: 1000}}
      small: {{input_price: 100, output_price: 100, cached_input_price: 100}}
      free: {{context_window: 100000}}
retry: {{attempts: 2, backoff: 1ms, jitter: 0}}
{more}",
        stub.url()
    )
}

fn machine(stub: &Stub, more: &str) -> TestEnv {
    let env = TestEnv::new();
    env.user_config(&config(stub, more));
    env
}

struct Ran {
    events: Vec<Value>,
    stderr: String,
    stdout: String,
    code: Option<i32>,
}

/// Runs the binary; a step limit keeps a broken budget from running on.
fn run(env: &TestEnv, args: &[&str]) -> Ran {
    let out = env
        .cmd()
        .args(["--step-limit", "12"])
        .args(args)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    Ran {
        events: if args.contains(&"--json") {
            events(&out.stdout)
        } else {
            Vec::new()
        },
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        stdout,
        code: out.status.code(),
    }
}

fn json_run(env: &TestEnv, args: &[&str]) -> Ran {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    all.push("fix the bug");
    run(env, &all)
}

fn warnings(ev: &[Value]) -> Vec<String> {
    of_type(ev, "warning")
        .iter()
        .map(|e| e["message"].as_str().unwrap().to_string())
        .collect()
}

fn models_asked(stub: &Stub) -> Vec<String> {
    stub.requests()
        .iter()
        .map(|r| r.json()["model"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn health_db(env: &TestEnv) -> PathBuf {
    env.home().join(".local/state/tinyagent/health.db")
}

/// `(budget, spent in nano-USD)` of every row of the file.
fn rows(db: &Path) -> Vec<(String, i64)> {
    let conn = Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT budget, spent_nano_usd FROM budget_spend ORDER BY budget, period_start")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

/// Waits until the current `unit`-long period (an hour or a day, UTC) has
/// more than 20 s left, so a test's runs all fall in one period.
fn settle(unit: i64) {
    let left = unit - now_ms().rem_euclid(unit);
    if left < 20_000 {
        std::thread::sleep(Duration::from_millis(left as u64 + 100));
    }
}

/// The end of today (UTC), as the error and `--check` write it.
fn tomorrow() -> String {
    let date = Utc::now().date_naive() + Days::new(1);
    format!("{date}T00:00:00Z")
}

/// The start of next ISO week (UTC).
fn next_monday() -> String {
    let today = Utc::now().date_naive();
    let date = today + Days::new(7 - u64::from(today.weekday().num_days_from_monday()));
    format!("{date}T00:00:00Z")
}

#[test]
fn a_model_over_its_daily_cap_hands_over_to_the_cheaper_fallback() {
    settle(DAY);
    let stub = server(usize::MAX);
    let env = machine(
        &stub,
        "budgets: [{usd: 0.3, per: day, model: gw/big}, {usd: 50, per: day}]\n",
    );
    let out = env.file("out.json");
    let args = ["-m", "gw/big", "--fallback-model", "gw/small", "-o"];
    let first = json_run(&env, &[&args[..], &[out.to_str().unwrap()]].concat());
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    // $0.12, $0.24, then $0.36: the reply that crossed the cap was used.
    assert_eq!(models_asked(&stub), ["big", "big", "big", "small"]);
    let switches = of_type(&first.events, "model.fallback");
    assert_eq!(switches.len(), 1);
    assert_eq!(
        (&switches[0]["from"], &switches[0]["to"]),
        (&json!("gw/big"), &json!("gw/small"))
    );
    assert_eq!(switches[0]["reason"], "budget");
    assert_eq!(switches[0]["attempts"], 0);
    assert_eq!(switches[0]["step"], 4);
    assert!(
        first
            .stderr
            .contains("model fallback: gw/big -> gw/small (budget) at step 4"),
        "{}",
        first.stderr
    );
    let doc = read_json(&out);
    assert_eq!(doc["model_switches"][0]["reason"], "budget");
    assert_eq!(finished(&first.events)["active_model"], "gw/small");
    assert_eq!(
        rows(&health_db(&env)),
        [
            ("day".to_string(), 372_000_000),
            ("day model=gw/big".to_string(), 360_000_000)
        ]
    );

    // The next run knows at once, warns, and sends big nothing.
    let second = json_run(&env, &args[..4]);
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert_eq!(stub.count(), 5);
    assert_eq!(models_asked(&stub)[4], "small");
    assert_eq!(
        warnings(&second.events),
        [format!(
            "budget $0.3 per day for gw/big is spent ($0.3600 spent): requests it applies to are not sent until its period ends at {}",
            tomorrow()
        )]
    );
    assert_eq!(of_type(&second.events, "model.fallback")[0]["step"], 1);
}

#[test]
fn a_fleet_cap_ends_the_run_with_budget_limit_before_sending_more() {
    settle(DAY);
    let stub = server(usize::MAX);
    let env = machine(&stub, "budgets: [{usd: 0.3, per: day}]\n");
    let out = env.file("out.json");
    let log = env.file("log.db");
    let ran = json_run(
        &env,
        &[
            "-m",
            "gw/big",
            "-o",
            out.to_str().unwrap(),
            "--log-db",
            log.to_str().unwrap(),
        ],
    );
    assert_eq!(ran.code, Some(3), "{}", ran.stderr);
    assert_eq!(stub.count(), 3, "nothing sent once the cap was reached");
    let end = finished(&ran.events);
    let error = format!(
        "budget spent: $0.3 per day ($0.3600 spent; the period ends at {})",
        tomorrow()
    );
    assert_eq!(end["status"], "budget_limit");
    assert_eq!(end["exit_code"], 3);
    assert_eq!(end["error"], error.as_str());
    assert_eq!(end["steps"], 3);
    let doc = read_json(&out);
    assert_eq!(doc["status"], "budget_limit");
    assert_eq!(doc["error"], error.as_str());
    let (status, code): (String, i64) = Connection::open(&log)
        .unwrap()
        .query_row("SELECT status, exit_code FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!((status.as_str(), code), ("budget_limit", 3));

    // In human mode: the error, and how to go on.
    let human = run(
        &env,
        &["-m", "gw/big", "-o", out.to_str().unwrap(), "again"],
    );
    assert_eq!(human.code, Some(3));
    assert_eq!(stub.count(), 3);
    assert!(
        human.stderr.contains(&format!("error: {error}")),
        "{}",
        human.stderr
    );
    assert!(
        human
            .stderr
            .contains("(once the budget's period has rolled over)"),
        "{}",
        human.stderr
    );
}

#[test]
fn the_reply_that_crosses_a_cap_is_used_and_the_next_run_sends_nothing() {
    settle(DAY);
    let stub = server(0);
    let env = machine(&stub, "budgets: [{usd: 0.1, per: day}]\n");
    let first = json_run(&env, &["-m", "gw/big"]);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    assert_eq!(finished(&first.events)["status"], "submitted");
    let second = json_run(&env, &["-m", "gw/big"]);
    assert_eq!(second.code, Some(3), "{}", second.stderr);
    assert_eq!(stub.count(), 1);
    assert_eq!(finished(&second.events)["steps"], 0);
}

#[test]
fn a_run_stopped_by_a_budget_resumes_once_the_period_rolled_over() {
    settle(HOUR);
    let stub = server(2);
    let env = machine(&stub, "budgets: [{usd: 0.2, per: hour}]\n");
    let out = env.file("out.json");
    let out = out.to_str().unwrap();
    let first = json_run(&env, &["-m", "gw/big", "-o", out]);
    assert_eq!(first.code, Some(3), "{}", first.stderr);
    assert_eq!(stub.count(), 2);
    // Within the period, a resume stops again before sending anything.
    let early = json_run(&env, &["--resume", out]);
    assert_eq!(early.code, Some(3), "{}", early.stderr);
    assert_eq!(stub.count(), 2);
    // The period rolls over: the spend belongs to the hour before.
    Connection::open(health_db(&env))
        .unwrap()
        .execute(
            "UPDATE budget_spend SET period_start = period_start - ?1, period_end = period_end - ?1",
            [HOUR],
        )
        .unwrap();
    let resumed = json_run(&env, &["--resume", out]);
    assert_eq!(resumed.code, Some(0), "{}", resumed.stderr);
    assert_eq!(stub.count(), 3);
    let end = finished(&resumed.events);
    assert_eq!(end["status"], "submitted");
    assert_eq!(end["steps"], 3, "step numbers go on");
    assert!(
        (end["cost_usd"].as_f64().unwrap() - 0.36).abs() < 1e-9,
        "{end}"
    );
    assert_eq!(
        rows(&health_db(&env))
            .iter()
            .map(|r| r.1)
            .collect::<Vec<_>>(),
        [240_000_000, 120_000_000],
        "last hour's spend, and this hour's"
    );
}

#[test]
fn a_run_warns_at_start_when_a_budget_is_nearly_spent_or_a_member_is_unpriced() {
    settle(DAY);
    let stub = server(0);
    let env = machine(&stub, "budgets: [{usd: 0.14, per: day}]\n");
    let first = json_run(&env, &["-m", "gw/big"]);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    assert!(warnings(&first.events).is_empty(), "{:?}", first.events);
    let second = json_run(&env, &["-m", "gw/big", "--fallback-model", "gw/free"]);
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert_eq!(
        warnings(&second.events),
        [
            format!(
                "budget $0.14 per day is 85% spent ($0.1200 spent; the period ends at {})",
                tomorrow()
            ),
            "model gw/free has no known price: its responses count as $0 toward the budget $0.14 per day"
                .to_string(),
        ]
    );
}

#[test]
fn check_prints_one_line_per_budget() {
    settle(DAY);
    let stub = server(0);
    let env = machine(
        &stub,
        "budgets:\n  - {usd: 0.3, per: day, model: gw/big}\n  - {usd: 5, per: week}\n  - {usd: 2.5, per: month, provider: openai}\n",
    );
    let args = ["--check", "-m", "gw/big", "--fallback-model", "gw/small"];
    // Nothing spent yet, and no file made for it.
    let fresh = run(&env, &args);
    assert_eq!(fresh.code, Some(0), "{}", fresh.stderr);
    assert!(!health_db(&env).exists(), "--check writes no health record");
    assert!(
        fresh.stdout.contains(&format!(
            "budget  0.3 per day  gw/big  0.00 spent  resets {}\n",
            tomorrow()
        )),
        "{}",
        fresh.stdout
    );
    assert_eq!(json_run(&env, &["-m", "gw/big"]).code, Some(0));
    let spent = run(&env, &args);
    let budget_lines: Vec<&str> = spent
        .stdout
        .lines()
        .filter(|l| l.starts_with("budget"))
        .collect();
    let month_end = {
        let today = Utc::now().date_naive();
        let first = today.with_day(1).unwrap();
        let next = first.checked_add_months(chrono::Months::new(1)).unwrap();
        format!("{next}T00:00:00Z")
    };
    assert_eq!(
        budget_lines,
        [
            format!(
                "budget  0.3 per day  gw/big  0.12 spent  resets {}",
                tomorrow()
            ),
            format!("budget  5 per week  0.12 spent  resets {}", next_monday()),
            format!("budget  2.5 per month  openai  0.00 spent  resets {month_end}"),
        ]
    );
    assert!(spent.stdout.starts_with("ok  gw/big"), "{}", spent.stdout);

    let mut all = vec!["--json"];
    all.extend_from_slice(&args);
    let ev = run(&env, &all).events;
    let kinds: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "check.result",
            "check.result",
            "check.budget",
            "check.budget",
            "check.budget",
            "check.finished"
        ]
    );
    let day = &ev[2];
    assert_eq!(day["usd"], 0.3);
    assert_eq!(day["per"], "day");
    assert_eq!(day["model"], "gw/big");
    assert!(day.get("provider").is_none());
    assert_eq!(day["spent_usd"], 0.12);
    assert_eq!(day["exhausted"], false);
    assert_eq!(day["resets_at"], tomorrow().as_str());
    assert_eq!(ev[4]["provider"], "openai");
    assert!(ev[3].get("model").is_none() && ev[3].get("provider").is_none());
}

#[test]
fn a_budget_config_mistake_is_exit_2_naming_the_key_and_the_file() {
    let stub = server(0);
    for (budgets, expect) in [
        (
            "[{usd: 5, per: daily}]",
            "budgets[0].per: unknown period 'daily': use hour, day, week or month",
        ),
        (
            "[{usd: 5, per: day}, {usd: -1, per: week}]",
            "budgets[1].usd: the amount must be a number of USD, 0 or more, got -1",
        ),
        (
            "[{usd: 5, per: day, amount: 3}]",
            "budgets[0].amount: unknown field `amount`",
        ),
        (
            "[{usd: 5, per: day, modle: gw/big}]",
            "budgets[0].modle: unknown field `modle` (did you mean `model`?)",
        ),
        (
            "[{usd: 5, per: day, model: gw/big, provider: gw}]",
            "budgets[0]: give `model` or `provider`, not both",
        ),
        ("[{per: day}]", "budgets[0]: missing field `usd`"),
    ] {
        let env = machine(&stub, &format!("budgets: {budgets}\n"));
        let file = env.home().join(".config/tinyagent/config.yaml");
        let ran = run(&env, &["-m", "gw/big", "fix it"]);
        assert_eq!(ran.code, Some(2), "{budgets}: {}", ran.stderr);
        assert!(
            ran.stderr
                .contains(&format!("config {}: {expect}", file.display())),
            "{budgets}: {}",
            ran.stderr
        );
    }
    for (budgets, expect) in [
        (
            "[{usd: 5, per: day, provider: gww}]",
            "config budgets[0].provider: unknown provider 'gww' (did you mean 'gw'?)",
        ),
        (
            "[{usd: 5, per: day, model: big}]",
            "config budgets[0].model: 'big' is not a model spec (<provider>/<model>)",
        ),
        (
            "[{usd: 5, per: day}, {usd: 9, per: day}]",
            "config budgets[1]: budgets[0] already caps this period and scope (day)",
        ),
    ] {
        let env = machine(&stub, &format!("budgets: {budgets}\n"));
        let ran = run(&env, &["-m", "gw/big", "fix it"]);
        assert_eq!(ran.code, Some(2), "{budgets}: {}", ran.stderr);
        assert!(ran.stderr.contains(expect), "{budgets}: {}", ran.stderr);
    }
    assert_eq!(stub.count(), 0);
}

#[test]
fn without_the_health_record_a_run_counts_its_own_spend() {
    let stub = server(usize::MAX);
    let env = machine(&stub, "health_db: off\nbudgets: [{usd: 0.3, per: day}]\n");
    for expected in [3, 6] {
        let ran = json_run(&env, &["-m", "gw/big"]);
        assert_eq!(ran.code, Some(3), "{}", ran.stderr);
        assert_eq!(
            stub.count(),
            expected,
            "each run alone spends up to the cap"
        );
    }
    assert!(!health_db(&env).exists());
}

#[test]
fn a_subagents_spend_counts_toward_the_runs_budgets() {
    let env = TestEnv::new();
    let parent = env.script(
        "parent.yaml",
        "- tool_calls:\n    - {name: delegate, arguments: {task: look around}}\n  cost: 0.01\n",
    );
    let child = env.script(
        "child.yaml",
        "- tool_calls:\n    - {name: submit, arguments: {output: seen}}\n  cost: 0.5\n",
    );
    env.user_config(&format!(
        "subagents: {{model: \"{child}\"}}\nbudgets: [{{usd: 0.4, per: day}}]\n"
    ));
    let ran = json_run(&env, &["-m", &parent]);
    assert_eq!(ran.code, Some(3), "{}", ran.stderr);
    let end = finished(&ran.events);
    assert_eq!(end["status"], "budget_limit");
    assert!(
        end["error"].as_str().unwrap().contains("($0.5100 spent;"),
        "{end}"
    );
}

#[test]
fn machines_sharing_redis_share_the_budget() {
    settle(DAY);
    let redis = RedisServer::start(&[]);
    let stub = server(usize::MAX);
    let more = format!(
        "health_db: \"{}\"\nbudgets: [{{usd: 0.3, per: day}}]\n",
        redis.url(0)
    );
    let a = machine(&stub, &more);
    let b = machine(&stub, &more);
    let first = json_run(&a, &["-m", "gw/big", "--fallback-model", "gw/small"]);
    assert_eq!(first.code, Some(3), "{}", first.stderr);
    assert_eq!(stub.count(), 3);
    let second = json_run(&b, &["-m", "gw/big", "--fallback-model", "gw/small"]);
    assert_eq!(second.code, Some(3), "{}", second.stderr);
    assert_eq!(stub.count(), 3, "machine B sent nothing");
    assert!(
        warnings(&second.events)[0].starts_with("budget $0.3 per day is spent ($0.3600 spent)"),
        "{:?}",
        second.events
    );
    assert!(!health_db(&b).exists() && !health_db(&a).exists());
    // Only budget keys, periods and amounts in Redis.
    let dump = redis.dump();
    let start = now_ms() - now_ms().rem_euclid(DAY);
    assert!(
        dump.contains(&format!("tinyagent:budget:day@{start}")),
        "{dump}"
    );
    assert!(dump.contains("360000000"), "{dump}");
    assert!(!dump.contains("fix the bug"), "{dump}");
}
