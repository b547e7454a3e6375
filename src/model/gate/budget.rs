//! Budgets across runs, in the gate (SPEC 19). Before each request (a
//! first attempt, a retry or a probe) the gate reads every budget's spend
//! in its current period, in one look at the shared record:
//!
//! - a spent budget of the whole fleet (no `model`/`provider`) halts the
//!   run (`Admission::Halt`: status `budget_limit`, exit 3);
//! - a spent budget of the member's own (its model or provider) skips the
//!   member like a cooling one when a later member's budgets are not spent
//!   (a switch, reason `budget`), and halts the run when none is left.
//!   Members whose own budget is spent are never where a switch goes, nor
//!   probed at a step boundary; once their period rolls over they are
//!   probed and restored like members whose cooldown ended.
//!
//! Spend is added after each response (`BudgetBook::add`, called for the
//! agent's accounting of the reply), to every budget it falls under, in
//! one atomic step of the store. Checks are before requests only: the
//! reply that crosses a cap is used as usual. With the record off (or
//! broken), the book counts what this run spent itself.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use super::{Admission, Gate, Halt, MemberTurn};
use crate::budget::{self, Budget, Millis, Nanos};
use crate::health::{BudgetSlot, Health};

/// A run's budgets and their spend: one book for the run's chain and its
/// subagents' chain, so that everything the run spends is counted.
pub(crate) struct BudgetBook {
    budgets: Vec<Budget>,
    health: Health,
    /// The last total seen of each slot: the store's, as last read or
    /// written, plus what this run added while it could not be written
    /// (with the record off: this run's own spend).
    known: Mutex<HashMap<BudgetSlot, Nanos>>,
}

/// One budget at one moment: what its current period has spent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Standing {
    pub budget: Budget,
    pub spent: Nanos,
    /// When its period ends (unix ms, UTC): the total starts again then.
    pub resets_at: Millis,
}

impl Standing {
    /// Whether the cap is reached: no request it applies to may be sent.
    pub(crate) fn is_spent(&self) -> bool {
        self.spent >= self.budget.cap()
    }

    fn is_own(&self) -> bool {
        self.budget.target().is_some()
    }
}

/// `$10 per day for openai/gpt-5 ($10.0213 spent; the period ends at
/// 2026-12-02T00:00:00Z)`.
impl fmt::Display for Standing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} spent; the period ends at {})",
            self.budget,
            budget::dollars(self.spent),
            budget::rfc3339(self.resets_at)
        )
    }
}

/// The spent budgets that halt a run: the fleet's, or those of every
/// member it could still ask.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BudgetSpent(pub Vec<Standing>);

impl fmt::Display for BudgetSpent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list: Vec<String> = self.0.iter().map(Standing::to_string).collect();
        write!(f, "budget spent: {}", list.join("; "))
    }
}

/// Every budget's standing at one moment, in config order.
pub(crate) struct Reading(Vec<Standing>);

impl Reading {
    /// Every budget's standing.
    pub(crate) fn standings(&self) -> &[Standing] {
        &self.0
    }

    fn fleet_spent(&self) -> Vec<Standing> {
        self.0
            .iter()
            .filter(|s| !s.is_own() && s.is_spent())
            .cloned()
            .collect()
    }

    /// The spent budgets of `spec`'s own (its model or provider).
    fn own_spent<'a>(&'a self, spec: &'a str) -> impl Iterator<Item = &'a Standing> + 'a {
        self.0
            .iter()
            .filter(move |s| s.is_own() && s.budget.applies_to(spec) && s.is_spent())
    }
}

impl BudgetBook {
    /// The book of `budgets` on the run's shared record.
    pub(crate) fn new(budgets: Vec<Budget>, health: Health) -> Arc<BudgetBook> {
        Arc::new(BudgetBook {
            budgets,
            health,
            known: Mutex::new(HashMap::new()),
        })
    }

