//! `--resume FILE` (SPEC section 9): loading and checking a trajectory
//! checkpoint, and turning it into the document and first messages of the
//! run that continues it.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::conversation::{Message, Role};
use crate::exit::Status;
use crate::model::spec::ModelSpec;
use crate::setup::SetupError;
use crate::trajectory::{self, StartedCall, Trajectory};

/// What a started tool call with no recorded result becomes.
pub(crate) const INTERRUPTED_CALL: &str = "interrupted: the run stopped while this call was running, so its outcome is unknown (it may have done part or all of its work). It was NOT re-run; check its effects before calling it again.";
/// What a call that never started becomes.
pub(crate) const UNSTARTED_CALL: &str =
    "not run: the run stopped before this call started. Call it again if it is still needed.";
/// Added when the checkpoint ended on an answer that still has to be
/// given (and checked) again.
pub(crate) const ANSWER_AGAIN_NOTE: &str =
    "The run was resumed after it stopped. Continue with the task and give your final answer.";
/// Added when the checkpoint ended on a reply cut off by the token limit.
pub(crate) const CUT_OFF_NOTE: &str = "Your last reply was cut off by the output token limit. Continue with a shorter reply, for example by splitting large file writes.";

/// A loaded checkpoint that may be resumed.
#[derive(Debug)]
pub struct Checkpointed {
    pub path: PathBuf,
    pub doc: Trajectory,
    /// Tool calls the journal records as started.
    pub started: Vec<StartedCall>,
}

/// Loads FILE and its journal, refusing what cannot be resumed: a finished
/// run is continued only when a follow-up TASK is given.
pub(crate) fn load_for(path: &Path, has_task: bool) -> Result<Checkpointed, SetupError> {
    let cp = read(path)?;
    check_status(&cp, has_task)?;
    Ok(cp)
}

/// A finished (`submitted`, `completed`) run continues only with a TASK.
pub(crate) fn check_status(cp: &Checkpointed, has_task: bool) -> Result<(), SetupError> {
    if !has_task && matches!(cp.doc.status, Status::Submitted | Status::Completed) {
        return Err(SetupError(format!(
            "cannot resume {}: the run already finished ({}); give a TASK to continue it with a follow-up (only an unfinished run (error, interrupted, running, a limit, output_truncated) resumes without one)",
            cp.path.display(),
            cp.doc.status.as_str()
        )));
    }
    Ok(())
}

/// Loads FILE and its journal, whatever the run's status.
pub(crate) fn read(path: &Path) -> Result<Checkpointed, SetupError> {
    let refuse = |why: String| SetupError(format!("cannot resume {}: {why}", path.display()));
    if !path.is_file() {
        return Err(refuse("no such trajectory file".into()));
    }
    let (doc, started) =
        trajectory::load_checkpoint(path).map_err(|e| SetupError(format!("cannot resume: {e}")))?;
    if doc.schema_version != 1 {
        return Err(refuse(format!(
            "unsupported trajectory schema_version {}",
            doc.schema_version
        )));
    }
    Ok(Checkpointed {
        path: path.to_path_buf(),
        doc,
        started,
    })
}

/// The checkpoint's primary model is the run's: a different `--model` is
/// refused (the chain, not the primary, may change on resume).
pub(crate) fn check_model(flag: Option<&str>, cp: &Checkpointed) -> Result<(), SetupError> {
    let Some(flag) = flag else { return Ok(()) };
    let wanted = ModelSpec::parse(flag).map_err(|e| SetupError(e.to_string()))?;
    let primary = ModelSpec::parse(&cp.doc.model).map_err(|e| SetupError(e.to_string()))?;
    if wanted != primary {
        return Err(SetupError(format!(
            "cannot resume {}: --model {wanted} is not the checkpoint's primary model {primary} (a resumed run keeps its primary; use --fallback-model to add models)",
            cp.path.display()
        )));
    }
    Ok(())
}

/// Where a resumed run starts.
#[derive(Debug)]
pub(crate) struct Continuation {
    /// The document of the new run, with the checkpoint's history.
    pub doc: Trajectory,
    /// Messages to add before the first step (tool results for unfinished
    /// calls, the new TASK).
    pub new_messages: Vec<Message>,
    /// The checkpoint's last reply was already a final answer (a crash
    /// before the run recorded its end): the run completes with it.
    pub answered: Option<Value>,
}

/// The new run's identity and chain.
pub(crate) struct NewRun<'a> {
    pub run_id: &'a str,
    pub fallback_models: Vec<String>,
    pub cwd: &'a str,
    pub task: Option<&'a str>,
    pub started_at: String,
    /// Final answers go through checks (`--output-schema`, stop hooks), so
    /// one found in the checkpoint cannot simply be taken.
    pub answers_are_checked: bool,
}

