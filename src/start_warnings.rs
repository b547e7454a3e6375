//! Warnings due before a run's first request about what its models cost:
//! unpriced models under a cost limit, fallbacks dearer than the primary
//! (SPEC sections 2 and 5), budgets nearly spent or that cannot count a
//! model's spend (SPEC 19), cloud regions this release does not know
//! (SPEC 22), and hedging with nothing to hedge to (SPEC 23).

use crate::events::Emitter;
use crate::model::gate::BudgetBook;
use crate::model::spec::ResolvedModel;
use crate::policy::HedgeAfter;
use crate::regions::{self, Cloud};

/// The budgets' warnings for a run that may ask `models` (its chain and
/// its subagents').
pub(crate) fn budgets(book: &BudgetBook, models: &[&ResolvedModel], emitter: &Emitter) {
    let members: Vec<(&str, bool)> = models
        .iter()
        .map(|m| (m.spec.as_str(), m.pricing.is_some()))
        .collect();
    for warning in book.start_warnings(&members) {
        emitter.warn(warning);
    }
}

/// Warnings due before the first request: unpriced models under a cost
/// limit, and fallbacks dearer than the primary.
pub(crate) fn prices(models: &[&ResolvedModel], cost_limit: Option<f64>, emitter: &Emitter) {
    if cost_limit.is_some_and(|c| c > 0.0) {
        for m in models.iter().filter(|m| m.pricing.is_none()) {
            emitter.warn(format!(
                "model {} has no known price: its responses count as $0 toward the cost limit",
                m.spec
            ));
        }
    }
    for warning in dearer_fallbacks(models) {
        emitter.warn(warning);
    }
}

/// Hedging set on a run whose chain has no later member does nothing: one
/// warning says so (SPEC 23).
pub(crate) fn hedging(after: HedgeAfter, fallbacks: usize, emitter: &Emitter) {
    if after != HedgeAfter::Off && fallbacks == 0 {
        emitter.warn(
            "hedging (--hedge-after, fallback.hedge_after) does nothing on this run: it has no fallback model to hedge to (add one with --fallback-model)",
        );
    }
}

/// A warning for each fallback whose known price is above the primary's.
pub(crate) fn dearer_fallbacks(models: &[&ResolvedModel]) -> Vec<String> {
    let Some(primary) = models[0].pricing else {
        return Vec::new();
    };
    models[1..]
        .iter()
        .filter_map(|m| Some((m, m.pricing?)))
        .filter(|(_, p)| p.input > primary.input || p.output > primary.output)
        .map(|(m, p)| format!(
            "fallback model {} costs more than the primary {} (${}/${} vs ${}/${} per million input/output tokens)",
            m.spec, models[0].spec, p.input, p.output, primary.input, primary.output
        ))
        .collect()
}

/// A warning for each Bedrock region or Vertex AI location this release
/// does not know, naming the closest known one (the request is still
/// made: new regions open).
pub(crate) fn regions(models: &[&ResolvedModel], emitter: &Emitter) {
    for m in models {
        let cloud = if m.api == crate::model::bedrock::API.name {
            Cloud::Aws
        } else if m.api == crate::model::vertex::API.name {
            Cloud::Google
        } else {
            continue;
        };
        if let Some(warning) = m
            .region
            .as_deref()
            .and_then(|region| regions::warning(cloud, m.spec.as_str(), region))
        {
            emitter.warn(warning);
        }
    }
}
