//! The fallback chain: the primary and its fallbacks behind one `complete`
//! call. The only place that decides which model a step goes to, when to
//! switch, and when to probe a model that was left (SPEC section 5).

use std::time::Instant;

use super::price::Pricing;
use super::retry::{request_with_retries_gated, Budget, Failure, RequestCtx, Target};
use super::{ErrorClass, Model, ModelError, Request, Response};
use crate::events::Event;
use crate::health::Health;
pub use crate::policy::{Cooldown, FallbackPolicy, RetryPolicy};
use crate::stop::StopCause;

/// The switch reason when another run's health record says a member is
/// cooling down (SPEC section 13).
pub const COOLDOWN_REASON: &str = "cooldown";

/// One model of the chain with what the run needs to know about it.
pub struct Member {
    pub spec: String,
    /// The part of the spec before `/`.
    pub provider: String,
    pub model: Box<dyn Model>,
    pub pricing: Option<Pricing>,
    pub context_window: Option<u64>,
    /// `scheme://host:port` of the endpoint, for per-request records.
    pub endpoint: Option<String>,
    /// When the run last moved away from this member.
    left_at: Option<Instant>,
}

impl Member {
    pub fn new(
        spec: String,
        model: Box<dyn Model>,
        pricing: Option<Pricing>,
        context_window: Option<u64>,
    ) -> Self {
        let provider = spec.split('/').next().unwrap_or_default().to_string();
        Member {
            spec,
            provider,
            model,
            pricing,
            context_window,
            endpoint: None,
            left_at: None,
        }
    }

    /// Sets the endpoint shown in per-request records.
    pub fn with_endpoint(mut self, endpoint: Option<String>) -> Self {
        self.endpoint = endpoint;
        self
    }

    /// What the retry loop needs to ask this member and record it.
    pub fn target(&self) -> Target<'_> {
        Target {
            model: &*self.model,
            pricing: self.pricing,
            endpoint: self.endpoint.as_deref(),
        }
    }
}

/// A switch, as recorded in the trajectory's `model_switches`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Switch {
    pub step: u32,
    pub from: String,
    pub to: String,
    pub reason: String,
    pub attempts: u32,
}

/// A successful reply and who gave it.
#[derive(Debug, Clone)]
pub struct Answer {
    pub response: Response,
    pub spec: String,
    pub cost_usd: f64,
}

/// Why the chain gave up on a step.
#[derive(Debug, Clone, PartialEq)]
pub enum ChainError {
    /// A cancel or limit fired; no further request was sent.
    Stopped(StopCause),
    /// A non-retryable error from `spec`; the chain goes no further.
    Fatal { spec: String, error: ModelError },
    /// The active model reported a context overflow (the agent compacts).
    ContextOverflow { spec: String, error: ModelError },
    /// Every model failed with a transient or quota cause; `(spec, reason)`
    /// for each model tried, with `last_error` the final model's error.
    Exhausted {
        tried: Vec<(String, String)>,
        attempts: u32,
        last_error: ModelError,
    },
}

impl std::fmt::Display for ChainError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChainError::Stopped(cause) => write!(f, "stopped: {cause:?}"),
            ChainError::Fatal { spec, error } | ChainError::ContextOverflow { spec, error } => {
                write!(f, "{spec}: {error}")
            }
            ChainError::Exhausted {
                tried,
                attempts,
                last_error,
            } => {
                if let [(spec, _)] = tried.as_slice() {
                    let plural = if *attempts == 1 { "" } else { "s" };
                    write!(f, "{spec}: {last_error} (after {attempts} attempt{plural})")
                } else {
                    let list: Vec<String> = tried
                        .iter()
                        .map(|(spec, reason)| format!("{spec} ({reason})"))
                        .collect();
                    write!(
                        f,
                        "every model of the fallback chain failed: {}",
                        list.join(", ")
                    )
                }
            }
        }
    }
}

/// The primary and its fallbacks. Without fallbacks it is a plain retrying
/// model and emits nothing of its own.
pub struct ChainModel {
    members: Vec<Member>,
    active: usize,
    retry: RetryPolicy,
    fallback: FallbackPolicy,
    switches: Vec<Switch>,
    /// The shared health record (off unless `with_health`).
    health: Health,
}

impl ChainModel {
    /// `members[0]` is the primary. Panics on an empty list.
    pub fn new(members: Vec<Member>, retry: RetryPolicy, fallback: FallbackPolicy) -> Self {
        assert!(!members.is_empty(), "a chain needs a primary model");
        ChainModel {
            members,
            active: 0,
            retry,
            fallback,
            switches: Vec::new(),
            health: Health::off(),
        }
    }

