//! The `--log-db` sink (SPEC section 8): every event, every run and every
//! tool call recorded in a SQLite database that several runs may share.
//!
//! `handle` only queues the record; a background thread writes queued
//! records in short `BEGIN IMMEDIATE` transactions (one per batch), so a
//! step never waits on the disk or on another process's lock. `finish`
//! (after `run.finished`) drains the queue and joins the thread.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{
    params, Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior,
};
use rusqlite_migration::{Migrations, M};

use super::{Event, EventRecord, RequestRecord, Sink};

/// The schema version this build writes (`PRAGMA user_version`).
pub(crate) const SCHEMA_VERSION: u32 = 4;

/// How long one statement waits for another process's lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a batch keeps retrying a locked database before it is dropped.
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);
/// Most records written in one transaction.
const MAX_BATCH: usize = 512;

/// Version 1: the three tables of SPEC section 8.
const V1: &str = "CREATE TABLE IF NOT EXISTS runs (
        run_id          TEXT PRIMARY KEY,
        started_at      TEXT NOT NULL,
        finished_at     TEXT,
        task            TEXT NOT NULL,
        cwd             TEXT NOT NULL,
        model           TEXT NOT NULL,
        fallback_models TEXT,
        active_model    TEXT,
        status          TEXT NOT NULL,
        exit_code       INTEGER,
        steps           INTEGER NOT NULL DEFAULT 0,
        input_tokens    INTEGER NOT NULL DEFAULT 0,
        output_tokens   INTEGER NOT NULL DEFAULT 0,
        cost_usd        REAL NOT NULL DEFAULT 0,
        error           TEXT,
        resumed_from    TEXT
    );
    CREATE TABLE IF NOT EXISTS events (
        run_id TEXT NOT NULL,
        seq    INTEGER NOT NULL,
        ts     TEXT NOT NULL,
        type   TEXT NOT NULL,
        step   INTEGER,
        data   TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    CREATE TABLE IF NOT EXISTS tool_calls (
        run_id      TEXT NOT NULL,
        step        INTEGER NOT NULL,
        call_id     TEXT NOT NULL,
        tool        TEXT NOT NULL,
        arguments   TEXT NOT NULL,
        ok          INTEGER,
        output      TEXT,
        started_at  TEXT NOT NULL,
        finished_at TEXT,
        duration_ms INTEGER
    );
    CREATE INDEX IF NOT EXISTS tool_calls_by_call ON tool_calls (run_id, call_id);
    CREATE INDEX IF NOT EXISTS events_by_type ON events (type);
    CREATE INDEX IF NOT EXISTS runs_by_started ON runs (started_at);";

/// Version 2: one row per request sent to a model.
const V2: &str = "CREATE TABLE IF NOT EXISTS model_requests (
        run_id         TEXT NOT NULL,
        step           INTEGER NOT NULL,
        model          TEXT NOT NULL,
        endpoint       TEXT,
        attempt        INTEGER NOT NULL,
        started_at     TEXT NOT NULL,
        first_event_ms INTEGER,
        duration_ms    INTEGER NOT NULL,
        outcome        TEXT NOT NULL,
        http_status    INTEGER,
        input_tokens   INTEGER NOT NULL DEFAULT 0,
        output_tokens  INTEGER NOT NULL DEFAULT 0,
        cost_usd       REAL NOT NULL DEFAULT 0
    );
    CREATE INDEX IF NOT EXISTS model_requests_by_started ON model_requests (started_at);
    CREATE INDEX IF NOT EXISTS model_requests_by_run ON model_requests (run_id, step);";

/// Version 3: `model_requests.paced_ms`, the time a request waited to stay
/// under a rate limit (SPEC 17). SQLite has no `ADD COLUMN IF NOT EXISTS`:
/// the column is added only where it is missing.
fn v3(tx: &Transaction) -> rusqlite_migration::HookResult {
    let has: bool = tx.query_row(
        "SELECT count(*) FROM pragma_table_info('model_requests') WHERE name = 'paced_ms'",
        [],
        |r| r.get(0),
    )?;
    if !has {
        tx.execute_batch(
            "ALTER TABLE model_requests ADD COLUMN paced_ms INTEGER NOT NULL DEFAULT 0",
        )?;
    }
    Ok(())
}

