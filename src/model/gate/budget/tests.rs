//! The budget book: reading and adding spend on the shared record (or
//! without one), and the start-of-run warnings.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::budget::{Period, Scope};
use crate::health::{
    BudgetStore, HealthKey, HealthStore, MemoryStore, OutageRecord, OutageStore, Record, StoreError,
};

fn day(usd: f64, scope: Scope) -> Budget {
    Budget {
        usd,
        per: Period::Day,
        scope,
    }
}

/// A memory store that fails every call once `broken` is set.
struct Breakable {
    inner: MemoryStore,
    broken: Arc<AtomicBool>,
}

impl Breakable {
    fn check(&self) -> Result<(), StoreError> {
        if self.broken.load(Ordering::SeqCst) {
            Err(StoreError("gone".into()))
        } else {
            Ok(())
        }
    }
}

impl HealthStore for Breakable {
    fn read(&mut self, key: &HealthKey) -> Result<Record, StoreError> {
        self.check()?;
        self.inner.read(key)
    }
    fn record_strike(&mut self, k: &HealthKey, r: &str, n: i64, w: i64) -> Result<u32, StoreError> {
        self.check()?;
        self.inner.record_strike(k, r, n, w)
    }
    fn record_success(&mut self, key: &HealthKey, now: i64) -> Result<(), StoreError> {
        self.check()?;
        self.inner.record_success(key, now)
    }
    fn mark_cooling(
        &mut self,
        k: &HealthKey,
        u: i64,
        r: &str,
        n: i64,
        h: u64,
    ) -> Result<(), StoreError> {
        self.check()?;
        self.inner.mark_cooling(k, u, r, n, h)
    }
    fn try_lease(&mut self, k: &HealthKey, h: u64, n: i64, t: i64) -> Result<bool, StoreError> {
        self.check()?;
        self.inner.try_lease(k, h, n, t)
    }
}

impl crate::health::PacingStore for Breakable {
    fn reserve(
        &mut self,
        key: &crate::health::PaceKey,
        ask: &crate::health::Ask<'_>,
        now: i64,
    ) -> Result<crate::health::Reserved, StoreError> {
        self.check()?;
        self.inner.reserve(key, ask, now)
    }
    fn settle(
        &mut self,
        key: &crate::health::PaceKey,
        windows: &[crate::health::Window],
        unused: u64,
        now: i64,
    ) -> Result<(), StoreError> {
        self.check()?;
        self.inner.settle(key, windows, unused, now)
    }
    fn refused(
        &mut self,
        key: &crate::health::PaceKey,
        sent_at: i64,
        now: i64,
    ) -> Result<Option<u64>, StoreError> {
        self.check()?;
        self.inner.refused(key, sent_at, now)
    }
    fn learned(
        &mut self,
        key: &crate::health::PaceKey,
        now: i64,
    ) -> Result<Option<u64>, StoreError> {
        self.check()?;
        self.inner.learned(key, now)
    }
    fn hear(
        &mut self,
        key: &crate::health::PaceKey,
        heard: &crate::health::Heard,
        now: i64,
    ) -> Result<(), StoreError> {
        self.check()?;
        self.inner.hear(key, heard, now)
    }
    fn give_back(
        &mut self,
        key: &crate::health::PaceKey,
        tokens: u64,
        now: i64,
    ) -> Result<(), StoreError> {
        self.check()?;
        self.inner.give_back(key, tokens, now)
    }
}

impl OutageStore for Breakable {
    fn read_outage(&mut self, key: &HealthKey) -> Result<OutageRecord, StoreError> {
        self.check()?;
        self.inner.read_outage(key)
    }
    fn count_failed_probe(&mut self, key: &HealthKey, now: i64) -> Result<u32, StoreError> {
        self.check()?;
        self.inner.count_failed_probe(key, now)
    }
    fn schedule_probe(
        &mut self,
        k: &HealthKey,
        at: i64,
        n: i64,
        r: bool,
    ) -> Result<i64, StoreError> {
        self.check()?;
        self.inner.schedule_probe(k, at, n, r)
    }
    fn take_due_probe(
        &mut self,
        k: &HealthKey,
        h: u64,
        n: i64,
        t: i64,
    ) -> Result<bool, StoreError> {
        self.check()?;
        self.inner.take_due_probe(k, h, n, t)
    }
}

impl BudgetStore for Breakable {
    fn spent(&mut self, slots: &[BudgetSlot]) -> Result<Vec<i64>, StoreError> {
        self.check()?;
        self.inner.spent(slots)
    }
    fn add_spend(&mut self, s: &[BudgetSlot], n: i64, now: i64) -> Result<Vec<i64>, StoreError> {
        self.check()?;
        self.inner.add_spend(s, n, now)
    }
}

impl crate::health::LatencyStore for Breakable {
    fn record_first_event(&mut self, k: &HealthKey, ms: u64, now: i64) -> Result<(), StoreError> {
        self.check()?;
        self.inner.record_first_event(k, ms, now)
    }
    fn first_events(&mut self, key: &HealthKey) -> Result<Vec<u64>, StoreError> {
        self.check()?;
        self.inner.first_events(key)
    }
}

