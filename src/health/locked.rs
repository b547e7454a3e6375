//! A store whose every call fails, as a locked file or a dead Redis: for
//! tests of what a run does when the shared record cannot be reached.

use super::pacing::{Ask, Reserved, Window};
use super::{
    BudgetSlot, BudgetStore, HealthKey, HealthStore, Heard, LatencyStore, Millis, OutageRecord,
    OutageStore, PaceKey, PacingStore, Record, StoreError,
};

/// Every call fails with "database is locked".
pub(crate) struct LockedStore;
impl PacingStore for LockedStore {
    fn reserve(&mut self, _: &PaceKey, _: &Ask<'_>, _: Millis) -> Result<Reserved, StoreError> {
        Err(StoreError("database is locked".into()))
    }
    fn settle(&mut self, _: &PaceKey, _: &[Window], _: u64, _: Millis) -> Result<(), StoreError> {
        Err(StoreError("database is locked".into()))
    }
    fn refused(&mut self, _: &PaceKey, _: Millis, _: Millis) -> Result<Option<u64>, StoreError> {
        Err(StoreError("database is locked".into()))
    }
    fn learned(&mut self, _: &PaceKey, _: Millis) -> Result<Option<u64>, StoreError> {
        Err(StoreError("database is locked".into()))
    }
    fn hear(&mut self, _: &PaceKey, _: &Heard, _: Millis) -> Result<(), StoreError> {
        Err(StoreError("database is locked".into()))
    }
    fn give_back(&mut self, _: &PaceKey, _: u64, _: Millis) -> Result<(), StoreError> {
        Err(StoreError("database is locked".into()))
    }
}
impl HealthStore for LockedStore {
    fn read(&mut self, _: &HealthKey) -> Result<Record, StoreError> {
        Err(StoreError("database is locked".into()))
    }
    fn record_strike(
        &mut self,
        _: &HealthKey,
        _: &str,
        _: Millis,
        _: Millis,
    ) -> Result<u32, StoreError> {
        Err(StoreError("database is locked".into()))
    }
    fn record_success(&mut self, _: &HealthKey, _: Millis) -> Result<(), StoreError> {
        Err(StoreError("database is locked".into()))
    }
    fn mark_cooling(
        &mut self,
        _: &HealthKey,
        _: Millis,
        _: &str,
        _: Millis,
        _: u64,
    ) -> Result<(), StoreError> {
        Err(StoreError("database is locked".into()))
    }
    fn try_lease(
        &mut self,
        _: &HealthKey,
        _: u64,
        _: Millis,
        _: Millis,
    ) -> Result<bool, StoreError> {
        Err(StoreError("database is locked".into()))
    }
}
impl OutageStore for LockedStore {
    fn read_outage(&mut self, _: &HealthKey) -> Result<OutageRecord, StoreError> {
        Err(StoreError("database is locked".into()))
    }
    fn count_failed_probe(&mut self, _: &HealthKey, _: Millis) -> Result<u32, StoreError> {
        Err(StoreError("database is locked".into()))
    }
    fn schedule_probe(
        &mut self,
        _: &HealthKey,
        _: Millis,
        _: Millis,
        _: bool,
    ) -> Result<Millis, StoreError> {
        Err(StoreError("database is locked".into()))
    }
    fn take_due_probe(
        &mut self,
        _: &HealthKey,
        _: u64,
        _: Millis,
        _: Millis,
    ) -> Result<bool, StoreError> {
        Err(StoreError("database is locked".into()))
    }
}
impl BudgetStore for LockedStore {
    fn spent(&mut self, _: &[BudgetSlot]) -> Result<Vec<i64>, StoreError> {
        Err(StoreError("database is locked".into()))
    }
    fn add_spend(&mut self, _: &[BudgetSlot], _: i64, _: Millis) -> Result<Vec<i64>, StoreError> {
        Err(StoreError("database is locked".into()))
    }
}
impl LatencyStore for LockedStore {
    fn record_first_event(&mut self, _: &HealthKey, _: u64, _: Millis) -> Result<(), StoreError> {
        Err(StoreError("database is locked".into()))
    }
    fn first_events(&mut self, _: &HealthKey) -> Result<Vec<u64>, StoreError> {
        Err(StoreError("database is locked".into()))
    }
}
