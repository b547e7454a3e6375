//! tinyagent: a command-line coding agent that survives provider outages.
//!
//! `run` is the one place that wires settings, models, tools and sinks
//! together; see CONTRIBUTING.md for the map of the code.

pub(crate) mod agent;
pub(crate) mod check;
pub mod cli;
pub(crate) mod config;
pub(crate) mod conversation;
pub(crate) mod duration;
pub mod events;
pub mod exit;
#[cfg(test)]
mod fuzz_tests;
pub mod health;
pub(crate) mod help;
pub(crate) mod interactive;
pub(crate) mod mcp;
pub mod model;
pub mod policy;
pub(crate) mod resume;
pub mod runs;
pub mod sandbox;
pub(crate) mod settings;
pub(crate) mod setup;
pub(crate) mod signals;
pub(crate) mod stop;
pub(crate) mod suggest;
pub(crate) mod task_input;
pub(crate) mod tools;
pub mod trajectory;
pub(crate) mod wire_api;
pub(crate) mod worktree;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use agent::instructions::{self, Instructions};
use agent::subagent::Subagent;
use agent::{job_options, Agent, JobOptions, Limits, RequestOptions};
use cli::Cli;
use conversation::{Message, Role};
use events::human::HumanSink;
use events::jsonl::JsonlSink;
use events::otel::{OtelConfig, OtelSink};
use events::sqlite::SqliteSink;
use events::{Emitter, Event, Sink, SwitchNotices};
use exit::Status;
use interactive::{Ended, Start};
use mcp::McpServers;
use model::chain::ChainModel;
use model::registry::{build_member, RegistryError};
use model::spec::ResolvedModel;
use sandbox::Sandbox;
use settings::{process_env, Settings, SetupError};
use stop::Stop;
use tools::bash::{BashTool, CommandBuilder, PlainBash, SpawnEnv};
use tools::files::{EditFile, ListFiles, ReadFile, WriteFile};
use tools::filter::ToolFilter;
use tools::grep::GrepTool;
use tools::plan::{PlanTool, SharedPlan};
use tools::{ToolCtx, ToolRegistry};
use trajectory::{now_rfc3339, Checkpoint, Trajectory};

/// Runs tinyagent for parsed flags and returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    if cli.check {
        return check::run(&cli, &process_env);
    }
    if let Some(kind) = cli.generate {
        return help::generate(kind, <Cli as clap::CommandFactory>::command());
    }
    match interactive::wanted(&cli) {
        Ok(true) => interactive::session(cli, run_one),
        Ok(false) => run_one(&cli, Start::default()).code,
        Err(e) => {
            eprintln!("tinyagent: error: {e}");
            exit::USAGE
        }
    }
}

/// Prepares and runs one run on its own runtime.
fn run_one(cli: &Cli, start: Start) -> Ended {
    let not_started = |code| Ended {
        code,
        doc: None,
        store_cwd: None,
    };
    match prepare(cli, start) {
        Ok(prepared) => {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("tinyagent: error: cannot start the async runtime: {e}");
                    return not_started(1);
                }
            };
            runtime.block_on(run_agent(prepared))
        }
        Err(e) => {
            eprintln!("tinyagent: error: {e}");
            not_started(exit::USAGE)
        }
    }
}

/// A run resolved and ready for its first request.
struct Prepared {
    settings: Settings,
    /// The run's chain; the health record joins it once the run has an emitter.
    chain: ChainModel,
    log_db: Option<SqliteSink>,
    resume: Option<resume::Checkpointed>,
    /// A resumed FILE written back when no `-o` is given (`--resume`).
    write_back: Option<PathBuf>,
    /// The run store, unless this run is kept out of it.
    keep: Option<runs::Keep>,
    /// Warnings found before the run started (skipped store entries).
    warnings: Vec<String>,
    jobs: JobOptions,
    instructions: Instructions,
    tool_filter: ToolFilter,
}

