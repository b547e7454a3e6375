//! The chain's exhausted path with `--outage-wait` (SPEC 18): rather than
//! failing the step, the run waits for a member to answer again. It walks
//! the gate's outage rules (`gate/outage.rs`): it sleeps, sends one request
//! at a time, follows another run's recovery, and gives up at the
//! deadline; and it records what people and scripts see: `outage.waiting`
//! once, the countdown and the reminder lines, `outage.over`, the
//! restore. Nothing here touches the checkpoint: the run stays `running`.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::{Answer, ChainError, ChainModel, Turn, Waited};
use crate::events::{DownModel, Event, OutageNotice};
use crate::model::gate::{Next, Outage};
use crate::model::reason::SwitchReason;
use crate::model::retry::RequestCtx;
use crate::model::spec::ModelSpec;
use crate::model::{ModelError, Prompt};

/// How long a log that is not a terminal goes without a line during a
/// wait (SPEC 18: at least one a minute).
const REMIND_EVERY: Duration = Duration::from_secs(30);
/// The longest wait kept as such; longer ones wait this long (a year).
const LONGEST: Duration = Duration::from_secs(365 * 86_400);

/// One wait in progress.
struct Waiting {
    outage: Outage,
    started: Instant,
    deadline: Instant,
    /// When the last reminder line went out.
    reminded: Instant,
    /// The requests sent during the wait.
    probes: u32,
    last_error: Option<ModelError>,
}

impl ChainModel {
    /// The chain is exhausted (`exhausted`): with an outage wait, wait for
    /// a member to answer again and answer the step with it; without one,
    /// or when the wait runs out, the step fails (exit 75). A stop ends the
    /// wait at once.
    pub(super) async fn wait_out(
        &mut self,
        prompt: &Prompt<'_>,
        ctx: RequestCtx<'_>,
        exhausted: ChainError,
    ) -> Result<Answer, ChainError> {
        let limit = self.gate.outage_wait().min(LONGEST);
        let ChainError::Exhausted {
            tried, last_error, ..
        } = &exhausted
        else {
            return Err(exhausted);
        };
        if limit.is_zero() {
            return Err(exhausted);
        }
        if let Some(cause) = ctx.stop.pending() {
            return Err(ChainError::Stopped(cause));
        }
        let started = Instant::now();
        // The failure that ended the chain was the last member tried; its
        // server's Retry-After holds off that member's first probe.
        let asked = tried
            .last()
            .and_then(|(spec, _)| self.members.iter().position(|m| m.spec == *spec))
            .zip(last_error.as_ref().and_then(ModelError::retry_after));
        let mut wait = Waiting {
            outage: self.gate.begin_outage(self.last_reasons(tried), asked),
            started,
            deadline: started + limit,
            reminded: started,
            probes: 0,
            last_error: last_error.clone(),
        };
        ctx.emitter.emit(Event::OutageWaiting {
            step: ctx.step,
            models: self.down(&wait.outage),
            until: humantime::format_rfc3339_millis(SystemTime::now() + limit).to_string(),
            wait: limit,
            next_try: wait.outage.next_try(&self.gate),
        });
        loop {
            let Some((index, followed)) = self.next_request(&mut wait, ctx).await? else {
                return Err(self.gave_up(wait));
            };
            let tokens = prompt.estimated_input_tokens;
            // A recovery is followed like any request (it may find the
            // fleet waiting again); a probe's lease is this run's already.
            let rules = if followed {
                self.gate.probe(index, tokens)
            } else {
                self.gate.wait_probe(index, tokens)
            };
            match self.turn(rules, index, prompt, ctx, None, None).await {
                Turn::Answered(answer) => {
                    wait.probes += 1;
                    return Ok(self.outage_over(index, answer, &wait, ctx));
                }
                // Not sent: the fleet waits on the member again.
                Turn::MovedOn {
                    reason: SwitchReason::Cooldown,
                    attempts: 0,
                    ..
                } => {}
                Turn::MovedOn {
                    reason,
                    error,
                    reset,
                    ..
                } => {
                    // A Retry-After, or a pacing reset, is taken when it is
                    // longer than the wait's interval (SPEC 18).
                    let asked = error.as_ref().and_then(ModelError::retry_after).or(reset);
                    wait.probes += 1;
                    if error.is_some() {
                        wait.last_error = error;
                    }
                    wait.outage.failed(&self.gate, index, reason, asked);
                    self.progress(&mut wait, ctx, false);
                }
                Turn::End(end) => return Err(end),
                Turn::Hedged { .. } => unreachable!("an outage wait's request is never hedged"),
            }
        }
    }

