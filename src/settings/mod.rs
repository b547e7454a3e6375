//! `Settings::resolve`: flags, config layers, environment and (with
//! `--resume`) the checkpoint into one validated value. Each concern has its
//! own small resolver (ripgrep's low args to high args, uv's
//! `XSettings::resolve`): the models (`models.rs`), the limits
//! (`limits.rs`), the retry and fallback policies (`policies.rs`), what the
//! config adds to a job (`jobs.rs`), each default in `defaults.rs`.
//! Nothing downstream sees the raw config or re-checks an option that has a
//! default.

mod azure;
mod bedrock;
mod budgets;
mod defaults;
mod google;
mod jobs;
mod limits;
mod models;
mod policies;
mod rate_limits;

pub(crate) use rate_limits::{listed as listed_limits, DeclaredLimits};

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::agent::compact::CompactionPolicy;
use crate::agent::hooks::Hooks;
use crate::agent::instructions::Source;
use crate::approval;
use crate::budget::Budget;
use crate::cli::Cli;
use crate::config::{self, Config};
use crate::duration;
use crate::health;
use crate::mcp::ServerSettings;
use crate::model::spec::ResolvedModel;
use crate::policy::{FallbackPolicy, HedgePolicy, RetryPolicy};
use crate::resume::{self, Checkpointed};
use crate::sandbox::Allowlist;
pub(crate) use crate::setup::{process_env, Env, SetupError};
use crate::task_input;
use crate::tools::filter::ToolFilter;
use crate::worktree;

pub(crate) use google::gemini_key_source;
pub(crate) use models::SubagentSettings;

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
    /// `--hedge-after`, `fallback.hedge_after` and `hedge_budget` (SPEC 23).
    pub hedge: HedgePolicy,
    /// `compaction:`: when the history is compacted.
    pub compaction: CompactionPolicy,
    /// `hooks:`: the commands of each kind.
    pub hooks: Hooks,
    /// `mcp_servers:`, each with its tool timeout.
    pub mcp_servers: BTreeMap<String, ServerSettings>,
    /// Where the shared health record lives (`None`: off for this run).
    pub health_db: Option<health::Location>,
    /// Stay under providers' published rate limits (`pacing:`, SPEC 17).
    pub pacing: bool,
    /// `subagents:`, validated (the `delegate` tool exists only with it).
    pub subagents: Option<SubagentSettings>,
    /// `--worktree`: `Some(None)` names the worktree after the run id.
    pub worktree: Option<Option<String>>,
    /// `--sandbox`, with the hosts its commands may reach.
    pub sandbox: Option<Allowlist>,
    /// Keep the run in the run store: neither `--no-save` nor `save_runs: false`.
    pub save_runs: bool,
    /// Where the project instructions come from (`instructions:`, `--instructions`).
    pub instructions: Source,
    /// `tools: {allow, deny}`, compiled.
    pub tools: ToolFilter,
    /// `--outage-wait`: how long to wait when every model is down (zero: off).
    pub outage_wait: Duration,
    /// `budgets:` spend caps shared on the health record (SPEC 19).
    pub budgets: Vec<Budget>,
    /// `limits:` and the named providers' own (SPEC 24).
    pub rate_limits: DeclaredLimits,
    /// `--approval`, `approval` and `approval_allow` (the gate is made per run).
    pub approval: approval::Choice,
}

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

    /// Resolution once the config is loaded and the task known; a config
    /// value refused here (`config step_limit: …`) is said with the file
    /// and line that set it.
    pub(crate) fn from_parts(
        cli: &Cli,
        config: Config,
        task: String,
        env: Env,
        resumed: Option<&Checkpointed>,
    ) -> Result<Settings, SetupError> {
        Self::resolve_parts(cli, config, task, env, resumed).map_err(|e| {
            let user = config::user_config_path(env);
            let layers = config::locate::layers(user.as_deref(), &cli.config);
            SetupError(config::locate::locate(&e.0, &layers).unwrap_or(e.0))
        })
    }

    /// Resolution once the config is loaded and the task known, concern by
    /// concern. A resumed run keeps the checkpoint's primary model and,
    /// unless `-C` is given, its working directory.
    fn resolve_parts(
        cli: &Cli,
        config: Config,
        task: String,
        env: Env,
        resumed: Option<&Checkpointed>,
    ) -> Result<Settings, SetupError> {
        if let Some(cp) = resumed {
            resume::check_model(cli.model.as_deref(), cp)?;
        }
        let cwd = working_dir(cli.cwd.as_deref(), resumed)?;
        let (primary, fallbacks) = models::run_chain(cli, &config, env, resumed)?;
        let limits = limits::Limits::resolve(cli, &config)?;
        let retry = policies::retry(&config)?;
        let fallback = policies::fallback(&config, &retry)?;
        let hedge = policies::hedge(cli, &config)?;
        let subagents = models::subagents(&config, env)?;
        let outage_wait = outage_wait(cli, &config)?;
        let (_, worktree) =
            worktree::split_task_and_name(cli.task.as_deref(), cli.worktree.as_ref());
        let worktree = worktree.map(|name| name.map(str::to_string));
        let sandbox = sandbox(cli, &config)?;
        let health_db = health::location(config.health_db.as_deref(), env);
        let save_runs = save_runs(cli, &config);
        let budgets = budgets::resolve(config.budgets.as_deref(), &config.providers)?;
        let rate_limits = rate_limits::resolve(config.limits.as_deref(), &config.providers)?;
        let approval =
            approval::Choice::resolve(cli.approval, config.approval, config.approval_allow);
        let pacing = config.pacing != Some(config::Pacing::Off);
        let mcp_servers = jobs::mcp_servers(config.mcp_servers)?;
        let tools = jobs::tools(&config.tools, &mcp_servers)?;
        Ok(Settings {
            task,
            json: cli.json,
            quiet: cli.quiet,
            output: cli.output.clone(),
            log_db: cli.log_db.clone(),
            primary,
            fallbacks,
            step_limit: limits.step_limit,
            cost_limit: limits.cost_limit,
            time_limit: limits.time_limit,
            max_output_tokens: limits.max_output_tokens,
            reasoning_effort: limits.reasoning_effort,
            retry,
            fallback,
            hedge,
            compaction: jobs::compaction(&config.compaction)?,
            hooks: jobs::hooks(&config.hooks),
            instructions: jobs::instructions(cli, config.instructions.as_ref(), &cwd),
            cwd,
            mcp_servers,
            health_db,
            pacing,
            subagents,
            worktree,
            sandbox,
            save_runs,
            tools,
            outage_wait,
            budgets,
            rate_limits,
            approval,
        })
    }
}

