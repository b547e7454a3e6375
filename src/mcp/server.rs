//! One MCP server over stdio: spawned in its own process group (killed with
//! the agent, SIGKILL included), initialized with a timeout, watched so a
//! death is noticed, and stopped at the end of the run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation, Tool,
};
use rmcp::service::{Peer, RoleClient, RunningServiceCancellationToken};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::ServiceExt;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr, Command};
use tokio::task::JoinHandle;

use super::bounded::{BoundedLines, MAX_MESSAGE};
use super::ServerSettings;
use crate::events::Emitter;
use crate::setup::Env;
use crate::tools::process::ProcessGroup;

/// Longest stretch of a server's stderr kept for error messages.
const STDERR_TAIL: usize = 2000;

/// How long a server gets to exit after its stdin closes at the end of a run.
const EXIT_GRACE: Duration = Duration::from_millis(500);

/// A running MCP server and the tools it offered at start.
pub(crate) struct McpServer {
    pub name: String,
    pub tools: Vec<Tool>,
    peer: Peer<RoleClient>,
    state: Arc<State>,
    cancel: Mutex<Option<RunningServiceCancellationToken>>,
    watcher: Mutex<Option<JoinHandle<()>>>,
    /// The server's process group: dropping it kills the group.
    group: ProcessGroup,
    /// The server process itself (reaped by tokio once it exits).
    _child: Child,
    tool_timeout: Duration,
}

/// What the server's watcher and its callers share.
struct State {
    name: String,
    alive: AtomicBool,
    /// Set when the run stops the server: its exit is then no news.
    stopping: AtomicBool,
    warned: AtomicBool,
    /// Raised when the server sent a message past `MAX_MESSAGE`.
    oversized: Arc<AtomicBool>,
    stderr: Arc<Mutex<String>>,
    emitter: Emitter,
}

impl State {
    /// Marks the server dead; the first time (unless we are stopping it),
    /// a `warning` says its tools are withdrawn.
    fn died(&self) {
        self.alive.store(false, Ordering::SeqCst);
        if !self.stopping.load(Ordering::SeqCst) && !self.warned.swap(true, Ordering::SeqCst) {
            self.emitter.warn(format!(
                "MCP server '{}' {}; its tools are withdrawn",
                self.name,
                self.why_stopped()
            ));
        }
    }

    /// "stopped" with the server's last words, or what it broke.
    fn why_stopped(&self) -> String {
        if self.oversized.load(Ordering::SeqCst) {
            format!(
                "sent a message over {} MiB and is no longer read",
                MAX_MESSAGE >> 20
            )
        } else {
            format!("stopped{}", tail_note(&self.stderr))
        }
    }
}

/// Why a tool call did not produce a result.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    #[error("MCP server '{0}' is no longer running{1}")]
    Dead(String, String),
    #[error("MCP server '{0}': {1}")]
    Failed(String, String),
}

/// Why a server did not start (said in a warning; its tools are unavailable).
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    #[error("its cwd {} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("env {0}")]
    Env(MissingVar),
    #[error("cannot start `{command}`: {error}")]
    Spawn {
        command: String,
        error: std::io::Error,
    },
    #[error("its stdin or stdout could not be opened")]
    NoPipes,
    /// rmcp's error and the server's last stderr line.
    #[error("failed to initialize: {error}{tail}")]
    Init { error: String, tail: String },
    #[error("did not finish initializing within {}s", .0.as_secs_f64())]
    InitTimeout(Duration),
    #[error("tools/list failed: {error}{tail}")]
    List { error: String, tail: String },
    #[error("did not list its tools within {}s", .0.as_secs_f64())]
    ListTimeout(Duration),
}

/// A server variable whose source variable of ours is not set.
#[derive(Debug, thiserror::Error)]
#[error("{var}: the variable {from} is not set")]
pub(crate) struct MissingVar {
    var: String,
    from: String,
}

/// Starts a server's process in its working directory with its variables,
/// in a process group of its own.
fn spawn(
    config: &ServerSettings,
    run_cwd: &Path,
    env: Env<'_>,
) -> Result<(Child, ProcessGroup), StartError> {
    let cwd = server_cwd(config.cwd.as_deref(), run_cwd, env);
    if !cwd.is_dir() {
        return Err(StartError::NotADirectory(cwd));
    }
    let mut command = Command::new(&config.command);
    command.args(&config.args).current_dir(cwd);
    for (var, value) in server_env(&config.env, env).map_err(StartError::Env)? {
        command.env(var, value);
    }
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut group = ProcessGroup::prepare(&mut command);
    let child = command.spawn().map_err(|error| StartError::Spawn {
        command: config.command.clone(),
        error,
    })?;
    group.started(child.id());
    Ok((child, group))
}

