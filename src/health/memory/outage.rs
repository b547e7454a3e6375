//! `OutageStore` for the in-memory store, and for a store shared by
//! several `Health` values in tests.

use std::sync::{Arc, Mutex};

use super::super::outage::{OutageRecord, OutageStore};
use super::super::{HealthKey, HealthStore, Lease, Millis, StoreError};
use super::MemoryStore;

/// One model's outage record and when it was last written.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Row {
    record: OutageRecord,
    updated_at: Millis,
}

impl MemoryStore {
    /// The outage record of `key`, empty when a success came after it.
    fn fresh(&self, key: &HealthKey) -> OutageRecord {
        let success = self.entries.get(key).and_then(|e| e.record.last_success_at);
        match self.outages.get(key) {
            Some(row) if success.is_none_or(|s| s < row.updated_at) => row.record,
            _ => OutageRecord::default(),
        }
    }
}

impl OutageStore for MemoryStore {
    fn read_outage(&mut self, key: &HealthKey) -> Result<OutageRecord, StoreError> {
        Ok(self.fresh(key))
    }

    fn count_failed_probe(&mut self, key: &HealthKey, now: Millis) -> Result<u32, StoreError> {
        let mut record = self.fresh(key);
        record.failures += 1;
        self.outages.insert(
            key.clone(),
            Row {
                record,
                updated_at: now,
            },
        );
        Ok(record.failures)
    }

    fn schedule_probe(
        &mut self,
        key: &HealthKey,
        at: Millis,
        now: Millis,
        replace: bool,
    ) -> Result<Millis, StoreError> {
        let mut record = self.fresh(key);
        if let (false, Some(held)) = (replace, record.next_probe_at) {
            return Ok(held);
        }
        record.next_probe_at = Some(at);
        self.outages.insert(
            key.clone(),
            Row {
                record,
                updated_at: now,
            },
        );
        Ok(at)
    }

    fn take_due_probe(
        &mut self,
        key: &HealthKey,
        holder: u64,
        now: Millis,
        ttl: Millis,
    ) -> Result<bool, StoreError> {
        let due = self.fresh(key).next_probe_at.is_some_and(|at| at <= now);
        let record = &mut self.entries.entry(key.clone()).or_default().record;
        if !due || record.leased_by_other(holder, now) {
            return Ok(false);
        }
        record.lease = Some(Lease {
            holder,
            until: now + ttl,
        });
        Ok(true)
    }
}

/// A store shared by several `Health` values, as one file is shared by
/// several processes (tests).
impl<S: HealthStore + OutageStore> OutageStore for Arc<Mutex<S>> {
    fn read_outage(&mut self, key: &HealthKey) -> Result<OutageRecord, StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .read_outage(key)
    }
    fn count_failed_probe(&mut self, key: &HealthKey, now: Millis) -> Result<u32, StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .count_failed_probe(key, now)
    }
    fn schedule_probe(
        &mut self,
        key: &HealthKey,
        at: Millis,
        now: Millis,
        replace: bool,
    ) -> Result<Millis, StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .schedule_probe(key, at, now, replace)
    }
    fn take_due_probe(
        &mut self,
        key: &HealthKey,
        holder: u64,
        now: Millis,
        ttl: Millis,
    ) -> Result<bool, StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_due_probe(key, holder, now, ttl)
    }
}
