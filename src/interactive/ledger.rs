//! What a session spent, per model (`/cost`): a sink each of its runs
//! writes every `model.response` to, subagents' included.

use std::sync::{Arc, Mutex};

use crate::events::human::lines::{cached_share, tokens};
use crate::events::{Event, EventRecord, Sink};

/// Tokens and cost of one model.
#[derive(Debug, Clone, Default, PartialEq)]
struct Spent {
    model: String,
    responses: u64,
    input_tokens: u64,
    /// The part of the input read from a prompt cache.
    cached_input_tokens: u64,
    output_tokens: u64,
    cost_usd: f64,
}

/// ` · 86% cached` when some of `input` was read from a cache.
fn cached_note(cached: u64, input: u64) -> String {
    cached_share(cached, input)
        .map(|share| format!(" · {share} cached"))
        .unwrap_or_default()
}

#[derive(Debug, Default)]
struct Book {
    /// In the order the models first answered.
    models: Vec<Spent>,
    runs: u32,
}

/// The session's spending so far. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ledger(Arc<Mutex<Book>>);

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A sink for one run of the session.
    pub(crate) fn sink(&self) -> Box<dyn Sink> {
        Box::new(LedgerSink(self.clone()))
    }

    /// `/cost`: the session's tokens and cost, then each model's.
    pub(crate) fn report(&self) -> String {
        let book = self.lock();
        let total = book.models.iter().fold(0.0, |sum, m| sum + m.cost_usd);
        let all: u64 = book
            .models
            .iter()
            .map(|m| m.input_tokens + m.output_tokens)
            .sum();
        let (input, cached) = book.models.iter().fold((0u64, 0u64), |(i, c), m| {
            (
                i.saturating_add(m.input_tokens),
                c.saturating_add(m.cached_input_tokens),
            )
        });
        let runs = format!("{} run{}", book.runs, if book.runs == 1 { "" } else { "s" });
        let mut out = format!(
            "this session: {runs} · {} tokens{} · ${total:.4}",
            tokens(all),
            cached_note(cached, input)
        );
        if book.models.is_empty() {
            out.push_str("\n  no model has answered yet");
        }
        let width = book.models.iter().map(|m| m.model.len()).max().unwrap_or(0);
        for m in &book.models {
            out.push_str(&format!(
                "\n  {:<width$}  {} in{} · {} out · ${:.4} ({} response{})",
                m.model,
                tokens(m.input_tokens),
                cached_note(m.cached_input_tokens, m.input_tokens),
                tokens(m.output_tokens),
                m.cost_usd,
                m.responses,
                if m.responses == 1 { "" } else { "s" },
            ));
        }
        out
    }
}

struct LedgerSink(Ledger);

impl Sink for LedgerSink {
    fn handle(&mut self, record: &EventRecord) {
        match &record.event {
            Event::ModelResponse {
                model,
                input_tokens,
                output_tokens,
                cached_input_tokens,
                cost_usd,
                ..
            } => {
                let mut book = self.0.lock();
                let index = match book.models.iter().position(|m| &m.model == model) {
                    Some(i) => i,
                    None => {
                        book.models.push(Spent {
                            model: model.clone(),
                            ..Spent::default()
                        });
                        book.models.len() - 1
                    }
                };
                let spent = &mut book.models[index];
                spent.responses += 1;
                spent.input_tokens = spent.input_tokens.saturating_add(*input_tokens);
                spent.cached_input_tokens = spent
                    .cached_input_tokens
                    .saturating_add(*cached_input_tokens);
                spent.output_tokens = spent.output_tokens.saturating_add(*output_tokens);
                spent.cost_usd += cost_usd;
            }
            Event::RunFinished { .. } if record.parent_run_id.is_none() => self.0.lock().runs += 1,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Emitter;

    fn response(model: &str, input: u64, output: u64, cost: f64) -> Event {
        Event::ModelResponse {
            step: 1,
            model: model.into(),
            input_tokens: input,
            output_tokens: output,
            cached_input_tokens: input / 2,
            cache_write_tokens: 0,
            cost_usd: cost,
            finish_reason: "stop".into(),
            usage_estimated: false,
        }
    }

    #[test]
    fn spending_adds_up_per_model_across_runs_and_subagents() {
        let ledger = Ledger::default();
        assert_eq!(
            ledger.report(),
            "this session: 0 runs · 0 tokens · $0.0000\n  no model has answered yet"
        );
        for run in ["r1", "r2"] {
            let emitter = Emitter::new(run, vec![ledger.sink()]);
            emitter.emit(response("openai/gpt-5", 1000, 200, 0.01));
            emitter
                .child("child")
                .emit(response("script/x", 10, 5, 0.0));
            emitter.emit(Event::Warning {
                message: "w".into(),
            });
        }
        assert_eq!(
            ledger.report(),
            "this session: 0 runs · 2.4k tokens · 50% cached · $0.0200\n  openai/gpt-5  2.0k in · 50% cached · 400 out · $0.0200 (2 responses)\n  script/x      20 in · 50% cached · 10 out · $0.0000 (2 responses)"
        );
    }
}
