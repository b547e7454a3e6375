//! Builds `JobOptions` before any request: compiles the output schema and
//! takes the compaction policy and hooks as settings resolved them; the
//! subagents' chain comes built from `lib.rs`, where the run's chain is.
//! Every failure here is a setup error (exit 2).

use std::path::Path;

use super::compact::CompactionPolicy;
use super::hooks::Hooks;
use super::schema::OutputSchema;
use super::subagent::Subagent;
use super::JobOptions;
use crate::setup::SetupError;

/// The job options for a run with `--output-schema`, `compaction:`,
/// `hooks:` and (with `subagents:`) the `delegate` tool's child chain.
pub(crate) fn job_options(
    output_schema: Option<&Path>,
    compaction: CompactionPolicy,
    hooks: Hooks,
    subagent: Option<Subagent>,
) -> Result<JobOptions, SetupError> {
    let output_schema = output_schema
        .map(OutputSchema::load)
        .transpose()
        .map_err(|e| SetupError(e.to_string()))?;
    Ok(JobOptions {
        output_schema,
        compaction,
        hooks,
        subagent,
        system_note: None,
        approvals: None,
    })
}
