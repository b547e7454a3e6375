//! The fallback chain: the primary and its fallbacks behind one `complete`
//! call (SPEC sections 5 and 13). It walks the chain as the gate
//! (`gate/mod.rs`) says: each member's retry loop runs under the gate's
//! rules, members that cooled down are probed at a step boundary, and each
//! move is recorded here (the stderr line and `model.fallback` event via the
//! emitter, `model_switches`, `model.restore`). Why a member was left, or
//! skipped, is decided in the gate alone. When every member failed, the
//! run may wait for one to come back (`--outage-wait`, SPEC 18): the
//! exhausted path goes on in `chain/wait.rs`.

mod wait;

use std::sync::Arc;
use std::time::Duration;

use super::gate::{BudgetBook, Gate, Halt, MemberTurn, Pacer, Timing};
use super::hedge::{Hedge, HedgeLog, Partner};
use super::member::Member;
use super::reason::SwitchReason;
use super::retry::{request_with_retries_from, Failure, Opening, RequestCtx};
use super::spec::ModelSpec;
use super::{ModelError, Prompt, Request, Response};
use crate::events::Event;
use crate::health::Health;
pub(crate) use crate::policy::{FallbackPolicy, HedgePolicy, RetryPolicy};
use crate::stop::StopCause;

/// A switch, as recorded in the trajectory's `model_switches`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Switch {
    pub step: u32,
    pub from: String,
    pub to: String,
    pub reason: SwitchReason,
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
    Fatal { spec: ModelSpec, error: ModelError },
    /// The active model reported a context overflow (the agent compacts).
    ContextOverflow { spec: ModelSpec, error: ModelError },
    /// Every model failed with a transient or quota cause; each model tried
    /// with its reason, with `last_error` the final model's error (`None`
    /// when the run joined its fleet's outage wait before sending one);
    /// after an outage wait (`waited`), every model with its last reason.
    Exhausted {
        tried: Vec<(ModelSpec, SwitchReason)>,
        attempts: u32,
        last_error: Option<ModelError>,
        waited: Option<Waited>,
    },
    /// The gate halted the run before a request (a spent budget).
    Halted(Halt),
}

/// An outage wait that ran out (SPEC 18).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Waited {
    pub time: Duration,
    /// The requests the run sent during the wait.
    pub probes: u32,
}

impl std::fmt::Display for Waited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = if self.probes == 1 { "" } else { "s" };
        write!(
            f,
            "waited {} for a model to answer again ({} request{plural})",
            crate::duration::compact_seconds(self.time),
            self.probes
        )
    }
}

