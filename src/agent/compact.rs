//! Context compaction: when a provider reports a context overflow, or before
//! a request whose estimated size passes a share of the active model's
//! context window, the older history is summarised by the active model into
//! one marker message, and the request is retried once.
//!
//! What is kept: the task (the first message), the last `KEEP_TURNS`
//! assistant turns with their tool results (call/result pairs are never
//! split; with fewer turns, only the last one), and everything after them.
//! What goes: the turns in between, replaced by `[summary of earlier
//! conversation] ...`. Old tool outputs are cut first, in the transcript the
//! summariser reads. Then, while the request is still above the threshold
//! (or no smaller than before), the largest tool outputs are shortened.
//! Compaction always makes the request smaller: when nothing can be
//! summarised or shortened, an overflow ends the run with an error naming
//! the sizes, and no `context.compacted` is emitted.
//!
//! Sizes are estimated by `usage::TokenMeter`: the server's own count for
//! the previous request plus what was added since, else characters / 4.

use std::ops::Range;

use serde_json::Value;

use super::usage::{request_chars, TokenMeter};
use super::{Agent, Outcome, StepEnd};
use crate::conversation::{Message, Role, ToolSpec};
use crate::events::Event;
use crate::exit::Status;
use crate::model::chain::ChainError;
use crate::model::retry::RequestCtx;
use crate::model::Prompt;
use crate::tools::shorten;
use crate::trajectory::{JournalOp, Trajectory};

/// The first line of the message that replaces summarised history.
pub(crate) const SUMMARY_MARKER: &str = "[summary of earlier conversation]";
/// Assistant turns kept verbatim at the end of the history.
const KEEP_TURNS: usize = 2;
/// How much of each tool output the summariser reads.
const TRANSCRIPT_TOOL_CHARS: usize = 2_000;
/// Tool outputs are first shortened to this.
const SHORTENED_TOOL_CHARS: usize = 2_000;
/// The shortest a tool output is cut to.
const MIN_TOOL_CHARS: usize = 200;
/// The transcript's size when the window is unknown.
const DEFAULT_TRANSCRIPT_CHARS: usize = 400_000;
/// Longest mechanical digest, used when the model gives no summary.
const MAX_DIGEST_CHARS: usize = 6_000;

const SUMMARY_SYSTEM: &str = "You summarise the conversation of a coding agent so that it can continue its task with a much shorter context.";
const SUMMARY_INSTRUCTIONS: &str =
    "Summarise the conversation below for the agent that will continue the task. \
Keep what it needs to go on: decisions made, facts learned about the code, files read or changed, \
commands run and their results (errors verbatim when short), the plan, and what remains to do. \
Drop anything it will not need. Reply with the summary only.";

/// When to compact (config `compaction:`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CompactionPolicy {
    /// Compact before a request estimated above this share of the window.
    pub threshold: f64,
    /// The window assumed for a model whose own window is unknown.
    pub default_context_window: Option<u64>,
}

/// Estimated tokens of a request with no server count to go by:
/// characters / 4, rounded up.
#[cfg(test)]
pub fn estimate_tokens(system: &str, messages: &[Message], tools: &[ToolSpec]) -> u64 {
    request_chars(system, messages, tools).div_ceil(4)
}

/// The messages to summarise: after the task, before the last `KEEP_TURNS`
/// assistant turns (with fewer turns than that, before the last one).
/// `None` when that holds no assistant turn or tool result.
pub(crate) fn older_history(messages: &[Message]) -> Option<Range<usize>> {
    if messages.len() < 2 {
        return None;
    }
    let assistants: Vec<usize> = (1..messages.len())
        .filter(|&i| messages[i].role == Role::Assistant)
        .collect();
    let keep_from = if assistants.len() > KEEP_TURNS {
        assistants[assistants.len() - KEEP_TURNS]
    } else {
        // Summarise everything but the last turn.
        assistants.last().copied().unwrap_or(messages.len())
    };
    // Only user messages (an earlier summary, a resumed task) are not worth
    // a summarising request.
    let worth_it = messages[1..keep_from]
        .iter()
        .any(|m| matches!(m.role, Role::Assistant | Role::Tool));
    worth_it.then_some(1..keep_from)
}