    /// Shares what this run learns about its members with other runs, and
    /// learns from theirs (SPEC section 13).
    pub fn with_health(mut self, health: Health) -> Self {
        self.health = health;
        self
    }

    /// The spec of the model the next step goes to first.
    pub fn active_spec(&self) -> &str {
        &self.members[self.active].spec
    }

    /// The active member (for its context window and pricing).
    pub fn active_member(&self) -> &Member {
        &self.members[self.active]
    }

    /// The switches made so far in this run.
    pub fn switches(&self) -> &[Switch] {
        &self.switches
    }

    fn expired(&self, index: usize, now: Instant) -> bool {
        match (self.members[index].left_at, self.fallback.cooldown) {
            (None, _) => true,
            (Some(_), Cooldown::Never) => false,
            (Some(left), Cooldown::For(cooldown)) => now.duration_since(left) >= cooldown,
        }
    }

    /// Whether member `index` may be asked: its own cooldown passed (or a
    /// success of another run cleared it), and no other run recorded it as
    /// cooling down.
    fn eligible(&self, index: usize, now: Instant) -> bool {
        self.health.eligible(index, self.expired(index, now))
    }

    /// The members after `index`, each with whether its own cooldown passed.
    fn later(&self, index: usize, now: Instant) -> Vec<(usize, bool)> {
        (index + 1..self.members.len())
            .map(|j| (j, self.expired(j, now)))
            .collect()
    }

