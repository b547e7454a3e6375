//! The human terminal view on stderr: a spinner saying what runs and one
//! line per tool call on a TTY, plain lines otherwise, and the closing
//! summary line. The text of each line is built in `lines`.

pub(crate) mod lines;
pub(crate) mod once;
mod spinner;

use std::collections::HashMap;
use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::Value;

use super::{Event, EventRecord, OutageNotice, Sink};
use crate::exit::Status;
use crate::reason::FailureReason;
use lines::{cut, plan_items, tool_subject, Summary};
pub(crate) use lines::{outage_resume_hint, resume_hint, Continue};
use once::ShownOnce;
pub(crate) use spinner::clear_terminal_line;
use spinner::new_spinner;

/// Line width when stderr is not a terminal and `COLUMNS` is not set.
const PIPE_WIDTH: usize = 120;

/// When the retry (or paced request) being waited for starts, shared with
/// the spinner's countdown.
type WaitUntil = Arc<Mutex<Option<Instant>>>;

/// Renders progress for a person. The final answer is not printed here (it
/// goes to stdout from `main`); everything this sink writes goes to stderr.
pub(crate) struct HumanSink {
    quiet: bool,
    color: bool,
    /// On a terminal (and not quiet): show a spinner between outputs.
    live: bool,
    spinner: Option<ProgressBar>,
    streamed: bool,
    /// Set while rendering a subagent's event: its lines are indented.
    indent: bool,
    /// Characters a line may take.
    width: usize,
    /// Tool calls started and not yet finished: call id -> arguments.
    calls: HashMap<String, Value>,
    /// Cost per model that answered, in the order they first answered.
    costs: Vec<(String, f64)>,
    wait_until: WaitUntil,
    /// The spinner's message, to show again after an approval question.
    message: String,
    /// Lines of a `bash` command's output shown under its tool line (in an
    /// interactive session; 0 otherwise).
    output_tail: usize,
    /// Warnings printed once per machine rather than on every run.
    once: Option<ShownOnce>,
}

/// Lines of a command's output a session's tool line shows.
const OUTPUT_TAIL: usize = 5;

impl HumanSink {
    pub(crate) fn new(quiet: bool) -> Self {
        let tty = io::stderr().is_terminal();
        let color = tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        let live = tty && !quiet;
        let width = if tty {
            console::Term::stderr()
                .size_checked()
                .map(|(_, w)| w as usize)
        } else {
            None
        }
        .or_else(|| std::env::var("COLUMNS").ok()?.parse().ok())
        .filter(|w| *w >= 20)
        .unwrap_or(PIPE_WIDTH);
        let wait_until = WaitUntil::default();
        HumanSink {
            quiet,
            color,
            live,
            spinner: live.then(|| new_spinner(&wait_until)),
            streamed: false,
            indent: false,
            width,
            calls: HashMap::new(),
            costs: Vec::new(),
            wait_until,
            message: String::new(),
            output_tail: 0,
            once: None,
        }
    }

    /// Shows the last lines of each `bash` command's output, dimmed, under
    /// its tool line (SPEC 20: interactive sessions).
    pub(crate) fn with_output_tail(mut self, on: bool) -> Self {
        self.output_tail = if on { OUTPUT_TAIL } else { 0 };
        self
    }

    /// Prints the warnings `once` lists only the first time on this machine.
    pub(crate) fn show_once(mut self, once: ShownOnce) -> Self {
        self.once = Some(once);
        self
    }

    /// Shows the spinner (again, after streamed text) saying `message`.
    fn spin(&mut self, message: &str) {
        if !self.live {
            return;
        }
        self.message = message.to_string();
        let message = cut(message, self.width.saturating_sub(12));
        let wait = &self.wait_until;
        self.spinner
            .get_or_insert_with(|| new_spinner(wait))
            .set_message(message);
    }

    /// The run's end: its error, then the summary (quiet keeps the summary
    /// of a run that ended without an answer: the only word on why).
    fn run_finished(&mut self, event: &Event, status: Status, error: Option<&str>) {
        self.clear_spinner();
        self.set_wait(None);
        if let Some(error) = error {
            eprintln!("{} {error}", self.paint("31", "error:"));
        }
        if !self.quiet || !status.answered() {
            eprintln!("{}", summary_with_costs(event, &self.costs));
        }
    }

    /// A reply: a final text already streamed onto the terminal ends its
    /// line; the text beside tool calls is shown dimmed.
    fn assistant_message(&mut self, text: &str, no_tool_calls: bool) {
        ANSWER_SHOWN.store(self.streamed && no_tool_calls, Ordering::Relaxed);
        if self.streamed {
            self.streamed = false;
            eprintln!();
            self.spin("working");
        } else if !text.is_empty() && !no_tool_calls {
            self.line(&self.paint("2", text.trim()));
        }
    }

