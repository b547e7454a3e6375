//! GitHub Actions (SPEC section 15): under `GITHUB_ACTIONS=true`, switches
//! and restores become `::warning` workflow commands, an outage wait and
//! its end `::notice` ones (SPEC 18), and a run without an answer an
//! `::error` one, all on stderr (so `--json` stdout stays pure), and the
//! run's Markdown summary is appended to `$GITHUB_STEP_SUMMARY`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::human::summary_line;
use super::{outage_event_line, switch_line, Event, EventRecord, Sink};
use crate::setup::Env;

/// Escapes a workflow command's message (`%`, `\r`, `\n`), as the
/// runner's `@actions/core` does.
pub(crate) fn escape_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escapes a workflow command's property value: the message escapes plus
/// `:` and `,`.
pub(crate) fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

/// `::<command> title=<title>::<message>`, escaped.
pub(crate) fn command(name: &str, title: &str, message: &str) -> String {
    format!(
        "::{name} title={}::{}",
        escape_property(title),
        escape_data(message)
    )
}

/// What one model did in this run, for the summary's cost table.
#[derive(Debug, Default, Clone, Copy)]
struct ModelTotals {
    responses: u32,
    input_tokens: u64,
    output_tokens: u64,
    cost_usd: f64,
}

/// The GitHub Actions sink. Only the top-level run's end is summarised; a
/// subagent's switches are annotated like any other.
pub(crate) struct GithubSink {
    summary: Option<PathBuf>,
    checkpoint: Option<PathBuf>,
    per_model: BTreeMap<String, ModelTotals>,
    switches: Vec<String>,
    finished: Option<Event>,
    /// An outage wait began and has not ended with an answer: the run ids
    /// still waiting.
    waiting: Vec<String>,
}

impl GithubSink {
    /// The sink when `GITHUB_ACTIONS` is `true`; `checkpoint` is the file a
    /// later `--resume` would read.
    pub(crate) fn from_env(env: Env, checkpoint: Option<PathBuf>) -> Option<GithubSink> {
        if env("GITHUB_ACTIONS").as_deref() != Some("true") {
            return None;
        }
        Some(GithubSink {
            summary: env("GITHUB_STEP_SUMMARY")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
            checkpoint,
            per_model: BTreeMap::new(),
            switches: Vec::new(),
            finished: None,
            waiting: Vec::new(),
        })
    }

    /// Why the summary file cannot be written, checked before the run (for
    /// a `warning`); `None` when it can, or when none is asked for.
    pub(crate) fn summary_problem(&self) -> Option<String> {
        let path = self.summary.as_ref()?;
        match open_append(path) {
            Ok(_) => None,
            Err(e) => Some(format!(
                "cannot write the GitHub step summary {}: {e}",
                path.display()
            )),
        }
    }

    fn write_summary(&self) {
        let (Some(path), Some(end)) = (&self.summary, &self.finished) else {
            return;
        };
        let text = summary_markdown(
            end,
            &self.per_model,
            &self.switches,
            self.checkpoint.as_deref(),
        );
        let written = open_append(path).and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(e) = written {
            // The run has ended: no event can follow `run.finished`.
            let message = format!(
                "cannot write the GitHub step summary {}: {e}",
                path.display()
            );
            eprintln!("tinyagent: warning: {message}");
            eprintln!("{}", command("warning", "tinyagent", &message));
        }
    }
}

fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

impl Sink for GithubSink {
    fn handle(&mut self, record: &EventRecord) {
        let child = record.parent_run_id.is_some();
        match &record.event {
            event @ (Event::ModelFallback { .. } | Event::ModelRestore { .. }) => {
                let Some(line) = switch_line(event) else {
                    return;
                };
                let title = match event {
                    Event::ModelFallback { .. } => "tinyagent model fallback",
                    _ => "tinyagent model restore",
                };
                eprintln!("{}", command("warning", title, &line));
                if !child {
                    self.switches.push(line);
                }
            }
            Event::ModelResponse {
                model,
                input_tokens,
                output_tokens,
                cost_usd,
                ..
            } if !child => {
                let t = self.per_model.entry(model.clone()).or_default();
                t.responses += 1;
                t.input_tokens = t.input_tokens.saturating_add(*input_tokens);
                t.output_tokens = t.output_tokens.saturating_add(*output_tokens);
                t.cost_usd += cost_usd;
            }
            Event::OutageWaiting { .. } => {
                if let Some(line) = outage_event_line(&record.event) {
                    eprintln!("{}", command("notice", "tinyagent outage", &line));
                }
                self.waiting.push(record.run_id.clone());
            }
            Event::OutageOver { .. } => {
                if let Some(line) = outage_event_line(&record.event) {
                    eprintln!("{}", command("notice", "tinyagent outage over", &line));
                }
                self.waiting.retain(|id| id != &record.run_id);
            }
            Event::RunFinished { status, .. } if self.waiting.contains(&record.run_id) => {
                // The wait ended without an answer: its end is a notice too.
                self.waiting.retain(|id| id != &record.run_id);
                let line = format!("outage: no model answered again; the run ended {status}");
                eprintln!("{}", command("notice", "tinyagent outage over", &line));
                self.handle_finished(record, child);
            }
            Event::RunFinished { .. } => self.handle_finished(record, child),
            _ => {}
        }
    }