/// The conversation as text for the summariser, tool outputs cut first,
/// then the whole cut to `max_chars` keeping its head and tail.
pub(crate) fn transcript(messages: &[Message], max_chars: usize) -> String {
    let mut out = String::new();
    for m in messages {
        let who = match m.role {
            Role::System => "system".to_string(),
            Role::User => "user".to_string(),
            Role::Assistant => "assistant".to_string(),
            Role::Tool => format!("tool result ({})", m.name.as_deref().unwrap_or("tool")),
        };
        out.push_str(&format!("### {who}\n"));
        let content = if m.role == Role::Tool {
            shorten(&m.content, TRANSCRIPT_TOOL_CHARS)
        } else {
            m.content.clone()
        };
        if !content.is_empty() {
            out.push_str(content.trim_end());
            out.push('\n');
        }
        for call in &m.tool_calls {
            out.push_str(&format!(
                "[call {}: {}]\n",
                call.name,
                shorten(&call.arguments.to_string(), TRANSCRIPT_TOOL_CHARS)
            ));
        }
    }
    shorten(&out, max_chars)
}

/// A mechanical outline of `messages`, used when the model gives no summary.
pub(crate) fn digest(messages: &[Message]) -> String {
    let mut out = String::from("(outline of the earlier steps; no summary was available)\n");
    for m in messages {
        let first_line = |text: &str| -> String {
            text.lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(160)
                .collect()
        };
        match m.role {
            Role::Assistant => {
                if !m.content.trim().is_empty() {
                    out.push_str(&format!("- assistant: {}\n", first_line(m.content.trim())));
                }
                for call in &m.tool_calls {
                    let args: String = call.arguments.to_string().chars().take(160).collect();
                    out.push_str(&format!("- called {} {args}\n", call.name));
                }
            }
            Role::Tool => out.push_str(&format!("  -> {}\n", first_line(m.content.trim()))),
            Role::User | Role::System => {
                out.push_str(&format!("- user: {}\n", first_line(m.content.trim())))
            }
        }
    }
    shorten(&out, MAX_DIGEST_CHARS)
}

/// The history with `older` replaced by one summary message.
pub(crate) fn replace_with_summary(
    messages: &[Message],
    older: Range<usize>,
    summary: &str,
) -> Vec<Message> {
    let step = messages[older.end - 1].step;
    let mut out = Vec::with_capacity(messages.len() - older.len() + 1);
    out.extend_from_slice(&messages[..older.start]);
    out.push(Message::new(
        Role::User,
        format!("{SUMMARY_MARKER}\n{}", summary.trim()),
        step,
    ));
    out.extend_from_slice(&messages[older.end..]);
    out
}

/// The history with long tool outputs shortened; `None` when none is long.
pub(crate) fn shorten_tool_outputs(messages: &[Message]) -> Option<Vec<Message>> {
    let mut out = messages.to_vec();
    shrink_tool_outputs(&mut out, |_| false).then_some(out)
}

/// Shortens the largest tool outputs, one at a time, until `done` says the
/// history is small enough: first each to `SHORTENED_TOOL_CHARS`, then by
/// halves down to `MIN_TOOL_CHARS`. Returns whether anything changed.
pub(crate) fn shrink_tool_outputs(
    messages: &mut [Message],
    done: impl Fn(&[Message]) -> bool,
) -> bool {
    let mut changed = false;
    for floor in [SHORTENED_TOOL_CHARS, MIN_TOOL_CHARS] {
        // Outputs this pass cannot cut (the note would outweigh the cut).
        let mut stuck = vec![false; messages.len()];
        loop {
            if done(messages) {
                return changed;
            }
            // The largest tool output still above the floor.
            let largest = messages
                .iter()
                .enumerate()
                .filter(|(i, m)| m.role == Role::Tool && !stuck[*i])
                .map(|(i, m)| (m.content.chars().count(), i))
                .filter(|(chars, _)| *chars > floor)
                .max();
            let Some((chars, i)) = largest else { break };
            let target = if floor == SHORTENED_TOOL_CHARS {
                floor
            } else {
                (chars / 2).max(floor)
            };
            let shortened = shorten(&messages[i].content, target);
            if shortened.len() >= messages[i].content.len() {
                stuck[i] = true;
                continue;
            }
            messages[i].content = shortened;
            changed = true;
        }
    }
    changed
}

/// Why a request could not be made to fit.
fn cannot_compact(spec: &str, tokens: u64, window: Option<u64>) -> String {
    let window = window
        .map(|w| format!(" the context window of {w} tokens of"))
        .unwrap_or_else(|| " the context window of".into());
    format!(
        "context overflow: the request (about {tokens} tokens) does not fit{window} {spec}, and compaction cannot shorten it further"
    )
}

