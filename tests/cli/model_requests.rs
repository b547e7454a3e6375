//! `model_requests` in the log database (SPEC section 8): one row per
//! request sent to a model, every attempt, with its outcome, status, time to
//! first event, tokens and cost; the migration from schema version 1; the
//! log guide's example queries (docs/events-and-logs.md) run on a database
//! the binary made.

use rusqlite::Connection;

use crate::support::openai::{chat_sse_submit, chat_sse_tool_call};
use crate::support::stub::{Reply, Stub};
use crate::support::TestEnv;

const KEY: &str = "sk-test-Zq8SECRETkey1234567890";

const FAST_RETRY: &str = "retry: {attempts: 3, backoff: 1ms, max_backoff: 5ms, jitter: 0}\n";

type Row = (
    String,
    i64,
    String,
    Option<String>,
    i64,
    Option<i64>,
    String,
    Option<i64>,
    i64,
    i64,
    f64,
);

/// Every row: run_id, step, model, endpoint, attempt, first_event_ms,
/// outcome, http_status, input_tokens, output_tokens, cost_usd.
fn rows(db: &std::path::Path) -> Vec<Row> {
    let conn = Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT run_id, step, model, endpoint, attempt, first_event_ms, outcome, http_status,
                    input_tokens, output_tokens, cost_usd
             FROM model_requests ORDER BY rowid",
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
                r.get(8)?,
                r.get(9)?,
                r.get(10)?,
            ))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

fn run_id(db: &std::path::Path) -> String {
    Connection::open(db)
        .unwrap()
        .query_row(
            "SELECT run_id FROM runs WHERE resumed_from IS NULL",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn every_attempt_over_http_is_a_row_with_status_timing_tokens_and_cost() {
    let env = TestEnv::new();
    // The gateway publishes its limits (SPEC 17): the pacing record
    // beside the health record keeps them under a fingerprint of the key.
    let limits = |reply: Reply| {
        reply
            .header("x-ratelimit-remaining-requests", "50")
            .header("x-ratelimit-reset-requests", "20s")
    };
    let stub = Stub::sequence(vec![
        limits(Reply::status(503)),
        limits(chat_sse_tool_call(
            "call_1",
            "bash",
            r#"{"command":"true"}"#,
        )),
        chat_sse_submit("call_2", "done"),
    ]);
    let config = env.write(
        "c.yaml",
        &format!(
            "{FAST_RETRY}providers:\n  gw:\n    api: openai\n    endpoint: {}/v1\n    api_key_env: GW_KEY\n    models:\n      m: {{input_price: 1.0, output_price: 2.0}}\n",
            stub.url()
        ),
    );
    let db = env.file("log.db");
    let out = env
        .cmd()
        .env("GW_KEY", KEY)
        .args(["-m", "gw/m", "-q", "--log-db", db.to_str().unwrap(), "-c"])
        .arg(&config)
        .arg("task")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = rows(&db);
    let id = run_id(&db);
    let endpoint = Some(stub.url());
    let shape: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.0.clone(),
                r.1,
                r.2.as_str(),
                r.3.clone(),
                r.4,
                r.5.is_some(),
                r.6.as_str(),
                r.7,
                r.8,
                r.9,
            )
        })
        .collect();
    // The stub's tool-call replies report 100 input and 20 output tokens.
    assert_eq!(
        shape,
        [
            (
                id.clone(),
                1,
                "gw/m",
                endpoint.clone(),
                1,
                false,
                "http_503",
                Some(503),
                0,
                0
            ),
            (
                id.clone(),
                1,
                "gw/m",
                endpoint.clone(),
                2,
                true,
                "ok",
                Some(200),
                100,
                20
            ),
            (
                id.clone(),
                2,
                "gw/m",
                endpoint.clone(),
                1,
                true,
                "ok",
                Some(200),
                100,
                20
            ),
        ]
    );
    assert_eq!(rows[0].10, 0.0);
    // 100 input at $1/M (80 cached at the input price) + 20 output at $2/M.
    assert!((rows[1].10 - 0.00014).abs() < 1e-12, "{}", rows[1].10);
    // The row's cost agrees with the run's total.
    let total: f64 = Connection::open(&db)
        .unwrap()
        .query_row("SELECT cost_usd FROM runs", [], |r| r.get(0))
        .unwrap();
    assert!((total - rows.iter().map(|r| r.10).sum::<f64>()).abs() < 1e-12);
    let health = env.home().join(".local/state/tinyagent/health.db");
    for file in [&db, &health] {
        let text = String::from_utf8_lossy(&std::fs::read(file).unwrap()).into_owned();
        assert!(
            !text.contains(KEY) && !text.contains("SECRET"),
            "{}",
            file.display()
        );
    }
    let accounts: i64 = Connection::open(&health)
        .unwrap()
        .query_row("SELECT count(*) FROM pacing", [], |r| r.get(0))
        .unwrap();
    assert_eq!(accounts, 1, "the pacing record was written");
}

