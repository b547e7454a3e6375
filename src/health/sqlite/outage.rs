//! `OutageStore` on the SQLite file: a table of its own, `model_outage`,
//! keyed like `model_health`. A row written before the model's last
//! success (`model_health.last_success_at`) reads as empty.

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::super::outage::{OutageRecord, OutageStore};
use super::super::{HealthKey, Millis, StoreError};
use super::{err, SqliteStore};

/// Schema version 3: the outage record.
pub(super) const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS model_outage (
    model TEXT NOT NULL,            -- model spec, as in model_health
    endpoint TEXT NOT NULL,
    failures INTEGER NOT NULL DEFAULT 0, -- probes of waiting runs that failed since the model last answered
    next_probe_at INTEGER,          -- unix ms: when the fleet's next probe is due
    updated_at INTEGER NOT NULL,    -- unix ms; a success after it empties the row
    PRIMARY KEY (model, endpoint)
) WITHOUT ROWID;";

/// The row of a key, unless a success came after it.
const FRESH: &str = "SELECT o.failures, o.next_probe_at FROM model_outage o
    LEFT JOIN model_health h ON h.model = o.model AND h.endpoint = o.endpoint
    WHERE o.model = ?1 AND o.endpoint = ?2
      AND (h.last_success_at IS NULL OR h.last_success_at < o.updated_at)";

const UPSERT: &str =
    "INSERT INTO model_outage (model, endpoint, failures, next_probe_at, updated_at)
    VALUES (?1, ?2, ?3, ?4, ?5)
    ON CONFLICT (model, endpoint) DO UPDATE SET
      failures = excluded.failures, next_probe_at = excluded.next_probe_at,
      updated_at = excluded.updated_at";

/// Takes the probe lease when it is free, expired or the holder's own
/// (the statement of `try_lease`).
const LEASE: &str =
    "INSERT INTO model_health (model, endpoint, lease_holder, lease_until, updated_at)
    VALUES (?1, ?2, ?3, ?4, ?5)
    ON CONFLICT (model, endpoint) DO UPDATE SET
      lease_holder = excluded.lease_holder, lease_until = excluded.lease_until,
      updated_at = excluded.updated_at
    WHERE lease_holder IS NULL OR lease_until <= ?5 OR lease_holder = ?3";

fn fresh(conn: &Connection, key: &HealthKey) -> Result<OutageRecord, StoreError> {
    let row = conn
        .prepare_cached(FRESH)
        .and_then(|mut s| {
            s.query_row(params![key.model, key.endpoint], |r| {
                Ok(OutageRecord {
                    failures: r.get::<_, i64>(0)?.clamp(0, u32::MAX as i64) as u32,
                    next_probe_at: r.get(1)?,
                })
            })
            .optional()
        })
        .map_err(err("cannot read"))?;
    Ok(row.unwrap_or_default())
}

fn write(
    conn: &Connection,
    key: &HealthKey,
    record: OutageRecord,
    now: Millis,
) -> Result<(), StoreError> {
    conn.execute(
        UPSERT,
        params![
            key.model,
            key.endpoint,
            i64::from(record.failures),
            record.next_probe_at,
            now
        ],
    )
    .map_err(err("cannot write"))?;
    Ok(())
}

impl SqliteStore {
    /// Runs `f` in one immediate transaction (a write lock from the start,
    /// so a read-then-write cannot interleave with another process's).
    fn in_transaction<R>(
        &mut self,
        f: impl FnOnce(&Connection) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err("cannot write"))?;
        let value = f(&tx)?;
        tx.commit().map_err(err("cannot write"))?;
        Ok(value)
    }
}

impl OutageStore for SqliteStore {
    fn read_outage(&mut self, key: &HealthKey) -> Result<OutageRecord, StoreError> {
        fresh(&self.conn, key)
    }

    fn count_failed_probe(&mut self, key: &HealthKey, now: Millis) -> Result<u32, StoreError> {
        self.in_transaction(|tx| {
            let mut record = fresh(tx, key)?;
            record.failures = record.failures.saturating_add(1);
            write(tx, key, record, now)?;
            Ok(record.failures)
        })
    }

    fn schedule_probe(
        &mut self,
        key: &HealthKey,
        at: Millis,
        now: Millis,
        replace: bool,
    ) -> Result<Millis, StoreError> {
        self.in_transaction(|tx| {
            let mut record = fresh(tx, key)?;
            if let (false, Some(held)) = (replace, record.next_probe_at) {
                return Ok(held);
            }
            record.next_probe_at = Some(at);
            write(tx, key, record, now)?;
            Ok(at)
        })
    }

    fn take_due_probe(
        &mut self,
        key: &HealthKey,
        holder: u64,
        now: Millis,
        ttl: Millis,
    ) -> Result<bool, StoreError> {
        self.in_transaction(|tx| {
            let due = fresh(tx, key)?.next_probe_at.is_some_and(|at| at <= now);
            if !due {
                return Ok(false);
            }
            let changed = tx
                .execute(
                    LEASE,
                    params![key.model, key.endpoint, holder as i64, now + ttl, now],
                )
                .map_err(err("cannot write"))?;
            Ok(changed == 1)
        })
    }
}
