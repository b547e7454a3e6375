//! The health record as a small SQLite file: one table keyed by model spec
//! and endpoint, WAL, a busy timeout, one short transaction per call.
//! It holds specs, endpoints, reasons and times; never prompts, outputs or keys.

use std::path::Path;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::{HealthKey, HealthStore, Millis, Record, StoreError};

/// Schema version kept in `PRAGMA user_version`.
const SCHEMA_VERSION: i64 = 1;
/// How long a call waits for another process's write before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(2);
/// Most strike times kept per model.
const MAX_STRIKES: usize = 64;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS model_health (
    model TEXT NOT NULL,            -- model spec, e.g. openai/gpt-5
    endpoint TEXT NOT NULL,         -- base URL with port, or a script's path
    strikes TEXT NOT NULL DEFAULT '', -- unix ms of each strike since the last success, oldest first
    last_reason TEXT,               -- reason of the last strike or cooling, e.g. http_503
    cooling_until INTEGER,          -- unix ms; NULL after a success
    last_success_at INTEGER,        -- unix ms
    updated_at INTEGER NOT NULL,    -- unix ms
    PRIMARY KEY (model, endpoint)
) WITHOUT ROWID";

/// The SQLite implementation of `HealthStore`.
pub struct SqliteStore {
    conn: Connection,
}

fn err(context: &str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |e| StoreError(format!("{context}: {e}"))
}

impl SqliteStore {
    /// Opens (creating when missing) the record at `path`.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError(format!("cannot create {}: {e}", dir.display())))?;
        }
        let conn = Connection::open(path).map_err(err("cannot open"))?;
        Self::init(conn)
    }

    /// A private in-memory database (tests and benchmarks).
    pub fn in_memory() -> Result<SqliteStore, StoreError> {
        Self::init(Connection::open_in_memory().map_err(err("cannot open"))?)
    }

    fn init(mut conn: Connection) -> Result<SqliteStore, StoreError> {
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(err("cannot set a busy timeout"))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(err("cannot read"))?;
        if !mode.eq_ignore_ascii_case("wal") && !mode.eq_ignore_ascii_case("memory") {
            return Err(StoreError(format!(
                "cannot switch to WAL (journal mode {mode})"
            )));
        }
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err("cannot configure"))?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(err("cannot read"))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError(format!(
                "schema version {version} is newer than this tinyagent knows ({SCHEMA_VERSION})"
            )));
        }
        // One migration per schema version, each idempotent (`IF NOT EXISTS`).
        rusqlite_migration::Migrations::new(vec![rusqlite_migration::M::up(SCHEMA)])
            .to_latest(&mut conn)
            .map_err(|e| StoreError(format!("cannot create the table: {e}")))?;
        Ok(SqliteStore { conn })
    }
}

fn parse_strikes(text: &str) -> Vec<Millis> {
    text.split(',').filter_map(|t| t.parse().ok()).collect()
}