    fn finish(&mut self) {
        self.write_summary();
        self.finished = None;
    }
}

impl GithubSink {
    /// A run's end: an `::error` when it has no answer, and the summary
    /// (top-level run only).
    fn handle_finished(&mut self, record: &EventRecord, child: bool) {
        let Event::RunFinished { status, error, .. } = &record.event else {
            return;
        };
        if child {
            return;
        }
        if !matches!(status.as_str(), "submitted" | "completed") {
            let mut message = error.clone().unwrap_or_default();
            if !message.is_empty() {
                message.push('\n');
            }
            message.push_str(&summary_line(&record.event));
            let title = format!("tinyagent run {status}");
            eprintln!("{}", command("error", &title, &message));
        }
        self.finished = Some(record.event.clone());
    }
}

/// Quotes `text` for a POSIX shell when it needs it.
fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:@,".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// Text safe inside a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// The run's Markdown summary.
fn summary_markdown(
    end: &Event,
    per_model: &BTreeMap<String, ModelTotals>,
    switches: &[String],
    checkpoint: Option<&Path>,
) -> String {
    let Event::RunFinished {
        status,
        exit_code,
        steps,
        input_tokens,
        output_tokens,
        cost_usd,
        active_model,
        error,
        ..
    } = end
    else {
        return String::new();
    };
    let mut md = format!("### tinyagent: {status}\n\n");
    md.push_str("| | |\n| --- | --- |\n");
    md.push_str(&format!("| status | `{status}` (exit {exit_code}) |\n"));
    md.push_str(&format!("| steps | {steps} |\n"));
    md.push_str(&format!(
        "| tokens | {input_tokens} input, {output_tokens} output |\n"
    ));
    md.push_str(&format!("| cost | ${cost_usd:.4} |\n"));
    md.push_str(&format!("| active model | `{}` |\n", cell(active_model)));
    if let Some(error) = error {
        md.push_str(&format!("| error | {} |\n", cell(error)));
    }
    if !per_model.is_empty() {
        md.push_str("\n**Cost per model**\n\n");
        md.push_str("| model | responses | input tokens | output tokens | cost |\n");
        md.push_str("| --- | ---: | ---: | ---: | ---: |\n");
        for (model, t) in per_model {
            md.push_str(&format!(
                "| `{}` | {} | {} | {} | ${:.4} |\n",
                cell(model),
                t.responses,
                t.input_tokens,
                t.output_tokens,
                t.cost_usd
            ));
        }
    }
    if !switches.is_empty() {
        md.push_str("\n**Model switches**\n\n");
        for line in switches {
            md.push_str(&format!("- {}\n", cell(line)));
        }
    }
    if let Some(path) = checkpoint {
        let path = shell_quote(&path.display().to_string());
        let answered = matches!(status.as_str(), "submitted" | "completed");
        let command = if answered {
            format!("tinyagent --resume {path} \"<a follow-up task>\"")
        } else {
            format!("tinyagent --resume {path}")
        };
        md.push_str(&format!("\n**Resume**\n\n```sh\n{command}\n```\n"));
    }
    md.push('\n');
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_properties_are_escaped_as_the_runner_expects() {
        assert_eq!(escape_data("50% done\r\nnext"), "50%25 done%0D%0Anext");
        assert_eq!(escape_property("a:b,c%"), "a%3Ab%2Cc%25");
        assert_eq!(
            command("warning", "tinyagent: x, y", "a -> b\nc"),
            "::warning title=tinyagent%3A x%2C y::a -> b%0Ac"
        );
    }

    #[test]
    fn paths_are_quoted_for_the_shell_when_needed() {
        assert_eq!(shell_quote("runs/run-1.json"), "runs/run-1.json");
        assert_eq!(shell_quote("my run's.json"), r"'my run'\''s.json'");
    }

    #[test]
    fn the_summary_has_totals_per_model_costs_switches_and_the_resume_command() {
        let end = Event::RunFinished {
            status: "error".into(),
            exit_code: 75,
            steps: 3,
            input_tokens: 1200,
            output_tokens: 80,
            cost_usd: 0.0123,
            duration_ms: 10,
            model_fallbacks: 1,
            active_model: "b/y".into(),
            output: serde_json::Value::Null,
            error: Some("every model | failed".into()),
        };
        let mut per_model = BTreeMap::new();
        per_model.insert(
            "a/x".to_string(),
            ModelTotals {
                responses: 2,
                input_tokens: 1000,
                output_tokens: 60,
                cost_usd: 0.01,
            },
        );
        let md = summary_markdown(
            &end,
            &per_model,
            &["model fallback: a/x -> b/y (http_503) at step 3".into()],
            Some(Path::new("/tmp/run.json")),
        );
        assert!(md.starts_with("### tinyagent: error\n"), "{md}");
        assert!(md.contains("| status | `error` (exit 75) |"), "{md}");
        assert!(md.contains("| `a/x` | 2 | 1000 | 60 | $0.0100 |"), "{md}");
        assert!(md.contains("- model fallback: a/x -> b/y (http_503) at step 3"));
        assert!(md.contains("every model \\| failed"), "{md}");
        assert!(md.contains("tinyagent --resume /tmp/run.json\n"), "{md}");
    }
}
