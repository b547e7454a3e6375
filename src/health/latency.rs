//! The first-event record (SPEC 23 `auto`): for each model, how long its
//! last successful requests took to send their first stream event, kept
//! beside the cooling records so that a fleet learns one model's latency
//! together. Facts only: the hedge delay made from them is the gate's
//! (`model/gate/hedge.rs`).

use super::{HealthKey, Millis, StoreError};

/// First-event times kept per model: the last this many successes.
pub const KEPT_FIRST_EVENTS: usize = 50;

/// The first-event record's operations, each one short transaction (one
/// Redis round trip), safe from several processes at once.
pub trait LatencyStore: Send {
    /// Adds one successful request's time to its first event (`ms`) to
    /// `key`'s record, which keeps the last `KEPT_FIRST_EVENTS`.
    fn record_first_event(
        &mut self,
        key: &HealthKey,
        ms: u64,
        now: Millis,
    ) -> Result<(), StoreError>;

    /// `key`'s recorded first-event times, at most `KEPT_FIRST_EVENTS`, in
    /// no particular order.
    fn first_events(&mut self, key: &HealthKey) -> Result<Vec<u64>, StoreError>;
}
