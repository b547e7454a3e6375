//! Every default a setting falls back to when neither a flag nor the
//! config gives it. The retry and stream defaults are `RetryPolicy`'s own
//! (`policy.rs`), which settings start from.

use std::time::Duration;

use crate::policy::Cooldown;

/// How long a model that was left is skipped (`fallback.cooldown`).
pub(crate) const COOLDOWN: Cooldown = Cooldown::For(Duration::from_secs(300));

/// A subagent's step limit (`subagents.step_limit`).
pub(crate) const SUBAGENT_STEP_LIMIT: u32 = 30;

/// Share of the context window past which the history is compacted
/// (`compaction.threshold`).
pub(crate) const COMPACTION_THRESHOLD: f64 = 0.8;

/// How long one MCP tool call waits for its answer
/// (`mcp_servers.<name>.tool_timeout`).
pub(crate) const MCP_TOOL_TIMEOUT: Duration = Duration::from_secs(600);
