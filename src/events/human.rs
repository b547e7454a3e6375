//! The human terminal view on stderr: a spinner and one line per tool call
//! on a TTY, plain lines otherwise, and the closing summary line.

use std::io::{self, IsTerminal, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use super::{Event, EventRecord, Sink};

/// Renders progress for a person. The final answer is not printed here (it
/// goes to stdout from `main`); everything this sink writes goes to stderr.
pub struct HumanSink {
    quiet: bool,
    color: bool,
    /// On a terminal (and not quiet): show a spinner between outputs.
    live: bool,
    spinner: Option<ProgressBar>,
    streamed: bool,
    /// Set while rendering a subagent's event: its lines are indented.
    indent: bool,
}

impl HumanSink {
    pub fn new(quiet: bool) -> Self {
        let tty = io::stderr().is_terminal();
        let color = tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        let live = tty && !quiet;
        HumanSink {
            quiet,
            color,
            live,
            spinner: live.then(new_spinner),
            streamed: false,
            indent: false,
        }
    }

    /// Shows the spinner again (after streamed text) with `message`.
    fn spin(&mut self, message: String) {
        if !self.live {
            return;
        }
        self.spinner
            .get_or_insert_with(new_spinner)
            .set_message(message);
    }

    fn line(&self, text: &str) {
        let indented;
        let text = if self.indent {
            indented = format!("  {text}");
            &indented
        } else {
            text
        };
        match &self.spinner {
            Some(bar) => bar.suspend(|| eprintln!("{text}")),
            None => eprintln!("{text}"),
        }
    }

    /// A subagent's run: its start and end as one line each, the rest as usual.
    fn handle_subagent(&mut self, record: &EventRecord) {
        match &record.event {
            _ if self.quiet => {}
            Event::RunStarted { task, model, .. } => {
                let first: String = task.lines().next().unwrap_or("").chars().take(80).collect();
                self.line(&self.paint("2", &format!("subagent ({model}): {first}")));
            }
            Event::RunFinished { .. } => {
                self.line(&self.paint("2", &format!("subagent {}", summary_line(&record.event))));
            }
            _ => {
                self.indent = true;
                self.handle_event(record);
                self.indent = false;
            }
        }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
}

impl Sink for HumanSink {
    fn handle(&mut self, record: &EventRecord) {
        if record.parent_run_id.is_some() {
            self.handle_subagent(record);
        } else {
            self.handle_event(record);
        }
    }

    fn text_delta(&mut self, _step: u32, text: &str) {
        // Live text only on a terminal: piped stderr gets whole messages.
        if !self.live {
            return;
        }
        if let Some(bar) = self.spinner.take() {
            bar.finish_and_clear();
        }
        self.streamed = true;
        eprint!("{text}");
        let _ = io::stderr().flush();
    }

    fn finish(&mut self) {
        if let Some(bar) = self.spinner.take() {
            bar.finish_and_clear();
        }
    }
}

impl HumanSink {
    fn handle_event(&mut self, record: &EventRecord) {
        if let Event::RunFinished { .. } = record.event {
            if let Some(bar) = self.spinner.take() {
                bar.finish_and_clear();
            }
        }
        match &record.event {
            Event::RunFinished { error, .. } => {
                if let Some(error) = error {
                    eprintln!("{} {error}", self.paint("31", "error:"));
                }
                if !self.quiet {
                    eprintln!("{}", summary_line(&record.event));
                }
            }
            _ if self.quiet => {}
            Event::StepStarted { step, model } => self.spin(format!("step {step} · {model}")),
            Event::ProviderRetry {
                model,
                next_attempt,
                wait_seconds,
                reason,
                ..
            } => self.line(&self.paint(
                "33",
                &format!(
                    "retrying {model} in {wait_seconds:.1}s ({reason}, attempt {next_attempt})"
                ),
            )),
            Event::AttemptReset { model, .. } => {
                if std::mem::take(&mut self.streamed) {
                    eprintln!();
                }
                self.line(&self.paint(
                    "33",
                    &format!("(discarded a partial reply from {model}; retrying)"),
                ))
            }
            Event::AssistantMessage {
                text, tool_calls, ..
            } => {
                if self.streamed {
                    self.streamed = false;
                    eprintln!();
                    self.spin("working".into());
                } else if !text.is_empty() && !tool_calls.is_empty() {
                    self.line(&self.paint("2", text.trim()));
                }
            }
            Event::ToolFinished {
                tool,
                ok,
                output,
                duration_ms,
                ..
            } => {
                let mark = if *ok {
                    self.paint("32", "✓")
                } else {
                    self.paint("31", "✗")
                };
                let first = output.lines().next().unwrap_or("");
                let first: String = first.chars().take(80).collect();
                self.line(&format!(
                    "{mark} {tool} ({duration_ms}ms) {}",
                    self.paint("2", &first)
                ));
            }
            Event::ContextCompacted {
                tokens_before,
                tokens_after,
                ..
            } => self.line(&format!(
                "context compacted: {tokens_before} -> {tokens_after} tokens"
            )),
            Event::Warning { message } => {
                self.line(&format!("{} {message}", self.paint("33", "warning:")))
            }
            Event::RunStarted { .. }
            | Event::ModelResponse { .. }
            | Event::ToolStarted { .. }
            | Event::ModelFallback { .. }
            | Event::ModelRestore { .. }
            | Event::CheckResult { .. }
            | Event::CheckFinished { .. } => {}
        }
    }
}

fn new_spinner() -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// `submitted after 12 steps · 48.2k tokens · $0.1831 · 1m12s · 1 model fallback (now openai/gpt-5)`
pub fn summary_line(event: &Event) -> String {
    let Event::RunFinished {
        status,
        steps,
        input_tokens,
        output_tokens,
        cost_usd,
        duration_ms,
        model_fallbacks,
        active_model,
        ..
    } = event
    else {
        return String::new();
    };
    let mut line = format!(
        "{status} after {steps} step{} · {} tokens · ${cost_usd:.4} · {}",
        if *steps == 1 { "" } else { "s" },
        tokens(input_tokens + output_tokens),
        duration(*duration_ms),
    );
    if *model_fallbacks > 0 {
        line.push_str(&format!(
            " · {model_fallbacks} model fallback{} (now {active_model})",
            if *model_fallbacks == 1 { "" } else { "s" }
        ));
    }
    line
}

fn tokens(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

fn duration(ms: u64) -> String {
    if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        let s = ms / 1000;
        if s < 3600 {
            format!("{}m{:02}s", s / 60, s % 60)
        } else {
            format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn summary_matches_spec_example() {
        let event = Event::RunFinished {
            status: "submitted".into(),
            exit_code: 0,
            steps: 12,
            input_tokens: 48_000,
            output_tokens: 200,
            cost_usd: 0.1831,
            duration_ms: 72_000,
            model_fallbacks: 1,
            active_model: "openai/gpt-5".into(),
            output: Value::Null,
            error: None,
        };
        assert_eq!(
            summary_line(&event),
            "submitted after 12 steps · 48.2k tokens · $0.1831 · 1m12s · 1 model fallback (now openai/gpt-5)"
        );
    }
}