    /// A finished tool call's line (`submit` is the summary line's business,
    /// unless it failed).
    fn tool_done(&mut self, tool: &str, args: &Value, ok: bool, output: &str, duration_ms: u64) {
        if tool != "submit" || !ok {
            self.tool_finished(tool, args, ok, output, duration_ms);
        }
        self.spin("working");
    }

    fn tool_started(&mut self, call_id: &str, tool: &str, arguments: &Value) {
        let subject = tool_subject(tool, arguments);
        self.calls.insert(call_id.to_string(), arguments.clone());
        if tool == "submit" {
            self.spin("finishing");
        } else {
            self.spin(&format!("running {tool} {subject}"));
        }
    }

    /// A wait before a request (a retry's backoff, a pacing wait): its line,
    /// then the spinner saying `spinning` with the time left counting down.
    fn waiting(&mut self, line: &str, wait_seconds: f64, spinning: &str) {
        self.line(&self.paint("33", line));
        let wait = Duration::try_from_secs_f64(wait_seconds).unwrap_or_default();
        self.set_wait(Some(Instant::now() + wait));
        self.spin(spinning);
    }

    fn set_wait(&self, until: Option<Instant>) {
        *self.wait_until.lock().unwrap_or_else(|e| e.into_inner()) = until;
    }

    fn clear_spinner(&mut self) {
        if let Some(bar) = self.spinner.take() {
            bar.finish_and_clear();
        }
    }

    /// The width left for a line's text (subagent lines are indented).
    fn line_width(&self) -> usize {
        self.width - if self.indent { 2 } else { 0 }
    }

