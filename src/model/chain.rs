//! The fallback chain: the primary and its fallbacks behind one `complete`
//! call. This file alone decides which member a step goes to, when a
//! member's retry loop gives up, when a member is skipped, switched away
//! from, probed or restored (SPEC sections 5 and 13):
//!
//! - `Rules` (the retry loop's `Referee`) decides after each failure whether
//!   to retry, give up (switch after N, a failed probe, a Retry-After too
//!   long to wait, another run's record renewed) or skip (cooling down
//!   elsewhere), and before each request whether to skip.
//! - `ChainModel::complete` probes members that cooled down, then walks the
//!   chain from the active member; `eligible` and `next_after` say who may
//!   be asked and who is next.
//!
//! The retry loop (`retry.rs`) and the health record (`health::Health`) only
//! report facts: a failure and its reason, a wait too long, a record saying
//! another run saw the member fail.

use super::price::Pricing;
use super::retry::{request_with_retries, Failed, Failure, Referee, RequestCtx, Target, Verdict};
use super::{ErrorClass, Model, ModelError, Prompt, Request, Response};
use crate::events::Event;
use crate::health::{Health, HealthKey, Millis, Strike};
pub(crate) use crate::policy::{Cooldown, FallbackPolicy, RetryPolicy};
use crate::stop::StopCause;

/// The switch reason when another run's health record says a member is
/// cooling down (SPEC section 13).
pub(crate) const COOLDOWN_REASON: &str = "cooldown";

/// One model of the chain with what the run needs to know about it.
pub(crate) struct Member {
    pub spec: String,
    /// The part of the spec before `/`.
    pub provider: String,
    pub model: Box<dyn Model>,
    pub pricing: Option<Pricing>,
    pub context_window: Option<u64>,
    /// `scheme://host:port` of the endpoint, for per-request records.
    pub endpoint: Option<String>,
    /// Where the shared health record keeps this member.
    health_key: HealthKey,
    /// The member's one eligibility state: when the run last left it (on
    /// the health record's clock), `None` if it never did or since answered.
    left_at: Option<Millis>,
}

impl Member {
    /// A member whose health key is its spec with no endpoint, until
    /// `with_health_key` names the resolved one.
    pub(crate) fn new(
        spec: String,
        model: Box<dyn Model>,
        pricing: Option<Pricing>,
        context_window: Option<u64>,
    ) -> Self {
        let provider = spec.split('/').next().unwrap_or_default().to_string();
        let health_key = HealthKey {
            model: spec.clone(),
            endpoint: String::new(),
        };
        Member {
            spec,
            provider,
            model,
            pricing,
            context_window,
            health_key,
            endpoint: None,
            left_at: None,
        }
    }

    /// Sets the endpoint shown in per-request records.
    pub(crate) fn with_endpoint(mut self, endpoint: Option<String>) -> Self {
        self.endpoint = endpoint;
        self
    }

    /// What the retry loop needs to ask this member and record it.
    pub(crate) fn target(&self) -> Target<'_> {
        Target {
            model: &*self.model,
            pricing: self.pricing,
            endpoint: self.endpoint.as_deref(),
        }
    }

    /// Sets the key of this member's shared health record
    /// (`health::key_for`).
    pub(crate) fn with_health_key(mut self, key: HealthKey) -> Self {
        self.health_key = key;
        self
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
pub(crate) struct Answer {
    pub response: Response,
    pub spec: String,
    pub cost_usd: f64,
}

/// Why the chain gave up on a step.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ChainError {
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
pub(crate) struct ChainModel {
    members: Vec<Member>,
    active: usize,
    retry: RetryPolicy,
    fallback: FallbackPolicy,
    switches: Vec<Switch>,
    /// The shared health record (off unless `with_health`); its clock is
    /// the chain's clock.
    health: Health,
}

/// How one member's retry loop ended, in the chain's terms.
enum Turn {
    Answered(Answer),
    /// A transient or quota failure: the chain moves on (or is exhausted).
    Failed {
        error: ModelError,
        attempts: u32,
    },
    /// Skipped for another run's cooling record after `attempts` requests.
    Skipped {
        attempts: u32,
    },
    /// The step ends here: a stop, a fatal error or a context overflow.
    End(ChainError),
}

/// The rules one member's retry loop runs under: the chain's answers to
/// "retry, give up or skip?".
struct Rules<'c> {
    chain: &'c ChainModel,
    index: usize,
    /// Requests before giving up on the member.
    max_attempts: u32,
    /// A later member exists and this is not a probe: the loop may end
    /// early (long Retry-After, renewed record, skip) for the chain to move on.
    may_move_on: bool,
}

