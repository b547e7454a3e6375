//! GitHub Actions (SPEC section 15): under `GITHUB_ACTIONS=true`, switches
//! and restores become `::warning` workflow commands, an outage wait and
//! its end `::notice` ones (SPEC 18), and a run without an answer an
//! `::error` one, all on stderr (so `--json` stdout stays pure), and the
//! run's Markdown summary (task, answer, duration, costs) is appended to
//! `$GITHUB_STEP_SUMMARY`. Under `--check`, `CheckSink` writes an
//! `::error` per failed model (and for a health record it cannot use) and
//! a table of the verdicts (SPEC 21).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::human::lines::duration;
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
    /// The task's first line, from `run.started`.
    task: String,
    finished: Option<Event>,
    /// An outage wait began and has not ended with an answer: the run ids
    /// still waiting.
    waiting: Vec<String>,
}

/// Lines of the answer the summary shows.
const ANSWER_LINES: usize = 20;
/// Characters of the task's first line the summary shows.
const TASK_CHARS: usize = 200;

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
            task: String::new(),
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
            &self.task,
            &self.per_model,
            &self.switches,
            self.checkpoint.as_deref(),
        );
        append_summary(path, &text);
    }
}

/// Appends to the step summary; a failure is a warning on stderr (the run
/// or check has ended: no event can follow).
fn append_summary(path: &Path, text: &str) {
    let written = open_append(path).and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = written {
        let message = format!(
            "cannot write the GitHub step summary {}: {e}",
            path.display()
        );
        eprintln!("tinyagent: warning: {message}");
        eprintln!("{}", command("warning", "tinyagent", &message));
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
            Event::RunStarted { task, .. } if !child => {
                let first = task.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
                self.task = cut(first.trim(), TASK_CHARS);
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
        if !status.answered() {
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

/// `text` cut to `max` characters, with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The answer's first lines as Markdown (a fence left open by the cut is
/// closed), and a note when there was more.
fn answer_markdown(output: &Value) -> Option<String> {
    let text = match output {
        Value::Null => return None,
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).ok()?,
    };
    let text = text.trim_end();
    if text.is_empty() {
        return None;
    }
    let lines: Vec<&str> = text.lines().collect();
    let shown = &lines[..lines.len().min(ANSWER_LINES)];
    let mut md = String::from("\n**Answer**\n\n");
    if !matches!(output, Value::String(_)) {
        md.push_str("```json\n");
    }
    for line in shown {
        md.push_str(line);
        md.push('\n');
    }
    let fences = shown
        .iter()
        .filter(|l| l.trim_start().starts_with("```"))
        .count();
    if !matches!(output, Value::String(_)) || fences % 2 == 1 {
        md.push_str("```\n");
    }
    if lines.len() > shown.len() {
        md.push_str(&format!(
            "\n*The first {} of {} lines; the whole answer is in the run's output.*\n",
            shown.len(),
            lines.len()
        ));
    }
    Some(md)
}

/// The run's Markdown summary.
fn summary_markdown(
    end: &Event,
    task: &str,
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
        duration_ms,
        active_model,
        output,
        error,
        cache,
        ..
    } = end
    else {
        return String::new();
    };
    let mut md = format!("### tinyagent: {status}\n\n");
    md.push_str("| | |\n| --- | --- |\n");
    if !task.is_empty() {
        md.push_str(&format!("| task | {} |\n", cell(task)));
    }
    md.push_str(&format!("| status | `{status}` (exit {exit_code}) |\n"));
    md.push_str(&format!("| steps | {steps} |\n"));
    let cached =
        crate::events::human::lines::cached_share(cache.cached_input_tokens, *input_tokens)
            .map(|share| format!(" ({share} cached)"))
            .unwrap_or_default();
    md.push_str(&format!(
        "| tokens | {input_tokens} input{cached}, {output_tokens} output |\n"
    ));
    md.push_str(&format!("| cost | ${cost_usd:.4} |\n"));
    md.push_str(&format!("| duration | {} |\n", duration(*duration_ms)));
    md.push_str(&format!("| active model | `{}` |\n", cell(active_model)));
    if let Some(error) = error {
        md.push_str(&format!("| error | {} |\n", cell(error)));
    }
    if let Some(answer) = answer_markdown(output) {
        md.push_str(&answer);
    }
    md.push_str(&per_model_markdown(per_model));
    if !switches.is_empty() {
        md.push_str("\n**Model switches**\n\n");
        for line in switches {
            md.push_str(&format!("- {}\n", cell(line)));
        }
    }
    if let Some(path) = checkpoint {
        let path = shell_quote(&path.display().to_string());
        let answered = status.answered();
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

/// The cost-per-model table; empty when no model answered.
fn per_model_markdown(per_model: &BTreeMap<String, ModelTotals>) -> String {
    if per_model.is_empty() {
        return String::new();
    }
    let mut md = String::from("\n**Cost per model**\n\n");
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
    md
}

/// `--check` under GitHub Actions: an `::error` per model that failed, on
/// stderr as the verdict comes, and at the end a table of every verdict
/// appended to `$GITHUB_STEP_SUMMARY`.
pub(crate) struct CheckSink {
    summary: Option<PathBuf>,
    rows: Vec<String>,
    failed: u32,
}

impl CheckSink {
    /// The sink when `GITHUB_ACTIONS` is `true`.
    pub(crate) fn from_env(env: Env) -> Option<Box<dyn Sink>> {
        if env("GITHUB_ACTIONS").as_deref() != Some("true") {
            return None;
        }
        Some(Box::new(CheckSink {
            summary: env("GITHUB_STEP_SUMMARY")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
            rows: Vec::new(),
            failed: 0,
        }))
    }
}

impl Sink for CheckSink {
    fn handle(&mut self, record: &EventRecord) {
        if let Event::CheckHealth { line, .. } = &record.event {
            eprintln!("{}", command("error", "tinyagent check", line));
            return;
        }
        let Event::CheckResult {
            model,
            ok,
            reason,
            message,
            first_event_ms,
            tool_calls,
            priced,
            line,
            ..
        } = &record.event
        else {
            return;
        };
        let price = if *priced { "known" } else { "unknown" };
        let row = if *ok {
            let calls = if *tool_calls == Some(true) {
                "yes"
            } else {
                "no"
            };
            let ms = first_event_ms.unwrap_or(0);
            format!("| `{}` | ok | {ms} ms | {calls} | {price} |", cell(model))
        } else {
            self.failed += 1;
            eprintln!("{}", command("error", "tinyagent check", line));
            let why = match message.as_deref().filter(|m| !m.is_empty()) {
                Some(m) => match reason {
                    Some(reason) => format!("{reason}: {m}"),
                    None => format!("failed: {m}"),
                },
                None => reason.map_or_else(|| "failed".into(), |r| r.to_string()),
            };
            format!(
                "| `{}` | **FAIL** {} | | | {price} |",
                cell(model),
                cell(&why)
            )
        };
        self.rows.push(row);
    }

    fn finish(&mut self) {
        let Some(path) = &self.summary else { return };
        if self.rows.is_empty() {
            return;
        }
        let total = self.rows.len();
        let answered = total - self.failed as usize;
        let mut md = format!("### tinyagent --check: {answered} of {total} models answered\n\n");
        md.push_str("| model | verdict | first event | tool calls | price |\n");
        md.push_str("| --- | --- | ---: | --- | --- |\n");
        for row in &self.rows {
            md.push_str(row);
            md.push('\n');
        }
        md.push('\n');
        append_summary(path, &md);
        self.rows.clear();
    }
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
            status: crate::exit::Status::Error,
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
            down: Vec::new(),
            cache: crate::events::CacheTotals {
                cached_input_tokens: 1032,
                cache_write_tokens: 100,
            },
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
            "fix the | bug",
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
        assert!(md.contains("| task | fix the \\| bug |"), "{md}");
        assert!(md.contains("| duration | 10ms |"), "{md}");
        assert!(
            md.contains("| tokens | 1200 input (86% cached), 80 output |"),
            "{md}"
        );
        assert!(!md.contains("**Answer**"), "{md}");
    }

    #[test]
    fn the_answer_shows_its_first_twenty_lines_with_fences_closed() {
        let text: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let md = answer_markdown(&Value::String(text)).unwrap();
        assert!(md.contains("line 20\n") && !md.contains("line 21"), "{md}");
        assert!(md.contains("The first 20 of 30 lines"), "{md}");
        let fenced = format!("intro\n```sh\n{}", "cargo test\n".repeat(30));
        let md = answer_markdown(&Value::String(fenced)).unwrap();
        assert_eq!(md.matches("```").count(), 2, "{md}");
        let md = answer_markdown(&serde_json::json!({"ok": true})).unwrap();
        assert!(md.contains("```json\n{\n  \"ok\": true\n}\n```\n"), "{md}");
        assert_eq!(answer_markdown(&Value::Null), None);
        assert_eq!(cut("abcdef", 3), "abc…");
        assert_eq!(cut("abc", 3), "abc");
    }
}
