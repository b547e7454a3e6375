//! An in-memory store: the same rules as the SQLite file. Its cooling
//! records serve unit tests and show the interface at its simplest; its
//! pacing records are a run's own when there is no shared record
//! (`health_db: off`, or a store that failed).

mod budget;
mod latency;
mod outage;

use std::collections::{HashMap, VecDeque};

use super::pacing::{
    self, Ask, Heard, PaceKey, PaceRecord, PacingStore, Reserved, Window, WindowState,
};
use super::{HealthKey, HealthStore, Lease, Millis, Record, StoreError, MAX_STRIKES};

#[derive(Debug, Default, Clone)]
struct Entry {
    strikes: Vec<Millis>,
    record: Record,
}

/// A store that lives as long as the value.
#[derive(Debug, Default, Clone)]
pub(crate) struct MemoryStore {
    entries: HashMap<HealthKey, Entry>,
    /// The outage records (`memory/outage.rs`).
    outages: HashMap<HealthKey, outage::Row>,
    /// Spend per budget slot (`memory/budget.rs`).
    spend: HashMap<super::BudgetSlot, i64>,
    pacing: HashMap<PaceKey, PaceRecord>,
    /// Declared and learned windows per key (SPEC 24).
    windows: HashMap<PaceKey, WindowState>,
    /// The last first-event times per model (`memory/latency.rs`).
    first_events: HashMap<HealthKey, VecDeque<u64>>,
}

impl PacingStore for MemoryStore {
    fn reserve(
        &mut self,
        key: &PaceKey,
        ask: &Ask<'_>,
        now: Millis,
    ) -> Result<Reserved, StoreError> {
        let mut record = self.pacing.get(key).copied().unwrap_or_default();
        let state = self.windows.entry(key.clone()).or_default();
        let reserved = pacing::reserve(&mut record, state, ask, now);
        if !record.is_empty() {
            self.pacing.insert(key.clone(), record);
        }
        Ok(reserved)
    }

    fn hear(&mut self, key: &PaceKey, heard: &Heard, now: Millis) -> Result<(), StoreError> {
        self.pacing.entry(key.clone()).or_default().hear(heard, now);
        Ok(())
    }

    fn give_back(&mut self, key: &PaceKey, tokens: u64, now: Millis) -> Result<(), StoreError> {
        if let Some(record) = self.pacing.get_mut(key) {
            record.give_back(tokens, now);
        }
        Ok(())
    }

    fn settle(
        &mut self,
        key: &PaceKey,
        windows: &[Window],
        unused: u64,
        now: Millis,
    ) -> Result<(), StoreError> {
        if let Some(state) = self.windows.get_mut(key) {
            state.settle(windows, unused, now);
        }
        Ok(())
    }

    fn refused(
        &mut self,
        key: &PaceKey,
        sent_at: Millis,
        now: Millis,
    ) -> Result<Option<u64>, StoreError> {
        let record = self.pacing.get(key).copied().unwrap_or_default();
        let state = self.windows.entry(key.clone()).or_default();
        Ok(pacing::refused(&record, state, sent_at, now))
    }

    fn learned(&mut self, key: &PaceKey, now: Millis) -> Result<Option<u64>, StoreError> {
        Ok(self.windows.get(key).and_then(|s| s.learned_rpm(now)))
    }
}

impl HealthStore for MemoryStore {
    fn read(&mut self, key: &HealthKey) -> Result<Record, StoreError> {
        Ok(self.entries.get(key).map(|e| e.record).unwrap_or_default())
    }

    fn record_strike(
        &mut self,
        key: &HealthKey,
        _reason: &str,
        now: Millis,
        window: Millis,
    ) -> Result<u32, StoreError> {
        let entry = self.entries.entry(key.clone()).or_default();
        entry.strikes.retain(|&t| t > now - window);
        entry.strikes.push(now);
        if entry.strikes.len() > MAX_STRIKES {
            entry.strikes.drain(..entry.strikes.len() - MAX_STRIKES);
        }
        Ok(entry.strikes.len() as u32)
    }

    fn record_success(&mut self, key: &HealthKey, now: Millis) -> Result<(), StoreError> {
        if let Some(entry) = self.entries.get_mut(key) {
            if !entry.strikes.is_empty() || entry.record.cooling_until.is_some() {
                entry.strikes.clear();
                entry.record.cooling_until = None;
                entry.record.last_success_at = Some(now);
            }
            entry.record.lease = None;
        }
        Ok(())
    }

    fn mark_cooling(
        &mut self,
        key: &HealthKey,
        until: Millis,
        _reason: &str,
        now: Millis,
        holder: u64,
    ) -> Result<(), StoreError> {
        let record = &mut self.entries.entry(key.clone()).or_default().record;
        record.cooling_until = Some(until);
        if !record.leased_by_other(holder, now) {
            record.lease = None;
        }
        Ok(())
    }

    fn try_lease(
        &mut self,
        key: &HealthKey,
        holder: u64,
        now: Millis,
        ttl: Millis,
    ) -> Result<bool, StoreError> {
        let record = &mut self.entries.entry(key.clone()).or_default().record;
        if record.leased_by_other(holder, now) {
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
#[cfg(test)]
impl<S: PacingStore> PacingStore for std::sync::Arc<std::sync::Mutex<S>> {
    fn reserve(
        &mut self,
        key: &PaceKey,
        ask: &Ask<'_>,
        now: Millis,
    ) -> Result<Reserved, StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .reserve(key, ask, now)
    }
    fn hear(&mut self, key: &PaceKey, heard: &Heard, now: Millis) -> Result<(), StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .hear(key, heard, now)
    }
    fn give_back(&mut self, key: &PaceKey, tokens: u64, now: Millis) -> Result<(), StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .give_back(key, tokens, now)
    }
    fn settle(
        &mut self,
        key: &PaceKey,
        windows: &[Window],
        unused: u64,
        now: Millis,
    ) -> Result<(), StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .settle(key, windows, unused, now)
    }
    fn refused(
        &mut self,
        key: &PaceKey,
        sent_at: Millis,
        now: Millis,
    ) -> Result<Option<u64>, StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .refused(key, sent_at, now)
    }
    fn learned(&mut self, key: &PaceKey, now: Millis) -> Result<Option<u64>, StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .learned(key, now)
    }
}

#[cfg(test)]
impl<S: HealthStore> HealthStore for std::sync::Arc<std::sync::Mutex<S>> {
    fn read(&mut self, key: &HealthKey) -> Result<Record, StoreError> {
        self.lock().unwrap_or_else(|e| e.into_inner()).read(key)
    }
    fn record_strike(
        &mut self,
        key: &HealthKey,
        reason: &str,
        now: Millis,
        window: Millis,
    ) -> Result<u32, StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .record_strike(key, reason, now, window)
    }
    fn record_success(&mut self, key: &HealthKey, now: Millis) -> Result<(), StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .record_success(key, now)
    }
    fn mark_cooling(
        &mut self,
        key: &HealthKey,
        until: Millis,
        reason: &str,
        now: Millis,
        holder: u64,
    ) -> Result<(), StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .mark_cooling(key, until, reason, now, holder)
    }
    fn try_lease(
        &mut self,
        key: &HealthKey,
        holder: u64,
        now: Millis,
        ttl: Millis,
    ) -> Result<bool, StoreError> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_lease(key, holder, now, ttl)
    }
}