impl<'c> Rules<'c> {
    /// A normal turn: `switch_after` requests when a later member exists,
    /// else the whole `retry.attempts`.
    fn turn(chain: &'c ChainModel, index: usize) -> Self {
        let attempts = chain.retry.attempts.max(1);
        let has_next = index + 1 < chain.members.len();
        Rules {
            chain,
            index,
            max_attempts: if has_next {
                chain.fallback.switch_after.clamp(1, attempts)
            } else {
                attempts
            },
            may_move_on: has_next,
        }
    }

    /// A probe after a cooldown: one request, never skipped.
    fn probe(chain: &'c ChainModel, index: usize) -> Self {
        Rules {
            chain,
            index,
            max_attempts: 1,
            may_move_on: false,
        }
    }

    fn key(&self) -> &HealthKey {
        &self.chain.members[self.index].health_key
    }
}

impl Referee for Rules<'_> {
    /// Skip a member another run recorded as cooling down, as long as a
    /// later member may be asked (the last member is always asked; a run
    /// without a chain never skips).
    fn skip(&self) -> bool {
        // Asked first, on every turn: it takes the probe lease when this
        // request would be the probe of another run's ended cooldown.
        let held = self.chain.held_elsewhere(self.index);
        self.may_move_on && held && self.chain.a_later_member_may_be_asked(self.index)
    }

    fn after_failure(&self, failed: &Failed<'_>) -> Verdict {
        let strike = self.chain.health.strike(self.key(), failed.reason);
        if failed.attempt >= self.max_attempts {
            // Switch after N (or, without a chain, the retry budget is spent).
            return Verdict::GiveUp;
        }
        if self.may_move_on && (failed.wait_too_long || strike == Strike::RenewedElsewhere) {
            // Not waited out with a chain: a Retry-After beyond
            // `max_backoff`, or this failure was the probe of another run's
            // record. Without a chain the loop waits `max_backoff` instead.
            return Verdict::GiveUp;
        }
        if self.skip() {
            return Verdict::Skip;
        }
        Verdict::Retry
    }

    fn succeeded(&self) {
        self.chain.health.success(self.key());
    }
}