impl McpServer {
    /// Spawns, initializes and lists the tools of one server; any failure
    /// (including `timeout` passing) is an error for a warning.
    pub(crate) async fn start(
        name: &str,
        config: &ServerSettings,
        run_cwd: &Path,
        env: Env<'_>,
        emitter: &Emitter,
        timeout: Duration,
    ) -> Result<McpServer, StartError> {
        let (mut child, group) = spawn(config, run_cwd, env)?;
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            group.kill();
            return Err(StartError::NoPipes);
        };
        let stderr = child.stderr.take();
        // Our bound ends the stream first; rmcp's own (which drops a long
        // line and keeps waiting) never comes into play.
        let oversized = Arc::new(AtomicBool::new(false));
        let transport: AsyncRwTransport<RoleClient, _, _> = AsyncRwTransport::new(
            BoundedLines::new(stdout, MAX_MESSAGE, oversized.clone()),
            stdin,
        )
        .with_max_line_length(MAX_MESSAGE + 1);
        let tool_timeout = config.tool_timeout;
        let stderr_tail = Arc::new(Mutex::new(String::new()));
        if let Some(stderr) = stderr {
            tokio::spawn(keep_tail(stderr, stderr_tail.clone()));
        }
        let kill = |why: StartError| {
            group.kill();
            why
        };

        let client = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("tinyagent", env!("CARGO_PKG_VERSION")),
        );
        let running = match tokio::time::timeout(timeout, client.serve(transport)).await {
            Ok(Ok(running)) => running,
            Ok(Err(e)) => {
                // Give the stderr reader a moment to catch the server's last words.
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Err(kill(StartError::Init {
                    error: e.to_string(),
                    tail: tail_note(&stderr_tail),
                }));
            }
            Err(_) => return Err(kill(StartError::InitTimeout(timeout))),
        };
        let tools = match tokio::time::timeout(timeout, running.peer().list_all_tools()).await {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => {
                return Err(kill(StartError::List {
                    error: e.to_string(),
                    tail: tail_note(&stderr_tail),
                }))
            }
            Err(_) => return Err(kill(StartError::ListTimeout(timeout))),
        };

        let state = Arc::new(State {
            name: name.to_string(),
            alive: AtomicBool::new(true),
            stopping: AtomicBool::new(false),
            warned: AtomicBool::new(false),
            oversized,
            stderr: stderr_tail,
            emitter: emitter.clone(),
        });
        let peer = running.peer().clone();
        let cancel = running.cancellation_token();
        let watcher = {
            let state = state.clone();
            tokio::spawn(async move {
                let _ = running.waiting().await;
                state.died();
            })
        };
        Ok(McpServer {
            name: name.to_string(),
            tools,
            peer,
            state,
            cancel: Mutex::new(Some(cancel)),
            watcher: Mutex::new(Some(watcher)),
            group,
            _child: child,
            tool_timeout,
        })
    }

    /// Whether the server is still running.
    pub(crate) fn is_alive(&self) -> bool {
        self.state.alive.load(Ordering::SeqCst)
    }

    fn dead(&self) -> CallError {
        if self.state.oversized.load(Ordering::SeqCst) {
            return CallError::Failed(self.name.clone(), self.state.why_stopped());
        }
        CallError::Dead(self.name.clone(), tail_note(&self.state.stderr))
    }

    /// Calls one tool (by the server's own name for it).
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Value,
    ) -> Result<CallToolResult, CallError> {
        if !self.is_alive() {
            return Err(self.dead());
        }
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = match arguments {
            serde_json::Value::Object(map) => Some(map),
            serde_json::Value::Null => None,
            other => {
                return Err(CallError::Failed(
                    self.name.clone(),
                    format!("arguments must be a JSON object, got {other}"),
                ))
            }
        };
        let answer = tokio::time::timeout(self.tool_timeout, self.peer.call_tool(params)).await;
        let Ok(answer) = answer else {
            return Err(CallError::Failed(
                self.name.clone(),
                format!(
                    "no answer within {} (mcp_servers.{}.tool_timeout)",
                    humantime::format_duration(self.tool_timeout),
                    self.name
                ),
            ));
        };
        match answer {
            Ok(result) => Ok(result),
            Err(_) if !self.is_alive() || self.peer.is_transport_closed() => {
                // Let the stderr reader catch the server's last words.
                tokio::time::sleep(Duration::from_millis(20)).await;
                self.state.died();
                Err(self.dead())
            }
            Err(e) => Err(CallError::Failed(self.name.clone(), e.to_string())),
        }
    }

    /// Stops the server: closes its stdin, waits briefly, then kills its
    /// process group. No warning is emitted for this exit.
    pub(crate) async fn shutdown(&self) {
        self.state.stopping.store(true, Ordering::SeqCst);
        if let Some(cancel) = self.cancel.lock().unwrap_or_else(|e| e.into_inner()).take() {
            cancel.cancel();
        }
        let watcher = self
            .watcher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(watcher) = watcher {
            let _ = tokio::time::timeout(EXIT_GRACE, watcher).await;
        }
        self.group.kill();
        self.state.alive.store(false, Ordering::SeqCst);
    }
}

