//! Warnings a person is shown once per machine, not on every run: the
//! terminal view remembers which of them it has printed in a small file of
//! the state directory (`$XDG_STATE_HOME/tinyagent/notices`). The `warning`
//! events themselves are emitted on every run (`--json`, `--log-db`,
//! traces); only their stderr line is held back.

use std::fs;
use std::io::{Read, Write};
use std::path::PathBuf;

/// The most of the file read; past it the record starts over.
const MAX_BYTES: u64 = 64 * 1024;

/// Messages shown once, and where the ones shown are recorded.
#[derive(Debug, Clone)]
pub(crate) struct ShownOnce {
    path: PathBuf,
    messages: Vec<String>,
}

impl ShownOnce {
    /// `messages` are printed the first time only; `path` records them.
    pub(crate) fn new(path: PathBuf, messages: Vec<String>) -> ShownOnce {
        ShownOnce { path, messages }
    }

    /// Whether `message` is to be printed: always for a message that is
    /// not one of these; else when it is not recorded yet (it is now). A
    /// record that cannot be read or written never hides a message.
    pub(crate) fn show(&self, message: &str) -> bool {
        if !self.messages.iter().any(|m| m == message) || message.contains('\n') {
            return true;
        }
        let mut seen = String::new();
        let size = match fs::File::open(&self.path) {
            Ok(f) => f.take(MAX_BYTES).read_to_string(&mut seen).unwrap_or(0),
            Err(_) => 0,
        };
        if seen.lines().any(|line| line == message) {
            return false;
        }
        let _ = self.record(message, size as u64 >= MAX_BYTES);
        true
    }

    fn record(&self, message: &str, start_over: bool) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir)?;
        }
        let mut file = fs::OpenOptions::new()
            .create(true)
            .append(!start_over)
            .write(true)
            .truncate(start_over)
            .open(&self.path)?;
        file.write_all(format!("{message}\n").as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_message_is_shown_once_and_others_always() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/notices");
        let once = ShownOnce::new(path.clone(), vec!["dearer".into()]);
        assert!(once.show("dearer"));
        assert!(!once.show("dearer"));
        assert!(once.show("other"));
        assert!(once.show("other"));
        // Another run reads the same record.
        let again = ShownOnce::new(path.clone(), vec!["dearer".into(), "new".into()]);
        assert!(!again.show("dearer"));
        assert!(again.show("new"));
        assert_eq!(fs::read_to_string(&path).unwrap(), "dearer\nnew\n");
    }

    #[test]
    fn an_unusable_record_hides_nothing_and_a_full_one_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        fs::write(&blocker, "x").unwrap();
        let once = ShownOnce::new(blocker.join("notices"), vec!["m".into()]);
        assert!(once.show("m") && once.show("m"));
        let path = dir.path().join("notices");
        fs::write(&path, "y\n".repeat(40_000)).unwrap();
        let once = ShownOnce::new(path.clone(), vec!["m".into()]);
        assert!(once.show("m"));
        assert_eq!(fs::read_to_string(&path).unwrap(), "m\n");
        assert!(!once.show("m"));
    }
}
