//! The run's limits and per-request options: `--step-limit`,
//! `--cost-limit`, `--time-limit`, `--max-output-tokens` and
//! `--reasoning-effort`, each a flag over its config key.

use std::time::Duration;

use crate::cli::Cli;
use crate::config::Config;
use crate::duration;
use crate::setup::SetupError;

/// The limits and request options, validated.
#[derive(Debug, Clone)]
pub(super) struct Limits {
    pub(super) step_limit: Option<u32>,
    pub(super) cost_limit: Option<f64>,
    pub(super) time_limit: Option<Duration>,
    pub(super) max_output_tokens: Option<u32>,
    pub(super) reasoning_effort: Option<String>,
}

impl Limits {
    /// Flags over config; a limit of 0 or a cost that is not a positive
    /// number is a usage error, as is an unknown reasoning effort.
    pub(super) fn resolve(cli: &Cli, config: &Config) -> Result<Limits, SetupError> {
        let time_limit = match &cli.time_limit {
            Some(t) => {
                Some(duration::parse(t).map_err(|e| SetupError(format!("--time-limit: {e}")))?)
            }
            None => config.time_limit,
        };
        let cost_limit = cli.cost_limit.or(config.cost_limit);
        if let Some(c) = cost_limit {
            if c.is_nan() || c <= 0.0 {
                return Err(SetupError(format!(
                    "{}: the cost limit must be a positive number of USD, got {c} (leave it out for no limit)",
                    if cli.cost_limit.is_some() { "--cost-limit" } else { "config cost_limit" }
                )));
            }
        }
        check_not_zero(
            time_limit.map(|t| t.is_zero()),
            cli.time_limit.is_some(),
            "time-limit",
        )?;
        let step_limit = cli.step_limit.or(config.step_limit);
        check_not_zero(
            step_limit.map(|s| s == 0),
            cli.step_limit.is_some(),
            "step-limit",
        )?;
        let reasoning_effort = cli
            .reasoning_effort
            .clone()
            .or(config.reasoning_effort.clone());
        if let Some(r) = &reasoning_effort {
            if !matches!(r.as_str(), "low" | "medium" | "high") {
                return Err(SetupError(format!(
                    "config reasoning_effort: '{r}' is not one of low, medium, high"
                )));
            }
        }
        Ok(Limits {
            step_limit,
            cost_limit,
            time_limit,
            max_output_tokens: cli.max_output_tokens.or(config.max_output_tokens),
            reasoning_effort,
        })
    }
}

/// A limit of 0 is a usage error (SPEC 1): it could only stop the run at once.
fn check_not_zero(is_zero: Option<bool>, from_flag: bool, flag: &str) -> Result<(), SetupError> {
    if is_zero != Some(true) {
        return Ok(());
    }
    let name = if from_flag {
        format!("--{flag}")
    } else {
        format!("config {}", flag.replace('-', "_"))
    };
    Err(SetupError(format!(
        "{name}: a limit of 0 would stop the run before it starts (leave it out for no limit)"
    )))
}