/// The server's working directory: its `cwd` (`~` expanded, relative to the
/// run's working directory), else the run's working directory.
fn server_cwd(cwd: Option<&Path>, run_cwd: &Path, env: Env) -> PathBuf {
    let Some(cwd) = cwd else {
        return run_cwd.to_path_buf();
    };
    match cwd.to_str() {
        Some(text) => run_cwd.join(crate::paths::expand_tilde(text, env)),
        None => run_cwd.join(cwd),
    }
}

/// The variables set for a server: each `NAME: SOURCE` entry sets NAME to
/// the value of our variable SOURCE. An unset SOURCE is an error naming
/// both (never a value).
pub(super) fn server_env(
    map: &BTreeMap<String, String>,
    env: Env,
) -> Result<Vec<(String, String)>, MissingVar> {
    map.iter()
        .map(|(var, source)| match env(source) {
            Some(value) => Ok((var.clone(), value)),
            None => Err(MissingVar {
                var: var.clone(),
                from: source.clone(),
            }),
        })
        .collect()
}

async fn keep_tail(mut stderr: ChildStderr, tail: Arc<Mutex<String>>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.push_str(&String::from_utf8_lossy(&buf[..n]));
        if tail.len() > STDERR_TAIL {
            let mut cut = tail.len() - STDERR_TAIL;
            while !tail.is_char_boundary(cut) {
                cut += 1;
            }
            tail.drain(..cut);
        }
    }
}

/// ` (stderr: <last line>)` when the server said something on stderr.
fn tail_note(tail: &Mutex<String>) -> String {
    let tail = tail.lock().unwrap_or_else(|e| e.into_inner());
    match tail.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(line) => format!(" (stderr: {})", line.trim()),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_copies_our_variables_under_the_servers_names() {
        let ours = |k: &str| (k == "DOCS_TOKEN").then(|| "s3cret".to_string());
        let map = BTreeMap::from([("TOKEN_ENV".to_string(), "DOCS_TOKEN".to_string())]);
        assert_eq!(
            server_env(&map, &ours).unwrap(),
            [("TOKEN_ENV".to_string(), "s3cret".to_string())]
        );
        let map = BTreeMap::from([("TOKEN_ENV".to_string(), "MISSING".to_string())]);
        let err = server_env(&map, &ours).unwrap_err().to_string();
        assert!(
            err.contains("TOKEN_ENV") && err.contains("MISSING"),
            "{err}"
        );
    }

    fn test_server(args: &[&str]) -> ServerSettings {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/cli/support/mcp_server.py"
        );
        ServerSettings {
            command: "python3".into(),
            args: std::iter::once(script)
                .chain(args.iter().copied())
                .map(String::from)
                .collect(),
            env: BTreeMap::new(),
            cwd: None,
            tool_timeout: Duration::from_secs(600),
        }
    }

    fn start(config: &ServerSettings, timeout: Duration) -> Result<(), StartError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let emitter = Emitter::new("r", vec![]);
        let env = |k: &str| std::env::var(k).ok();
        rt.block_on(async {
            let server =
                McpServer::start("t", config, Path::new("/"), &env, &emitter, timeout).await?;
            assert!(server.tools.iter().any(|t| t.name == "echo"));
            server.shutdown().await;
            assert!(!server.is_alive());
            Ok(())
        })
    }

    #[test]
    fn a_server_that_never_answers_initialize_times_out() {
        let started = std::time::Instant::now();
        let err = start(
            &test_server(&["--hang-at-start"]),
            Duration::from_millis(300),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("did not finish initializing within 0.3s"),
            "{err}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_working_server_starts_lists_and_stops() {
        start(&test_server(&[]), Duration::from_secs(20)).unwrap();
    }

    #[test]
    fn cwd_defaults_to_the_run_and_resolves_relative_and_home() {
        let env = |k: &str| (k == "HOME").then(|| "/home/u".to_string());
        let run = Path::new("/repo");
        assert_eq!(server_cwd(None, run, &env), PathBuf::from("/repo"));
        assert_eq!(
            server_cwd(Some(Path::new("sub")), run, &env),
            PathBuf::from("/repo/sub")
        );
        assert_eq!(
            server_cwd(Some(Path::new("/abs")), run, &env),
            PathBuf::from("/abs")
        );
        assert_eq!(
            server_cwd(Some(Path::new("~/x")), run, &env),
            PathBuf::from("/home/u/x")
        );
    }
}
