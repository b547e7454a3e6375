//! The pacing records (SPEC 17) in the SQLite file: one row per model,
//! endpoint and key fingerprint; a reservation is one immediate
//! transaction (read, apply `PaceRecord::reserve`, write), so parallel runs
//! never spend the same unit. A key with no row costs one read, no write.

use rusqlite::{params, OptionalExtension, Row, Transaction, TransactionBehavior};

use super::{err, SqliteStore};
use crate::health::pacing::{Count, Heard, PaceKey, PaceRecord, PacingStore, Reservation};
use crate::health::{Millis, StoreError};

/// Version 3: the pacing records. A count is there when its `remaining` is.
pub(super) const TABLE: &str = "CREATE TABLE IF NOT EXISTS pacing (
    model TEXT NOT NULL,            -- model spec
    endpoint TEXT NOT NULL,         -- base URL with port
    account TEXT NOT NULL,          -- salted SHA-256 of the API key, never the key
    requests_limit INTEGER,
    requests_remaining INTEGER,
    requests_reset_at INTEGER,      -- unix ms; NULL: started again, awaiting a response
    tokens_limit INTEGER,
    tokens_remaining INTEGER,
    tokens_reset_at INTEGER,
    updated_at INTEGER NOT NULL,    -- unix ms
    PRIMARY KEY (model, endpoint, account)
) WITHOUT ROWID";

const SELECT: &str = "SELECT requests_limit, requests_remaining, requests_reset_at,
    tokens_limit, tokens_remaining, tokens_reset_at
    FROM pacing WHERE model = ?1 AND endpoint = ?2 AND account = ?3";

/// A count from three columns starting at `at`.
fn count(row: &Row<'_>, at: usize) -> rusqlite::Result<Option<Count>> {
    let limit: Option<i64> = row.get(at)?;
    let remaining: Option<i64> = row.get(at + 1)?;
    let reset_at: Option<Millis> = row.get(at + 2)?;
    Ok(remaining.map(|remaining| Count {
        limit: limit.map(|l| l.max(0) as u64),
        remaining: remaining.max(0) as u64,
        reset_at,
    }))
}

fn record(row: &Row<'_>) -> rusqlite::Result<PaceRecord> {
    Ok(PaceRecord {
        requests: count(row, 0)?,
        tokens: count(row, 3)?,
    })
}

/// A count's three columns (NULLs for no count); values past `i64` are
/// capped (the parser keeps them far below).
fn columns(count: Option<Count>) -> (Option<i64>, Option<i64>, Option<Millis>) {
    let int = |v: u64| v.min(i64::MAX as u64) as i64;
    match count {
        Some(c) => (c.limit.map(int), Some(int(c.remaining)), c.reset_at),
        None => (None, None, None),
    }
}

fn read(tx: &Transaction<'_>, key: &PaceKey) -> Result<Option<PaceRecord>, StoreError> {
    tx.query_row(
        SELECT,
        params![key.model, key.endpoint, key.account],
        record,
    )
    .optional()
    .map_err(err("cannot read"))
}

fn write(
    tx: &Transaction<'_>,
    key: &PaceKey,
    record: &PaceRecord,
    now: Millis,
) -> Result<(), StoreError> {
    let (rl, rr, rt) = columns(record.requests);
    let (tl, tr, tt) = columns(record.tokens);
    tx.execute(
        "INSERT INTO pacing (model, endpoint, account, requests_limit, requests_remaining,
           requests_reset_at, tokens_limit, tokens_remaining, tokens_reset_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT (model, endpoint, account) DO UPDATE SET
           requests_limit = excluded.requests_limit, requests_remaining = excluded.requests_remaining,
           requests_reset_at = excluded.requests_reset_at, tokens_limit = excluded.tokens_limit,
           tokens_remaining = excluded.tokens_remaining, tokens_reset_at = excluded.tokens_reset_at,
           updated_at = excluded.updated_at",
        params![key.model, key.endpoint, key.account, rl, rr, rt, tl, tr, tt, now],
    )
    .map_err(err("cannot write"))?;
    Ok(())
}

impl SqliteStore {
    /// Runs `f` on `key`'s record inside one immediate transaction and
    /// writes the record back when `f` says it changed.
    fn with_pace_record<R>(
        &mut self,
        key: &PaceKey,
        now: Millis,
        f: impl FnOnce(&mut PaceRecord) -> (R, bool),
    ) -> Result<R, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err("cannot write"))?;
        let mut record = read(&tx, key)?.unwrap_or_default();
        let (outcome, changed) = f(&mut record);
        if changed {
            write(&tx, key, &record, now)?;
        }
        tx.commit().map_err(err("cannot write"))?;
        Ok(outcome)
    }
}

impl PacingStore for SqliteStore {
    fn reserve(
        &mut self,
        key: &PaceKey,
        tokens: u64,
        now: Millis,
    ) -> Result<Reservation, StoreError> {
        // A key no response ever published limits for: one read, no lock.
        let known: Option<i64> = self
            .conn
            .prepare_cached(
                "SELECT 1 FROM pacing WHERE model = ?1 AND endpoint = ?2 AND account = ?3",
            )
            .and_then(|mut s| {
                s.query_row(params![key.model, key.endpoint, key.account], |r| r.get(0))
                    .optional()
            })
            .map_err(err("cannot read"))?;
        if known.is_none() {
            return Ok(Reservation::Taken);
        }
        self.with_pace_record(key, now, |record| {
            let before = *record;
            let outcome = record.reserve(tokens, now);
            (outcome, *record != before)
        })
    }

    fn hear(&mut self, key: &PaceKey, heard: &Heard, now: Millis) -> Result<(), StoreError> {
        self.with_pace_record(key, now, |record| {
            record.hear(heard, now);
            ((), true)
        })
    }

    fn give_back(&mut self, key: &PaceKey, tokens: u64, now: Millis) -> Result<(), StoreError> {
        self.with_pace_record(key, now, |record| {
            let before = *record;
            record.give_back(tokens, now);
            ((), *record != before)
        })
    }
}
