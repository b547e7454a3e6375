//! The log database (`--log-db`, SPEC section 8): schema, WAL, events equal
//! to `--json`, runs and tool_calls rows, concurrent writers, no secrets.

use std::path::Path;

use rusqlite::Connection;
use serde_json::Value;

use crate::support::stub::{Reply, Stub};
use crate::support::{events, finished, TestEnv};

const TWO_TOOLS: &str = "- text: looking\n  tool_calls:\n    - {name: bash, arguments: {command: 'echo hi'}}\n    - {name: bash, arguments: {command: 'exit 3'}}\n  usage: {input: 100, output: 10}\n- tool_calls:\n    - {name: submit, arguments: {output: done}}\n  usage: {input: 200, output: 20}\n";

fn columns(conn: &Connection, table: &str) -> Vec<String> {
    let mut stmt = conn
        .prepare(&format!(
            "SELECT name FROM pragma_table_info('{table}') ORDER BY cid"
        ))
        .unwrap();
    let rows = stmt.query_map([], |r| r.get::<_, String>(0)).unwrap();
    rows.map(Result::unwrap).collect()
}

fn open(path: &Path) -> Connection {
    Connection::open(path).unwrap()
}

#[test]
fn schema_version_and_wal_mode() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", TWO_TOOLS);
    let db = env.file("log.db");
    env.cmd()
        .args(["-m", &model, "--log-db", db.to_str().unwrap(), "-q", "task"])
        .assert()
        .code(0);
    let conn = open(&db);
    assert_eq!(
        columns(&conn, "runs"),
        [
            "run_id",
            "started_at",
            "finished_at",
            "task",
            "cwd",
            "model",
            "fallback_models",
            "active_model",
            "status",
            "exit_code",
            "steps",
            "input_tokens",
            "output_tokens",
            "cost_usd",
            "error",
            "resumed_from"
        ]
    );
    assert_eq!(
        columns(&conn, "events"),
        ["run_id", "seq", "ts", "type", "step", "data"]
    );
    assert_eq!(
        columns(&conn, "tool_calls"),
        [
            "run_id",
            "step",
            "call_id",
            "tool",
            "arguments",
            "ok",
            "output",
            "started_at",
            "finished_at",
            "duration_ms"
        ]
    );
    let pk: Vec<(String, i64)> = {
        let mut stmt = conn
            .prepare("SELECT name, pk FROM pragma_table_info('events') WHERE pk > 0 ORDER BY pk")
            .unwrap();
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
        rows.map(Result::unwrap).collect()
    };
    assert_eq!(pk, [("run_id".to_string(), 1), ("seq".to_string(), 2)]);
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 4);
    assert_eq!(
        columns(&conn, "model_requests"),
        [
            "run_id",
            "step",
            "model",
            "endpoint",
            "attempt",
            "started_at",
            "first_event_ms",
            "duration_ms",
            "outcome",
            "http_status",
            "input_tokens",
            "output_tokens",
            "cost_usd",
            "paced_ms",
            "cached_input_tokens",
            "cache_write_tokens"
        ]
    );
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn events_rows_equal_the_json_lines_seq_by_seq() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", TWO_TOOLS);
    let db = env.file("log.db");
    let out = env
        .cmd()
        .args([
            "-m",
            &model,
            "--json",
            "--log-db",
            db.to_str().unwrap(),
            "task",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert!(lines.len() >= 8, "{lines:?}");
    let conn = open(&db);
    let mut stmt = conn
        .prepare("SELECT run_id, seq, ts, type, step, data FROM events ORDER BY seq")
        .unwrap();
    let rows: Vec<(String, i64, String, String, Option<i64>, String)> = stmt
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), lines.len());
    for (line, (run_id, seq, ts, kind, step, data)) in lines.iter().zip(&rows) {
        assert_eq!(line, data, "seq {seq}");
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["run_id"], run_id.as_str());
        assert_eq!(v["seq"], *seq);
        assert_eq!(v["ts"], ts.as_str());
        assert_eq!(v["type"], kind.as_str());
        assert_eq!(v.get("step").and_then(Value::as_i64), *step);
    }
}

