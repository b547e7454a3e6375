//! The task's text from stdin (SPEC section 1): stdin as the task, and a
//! piped stdin given with a TASK appended to it as context, both bounded.

use std::io::{IsTerminal, Read};

use crate::setup::SetupError;

/// The most stdin may hold (as the task or as context).
pub(crate) const MAX_STDIN_BYTES: u64 = 16 * 1024 * 1024;

/// The heading the piped text follows in the task.
pub(crate) const CONTEXT_HEADING: &str = "The following was piped to tinyagent on standard input:";

/// Reads all of stdin, at most `MAX_STDIN_BYTES`.
pub(crate) fn read_stdin() -> Result<Vec<u8>, SetupError> {
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(MAX_STDIN_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| SetupError(format!("cannot read stdin: {e}")))?;
    if bytes.len() as u64 > MAX_STDIN_BYTES {
        return Err(SetupError(format!(
            "stdin holds more than {} MiB; give a smaller input",
            MAX_STDIN_BYTES / (1024 * 1024)
        )));
    }
    Ok(bytes)
}

/// Stdin as the task text (`-`, or no TASK with a piped stdin).
pub(crate) fn stdin_task() -> Result<String, SetupError> {
    String::from_utf8(read_stdin()?)
        .map_err(|_| SetupError("cannot read the task from stdin: it is not UTF-8 text".into()))
}

/// `task` with a piped, non-empty stdin appended as context; a terminal
/// stdin is not read.
pub(crate) fn with_piped_context(task: String) -> Result<String, SetupError> {
    if std::io::stdin().is_terminal() {
        return Ok(task);
    }
    let bytes = read_stdin()?;
    Ok(append_context(task, &String::from_utf8_lossy(&bytes)))
}

/// The task, a blank line, the heading, and the text between `<stdin>`
/// tags; text that is only whitespace adds nothing.
pub(crate) fn append_context(task: String, text: &str) -> String {
    if text.trim().is_empty() {
        return task;
    }
    let text = text.strip_suffix('\n').unwrap_or(text);
    format!(
        "{}\n\n{CONTEXT_HEADING}\n<stdin>\n{text}\n</stdin>",
        task.trim_end()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_follows_the_task_under_a_heading() {
        assert_eq!(
            append_context("explain this".into(), "line 1\nline 2\n"),
            format!("explain this\n\n{CONTEXT_HEADING}\n<stdin>\nline 1\nline 2\n</stdin>")
        );
        assert_eq!(append_context("task".into(), " \n\t\n"), "task");
        assert_eq!(append_context("task".into(), ""), "task");
    }
}