/// Version 4: `model_requests.cached_input_tokens` and
/// `cache_write_tokens`, the prompt-cache reads and writes (SPEC 25); each
/// added only where it is missing, as in `v3`.
fn v4(tx: &Transaction) -> rusqlite_migration::HookResult {
    for column in ["cached_input_tokens", "cache_write_tokens"] {
        let has: bool = tx.query_row(
            "SELECT count(*) FROM pragma_table_info('model_requests') WHERE name = ?1",
            [column],
            |r| r.get(0),
        )?;
        if !has {
            tx.execute_batch(&format!(
                "ALTER TABLE model_requests ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0"
            ))?;
        }
    }
    Ok(())
}

/// The schema's migrations, in order (`SCHEMA_VERSION` of them). A new
/// version is one more entry; each is idempotent (`IF NOT EXISTS`, or a
/// hook that checks), since two runs opening an old file together may both
/// apply it.
fn migrations() -> Migrations<'static> {
    Migrations::new(vec![
        M::up(V1),
        M::up(V2),
        M::up_with_hook("", v3),
        M::up_with_hook("", v4),
    ])
}

/// Opens (creating when missing) and migrates the database at `path`, in
/// WAL mode with a busy timeout. A database from a newer tinyagent is
/// refused before anything in it is changed. Errors are one line, for
/// exit 2.
pub(crate) fn open(path: &Path) -> Result<Connection, LogDbError> {
    let fail = |problem: SchemaError| LogDbError::Open {
        path: path.to_path_buf(),
        problem,
    };
    let mut conn = Connection::open(path).map_err(|e| fail(e.into()))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| fail(e.into()))?;
    refuse_newer(&conn).map_err(fail)?;
    let mode: String = retry_busy(|| conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)))
        .map_err(|e| fail(e.into()))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(fail(SchemaError::NoWal(mode)));
    }
    conn.execute_batch("PRAGMA synchronous = NORMAL")
        .map_err(|e| fail(e.into()))?;
    migrate(&mut conn).map_err(fail)?;
    Ok(conn)
}

/// A log database that cannot be used (exit 2 for `--log-db`).
#[derive(Debug, thiserror::Error)]
pub enum LogDbError {
    #[error("log database {}: {problem}", path.display())]
    Open {
        path: std::path::PathBuf,
        problem: SchemaError,
    },
    #[error("log database: cannot start its writer: {0}")]
    Writer(std::io::Error),
}

/// What is wrong with a log database's file or schema.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error("cannot switch to WAL mode (journal mode is {0})")]
    NoWal(String),
    #[error("schema version {0} is newer than this tinyagent understands ({SCHEMA_VERSION}); use a newer tinyagent or another --log-db file")]
    Newer(u32),
    #[error("schema version is newer than this tinyagent understands ({SCHEMA_VERSION})")]
    TooFarAhead,
    /// The migration library's own message.
    #[error("{0}")]
    Migration(String),
}

/// Fails when the file's schema is newer than this build's.
fn refuse_newer(conn: &Connection) -> Result<(), SchemaError> {
    let version: u32 = retry_busy(|| conn.query_row("PRAGMA user_version", [], |r| r.get(0)))?;
    if version > SCHEMA_VERSION {
        return Err(SchemaError::Newer(version));
    }
    Ok(())
}

/// Upgrades the schema to `SCHEMA_VERSION` in one immediate transaction,
/// so runs that start together on a new file wait for each other.
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), SchemaError> {
    refuse_newer(conn)?;
    conn.set_transaction_behavior(TransactionBehavior::Immediate);
    let migrations = migrations();
    let result = retry_busy_migration(|| migrations.to_latest(conn));
    conn.set_transaction_behavior(TransactionBehavior::Deferred);
    result.map_err(|e| match e {
        rusqlite_migration::Error::RusqliteError { err, .. } => SchemaError::Sqlite(err),
        rusqlite_migration::Error::MigrationDefinition(
            rusqlite_migration::MigrationDefinitionError::DatabaseTooFarAhead,
        ) => SchemaError::TooFarAhead,
        other => SchemaError::Migration(other.to_string()),
    })
}