#[test]
fn runs_and_tool_calls_rows() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", TWO_TOOLS);
    let db = env.file("log.db");
    let out = env
        .cmd()
        .args([
            "-m",
            &model,
            "--json",
            "--log-db",
            db.to_str().unwrap(),
            "the task",
        ])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    let end = finished(&ev);
    let conn = open(&db);
    let row: String = conn
        .query_row(
            "SELECT json_object('run_id', run_id, 'task', task, 'cwd', cwd, 'model', model,
                'fallback_models', fallback_models, 'active_model', active_model, 'status', status,
                'exit_code', exit_code, 'steps', steps, 'input_tokens', input_tokens,
                'output_tokens', output_tokens, 'cost_usd', cost_usd, 'error', error,
                'resumed_from', resumed_from, 'finished', finished_at IS NOT NULL) FROM runs",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let row: Value = serde_json::from_str(&row).unwrap();
    assert_eq!(
        row,
        serde_json::json!({
            "run_id": end["run_id"], "task": "the task", "cwd": ev[0]["cwd"], "model": model,
            "fallback_models": null, "active_model": model, "status": "submitted",
            "exit_code": 0, "steps": 2, "input_tokens": 300, "output_tokens": 30,
            "cost_usd": end["cost_usd"], "error": null, "resumed_from": null, "finished": 1
        })
    );

    let mut stmt = conn
        .prepare("SELECT step, call_id, tool, arguments, ok, output, started_at, finished_at, duration_ms FROM tool_calls ORDER BY rowid")
        .unwrap();
    type Row = (
        i64,
        String,
        String,
        String,
        bool,
        String,
        String,
        String,
        i64,
    );
    let calls: Vec<Row> = stmt
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
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(calls.len(), 3, "{calls:?}");
    let started = crate::support::of_type(&ev, "tool.started");
    for (row, ev) in calls.iter().zip(started) {
        assert_eq!(row.1, ev["call_id"].as_str().unwrap());
        assert_eq!(row.3, ev["arguments"].to_string());
    }
    assert_eq!(
        (calls[0].0, calls[0].2.as_str(), calls[0].4),
        (1, "bash", true)
    );
    assert!(calls[0].5.contains("hi"));
    assert!(!calls[1].4, "exit 3 is ok = false");
    assert_eq!(
        (calls[2].0, calls[2].2.as_str(), calls[2].4),
        (2, "submit", true)
    );
    assert!(calls.iter().all(|c| c.6 <= c.7));
}