impl Agent {
    /// The window compaction measures against: the active model's, else one
    /// its server named in an overflow error, else the configured default.
    pub(super) fn context_window(&self) -> Option<u64> {
        let member = self.chain.active_member();
        member
            .context_window
            .or_else(|| self.meter.window(member.spec.as_str()))
            .or(self.jobs.compaction.default_context_window)
    }

    /// The estimated tokens of a request with `messages` to the active model.
    pub(super) fn estimate_request(
        &self,
        system: &str,
        messages: &[Message],
        tools: &[ToolSpec],
    ) -> u64 {
        let chars = request_chars(system, messages, tools);
        self.meter.estimate(self.chain.active_spec(), chars)
    }

    /// The size compaction aims below: the threshold share of the window.
    fn compaction_target(&self) -> Option<u64> {
        self.context_window()
            .map(|w| ((w as f64 * self.jobs.compaction.threshold) as u64).max(1))
    }

    /// Whether the next request should be compacted first: its estimate
    /// passes the threshold and something in it can be summarised or
    /// shortened.
    pub(super) fn needs_compaction(&self, system: &str, tools: &[ToolSpec]) -> bool {
        let Some(target) = self.compaction_target() else {
            return false;
        };
        self.estimate_request(system, &self.doc.messages, tools) > target
            && (older_history(&self.doc.messages).is_some()
                || shorten_tool_outputs(&self.doc.messages).is_some())
    }

    /// Learns what an overflow error says: the window the server named and
    /// its count for this request.
    pub(super) fn learn_overflow(
        &mut self,
        spec: &str,
        message: &str,
        system: &str,
        tools: &[ToolSpec],
    ) {
        let (requested, window) = super::usage::overflow_sizes(message);
        if let Some(window) = window {
            self.meter.record_window(spec, window);
        }
        if let Some(tokens) = requested {
            let chars = request_chars(system, &self.doc.messages, tools);
            self.meter.record(spec, chars, tokens);
        }
    }

    /// Compacts the history with the active model, emits `context.compacted`
    /// and checkpoints the new message list. The summarising request goes
    /// through the chain (priced and retried like any request); its tokens
    /// and cost count in the totals, but it is not a step.
    ///
    /// `Ok(true)` when the history shrank; `Ok(false)` when nothing could be
    /// made smaller (nothing is changed or emitted). `overflow` says the
    /// server rejected the request as too long: then `Ok(false)` becomes an
    /// error naming the sizes. `Err` ends the run.
    pub(super) async fn compact(
        &mut self,
        step: u32,
        system: &str,
        tools: &[ToolSpec],
        overflow: bool,
    ) -> Result<bool, StepEnd> {
        let tokens_before = self.estimate_request(system, &self.doc.messages, tools);
        // After an overflow from a server that named no window: halve it.
        let target = self
            .compaction_target()
            .or_else(|| overflow.then_some(tokens_before / 2));
        let mut model = self.chain.active_spec().to_string();
        let mut messages = match older_history(&self.doc.messages) {
            Some(older) => {
                let summary = self.summarise(step, older.clone(), &mut model).await?;
                let candidate = replace_with_summary(&self.doc.messages, older, &summary);
                if self.estimate_request(system, &candidate, tools) < tokens_before {
                    candidate
                } else {
                    self.doc.messages.clone()
                }
            }
            None => self.doc.messages.clone(),
        };
        {
            let meter: &TokenMeter = &self.meter;
            let spec = self.chain.active_spec();
            let fits = |m: &[Message]| {
                let tokens = meter.estimate(spec, request_chars(system, m, tools));
                tokens < tokens_before && target.is_none_or(|t| tokens <= t)
            };
            shrink_tool_outputs(&mut messages, fits);
        }
        let tokens_after = self.estimate_request(system, &messages, tools);
        if tokens_after >= tokens_before {
            if overflow {
                return Err(StepEnd::Finish(
                    Status::Error,
                    Value::Null,
                    Some(cannot_compact(
                        self.chain.active_spec(),
                        tokens_before,
                        self.context_window(),
                    )),
                ));
            }
            return Ok(false);
        }
        self.doc.messages = messages;
        self.emitter.emit(Event::ContextCompacted {
            step,
            model,
            tokens_before,
            tokens_after,
        });
        self.checkpoint_compaction();
        Ok(true)
    }

