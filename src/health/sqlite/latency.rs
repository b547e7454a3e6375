//! `LatencyStore` in the SQLite file: one row per recorded success in
//! `model_first_events`, the key's rows past the last `KEPT_FIRST_EVENTS`
//! deleted in the same immediate transaction that adds one.

use rusqlite::{params, TransactionBehavior};

use super::super::latency::{LatencyStore, KEPT_FIRST_EVENTS};
use super::super::{HealthKey, Millis, StoreError};
use super::{err, SqliteStore};

/// Version 6: the first-event record (SPEC 23).
pub(super) const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS model_first_events (
    id INTEGER PRIMARY KEY,         -- in the order they were recorded
    model TEXT NOT NULL,            -- model spec, as in model_health
    endpoint TEXT NOT NULL,
    first_event_ms INTEGER NOT NULL, -- a successful request's time to its first stream event
    recorded_at INTEGER NOT NULL    -- unix ms
);
CREATE INDEX IF NOT EXISTS model_first_events_key ON model_first_events (model, endpoint, id);";

impl LatencyStore for SqliteStore {
    fn record_first_event(
        &mut self,
        key: &HealthKey,
        ms: u64,
        now: Millis,
    ) -> Result<(), StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err("cannot write"))?;
        tx.execute(
            "INSERT INTO model_first_events (model, endpoint, first_event_ms, recorded_at)
             VALUES (?1, ?2, ?3, ?4)",
            params![key.model, key.endpoint, ms.min(i64::MAX as u64) as i64, now],
        )
        .map_err(err("cannot write"))?;
        tx.execute(
            "DELETE FROM model_first_events WHERE model = ?1 AND endpoint = ?2 AND id NOT IN (
               SELECT id FROM model_first_events WHERE model = ?1 AND endpoint = ?2
               ORDER BY id DESC LIMIT ?3)",
            params![key.model, key.endpoint, KEPT_FIRST_EVENTS as i64],
        )
        .map_err(err("cannot write"))?;
        tx.commit().map_err(err("cannot write"))
    }

    fn first_events(&mut self, key: &HealthKey) -> Result<Vec<u64>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT first_event_ms FROM model_first_events WHERE model = ?1 AND endpoint = ?2
                 ORDER BY id DESC LIMIT ?3",
            )
            .map_err(err("cannot read"))?;
        let rows = stmt
            .query_map(
                params![key.model, key.endpoint, KEPT_FIRST_EVENTS as i64],
                |r| r.get::<_, i64>(0),
            )
            .map_err(err("cannot read"))?;
        rows.map(|r| r.map(|ms| ms.max(0) as u64).map_err(err("cannot read")))
            .collect()
    }
}