/// Turns a checkpoint into the continuing run.
pub(crate) fn continue_run(cp: Checkpointed, new: NewRun) -> Continuation {
    let Checkpointed {
        mut doc, started, ..
    } = cp;
    let old_status = doc.status;
    doc.resumed_from = Some(std::mem::replace(&mut doc.run_id, new.run_id.to_string()));
    // A checkpoint from before lineages began its own.
    if doc.lineage.is_none() {
        doc.lineage = doc.resumed_from.clone();
    }
    doc.tinyagent_version = env!("CARGO_PKG_VERSION").to_string();
    doc.fallback_models = new.fallback_models;
    doc.active_model = doc.model.clone();
    doc.status = Status::Running;
    doc.error = None;
    doc.finished_at = None;
    doc.output = Value::Null;
    doc.started_at = new.started_at;
    doc.cwd = Some(new.cwd.to_string());
    // A step whose response is recorded counts, even if the crash came
    // before its counters were.
    let last_step = doc
        .messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| m.step)
        .max()
        .unwrap_or(0);
    doc.steps = doc.steps.max(last_step);

    let mut new_messages = unanswered_calls(&doc.messages, &started);
    let mut answered = None;
    let ends_on_answer = new_messages.is_empty()
        && doc
            .messages
            .last()
            .is_some_and(|m| m.role == Role::Assistant && m.tool_calls.is_empty());
    match new.task {
        Some(task) => new_messages.push(Message::new(Role::User, task, doc.steps)),
        None if ends_on_answer && old_status == Status::OutputTruncated => {
            new_messages.push(Message::new(Role::User, CUT_OFF_NOTE, doc.steps));
        }
        // A crash right after a final answer that needed no checks: the
        // run had completed, only its end was not recorded.
        None if ends_on_answer && old_status == Status::Running && !new.answers_are_checked => {
            let text = doc
                .messages
                .last()
                .map(|m| m.content.clone())
                .unwrap_or_default();
            answered = Some(Value::String(text));
        }
        None if ends_on_answer => {
            new_messages.push(Message::new(Role::User, ANSWER_AGAIN_NOTE, doc.steps));
        }
        None => {}
    }
    Continuation {
        doc,
        new_messages,
        answered,
    }
}

