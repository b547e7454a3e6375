//! Tests of `events::sqlite`.

use super::*;
use crate::events::Emitter;
use crate::reason::{FailureReason, RequestOutcome};

fn columns(conn: &Connection, table: &str) -> Vec<String> {
    let mut stmt = conn
        .prepare(&format!("PRAGMA table_info({table})"))
        .unwrap();
    let names = stmt.query_map([], |r| r.get::<_, String>(1)).unwrap();
    names.map(Result::unwrap).collect()
}

#[test]
fn migration_creates_the_current_version_and_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.db");
    drop(open(&path).unwrap());
    let mut conn = open(&path).unwrap();
    let version: u32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert!(migrate(&mut conn).is_ok());
    assert_eq!(
        columns(&conn, "events"),
        ["run_id", "seq", "ts", "type", "step", "data"]
    );
}

#[test]
fn a_newer_schema_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.db");
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE future (x); PRAGMA user_version = 7")
        .unwrap();
    drop(conn);
    let before = std::fs::read(&path).unwrap();
    let e = open(&path).unwrap_err().to_string();
    assert!(e.contains("schema version 7"), "{e}");
    assert!(e.contains("newer"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert!(!dir.path().join("log.db-wal").exists());
}

#[test]
fn a_version_one_database_gains_model_requests_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.db");
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(V1).unwrap();
    conn.execute_batch(
        "INSERT INTO runs (run_id, started_at, task, cwd, model, status)
                VALUES ('old', '2025-01-01T00:00:00Z', 't', '/w', 'script/a', 'completed');
             INSERT INTO events (run_id, seq, ts, type, data)
                VALUES ('old', 1, '2025-01-01T00:00:00Z', 'run.started', '{}');
             PRAGMA user_version = 1;",
    )
    .unwrap();
    drop(conn);
    let conn = open(&path).unwrap();
    let version: u32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let kept: (i64, i64) = conn
        .query_row(
            "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM events)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(kept, (1, 1));
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
}

#[test]
fn request_records_become_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.db");
    let sink = SqliteSink::open(&path).unwrap();
    let emitter = Emitter::new("r1", vec![Box::new(sink)]);
    let record = RequestRecord {
        step: 2,
        model: "gw/m".into(),
        provider: "gw".into(),
        endpoint: Some("http://127.0.0.1:8080".into()),
        attempt: 1,
        started_at: "2026-01-01T00:00:00.000Z".into(),
        first_event_ms: None,
        duration_ms: 12,
        outcome: RequestOutcome::Failed(FailureReason::Http(503)),
        http_status: Some(503),
        paced_ms: 0,
        input_tokens: 0,
        output_tokens: 0,
        cached_input_tokens: 0,
        cache_write_tokens: 0,
        cost_usd: 0.0,
        response_model: None,
    };
    emitter.model_request(record.clone());
    emitter.child("kid").model_request(RequestRecord {
        attempt: 2,
        first_event_ms: Some(5),
        outcome: RequestOutcome::Ok,
        http_status: Some(200),
        paced_ms: 1500,
        input_tokens: 10,
        output_tokens: 3,
        cost_usd: 0.25,
        ..record
    });
    emitter.finish();
    let conn = Connection::open(&path).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT run_id, attempt, first_event_ms, outcome, http_status, output_tokens, cost_usd,
                   paced_ms
                 FROM model_requests ORDER BY rowid",
        )
        .unwrap();
    type Row = (String, u32, Option<i64>, String, Option<u16>, i64, f64, i64);
    let rows: Vec<Row> = stmt
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
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        rows,
        [
            (
                "r1".into(),
                1,
                None,
                "http_503".into(),
                Some(503),
                0,
                0.0,
                0
            ),
            (
                "kid".into(),
                2,
                Some(5),
                "ok".into(),
                Some(200),
                3,
                0.25,
                1500
            )
        ]
    );
}

#[test]
fn a_file_that_is_not_a_database_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.db");
    std::fs::write(
        &path,
        "this is not sqlite, just some text that is long enough ".repeat(20),
    )
    .unwrap();
    assert!(open(&path).is_err());
}

#[test]
fn events_runs_and_tool_calls_are_written_on_finish() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.db");
    let sink = SqliteSink::open(&path).unwrap();
    let emitter = Emitter::new("r1", vec![Box::new(sink)]);
    emitter.emit(Event::RunStarted {
        task: "t".into(),
        model: "script/a".into(),
        cwd: "/w".into(),
        fallback_models: vec![],
        resumed_from: None,
        worktree: None,
        instructions: Vec::new(),
    });
    emitter.emit(Event::ToolStarted {
        step: 1,
        call_id: "c1".into(),
        tool: "bash".into(),
        arguments: serde_json::json!({"command": "ls"}),
    });
    emitter.emit(Event::ToolFinished {
        step: 1,
        call_id: "c1".into(),
        tool: "bash".into(),
        ok: true,
        output: "a\n".into(),
        duration_ms: 3,
    });
    emitter.emit(Event::RunFinished {
        status: crate::exit::Status::Completed,
        exit_code: 0,
        steps: 1,
        input_tokens: 10,
        output_tokens: 2,
        cost_usd: 0.5,
        duration_ms: 9,
        model_fallbacks: 0,
        active_model: "script/a".into(),
        output: serde_json::Value::Null,
        error: None,
        down: Vec::new(),
        cache: Default::default(),
    });
    emitter.finish();
    let conn = Connection::open(&path).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 4);
    let (status, chain, cost): (String, Option<String>, f64) = conn
        .query_row(
            "SELECT status, fallback_models, cost_usd FROM runs",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((status.as_str(), chain, cost), ("completed", None, 0.5));
    let (ok, output, args): (bool, String, String) = conn
        .query_row("SELECT ok, output, arguments FROM tool_calls", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert!(ok);
    assert_eq!(output, "a\n");
    assert_eq!(args, r#"{"command":"ls"}"#);
}
