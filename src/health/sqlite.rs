//! The health record as a small SQLite file: one table keyed by model spec
//! and endpoint, WAL, a busy timeout, one short transaction per call.
//! It holds specs, endpoints, key fingerprints, counts, reasons and times;
//! never prompts, outputs or keys. What lives beside the cooling records
//! has a table of its own: the pacing records (SPEC 17, `sqlite/pacing.rs`),
//! the outage record (SPEC 18, `sqlite/outage.rs`) and spend per budget and
//! period (SPEC 19, `sqlite/budget.rs`).

mod budget;
mod latency;
mod outage;
mod pacing;

use std::path::Path;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::{HealthKey, HealthStore, Lease, Millis, Record, StoreError, MAX_STRIKES};

/// Schema version kept in `PRAGMA user_version`: 2 added the probe lease,
/// 3 the outage record, 4 the budgets' spend, 5 the pacing records, 6 the
/// first-event times, 7 the pacing windows. Each
/// step only creates what is missing, so a file at any older version goes
/// straight to this one.
const SCHEMA_VERSION: i64 = 7;
/// How long a call waits for another process's write before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(2);

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

/// Version 2: the probe lease (a random run token and when it ends).
const LEASE_COLUMNS: &str = "ALTER TABLE model_health ADD COLUMN lease_holder INTEGER;
ALTER TABLE model_health ADD COLUMN lease_until INTEGER;";

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

    /// A private in-memory database (tests).
    #[cfg(test)]
    pub(crate) fn in_memory() -> Result<SqliteStore, StoreError> {
        Self::init(Connection::open_in_memory().map_err(err("cannot open"))?)
    }

    fn init(conn: Connection) -> Result<SqliteStore, StoreError> {
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(err("cannot set a busy timeout"))?;
        let mode: String =
            while_busy(|| conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)))
                .map_err(err("cannot read"))?;
        if !mode.eq_ignore_ascii_case("wal") && !mode.eq_ignore_ascii_case("memory") {
            return Err(StoreError(format!(
                "cannot switch to WAL (journal mode {mode})"
            )));
        }
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err("cannot configure"))?;
        migrate(&conn)?;
        Ok(SqliteStore { conn })
    }
}

