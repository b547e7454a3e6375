//! The `bash` tool: runs a command in the working directory with a timeout,
//! returning combined stdout and stderr and the exit code.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use super::process::GuardedChild;
use super::{shorten, str_arg, Tool, ToolCtx, ToolOutput, MAX_OUTPUT_CHARS};
use crate::conversation::ToolSpec;

/// Default and largest command timeouts.
const DEFAULT_TIMEOUT: u64 = 120;
const MAX_TIMEOUT: u64 = 3600;

/// How a command is started; the sandbox wraps it.
pub(crate) trait CommandBuilder: Send + Sync {
    fn build(&self, script: &str, ctx: &ToolCtx) -> Command;
}

/// Plain `bash -c`, stderr merged into stdout.
pub(crate) struct PlainBash;

impl CommandBuilder for PlainBash {
    fn build(&self, script: &str, ctx: &ToolCtx) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(format!("exec 2>&1\n{script}"))
            .current_dir(&ctx.cwd);
        cmd
    }
}

/// Environment variables for the command about to start, published by
/// someone outside the tool (the trace sink puts the current tool span's
/// `TRACEPARENT` here when a call starts). Empty unless something sets it.
#[derive(Clone, Default)]
pub(crate) struct SpawnEnv(Arc<Mutex<Vec<(String, String)>>>);

impl SpawnEnv {
    /// Replaces the variables given to the next commands.
    pub(crate) fn set(&self, vars: Vec<(String, String)>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = vars;
    }

    fn get(&self) -> Vec<(String, String)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The `bash` tool.
pub(crate) struct BashTool {
    builder: Box<dyn CommandBuilder>,
    env: SpawnEnv,
}

impl BashTool {
    pub(crate) fn new(builder: Box<dyn CommandBuilder>) -> Self {
        BashTool {
            builder,
            env: SpawnEnv::default(),
        }
    }

    /// Gives each command the variables in `env` at the moment it starts.
    pub(crate) fn with_env(mut self, env: SpawnEnv) -> Self {
        self.env = env;
        self
    }
}

#[async_trait]
impl Tool for BashTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "bash".into(),
            description: "Run a bash command in the working directory. Returns combined stdout and stderr; a non-zero exit code is reported.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command to run."},
                    "timeout_seconds": {"type": "integer", "description": "Kill the command after this many seconds (default 120)."}
                },
                "required": ["command"]
            }),
        }
    }

    async fn run(&self, args: &Value, ctx: &ToolCtx) -> ToolOutput {
        let command = match str_arg(args, "command") {
            Ok(c) => c,
            Err(e) => return ToolOutput::err(e.to_string()),
        };
        let timeout = args
            .get("timeout_seconds")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_TIMEOUT)
            .clamp(1, MAX_TIMEOUT);
        let mut cmd = self.builder.build(command, ctx);
        cmd.envs(self.env.get());
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut guarded = match GuardedChild::spawn(cmd) {
            Ok(g) => g,
            Err(e) => return ToolOutput::err(format!("could not start bash: {e}")),
        };
        let Some(mut stdout) = guarded.child.stdout.take() else {
            return ToolOutput::err("could not capture the command's output");
        };
        let mut collected = Collected::default();
        let mut chunk = vec![0u8; 16 * 1024];
        let mut status = None;
        let mut eof = false;
        let deadline = tokio::time::sleep(Duration::from_secs(timeout));
        tokio::pin!(deadline);
        // After the shell exits, background processes may keep the pipe open:
        // take what they wrote within a short grace period, then stop them.
        let grace = tokio::time::sleep(Duration::from_secs(3600));
        tokio::pin!(grace);
        let failure = loop {
            if eof && status.is_some() {
                break None;
            }
            tokio::select! {
                read = stdout.read(&mut chunk), if !eof => match read {
                    Ok(0) | Err(_) => eof = true,
                    Ok(n) => collected.push(&chunk[..n]),
                },
                exit = guarded.child.wait(), if status.is_none() => {
                    status = Some(exit.ok().and_then(|s| s.code()));
                    grace.as_mut().reset(tokio::time::Instant::now() + BACKGROUND_GRACE);
                }
                _ = &mut grace, if status.is_some() => break None,
                _ = &mut deadline => break Some(format!("timed out after {timeout}s")),
                _ = ctx.stop.fired() => break Some("stopped: the run was interrupted".to_string()),
            }
        };
        guarded.kill_group();
        let text = shorten(&collected.text(), MAX_OUTPUT_CHARS);
        match (failure, status.flatten()) {
            (Some(reason), _) => ToolOutput::err(format!(
                "{text}\n[command {reason}; its processes were killed]"
            )),
            (None, Some(0)) => ToolOutput::ok(text),
            (None, Some(code)) => ToolOutput::err(format!("{text}\n[exit code: {code}]")),
            (None, None) => ToolOutput::err(format!("{text}\n[killed by a signal]")),
        }
    }
}

