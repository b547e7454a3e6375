//! Which `bash` commands may run without asking: config `approval_allow`
//! prefixes, and the session's "always" answers (a command's first two
//! words). A command holding a shell control character never matches
//! either: `cargo test; rm -rf ~` is not `cargo test`.

use crate::approval_config::{holds_shell_control, AllowPrefix, CONTROL_CHARS};

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