/// `retry_busy` for a migration, whose errors wrap rusqlite's.
fn retry_busy_migration(
    mut f: impl FnMut() -> rusqlite_migration::Result<()>,
) -> rusqlite_migration::Result<()> {
    let started = Instant::now();
    let mut wait = Duration::from_millis(2);
    loop {
        match f() {
            Err(rusqlite_migration::Error::RusqliteError { ref err, .. })
                if is_busy(err) && started.elapsed() < GIVE_UP_AFTER =>
            {
                std::thread::sleep(wait);
                wait = (wait * 2).min(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Runs `f` again while the database stays busy, up to `GIVE_UP_AFTER`.
fn retry_busy<T>(mut f: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let started = Instant::now();
    let mut wait = Duration::from_millis(2);
    loop {
        match f() {
            Err(e) if is_busy(&e) && started.elapsed() < GIVE_UP_AFTER => {
                std::thread::sleep(wait);
                wait = (wait * 2).min(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// What the writer thread is handed.
pub(crate) enum Item {
    Event(EventRecord),
    /// A `model_requests` row of run `run_id`.
    Request {
        run_id: String,
        record: RequestRecord,
    },
}

/// Records events into a log database from a background thread.
pub struct SqliteSink {
    queue: Option<Sender<Item>>,
    writer: Option<JoinHandle<()>>,
}

impl SqliteSink {
    /// Opens the database now (so a bad path fails before any request) and
    /// starts the writer thread.
    pub fn open(path: &Path) -> Result<SqliteSink, LogDbError> {
        let conn = open(path)?;
        let (queue, records) = mpsc::channel();
        let path = path.to_path_buf();
        let writer = std::thread::Builder::new()
            .name("log-db".into())
            .spawn(move || write_loop(conn, records, path))
            .map_err(LogDbError::Writer)?;
        Ok(SqliteSink {
            queue: Some(queue),
            writer: Some(writer),
        })
    }

    fn close(&mut self) {
        // Closing the channel lets the writer drain what is queued and stop.
        self.queue = None;
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl Sink for SqliteSink {
    fn handle(&mut self, record: &EventRecord) {
        if let Some(queue) = &self.queue {
            let _ = queue.send(Item::Event(record.clone()));
        }
    }

    fn model_request(&mut self, run_id: &str, _parent: Option<&str>, record: &RequestRecord) {
        if let Some(queue) = &self.queue {
            let _ = queue.send(Item::Request {
                run_id: run_id.to_string(),
                record: record.clone(),
            });
        }
    }

    fn finish(&mut self) {
        self.close();
    }
}

impl Drop for SqliteSink {
    fn drop(&mut self) {
        self.close();
    }
}

/// The writer thread: waits for a record, takes whatever else is queued,
/// writes it all in one transaction.
fn write_loop(mut conn: Connection, records: Receiver<Item>, path: PathBuf) {
    let mut warned = false;
    while let Ok(first) = records.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match records.try_recv() {
                Ok(record) => batch.push(record),
                Err(_) => break,
            }
        }
        if let Err(e) = retry_busy(|| write_batch(&mut conn, &batch)) {
            if !warned {
                eprintln!(
                    "tinyagent: warning: log database {}: events not recorded: {e}",
                    path.display()
                );
                warned = true;
            }
        }
    }
}

/// Writes records in one immediate transaction.
pub(crate) fn write_batch(conn: &mut Connection, batch: &[Item]) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for item in batch {
        match item {
            Item::Event(record) => write_record(&tx, record)?,
            Item::Request { run_id, record } => write_request(&tx, run_id, record)?,
        }
    }
    tx.commit()
}

fn write_request(tx: &Transaction, run_id: &str, r: &RequestRecord) -> rusqlite::Result<()> {
    let clamp = |n: u64| n.min(i64::MAX as u64) as i64;
    tx.prepare_cached(
        "INSERT INTO model_requests (run_id, step, model, endpoint, attempt, started_at,
            first_event_ms, duration_ms, outcome, http_status, paced_ms, input_tokens,
            output_tokens, cost_usd, cached_input_tokens, cache_write_tokens)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
    )?
    .execute(params![
        run_id,
        r.step,
        r.model,
        r.endpoint,
        r.attempt,
        r.started_at,
        r.first_event_ms.map(clamp),
        clamp(r.duration_ms),
        r.outcome.to_string(),
        r.http_status,
        clamp(r.paced_ms),
        clamp(r.input_tokens),
        clamp(r.output_tokens),
        r.cost_usd,
        clamp(r.cached_input_tokens),
        clamp(r.cache_write_tokens)
    ])?;
    Ok(())
}

/// Records one event: its row in `events`, then what it changes in `runs`
/// or `tool_calls`.
fn write_record(tx: &Transaction, record: &EventRecord) -> rusqlite::Result<()> {
    let run_id = record.run_id.as_str();
    let ts = record.ts.as_str();
    tx.prepare_cached(
        "INSERT OR IGNORE INTO events (run_id, seq, ts, type, step, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        run_id,
        record.seq as i64,
        ts,
        record.event.type_name(),
        record.event.step(),
        record.json.to_string()
    ])?;
    match &record.event {
        Event::RunStarted { .. } | Event::ModelResponse { .. } | Event::RunFinished { .. } => {
            write_run(tx, run_id, ts, &record.event)
        }
        Event::ToolStarted { .. } | Event::ToolFinished { .. } => {
            write_tool_call(tx, run_id, ts, &record.event)
        }
        Event::StepStarted { .. }
        | Event::ProviderRetry { .. }
        | Event::ProviderPaced { .. }
        | Event::LimitLearned { .. }
        | Event::AttemptReset { .. }
        | Event::ModelFallback { .. }
        | Event::ModelRestore { .. }
        | Event::ModelHedge { .. }
        | Event::ModelHedgeSettled { .. }
        | Event::AssistantMessage { .. }
        | Event::ContextCompacted { .. }
        | Event::OutageWaiting { .. }
        | Event::OutageOver { .. }
        | Event::SubagentStarted { .. }
        | Event::SubagentFinished { .. }
        | Event::CheckResult { .. }
        | Event::CheckBudget { .. }
        | Event::CheckLimit { .. }
        | Event::CheckHealth { .. }
        | Event::CheckFinished { .. }
        | Event::Warning { .. } => Ok(()),
    }
}

/// The run's row in `runs`: inserted at `run.started`, its model and steps
/// kept current by each `model.response`, closed by `run.finished`. Other
/// events leave it alone.
fn write_run(tx: &Transaction, run_id: &str, ts: &str, event: &Event) -> rusqlite::Result<()> {
    match event {
        Event::RunStarted {
            task,
            model,
            cwd,
            fallback_models,
            resumed_from,
            ..
        } => {
            let chain = if fallback_models.is_empty() {
                None
            } else {
                serde_json::to_string(fallback_models).ok()
            };
            tx.prepare_cached(
                "INSERT OR IGNORE INTO runs (run_id, started_at, task, cwd, model, fallback_models,
                    active_model, status, resumed_from)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?5, 'running', ?7)",
            )?
            .execute(params![run_id, ts, task, cwd, model, chain, resumed_from])?;
        }
        Event::ModelResponse { step, model, .. } => {
            // Keeps a crashed run's row telling how far it got.
            tx.prepare_cached(
                "UPDATE runs SET active_model = ?2, steps = max(steps, ?3) WHERE run_id = ?1",
            )?
            .execute(params![run_id, model, step])?;
        }
        Event::RunFinished {
            status,
            exit_code,
            steps,
            input_tokens,
            output_tokens,
            cost_usd,
            active_model,
            error,
            ..
        } => {
            tx.prepare_cached(
                "UPDATE runs SET finished_at = ?2, status = ?3, exit_code = ?4, steps = ?5,
                    input_tokens = ?6, output_tokens = ?7, cost_usd = ?8, error = ?9,
                    active_model = ?10
                 WHERE run_id = ?1",
            )?
            .execute(params![
                run_id,
                ts,
                status.as_str(),
                exit_code,
                steps,
                *input_tokens as i64,
                *output_tokens as i64,
                cost_usd,
                error,
                active_model
            ])?;
        }
        _ => {}
    }
    Ok(())
}

/// A tool call's row in `tool_calls`: inserted at `tool.started`, completed
/// by its `tool.finished`. Other events leave it alone.
fn write_tool_call(
    tx: &Transaction,
    run_id: &str,
    ts: &str,
    event: &Event,
) -> rusqlite::Result<()> {
    match event {
        Event::ToolStarted {
            step,
            call_id,
            tool,
            arguments,
        } => {
            tx.prepare_cached(
                "INSERT INTO tool_calls (run_id, step, call_id, tool, arguments, started_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                run_id,
                step,
                call_id,
                tool,
                arguments.to_string(),
                ts
            ])?;
        }
        Event::ToolFinished {
            step,
            call_id,
            ok,
            output,
            duration_ms,
            ..
        } => {
            let rowid: Option<i64> = tx
                .prepare_cached(
                    "SELECT rowid FROM tool_calls WHERE run_id = ?1 AND step = ?2 AND call_id = ?3
                     AND finished_at IS NULL ORDER BY rowid LIMIT 1",
                )?
                .query_row(params![run_id, step, call_id], |r| r.get(0))
                .optional()?;
            if let Some(rowid) = rowid {
                tx.prepare_cached(
                    "UPDATE tool_calls SET ok = ?2, output = ?3, finished_at = ?4, duration_ms = ?5
                     WHERE rowid = ?1",
                )?
                .execute(params![rowid, ok, output, ts, *duration_ms as i64])?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests;
