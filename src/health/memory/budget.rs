//! `BudgetStore` for the in-memory store (tests), and for a store shared
//! between several handles as one file is between processes.

use super::super::{BudgetSlot, BudgetStore, Millis, StoreError};
use super::MemoryStore;

impl BudgetStore for MemoryStore {
    fn spent(&mut self, slots: &[BudgetSlot]) -> Result<Vec<i64>, StoreError> {
        Ok(slots
            .iter()
            .map(|s| self.spend.get(s).copied().unwrap_or(0))
            .collect())
    }

    fn add_spend(
        &mut self,
        slots: &[BudgetSlot],
        nanos: i64,
        now: Millis,
    ) -> Result<Vec<i64>, StoreError> {
        // Slots of periods that ended are kept no longer than the others'.
        self.spend
            .retain(|s, _| s.end > now - super::super::budget::KEEP_AFTER_END);
        Ok(slots
            .iter()
            .map(|s| {
                let total = self.spend.entry(s.clone()).or_insert(0);
                *total = total.saturating_add(nanos);
                *total
            })
            .collect())
    }
}

impl<S: BudgetStore> BudgetStore for std::sync::Arc<std::sync::Mutex<S>> {
    fn spent(&mut self, slots: &[BudgetSlot]) -> Result<Vec<i64>, StoreError> {
        self.lock().unwrap_or_else(|e| e.into_inner()).spent(slots)
    }
    fn add_spend(
        &mut self,
        slots: &[BudgetSlot],
        nanos: i64,
        now: Millis,
    ) -> Result<Vec<i64>, StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .add_spend(slots, nanos, now)
    }
}
