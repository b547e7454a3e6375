//! The `bash` tool: runs a command in the working directory with a timeout,
//! returning combined stdout and stderr and the exit code.

use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use super::process::GuardedChild;
use super::{shorten, str_arg, Tool, ToolCtx, ToolOutput, MAX_OUTPUT_CHARS};
use crate::model::ToolSpec;

/// Default and largest command timeouts.
const DEFAULT_TIMEOUT: u64 = 120;
const MAX_TIMEOUT: u64 = 3600;

/// How a command is started; the sandbox wraps it.
pub trait CommandBuilder: Send + Sync {
    fn build(&self, script: &str, ctx: &ToolCtx) -> Command;
}

/// Plain `bash -c`, stderr merged into stdout.
pub struct PlainBash;

impl CommandBuilder for PlainBash {
    fn build(&self, script: &str, ctx: &ToolCtx) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(format!("exec 2>&1\n{script}"))
            .current_dir(&ctx.cwd);
        cmd
    }
}

/// The `bash` tool.
pub struct BashTool {
    builder: Box<dyn CommandBuilder>,
}

impl BashTool {
    pub fn new(builder: Box<dyn CommandBuilder>) -> Self {
        BashTool { builder }
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
            Err(e) => return ToolOutput::err(e),
        };
        let timeout = args
            .get("timeout_seconds")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_TIMEOUT)
            .clamp(1, MAX_TIMEOUT);
        let mut cmd = self.builder.build(command, ctx);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut guarded = match GuardedChild::spawn(cmd) {
            Ok(g) => g,
            Err(e) => return ToolOutput::err(format!("could not start bash: {e}")),
        };
        let mut stdout = guarded.child.stdout.take();
        let read_all = async {
            let mut buf = Vec::new();
            if let Some(out) = stdout.as_mut() {
                let _ = out.read_to_end(&mut buf).await;
            }
            buf
        };
        let run = async {
            let buf = read_all.await;
            let status = guarded.child.wait().await;
            (buf, status)
        };
        let outcome = tokio::select! {
            done = run => Ok(done),
            _ = tokio::time::sleep(Duration::from_secs(timeout)) => Err(format!("timed out after {timeout}s")),
            _ = ctx.stop.fired() => Err("stopped: the run was interrupted".to_string()),
        };
        match outcome {
            Ok((buf, status)) => {
                let text = String::from_utf8_lossy(&buf).into_owned();
                let text = shorten(&text, MAX_OUTPUT_CHARS);
                match status.ok().and_then(|s| s.code()) {
                    Some(0) => ToolOutput::ok(text),
                    Some(code) => ToolOutput::err(format!("{text}\n[exit code: {code}]")),
                    None => ToolOutput::err(format!("{text}\n[killed by a signal]")),
                }
            }
            Err(reason) => {
                guarded.kill_group();
                ToolOutput::err(format!("[command {reason}; its processes were killed]"))
            }
        }
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
    fn missing_command_is_an_error_result() {
        assert!(!run(json!({})).ok);
    }
}
