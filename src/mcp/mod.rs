//! MCP servers from config `mcp_servers` (SPEC sections 3 and 11): all
//! started over stdio when the run starts, their tools offered to the model
//! as `mcp__<server>__<tool>`, all stopped when the run ends. A server that
//! cannot start costs a `warning`, never the run.

mod bounded;
mod server;
mod tool;

#[cfg(test)]
pub(crate) use bounded::BoundedLines as FuzzBounded;
#[cfg(test)]
pub(crate) use tool::{spec_of as fuzz_spec, to_output as fuzz_output};

/// A bounded reader over `input`, for the fuzz harnesses.
#[cfg(test)]
pub(crate) fn fuzz_bounded<R>(
    input: R,
    max: usize,
    tripped: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> FuzzBounded<R> {
    FuzzBounded::new(input, max, tripped)
}

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub(crate) use server::McpServer;

use crate::events::Emitter;
use crate::setup::Env;
use crate::stop::Stop;
use crate::tools::Tool;
use tool::McpTool;

/// How long a server has to start, initialize and list its tools.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(30);

/// One server as settings resolved it (config `mcp_servers`).
#[derive(Debug, Clone)]
pub(crate) struct ServerSettings {
    pub command: String,
    pub args: Vec<String>,
    /// Variables for the server: name -> the name of a variable of ours to copy.
    pub env: BTreeMap<String, String>,
    /// Its working directory (`~` and a relative path are resolved at start).
    pub cwd: Option<PathBuf>,
    /// How long one tool call may wait for its answer.
    pub tool_timeout: Duration,
}

/// The run's MCP servers that started.
#[derive(Default)]
pub(crate) struct McpServers {
    servers: Vec<Arc<McpServer>>,
}

impl McpServers {
    /// Starts every configured server at once and waits for each to be
    /// ready (or to fail, or to run out of `timeout`). Failures are warnings.
    /// An interrupt or the time limit abandons the start (the servers are
    /// killed) and the run then ends as the loop sees `stop`.
    pub(crate) async fn start(
        configs: &BTreeMap<String, ServerSettings>,
        run_cwd: &Path,
        env: Env<'_>,
        emitter: &Emitter,
        timeout: Duration,
        stop: &Stop,
    ) -> McpServers {
        let starts = configs
            .iter()
            .map(|(name, config)| McpServer::start(name, config, run_cwd, env, emitter, timeout));
        let results = tokio::select! {
            results = futures::future::join_all(starts) => results,
            _ = stop.fired() => return McpServers::default(),
        };
        let mut servers = Vec::new();
        for ((name, _), result) in configs.iter().zip(results) {
            match result {
                Ok(server) => servers.push(Arc::new(server)),
                Err(why) => emitter.warn(format!(
                    "MCP server '{name}' not started: {why}; its tools are unavailable"
                )),
            }
        }
        McpServers { servers }
    }

    /// One tool per tool of every started server. Names that cannot be
    /// offered to a model (too long once prefixed) are skipped with a warning.
    pub(crate) fn tools(&self, emitter: &Emitter) -> Vec<Box<dyn Tool>> {
        let mut tools: Vec<Box<dyn Tool>> = Vec::new();
        for server in &self.servers {
            for tool in &server.tools {
                match McpTool::new(server.clone(), tool) {
                    Ok(t) => tools.push(Box::new(t)),
                    Err(why) => emitter.warn(why.to_string()),
                }
            }
        }
        tools
    }

    /// Stops every server.
    pub(crate) async fn shutdown(self) {
        futures::future::join_all(self.servers.iter().map(|s| s.shutdown())).await;
    }
}