    fn slot(budget: &Budget, now: Millis) -> BudgetSlot {
        let (start, end) = budget.per.bounds(now);
        BudgetSlot {
            budget: budget.key(),
            start,
            end,
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<BudgetSlot, Nanos>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads every budget's spend in its current period (one store call).
    pub(crate) fn read(&self) -> Reading {
        let now = self.health.now();
        let slots: Vec<BudgetSlot> = self.budgets.iter().map(|b| Self::slot(b, now)).collect();
        let stored = self.health.with(|store, _| store.spent(&slots));
        let mut known = self.known();
        let totals: Vec<Nanos> = match stored {
            Some(totals) => {
                for (slot, total) in slots.iter().zip(&totals) {
                    known.insert(slot.clone(), *total);
                }
                totals
            }
            None => slots
                .iter()
                .map(|s| known.get(s).copied().unwrap_or(0))
                .collect(),
        };
        let standings = self
            .budgets
            .iter()
            .zip(slots)
            .zip(totals)
            .map(|((budget, slot), spent)| Standing {
                budget: budget.clone(),
                spent,
                resets_at: slot.end,
            })
            .collect();
        Reading(standings)
    }

    /// Adds a response of model `spec` that cost `usd` to every budget it
    /// falls under, at once.
    pub(crate) fn add(&self, spec: &str, usd: f64) {
        let nanos = budget::nanos(usd);
        if nanos == 0 {
            return;
        }
        let now = self.health.now();
        let slots: Vec<BudgetSlot> = self
            .budgets
            .iter()
            .filter(|b| b.applies_to(spec))
            .map(|b| Self::slot(b, now))
            .collect();
        if slots.is_empty() {
            return;
        }
        let stored = self
            .health
            .with(|store, now| store.add_spend(&slots, nanos, now));
        let mut known = self.known();
        known.retain(|slot, _| slot.end > now);
        match stored {
            Some(totals) => known.extend(slots.into_iter().zip(totals)),
            None => {
                for slot in slots {
                    let total = known.entry(slot).or_insert(0);
                    *total = total.saturating_add(nanos);
                }
            }
        }
    }

    /// The warnings due at the start of a run (SPEC 19): each budget 80 %
    /// spent or more, and each of `members` (spec, whether it is priced)
    /// that a budget applies to but whose spend cannot be counted.
    pub(crate) fn start_warnings(&self, members: &[(&str, bool)]) -> Vec<String> {
        if self.budgets.is_empty() {
            return Vec::new();
        }
        let mut warnings: Vec<String> = self
            .read()
            .standings()
            .iter()
            .filter_map(nearly_spent)
            .collect();
        for (spec, _) in members.iter().filter(|(_, priced)| !priced) {
            let under: Vec<String> = self
                .budgets
                .iter()
                .filter(|b| b.applies_to(spec))
                .map(Budget::to_string)
                .collect();
            if !under.is_empty() {
                warnings.push(format!(
                    "model {spec} has no known price: its responses count as $0 toward the budget{} {}",
                    if under.len() == 1 { "" } else { "s" },
                    under.join(", ")
                ));
            }
        }
        warnings
    }
}

/// The warning for a budget 80 % spent or more.
fn nearly_spent(s: &Standing) -> Option<String> {
    let cap = s.budget.cap();
    let when = budget::rfc3339(s.resets_at);
    if s.is_spent() {
        return Some(format!(
            "budget {} is spent ({} spent): requests it applies to are not sent until its period ends at {when}",
            s.budget,
            budget::dollars(s.spent)
        ));
    }
    // In integers: spent / cap >= 80 %.
    (s.spent as i128 * 5 >= cap as i128 * 4).then(|| {
        let percent = s.spent as i128 * 100 / cap.max(1) as i128;
        format!(
            "budget {} is {percent}% spent ({} spent; the period ends at {when})",
            s.budget,
            budget::dollars(s.spent)
        )
    })
}

impl Gate {
    /// The same gate with the run's budgets.
    pub(crate) fn with_budgets(self, book: Arc<BudgetBook>) -> Gate {
        Gate {
            budgets: Some(book).filter(|b| !b.budgets.is_empty()),
            ..self
        }
    }

    /// The spec of member `index`.
    fn spec(&self, index: usize) -> &str {
        &self.keys[index].model
    }

    /// For each member, whether a budget of its own is spent: it is
    /// neither where a switch goes nor probed. All `false` without budgets.
    pub(super) fn budget_blocked(&self) -> Vec<bool> {
        match &self.budgets {
            None => vec![false; self.len()],
            Some(book) => {
                let reading = book.read();
                (0..self.len())
                    .map(|i| reading.own_spent(self.spec(i)).next().is_some())
                    .collect()
            }
        }
    }

    /// A response of model `spec` cost `usd`: it counts toward every
    /// budget it falls under.
    pub(crate) fn spent(&self, spec: &str, usd: f64) {
        if let Some(book) = &self.budgets {
            book.add(spec, usd);
        }
    }
}

impl MemberTurn<'_> {
    /// What the budgets say before a request: nothing (`None`) when none
    /// is spent for this member; a skip when its own are spent and a later
    /// member's are not; else a halt naming the spent budgets.
    pub(super) fn budget_admission(&self) -> Option<Admission> {
        let gate = self.gate;
        let book = gate.budgets.as_ref()?;
        if !book
            .budgets
            .iter()
            .any(|b| b.applies_to(gate.spec(self.index)))
        {
            // No budget counts this member's spend: nothing to read.
            return None;
        }
        let reading = book.read();
        let fleet = reading.fleet_spent();
        if !fleet.is_empty() {
            return Some(Admission::Halt(Halt::Budget(BudgetSpent(fleet))));
        }
        let mut spent: Vec<Standing> = reading.own_spent(gate.spec(self.index)).cloned().collect();
        if spent.is_empty() {
            return None;
        }
        // A probe's later members include the active one.
        if (self.index + 1..gate.len()).any(|j| reading.own_spent(gate.spec(j)).next().is_none()) {
            return Some(Admission::MoveOn(super::SwitchReason::Budget));
        }
        // No member may be asked: name every spent budget of the chain.
        for j in 0..gate.len() {
            for s in reading.own_spent(gate.spec(j)) {
                if !spent.iter().any(|t| t.budget.key() == s.budget.key()) {
                    spent.push(s.clone());
                }
            }
        }
        Some(Admission::Halt(Halt::Budget(BudgetSpent(spent))))
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod bench;
