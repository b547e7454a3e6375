//! The pacing records (SPEC 17, 24) in the SQLite file: one row per model,
//! endpoint and key fingerprint for the published counts (`pacing`), and
//! one for the declared and learned windows and recent sends
//! (`pace_windows`, the `WindowState` as JSON). A reservation is one
//! immediate transaction (read both, apply `pacing::reserve`, write), so
//! parallel runs never spend the same unit.

use rusqlite::{params, OptionalExtension, Row, Transaction, TransactionBehavior};

use super::{err, SqliteStore};
use crate::health::pacing::{
    self, Ask, Count, Heard, PaceKey, PaceRecord, PacingStore, Reserved, Window, WindowState,
};
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

/// Version 7: the declared and learned windows (SPEC 24).
pub(super) const WINDOWS: &str = "CREATE TABLE IF NOT EXISTS pace_windows (
    model TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    account TEXT NOT NULL,          -- salted SHA-256 of the API key, never the key
    state TEXT NOT NULL,            -- levels, learned limit, sends per second (JSON)
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

fn read_windows(tx: &Transaction<'_>, key: &PaceKey) -> Result<WindowState, StoreError> {
    let text: Option<String> = tx
        .prepare_cached(
            "SELECT state FROM pace_windows WHERE model = ?1 AND endpoint = ?2 AND account = ?3",
        )
        .and_then(|mut s| {
            s.query_row(params![key.model, key.endpoint, key.account], |r| {
                r.get::<_, Option<String>>(0)
            })
            .optional()
        })
        .map_err(err("cannot read"))?
        .flatten();
    Ok(text.map(|t| WindowState::parse(&t)).unwrap_or_default())
}

fn write_windows(
    tx: &Transaction<'_>,
    key: &PaceKey,
    state: &WindowState,
    now: Millis,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO pace_windows (model, endpoint, account, state, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (model, endpoint, account) DO UPDATE SET
           state = excluded.state, updated_at = excluded.updated_at",
    )
    .and_then(|mut s| {
        s.execute(params![
            key.model,
            key.endpoint,
            key.account,
            state.text(),
            now
        ])
    })
    .map_err(err("cannot write"))?;
    Ok(())
}

impl SqliteStore {
    /// Runs `f` on `key`'s published record and windows inside one
    /// immediate transaction and writes back what changed.
    fn with_pace_state<R>(
        &mut self,
        key: &PaceKey,
        now: Millis,
        f: impl FnOnce(&mut PaceRecord, &mut WindowState) -> R,
    ) -> Result<R, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err("cannot write"))?;
        let old_record = read(&tx, key)?;
        let mut record = old_record.unwrap_or_default();
        let old_state = read_windows(&tx, key)?;
        let mut state = old_state.clone();
        let outcome = f(&mut record, &mut state);
        let changed = match old_record {
            Some(old) => old != record,
            None => !record.is_empty(),
        };
        if changed {
            write(&tx, key, &record, now)?;
        }
        if state != old_state {
            write_windows(&tx, key, &state, now)?;
        }
        tx.commit().map_err(err("cannot write"))?;
        Ok(outcome)
    }
}

impl PacingStore for SqliteStore {
    fn reserve(
        &mut self,
        key: &PaceKey,
        ask: &Ask<'_>,
        now: Millis,
    ) -> Result<Reserved, StoreError> {
        self.with_pace_state(key, now, |record, state| {
            pacing::reserve(record, state, ask, now)
        })
    }

    fn hear(&mut self, key: &PaceKey, heard: &Heard, now: Millis) -> Result<(), StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err("cannot write"))?;
        let mut record = read(&tx, key)?.unwrap_or_default();
        record.hear(heard, now);
        write(&tx, key, &record, now)?;
        tx.commit().map_err(err("cannot write"))
    }

    fn settle(
        &mut self,
        key: &PaceKey,
        windows: &[Window],
        unused: u64,
        now: Millis,
    ) -> Result<(), StoreError> {
        self.with_pace_state(key, now, |_, state| state.settle(windows, unused, now))
    }

    fn refused(
        &mut self,
        key: &PaceKey,
        sent_at: Millis,
        now: Millis,
    ) -> Result<Option<u64>, StoreError> {
        self.with_pace_state(key, now, |record, state| {
            pacing::refused(record, state, sent_at, now)
        })
    }

    fn learned(&mut self, key: &PaceKey, now: Millis) -> Result<Option<u64>, StoreError> {
        let text: Option<String> = self
            .conn
            .prepare_cached(
                "SELECT state FROM pace_windows WHERE model = ?1 AND endpoint = ?2 AND account = ?3",
            )
            .and_then(|mut s| {
                s.query_row(params![key.model, key.endpoint, key.account], |r| r.get(0))
                    .optional()
            })
            .map_err(err("cannot read"))?;
        Ok(text.and_then(|t| WindowState::parse(&t).learned_rpm(now)))
    }

    fn give_back(&mut self, key: &PaceKey, tokens: u64, now: Millis) -> Result<(), StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err("cannot write"))?;
        if let Some(mut record) = read(&tx, key)? {
            let before = record;
            record.give_back(tokens, now);
            if record != before {
                write(&tx, key, &record, now)?;
            }
        }
        tx.commit().map_err(err("cannot write"))?;
        Ok(())
    }
}