    /// A session's `/compact`: compacts the conversation now, as an
    /// overflow would (`context.compacted` shows the sizes), and ends the
    /// run `completed` without another request; a conversation with
    /// nothing to compact is said in a warning. The document is the
    /// conversation's from now on.
    pub(crate) async fn compact_keeping_doc(mut self) -> (Outcome, Trajectory) {
        let started = std::time::Instant::now();
        let mut system = super::prompt::system_prompt(&self.tool_ctx.cwd);
        if let Some(note) = &self.jobs.system_note {
            system.push_str("\n\n");
            system.push_str(note);
        }
        let mut tools: Vec<ToolSpec> = self.tools.available_specs();
        if self.jobs.subagent.is_some() {
            tools.push(crate::tools::delegate::delegate_spec());
        }
        let schema = self.jobs.output_schema.as_ref().map(|s| s.value.clone());
        tools.push(crate::tools::submit_spec(schema.as_ref()));
        let step = self.doc.steps;
        let (status, error, outage) = match self.compact(step, &system, &tools, false).await {
            Ok(true) | Err(StepEnd::Continue) => (Status::Completed, None, None),
            Ok(false) => {
                let tokens = self.estimate_request(&system, &self.doc.messages, &tools);
                self.emitter.warn(format!(
                    "nothing to compact: the conversation (about {tokens} tokens) has no older turns to summarise or tool outputs to shorten"
                ));
                (Status::Completed, None, None)
            }
            Err(StepEnd::Finish(status, _, error)) => (status, error, None),
            Err(StepEnd::Outage { error, down }) => (Status::Error, Some(error), Some(down)),
        };
        let outcome = self.finish(status, Value::Null, error, started, outage);
        (outcome, self.doc)
    }

    /// Asks the active model for a summary of `older`; falls back to a
    /// mechanical digest when the summary request itself overflows or the
    /// reply has no text.
    async fn summarise(
        &mut self,
        step: u32,
        older: Range<usize>,
        model: &mut String,
    ) -> Result<String, StepEnd> {
        let max_chars = self
            .context_window()
            .map(|w| (w as usize).saturating_mul(2))
            .unwrap_or(DEFAULT_TRANSCRIPT_CHARS);
        let text = transcript(&self.doc.messages[older.clone()], max_chars);
        let request_messages = [Message::new(
            Role::User,
            format!("{SUMMARY_INSTRUCTIONS}\n\n{text}"),
            step,
        )];
        let chars = request_chars(SUMMARY_SYSTEM, &request_messages, &[]);
        let prompt = Prompt {
            system: SUMMARY_SYSTEM,
            messages: &request_messages,
            tools: &[],
            output_schema: None,
            max_output_tokens: self.options.max_output_tokens,
            reasoning_effort: self.options.reasoning_effort.as_deref(),
            estimated_input_tokens: self.meter.estimate(self.chain.active_spec(), chars),
        };
        let ctx = RequestCtx {
            step,
            emitter: &self.emitter,
            stop: &self.stop,
        };
        match self.chain.complete(&prompt, ctx).await {
            Ok(mut answer) => {
                // Counted in the totals, but never a base for the estimates.
                self.account(&mut answer, chars, false);
                self.doc.active_model = answer.spec.clone();
                *model = answer.spec;
                let summary = answer.response.text.trim().to_string();
                if summary.is_empty() {
                    Ok(digest(&self.doc.messages[older]))
                } else {
                    Ok(summary)
                }
            }
            Err(ChainError::ContextOverflow { .. }) => Ok(digest(&self.doc.messages[older])),
            Err(ChainError::Stopped(cause)) => Err(StepEnd::Finish(
                super::stop_status(cause),
                Value::Null,
                None,
            )),
            Err(error @ ChainError::Exhausted { .. }) => Err(StepEnd::Outage {
                down: super::request::down_models(&error),
                error: format!("compacting the context failed: {error}"),
            }),
            Err(ChainError::Halted(halt)) => Err(super::request::halted(&halt)),
            Err(error) => Err(StepEnd::Finish(
                Status::Error,
                Value::Null,
                Some(format!("compacting the context failed: {error}")),
            )),
        }
    }

