//! The run's document as the loop writes it: messages appended and
//! journaled, the chain's switches and hedges synced in, and the run's end
//! (trajectory finished, `run.finished` emitted, the outcome built).

use std::time::Instant;

use serde_json::Value;

use super::{Agent, Outcome};
use crate::conversation::Message;
use crate::events::{CacheTotals, DownModel, Event};
use crate::exit::Status;
use crate::trajectory::JournalOp;

impl Agent {
    pub(super) fn push_message(&mut self, message: Message) {
        let index = self.doc.messages.len();
        self.doc.messages.push(message);
        if self.checkpoint.is_some() {
            let op = JournalOp::Message {
                index,
                message: self.doc.messages[index].clone(),
            };
            self.journal(&op);
        }
    }

    pub(super) fn sync_doc(&mut self) {
        self.doc.plan = self.plan.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let switches = self.chain.switches();
        self.doc.model_switches.truncate(self.prior_switches);
        self.doc.model_switches.extend(switches.iter().cloned());
        self.doc.hedges.truncate(self.prior_hedges);
        self.doc.hedges.extend(self.chain.hedges());
        // A checkpoint's caps stay, for a member no longer in the chain too.
        self.doc.reply_caps.extend(self.chain.reply_caps());
    }

    pub(super) fn journal_state(&mut self) {
        self.sync_doc();
        let op = JournalOp::State {
            steps: self.doc.steps,
            totals: self.doc.totals,
            active_model: self.doc.active_model.clone(),
            model_switches: self.doc.model_switches.clone(),
            hedges: self.doc.hedges.clone(),
            reply_caps: self.doc.reply_caps.clone(),
            plan: self.doc.plan.clone(),
            messages: Some(self.doc.messages.len()),
        };
        self.journal(&op);
    }

    pub(super) fn journal(&mut self, op: &JournalOp) {
        if let Some(cp) = self.checkpoint.as_mut() {
            if let Err(e) = cp.append(op, &self.doc) {
                self.checkpoint = None;
                self.emitter.warn(format!(
                    "trajectory checkpoint failed, no longer writing it: {e}"
                ));
            }
        }
    }

    /// Ends the run at once, without a request: a resumed checkpoint whose
    /// last reply was already a final answer.
    pub(crate) fn finish_now(
        mut self,
        new_messages: Vec<Message>,
        status: Status,
        output: Value,
    ) -> Outcome {
        for message in new_messages {
            self.push_message(message);
        }
        self.finish(status, output, None, Instant::now(), None)
    }

    pub(super) fn finish(
        &mut self,
        status: Status,
        output: Value,
        error: Option<String>,
        started: Instant,
        outage: Option<Vec<DownModel>>,
    ) -> Outcome {
        let exit_code = crate::exit::exit_code(status, outage.is_some());
        self.sync_doc();
        self.doc.active_model = self.chain.active_spec().to_string();
        self.doc.status = status;
        self.doc.error = error.clone();
        self.doc.output = output.clone();
        self.doc.finished_at = Some(crate::trajectory::now_rfc3339());
        if let Some(cp) = self.checkpoint.as_mut() {
            if let Err(e) = cp.finish(&self.doc) {
                self.emitter
                    .warn(format!("could not write the trajectory: {e}"));
            }
        }
        let down = outage.unwrap_or_default();
        // A subagent's end is its parent's `subagent.finished`.
        if !self.emitter.is_child() {
            self.emit_run_finished(status, exit_code, &output, &error, started, down.clone());
        }
        self.emitter.finish();
        Outcome {
            status,
            exit_code,
            output,
            error,
            steps: self.doc.steps,
            down,
        }
    }

    fn emit_run_finished(
        &self,
        status: Status,
        exit_code: i32,
        output: &Value,
        error: &Option<String>,
        started: Instant,
        down: Vec<DownModel>,
    ) {
        self.emitter.emit(Event::RunFinished {
            status,
            exit_code,
            steps: self.doc.steps,
            input_tokens: self.doc.totals.input_tokens,
            output_tokens: self.doc.totals.output_tokens,
            cost_usd: self.doc.totals.cost_usd,
            duration_ms: started.elapsed().as_millis() as u64,
            model_fallbacks: self.doc.model_switches.len() as u32,
            active_model: self.doc.active_model.clone(),
            output: output.clone(),
            error: error.clone(),
            down,
            cache: CacheTotals {
                cached_input_tokens: self.doc.totals.cached_input_tokens,
                cache_write_tokens: self.doc.totals.cache_write_tokens,
            },
        });
    }
}
