//! What the config adds to a run besides its models and limits, each
//! resolved into the type its consumer takes: `compaction:` into a
//! `CompactionPolicy`, `hooks:` into `Hooks`, `mcp_servers:` into
//! `ServerSettings`, `tools:` into a compiled `ToolFilter`, and
//! `instructions:` (under `--instructions`) into an instructions `Source`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::agent::compact::CompactionPolicy;
use crate::agent::hooks::Hooks;
use crate::agent::instructions::Source;
use crate::cli::Cli;
use crate::config::{
    CompactionConfig, HookCommand, HooksConfig, InstructionsConfig, McpServerConfig, ToolsConfig,
};
use crate::mcp::ServerSettings;
use crate::setup::SetupError;
use crate::tools::filter::ToolFilter;

use super::defaults;

/// `compaction:`: the threshold is a share of the window (0 < x <= 1).
pub(super) fn compaction(config: &CompactionConfig) -> Result<CompactionPolicy, SetupError> {
    let threshold = config.threshold.unwrap_or(defaults::COMPACTION_THRESHOLD);
    if !(threshold > 0.0 && threshold <= 1.0) {
        return Err(SetupError(format!(
            "config compaction.threshold: must be above 0 and at most 1, got {threshold}"
        )));
    }
    if config.default_context_window == Some(0) {
        return Err(SetupError(
            "config compaction.default_context_window: must be at least 1".into(),
        ));
    }
    Ok(CompactionPolicy {
        threshold,
        default_context_window: config.default_context_window,
    })
}

/// `hooks:`: the commands of each kind, in order.
pub(super) fn hooks(config: &HooksConfig) -> Hooks {
    let commands = |list: &[HookCommand]| list.iter().map(|h| h.command.clone()).collect();
    Hooks {
        stop: commands(&config.stop),
        pre_tool: commands(&config.pre_tool),
        post_tool: commands(&config.post_tool),
    }
}

/// `mcp_servers:`: a `tool_timeout` must be more than 0.
pub(super) fn mcp_servers(
    config: BTreeMap<String, McpServerConfig>,
) -> Result<BTreeMap<String, ServerSettings>, SetupError> {
    config
        .into_iter()
        .map(|(name, server)| {
            if server.tool_timeout.is_some_and(|d| d.is_zero()) {
                return Err(SetupError(format!(
                    "config mcp_servers.{name}.tool_timeout: must be more than 0"
                )));
            }
            let settings = ServerSettings {
                command: server.command,
                args: server.args,
                env: server.env,
                cwd: server.cwd,
                tool_timeout: server.tool_timeout.unwrap_or(defaults::MCP_TOOL_TIMEOUT),
            };
            Ok((name, settings))
        })
        .collect()
}

/// `tools:`, checked against the built-in tools and the MCP servers.
pub(super) fn tools(
    config: &ToolsConfig,
    mcp_servers: &BTreeMap<String, ServerSettings>,
) -> Result<ToolFilter, SetupError> {
    ToolFilter::new(config.allow.as_deref(), &config.deny, mcp_servers.keys())
        .map_err(|e| SetupError(e.to_string()))
}

/// `--instructions FILE` wins; then config `instructions:` (a relative
/// config path is taken from the working directory); the default is on.
pub(super) fn instructions(cli: &Cli, config: Option<&InstructionsConfig>, cwd: &Path) -> Source {
    instructions_source(cli.instructions.as_deref(), config, cwd)
}

fn instructions_source(
    flag: Option<&Path>,
    config: Option<&InstructionsConfig>,
    cwd: &Path,
) -> Source {
    if let Some(file) = flag {
        return Source::File(file.to_path_buf(), "--instructions");
    }
    match config {
        None | Some(InstructionsConfig::Enabled(true)) => Source::Found,
        Some(InstructionsConfig::Enabled(false)) => Source::Off,
        Some(InstructionsConfig::File(path)) => Source::File(cwd.join(path), "config instructions"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_checks_its_numbers() {
        let ok = compaction(&CompactionConfig {
            threshold: Some(0.5),
            default_context_window: Some(1000),
        })
        .unwrap();
        assert_eq!(ok.threshold, 0.5);
        for bad in [0.0, 1.5, -1.0] {
            let config = CompactionConfig {
                threshold: Some(bad),
                default_context_window: None,
            };
            assert!(compaction(&config).is_err());
        }
    }

    #[test]
    fn sources() {
        let cwd = Path::new("/w");
        assert_eq!(instructions_source(None, None, cwd), Source::Found);
        assert_eq!(
            instructions_source(None, Some(&InstructionsConfig::Enabled(false)), cwd),
            Source::Off
        );
        assert_eq!(
            instructions_source(None, Some(&InstructionsConfig::File("x.md".into())), cwd),
            Source::File("/w/x.md".into(), "config instructions")
        );
        assert_eq!(
            instructions_source(
                Some(Path::new("f.md")),
                Some(&InstructionsConfig::Enabled(false)),
                cwd
            ),
            Source::File("f.md".into(), "--instructions")
        );
    }
}
