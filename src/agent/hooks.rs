//! Hooks from config (`hooks.stop`, `hooks.pre_tool`, `hooks.post_tool`):
//! shell commands run with `bash -c` in the working directory, given a JSON
//! payload on stdin. A non-zero exit is the hook saying no; its combined
//! stdout and stderr is the message.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::stop::Stop;
use crate::tools::process::GuardedChild;
use crate::tools::shorten;

/// A hook that runs longer than this is killed and counts as failed.
const HOOK_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest hook output passed on to the model.
const MAX_HOOK_OUTPUT_CHARS: usize = 8_000;

/// The configured hook commands.
#[derive(Debug, Clone, Default)]
pub(crate) struct Hooks {
    pub stop: Vec<String>,
    pub pre_tool: Vec<String>,
    pub post_tool: Vec<String>,
}

/// A hook that said no: which command, and what it printed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HookRefusal {
    pub command: String,
    pub message: String,
}

impl HookRefusal {
    /// `hook `cmd` failed (exit 1):\n<output>`
    pub(crate) fn describe(&self, kind: &str) -> String {
        format!("{kind} hook `{}` {}", self.command, self.message)
    }
}

/// Runs `commands` in order with `payload` on stdin; the first that exits
/// non-zero (or cannot run, or times out) stops the list and is returned.
pub(crate) async fn run_all(
    commands: &[String],
    payload: &Value,
    cwd: &Path,
    stop: &Stop,
) -> Option<HookRefusal> {
    for command in commands {
        if let Err(failure) = run_one(command, payload, cwd, stop).await {
            return Some(HookRefusal {
                command: command.clone(),
                message: failure.to_string(),
            });
        }
    }
    None
}

/// Why a hook said no, with its output.
#[derive(Debug, thiserror::Error)]
enum HookFailure {
    #[error("could not start: {0}")]
    Start(std::io::Error),
    #[error("timed out after {}s", HOOK_TIMEOUT.as_secs())]
    TimedOut,
    #[error("was stopped: the run was interrupted")]
    Stopped,
    #[error("failed (exit {code}):\n{output}")]
    Exit { code: i32, output: String },
    #[error("was killed by a signal:\n{0}")]
    Killed(String),
}

/// Runs one hook; `Err` holds why it failed and its output.
async fn run_one(
    command: &str,
    payload: &Value,
    cwd: &Path,
    stop: &Stop,
) -> Result<(), HookFailure> {
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(format!("exec 2>&1\n{command}"))
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut guarded = GuardedChild::spawn(cmd).map_err(HookFailure::Start)?;
    let mut stdin = guarded.child.stdin.take();
    let mut stdout = guarded.child.stdout.take();
    let input = serde_json::to_vec(payload).unwrap_or_default();
    let write = async {
        if let Some(pipe) = stdin.as_mut() {
            // A hook that ignores its stdin may close it early: not an error.
            let _ = pipe.write_all(&input).await;
            let _ = pipe.shutdown().await;
        }
        drop(stdin.take());
    };
    let read = async {
        let mut buf = Vec::new();
        if let Some(pipe) = stdout.as_mut() {
            let _ = pipe.read_to_end(&mut buf).await;
        }
        buf
    };
    let run = async {
        let ((), buf) = tokio::join!(write, read);
        let status = guarded.child.wait().await;
        (buf, status)
    };
    let outcome = tokio::select! {
        done = run => Ok(done),
        _ = tokio::time::sleep(HOOK_TIMEOUT) => Err(HookFailure::TimedOut),
        _ = stop.fired() => Err(HookFailure::Stopped),
    };
    let (buf, status) = match outcome {
        Ok(done) => done,
        Err(reason) => {
            guarded.kill_group();
            return Err(reason);
        }
    };
    let text = shorten(
        String::from_utf8_lossy(&buf).trim_end(),
        MAX_HOOK_OUTPUT_CHARS,
    );
    match status.ok().and_then(|s| s.code()) {
        Some(0) => Ok(()),
        Some(code) => Err(HookFailure::Exit { code, output: text }),
        None => Err(HookFailure::Killed(text)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(commands: &[&str], payload: Value) -> Option<HookRefusal> {
        let dir = tempfile::tempdir().unwrap();
        let commands: Vec<String> = commands.iter().map(|c| c.to_string()).collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(run_all(&commands, &payload, dir.path(), &Stop::never()))
    }

    #[test]
    fn passing_hooks_return_none() {
        assert_eq!(run(&["true", "cat >/dev/null"], json!({"a": 1})), None);
    }

    #[test]
    fn the_first_failure_is_returned_with_its_output() {
        let refusal = run(&["true", "echo no way >&2; exit 3", "exit 4"], json!({})).unwrap();
        assert_eq!(refusal.command, "echo no way >&2; exit 3");
        assert_eq!(refusal.message, "failed (exit 3):\nno way");
    }

    #[test]
    fn the_payload_arrives_on_stdin() {
        let message = run(&["cat; exit 5"], json!({"tool": "bash"}))
            .unwrap()
            .message;
        assert_eq!(message, "failed (exit 5):\n{\"tool\":\"bash\"}");
    }
}
