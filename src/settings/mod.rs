//! `Settings::resolve`: flags, config layers, environment and (with
//! `--resume`) the checkpoint into one validated value. Defaults and
//! precedence are decided here, once, and each model spec is resolved here
//! once (`models.rs`); nothing downstream re-checks an option that has a
//! default or sees the raw config.

mod models;

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::Cli;
use crate::config::{
    self, CompactionConfig, Config, HooksConfig, InstructionsConfig, McpServerConfig, ToolsConfig,
};
use crate::duration;
use crate::health;
use crate::model::spec::{builtin, ModelSpec, ResolvedModel};
use crate::policy::{Cooldown, FallbackPolicy, RetryPolicy};
use crate::resume::{self, Checkpointed};
use crate::sandbox::Allowlist;
pub(crate) use crate::setup::{process_env, Env, SetupError};
use crate::task_input;
use crate::worktree;

/// Everything a run needs, validated.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The task; with `--resume`, the new TASK (empty when none was given).
    pub task: String,
    pub cwd: PathBuf,
    pub json: bool,
    pub quiet: bool,
    pub output: Option<PathBuf>,
    /// `--log-db FILE`.
    pub log_db: Option<PathBuf>,
    pub primary: ResolvedModel,
    pub fallbacks: Vec<ResolvedModel>,
    pub step_limit: Option<u32>,
    pub cost_limit: Option<f64>,
    pub time_limit: Option<Duration>,
    pub max_output_tokens: Option<u32>,
    pub reasoning_effort: Option<String>,
    pub retry: RetryPolicy,
    pub fallback: FallbackPolicy,
    /// `compaction:`, checked by `agent::CompactionPolicy`.
    pub compaction: CompactionConfig,
    pub hooks: HooksConfig,
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
    /// Where the shared health record lives (`None`: off for this run).
    pub health_db: Option<health::Location>,
    /// `subagents:`, validated (the `delegate` tool exists only with it).
    pub subagents: Option<SubagentSettings>,
    /// `--worktree`: `Some(None)` names the worktree after the run id.
    pub worktree: Option<Option<String>>,
    /// `--sandbox`, with the hosts its commands may reach.
    pub sandbox: Option<Allowlist>,
    /// Keep the run in the run store: neither `--no-save` nor `save_runs: false`.
    pub save_runs: bool,
    /// `instructions:`, read by `agent::instructions` with `--instructions`.
    pub instructions: Option<InstructionsConfig>,
    /// `tools: {allow, deny}`, checked by `tools::filter`.
    pub tools: ToolsConfig,
}

/// The subagents' models and step limit (config `subagents`).
#[derive(Debug, Clone)]
pub(crate) struct SubagentSettings {
    pub primary: ResolvedModel,
    pub fallbacks: Vec<ResolvedModel>,
    pub step_limit: u32,
}

/// How long a model that was left is skipped when `fallback.cooldown` is not set.
pub(crate) const DEFAULT_COOLDOWN: Cooldown = Cooldown::For(Duration::from_secs(300));

/// A subagent's step limit when `subagents.step_limit` is not set.
pub(crate) const DEFAULT_SUBAGENT_STEP_LIMIT: u32 = 30;

impl Settings {
    /// Loads the user config and `-c` layers and resolves them with `cli`
    /// and, when resuming, the checkpoint being continued.
    pub(crate) fn resolve(
        cli: &Cli,
        env: Env,
        resumed: Option<&Checkpointed>,
    ) -> Result<Settings, SetupError> {
        let config = load_config(&cli.config, env)?;
        let (task_arg, _) =
            worktree::split_task_and_name(cli.task.as_deref(), cli.worktree.as_ref());
        let task = if resumed.is_some() {
            read_resume_task(task_arg)?.unwrap_or_default()
        } else {
            read_task(task_arg)?
        };
        Self::from_parts(cli, config, task, env, resumed)
    }