#[test]
fn a_chain_is_stored_as_json_and_fallbacks_are_queryable() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let b = env.script("b.yaml", "- text: from b\n  cost: 0.25\n");
    let cfg = env.write(
        "c.yaml",
        "retry: {attempts: 2, backoff: 1ms, jitter: 0}\nhealth_db: off\n",
    );
    let db = env.file("log.db");
    env.cmd()
        .args([
            "-c",
            cfg.to_str().unwrap(),
            "-m",
            &a,
            "--fallback-model",
            &b,
        ])
        .args(["--log-db", db.to_str().unwrap(), "-q", "task"])
        .assert()
        .code(0);
    let conn = open(&db);
    let (chain, active): (String, String) = conn
        .query_row("SELECT fallback_models, active_model FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&chain).unwrap(),
        serde_json::json!([b])
    );
    assert_eq!(active, b);
    // The log guide's "fallbacks per model" and "cost per model" queries.
    let (from, n): (String, i64) = conn
        .query_row(
            "SELECT json_extract(data, '$.from'), count(*) FROM events WHERE type = 'model.fallback' GROUP BY 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((from.as_str(), n), (a.as_str(), 1));
    let (m, cost): (String, f64) = conn
        .query_row(
            "SELECT json_extract(data, '$.model'), sum(json_extract(data, '$.cost_usd')) FROM events WHERE type = 'model.response' GROUP BY 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((m.as_str(), cost), (b.as_str(), 0.25));
}

#[test]
fn eight_concurrent_runs_record_every_event() {
    let env = TestEnv::new();
    let mut script = String::new();
    for i in 0..6 {
        script.push_str(&format!(
            "- tool_calls:\n    - {{name: bash, arguments: {{command: 'echo {i}'}}}}\n"
        ));
    }
    script.push_str("- tool_calls:\n    - {name: submit, arguments: {output: done}}\n");
    let model = env.script("s.yaml", &script);
    let db = env.file("shared.db");
    let children: Vec<_> = (0..8)
        .map(|i| {
            env.std_cmd()
                .args(["-m", &model, "--json", "--log-db", db.to_str().unwrap()])
                .arg(format!("task {i}"))
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let conn = open(&db);
    let runs: i64 = conn
        .query_row(
            "SELECT count(*) FROM runs WHERE status = 'submitted'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(runs, 8);
    for out in outputs {
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        let run_id = serde_json::from_str::<Value>(&lines[0]).unwrap()["run_id"]
            .as_str()
            .unwrap()
            .to_string();
        let mut stmt = conn
            .prepare("SELECT data FROM events WHERE run_id = ?1 ORDER BY seq")
            .unwrap();
        let stored: Vec<String> = stmt
            .query_map([&run_id], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(stored, lines);
        let calls: i64 = conn
            .query_row(
                "SELECT count(*) FROM tool_calls WHERE run_id = ?1 AND finished_at IS NOT NULL",
                [&run_id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(calls, 7);
    }
}

#[test]
fn an_unopenable_database_is_a_setup_error_before_any_request() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", TWO_TOOLS);
    let traj = env.file("t.json");
    let bad = env.file("missing-dir/log.db");
    env.cmd()
        .args([
            "-m",
            &model,
            "-o",
            traj.to_str().unwrap(),
            "--log-db",
            bad.to_str().unwrap(),
            "task",
        ])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("log database"));
    assert!(!traj.exists(), "no run started");
    let not_db = env.write("text.db", &"not a database at all\n".repeat(100));
    env.cmd()
        .args(["-m", &model, "--log-db", not_db.to_str().unwrap(), "task"])
        .assert()
        .code(2);
}

#[test]
fn a_killed_run_leaves_a_database_that_opens_and_shows_the_started_tool() {
    let env = TestEnv::new();
    let marker = env.file("marker");
    let model = env.script(
        "s.yaml",
        &format!(
            "- tool_calls:\n    - {{name: bash, arguments: {{command: 'echo x >> {} && sleep 30'}}}}\n",
            marker.display()
        ),
    );
    let db = env.file("log.db");
    let mut child = env
        .std_cmd()
        .args([
            "-m",
            &model,
            "--json",
            "--log-db",
            db.to_str().unwrap(),
            "task",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    crate::resume::wait_for(&marker);
    // Writes never wait on the step: give the writer thread its moment (the
    // database can be read while the run writes it).
    for _ in 0..200 {
        let started: i64 = open(&db)
            .query_row("SELECT count(*) FROM tool_calls", [], |r| r.get(0))
            .unwrap_or(0);
        if started == 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let conn = open(&db);
    let status: String = conn
        .query_row("SELECT status FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(status, "running");
    let (tool, finished): (String, Option<String>) = conn
        .query_row("SELECT tool, finished_at FROM tool_calls", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!((tool.as_str(), finished), ("bash", None));
}

#[test]
fn no_api_key_in_the_database() {
    let env = TestEnv::new();
    let secret = "sk-SECRET-tinyagent-durable-0123456789";
    let stub = Stub::sequence(vec![Reply::sse(
        [
            r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"all done"},"finish_reason":null}]}"#,
            r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}"#,
            "[DONE]",
        ]
        .iter()
        .map(|d| format!("data: {d}\n\n"))
        .collect(),
    )]);
    let cfg = env.write(
        "c.yaml",
        &format!(
            "providers:\n  gateway:\n    api: openai\n    endpoint: {}/v1\n    api_key_env: GATEWAY_KEY\n",
            stub.url()
        ),
    );
    let db = env.file("log.db");
    env.cmd()
        .env("GATEWAY_KEY", secret)
        .args([
            "-c",
            cfg.to_str().unwrap(),
            "-m",
            "gateway/m",
            "--log-db",
            db.to_str().unwrap(),
            "-q",
            "task",
        ])
        .assert()
        .code(0);
    // The key was really in play (sent to the provider) ...
    let auth = stub.requests()[0]
        .header("authorization")
        .map(str::to_string);
    assert_eq!(auth, Some(format!("Bearer {secret}")));
    // ... and the run was recorded ...
    let status: String = open(&db)
        .query_row("SELECT status FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(status, "completed");
    // ... yet no byte of the database files holds it.
    let mut bytes = std::fs::read(&db).unwrap();
    for extra in ["log.db-wal", "log.db-shm"] {
        if let Ok(more) = std::fs::read(env.file(extra)) {
            bytes.extend(more);
        }
    }
    let needle = secret.as_bytes();
    assert!(!bytes.windows(needle.len()).any(|w| w == needle));
}
