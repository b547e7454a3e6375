//! Approvals (SPEC 20): whether a person approves `bash` commands and file
//! changes before they run. The agent loop sees only the `Gate` trait: a
//! run without one (`auto`, every unattended run) pays nothing. The
//! decision is `policy` (mode, `approval_allow` in `allow`, the session's
//! "always" answers); the question is `question` (what it shows) and
//! `terminal` (raw keys, read by `answer`).

mod allow;
mod answer;
mod policy;
mod question;
mod terminal;

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

pub(crate) use crate::approval_config::{AllowPrefix, Mode};
use allow::AllowList;
use answer::Answer;
pub(crate) use policy::Always;
use policy::{Kind, Policy};
use question::Paint;
pub(crate) use terminal::restore_terminal;

use crate::conversation::ToolCall;
use crate::events::Emitter;
use crate::setup::SetupError;
use crate::stop::Stop;

/// What a gate says about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Review {
    Run,
    /// Not run; the text is the call's failed result for the model.
    Declined(String),
}

/// Where a call would run, for the gate.
pub(crate) struct Where<'a> {
    pub cwd: &'a Path,
    /// The run's stop: a question gives way to it, and Ctrl-C at a
    /// question fires it.
    pub stop: &'a Stop,
    /// The run's events: the live view is held while a question is up.
    pub emitter: &'a Emitter,
}

/// Decides, before a tool call runs, whether it may.
#[async_trait]
pub(crate) trait Gate: Send + Sync {
    async fn review(&self, call: &ToolCall, at: Where<'_>) -> Review;
}

/// Where the mode came from, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Flag,
    Config,
}

/// The approval settings of a run, before it is known whether it is a
/// session: the mode given (if any) and `approval_allow`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Choice {
    given: Option<(Mode, Source)>,
    allow: AllowList,
}

impl Choice {
    /// `--approval` wins over config `approval`.
    pub(crate) fn resolve(
        flag: Option<Mode>,
        config: Option<Mode>,
        allow: Option<Vec<AllowPrefix>>,
    ) -> Choice {
        let given = flag
            .map(|m| (m, Source::Flag))
            .or(config.map(|m| (m, Source::Config)));
        Choice {
            given,
            allow: AllowList::new(allow.unwrap_or_default()),
        }
    }

    /// The gate of a run: `None` for `auto` (the default outside an
    /// interactive session, whose "always" answers are `session`). Asking
    /// where no one can answer (stdin or stderr not a terminal, `--json`)
    /// is a usage error.
    pub(crate) fn gate(
        &self,
        session: Option<&Always>,
        json: bool,
    ) -> Result<Option<Arc<dyn Gate>>, SetupError> {
        let mode = match (self.given, session) {
            (Some((mode, _)), _) => mode,
            (None, Some(_)) => Mode::Ask,
            (None, None) => Mode::Auto,
        };
        if mode == Mode::Auto {
            return Ok(None);
        }
        let nobody = if json {
            Some("--json has no one to answer")
        } else if !std::io::stdin().is_terminal() {
            Some("stdin is not a terminal")
        } else if !std::io::stderr().is_terminal() {
            Some("stderr is not a terminal")
        } else {
            None
        };
        if let Some(why) = nobody {
            let what = match self.given {
                Some((mode, Source::Flag)) => format!("--approval {}", mode.as_str()),
                Some((mode, Source::Config)) => format!("config approval: {}", mode.as_str()),
                None => "approval ask (the default in an interactive session)".into(),
            };
            return Err(SetupError(format!(
                "{what} needs a person at a terminal to approve commands, but {why}; give --approval auto to run commands and file changes without asking"
            )));
        }
        let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        Ok(Some(Arc::new(Asker {
            policy: Policy {
                mode,
                allow: self.allow.clone(),
                always: session.cloned().unwrap_or_default(),
            },
            paint: Paint(color),
        })))
    }
}

/// The gate that asks on the terminal.
struct Asker {
    policy: Policy,
    paint: Paint,
}