impl Settings {
    /// The run's chain: the primary, then its fallbacks.
    pub(crate) fn chain(&self) -> impl Iterator<Item = &ResolvedModel> {
        std::iter::once(&self.primary).chain(&self.fallbacks)
    }
}

/// `--outage-wait`, else config `outage_wait` (checked as the config is
/// read), else 0 (off); a bad flag value names the flag.
fn outage_wait(cli: &Cli, config: &Config) -> Result<Duration, SetupError> {
    match &cli.outage_wait {
        Some(text) => duration::parse(text).map_err(|e| SetupError(format!("--outage-wait: {e}"))),
        None => Ok(config.outage_wait.unwrap_or_default()),
    }
}

/// Whether a run is kept in the run store: neither `--no-save` nor
/// `save_runs: false`.
pub(crate) fn save_runs(cli: &Cli, config: &Config) -> bool {
    !cli.no_save && config.save_runs != Some(false)
}

/// The working directory: `-C`, else a resumed run's own (when it still
/// exists), else the current one; canonical.
fn working_dir(flag: Option<&Path>, resumed: Option<&Checkpointed>) -> Result<PathBuf, SetupError> {
    let resumed_cwd = resumed
        .and_then(|cp| cp.doc.cwd.as_ref())
        .map(PathBuf::from)
        .filter(|d| d.is_dir());
    let cwd = match flag.map(Path::to_path_buf).or(resumed_cwd) {
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
    Ok(cwd.canonicalize().unwrap_or(cwd))
}

/// `--sandbox`, with `--sandbox-allow-domain` over `sandbox_allowed_domains`.
fn sandbox(cli: &Cli, config: &Config) -> Result<Option<Allowlist>, SetupError> {
    Ok(match (cli.sandbox, cli.sandbox_allow_domain.is_empty()) {
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
    })
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
#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Cooldown;
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
            e.0.contains("unknown provider 'opneai' (did you mean 'openai'?)"),
            "{e}"
        );
        let e = resolve(&["-m", "zzz/x"], &[]).unwrap_err();
        assert!(
            e.0.ends_with(
                "unknown provider 'zzz'; known providers: openai, responses, anthropic, ollama, openrouter, script, bedrock, vertex, azure, gemini, foundry"
            ),
            "{e}"
        );
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
