//! `LatencyStore` for the in-memory store: the last first-event times per
//! model in a ring.

use super::super::latency::{LatencyStore, KEPT_FIRST_EVENTS};
use super::super::{HealthKey, Millis, StoreError};
use super::MemoryStore;

impl LatencyStore for MemoryStore {
    fn record_first_event(
        &mut self,
        key: &HealthKey,
        ms: u64,
        _now: Millis,
    ) -> Result<(), StoreError> {
        let times = self.first_events.entry(key.clone()).or_default();
        if times.len() >= KEPT_FIRST_EVENTS {
            times.pop_front();
        }
        times.push_back(ms);
        Ok(())
    }

    fn first_events(&mut self, key: &HealthKey) -> Result<Vec<u64>, StoreError> {
        Ok(self
            .first_events
            .get(key)
            .map(|t| t.iter().copied().collect())
            .unwrap_or_default())
    }
}

/// A store shared by several `Health` values, as one file is shared by
/// several processes (tests).
impl<S: LatencyStore> LatencyStore for std::sync::Arc<std::sync::Mutex<S>> {
    fn record_first_event(
        &mut self,
        key: &HealthKey,
        ms: u64,
        now: Millis,
    ) -> Result<(), StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .record_first_event(key, ms, now)
    }
    fn first_events(&mut self, key: &HealthKey) -> Result<Vec<u64>, StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .first_events(key)
    }
}
