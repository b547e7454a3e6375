//! The first phase: everything that can fail before anything is emitted
//! (exit 2): the checkpoint to resume, settings, the run's and the
//! subagents' chains, the job options, the instructions and the log
//! database. It also decides where the run is kept.

use std::path::{Path, PathBuf};

use super::{Diagnostics, Origin};
use crate::agent::instructions::{self, Instructions};
use crate::agent::subagent::Subagent;
use crate::agent::{job_options, JobOptions};
use crate::cli::Cli;
use crate::events::sqlite::SqliteSink;
use crate::interactive::{self, Start};
use crate::model::chain::ChainModel;
use crate::model::registry::{build_member, RegistryError};
use crate::model::spec::ResolvedModel;
use crate::resume;
use crate::runs;
use crate::settings::{self, process_env, Settings, SetupError};
use crate::tools::filter::ToolFilter;
use crate::worktree;

/// A run resolved and ready for its first request.
pub(super) struct Prepared {
    pub(super) settings: Settings,
    /// The run's chain; the health record joins it once the run has an emitter.
    pub(super) chain: ChainModel,
    pub(super) log_db: Option<SqliteSink>,
    pub(super) resume: Option<resume::Checkpointed>,
    /// A resumed FILE written back when no `-o` is given (`--resume`).
    pub(super) write_back: Option<PathBuf>,
    /// The run store, unless this run is kept out of it.
    pub(super) keep: Option<runs::Keep>,
    /// Warnings found so far (skipped store entries, instruction files).
    pub(super) diagnostics: Diagnostics,
    pub(super) jobs: JobOptions,
    pub(super) instructions: Instructions,
    pub(super) tool_filter: ToolFilter,
    /// The interactive session this run belongs to, if any.
    pub(super) session: Option<interactive::Link>,
    /// A session's `/compact`: the run compacts the conversation and ends.
    pub(super) compact: bool,
}

/// Everything that can fail before the first request: the checkpoint to
/// resume, settings, the run's and the subagents' models, the job options
/// and the log database.
pub(super) fn prepare(cli: &Cli, start: Start) -> Result<Prepared, SetupError> {
    let has_task = start.task.is_some()
        || worktree::split_task_and_name(cli.task.as_deref(), cli.worktree.as_ref())
            .0
            .is_some();
    let store = runs::RunStore::locate(&process_env);
    let mut diagnostics = Diagnostics::default();
    let session = start.session;
    let compact = start.compact;
    let mut store_cwd = start.store_cwd;
    let (resume, write_back) = match start.previous {
        // A session's follow-up continues its conversation in memory.
        Some(doc) => {
            let cp = resume::Checkpointed {
                path: PathBuf::new(),
                doc,
                started: Vec::new(),
            };
            (Some(cp), None)
        }
        None => to_resume(
            cli,
            store.as_ref(),
            has_task,
            &mut diagnostics,
            &mut store_cwd,
        )?,
    };
    let settings = match start.task {
        Some(task) => Settings::from_parts(
            cli,
            settings::load_config(&cli.config, &process_env)?,
            task,
            &process_env,
            resume.as_ref(),
        )?,
        None => Settings::resolve(cli, &process_env, resume.as_ref())?,
    };
    let keep = settings.save_runs.then(|| runs::Keep {
        store,
        cwd: store_cwd.unwrap_or_else(|| settings.cwd.clone()),
    });
    let chain = build_chain(settings.chain(), &settings)?;
    let tool_filter = settings.tools.clone();
    let mut jobs = job_options(
        cli.output_schema.as_deref(),
        settings.compaction,
        settings.hooks.clone(),
        subagent(&settings, &tool_filter)?,
    )?;
    let mut instructions = instructions::load(&settings.instructions, &settings.cwd)?;
    diagnostics.extend(
        Origin::Instructions,
        std::mem::take(&mut instructions.warnings),
    );
    jobs.system_note = instructions.prompt_section();
    jobs.approvals = settings
        .approval
        .gate(session.as_ref().map(|s| &s.always), settings.json)?;
    // The user asked for the record: a database that cannot be opened is a
    // setup error, before any request, not a run that silently logs nothing.
    let log_db = match &settings.log_db {
        Some(path) => Some(SqliteSink::open(path).map_err(|e| SetupError(e.to_string()))?),
        None => None,
    };
    // The same for the checkpoint: a run that asked for one never goes on
    // without it (SPEC 7).
    if let Some(path) = &settings.output {
        writable(path).map_err(|e| {
            SetupError(format!(
                "-o {}: cannot write the trajectory: {e}",
                path.display()
            ))
        })?;
    }
    Ok(Prepared {
        settings,
        chain,
        log_db,
        resume,
        write_back,
        keep,
        diagnostics,
        jobs,
        instructions,
        tool_filter,
        session,
        compact,
    })
}