    fn request_for<'a>(&self, index: usize, request: &Request<'a>) -> Request<'a>
    where
        Self: 'a,
    {
        let member = &self.members[index];
        let same_provider = member.provider == self.members[0].provider;
        Request {
            max_output_tokens: request.max_output_tokens.filter(|_| same_provider),
            reasoning_effort: request.reasoning_effort.filter(|_| same_provider),
            ..*request
        }
    }

    fn answer(&self, index: usize, response: Response) -> Answer {
        let member = &self.members[index];
        let cost_usd = response.cost_override.unwrap_or_else(|| {
            member
                .pricing
                .map(|p| p.cost(&response.usage))
                .unwrap_or(0.0)
        });
        Answer {
            response,
            spec: member.spec.clone(),
            cost_usd,
        }
    }

    /// Moves the run from `from` to `to`: restarts `from`'s cooldown and
    /// makes the switch visible.
    fn switch(&mut self, ctx: RequestCtx<'_>, from: usize, to: usize, reason: &str, attempts: u32) {
        self.record_switch(ctx, from, to, reason, attempts);
        self.active = to;
    }

    /// Restarts `from`'s cooldown and emits and records a switch to `to`.
    fn record_switch(
        &mut self,
        ctx: RequestCtx<'_>,
        from: usize,
        to: usize,
        reason: &str,
        attempts: u32,
    ) {
        if reason == COOLDOWN_REASON {
            // A skip does not renew the record; the shared record alone
            // decides when this member may be asked again.
            self.members[from].left_at = None;
        } else {
            self.members[from].left_at = Some(Instant::now());
            self.health.left(from, reason);
        }
        let switch = Switch {
            step: ctx.step,
            from: self.members[from].spec.clone(),
            to: self.members[to].spec.clone(),
            reason: reason.to_string(),
            attempts,
        };
        ctx.emitter.emit(Event::ModelFallback {
            step: switch.step,
            from: switch.from.clone(),
            to: switch.to.clone(),
            reason: switch.reason.clone(),
            attempts,
        });
        self.switches.push(switch);
    }

    /// The member to move to after `from`: the next one not cooling down,
    /// else the last one (a run never ends without asking it).
    fn next_after(&self, from: usize, now: Instant) -> Option<usize> {
        let last = self.members.len() - 1;
        if from >= last {
            return None;
        }
        (from + 1..=last)
            .find(|&i| self.eligible(i, now) || i == self.active)
            .or(Some(last))
    }

    /// Sends one step's request. At a step boundary, members earlier than the
    /// active one whose cooldown has passed are probed with one request each;
    /// then the active member runs its retry loop, and transient or quota
    /// failures walk down the chain.
    pub async fn complete(
        &mut self,
        request: &Request<'_>,
        ctx: RequestCtx<'_>,
    ) -> Result<Answer, ChainError> {
        let mut tried: Vec<(String, String)> = Vec::new();
        let now = Instant::now();
        // Half-open probes of members that were left and have cooled down.
        let candidates: Vec<usize> = (0..self.active)
            .filter(|&i| self.eligible(i, now))
            .collect();
        for (k, &index) in candidates.iter().enumerate() {
            let probe = Request {
                spec: &self.members[index].spec,
                ..self.request_for(index, request)
            };
            let budget = Budget {
                max_attempts: 1,
                can_switch: true,
            };
            let gate = self.health.gate(index, Vec::new(), false);
            let target = self.members[index].target();
            let result =
                request_with_retries_gated(target, &probe, ctx, &self.retry, budget, &gate).await;
            drop(gate);
            let (error, attempts) = match result {
                Ok(response) => {
                    let from = self.members[self.active].spec.clone();
                    self.members[index].left_at = None;
                    self.active = index;
                    ctx.emitter.emit(Event::ModelRestore {
                        step: ctx.step,
                        from,
                        to: self.members[index].spec.clone(),
                    });
                    return Ok(self.answer(index, response));
                }
                Err(Failure::Stopped(cause)) => return Err(ChainError::Stopped(cause)),
                Err(Failure::Model { error, attempts }) => (error, attempts),
                // Probes are not gated; nothing to move on from.
                Err(Failure::Cooling { .. }) => continue,
            };
            let spec = self.members[index].spec.clone();
            match error.class() {
                ErrorClass::Transient(_) | ErrorClass::Quota => {
                    let reason = error.reason();
                    tried.push((spec, reason.clone()));
                    // Move on at once: to the next cooled-down member (probed
                    // in turn), else back to the active one.
                    let to = candidates.get(k + 1).copied().unwrap_or(self.active);
                    self.record_switch(ctx, index, to, &reason, attempts);
                }
                ErrorClass::ContextOverflow => {
                    return Err(ChainError::ContextOverflow { spec, error })
                }
                ErrorClass::Fatal => return Err(ChainError::Fatal { spec, error }),
            }
        }

        loop {
            let index = self.active;
            let now = Instant::now();
            let next = self.next_after(index, now);
            let budget = match next {
                Some(_) => Budget {
                    max_attempts: self
                        .fallback
                        .switch_after
                        .clamp(1, self.retry.attempts.max(1)),
                    can_switch: true,
                },
                None => Budget {
                    max_attempts: self.retry.attempts.max(1),
                    can_switch: false,
                },
            };
            let member_request = Request {
                spec: &self.members[index].spec,
                ..self.request_for(index, request)
            };
            let gate = self
                .health
                .gate(index, self.later(index, now), next.is_some());
            let target = self.members[index].target();
            let result = request_with_retries_gated(
                target,
                &member_request,
                ctx,
                &self.retry,
                budget,
                &gate,
            )
            .await;
            drop(gate);
            let (error, attempts) = match result {
                Ok(response) => return Ok(self.answer(index, response)),
                Err(Failure::Stopped(cause)) => return Err(ChainError::Stopped(cause)),
                Err(Failure::Model { error, attempts }) => (error, attempts),
                Err(Failure::Cooling { attempts }) => {
                    // Another run recorded this member as cooling down.
                    if let Some(cause) = ctx.stop.pending() {
                        return Err(ChainError::Stopped(cause));
                    }
                    let now = Instant::now();
                    let last = self.members.len() - 1;
                    let to = (index + 1..=last)
                        .find(|&j| self.eligible(j, now))
                        .or(next)
                        .unwrap_or(last);
                    tried.push((
                        self.members[index].spec.clone(),
                        COOLDOWN_REASON.to_string(),
                    ));
                    self.switch(ctx, index, to, COOLDOWN_REASON, attempts);
                    continue;
                }
            };
            let spec = self.members[index].spec.clone();
            match error.class() {
                ErrorClass::Transient(_) | ErrorClass::Quota => {
                    let reason = error.reason();
                    tried.push((spec, reason.clone()));
                    match next {
                        Some(next) => {
                            if let Some(cause) = ctx.stop.pending() {
                                return Err(ChainError::Stopped(cause));
                            }
                            self.switch(ctx, index, next, &reason, attempts);
                        }
                        None => {
                            return Err(ChainError::Exhausted {
                                tried,
                                attempts,
                                last_error: error,
                            })
                        }
                    }
                }
                ErrorClass::ContextOverflow => {
                    return Err(ChainError::ContextOverflow { spec, error })
                }
                ErrorClass::Fatal => return Err(ChainError::Fatal { spec, error }),
            }
        }
    }
}