fn join_strikes(strikes: &[Millis]) -> String {
    strikes
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl HealthStore for SqliteStore {
    fn read(&mut self, key: &HealthKey) -> Result<Record, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT cooling_until, last_success_at FROM model_health WHERE model = ?1 AND endpoint = ?2")
            .map_err(err("cannot read"))?;
        let record = stmt
            .query_row(params![key.model, key.endpoint], |r| {
                Ok(Record {
                    cooling_until: r.get(0)?,
                    last_success_at: r.get(1)?,
                })
            })
            .optional()
            .map_err(err("cannot read"))?;
        Ok(record.unwrap_or_default())
    }

    fn record_strike(
        &mut self,
        key: &HealthKey,
        reason: &str,
        now: Millis,
        window: Millis,
    ) -> Result<u32, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err("cannot write"))?;
        let stored: Option<String> = tx
            .query_row(
                "SELECT strikes FROM model_health WHERE model = ?1 AND endpoint = ?2",
                params![key.model, key.endpoint],
                |r| r.get(0),
            )
            .optional()
            .map_err(err("cannot read"))?;
        let mut strikes: Vec<Millis> = parse_strikes(stored.as_deref().unwrap_or(""))
            .into_iter()
            .filter(|&t| t > now - window)
            .collect();
        strikes.push(now);
        if strikes.len() > MAX_STRIKES {
            strikes.drain(..strikes.len() - MAX_STRIKES);
        }
        tx.execute(
            "INSERT INTO model_health (model, endpoint, strikes, last_reason, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (model, endpoint) DO UPDATE SET
               strikes = excluded.strikes, last_reason = excluded.last_reason, updated_at = excluded.updated_at",
            params![key.model, key.endpoint, join_strikes(&strikes), reason, now],
        )
        .map_err(err("cannot write"))?;
        tx.commit().map_err(err("cannot write"))?;
        Ok(strikes.len() as u32)
    }

    fn record_success(&mut self, key: &HealthKey, now: Millis) -> Result<(), StoreError> {
        // A clean or missing record needs no write: a read keeps it cheap.
        let dirty: Option<bool> = self
            .conn
            .prepare_cached(
                "SELECT strikes != '' OR cooling_until IS NOT NULL FROM model_health WHERE model = ?1 AND endpoint = ?2",
            )
            .and_then(|mut s| s.query_row(params![key.model, key.endpoint], |r| r.get(0)).optional())
            .map_err(err("cannot read"))?;
        if dirty != Some(true) {
            return Ok(());
        }
        self.conn
            .execute(
                "UPDATE model_health SET strikes = '', cooling_until = NULL, last_success_at = ?3, updated_at = ?3
                 WHERE model = ?1 AND endpoint = ?2",
                params![key.model, key.endpoint, now],
            )
            .map_err(err("cannot write"))?;
        Ok(())
    }

    fn mark_cooling(
        &mut self,
        key: &HealthKey,
        until: Millis,
        reason: &str,
        now: Millis,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO model_health (model, endpoint, last_reason, cooling_until, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (model, endpoint) DO UPDATE SET
                   last_reason = excluded.last_reason, cooling_until = excluded.cooling_until,
                   updated_at = excluded.updated_at",
                params![key.model, key.endpoint, reason, until, now],
            )
            .map_err(err("cannot write"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> HealthKey {
        HealthKey {
            model: "openai/gpt-5".into(),
            endpoint: "http://127.0.0.1:8080/v1".into(),
        }
    }

    #[test]
    fn strikes_count_within_the_window_until_a_success() {
        let mut s = SqliteStore::in_memory().unwrap();
        assert_eq!(s.read(&key()).unwrap(), Record::default());
        assert_eq!(
            s.record_strike(&key(), "http_503", 1_000, 60_000).unwrap(),
            1
        );
        assert_eq!(
            s.record_strike(&key(), "http_503", 2_000, 60_000).unwrap(),
            2
        );
        // The first two fall out of the window.
        assert_eq!(
            s.record_strike(&key(), "http_503", 62_500, 60_000).unwrap(),
            1
        );
        s.mark_cooling(&key(), 70_000, "http_503", 62_500).unwrap();
        assert_eq!(s.read(&key()).unwrap().cooling_until, Some(70_000));
        s.record_success(&key(), 63_000).unwrap();
        let r = s.read(&key()).unwrap();
        assert_eq!(r.cooling_until, None);
        assert_eq!(r.last_success_at, Some(63_000));
        assert_eq!(
            s.record_strike(&key(), "network", 64_000, 60_000).unwrap(),
            1
        );
    }

    #[test]
    fn a_file_store_is_shared_between_connections() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/tinyagent/health.db");
        let mut a = SqliteStore::open(&path).unwrap();
        let mut b = SqliteStore::open(&path).unwrap();
        a.record_strike(&key(), "http_503", 1_000, 60_000).unwrap();
        assert_eq!(
            b.record_strike(&key(), "http_503", 1_001, 60_000).unwrap(),
            2
        );
        b.mark_cooling(&key(), 9_000, "http_503", 1_001).unwrap();
        assert_eq!(a.read(&key()).unwrap().cooling_until, Some(9_000));
    }

    #[test]
    fn a_path_inside_a_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain");
        std::fs::write(&file, "not a database\n".repeat(300)).unwrap();
        assert!(SqliteStore::open(&file.join("health.db")).is_err());
        assert!(SqliteStore::open(&file).is_err(), "not a database");
    }
}
