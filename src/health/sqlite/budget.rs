//! `BudgetStore` in the SQLite file: one row per budget and period, a
//! response's cost added to all its budgets in one immediate transaction,
//! so parallel runs never lose an addition.

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::super::budget::KEEP_AFTER_END;
use super::super::{BudgetSlot, BudgetStore, Millis, StoreError};
use super::{err, SqliteStore};

/// Version 4: spend per budget and period (SPEC 19).
pub(super) const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS budget_spend (
    budget TEXT NOT NULL,           -- period and scope, e.g. 'day' or 'day model=openai/gpt-5' (never the amount)
    period_start INTEGER NOT NULL,  -- unix ms, UTC
    period_end INTEGER NOT NULL,    -- unix ms, UTC: the next period's start
    spent_nano_usd INTEGER NOT NULL DEFAULT 0,  -- in 1e-9 USD
    updated_at INTEGER NOT NULL,    -- unix ms
    PRIMARY KEY (budget, period_start)
) WITHOUT ROWID;";

impl BudgetStore for SqliteStore {
    fn spent(&mut self, slots: &[BudgetSlot]) -> Result<Vec<i64>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT spent_nano_usd FROM budget_spend WHERE budget = ?1 AND period_start = ?2",
            )
            .map_err(err("cannot read"))?;
        slots
            .iter()
            .map(|s| {
                let total: Option<i64> = stmt
                    .query_row(params![s.budget, s.start], |r| r.get(0))
                    .optional()
                    .map_err(err("cannot read"))?;
                Ok(total.unwrap_or(0))
            })
            .collect()
    }

    fn add_spend(
        &mut self,
        slots: &[BudgetSlot],
        nanos: i64,
        now: Millis,
    ) -> Result<Vec<i64>, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err("cannot write"))?;
        let mut totals = Vec::with_capacity(slots.len());
        let mut new_period = false;
        {
            let mut add = tx
                .prepare_cached(
                    "UPDATE budget_spend SET spent_nano_usd = spent_nano_usd + ?3, updated_at = ?4
                     WHERE budget = ?1 AND period_start = ?2 RETURNING spent_nano_usd",
                )
                .map_err(err("cannot write"))?;
            for s in slots {
                let total: Option<i64> = add
                    .query_row(params![s.budget, s.start, nanos, now], |r| r.get(0))
                    .optional()
                    .map_err(err("cannot write"))?;
                let total = match total {
                    Some(total) => total,
                    None => {
                        new_period = true;
                        tx.execute(
                            "INSERT INTO budget_spend (budget, period_start, period_end, spent_nano_usd, updated_at)
                             VALUES (?1, ?2, ?3, ?4, ?5)",
                            params![s.budget, s.start, s.end, nanos, now],
                        )
                        .map_err(err("cannot write"))?;
                        nanos
                    }
                };
                totals.push(total);
            }
        }
        if new_period {
            // A period began: rows of long-ended ones go (rarely, cheaply).
            tx.execute(
                "DELETE FROM budget_spend WHERE period_end < ?1",
                params![now - KEEP_AFTER_END],
            )
            .map_err(err("cannot write"))?;
        }
        tx.commit().map_err(err("cannot write"))?;
        Ok(totals)
    }
}