/// The checkpoint a run given on the command line continues, if any:
/// `--resume FILE` (written back to FILE when no `-o` is given), or
/// `--continue`, the store's last run started in this directory (whose
/// directory the run is then kept under).
fn to_resume(
    cli: &Cli,
    store: Option<&runs::RunStore>,
    has_task: bool,
    diagnostics: &mut Diagnostics,
    store_cwd: &mut Option<PathBuf>,
) -> Result<(Option<resume::Checkpointed>, Option<PathBuf>), SetupError> {
    if let Some(path) = &cli.resume {
        return Ok((Some(resume::load_for(path, has_task)?), Some(path.clone())));
    }
    if !cli.continue_run {
        return Ok((None, None));
    }
    let dir = launch_dir(cli)?;
    let (cp, skipped) = runs::find_continue(store, &dir, has_task)?;
    diagnostics.extend(Origin::Store, skipped);
    if store_cwd.is_none() {
        *store_cwd = Some(dir);
    }
    Ok((Some(cp), None))
}

/// The `delegate` tool's child, with `subagents:` configured and
/// `delegate` not denied (a denied `delegate` means no subagent): its own
/// chain, built as the run's is.
fn subagent(settings: &Settings, tool_filter: &ToolFilter) -> Result<Option<Subagent>, SetupError> {
    let Some(sub) = &settings.subagents else {
        return Ok(None);
    };
    // Built (and so checked) even when `delegate` is denied.
    let chain = build_chain(
        std::iter::once(&sub.primary).chain(&sub.fallbacks),
        settings,
    )
    .map_err(|e| SetupError(format!("config subagents: {e}")))?;
    if !tool_filter.allows("delegate") {
        return Ok(None);
    }
    let fallback_models = sub.fallbacks.iter().map(|m| m.spec.to_string()).collect();
    Ok(Some(Subagent::new(
        chain,
        fallback_models,
        sub.step_limit,
        tool_filter.clone(),
    )))
}

/// Whether a trajectory can be written at `path` as `Checkpoint` writes it
/// (a file beside it, then renamed over it): a missing directory, a path
/// that is a directory or a directory without write permission is an
/// error. Leaves nothing behind.
fn writable(path: &Path) -> std::io::Result<()> {
    if path.is_dir() {
        return Err(std::io::Error::other("it is a directory"));
    }
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    if !dir.exists() {
        return Err(std::io::Error::other(format!(
            "the directory {} does not exist",
            dir.display()
        )));
    }
    if !dir.is_dir() {
        return Err(std::io::Error::other(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    // The system's reason alone ("Permission denied"), not the probe's name.
    tempfile::Builder::new()
        .prefix(".tinyagent-")
        .tempfile_in(dir)
        .map(drop)
        .map_err(|e| {
            e.raw_os_error()
                .map_or(e, std::io::Error::from_raw_os_error)
        })
}

/// The directory `--continue` looks up: `-C`, else the current one, canonical.
fn launch_dir(cli: &Cli) -> Result<PathBuf, SetupError> {
    let dir = match &cli.cwd {
        Some(dir) => dir.clone(),
        None => std::env::current_dir()
            .map_err(|e| SetupError(format!("cannot read the current directory: {e}")))?,
    };
    if !dir.is_dir() {
        return Err(SetupError(format!(
            "--cwd {}: not a directory",
            dir.display()
        )));
    }
    Ok(dir.canonicalize().unwrap_or(dir))
}

/// A chain of `models` (primary first) under the run's retry, fallback,
/// outage-wait and pacing settings: the run's own and the subagents' are
/// built here alike.
fn build_chain<'a>(
    models: impl Iterator<Item = &'a ResolvedModel>,
    settings: &Settings,
) -> Result<ChainModel, RegistryError> {
    let models: Vec<&ResolvedModel> = models.collect();
    // Each member's declared limits and the reply budget its requests
    // reserve as output tokens (SPEC 24).
    let limits = models
        .iter()
        .map(|m| {
            let budget = m.reply_budget.or(settings.max_output_tokens);
            (settings.rate_limits.windows(m.spec.as_str()), budget)
        })
        .collect();
    let members = models
        .into_iter()
        .map(|model| build_member(model, settings.retry.stream_timeouts()))
        .collect::<Result<Vec<_>, _>>()?;
    let chain = ChainModel::new(members, settings.retry.clone(), settings.fallback.clone())
        .with_pace_limits(limits)
        .with_outage_wait(settings.outage_wait)
        .with_hedging(settings.hedge);
    Ok(if settings.pacing {
        chain
    } else {
        chain.without_pacing()
    })
}