/// Runs `step` again while another connection holds the lock it needs,
/// for up to `BUSY_TIMEOUT`. Switching a new file to WAL takes an
/// exclusive lock that SQLite's busy handler does not wait for, so runs
/// that open a new file at once (a fleet starting on a fresh machine)
/// would otherwise lose the record to a moment's contention.
fn while_busy<T>(mut step: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let started = std::time::Instant::now();
    loop {
        match step() {
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
                ) && started.elapsed() < BUSY_TIMEOUT =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

/// Brings the schema to `SCHEMA_VERSION` in one immediate transaction, so
/// two processes opening an old file at once migrate it once; a newer
/// schema is refused and left alone.
fn migrate(conn: &Connection) -> Result<(), StoreError> {
    let version = || -> Result<i64, StoreError> {
        conn.query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(err("cannot read"))
    };
    let newer = |version: i64| {
        StoreError(format!(
            "schema version {version} is newer than this tinyagent knows ({SCHEMA_VERSION})"
        ))
    };
    match version()? {
        v if v == SCHEMA_VERSION => return Ok(()),
        v if v > SCHEMA_VERSION => return Err(newer(v)),
        _ => {}
    }
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(err("cannot migrate the table"))?;
    let steps = || -> Result<(), StoreError> {
        let v = version()?;
        if v > SCHEMA_VERSION {
            return Err(newer(v));
        }
        if v < 1 {
            conn.execute_batch(SCHEMA)
                .map_err(err("cannot create the table"))?;
        }
        if v < 2 {
            conn.execute_batch(LEASE_COLUMNS)
                .map_err(err("cannot migrate the table"))?;
        }
        if v < 3 {
            conn.execute_batch(outage::SCHEMA)
                .map_err(err("cannot migrate the table"))?;
        }
        if v < 4 {
            conn.execute_batch(budget::SCHEMA)
                .map_err(err("cannot migrate the table"))?;
        }
        if v < 5 {
            conn.execute_batch(pacing::TABLE)
                .map_err(err("cannot migrate the table"))?;
        }
        if v < 6 {
            conn.execute_batch(latency::SCHEMA)
                .map_err(err("cannot migrate the table"))?;
        }
        if v < 7 {
            conn.execute_batch(pacing::WINDOWS)
                .map_err(err("cannot migrate the table"))?;
        }
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(err("cannot migrate the table"))
    };
    let outcome = steps();
    let end = if outcome.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    conn.execute_batch(end)
        .map_err(err("cannot migrate the table"))?;
    outcome
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
            .prepare_cached("SELECT cooling_until, last_success_at, lease_holder, lease_until FROM model_health WHERE model = ?1 AND endpoint = ?2")
            .map_err(err("cannot read"))?;
        let record = stmt
            .query_row(params![key.model, key.endpoint], |r| {
                let holder: Option<i64> = r.get(2)?;
                let until: Option<Millis> = r.get(3)?;
                Ok(Record {
                    cooling_until: r.get(0)?,
                    last_success_at: r.get(1)?,
                    lease: holder.zip(until).map(|(holder, until)| Lease {
                        holder: holder as u64,
                        until,
                    }),
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
                "SELECT strikes != '' OR cooling_until IS NOT NULL OR lease_holder IS NOT NULL FROM model_health WHERE model = ?1 AND endpoint = ?2",
            )
            .and_then(|mut s| s.query_row(params![key.model, key.endpoint], |r| r.get(0)).optional())
            .map_err(err("cannot read"))?;
        if dirty != Some(true) {
            return Ok(());
        }
        self.conn
            .execute(
                "UPDATE model_health SET strikes = '', cooling_until = NULL, lease_holder = NULL, lease_until = NULL,
                   last_success_at = ?3, updated_at = ?3
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
        holder: u64,
    ) -> Result<(), StoreError> {
        // One statement: the lease ends only when it is the writer's own
        // (or expired); another run's stays until its owner records.
        self.conn
            .execute(
                "INSERT INTO model_health (model, endpoint, last_reason, cooling_until, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (model, endpoint) DO UPDATE SET
                   last_reason = excluded.last_reason, cooling_until = excluded.cooling_until,
                   lease_until = CASE WHEN lease_holder = ?6 OR lease_until <= ?5 THEN NULL
                                      ELSE lease_until END,
                   lease_holder = CASE WHEN lease_holder = ?6 OR lease_until <= ?5 THEN NULL
                                       ELSE lease_holder END,
                   updated_at = excluded.updated_at",
                params![key.model, key.endpoint, reason, until, now, holder as i64],
            )
            .map_err(err("cannot write"))?;
        Ok(())
    }

    fn try_lease(
        &mut self,
        key: &HealthKey,
        holder: u64,
        now: Millis,
        ttl: Millis,
    ) -> Result<bool, StoreError> {
        // One statement: take the lease when it is free, expired or ours.
        let changed = self
            .conn
            .execute(
                "INSERT INTO model_health (model, endpoint, lease_holder, lease_until, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (model, endpoint) DO UPDATE SET
                   lease_holder = excluded.lease_holder, lease_until = excluded.lease_until,
                   updated_at = excluded.updated_at
                 WHERE lease_holder IS NULL OR lease_until <= ?5 OR lease_holder = ?3",
                params![key.model, key.endpoint, holder as i64, now + ttl, now],
            )
            .map_err(err("cannot write"))?;
        Ok(changed == 1)
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
        s.mark_cooling(&key(), 70_000, "http_503", 62_500, 9)
            .unwrap();
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
        b.mark_cooling(&key(), 9_000, "http_503", 1_001, 9).unwrap();
        assert_eq!(a.read(&key()).unwrap().cooling_until, Some(9_000));
    }

    #[test]
    fn a_version_1_file_is_migrated_in_place_and_a_newer_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("health.db");
        let old = Connection::open(&path).unwrap();
        old.execute_batch(&format!("{SCHEMA}; PRAGMA user_version = 1;"))
            .unwrap();
        old.execute(
            "INSERT INTO model_health (model, endpoint, cooling_until, updated_at) VALUES (?1, ?2, 9000, 1)",
            params![key().model, key().endpoint],
        )
        .unwrap();
        drop(old);
        let mut s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.read(&key()).unwrap().cooling_until, Some(9_000));
        assert!(s.try_lease(&key(), 7, 10_000, 60_000).unwrap());
        drop(s);
        let newer = Connection::open(&path).unwrap();
        newer.execute_batch("PRAGMA user_version = 9;").unwrap();
        drop(newer);
        let e = SqliteStore::open(&path).err().unwrap().to_string();
        assert!(e.contains("newer"), "{e}");
        let v: i64 = Connection::open(&path)
            .unwrap()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, 9, "a newer file is never altered");
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
