//! `BudgetStore` in Redis: one integer key per budget and period
//! (`tinyagent:budget:<budget>@<period start>`), a response's cost added
//! to all its budgets by one Lua script (`INCRBY` each, so the fleet's
//! additions are atomic and exact), each key expiring on its own some
//! time after its period ended. A read is one `MGET`.

use std::sync::LazyLock;

use redis::Script;

use super::super::budget::KEEP_AFTER_END;
use super::super::{BudgetSlot, BudgetStore, Millis, StoreError};
use super::{wait, RedisStore};

/// Key prefix of every budget total.
const PREFIX: &str = "tinyagent:budget:";

/// Adds ARGV[1] to each key and makes it expire at its ARGV[i + 1] (unix
/// ms); returns the new totals. KEYS: one per slot.
static ADD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local out = {}
for i, k in ipairs(KEYS) do
  out[i] = redis.call('INCRBY', k, ARGV[1])
  redis.call('PEXPIREAT', k, ARGV[i + 1])
end
return out
"#,
    )
});

fn key(slot: &BudgetSlot) -> String {
    format!("{PREFIX}{}@{}", slot.budget, slot.start)
}

impl BudgetStore for RedisStore {
    fn spent(&mut self, slots: &[BudgetSlot]) -> Result<Vec<i64>, StoreError> {
        if slots.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = slots.iter().map(key).collect();
        let mut conn = self.conn.clone();
        let totals: Vec<Option<i64>> = wait(&self.runtime, async move {
            redis::cmd("MGET").arg(&keys).query_async(&mut conn).await
        })?;
        Ok(totals.into_iter().map(|t| t.unwrap_or(0)).collect())
    }

    fn add_spend(
        &mut self,
        slots: &[BudgetSlot],
        nanos: i64,
        _now: Millis,
    ) -> Result<Vec<i64>, StoreError> {
        if slots.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = slots.iter().map(key).collect();
        let expiries: Vec<String> = slots
            .iter()
            .map(|s| s.end.saturating_add(KEEP_AFTER_END).to_string())
            .collect();
        let script = ADD.clone();
        let mut conn = self.conn.clone();
        wait(&self.runtime, async move {
            let mut invocation = script.prepare_invoke();
            for k in &keys {
                invocation.key(k);
            }
            invocation.arg(nanos);
            for e in &expiries {
                invocation.arg(e);
            }
            invocation.invoke_async::<Vec<i64>>(&mut conn).await
        })
    }
}