impl std::fmt::Display for ChainError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChainError::Stopped(cause) => write!(f, "stopped: {cause:?}"),
            ChainError::Halted(halt) => halt.fmt(f),
            ChainError::Fatal { spec, error } | ChainError::ContextOverflow { spec, error } => {
                write!(f, "{spec}: {error}")
            }
            ChainError::Exhausted {
                tried,
                last_error,
                waited: Some(waited),
                ..
            } => {
                let list: Vec<String> = tried
                    .iter()
                    .map(|(spec, reason)| format!("{spec} ({reason})"))
                    .collect();
                let what = if tried.len() == 1 {
                    "the model failed"
                } else {
                    "every model of the fallback chain failed"
                };
                write!(f, "{what}: {}; {waited}", list.join(", "))?;
                match last_error {
                    Some(error) => write!(f, "; last error: {error}"),
                    None => Ok(()),
                }
            }
            ChainError::Exhausted {
                tried,
                attempts,
                last_error,
                waited: None,
            } => {
                if let ([(spec, reason)], last_error) = (tried.as_slice(), last_error) {
                    let plural = if *attempts == 1 { "" } else { "s" };
                    match last_error {
                        Some(error) => write!(f, "{spec}: {error}")?,
                        None => write!(f, "{spec}: {reason}")?,
                    }
                    write!(f, " (after {attempts} attempt{plural})")
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
    switches: Vec<Switch>,
    /// Every member's state and the rules asked before and after each
    /// request; shared with a hedge's admission, which runs on a blocking
    /// thread (`gate/hedge.rs`).
    gate: Arc<Gate>,
    /// The hedges sent (SPEC 23) and the losers' costs to charge.
    hedge_log: HedgeLog,
    /// The run lineage's `prompt_cache_key` (SPEC 25), the same for every
    /// request of the run, its resumes and follow-ups.
    cache_key: Option<String>,
}

/// The gate as `build` sets it up. A chain is set up before its first
/// request, while it alone holds its gate; a gate already shared (a hedge's
/// admission still running) is left as it is.
fn set_up(gate: Arc<Gate>, build: impl FnOnce(Gate) -> Gate) -> Arc<Gate> {
    match Arc::try_unwrap(gate) {
        Ok(gate) => Arc::new(build(gate)),
        Err(shared) => {
            debug_assert!(false, "a chain is set up before its first request");
            shared
        }
    }
}

/// How one member's turn ended, in the chain's terms.
enum Turn {
    Answered(Answer),
    /// The run moves on from the member (or the chain is exhausted).
    MovedOn {
        reason: SwitchReason,
        attempts: u32,
        error: Option<ModelError>,
        /// A pacing move-on: the member's limit resets this far ahead.
        reset: Option<Duration>,
    },
    /// The step ends here: a stop, a fatal error or a context overflow.
    End(ChainError),
    /// The turn's hedge became the step's request (SPEC 23): the run moves
    /// to member `to`, with its answer, or its failure to go on from.
    Hedged {
        to: usize,
        reason: SwitchReason,
        attempts: u32,
        result: Result<Answer, (ModelError, Timing)>,
    },
}

impl ChainModel {
    /// `members[0]` is the primary. Panics on an empty list.
    pub(crate) fn new(members: Vec<Member>, retry: RetryPolicy, fallback: FallbackPolicy) -> Self {
        assert!(!members.is_empty(), "a chain needs a primary model");
        let keys = members.iter().map(|m| m.health_key.clone()).collect();
        let pacer = Pacer::new(members.iter().map(|m| m.pace_key.clone()).collect());
        ChainModel {
            members,
            active: 0,
            switches: Vec::new(),
            gate: Arc::new(Gate::new(keys, retry, fallback, Health::off()).with_pacer(pacer)),
            hedge_log: HedgeLog::default(),
            cache_key: None,
        }
    }

    /// Asks the APIs that take a `prompt_cache_key` for `key`'s cache.
    pub(crate) fn with_cache_key(mut self, key: String) -> Self {
        self.cache_key = Some(key);
        self
    }

    /// Hedges late first events as `policy` says (SPEC 23; off by default).
    pub(crate) fn with_hedging(mut self, policy: HedgePolicy) -> Self {
        self.gate = set_up(self.gate, |g| g.with_hedging(policy));
        self
    }

    /// The hedges sent so far (the trajectory's `hedges`).
    pub(crate) fn hedges(&self) -> Vec<Hedge> {
        self.hedge_log.hedges()
    }

    /// What the losers of hedges cost (their estimated input at their
    /// price), by spec, since the last call: the run counts it (SPEC 23).
    pub(crate) fn take_hedge_charges(&self) -> Vec<(String, f64)> {
        self.hedge_log.take_charges()
    }

    /// Waits up to `wait` for a member to answer again when every one is
    /// down (SPEC 18; zero: the step fails at once, exit 75).
    pub(crate) fn with_outage_wait(mut self, wait: Duration) -> Self {
        self.gate = set_up(self.gate, |g| g.with_outage_wait(wait));
        self
    }

    /// Paces each member (chain order) under its declared limits, its
    /// requests taken as their reply budget in output tokens (SPEC 24).
    pub(crate) fn with_pace_limits(
        mut self,
        limits: Vec<(Vec<crate::health::Window>, Option<u32>)>,
    ) -> Self {
        self.gate = set_up(self.gate, |g| g.with_pace_limits(limits));
        self
    }

    /// Turns pacing (SPEC 17, on by default) off: `pacing: off`.
    pub(crate) fn without_pacing(mut self) -> Self {
        self.gate = set_up(self.gate, |g| g.with_pacer(Pacer::off()));
        self
    }

    /// Shares what this run learns about its members with other runs, and
    /// learns from theirs (SPEC section 13).
    pub(crate) fn with_health(mut self, health: Health) -> Self {
        self.gate = set_up(self.gate, |g| g.with_health(health));
        self
    }

    /// Counts the run's spend toward its budgets (SPEC 19), shared with the
    /// subagents' chain.
    pub(crate) fn with_budgets(mut self, book: Arc<BudgetBook>) -> Self {
        self.gate = set_up(self.gate, |g| g.with_budgets(book));
        self
    }

    /// A reply of `spec` cost `usd` (as the run accounts it): it counts
    /// toward every budget it falls under, before anything else happens.
    pub(crate) fn record_spend(&self, spec: &str, usd: f64) {
        self.gate.spent(spec, usd);
    }

    /// The spec of the model the next step goes to first.
    pub(crate) fn active_spec(&self) -> &str {
        self.members[self.active].spec.as_str()
    }

    /// The active member (for its context window and pricing).
    pub(crate) fn active_member(&self) -> &Member {
        &self.members[self.active]
    }

    /// The switches made so far in this run.
    pub(crate) fn switches(&self) -> &[Switch] {
        &self.switches
    }

    /// The reply caps members reported, by spec (kept in the checkpoint).
    pub(crate) fn reply_caps(&self) -> std::collections::BTreeMap<String, u32> {
        self.gate
            .reply_caps(self.members.iter().map(|m| m.spec.as_str()))
    }

    /// Takes back the reply caps a checkpoint kept.
    pub(crate) fn restore_reply_caps(&self, kept: &std::collections::BTreeMap<String, u32>) {
        self.gate.restore_reply_caps(kept, |spec| {
            self.members.iter().position(|m| m.spec == *spec)
        });
    }

    /// The request member `index` is sent: `prompt` for its spec, with the
    /// member's own reply budget when its entry sets one, else the run's
    /// (not for a member of another provider, nor its effort), never above
    /// a cap the member reported.
    fn request_for<'a>(&'a self, index: usize, prompt: &Prompt<'a>) -> Request<'a> {
        let member = &self.members[index];
        let same_provider = member.spec.provider() == self.members[0].spec.provider();
        let budget = member
            .reply_budget
            .or(prompt.max_output_tokens.filter(|_| same_provider));
        Request {
            system: prompt.system,
            messages: prompt.messages,
            tools: prompt.tools,
            output_schema: prompt.output_schema,
            max_output_tokens: self.gate.reply_budget(index, budget),
            reasoning_effort: prompt.reasoning_effort.filter(|_| same_provider),
            spec: member.spec.as_str(),
            prompt_cache: member.prompt_cache,
            cache_key: self
                .cache_key
                .as_deref()
                .filter(|_| member.prompt_cache.is_on()),
        }
    }

    /// Runs member `index`'s retry loop under `rules` (a normal turn or a
    /// probe: the one helper both use) and sorts out how it ended; `hedge`
    /// is the turn's hedge when it may have one, `failed_first` the failed
    /// hedge it goes on from.
    async fn turn(
        &self,
        rules: MemberTurn<'_>,
        index: usize,
        prompt: &Prompt<'_>,
        ctx: RequestCtx<'_>,
        hedge: Option<super::gate::HedgeTurn<'_>>,
        failed_first: Option<(ModelError, Timing)>,
    ) -> Turn {
        let member = &self.members[index];
        let request = self.request_for(index, prompt);
        let partner = hedge.map(|rules| Partner {
            member: &self.members[rules.to],
            request: self.request_for(rules.to, prompt),
            rules,
            estimated_input_tokens: prompt.estimated_input_tokens,
            log: &self.hedge_log,
        });
        let opening = Opening {
            hedge: partner.as_ref(),
            failed_first,
        };
        let spec = || member.spec.clone();
        match request_with_retries_from(member, &request, ctx, &rules, opening).await {
            Ok(response) => Turn::Answered(self.answer(index, response)),
            Err(Failure::Stopped(cause)) => Turn::End(ChainError::Stopped(cause)),
            Err(Failure::MovedOn {
                reason,
                attempts,
                error,
                reset,
            }) => Turn::MovedOn {
                reason,
                attempts,
                error,
                reset,
            },
            Err(Failure::ContextOverflow(error)) => Turn::End(ChainError::ContextOverflow {
                spec: spec(),
                error,
            }),
            Err(Failure::Fatal(error)) => Turn::End(ChainError::Fatal {
                spec: spec(),
                error,
            }),
            Err(Failure::Halted(halt)) => Turn::End(ChainError::Halted(halt)),
            Err(Failure::Hedged(win)) => {
                if win.produced && win.result.is_err() {
                    ctx.emitter.emit(Event::AttemptReset {
                        step: ctx.step,
                        model: self.members[win.to].spec.to_string(),
                    });
                }
                Turn::Hedged {
                    to: win.to,
                    reason: win.reason,
                    attempts: win.attempts,
                    result: win.result.map(|response| self.answer(win.to, response)),
                }
            }
        }
    }

    /// Member `index`'s reply as the chain's answer, priced with it.
    fn answer(&self, index: usize, response: Response) -> Answer {
        let member = &self.members[index];
        Answer {
            cost_usd: member.cost(&response),
            spec: member.spec.to_string(),
            response,
        }
    }

    /// Records a move away from `from` to `to` (the stderr line, the event,
    /// `model_switches`) unless a stop is pending: then nothing is switched
    /// and the step ends.
    fn leave(
        &mut self,
        ctx: RequestCtx<'_>,
        from: usize,
        to: usize,
        reason: SwitchReason,
        attempts: u32,
    ) -> Result<(), ChainError> {
        if let Some(cause) = ctx.stop.pending() {
            return Err(ChainError::Stopped(cause));
        }
        self.gate.left(from, &reason);
        let switch = Switch {
            step: ctx.step,
            from: self.members[from].spec.to_string(),
            to: self.members[to].spec.to_string(),
            reason,
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
    /// down, then the active member's turn; members the run moves on from
    /// walk down the chain until one answers or the last one fails
    /// (`Exhausted`, naming every model tried with its reason).
    pub(crate) async fn complete(
        &mut self,
        prompt: &Prompt<'_>,
        ctx: RequestCtx<'_>,
    ) -> Result<Answer, ChainError> {
        let mut tried: Vec<(ModelSpec, SwitchReason)> = Vec::new();
        if let Some(answer) = self.probe_cooled(prompt, ctx, &mut tried).await? {
            return Ok(answer);
        }
        let mut failed_first = None;
        loop {
            let index = self.active;
            let tokens = prompt.estimated_input_tokens;
            let rules = self.gate.turn(index, tokens);
            // A turn taken over from a failed hedge is not hedged again.
            let hedge = if failed_first.is_none() {
                self.gate.hedge(index, tokens)
            } else {
                None
            };
            let turn = self
                .turn(rules, index, prompt, ctx, hedge, failed_first.take())
                .await;
            let (reason, attempts, error) = match turn {
                Turn::Answered(answer) => {
                    self.gate.answered(index);
                    return Ok(answer);
                }
                Turn::Hedged {
                    to,
                    reason,
                    attempts,
                    result,
                } => {
                    tried.push((self.members[index].spec.clone(), reason.clone()));
                    self.leave(ctx, index, to, reason, attempts)?;
                    self.active = to;
                    match result {
                        Ok(answer) => {
                            self.gate.answered(to);
                            return Ok(answer);
                        }
                        Err(failed) => failed_first = Some(failed),
                    }
                    continue;
                }
                Turn::MovedOn {
                    reason,
                    attempts,
                    error,
                    ..
                } => (reason, attempts, error),
                Turn::End(end) => return Err(end),
            };
            tried.push((self.members[index].spec.clone(), reason.clone()));
            match (self.gate.next_after(index), error) {
                (Some(to), _) => {
                    self.leave(ctx, index, to, reason, attempts)?;
                    self.active = to;
                }
                (None, Some(last_error)) => {
                    let exhausted = ChainError::Exhausted {
                        tried,
                        attempts,
                        last_error: Some(last_error),
                        waited: None,
                    };
                    return self.wait_out(prompt, ctx, exhausted).await;
                }
                // The last member is one the fleet waits on, and not this
                // run's turn to probe it (SPEC 18): the run joins the wait.
                (None, None) if self.gate.joins_the_wait(index) => {
                    let exhausted = ChainError::Exhausted {
                        tried,
                        attempts,
                        last_error: None,
                        waited: None,
                    };
                    return self.wait_out(prompt, ctx, exhausted).await;
                }
                // Otherwise only a member with a later one is skipped
                // before any request (`MemberTurn::before_send`); were the
                // last one skipped, it would be asked after all.
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
        tried: &mut Vec<(ModelSpec, SwitchReason)>,
    ) -> Result<Option<Answer>, ChainError> {
        let probes = self.gate.due_probes(self.active);
        for (k, &index) in probes.iter().enumerate() {
            let rules = self.gate.probe(index, prompt.estimated_input_tokens);
            match self.turn(rules, index, prompt, ctx, None, None).await {
                Turn::Answered(answer) => {
                    let from = self.members[self.active].spec.to_string();
                    self.gate.answered(index);
                    self.active = index;
                    ctx.emitter.emit(Event::ModelRestore {
                        step: ctx.step,
                        from,
                        to: answer.spec.clone(),
                    });
                    return Ok(Some(answer));
                }
                Turn::MovedOn {
                    reason, attempts, ..
                } => {
                    tried.push((self.members[index].spec.clone(), reason.clone()));
                    let to = probes.get(k + 1).copied().unwrap_or(self.active);
                    self.leave(ctx, index, to, reason, attempts)?;
                }
                Turn::End(end) => return Err(end),
                Turn::Hedged { .. } => unreachable!("a probe is never hedged"),
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests;
