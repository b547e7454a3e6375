//! Spend per budget and period (SPEC 19), kept beside the cooling records
//! so that every run sharing the record (one machine's file, a fleet's
//! Redis) adds to the same totals. Facts only: what a total means for a
//! run is decided in `model::gate::budget`.

use super::{Millis, StoreError};

/// One budget's total in one calendar period: the budget's key (its period
/// and scope, never its amount: `day`, `day model=openai/gpt-5`) and the
/// period's start and end (unix ms, UTC). A new period is a new slot, so
/// totals start again from 0 on their own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BudgetSlot {
    pub budget: String,
    pub start: Millis,
    pub end: Millis,
}

/// The spend totals, in whole nano-dollars (1e-9 USD, so that sums are
/// exact). Implementations keep only keys, periods and amounts.
pub trait BudgetStore: Send {
    /// The total of each slot, in order (0 for a slot never written).
    fn spent(&mut self, slots: &[BudgetSlot]) -> Result<Vec<i64>, StoreError>;
    /// Adds `nanos` to every slot in one atomic step (a response's cost to
    /// every budget it falls under) and returns each slot's new total. A
    /// slot is kept at least until its period has ended.
    fn add_spend(
        &mut self,
        slots: &[BudgetSlot],
        nanos: i64,
        now: Millis,
    ) -> Result<Vec<i64>, StoreError>;
}

/// How long a slot is kept after its period ended (for a look back at
/// last period's spend; no run reads it).
pub(crate) const KEEP_AFTER_END: Millis = 35 * 24 * 3_600_000;