#[test]
fn a_chain_records_each_models_attempts_and_subagents_their_own() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let child = env.script(
        "child.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: report}}\n  usage: {input: 10, output: 1}\n  cost: 0.01\n",
    );
    let b = env.script(
        "b.yaml",
        "- tool_calls:\n  - {name: delegate, arguments: {task: look}}\n  usage: {input: 5, output: 1}\n  cost: 0.5\n- tool_calls:\n  - {name: submit, arguments: {output: done}}\n  usage: {input: 5, output: 1}\n  cost: 0.25\n",
    );
    let config = env.write(
        "c.yaml",
        &format!("{FAST_RETRY}subagents: {{model: '{child}', step_limit: 3}}\n"),
    );
    let db = env.file("log.db");
    let out = env
        .cmd()
        .args(["-m", &a, "--fallback-model", &b, "-q", "--log-db"])
        .arg(&db)
        .arg("-c")
        .arg(&config)
        .arg("task")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = rows(&db);
    let id = run_id(&db);
    let parent: Vec<_> = rows
        .iter()
        .filter(|r| r.0 == id)
        .map(|r| (r.1, r.2.clone(), r.4, r.6.clone(), r.7, r.10))
        .collect();
    assert_eq!(
        parent,
        [
            (1, a.clone(), 1, "http_503".into(), Some(503), 0.0),
            (1, a.clone(), 2, "http_503".into(), Some(503), 0.0),
            (1, a.clone(), 3, "http_503".into(), Some(503), 0.0),
            (1, b.clone(), 1, "ok".into(), Some(200), 0.5),
            (2, b.clone(), 1, "ok".into(), Some(200), 0.25),
        ]
    );
    // Script models have no endpoint; answered requests had a first event.
    assert!(rows.iter().all(|r| r.3.is_none()));
    assert!(rows.iter().all(|r| r.5.is_some() == (r.6 == "ok")));
    // The subagent's request is a row of its own run.
    let kid: Vec<_> = rows.iter().filter(|r| r.0 != id).collect();
    assert_eq!(kid.len(), 1, "{rows:?}");
    assert_eq!(
        (kid[0].2.as_str(), kid[0].6.as_str()),
        (child.as_str(), "ok")
    );
    assert_eq!(kid[0].10, 0.01);
}

/// The SQL blocks of docs/events-and-logs.md's "Log database" section after the
/// `model_requests` paragraph.
fn readme_queries() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/events-and-logs.md"
    ))
    .unwrap();
    let section = readme
        .split("\n`model_requests` has one row")
        .nth(1)
        .expect("the log guide explains model_requests");
    let section = section.split("\n## ").next().unwrap();
    let block = section
        .split("```sql\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("an SQL block");
    block
        .split(';')
        .map(str::trim)
        .filter(|q| {
            q.lines()
                .any(|l| !l.trim().is_empty() && !l.trim().starts_with("--"))
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn the_log_guides_queries_run_on_a_database_the_binary_made() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let b = env.script(
        "b.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: done}}\n  usage: {input: 5, output: 1}\n  cost: 0.25\n",
    );
    let config = env.write("c.yaml", FAST_RETRY);
    let db = env.file("log.db");
    env.cmd()
        .args(["-m", &a, "--fallback-model", &b, "-q", "--log-db"])
        .arg(&db)
        .arg("-c")
        .arg(&config)
        .arg("task")
        .assert()
        .code(0);
    let queries = readme_queries();
    assert_eq!(queries.len(), 3, "{queries:?}");
    let conn = Connection::open(&db).unwrap();
    let mut results = Vec::new();
    for q in &queries {
        let mut stmt = conn.prepare(q).unwrap_or_else(|e| panic!("{q}: {e}"));
        let width = stmt.column_count();
        let rows: Vec<Vec<String>> = stmt
            .query_map([], |r| {
                (0..width)
                    .map(|i| {
                        r.get::<_, rusqlite::types::Value>(i)
                            .map(|v| format!("{v:?}"))
                    })
                    .collect()
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        results.push(rows);
    }
    // Failure rate: one day, provider `script`, 4 requests, 3 failed.
    assert_eq!(results[0].len(), 1, "{:?}", results[0]);
    assert_eq!(
        results[0][0][1..],
        [
            "Text(\"script\")".to_string(),
            "Integer(4)".into(),
            "Integer(3)".into(),
            "Real(75.0)".into()
        ]
    );
    // Time to first event: only the answering model had a first event.
    assert_eq!(results[1].len(), 1, "{:?}", results[1]);
    assert_eq!(results[1][0][0], format!("Text({b:?})"));
    // Cost per model: b first with its $0.25, a with 3 requests at $0.
    assert_eq!(results[2].len(), 2);
    assert_eq!(results[2][0][0], format!("Text({b:?})"));
    assert_eq!(results[2][0][5], "Real(0.25)");
    assert_eq!(results[2][1][1], "Integer(3)");
}

/// Schema version 1 as tinyagent 0.1 wrote it.
const V1_SCHEMA: &str = "CREATE TABLE runs (run_id TEXT PRIMARY KEY, started_at TEXT NOT NULL,
    finished_at TEXT, task TEXT NOT NULL, cwd TEXT NOT NULL, model TEXT NOT NULL,
    fallback_models TEXT, active_model TEXT, status TEXT NOT NULL, exit_code INTEGER,
    steps INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, cost_usd REAL NOT NULL DEFAULT 0, error TEXT,
    resumed_from TEXT);
CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, ts TEXT NOT NULL,
    type TEXT NOT NULL, step INTEGER, data TEXT NOT NULL, PRIMARY KEY (run_id, seq));
CREATE TABLE tool_calls (run_id TEXT NOT NULL, step INTEGER NOT NULL, call_id TEXT NOT NULL,
    tool TEXT NOT NULL, arguments TEXT NOT NULL, ok INTEGER, output TEXT,
    started_at TEXT NOT NULL, finished_at TEXT, duration_ms INTEGER);
INSERT INTO runs (run_id, started_at, task, cwd, model, status)
    VALUES ('old-run', '2025-06-01T00:00:00Z', 'old task', '/w', 'script/x', 'completed');
INSERT INTO events (run_id, seq, ts, type, data)
    VALUES ('old-run', 1, '2025-06-01T00:00:00Z', 'run.started', '{}');
PRAGMA user_version = 1;";

#[test]
fn a_version_one_database_is_upgraded_in_place_keeping_its_rows() {
    let env = TestEnv::new();
    let db = env.file("log.db");
    Connection::open(&db)
        .unwrap()
        .execute_batch(V1_SCHEMA)
        .unwrap();
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: done}}\n",
    );
    env.cmd()
        .args(["-m", &model, "-q", "--log-db"])
        .arg(&db)
        .arg("task")
        .assert()
        .code(0);
    let conn = Connection::open(&db).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 4);
    let (runs, old, requests): (i64, i64, i64) = conn
        .query_row(
            "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM events WHERE run_id = 'old-run'),
                    (SELECT count(*) FROM model_requests)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((runs, old, requests), (2, 1, 1));
}

