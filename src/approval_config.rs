//! What the config reads of approvals (SPEC 20): the `approval` mode and
//! the `approval_allow` prefixes, checked as the file is read, with the
//! shell-control rule the approval gate shares. A leaf: it imports nothing
//! of ours (the config imports leaves only).

use serde::{Deserialize, Deserializer};

/// `--approval` and config `approval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// You approve every bash command and every file change
    Ask,
    /// File changes run unasked; you approve bash commands
    Edits,
    /// Nothing is asked: every call the model makes runs
    Auto,
}

impl Mode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Ask => "ask",
            Mode::Edits => "edits",
            Mode::Auto => "auto",
        }
    }
}

/// What makes a command more than one program with its arguments: `;`,
/// `&`, `|`, a backquote, `$(`, `>`, `<` (SPEC 20), and a line break,
/// which separates commands as `;` does.
pub(crate) const CONTROL_CHARS: &[char] = &[';', '&', '|', '`', '>', '<', '\n', '\r'];

/// Whether `command` holds a shell control character or `$(`.
pub(crate) fn holds_shell_control(command: &str) -> bool {
    command.contains(CONTROL_CHARS) || command.contains("$(")
}

/// The control character or `$(` that `text` holds first, for messages.
fn first_control(text: &str) -> Option<&'static str> {
    const NAMES: &[(&str, &str)] = &[
        (";", "`;`"),
        ("&", "`&`"),
        ("|", "`|`"),
        ("`", "a backquote"),
        ("$(", "`$(`"),
        (">", "`>`"),
        ("<", "`<`"),
        ("\n", "a line break"),
        ("\r", "a carriage return"),
    ];
    NAMES
        .iter()
        .filter_map(|(pat, name)| text.find(pat).map(|at| (at, *name)))
        .min_by_key(|(at, _)| *at)
        .map(|(_, name)| name)
}

/// Why an `approval_allow` entry is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BadPrefix {
    #[error("approval_allow: an empty prefix would allow every command")]
    Empty,
    #[error("approval_allow: '{prefix}' holds {name}; a command holding ;, &, |, a backquote, $(, > or < is always asked, so this prefix would never match")]
    Control { prefix: String, name: &'static str },
}

/// One `approval_allow` entry: a command prefix, checked when the config
/// is read (so a bad one is reported with its file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AllowPrefix(String);

impl AllowPrefix {
    /// Checks one entry: not empty, and no shell control character (a
    /// command holding one is always asked, so such a prefix could never
    /// match).
    pub(crate) fn parse(text: &str) -> Result<AllowPrefix, BadPrefix> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(BadPrefix::Empty);
        }
        if let Some(name) = first_control(trimmed) {
            return Err(BadPrefix::Control {
                prefix: trimmed.to_string(),
                name,
            });
        }
        Ok(AllowPrefix(trimmed.to_string()))
    }

    /// Whether `command` starts with this prefix followed by a space (or
    /// any blank) or its end.
    pub(crate) fn starts(&self, command: &str) -> bool {
        command
            .strip_prefix(self.0.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
    }
}

impl<'de> Deserialize<'de> for AllowPrefix {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        AllowPrefix::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_checked_when_read() {
        assert_eq!(
            AllowPrefix::parse("  cargo test ").unwrap(),
            AllowPrefix("cargo test".into())
        );
        let e = AllowPrefix::parse(" ").unwrap_err().to_string();
        assert!(e.contains("empty prefix"), "{e}");
        let e = AllowPrefix::parse("make && make test")
            .unwrap_err()
            .to_string();
        assert!(e.contains("'make && make test' holds `&`"), "{e}");
        let e = AllowPrefix::parse("echo `x`").unwrap_err().to_string();
        assert!(e.contains("holds a backquote"), "{e}");
        let e = AllowPrefix::parse("echo $(x)").unwrap_err().to_string();
        assert!(e.contains("holds `$(`"), "{e}");
        let e: Result<Vec<AllowPrefix>, _> = serde_yaml::from_str("[ok, 'a;b']");
        assert!(e.unwrap_err().to_string().contains("holds `;`"));
    }
}