impl Asker {
    /// A file change made without asking is still shown, as its question
    /// would have shown it (SPEC 20: `edits` makes file changes without
    /// asking, not without saying).
    fn show_applied(&self, call: &ToolCall, at: &Where<'_>) {
        let width = terminal::width();
        let Some(body) = question::applied(&call.name, &call.arguments, at.cwd, width, self.paint)
        else {
            return;
        };
        at.emitter.hold_live(true);
        eprint!("{body}");
        at.emitter.hold_live(false);
    }
}

/// The failed result a declined call gets.
fn declined(reason: Option<&str>) -> String {
    match reason {
        Some(reason) => format!("declined by the user: {reason}"),
        None => "declined by the user".into(),
    }
}

#[async_trait]
impl Gate for Asker {
    async fn review(&self, call: &ToolCall, at: Where<'_>) -> Review {
        let kind = Kind::of(&call.name, &call.arguments);
        if !self.policy.must_ask(kind) {
            if kind == Kind::FileChange {
                self.show_applied(call, &at);
            }
            return Review::Run;
        }
        let width = terminal::width();
        let Some(question) =
            question::build(&call.name, &call.arguments, kind, at.cwd, width, self.paint)
        else {
            return Review::Run;
        };
        at.emitter.hold_live(true);
        let answer = terminal::ask(&question, width, self.paint, at.stop).await;
        at.emitter.hold_live(false);
        match answer {
            Ok(Answer::Yes) => Review::Run,
            Ok(Answer::Always) => {
                self.policy.always.remember(kind);
                Review::Run
            }
            Ok(Answer::No(reason)) => Review::Declined(declined(reason.as_deref())),
            Ok(Answer::Eof) => Review::Declined(declined(None)),
            Ok(Answer::Interrupted) => {
                at.stop.interrupt();
                Review::Declined(declined(None))
            }
            Err(terminal::NoAnswer::Stopped) => {
                Review::Declined("not run: the run was stopped".into())
            }
            Err(terminal::NoAnswer::NoTerminal(e)) => Review::Declined(format!(
                "not run: no terminal to ask the user for approval ({e})"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_and_the_default_depends_on_the_session() {
        let c = Choice::resolve(Some(Mode::Auto), Some(Mode::Ask), None);
        assert!(c.gate(None, false).unwrap().is_none());
        assert!(c.gate(Some(&Always::default()), false).unwrap().is_none());
        // No mode given: auto outside a session, whatever the terminal.
        let c = Choice::resolve(None, None, None);
        assert!(c.gate(None, true).unwrap().is_none());
    }

    #[test]
    fn asking_with_no_one_to_answer_is_a_usage_error() {
        // Unit tests run without a terminal on stdin; --json is said first.
        let c = Choice::resolve(Some(Mode::Ask), None, None);
        let e = c.gate(None, true).err().unwrap().0;
        assert_eq!(
            e,
            "--approval ask needs a person at a terminal to approve commands, but --json has no one to answer; give --approval auto to run commands and file changes without asking"
        );
        let c = Choice::resolve(None, Some(Mode::Edits), None);
        let e = c.gate(None, true).err().unwrap().0;
        assert!(e.starts_with("config approval: edits needs"), "{e}");
        let c = Choice::resolve(None, None, None);
        let e = c.gate(Some(&Always::default()), true).err().unwrap().0;
        assert!(
            e.starts_with("approval ask (the default in an interactive session)"),
            "{e}"
        );
    }

    #[test]
    fn the_mode_reads_from_config_strictly() {
        let mode: Mode = serde_yaml::from_str("edits").unwrap();
        assert_eq!(mode, Mode::Edits);
        let e = serde_yaml::from_str::<Mode>("sometimes")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown variant `sometimes`"), "{e}");
    }

    #[test]
    fn a_declined_call_says_so_with_the_reason() {
        assert_eq!(declined(None), "declined by the user");
        assert_eq!(
            declined(Some("too risky")),
            "declined by the user: too risky"
        );
    }
}
