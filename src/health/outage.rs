//! The outage record (SPEC 18): for each model, how many probes the
//! fleet's waiting runs sent it in vain since it last answered, and when
//! the next one is due. It lives in the same store as the cooling records
//! (one machine's SQLite file, a fleet's Redis, memory in tests) and keeps
//! facts only: the schedule is the gate's (`model/gate/outage.rs`).
//!
//! Every implementation keeps one rule: a success recorded for the model
//! (`HealthStore::record_success`) after the outage record's last write
//! makes it empty, so a new outage starts its count again.

use super::{HealthKey, Millis, StoreError};

/// What the record says of one model's outage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutageRecord {
    /// Probes of waiting runs that failed since the model last answered.
    pub failures: u32,
    /// When the next probe is due; `None` when none is scheduled since the
    /// model last answered.
    pub next_probe_at: Option<Millis>,
}

/// The outage record's operations. Each is one short transaction (a Redis
/// script), safe from several processes at once.
pub trait OutageStore: Send {
    /// The outage record of `key` (empty when none, or when a success came
    /// after it).
    fn read_outage(&mut self, key: &HealthKey) -> Result<OutageRecord, StoreError>;

    /// Counts one more failed probe of `key` at `now` and returns the
    /// failures since the model's last success, this one included.
    fn count_failed_probe(&mut self, key: &HealthKey, now: Millis) -> Result<u32, StoreError>;

    /// Sets when the next probe of `key` is due: to `at` when `replace`,
    /// else only when none is scheduled (so the first waiting run of a
    /// fleet sets it and the others find it). Returns the time the record
    /// holds afterwards.
    fn schedule_probe(
        &mut self,
        key: &HealthKey,
        at: Millis,
        now: Millis,
        replace: bool,
    ) -> Result<Millis, StoreError>;

    /// Takes the probe lease of `key` for `holder` until `now + ttl` (the
    /// lease of `HealthStore::try_lease`), but only when the scheduled probe
    /// is due (`next_probe_at <= now`) and no other holder has a live
    /// lease: checked and taken in one step, so that of the runs waking up
    /// at the due time exactly one probes. Returns whether `holder` holds it.
    fn take_due_probe(
        &mut self,
        key: &HealthKey,
        holder: u64,
        now: Millis,
        ttl: Millis,
    ) -> Result<bool, StoreError>;
}