/// How long output from background processes is still read after the
/// shell itself exited.
const BACKGROUND_GRACE: Duration = Duration::from_millis(200);
/// Output kept in memory: the head and the tail of anything longer.
const KEEP_BYTES: usize = 1024 * 1024;

/// A command's output, bounded in memory: past `2 * KEEP_BYTES` the middle
/// is dropped (and counted) as it arrives.
#[derive(Default)]
struct Collected {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    dropped: usize,
}

impl Collected {
    fn push(&mut self, bytes: &[u8]) {
        let room = KEEP_BYTES.saturating_sub(self.head.len());
        let (to_head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(to_head);
        self.tail.extend(rest);
        while self.tail.len() > KEEP_BYTES {
            let excess = self.tail.len() - KEEP_BYTES;
            self.tail.drain(..excess);
            self.dropped += excess;
        }
    }

    fn text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!(
                "\n[... {} bytes of output dropped ...]\n",
                self.dropped
            ));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        text.push_str(&String::from_utf8_lossy(&tail));
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stop::Stop;

    fn run(args: Value) -> ToolOutput {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolCtx {
            cwd: dir.path().to_path_buf(),
            stop: Stop::never(),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(BashTool::new(Box::new(PlainBash)).run(&args, &ctx))
    }

    #[test]
    fn combined_output_and_success() {
        let out = run(json!({"command": "echo out; echo err >&2"}));
        assert!(out.ok);
        assert_eq!(out.output, "out\nerr\n");
    }

    #[test]
    fn non_zero_exit_is_a_failure_with_its_code() {
        let out = run(json!({"command": "echo nope; exit 3"}));
        assert!(!out.ok);
        assert!(out.output.contains("nope"));
        assert!(out.output.contains("[exit code: 3]"));
    }

    #[test]
    fn timeout_kills_the_command() {
        let out = run(json!({"command": "sleep 30", "timeout_seconds": 1}));
        assert!(!out.ok);
        assert!(out.output.contains("timed out after 1s"), "{}", out.output);
    }

    #[test]
    fn background_processes_do_not_hold_the_call() {
        let started = std::time::Instant::now();
        let out = run(json!({"command": "sleep 30 & echo started"}));
        assert!(out.ok, "{}", out.output);
        assert_eq!(out.output, "started\n");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn huge_output_is_bounded() {
        let out = run(json!({"command": "head -c 5000000 /dev/zero | tr '\\0' x"}));
        assert!(out.ok);
        assert!(out.output.len() < 100_000);
        assert!(out.output.contains("characters cut"));
    }

    #[test]
    fn published_variables_reach_the_command() {
        let env = SpawnEnv::default();
        env.set(vec![("TRACEPARENT".into(), "00-abc-def-01".into())]);
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolCtx {
            cwd: dir.path().to_path_buf(),
            stop: Stop::never(),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let tool = BashTool::new(Box::new(PlainBash)).with_env(env);
        let out = rt.block_on(tool.run(&json!({"command": "echo $TRACEPARENT"}), &ctx));
        assert_eq!(out.output, "00-abc-def-01\n");
    }

    #[test]
    fn missing_command_is_an_error_result() {
        assert!(!run(json!({})).ok);
    }
}