    /// Sleeps as the gate says until a member is to be asked, printing a
    /// reminder line every `REMIND_EVERY`: the member, and whether it is a
    /// recovery followed (else this run's probe); `None` when the wait runs
    /// out first.
    async fn next_request(
        &self,
        wait: &mut Waiting,
        ctx: RequestCtx<'_>,
    ) -> Result<Option<(usize, bool)>, ChainError> {
        loop {
            let now = Instant::now();
            if now >= wait.deadline {
                return Ok(None);
            }
            match wait.outage.next(&self.gate) {
                Next::Probe(index) => return Ok(Some((index, false))),
                Next::Follow { index, after } => {
                    let until = (now + after).min(wait.deadline);
                    ctx.stop
                        .sleep(until - now)
                        .await
                        .map_err(ChainError::Stopped)?;
                    return Ok((until < wait.deadline).then_some((index, true)));
                }
                Next::Sleep(pause) => {
                    let remind_at = wait.reminded + REMIND_EVERY;
                    let until = (now + pause).min(wait.deadline).min(remind_at);
                    ctx.stop
                        .sleep(until - now)
                        .await
                        .map_err(ChainError::Stopped)?;
                    if Instant::now() >= remind_at {
                        self.progress(wait, ctx, true);
                    }
                }
            }
        }
    }

    /// Hands how the wait stands to the sinks (a countdown; a line when
    /// `remind`).
    fn progress(&self, wait: &mut Waiting, ctx: RequestCtx<'_>, remind: bool) {
        let now = Instant::now();
        if remind {
            wait.reminded = now;
        }
        ctx.emitter.outage_progress(&OutageNotice {
            models: self.down(&wait.outage),
            left: wait.deadline.saturating_duration_since(now),
            next_try: wait.outage.next_try(&self.gate),
            remind,
        });
    }

    /// Each member's last reason: its last in this step (`tried`), else the
    /// one it was left for, else `cooldown` (skipped for the record).
    fn last_reasons(&self, tried: &[(ModelSpec, SwitchReason)]) -> Vec<SwitchReason> {
        self.members
            .iter()
            .map(|member| {
                let spec = member.spec.as_str();
                tried
                    .iter()
                    .rev()
                    .find(|(tried, _)| tried.as_str() == spec)
                    .map(|(_, reason)| reason.clone())
                    .or_else(|| {
                        let left = self.switches.iter().rev().find(|s| s.from == spec);
                        left.map(|s| s.reason.clone())
                    })
                    .unwrap_or(SwitchReason::Cooldown)
            })
            .collect()
    }

    /// Every member with its last reason, as the events and lines show them.
    fn down(&self, outage: &Outage) -> Vec<DownModel> {
        self.members
            .iter()
            .zip(outage.reasons())
            .map(|(member, reason)| DownModel {
                model: member.spec.to_string(),
                reason: reason.clone(),
            })
            .collect()
    }

    /// The wait ran out: the step fails naming every member with its last
    /// reason and the time waited.
    fn gave_up(&self, wait: Waiting) -> ChainError {
        let tried = self
            .members
            .iter()
            .zip(wait.outage.reasons())
            .map(|(member, reason)| (member.spec.clone(), reason.clone()))
            .collect();
        ChainError::Exhausted {
            tried,
            attempts: wait.probes,
            last_error: wait.last_error,
            waited: Some(Waited {
                time: wait.started.elapsed(),
                probes: wait.probes,
            }),
        }
    }

    /// Member `index` answered: the wait is over (`outage.over`), and the
    /// member is the active one again (`model.restore` when it was left).
    fn outage_over(
        &mut self,
        index: usize,
        answer: Answer,
        wait: &Waiting,
        ctx: RequestCtx<'_>,
    ) -> Answer {
        self.gate.answered(index);
        let waited = wait.started.elapsed().as_secs_f64();
        ctx.emitter.emit(Event::OutageOver {
            step: ctx.step,
            model: answer.spec.clone(),
            waited_seconds: (waited * 1000.0).round() / 1000.0,
            probes: wait.probes,
        });
        if index != self.active {
            let from = self.members[self.active].spec.to_string();
            self.active = index;
            ctx.emitter.emit(Event::ModelRestore {
                step: ctx.step,
                from,
                to: answer.spec.clone(),
            });
        }
        answer
    }
}