    /// Records the compacted list: a whole-list journal op, then a full
    /// rewrite of FILE, so FILE (with or without its journal) holds it.
    fn checkpoint_compaction(&mut self) {
        if self.checkpoint.is_none() {
            return;
        }
        self.journal(&JournalOp::Messages {
            messages: self.doc.messages.clone(),
        });
        self.sync_doc();
        if let Some(cp) = self.checkpoint.as_mut() {
            if let Err(e) = cp.rewrite(&self.doc) {
                self.checkpoint = None;
                self.emitter.warn(format!(
                    "trajectory checkpoint failed, no longer writing it: {e}"
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::ToolCall;
    use serde_json::json;

    fn turn(step: u32, output: &str) -> Vec<Message> {
        let call = ToolCall {
            id: format!("c{step}"),
            name: "bash".into(),
            arguments: json!({"command": "ls"}),
            garbled: false,
            oversized: None,
        };
        vec![
            Message {
                tool_calls: vec![call.clone()],
                ..Message::new(Role::Assistant, format!("step {step}"), step)
            },
            Message::tool_result(&call, output, step),
        ]
    }

    fn history(turns: u32) -> Vec<Message> {
        let mut m = vec![Message::new(Role::User, "the task", 0)];
        for s in 1..=turns {
            m.extend(turn(s, &format!("output {s}")));
        }
        m
    }

    #[test]
    fn older_history_keeps_the_task_and_the_last_turns_whole() {
        let m = history(5);
        let older = older_history(&m).unwrap();
        assert_eq!(older, 1..7);
        assert_eq!(m[older.end].role, Role::Assistant);
        // With two turns, everything but the last one goes.
        assert_eq!(older_history(&history(2)), Some(1..3));
        assert!(older_history(&history(1)).is_none());
        assert!(older_history(&history(0)).is_none());
    }

    #[test]
    fn an_earlier_summary_alone_is_not_summarised_again() {
        let m = history(4);
        let once = replace_with_summary(&m, older_history(&m).unwrap(), "s");
        // The summary and the last two turns: the older of them goes next.
        assert_eq!(older_history(&once), Some(1..4));
        let twice = replace_with_summary(&once, 1..4, "s2");
        assert_eq!(twice.len(), 4);
        assert!(older_history(&twice).is_none());
    }

    #[test]
    fn the_largest_tool_outputs_are_shortened_first_until_small_enough() {
        let mut m = history(3);
        m[2].content = "a".repeat(10_000);
        m[4].content = "b".repeat(50_000);
        m[6].content = "c".repeat(3_000);
        let small = |m: &[Message]| m.iter().map(|m| m.content.len()).sum::<usize>() < 20_000;
        assert!(shrink_tool_outputs(&mut m, small));
        // Only the largest one had to go.
        assert!(m[4].content.len() < 2_200, "{}", m[4].content.len());
        assert_eq!(m[2].content.len(), 10_000);
        assert_eq!(m[6].content.len(), 3_000);
        // Asked for less than the floors allow: every output ends near them.
        let never = |_: &[Message]| false;
        assert!(shrink_tool_outputs(&mut m, never));
        for i in [2, 4, 6] {
            assert!(m[i].content.len() < 400, "{}", m[i].content.len());
        }
        // Nothing left to cut: no change.
        assert!(!shrink_tool_outputs(&mut m, never));
    }

    #[test]
    fn summary_replaces_the_older_turns() {
        let m = history(4);
        let older = older_history(&m).unwrap();
        let out = replace_with_summary(&m, older, "did things");
        assert_eq!(out.len(), 1 + 1 + 4);
        assert_eq!(out[0].content, "the task");
        assert_eq!(out[1].role, Role::User);
        assert_eq!(out[1].content, format!("{SUMMARY_MARKER}\ndid things"));
        assert_eq!(out[2].content, "step 3");
        // Every tool result still follows its call.
        assert_eq!(out[3].tool_call_id.as_deref(), Some("c3"));
    }

    #[test]
    fn transcript_cuts_tool_outputs_first() {
        let mut m = history(1);
        m[2].content = "x".repeat(10_000);
        let text = transcript(&m, 100_000);
        assert!(
            text.contains("### assistant\nstep 1\n[call bash: {\"command\":\"ls\"}]"),
            "{text}"
        );
        assert!(text.contains("characters cut"));
        assert!(text.len() < 3_000);
    }

    #[test]
    fn long_tool_outputs_are_shortened_when_nothing_is_older() {
        let mut m = history(1);
        assert!(shorten_tool_outputs(&m).is_none());
        m[2].content = "y".repeat(50_000);
        let out = shorten_tool_outputs(&m).unwrap();
        assert!(out[2].content.len() < 3_000);
        assert_eq!(out[2].tool_call_id, m[2].tool_call_id);
    }

    #[test]
    fn estimates_are_chars_over_four() {
        let m = vec![Message::new(Role::User, "x".repeat(392), 0)];
        assert_eq!(estimate_tokens("", &m, &[]), 100);
    }
}