#[test]
fn a_database_from_a_newer_tinyagent_is_refused_and_not_altered() {
    let env = TestEnv::new();
    let db = env.file("log.db");
    Connection::open(&db)
        .unwrap()
        .execute_batch("CREATE TABLE runs (run_id TEXT); PRAGMA user_version = 9;")
        .unwrap();
    let before = std::fs::read(&db).unwrap();
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: done}}\n",
    );
    let out = env
        .cmd()
        .args(["-m", &model, "-q", "--log-db"])
        .arg(&db)
        .arg("task")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("schema version 9 is newer than this tinyagent understands"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(std::fs::read(&db).unwrap(), before);
}

#[test]
fn the_status_is_the_responses_own_when_a_200_stream_drops_or_carries_an_error() {
    use crate::support::openai::{chunk, data};
    use crate::support::stub::End;
    use serde_json::json;

    let env = TestEnv::new();
    // 1: the server answered 200 and dropped the connection mid-reply;
    // 2: a 200 stream whose event is an error naming status 502 (an
    //    OpenRouter-style upstream failure); 3: an answer.
    let dropped = Reply::sse(vec![
        chunk(json!({"role": "assistant", "content": "hal"}), None),
        chunk(json!({"content": "f"}), None),
    ])
    .end(End::Drop);
    let error_inside = Reply::sse(vec![data(&json!({
        "error": {"code": 502, "message": "Provider disconnected"}
    }))]);
    let stub = Stub::sequence(vec![
        dropped,
        error_inside,
        chat_sse_submit("call_1", "done"),
    ]);
    let config = env.write(
        "c.yaml",
        &format!(
            "{FAST_RETRY}providers:\n  gw:\n    api: openai\n    endpoint: {}/v1\n    api_key_env: GW_KEY\n    models:\n      m: {{}}\n",
            stub.url()
        ),
    );
    let db = env.file("log.db");
    let out = env
        .cmd()
        .env("GW_KEY", KEY)
        .args(["-m", "gw/m", "-q", "--log-db", db.to_str().unwrap(), "-c"])
        .arg(&config)
        .arg("task")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Vec<(i64, String, Option<i64>)> =
        rows(&db).into_iter().map(|r| (r.4, r.6, r.7)).collect();
    assert_eq!(
        got,
        [
            (1, "network".to_string(), Some(200)),
            (2, "http_502".to_string(), Some(200)),
            (3, "ok".to_string(), Some(200)),
        ]
    );
}

#[test]
fn the_status_is_null_only_when_no_response_came() {
    let env = TestEnv::new();
    // A port that was free a moment ago: the connection is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = env.write(
        "c.yaml",
        &format!(
            "retry: {{attempts: 1}}\nproviders:\n  gw:\n    api: openai\n    endpoint: http://127.0.0.1:{port}/v1\n    api_key_env: GW_KEY\n    models:\n      m: {{}}\n"
        ),
    );
    let db = env.file("log.db");
    let out = env
        .cmd()
        .env("GW_KEY", KEY)
        .args(["-m", "gw/m", "-q", "--log-db", db.to_str().unwrap(), "-c"])
        .arg(&config)
        .arg("task")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    let got: Vec<(String, Option<i64>)> = rows(&db).into_iter().map(|r| (r.6, r.7)).collect();
    assert_eq!(got, [("network".to_string(), None)]);
}
