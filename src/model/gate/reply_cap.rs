//! Each member's reply budget (SPEC 4 "Reply caps per member"): its own
//! budget when its chain entry sets one, else the run's (for a member of
//! the primary's provider), never above a cap the member has reported. A
//! cap learned from a refusal applies to that member only, and is kept in
//! the checkpoint so that a resumed run keeps it.

use std::collections::BTreeMap;

use super::Gate;

impl Gate {
    /// The reply budget a request to member `index` carries, given the
    /// budget it would have without a reported cap.
    pub(crate) fn reply_budget(&self, index: usize, budget: Option<u32>) -> Option<u32> {
        match (budget, self.reply_cap(index)) {
            (Some(budget), Some(cap)) => Some(budget.min(cap)),
            (None, cap) => cap,
            (budget, None) => budget,
        }
    }

    /// The cap member `index` reported, if it did.
    fn reply_cap(&self, index: usize) -> Option<u32> {
        self.reply_caps.lock().unwrap_or_else(|e| e.into_inner())[index]
    }

    /// Member `index` refused a reply budget above `cap`: later requests
    /// carry at most `cap`. Whether that lowered what it had.
    pub(crate) fn learn_reply_cap(&self, index: usize, cap: u32) -> bool {
        let mut caps = self.reply_caps.lock().unwrap_or_else(|e| e.into_inner());
        let lowered = caps[index].is_none_or(|known| cap < known);
        if lowered {
            caps[index] = Some(cap);
        }
        lowered
    }

    /// The caps members reported, by spec (for the checkpoint).
    pub(crate) fn reply_caps<'s>(
        &self,
        specs: impl Iterator<Item = &'s str>,
    ) -> BTreeMap<String, u32> {
        let caps = self.reply_caps.lock().unwrap_or_else(|e| e.into_inner());
        specs
            .zip(caps.iter())
            .filter_map(|(spec, cap)| cap.map(|cap| (spec.to_string(), cap)))
            .collect()
    }

    /// Takes back the caps a checkpoint kept (`index_of` finds a spec's
    /// member; a spec no longer in the chain is dropped).
    pub(crate) fn restore_reply_caps(
        &self,
        kept: &BTreeMap<String, u32>,
        index_of: impl Fn(&str) -> Option<usize>,
    ) {
        for (spec, &cap) in kept {
            if let Some(index) = index_of(spec).filter(|_| cap > 0) {
                self.learn_reply_cap(index, cap);
            }
        }
    }
}
