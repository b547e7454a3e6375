//! Builds `JobOptions` from settings before any request: compiles the
//! output schema, checks the compaction numbers, reads the hooks and builds
//! the subagents' chain. Every failure here is a setup error (exit 2).

use std::path::Path;

use super::compact::CompactionPolicy;
use super::hooks::Hooks;
use super::schema::OutputSchema;
use super::subagent::Subagent;
use super::JobOptions;
use crate::model::chain::ChainModel;
use crate::model::registry::{build_member, StreamTimeouts};
use crate::settings::{process_env, Settings, SetupError};

/// The job options for a run with `settings` and `--output-schema`.
pub fn job_options(
    output_schema: Option<&Path>,
    settings: &Settings,
) -> Result<JobOptions, SetupError> {
    let output_schema = output_schema
        .map(OutputSchema::load)
        .transpose()
        .map_err(SetupError)?;
    let compaction =
        CompactionPolicy::from_config(&settings.config.compaction).map_err(SetupError)?;
    let subagent = match &settings.subagents {
        None => None,
        Some(sub) => {
            let timeouts = StreamTimeouts {
                first_event: settings.retry.stream_first_event_timeout,
                idle: settings.retry.stream_idle_timeout,
            };
            let mut members = Vec::new();
            for spec in std::iter::once(&sub.primary).chain(&sub.fallbacks) {
                let member = build_member(spec, &settings.providers, timeouts, &process_env)
                    .map_err(|e| SetupError(format!("config subagents: {e}")))?;
                members.push(member);
            }
            let chain = ChainModel::new(members, settings.retry.clone(), settings.fallback.clone());
            let fallback_models = sub.fallbacks.iter().map(|s| s.to_string()).collect();
            Some(Subagent::new(chain, fallback_models, sub.step_limit))
        }
    };
    Ok(JobOptions {
        output_schema,
        compaction,
        hooks: Hooks::from_config(&settings.config.hooks),
        subagent,
        system_note: None,
    })
}
