//! Which `bash` commands may run without asking: config `approval_allow`
//! prefixes, and the session's "always" answers (a command's first two
//! words). A command holding a shell control character never matches
//! either: `cargo test; rm -rf ~` is not `cargo test`.

use serde::{Deserialize, Deserializer};

/// What makes a command more than one program with its arguments: `;`,
/// `&`, `|`, a backquote, `$(`, `>`, `<` (SPEC 20), and a line break,
/// which separates commands as `;` does.
const CONTROL_CHARS: &[char] = &[';', '&', '|', '`', '>', '<', '\n', '\r'];

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

/// One `approval_allow` entry: a command prefix, checked when the config
/// is read (so a bad one is reported with its file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowPrefix(String);

impl AllowPrefix {
    /// Checks one entry: not empty, and no shell control character (a
    /// command holding one is always asked, so such a prefix could never
    /// match).
    pub(crate) fn parse(text: &str) -> Result<AllowPrefix, String> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err("approval_allow: an empty prefix would allow every command".into());
        }
        if let Some(name) = first_control(trimmed) {
            return Err(format!(
                "approval_allow: '{trimmed}' holds {name}; a command holding ;, &, |, a backquote, $(, > or < is always asked, so this prefix would never match"
            ));
        }
        Ok(AllowPrefix(trimmed.to_string()))
    }

    /// Whether `command` starts with this prefix followed by a space (or
    /// any blank) or its end.
    fn starts(&self, command: &str) -> bool {
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

/// Config `approval_allow`: commands that run without asking.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AllowList(Vec<AllowPrefix>);

impl AllowList {
    pub(crate) fn new(prefixes: Vec<AllowPrefix>) -> AllowList {
        AllowList(prefixes)
    }

    /// Whether `command` runs without asking: it starts with a prefix
    /// (followed by a space or its end) and holds no control character.
    pub(crate) fn allows(&self, command: &str) -> bool {
        let command = command.trim();
        !holds_shell_control(command) && self.0.iter().any(|p| p.starts(command))
    }
}

/// The first two words of `command` (fewer when it has fewer): what an
/// "always" answer remembers. A control character ends a word, as in the
/// shell: `make; rm x` starts with the one word `make`.
pub(crate) fn first_two_words(command: &str) -> Vec<String> {
    let end = CONTROL_CHARS
        .iter()
        .filter_map(|c| command.find(*c))
        .chain(command.find("$("))
        .min()
        .unwrap_or(command.len());
    command[..end]
        .split_whitespace()
        .take(2)
        .map(str::to_string)
        .collect()
}

/// Whether `command` is covered by an "always" answer given for `words`:
/// its first two words are those, and it holds no control character.
pub(crate) fn same_first_words(words: &[String], command: &str) -> bool {
    !words.is_empty()
        && !holds_shell_control(command)
        && command
            .split_whitespace()
            .take(2)
            .eq(words.iter().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(prefixes: &[&str]) -> AllowList {
        AllowList::new(
            prefixes
                .iter()
                .map(|p| AllowPrefix::parse(p).unwrap())
                .collect(),
        )
    }

    #[test]
    fn a_prefix_matches_followed_by_a_space_or_the_end() {
        let allow = list(&["cargo test", "git status", "ls"]);
        for yes in [
            "cargo test",
            "cargo test --quiet",
            "cargo test\t-p x",
            "  git status  ",
            "ls -la",
            "ls",
        ] {
            assert!(allow.allows(yes), "{yes}");
        }
        for no in [
            "cargo testing",
            "cargo tes",
            "cargo  test",
            "git stat",
            "lsblk",
            "rm -rf /",
            "",
            "echo cargo test",
        ] {
            assert!(!allow.allows(no), "{no}");
        }
    }

    #[test]
    fn control_characters_are_always_asked() {
        let allow = list(&["cargo test", "ls"]);
        for no in [
            "cargo test; rm -rf ~",
            "cargo test && rm -rf ~",
            "cargo test & rm -rf ~",
            "cargo test | sh",
            "cargo test || sh",
            "cargo test `rm -rf ~`",
            "cargo test $(rm -rf ~)",
            "cargo test > /etc/passwd",
            "cargo test < /dev/sda",
            "cargo test --x\nrm -rf ~",
            "ls 2>&1",
        ] {
            assert!(holds_shell_control(no), "{no}");
            assert!(!allow.allows(no), "{no}");
        }
        // `$` alone is a variable, not a command substitution.
        assert!(allow.allows("cargo test $HOME"));
    }

    #[test]
    fn entries_are_checked_when_read() {
        assert_eq!(
            AllowPrefix::parse("  cargo test "),
            Ok(AllowPrefix("cargo test".into()))
        );
        let e = AllowPrefix::parse(" ").unwrap_err();
        assert!(e.contains("empty prefix"), "{e}");
        let e = AllowPrefix::parse("make && make test").unwrap_err();
        assert!(e.contains("'make && make test' holds `&`"), "{e}");
        let e = AllowPrefix::parse("echo `x`").unwrap_err();
        assert!(e.contains("holds a backquote"), "{e}");
        let e = AllowPrefix::parse("echo $(x)").unwrap_err();
        assert!(e.contains("holds `$(`"), "{e}");
        let e: Result<Vec<AllowPrefix>, _> = serde_yaml::from_str("[ok, 'a;b']");
        assert!(e.unwrap_err().to_string().contains("holds `;`"));
    }

    #[test]
    fn always_answers_cover_the_same_first_two_words() {
        let words = first_two_words("  cargo test --quiet -p x");
        assert_eq!(words, ["cargo", "test"]);
        assert!(same_first_words(&words, "cargo test"));
        assert!(same_first_words(&words, "cargo  test --release"));
        assert!(!same_first_words(&words, "cargo build"));
        assert!(!same_first_words(&words, "cargo"));
        assert!(!same_first_words(&words, "cargo test && rm -rf ~"));
        assert_eq!(first_two_words("echo hello; ls | head"), ["echo", "hello"]);
        assert_eq!(first_two_words("make>log"), ["make"]);
        assert!(first_two_words("; ls").is_empty());
        let one = first_two_words("make");
        assert!(same_first_words(&one, "make"));
        assert!(!same_first_words(&one, "make install"));
        assert!(!same_first_words(&[], "anything"));
    }
}