    fn line_unindented(&self, text: &str) {
        match &self.spinner {
            Some(bar) => bar.suspend(|| eprintln!("{text}")),
            None => eprintln!("{text}"),
        }
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

    /// `subagent submitted after 2 steps · $0.0200`, dimmed.
    fn subagent_finished(&mut self, status: Status, steps: u32, cost_usd: f64) {
        let plural = if steps == 1 { "" } else { "s" };
        self.line(&self.paint(
            "2",
            &format!("subagent {status} after {steps} step{plural} · ${cost_usd:.4}"),
        ))
    }

    /// A failed attempt's streamed text is discarded: say so on its own line.
    fn attempt_reset(&mut self, model: &str) {
        if std::mem::take(&mut self.streamed) {
            eprintln!();
        }
        self.line(&self.paint(
            "33",
            &format!("(discarded a partial reply from {model}; retrying)"),
        ))
    }

    /// A subagent's events (other than its start and end, which are the
    /// parent's `subagent.*` events): indented, otherwise as usual.
    fn handle_subagent(&mut self, record: &EventRecord) {
        match &record.event {
            Event::ModelResponse {
                model, cost_usd, ..
            } => self.add_cost(model, *cost_usd),
            _ if self.quiet => {}
            _ => {
                self.indent = true;
                self.handle_event(record);
                self.indent = false;
            }
        }
    }

    fn add_cost(&mut self, model: &str, cost: f64) {
        match self.costs.iter_mut().find(|(m, _)| m == model) {
            Some((_, total)) => *total += cost,
            None => self.costs.push((model.to_string(), cost)),
        }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// `✓ bash cargo test (1.2s)`, cut to the line's width; a failed call
    /// (or one with nothing to show) adds the first line of its output.
    fn tool_finished(&self, tool: &str, args: &Value, ok: bool, output: &str, duration_ms: u64) {
        let mark = if ok {
            self.paint("32", "✓")
        } else {
            self.paint("31", "✗")
        };
        let took = format!("({})", lines::duration(duration_ms));
        if tool == "plan" && ok {
            let (items, done, total) = plan_items(args);
            self.line(&format!(
                "{mark} plan ({done}/{total} done) {}",
                self.paint("2", &took)
            ));
            for item in items {
                self.line(&format!(
                    "    {}",
                    cut(&item, self.line_width().saturating_sub(4))
                ));
            }
            return;
        }
        let subject = tool_subject(tool, args);
        // "✓ " + tool + " " + subject + " " + took
        let room = self
            .line_width()
            .saturating_sub(tool.chars().count() + took.chars().count() + 4);
        let mut line = format!("{mark} {tool}");
        if !subject.is_empty() {
            line.push(' ');
            line.push_str(&cut(&subject, room.max(10)));
        }
        line.push(' ');
        line.push_str(&self.paint("2", &took));
        if tool == "bash" && self.output_tail > 0 {
            // One block with the output's last lines: the spinner steps
            // aside once.
            let indent = if self.indent { "\n  " } else { "\n" };
            for row in lines::output_tail(output, self.output_tail) {
                let row = cut(&row, self.line_width().saturating_sub(4));
                line.push_str(indent);
                line.push_str(&format!("    {}", self.paint("2", &row)));
            }
            self.line(&line);
            return;
        }
        self.line(&line);
        let note = if ok && subject.is_empty() {
            output
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .to_string()
        } else if !ok {
            lines::failure_note(output)
        } else {
            String::new()
        };
        if !note.is_empty() {
            let note = cut(note.trim_end(), self.line_width().saturating_sub(4));
            self.line(&format!("    {}", self.paint("2", &note)));
        }
    }
}

impl Sink for HumanSink {
    fn handle(&mut self, record: &EventRecord) {
        // The fallback and restore lines are printed in every mode (SPEC 5),
        // above the spinner so no frame is left behind.
        if let Some(line) = super::switch_line(&record.event) {
            self.line_unindented(&line);
        }
        // So are the lines of an outage wait (SPEC 18): a CI log shows why
        // the run is quiet, whatever the mode.
        if let Some(line) = super::outage_event_line(&record.event) {
            self.line_unindented(&line);
        }
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
        self.clear_spinner();
        self.streamed = true;
        eprint!("{text}");
        let _ = io::stderr().flush();
    }

    fn outage_progress(&mut self, notice: &OutageNotice) {
        if self.live {
            // A countdown to the next try under the spinner.
            self.set_wait(Some(Instant::now() + notice.next_try));
            self.spin(&format!(
                "outage: waiting up to {} more · next try",
                crate::duration::compact_seconds(notice.left)
            ));
        } else if notice.remind {
            self.line_unindented(&notice.line());
        }
    }

    fn finish(&mut self) {
        self.clear_spinner();
    }

    fn hold_live(&mut self, hold: bool) {
        if hold {
            if std::mem::take(&mut self.streamed) {
                eprintln!();
            }
            self.clear_spinner();
        } else if !self.message.is_empty() {
            let message = self.message.clone();
            self.spin(&message);
        }
    }
}

/// Whether the last top-level reply was a text answer streamed live onto
/// the terminal on stderr.
static ANSWER_SHOWN: AtomicBool = AtomicBool::new(false);

/// Whether the final answer is already on the screen: it streamed live onto
/// stderr, and stdout is that same terminal (so printing it again would
/// show it twice; a redirected stdout still gets it).
pub(crate) fn answer_already_on_screen() -> bool {
    use std::os::fd::AsRawFd;
    if !ANSWER_SHOWN.load(Ordering::Relaxed)
        || !io::stdout().is_terminal()
        || !io::stderr().is_terminal()
    {
        return false;
    }
    let device = |fd: i32| {
        // SAFETY: fstat into a zeroed stat of our own, on a standard stream.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_rdev)
    };
    let (out, err) = (
        device(io::stdout().as_raw_fd()),
        device(io::stderr().as_raw_fd()),
    );
    out.is_some() && out == err
}

impl Drop for HumanSink {
    fn drop(&mut self) {
        self.clear_spinner();
    }
}

impl HumanSink {
    /// Shows one event: one arm per event, so a new event breaks the build
    /// until this view places it; the text of the busier arms is built in
    /// the helpers below.
    fn handle_event(&mut self, record: &EventRecord) {
        match &record.event {
            Event::RunFinished { status, error, .. } => {
                self.run_finished(&record.event, *status, error.as_deref())
            }
            Event::ModelResponse {
                model, cost_usd, ..
            } => {
                self.add_cost(model, *cost_usd);
                self.set_wait(None);
            }
            _ if self.quiet => {}
            Event::StepStarted { step, model } => self.thinking(*step, model),
            Event::ProviderRetry {
                model,
                next_attempt,
                wait_seconds,
                reason,
                deadline_seconds,
                cause,
                ..
            } => self.provider_retry(
                model,
                *next_attempt,
                *wait_seconds,
                *reason,
                *deadline_seconds,
                cause.as_deref(),
            ),
            Event::ProviderPaced {
                model,
                wait_seconds,
                limit,
                source,
                rate,
                ..
            } => self.waiting(
                &lines::paced(model, *wait_seconds, limit, source, rate.as_deref()),
                *wait_seconds,
                &format!("pacing {model} for its {limit} limit"),
            ),
            // Printed above with the switch lines (SPEC 24).
            Event::LimitLearned { .. } => {}
            Event::AttemptReset { model, .. } => self.attempt_reset(model),
            Event::AssistantMessage {
                text, tool_calls, ..
            } => self.assistant_message(text, tool_calls.is_empty()),
            Event::ToolStarted {
                call_id,
                tool,
                arguments,
                ..
            } => self.tool_started(call_id, tool, arguments),
            Event::ToolFinished {
                call_id,
                tool,
                ok,
                output,
                duration_ms,
                ..
            } => {
                let args = self.calls.remove(call_id).unwrap_or(Value::Null);
                self.tool_done(tool, &args, *ok, output, *duration_ms);
            }
            Event::ContextCompacted {
                tokens_before,
                tokens_after,
                ..
            } => {
                // The summary streamed onto the terminal ends its line.
                if std::mem::take(&mut self.streamed) {
                    eprintln!();
                }
                self.line(&format!(
                    "context compacted: {tokens_before} -> {tokens_after} tokens"
                ))
            }
            Event::Warning { message } => self.warning(message),
            Event::ModelFallback { to, .. } | Event::ModelRestore { to, .. } => {
                self.set_wait(None);
                self.spin(&format!("asking {to}"));
            }
            Event::ModelHedge { .. } | Event::ModelHedgeSettled { .. } => {}
            Event::OutageWaiting { wait, next_try, .. } => self.outage_waiting(*wait, *next_try),
            Event::OutageOver { step, model, .. } => self.thinking(*step, model),
            Event::RunStarted { .. }
            | Event::CheckResult { .. }
            | Event::CheckBudget { .. }
            | Event::CheckLimit { .. }
            | Event::CheckHealth { .. }
            | Event::CheckFinished { .. } => {}
            Event::SubagentStarted { task, model, .. } => self.subagent_started(task, model),
            Event::SubagentFinished {
                status,
                steps,
                cost_usd,
                ..
            } => self.subagent_finished(*status, *steps, *cost_usd),
        }
    }

    /// The spinner while the model thinks: at a step's start, and again
    /// when an outage is over.
    fn thinking(&mut self, step: u32, model: &str) {
        self.set_wait(None);
        self.spin(&format!("thinking · step {step} · {model}"));
    }

    /// The wait before a retry; a timeout says which deadline ran out.
    fn provider_retry(
        &mut self,
        model: &str,
        next_attempt: u32,
        wait_seconds: f64,
        reason: FailureReason,
        deadline_seconds: Option<f64>,
        cause: Option<&str>,
    ) {
        let reason = match (deadline_seconds, cause) {
            (Some(deadline), _) => format!("{reason} after {deadline}s"),
            (None, Some(cause)) => format!("{reason}: {cause}"),
            (None, None) => reason.to_string(),
        };
        self.waiting(
            &format!("retrying {model} in {wait_seconds:.1}s ({reason}, attempt {next_attempt})"),
            wait_seconds,
            &format!("retrying {model} (attempt {next_attempt}, {reason})"),
        )
    }

    /// `warning: <message>`, once per message when repeats are folded.
    fn warning(&self, message: &str) {
        if self.once.as_ref().is_none_or(|o| o.show(message)) {
            self.line(&format!("{} {message}", self.paint("33", "warning:")));
        }
    }

    /// The spinner of an outage wait, counting down to the next try.
    fn outage_waiting(&mut self, wait: Duration, next_try: Duration) {
        self.set_wait(Some(Instant::now() + next_try));
        self.spin(&format!(
            "outage: waiting up to {} · next try",
            crate::duration::compact(wait)
        ));
    }

    /// `subagent (<model>): <first line of its task>`, dimmed.
    fn subagent_started(&self, task: &str, model: &str) {
        let first: String = task.lines().next().unwrap_or("").chars().take(80).collect();
        self.line(&self.paint("2", &format!("subagent ({model}): {first}")));
    }
}

/// `submitted after 12 steps · 48.2k tokens · $0.1831 · 1m12s · 1 model fallback (now openai/gpt-5)`
pub(crate) fn summary_line(event: &Event) -> String {
    summary_with_costs(event, &[])
}

/// The summary line, with the cost of each model when more than one answered.
pub(crate) fn summary_with_costs(event: &Event, costs: &[(String, f64)]) -> String {
    let Event::RunFinished {
        status,
        steps,
        input_tokens,
        output_tokens,
        cost_usd,
        duration_ms,
        model_fallbacks,
        active_model,
        down,
        cache,
        ..
    } = event
    else {
        return String::new();
    };
    lines::summary(
        &Summary {
            status: *status,
            steps: *steps,
            tokens: input_tokens.saturating_add(*output_tokens),
            input_tokens: *input_tokens,
            cached_input_tokens: cache.cached_input_tokens,
            cost_usd: *cost_usd,
            duration_ms: *duration_ms,
            model_fallbacks: *model_fallbacks,
            active_model,
            down,
        },
        costs,
    )
}