    /// Resolution once the config is loaded and the task known. A resumed
    /// run keeps the checkpoint's primary model and, unless `-C` is given,
    /// its working directory.
    pub(crate) fn from_parts(
        cli: &Cli,
        config: Config,
        task: String,
        env: Env,
        resumed: Option<&Checkpointed>,
    ) -> Result<Settings, SetupError> {
        if let Some(cp) = resumed {
            resume::check_model(cli.model.as_deref(), cp)?;
        }
        let resumed_cwd = resumed
            .and_then(|cp| cp.doc.cwd.as_ref())
            .map(PathBuf::from)
            .filter(|d| d.is_dir());
        let cwd = match cli.cwd.clone().or(resumed_cwd) {
            Some(dir) => dir,
            None => std::env::current_dir()
                .map_err(|e| SetupError(format!("cannot read the current directory: {e}")))?,
        };
        if !cwd.is_dir() {
            let why = if cwd.exists() {
                "not a directory"
            } else {
                "the directory does not exist"
            };
            return Err(SetupError(format!("--cwd {}: {why}", cwd.display())));
        }
        let cwd = cwd.canonicalize().unwrap_or(cwd);

        for name in config.providers.keys() {
            if builtin(name).is_some() {
                return Err(SetupError(format!(
                    "config providers.{name}: a named provider may not shadow the built-in provider '{name}'"
                )));
            }
        }

        let model_text = resumed
            .map(|cp| cp.doc.model.clone())
            .or_else(|| cli.model.clone())
            .or_else(|| config.model.clone())
            .ok_or_else(|| {
                SetupError(
                    "no model: give -m <provider>/<model> or set `model` in the config".into(),
                )
            })?;
        let primary = ModelSpec::parse(&model_text).map_err(SetupError)?;
        let primary = models::resolve(primary, &config.providers, env, "model")?;

        let fallback_texts: Vec<String> = if cli.no_fallback {
            Vec::new()
        } else if !cli.fallback_model.is_empty() {
            cli.fallback_model.clone()
        } else {
            config.fallback_models.clone().unwrap_or_default()
        };
        let fallbacks =
            models::resolve_chain(&primary.spec, &fallback_texts, &config.providers, env)?;

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
        check_not_zero(
            cli.step_limit.or(config.step_limit).map(|s| s == 0),
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

        let defaults = RetryPolicy::default();
        let r = &config.retry;
        let retry = RetryPolicy {
            attempts: r.attempts.unwrap_or(defaults.attempts),
            backoff: r.backoff.unwrap_or(defaults.backoff),
            max_backoff: r.max_backoff.unwrap_or(defaults.max_backoff),
            jitter: r.jitter.unwrap_or(defaults.jitter),
            stream_first_event_timeout: r
                .stream_first_event_timeout
                .unwrap_or(defaults.stream_first_event_timeout),
            stream_idle_timeout: r
                .stream_idle_timeout
                .unwrap_or(defaults.stream_idle_timeout),
        };
        if retry.attempts == 0 {
            return Err(SetupError(
                "config retry.attempts: must be at least 1".into(),
            ));
        }
        if !(0.0..=10.0).contains(&retry.jitter) {
            return Err(SetupError(
                "config retry.jitter: must be between 0 and 10".into(),
            ));
        }
        let cooldown = config.fallback.cooldown.unwrap_or(DEFAULT_COOLDOWN);
        let switch_after = config.fallback.switch_after.unwrap_or(retry.attempts);
        if switch_after == 0 {
            return Err(SetupError(
                "config fallback.switch_after: must be at least 1".into(),
            ));
        }
        let fallback = FallbackPolicy {
            switch_after: switch_after.min(retry.attempts),
            cooldown,
        };

        let subagents = resolve_subagents(&config, env)?;
        let (_, worktree) =
            worktree::split_task_and_name(cli.task.as_deref(), cli.worktree.as_ref());
        let worktree = worktree.map(|name| name.map(str::to_string));
        let sandbox = match (cli.sandbox, cli.sandbox_allow_domain.is_empty()) {
            (false, _) => None,
            (true, false) => Some(
                Allowlist::parse(&cli.sandbox_allow_domain)
                    .map_err(|e| SetupError(format!("--sandbox-allow-domain {e}")))?,
            ),
            (true, true) => Some(
                Allowlist::parse(
                    config
                        .sandbox_allowed_domains
                        .as_deref()
                        .unwrap_or_default(),
                )
                .map_err(|e| SetupError(format!("config sandbox_allowed_domains: {e}")))?,
            ),
        };

        let health_db = health::location(config.health_db.as_deref(), env);
        let save_runs = crate::runs::enabled(cli.no_save, &config);
        for (name, server) in &config.mcp_servers {
            if server.tool_timeout.is_some_and(|d| d.is_zero()) {
                return Err(SetupError(format!(
                    "config mcp_servers.{name}.tool_timeout: must be more than 0"
                )));
            }
        }

        Ok(Settings {
            task,
            cwd,
            json: cli.json,
            quiet: cli.quiet,
            output: cli.output.clone(),
            log_db: cli.log_db.clone(),
            primary,
            fallbacks,
            step_limit: cli.step_limit.or(config.step_limit),
            cost_limit,
            time_limit,
            max_output_tokens: cli.max_output_tokens.or(config.max_output_tokens),
            reasoning_effort,
            retry,
            fallback,
            compaction: config.compaction,
            hooks: config.hooks,
            mcp_servers: config.mcp_servers,
            health_db,
            subagents,
            worktree,
            sandbox,
            save_runs,
            instructions: config.instructions,
            tools: config.tools,
        })
    }
}

impl Settings {
    /// The run's chain: the primary, then its fallbacks.
    pub(crate) fn chain(&self) -> impl Iterator<Item = &ResolvedModel> {
        std::iter::once(&self.primary).chain(&self.fallbacks)
    }
}

/// Validates `subagents:` like the main chain: the model and each fallback
/// must name a known provider with its key set.
fn resolve_subagents(config: &Config, env: Env) -> Result<Option<SubagentSettings>, SetupError> {
    let Some(sub) = &config.subagents else {
        return Ok(None);
    };
    let text = sub.model.as_deref().ok_or_else(|| {
        SetupError("config subagents.model: required when subagents is set".into())
    })?;
    let primary =
        ModelSpec::parse(text).map_err(|e| SetupError(format!("config subagents.model: {e}")))?;
    let primary = models::resolve(primary, &config.providers, env, "subagents.model")?;
    let fallbacks = models::resolve_chain(
        &primary.spec,
        sub.fallback_models.as_deref().unwrap_or_default(),
        &config.providers,
        env,
    )
    .map_err(|e| SetupError(format!("config subagents.fallback_models: {e}")))?;
    let step_limit = sub.step_limit.unwrap_or(DEFAULT_SUBAGENT_STEP_LIMIT);
    if step_limit == 0 {
        return Err(SetupError(
            "config subagents.step_limit: must be at least 1".into(),
        ));
    }
    Ok(Some(SubagentSettings {
        primary,
        fallbacks,
        step_limit,
    }))
}

/// Loads the user config (missing is fine) and lays each `-c` file over it.
pub(crate) fn load_config(layers: &[PathBuf], env: Env) -> Result<Config, SetupError> {
    let mut merged = serde_yaml::Value::Mapping(Default::default());
    if let Some(path) = config::user_config_path(env) {
        if let Some(layer) = config::read_layer(&path, false)? {
            config::overlay(&mut merged, layer);
        }
    }
    for path in layers {
        if let Some(layer) = config::read_layer(path, true)? {
            config::overlay(&mut merged, layer);
        }
    }
    config::check(&merged).map_err(|e| SetupError(format!("config: {e}")))
}

/// The task from the argument (with a piped stdin appended as context),
/// or stdin for `-` or a piped stdin.
pub(crate) fn read_task(arg: Option<&str>) -> Result<String, SetupError> {
    let from_stdin = match arg {
        Some("-") => true,
        Some(text) => return non_empty(text.to_string()).and_then(task_input::with_piped_context),
        None => !std::io::stdin().is_terminal(),
    };
    if !from_stdin {
        return Err(SetupError(
            "no task: give TASK as an argument or pipe it on stdin (or run on a terminal for an interactive session)".into(),
        ));
    }
    non_empty(task_input::stdin_task()?)
}

/// With `--resume` the task is optional and stdin is read only for `-`.
pub(crate) fn read_resume_task(arg: Option<&str>) -> Result<Option<String>, SetupError> {
    match arg {
        None => Ok(None),
        Some("-") => read_task(Some("-")).map(Some),
        Some(text) => non_empty(text.to_string()).map(Some),
    }
}

fn non_empty(text: String) -> Result<String, SetupError> {
    if text.trim().is_empty() {
        Err(SetupError("no task: the task is empty".into()))
    } else {
        Ok(text)
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn resolve(args: &[&str], vars: &[(&str, &str)]) -> Result<Settings, SetupError> {
        let cli = Cli::parse_from(std::iter::once("tinyagent").chain(args.iter().copied()));
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        Settings::from_parts(&cli, Config::default(), "task".into(), &env, None)
    }

    #[test]
    fn chain_validation_names_the_entry() {
        let e = resolve(&["-m", "script/a", "--fallback-model", "nope/x"], &[]).unwrap_err();
        assert!(
            e.0.contains("'nope/x'") && e.0.contains("unknown provider"),
            "{e}"
        );
        let e = resolve(&["-m", "script/a", "--fallback-model", "bad"], &[]).unwrap_err();
        assert!(e.0.contains("'bad'"), "{e}");
        let e = resolve(&["-m", "script/a", "--fallback-model", "script/a"], &[]).unwrap_err();
        assert!(e.0.contains("primary"), "{e}");
        let e = resolve(
            &[
                "-m",
                "script/a",
                "--fallback-model",
                "script/b",
                "--fallback-model",
                "script/b",
            ],
            &[],
        )
        .unwrap_err();
        assert!(e.0.contains("more than once"), "{e}");
        let e = resolve(
            &[
                "-m",
                "script/a",
                "--fallback-model",
                "script/b",
                "--fallback-model",
                "script/c",
                "--fallback-model",
                "script/d",
                "--fallback-model",
                "script/e",
            ],
            &[],
        )
        .unwrap_err();
        assert!(e.0.contains("'script/e'"), "{e}");
        let e = resolve(
            &["-m", "script/a", "--fallback-model", "openai/gpt-5"],
            &[("OPENAI_API_KEY", "")],
        )
        .unwrap_err();
        assert!(
            e.0.contains("OPENAI_API_KEY") && e.0.contains("openai/gpt-5"),
            "{e}"
        );
    }

    #[test]
    fn limits_of_zero_and_unknown_providers_are_explained() {
        for (args, expect) in [
            (&["--step-limit", "0"][..], "--step-limit: a limit of 0"),
            (
                &["--cost-limit", "0"][..],
                "--cost-limit: the cost limit must be a positive",
            ),
            (&["--time-limit", "0"][..], "--time-limit: a limit of 0"),
            (&["--time-limit", "0s"][..], "--time-limit: a limit of 0"),
        ] {
            let mut all = vec!["-m", "script/a"];
            all.extend_from_slice(args);
            let e = resolve(&all, &[]).unwrap_err();
            assert!(e.0.starts_with(expect), "{e}");
        }
        let e = resolve(&["-m", "opneai/gpt-5"], &[]).unwrap_err();
        assert!(
            e.0.ends_with("unknown provider 'opneai' (did you mean 'openai'?)"),
            "{e}"
        );
        let e = resolve(&["-m", "zzz/x"], &[]).unwrap_err();
        assert!(e.0.ends_with("unknown provider 'zzz'"), "{e}");
        let cli = Cli::parse_from(["tinyagent", "-m", "script/a"]);
        let config = Config {
            step_limit: Some(0),
            ..Config::default()
        };
        let e = Settings::from_parts(&cli, config, "t".into(), &|_| None, None).unwrap_err();
        assert!(e.0.starts_with("config step_limit: a limit of 0"), "{e}");
    }

    #[test]
    fn switch_after_is_capped_by_attempts_and_defaults_to_it() {
        let s = resolve(&["-m", "script/a"], &[]).unwrap();
        assert_eq!(s.fallback.switch_after, 6);
        assert_eq!(s.fallback.cooldown, Cooldown::For(Duration::from_secs(300)));
    }

    #[test]
    fn no_fallback_drops_the_config_chain() {
        let cli = Cli::parse_from(["tinyagent", "-m", "script/a", "--no-fallback"]);
        let config = Config {
            fallback_models: Some(vec!["script/b".into()]),
            ..Config::default()
        };
        let s = Settings::from_parts(&cli, config, "t".into(), &|_| None, None).unwrap();
        assert!(s.fallbacks.is_empty());
    }
}
