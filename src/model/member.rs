//! `Member`: one model a run may ask, with what its requests and records
//! need (its spec, price, endpoint, the keys of its health and pacing
//! records, its own reply budget), and what a reply of it costs.

use super::price::Pricing;
use super::spec::ModelSpec;
use super::{Model, PromptCache, Response};
use crate::health::{HealthKey, PaceKey};

/// One model the run may ask, with what requests and records need to know
/// about it (built by `registry::build_member`, the one place that builds
/// them, for the chain and for `--check`).
pub(crate) struct Member {
    pub spec: ModelSpec,
    pub model: Box<dyn Model>,
    pub pricing: Option<Pricing>,
    pub context_window: Option<u64>,
    /// `scheme://host:port` of the endpoint, for per-request records.
    pub endpoint: Option<String>,
    /// Where the shared health record keeps this member.
    pub health_key: HealthKey,
    /// Where the pacing record keeps this member's key's limits (SPEC 17).
    pub pace_key: PaceKey,
    /// Its own reply budget (a `fallback_models` mapping), in place of the run's.
    pub reply_budget: Option<u32>,
    /// How its requests ask for the prompt cache (SPEC 25).
    pub prompt_cache: PromptCache,
}

impl Member {
    /// A member whose health key is its spec with no endpoint, until
    /// `with_health_key` names the resolved one.
    pub(crate) fn new(
        spec: ModelSpec,
        model: Box<dyn Model>,
        pricing: Option<Pricing>,
        context_window: Option<u64>,
    ) -> Self {
        let health_key = HealthKey {
            model: spec.to_string(),
            endpoint: String::new(),
        };
        Member {
            spec,
            model,
            pricing,
            context_window,
            pace_key: PaceKey::new(health_key.clone(), None),
            health_key,
            endpoint: None,
            reply_budget: None,
            prompt_cache: PromptCache::On,
        }
    }

    /// Sets the endpoint shown in per-request records.
    pub(crate) fn with_endpoint(mut self, endpoint: Option<String>) -> Self {
        self.endpoint = endpoint;
        self
    }

    /// Sets the member's own reply budget.
    pub(crate) fn with_reply_budget(mut self, budget: Option<u32>) -> Self {
        self.reply_budget = budget;
        self
    }

    /// Sets how the member asks for the prompt cache.
    pub(crate) fn with_prompt_cache(mut self, cache: PromptCache) -> Self {
        self.prompt_cache = cache;
        self
    }

    /// Sets the key of this member's shared health record.
    pub(crate) fn with_health_key(mut self, key: HealthKey) -> Self {
        self.health_key = key;
        self
    }

    /// Sets the key of this member's pacing record.
    pub(crate) fn with_pace_key(mut self, key: PaceKey) -> Self {
        self.pace_key = key;
        self
    }

    /// What a reply of this member cost: the price the reply states
    /// (scripts), else its usage at the member's price ($0 when unpriced).
    pub(crate) fn cost(&self, response: &Response) -> f64 {
        response
            .cost_override
            .unwrap_or_else(|| self.pricing.map(|p| p.cost(&response.usage)).unwrap_or(0.0))
    }
}