/// Tool results for the last reply's calls that have none: started ones
/// are reported as interrupted with unknown outcome, never re-run.
fn unanswered_calls(messages: &[Message], started: &[StartedCall]) -> Vec<Message> {
    let Some(at) = messages.iter().rposition(|m| m.role == Role::Assistant) else {
        return Vec::new();
    };
    let reply = &messages[at];
    let answered: HashSet<&str> = messages[at + 1..]
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    reply
        .tool_calls
        .iter()
        .filter(|call| !answered.contains(call.id.as_str()))
        .map(|call| {
            let was_started = started
                .iter()
                .any(|(step, id)| *step == reply.step && *id == call.id);
            let text = if was_started {
                INTERRUPTED_CALL
            } else {
                UNSTARTED_CALL
            };
            Message::tool_result(call, text, reply.step)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::ToolCall;
    use crate::trajectory::Totals;

    fn doc(status: Status, messages: Vec<Message>) -> Trajectory {
        Trajectory {
            schema_version: 1,
            tinyagent_version: "0".into(),
            run_id: "old".into(),
            task: "t".into(),
            model: "script/a".into(),
            fallback_models: vec![],
            active_model: "script/b".into(),
            status,
            error: Some("boom".into()),
            started_at: "then".into(),
            finished_at: None,
            steps: 1,
            totals: Totals::default(),
            model_switches: vec![],
            hedges: vec![],
            reply_caps: Default::default(),
            plan: vec![],
            messages,
            output: Value::Null,
            resumed_from: None,
            lineage: None,
            cwd: None,
            worktree: None,
        }
    }

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: serde_json::json!({"command": "sleep 30"}),
            garbled: false,
            oversized: None,
        }
    }

    fn reply(step: u32, calls: Vec<ToolCall>) -> Message {
        Message {
            tool_calls: calls,
            model: Some("script/a".into()),
            ..Message::new(Role::Assistant, "ok", step)
        }
    }

    fn new(task: Option<&str>) -> NewRun<'_> {
        NewRun {
            run_id: "new",
            fallback_models: vec!["script/c".into()],
            cwd: "/w",
            task,
            started_at: "now".into(),
            answers_are_checked: false,
        }
    }

    fn checkpointed(doc: Trajectory, started: Vec<StartedCall>) -> Checkpointed {
        Checkpointed {
            path: "t.json".into(),
            doc,
            started,
        }
    }

    #[test]
    fn started_calls_are_interrupted_and_unstarted_ones_not_run() {
        let messages = vec![
            Message::new(Role::User, "t", 0),
            reply(2, vec![call("a"), call("b"), call("c")]),
            Message::tool_result(&call("a"), "done", 2),
        ];
        let started = vec![(2, "a".into()), (2, "b".into())];
        let c = continue_run(
            checkpointed(doc(Status::Running, messages), started),
            new(Some("more")),
        );
        assert_eq!(c.doc.steps, 2);
        assert_eq!(c.doc.run_id, "new");
        assert_eq!(c.doc.resumed_from.as_deref(), Some("old"));
        assert_eq!(c.doc.lineage.as_deref(), Some("old"));
        assert_eq!(c.doc.cache_key(), "tinyagent-old");
        assert_eq!(c.doc.active_model, "script/a");
        assert_eq!(c.doc.fallback_models, ["script/c"]);
        assert_eq!(c.doc.status, Status::Running);
        assert!(c.doc.error.is_none());
        let texts: Vec<(&str, Option<&str>)> = c
            .new_messages
            .iter()
            .map(|m| (m.content.as_str(), m.tool_call_id.as_deref()))
            .collect();
        assert_eq!(
            texts,
            [
                (INTERRUPTED_CALL, Some("b")),
                (UNSTARTED_CALL, Some("c")),
                ("more", None)
            ]
        );
        assert!(c.answered.is_none());
    }

    #[test]
    fn a_lineage_is_kept_across_resumes() {
        let messages = vec![Message::new(Role::User, "t", 0)];
        let mut second = doc(Status::Running, messages);
        second.run_id = "second".into();
        second.lineage = Some("first".into());
        let c = continue_run(checkpointed(second, vec![]), new(Some("more")));
        assert_eq!(c.doc.resumed_from.as_deref(), Some("second"));
        assert_eq!(c.doc.lineage.as_deref(), Some("first"));
        assert_eq!(c.doc.cache_key(), "tinyagent-first");
        let fresh = doc(Status::Running, vec![]);
        assert_eq!(fresh.cache_key(), "tinyagent-old");
    }

    #[test]
    fn a_final_answer_already_given_completes_the_run() {
        let messages = vec![Message::new(Role::User, "t", 0), reply(1, vec![])];
        let c = continue_run(
            checkpointed(doc(Status::Running, messages.clone()), vec![]),
            new(None),
        );
        assert_eq!(c.answered, Some(Value::String("ok".into())));
        // With a new task the run goes on instead.
        let c = continue_run(
            checkpointed(doc(Status::Running, messages.clone()), vec![]),
            new(Some("next")),
        );
        assert!(c.answered.is_none());
        assert_eq!(c.new_messages[0].content, "next");
        // An answer that ended the run with an error (e.g. invalid for the
        // output schema) or that needs checks is asked for again.
        let c = continue_run(
            checkpointed(doc(Status::Error, messages.clone()), vec![]),
            new(None),
        );
        assert!(c.answered.is_none());
        assert_eq!(c.new_messages[0].content, ANSWER_AGAIN_NOTE);
        let checked = NewRun {
            answers_are_checked: true,
            ..new(None)
        };
        let c = continue_run(
            checkpointed(doc(Status::Running, messages.clone()), vec![]),
            checked,
        );
        assert!(c.answered.is_none());
        // A cut-off reply is continued, not taken as the answer.
        let c = continue_run(
            checkpointed(doc(Status::OutputTruncated, messages), vec![]),
            new(None),
        );
        assert!(c.answered.is_none());
        assert_eq!(c.new_messages[0].content, CUT_OFF_NOTE);
    }

    #[test]
    fn a_failed_request_is_redone_under_its_number() {
        let messages = vec![
            Message::new(Role::User, "t", 0),
            reply(1, vec![call("a")]),
            Message::tool_result(&call("a"), "done", 1),
        ];
        let c = continue_run(
            checkpointed(doc(Status::Error, messages), vec![(1, "a".into())]),
            new(None),
        );
        assert_eq!(c.doc.steps, 1);
        assert!(c.new_messages.is_empty());
        assert!(c.answered.is_none());
    }

    #[test]
    fn a_different_model_is_refused() {
        let cp = checkpointed(doc(Status::Error, vec![]), vec![]);
        assert!(check_model(None, &cp).is_ok());
        assert!(check_model(Some("script/a"), &cp).is_ok());
        let e = check_model(Some("script/z"), &cp).unwrap_err();
        assert!(e.0.contains("script/z") && e.0.contains("script/a"), "{e}");
    }
}