/// Everything that can fail before the first request: the checkpoint to
/// resume, settings, the run's and the subagents' models, the job options
/// and the log database.
fn prepare(cli: &Cli, start: Start) -> Result<Prepared, SetupError> {
    let has_task = start.task.is_some()
        || worktree::split_task_and_name(cli.task.as_deref(), cli.worktree.as_ref())
            .0
            .is_some();
    let store = runs::RunStore::locate(&process_env);
    let mut warnings = Vec::new();
    let mut store_cwd = start.store_cwd;
    let (resume, write_back) = if let Some(doc) = start.previous {
        let cp = resume::Checkpointed {
            path: PathBuf::new(),
            doc,
            started: Vec::new(),
        };
        (Some(cp), None)
    } else if let Some(path) = &cli.resume {
        (Some(resume::load_for(path, has_task)?), Some(path.clone()))
    } else if cli.continue_run {
        let dir = launch_dir(cli)?;
        let (cp, skipped) = runs::find_continue(store.as_ref(), &dir, has_task)?;
        warnings = skipped;
        store_cwd = store_cwd.or(Some(dir));
        (Some(cp), None)
    } else {
        (None, None)
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
    let subagent = match &settings.subagents {
        None => None,
        Some(sub) => {
            let chain = build_chain(
                std::iter::once(&sub.primary).chain(&sub.fallbacks),
                &settings,
            )
            .map_err(|e| SetupError(format!("config subagents: {e}")))?;
            let fallback_models = sub.fallbacks.iter().map(|m| m.spec.to_string()).collect();
            Some(Subagent::new(
                chain,
                fallback_models,
                sub.step_limit,
                tool_filter.clone(),
            ))
        }
    };
    // A denied `delegate` means no subagent.
    let subagent = subagent.filter(|_| tool_filter.allows("delegate"));
    let mut jobs = job_options(
        cli.output_schema.as_deref(),
        settings.compaction,
        settings.hooks.clone(),
        subagent,
    )?;
    let instructions = instructions::load(&settings.instructions, &settings.cwd)?;
    jobs.system_note = instructions.prompt_section();
    // The user asked for the record: a database that cannot be opened is a
    // setup error, before any request, not a run that silently logs nothing.
    let log_db = match &settings.log_db {
        Some(path) => Some(SqliteSink::open(path).map_err(SetupError)?),
        None => None,
    };
    Ok(Prepared {
        settings,
        chain,
        log_db,
        resume,
        write_back,
        keep,
        warnings,
        jobs,
        instructions,
        tool_filter,
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

/// A chain of `models` (primary first) under the run's retry and fallback
/// settings: the run's own and the subagents' are built here alike.
fn build_chain<'a>(
    models: impl Iterator<Item = &'a ResolvedModel>,
    settings: &Settings,
) -> Result<ChainModel, RegistryError> {
    let members = models
        .map(|model| build_member(model, settings.retry.stream_timeouts()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ChainModel::new(
        members,
        settings.retry.clone(),
        settings.fallback.clone(),
    ))
}

fn sinks(settings: &Settings) -> Vec<Box<dyn Sink>> {
    // The human view prints the switch lines itself, above its spinner.
    if settings.json {
        vec![Box::new(SwitchNotices), Box::new(JsonlSink::stdout())]
    } else {
        vec![Box::new(HumanSink::new(settings.quiet))]
    }
}

/// Warnings due before the first request: unpriced models under a cost
/// limit, and fallbacks dearer than the primary.
fn price_warnings(models: &[&ResolvedModel], cost_limit: Option<f64>, emitter: &Emitter) {
    if cost_limit.is_some_and(|c| c > 0.0) {
        for m in models.iter().filter(|m| m.pricing.is_none()) {
            emitter.warn(format!(
                "model {} has no known price: its responses count as $0 toward the cost limit",
                m.spec
            ));
        }
    }
    if let Some(primary) = models[0].pricing {
        for m in &models[1..] {
            if let Some(p) = m.pricing {
                if p.input > primary.input || p.output > primary.output {
                    emitter.warn(format!(
                        "fallback model {} costs more than the primary {} (${}/${} vs ${}/${} per million input/output tokens)",
                        m.spec, models[0].spec, p.input, p.output, primary.input, primary.output
                    ));
                }
            }
        }
    }
}

/// Sets up `--sandbox` and `--worktree`, which may refuse the run (exit 2)
/// before anything is emitted. The sandbox comes first, so a refused run
/// leaves no worktree behind. Moves the run's cwd into the worktree.
async fn start_isolation(
    settings: &mut Settings,
    run_id: &str,
) -> Result<(Option<Sandbox>, Option<worktree::Worktree>), String> {
    let sandbox = match &settings.sandbox {
        Some(allow) => Some(
            Sandbox::start(allow.clone(), &settings.cwd, process_env("PATH").as_deref())
                .await
                .map_err(|e| format!("--sandbox: {e}"))?,
        ),
        None => None,
    };
    let worktree = match &settings.worktree {
        Some(name) => {
            let wt = worktree::create(&settings.cwd, name.as_deref().unwrap_or(run_id))
                .map_err(|e| format!("--worktree: {e}"))?;
            eprintln!("worktree: {}", wt.path.display());
            settings.cwd = wt.cwd.clone();
            Some(wt)
        }
        None => None,
    };
    Ok((sandbox, worktree))
}

async fn run_agent(prepared: Prepared) -> Ended {
    let Prepared {
        mut settings,
        chain,
        log_db,
        resume,
        write_back,
        keep,
        warnings,
        jobs,
        instructions,
        tool_filter,
    } = prepared;
    let run_id = uuid::Uuid::new_v4().to_string();
    let (sandbox, worktree) = match start_isolation(&mut settings, &run_id).await {
        Ok(isolation) => isolation,
        Err(e) => {
            eprintln!("tinyagent: error: {e}");
            return Ended {
                code: exit::USAGE,
                doc: None,
                store_cwd: None,
            };
        }
    };
    let worktree = worktree.map(|wt| wt.path.display().to_string());
    let mut warnings = warnings;
    // `-o`, else a resumed FILE written back, else (kept) the store's file.
    let mut output_path = settings.output.clone().or(write_back);
    // The store's own file (no -o, no resumed FILE) is kept cheap: not synced.
    let volatile = output_path.is_none();
    let store_dir = keep.as_ref().map(|k| k.cwd.clone());
    let mut sinks = sinks(&settings);
    if let Some(keep) = &keep {
        let already = warnings.clone();
        let recording;
        (output_path, recording) = keep.begin(&run_id, output_path, &mut warnings);
        sinks.push(Box::new(runs::RecordingSink::new(recording, already)));
    }
    if let Some(db) = log_db {
        sinks.push(Box::new(db));
    }
    // Under GitHub Actions: annotations and the step summary, which names
    // the checkpoint to resume.
    let github = events::github::GithubSink::from_env(&process_env, output_path.clone());
    let github_warning = github.as_ref().and_then(|g| g.summary_problem());
    if let Some(sink) = github {
        sinks.push(Box::new(sink));
    }
    // Tracing is one more sink; off (nothing initialised) without an endpoint.
    let spawn_env = SpawnEnv::default();
    let mut otel_warnings = Vec::new();
    if let Some(config) = OtelConfig::from_env(&process_env) {
        let slot = spawn_env.clone();
        let (sink, warnings) = OtelSink::start(config, Box::new(move |vars| slot.set(vars)));
        sinks.extend(sink.map(|s| Box::new(s) as Box<dyn Sink>));
        otel_warnings = warnings;
    }
    let emitter = Emitter::new(&run_id, sinks);
    let cancel = CancellationToken::new();
    signals::watch(cancel.clone());
    let deadline = settings.time_limit.map(|t| Instant::now() + t);
    let stop = Stop::new(cancel, deadline);

    let fallback_models: Vec<String> = settings
        .fallbacks
        .iter()
        .map(|m| m.spec.to_string())
        .collect();
    let cwd = settings.cwd.display().to_string();
    let (mut doc, new_messages, answered) = match resume {
        Some(cp) => {
            let c = resume::continue_run(
                cp,
                resume::NewRun {
                    run_id: &run_id,
                    fallback_models: fallback_models.clone(),
                    cwd: &cwd,
                    task: Some(settings.task.as_str()).filter(|t| !t.is_empty()),
                    started_at: now_rfc3339(),
                    answers_are_checked: jobs.output_schema.is_some()
                        || !jobs.hooks.stop.is_empty(),
                },
            );
            (c.doc, c.new_messages, c.answered)
        }
        None => {
            let doc = Trajectory::new(
                &run_id,
                &settings.task,
                &settings.primary.spec.to_string(),
                fallback_models.clone(),
                &cwd,
            );
            let task = Message::new(Role::User, settings.task.clone(), 0);
            (doc, vec![task], None)
        }
    };
    // A resumed run keeps its checkpoint's worktree unless it made a new one.
    if worktree.is_some() {
        doc.worktree = worktree;
    }
    emitter.emit(Event::RunStarted {
        task: doc.task.clone(),
        model: settings.primary.spec.to_string(),
        cwd: cwd.clone(),
        fallback_models: fallback_models.clone(),
        resumed_from: doc.resumed_from.clone(),
        worktree: doc.worktree.clone(),
        instructions: instructions.paths(),
    });
    if let Some(warning) = github_warning {
        emitter.warn(warning);
    }
    for warning in &warnings {
        emitter.warn(warning.clone());
    }
    for warning in &instructions.warnings {
        emitter.warn(warning.clone());
    }
    for warning in otel_warnings {
        emitter.warn(warning);
    }
    let models: Vec<&ResolvedModel> = settings.chain().collect();
    price_warnings(&models, settings.cost_limit, &emitter);
    if doc.resumed_from.is_some() {
        resume_limit_warnings(&doc, &settings, &emitter);
    }
    let mcp = McpServers::start(
        &settings.mcp_servers,
        &settings.cwd,
        &process_env,
        &emitter,
        mcp::START_TIMEOUT,
        &stop,
    )
    .await;
    // The first FILE holds the new messages (the task): no journal yet.
    doc.messages.extend(new_messages);
    let checkpoint = match &output_path {
        Some(path) => match create_checkpoint(path, &doc, volatile) {
            Ok(cp) => Some(cp),
            Err(e) => {
                emitter.warn(format!(
                    "cannot write the trajectory {}: {e}",
                    path.display()
                ));
                None
            }
        },
        None => None,
    };

    let resumable = checkpoint.as_ref().and(output_path.clone());
    let plan: SharedPlan = Arc::new(Mutex::new(doc.plan.clone()));
    let prior_switches = doc.model_switches.len();
    let mut tools = ToolRegistry::with_filter(tool_filter);
    let bash: Box<dyn CommandBuilder> = match &sandbox {
        Some(sandbox) => Box::new(sandbox.bash()),
        None => Box::new(PlainBash),
    };
    tools.add(Box::new(BashTool::new(bash).with_env(spawn_env)));
    tools.add(Box::new(ReadFile));
    tools.add(Box::new(WriteFile));
    tools.add(Box::new(EditFile));
    tools.add(Box::new(ListFiles));
    tools.add(Box::new(GrepTool));
    tools.add(Box::new(PlanTool { plan: plan.clone() }));
    for tool in mcp.tools(&emitter) {
        tools.add(tool);
    }

    let health = health::for_run(settings.health_db.as_ref(), &settings.fallback, &emitter);
    let chain = chain.with_health(health);
    let agent = Agent {
        chain,
        tools,
        emitter,
        stop: stop.clone(),
        limits: Limits {
            steps: settings.step_limit,
            cost_usd: settings.cost_limit,
        },
        options: RequestOptions {
            max_output_tokens: settings.max_output_tokens,
            reasoning_effort: settings.reasoning_effort.clone(),
            output_schema: None,
        },
        tool_ctx: ToolCtx {
            cwd: settings.cwd.clone(),
            stop,
        },
        plan,
        doc,
        checkpoint,
        prior_switches,
        jobs,
        meter: Default::default(),
    };
    let json_answer = agent.jobs.output_schema.is_some();
    let (outcome, doc) = match answered {
        Some(output) => {
            let doc = agent.doc.clone();
            (agent.finish_now(Vec::new(), Status::Completed, output), doc)
        }
        None => agent.run_keeping_doc(Vec::new()).await,
    };
    mcp.shutdown().await;
    drop(sandbox);
    if !settings.json {
        // Streamed onto this very terminal already: not shown twice.
        let shown = !json_answer
            && outcome.status == Status::Completed
            && events::human::answer_already_on_screen();
        if !shown {
            print_answer(&outcome.output, json_answer);
        }
        let hint = resumable.and_then(|path| {
            let store = volatile.then(|| events::human::Continue::for_dir(store_dir.as_deref()));
            events::human::resume_hint(outcome.status, &path, store)
        });
        if let Some(hint) = hint.filter(|_| !settings.quiet) {
            eprintln!("{hint}");
        }
    }
    Ended {
        code: outcome.exit_code,
        doc: Some(doc),
        store_cwd: keep.map(|k| k.cwd),
    }
}

fn create_checkpoint(
    path: &std::path::Path,
    doc: &Trajectory,
    volatile: bool,
) -> std::io::Result<Checkpoint> {
    if volatile {
        Checkpoint::create_volatile(path, doc)
    } else {
        Checkpoint::create(path, doc)
    }
}

/// Limits count the whole run: say so when a resumed run is already past one.
fn resume_limit_warnings(doc: &Trajectory, settings: &Settings, emitter: &Emitter) {
    if let Some(limit) = settings.step_limit.filter(|l| doc.steps >= *l) {
        emitter.warn(format!(
            "the resumed run has already taken {} steps, the step limit is {limit}: give a higher --step-limit to continue",
            doc.steps
        ));
    }
    if let Some(limit) = settings.cost_limit.filter(|l| doc.totals.cost_usd >= *l) {
        emitter.warn(format!(
            "the resumed run has already cost ${:.4}, the cost limit is ${limit}: give a higher --cost-limit to continue",
            doc.totals.cost_usd
        ));
    }
}

/// Prints the final answer on stdout: text as is, JSON as JSON. Under
/// `--output-schema` it is always the answer's compact JSON on one line.
fn print_answer(output: &Value, json_answer: bool) {
    use std::io::Write;
    let text = match output {
        Value::Null => return,
        Value::String(s) if !json_answer => s.clone(),
        other => other.to_string(),
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", text.trim_end_matches('\n'));
    let _ = out.flush();
}
