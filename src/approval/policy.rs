//! The decision itself, with no terminal in sight: which calls a mode asks
//! about, what the allow list and the session's "always" answers let
//! through, and what an "always" answer remembers.

use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::allow::{first_two_words, same_first_words, AllowList};
use super::Mode;

/// What a tool call is, for approvals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind<'a> {
    /// `bash`, with its command.
    Command(&'a str),
    /// `write_file` or `edit_file`.
    FileChange,
    /// Anything else (reads, searches, plans, MCP tools): never asked.
    Other,
}

impl<'a> Kind<'a> {
    /// The kind of a call to `tool` with `arguments`. A `bash` call with no
    /// command string cannot run anything: it fails on its own, unasked.
    pub(crate) fn of(tool: &str, arguments: &'a Value) -> Kind<'a> {
        match tool {
            "bash" => match arguments.get("command").and_then(Value::as_str) {
                Some(command) => Kind::Command(command),
                None => Kind::Other,
            },
            "write_file" | "edit_file" => Kind::FileChange,
            _ => Kind::Other,
        }
    }
}

/// What the session was told "always" about.
#[derive(Debug, Default)]
struct Remembered {
    /// Every file change runs without asking.
    file_changes: bool,
    /// Commands whose first two words are one of these run without asking.
    commands: Vec<Vec<String>>,
}

/// The "always" answers of a session, shared by its runs (and their
/// subagents). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct Always(Arc<Mutex<Remembered>>);

impl Always {
    fn lock(&self) -> std::sync::MutexGuard<'_, Remembered> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers an "always" answer to a call of `kind`.
    pub(crate) fn remember(&self, kind: Kind<'_>) {
        let mut remembered = self.lock();
        match kind {
            Kind::FileChange => remembered.file_changes = true,
            Kind::Command(command) => {
                let words = first_two_words(command);
                if !words.is_empty() && !remembered.commands.contains(&words) {
                    remembered.commands.push(words);
                }
            }
            Kind::Other => {}
        }
    }

    fn covers(&self, kind: Kind<'_>) -> bool {
        let remembered = self.lock();
        match kind {
            Kind::FileChange => remembered.file_changes,
            Kind::Command(command) => remembered
                .commands
                .iter()
                .any(|words| same_first_words(words, command)),
            Kind::Other => true,
        }
    }
}

/// What an "always" answer would cover, said at the question: `cargo test`
/// commands, or every file change. `None` for a command that no "always"
/// can cover (one holding shell control characters, SPEC 20): it is not
/// offered, since the same command would be asked again.
pub(crate) fn always_covers(kind: Kind<'_>) -> Option<String> {
    match kind {
        Kind::Command(command) => {
            let words = first_two_words(command);
            same_first_words(&words, command).then(|| format!("`{}` commands", words.join(" ")))
        }
        _ => Some("every file change".into()),
    }
}

/// A run's approval policy: its mode, the allow list and the session's
/// "always" answers.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub mode: Mode,
    pub allow: AllowList,
    pub always: Always,
}

impl Policy {
    /// Whether a call of `kind` needs a person's answer before it runs.
    pub(crate) fn must_ask(&self, kind: Kind<'_>) -> bool {
        let asked = match (self.mode, kind) {
            (Mode::Auto, _) | (_, Kind::Other) => false,
            (Mode::Edits, Kind::FileChange) => false,
            (Mode::Ask, Kind::FileChange) => true,
            (Mode::Ask | Mode::Edits, Kind::Command(command)) => !self.allow.allows(command),
        };
        asked && !self.always.covers(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval_config::AllowPrefix;
    use serde_json::json;

    fn policy(mode: Mode, allow: &[&str]) -> Policy {
        Policy {
            mode,
            allow: AllowList::new(
                allow
                    .iter()
                    .map(|p| AllowPrefix::parse(p).unwrap())
                    .collect(),
            ),
            always: Always::default(),
        }
    }

    #[test]
    fn each_mode_asks_about_its_calls() {
        let ask = policy(Mode::Ask, &[]);
        let edits = policy(Mode::Edits, &[]);
        let auto = policy(Mode::Auto, &[]);
        let command = Kind::Command("rm -rf target");
        assert!(ask.must_ask(command) && ask.must_ask(Kind::FileChange));
        assert!(edits.must_ask(command) && !edits.must_ask(Kind::FileChange));
        assert!(!auto.must_ask(command) && !auto.must_ask(Kind::FileChange));
        for p in [&ask, &edits, &auto] {
            assert!(!p.must_ask(Kind::Other));
        }
    }

    #[test]
    fn kinds_come_from_the_tool_and_its_arguments() {
        let args = json!({"command": "ls"});
        assert_eq!(Kind::of("bash", &args), Kind::Command("ls"));
        assert_eq!(Kind::of("bash", &json!({})), Kind::Other);
        assert_eq!(Kind::of("write_file", &json!({})), Kind::FileChange);
        assert_eq!(Kind::of("edit_file", &json!({})), Kind::FileChange);
        for other in [
            "read_file",
            "grep",
            "plan",
            "delegate",
            "mcp__x__y",
            "submit",
        ] {
            assert_eq!(Kind::of(other, &args), Kind::Other, "{other}");
        }
    }

    #[test]
    fn the_allow_list_and_always_answers_skip_the_question() {
        let p = policy(Mode::Ask, &["cargo test"]);
        assert!(!p.must_ask(Kind::Command("cargo test --quiet")));
        assert!(p.must_ask(Kind::Command("cargo test; rm -rf ~")));
        assert!(p.must_ask(Kind::Command("git push")));
        p.always.remember(Kind::Command("git push origin main"));
        assert!(!p.must_ask(Kind::Command("git push")));
        assert!(!p.must_ask(Kind::Command("git push --force")));
        assert!(p.must_ask(Kind::Command("git push | sh")));
        assert!(p.must_ask(Kind::Command("git pull")));
        assert!(p.must_ask(Kind::FileChange));
        // The answers are the session's: a clone (another run) shares them.
        let next_run = Policy {
            always: p.always.clone(),
            ..policy(Mode::Ask, &[])
        };
        next_run.always.remember(Kind::FileChange);
        assert!(!p.must_ask(Kind::FileChange));
        assert!(!next_run.must_ask(Kind::Command("git push -u")));
    }

    #[test]
    fn the_question_says_what_always_covers() {
        let covers = |kind| always_covers(kind).unwrap_or_default();
        assert_eq!(
            covers(Kind::Command("cargo test -q")),
            "`cargo test` commands"
        );
        assert_eq!(covers(Kind::Command("make")), "`make` commands");
        assert_eq!(covers(Kind::FileChange), "every file change");
        // No "always" could cover these: it is not offered.
        for command in [
            "sleep 30; echo built",
            "cargo build && ls",
            "ls | head",
            "; ls",
        ] {
            assert_eq!(always_covers(Kind::Command(command)), None, "{command}");
        }
    }
}
