//! The last phase: the loop runs to its end, the MCP servers and the
//! sandbox stop, and the human view gets the answer on stdout and the hint
//! to resume.

use serde_json::Value;

use super::wire::Wired;
use crate::events;
use crate::exit::{self, Status};
use crate::interactive::Ended;

/// Runs the wired agent to its end and reports it.
pub(super) async fn run_to_the_end(wired: Wired) -> Ended {
    let Wired {
        agent,
        answered,
        mcp,
        sandbox,
        json,
        quiet,
        resumable,
        volatile,
        store_cwd,
        compact,
    } = wired;
    if compact {
        let (outcome, doc) = agent.compact_keeping_doc().await;
        mcp.shutdown().await;
        return Ended {
            code: outcome.exit_code,
            doc: Some(doc),
            store_cwd,
        };
    }
    let json_answer = agent.answers_json();
    let (outcome, doc) = match answered {
        Some(output) => {
            let doc = agent.doc().clone();
            (agent.finish_now(Vec::new(), Status::Completed, output), doc)
        }
        None => agent.run_keeping_doc(Vec::new()).await,
    };
    mcp.shutdown().await;
    drop(sandbox);
    if !json {
        // Streamed onto this very terminal already: not shown twice.
        let shown = !json_answer
            && outcome.status == Status::Completed
            && events::human::answer_already_on_screen();
        if !shown {
            print_answer(&outcome.output, json_answer);
        }
        let hint = resumable.and_then(|path| {
            let store = volatile.then(|| events::human::Continue::for_dir(store_cwd.as_deref()));
            if outcome.exit_code == exit::TEMPFAIL {
                Some(events::human::outage_resume_hint(
                    &path,
                    store,
                    &outcome.down,
                ))
            } else {
                events::human::resume_hint(outcome.status, &path, store)
            }
        });
        if let Some(hint) = hint.filter(|_| !quiet) {
            eprintln!("{hint}");
        }
    }
    Ended {
        code: outcome.exit_code,
        doc: Some(doc),
        store_cwd,
    }
}

/// Prints the final answer on stdout: text as is, JSON as JSON. Under
/// `--output-schema` it is always the answer's compact JSON on one line.
fn print_answer(output: &Value, json_answer: bool) {
    use std::io::Write;
    let text = match output {
        Value::Null => return,
        Value::String(s) if !json_answer => s.clone(),
        other => other.to_string(),
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", text.trim_end_matches('\n'));
    let _ = out.flush();
}