fn spent(book: &BudgetBook) -> Vec<f64> {
    book.read()
        .standings()
        .iter()
        .map(|s| budget::usd(s.spent))
        .collect()
}

#[test]
fn spend_goes_to_every_budget_a_response_falls_under() {
    let store: Arc<Mutex<MemoryStore>> = Arc::default();
    let health = Health::new(Box::new(store.clone()), "test", |_| {});
    let book = BudgetBook::new(
        vec![
            day(50.0, Scope::Fleet),
            day(10.0, Scope::Model("openai/gpt-5".into())),
            day(20.0, Scope::Provider("openai".into())),
            day(20.0, Scope::Provider("anthropic".into())),
        ],
        health,
    );
    book.add("openai/gpt-5", 1.5);
    book.add("openai/gpt-5-mini", 0.25);
    book.add("anthropic/claude-opus-4-1", 2.0);
    book.add("openai/gpt-5", 0.0);
    assert_eq!(spent(&book), [3.75, 1.5, 1.75, 2.0]);
    // Another run's handle on the same store sees the same totals.
    let other = BudgetBook::new(
        vec![day(99.0, Scope::Fleet)],
        Health::new(Box::new(store), "test", |_| {}),
    );
    assert_eq!(spent(&other), [3.75], "the amount is not part of the key");
}

#[test]
fn a_store_that_fails_leaves_the_run_counting_on_from_what_it_knew() {
    let broken = Arc::new(AtomicBool::new(false));
    let store = Breakable {
        inner: MemoryStore::default(),
        broken: broken.clone(),
    };
    let warnings = Arc::new(Mutex::new(Vec::new()));
    let seen = warnings.clone();
    let health = Health::new(Box::new(store), "test", move |w| {
        seen.lock().unwrap().push(w)
    });
    let book = BudgetBook::new(vec![day(5.0, Scope::Fleet)], health);
    book.add("openai/gpt-5", 1.0);
    assert_eq!(spent(&book), [1.0]);
    broken.store(true, Ordering::SeqCst);
    book.add("openai/gpt-5", 2.0);
    assert_eq!(spent(&book), [3.0]);
    assert_eq!(warnings.lock().unwrap().len(), 1, "one warning");
}

#[test]
fn without_a_record_a_run_counts_its_own_spend_and_a_new_period_starts_at_0() {
    let clock = Arc::new(AtomicI64::new(1_000));
    let now = clock.clone();
    let health = Health::off().with_clock(move || now.load(Ordering::SeqCst));
    let book = BudgetBook::new(vec![day(5.0, Scope::Fleet)], health);
    book.add("openai/gpt-5", 1.25);
    book.add("openai/gpt-5", 1.25);
    assert_eq!(spent(&book), [2.5]);
    clock.fetch_add(24 * 3_600_000, Ordering::SeqCst);
    assert_eq!(spent(&book), [0.0]);
}

#[test]
fn the_start_warns_at_80_percent_and_for_unpriced_members_under_a_budget() {
    let health = Health::off().with_clock(|| 1_796_171_084_000);
    let book = BudgetBook::new(
        vec![
            day(1.0, Scope::Fleet),
            day(2.0, Scope::Model("gw/big".into())),
            day(4.0, Scope::Provider("other".into())),
        ],
        health,
    );
    book.add("gw/big", 0.79);
    assert!(book.start_warnings(&[("gw/big", true)]).is_empty());
    book.add("gw/big", 0.01);
    assert_eq!(
        book.start_warnings(&[("gw/big", true), ("gw/free", false)]),
        [
            "budget $1 per day is 80% spent ($0.8000 spent; the period ends at 2026-12-03T00:00:00Z)",
            "model gw/free has no known price: its responses count as $0 toward the budget $1 per day",
        ]
    );
    book.add("gw/big", 1.5);
    let warnings = book.start_warnings(&[("gw/big", false)]);
    assert_eq!(
        warnings,
        [
            "budget $1 per day is spent ($2.3000 spent): requests it applies to are not sent until its period ends at 2026-12-03T00:00:00Z",
            "budget $2 per day for gw/big is spent ($2.3000 spent): requests it applies to are not sent until its period ends at 2026-12-03T00:00:00Z",
            "model gw/big has no known price: its responses count as $0 toward the budgets $1 per day, $2 per day for gw/big",
        ]
    );
}

#[test]
fn a_halt_names_each_budget_its_spend_and_its_period_end() {
    let spent = BudgetSpent(vec![Standing {
        budget: day(10.0, Scope::Model("anthropic/claude-opus-4-1".into())),
        spent: budget::nanos(10.0213),
        resets_at: 1_796_256_000_000,
    }]);
    assert_eq!(
        spent.to_string(),
        "budget spent: $10 per day for anthropic/claude-opus-4-1 ($10.0213 spent; the period ends at 2026-12-03T00:00:00Z)"
    );
}