impl ChainModel {
    /// `members[0]` is the primary. Panics on an empty list.
    pub(crate) fn new(members: Vec<Member>, retry: RetryPolicy, fallback: FallbackPolicy) -> Self {
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
    pub(crate) fn with_health(mut self, health: Health) -> Self {
        self.health = health;
        self
    }

    /// The spec of the model the next step goes to first.
    pub(crate) fn active_spec(&self) -> &str {
        &self.members[self.active].spec
    }

    /// The active member (for its context window and pricing).
    pub(crate) fn active_member(&self) -> &Member {
        &self.members[self.active]
    }

    /// The switches made so far in this run.
    pub(crate) fn switches(&self) -> &[Switch] {
        &self.switches
    }

    /// Whether member `index` may be asked at `now`: its own cooldown has
    /// passed (or it was never left, or a success of any run since cleared
    /// it), and no other run's record says it is cooling down.
    fn eligible(&self, index: usize, now: Millis) -> bool {
        let member = &self.members[index];
        let record = self.health.elsewhere(&member.health_key);
        let cooled = match (member.left_at, self.fallback.cooldown) {
            (None, _) => true,
            (Some(_), Cooldown::Never) => false,
            (Some(left), Cooldown::For(cooldown)) => {
                now.saturating_sub(left) >= cooldown.as_millis() as Millis
            }
        };
        let cleared = match (member.left_at, record.last_success_at) {
            (Some(left), Some(success)) => success > left,
            _ => false,
        };
        (cooled || cleared) && !record.cooling
    }

    /// Whether another run holds member `index`: it recorded the member as
    /// cooling down, or the cooldown ended and another run of the fleet is
    /// probing it (holds the probe lease). When the record awaits its probe
    /// and the lease is free, this run takes it: its request is the probe.
    fn held_elsewhere(&self, index: usize) -> bool {
        let key = &self.members[index].health_key;
        let record = self.health.elsewhere(key);
        record.cooling || (record.awaiting_probe && !self.health.take_probe_lease(key))
    }

    /// Whether a member after `index` may be asked now.
    fn a_later_member_may_be_asked(&self, index: usize) -> bool {
        let now = self.health.now();
        (index + 1..self.members.len()).any(|j| self.eligible(j, now))
    }

    /// The member a switch away from `from` goes to: the first later one
    /// that may be asked, else the last (a run never ends without asking
    /// it). `None` when `from` is the last.
    fn next_after(&self, from: usize) -> Option<usize> {
        let last = self.members.len() - 1;
        if from >= last {
            return None;
        }
        let now = self.health.now();
        (from + 1..=last)
            .find(|&i| self.eligible(i, now))
            .or(Some(last))
    }

    /// The request member `index` is sent: `prompt` for its spec, without
    /// the reply budget and effort when it is of another provider.
    fn request_for<'a>(&'a self, index: usize, prompt: &Prompt<'a>) -> Request<'a> {
        let member = &self.members[index];
        let same_provider = member.provider == self.members[0].provider;
        Request {
            system: prompt.system,
            messages: prompt.messages,
            tools: prompt.tools,
            output_schema: prompt.output_schema,
            max_output_tokens: prompt.max_output_tokens.filter(|_| same_provider),
            reasoning_effort: prompt.reasoning_effort.filter(|_| same_provider),
            spec: &member.spec,
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

    /// Runs member `index`'s retry loop under `rules` (a normal turn or a
    /// probe: the one helper both use) and sorts out how it ended.
    async fn turn(&self, rules: Rules<'_>, prompt: &Prompt<'_>, ctx: RequestCtx<'_>) -> Turn {
        let index = rules.index;
        let member = &self.members[index];
        let request = self.request_for(index, prompt);
        let result =
            request_with_retries(member.target(), &request, ctx, &self.retry, &rules).await;
        let (error, attempts) = match result {
            Ok(response) => return Turn::Answered(self.answer(index, response)),
            Err(Failure::Stopped(cause)) => return Turn::End(ChainError::Stopped(cause)),
            Err(Failure::Skipped { attempts }) => return Turn::Skipped { attempts },
            Err(Failure::Model { error, attempts }) => (error, attempts),
        };
        let spec = member.spec.clone();
        match error.class() {
            ErrorClass::Transient(_) | ErrorClass::Quota => Turn::Failed { error, attempts },
            ErrorClass::ContextOverflow => Turn::End(ChainError::ContextOverflow { spec, error }),
            ErrorClass::Fatal => Turn::End(ChainError::Fatal { spec, error }),
        }
    }

    /// Records a move away from `from` to `to` (the stderr line, the event,
    /// `model_switches`) unless a stop is pending: then nothing is switched
    /// and the step ends. A `cooldown` skip leaves the member to the shared
    /// record alone; any other reason starts its cooldown, here and in the
    /// record.
    fn leave(
        &mut self,
        ctx: RequestCtx<'_>,
        from: usize,
        to: usize,
        reason: &str,
        attempts: u32,
    ) -> Result<(), ChainError> {
        if let Some(cause) = ctx.stop.pending() {
            return Err(ChainError::Stopped(cause));
        }
        let member = &mut self.members[from];
        if reason == COOLDOWN_REASON {
            member.left_at = None;
        } else {
            member.left_at = Some(self.health.now());
            self.health.left(&member.health_key, reason);
        }
        let switch = Switch {
            step: ctx.step,
            from: member.spec.clone(),
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
        Ok(())
    }

    /// Sends one step's request: first the probes of members that cooled
    /// down, then the active member's turn; transient, quota and cooldown
    /// failures walk down the chain until a member answers or the last one
    /// fails (`Exhausted`, naming every model tried with its reason).
    pub(crate) async fn complete(
        &mut self,
        prompt: &Prompt<'_>,
        ctx: RequestCtx<'_>,
    ) -> Result<Answer, ChainError> {
        let mut tried: Vec<(String, String)> = Vec::new();
        if let Some(answer) = self.probe_cooled(prompt, ctx, &mut tried).await? {
            return Ok(answer);
        }
        loop {
            let index = self.active;
            let (reason, attempts, error) =
                match self.turn(Rules::turn(self, index), prompt, ctx).await {
                    Turn::Answered(answer) => {
                        self.members[index].left_at = None;
                        return Ok(answer);
                    }
                    Turn::Failed { error, attempts } => (error.reason(), attempts, Some(error)),
                    Turn::Skipped { attempts } => (COOLDOWN_REASON.to_string(), attempts, None),
                    Turn::End(end) => return Err(end),
                };
            tried.push((self.members[index].spec.clone(), reason.clone()));
            match (self.next_after(index), error) {
                (Some(to), _) => {
                    self.leave(ctx, index, to, &reason, attempts)?;
                    self.active = to;
                }
                (None, Some(last_error)) => {
                    return Err(ChainError::Exhausted {
                        tried,
                        attempts,
                        last_error,
                    })
                }
                // Only a member with a later one is skipped (`Rules::skip`);
                // were the last one skipped, it would be asked after all.
                (None, None) => {
                    tried.pop();
                }
            }
        }
    }

    /// At a step boundary, probes the members earlier than the active one
    /// whose cooldown has passed, in chain order, with one request each: a
    /// success makes that member active again (`model.restore`); a transient
    /// or quota failure is a switch (attempts 1) to the next probe, or back
    /// to the active member, and restarts the member's cooldown.
    async fn probe_cooled(
        &mut self,
        prompt: &Prompt<'_>,
        ctx: RequestCtx<'_>,
        tried: &mut Vec<(String, String)>,
    ) -> Result<Option<Answer>, ChainError> {
        let now = self.health.now();
        let probes: Vec<usize> = (0..self.active)
            .filter(|&i| self.eligible(i, now))
            .collect();
        for (k, &index) in probes.iter().enumerate() {
            match self.turn(Rules::probe(self, index), prompt, ctx).await {
                Turn::Answered(answer) => {
                    let from = self.members[self.active].spec.clone();
                    self.members[index].left_at = None;
                    self.active = index;
                    ctx.emitter.emit(Event::ModelRestore {
                        step: ctx.step,
                        from,
                        to: answer.spec.clone(),
                    });
                    return Ok(Some(answer));
                }
                Turn::Failed { error, attempts } => {
                    let reason = error.reason();
                    tried.push((self.members[index].spec.clone(), reason.clone()));
                    let to = probes.get(k + 1).copied().unwrap_or(self.active);
                    self.leave(ctx, index, to, &reason, attempts)?;
                }
                // Probes are never skipped.
                Turn::Skipped { .. } => {}
                Turn::End(end) => return Err(end),
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests;
