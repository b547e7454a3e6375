//! The third phase: the run's sinks and emitter, its document (new or
//! continued), `run.started` and the warnings gathered so far, the MCP
//! servers, the checkpoint, the tools and the health record, put together
//! into the `Agent`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::isolate::Isolated;
use super::{Diagnostics, Origin};
use crate::agent::{Agent, JobOptions, Limits, Parts, RequestOptions};
use crate::check;
use crate::conversation::{Message, Role};
use crate::events::github::GithubSink;
use crate::events::human::once::ShownOnce;
use crate::events::human::HumanSink;
use crate::events::jsonl::JsonlSink;
use crate::events::otel::{OtelConfig, OtelSink};
use crate::events::{Emitter, Event, Sink, SwitchNotices};
use crate::health;
use crate::interactive;
use crate::mcp::{self, McpServers};
use crate::model::chain::ChainModel;
use crate::model::gate::BudgetBook;
use crate::model::spec::ResolvedModel;
use crate::resume;
use crate::runs::{self, RecordingSink};
use crate::sandbox::Sandbox;
use crate::settings::{process_env, Settings};
use crate::signals;
use crate::start_warnings;
use crate::stop::Stop;
use crate::tools::bash::{BashTool, CommandBuilder, PlainBash, SpawnEnv};
use crate::tools::files::{EditFile, ListFiles, ReadFile, WriteFile};
use crate::tools::grep::GrepTool;
use crate::tools::plan::{PlanTool, SharedPlan};
use crate::tools::ToolRegistry;
use crate::trajectory::{now_rfc3339, Checkpoint, Trajectory};

/// A run ready to go: its agent and what its end needs.
pub(super) struct Wired {
    pub(super) agent: Agent,
    /// A resumed checkpoint's final answer: the run ends at once with it.
    pub(super) answered: Option<Value>,
    pub(super) mcp: McpServers,
    pub(super) sandbox: Option<Sandbox>,
    pub(super) json: bool,
    pub(super) quiet: bool,
    /// The checkpoint a `--resume` hint names, when it is written.
    pub(super) resumable: Option<PathBuf>,
    /// The trajectory is the run store's own file (no `-o`, no resumed FILE).
    pub(super) volatile: bool,
    /// The directory the run store records the run under.
    pub(super) store_cwd: Option<PathBuf>,
    /// A session's `/compact`: compact the conversation, then end.
    pub(super) compact: bool,
}

/// Where events go, and the trajectory path once the run store had its say.
struct Outlets {
    sinks: Vec<Box<dyn Sink>>,
    output_path: Option<PathBuf>,
    spawn_env: SpawnEnv,
}

/// Builds everything the run needs and emits `run.started`.
pub(super) async fn wire(isolated: Isolated, run_id: String) -> Wired {
    let Isolated {
        prepared,
        sandbox,
        worktree,
    } = isolated;
    let mut diagnostics = prepared.diagnostics;
    let settings = prepared.settings;
    let compact = prepared.compact;
    // `-o`, else a resumed FILE written back, else (kept) the store's file.
    let output_path = settings.output.clone().or(prepared.write_back);
    // The store's own file (no -o, no resumed FILE) is kept cheap: not synced.
    let volatile = output_path.is_none();
    let keep = prepared.keep;
    let outlets = outlets(
        &settings,
        prepared.session.as_ref(),
        &run_id,
        keep.as_ref(),
        prepared.log_db,
        output_path,
        &mut diagnostics,
    );
    let emitter = Emitter::new(&run_id, outlets.sinks);
    let cancel = CancellationToken::new();
    signals::watch(cancel.clone());
    let deadline = settings.time_limit.map(|t| Instant::now() + t);
    let stop = Stop::new(cancel, deadline);

    let answers_checked =
        prepared.jobs.output_schema.is_some() || !prepared.jobs.hooks.stop.is_empty();
    let (mut doc, mut new_messages, answered) =
        document(&settings, &run_id, prepared.resume, answers_checked);
    if compact {
        // `/compact` asks nothing of the model: only the results of calls
        // an interrupted run left unanswered are kept, no note to answer.
        new_messages.retain(|m| m.role == Role::Tool);
    }
    // A resumed run keeps its checkpoint's worktree unless it made a new one.
    if worktree.is_some() {
        doc.worktree = worktree;
    }
    announce(
        &emitter,
        &doc,
        &settings,
        prepared.instructions.paths(),
        diagnostics,
    );
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
    let checkpoint = (outlets.output_path.as_deref())
        .and_then(|path| create_checkpoint(path, &doc, volatile, &emitter));
    let resumable = checkpoint.as_ref().and(outlets.output_path);
    let plan: SharedPlan = Arc::new(Mutex::new(doc.plan.clone()));
    let tools = tools(
        prepared.tool_filter,
        sandbox.as_ref(),
        outlets.spawn_env,
        &plan,
        &mcp,
        &emitter,
    );
    let mut jobs = prepared.jobs;
    let chain = chain(prepared.chain, &mut jobs, &settings, &doc, &emitter);
    let parts = Parts {
        chain,
        tools,
        emitter,
        stop,
        limits: limits(&settings),
        options: request_options(&settings),
        cwd: settings.cwd.clone(),
        plan,
        jobs,
    };
    Wired {
        agent: Agent::new(parts, doc, checkpoint),
        answered,
        mcp,
        sandbox,
        json: settings.json,
        quiet: settings.quiet,
        resumable,
        volatile,
        store_cwd: keep.map(|k| k.cwd),
        compact,
    }
}

/// `run.started`, then the warnings gathered before the emitter existed,
/// the price warnings and, for a resumed run, the limit warnings.
fn announce(
    emitter: &Emitter,
    doc: &Trajectory,
    settings: &Settings,
    instructions: Vec<String>,
    diagnostics: Diagnostics,
) {
    emitter.emit(Event::RunStarted {
        task: doc.task.clone(),
        model: settings.primary.spec.to_string(),
        cwd: settings.cwd.display().to_string(),
        fallback_models: doc.fallback_models.clone(),
        resumed_from: doc.resumed_from.clone(),
        worktree: doc.worktree.clone(),
        instructions,
    });
    diagnostics.emit(emitter);
    start_warnings::prices(
        &settings.chain().collect::<Vec<_>>(),
        settings.cost_limit,
        emitter,
    );
    start_warnings::regions(&check::models(settings), emitter);
    start_warnings::hedging(settings.hedge.after, settings.fallbacks.len(), emitter);
    if doc.resumed_from.is_some() {
        resume_limit_warnings(doc, settings, emitter);
    }
}

/// The run's chain with the health record, the budget book and the reply
/// caps the document learnt. One book serves the run and its subagents
/// (whose chain in `jobs` gets it too): everything the run spends counts.
fn chain(
    chain: ChainModel,
    jobs: &mut JobOptions,
    settings: &Settings,
    doc: &Trajectory,
    emitter: &Emitter,
) -> ChainModel {
    let health = health::for_run(settings.health_db.as_ref(), emitter);
    let budgets = BudgetBook::new(settings.budgets.clone(), health.clone());
    start_warnings::budgets(&budgets, &check::models(settings), emitter);
    let key = doc.cache_key();
    let chain = chain
        .with_health(health)
        .with_budgets(budgets.clone())
        .with_cache_key(key.clone());
    chain.restore_reply_caps(&doc.reply_caps);
    if let Some(sub) = jobs.subagent.as_mut() {
        let key = format!("{key}-subagents");
        sub.chain = sub
            .chain
            .take()
            .map(|c| c.with_budgets(budgets).with_cache_key(key));
    }
    chain
}

/// The run's step and cost limits.
fn limits(settings: &Settings) -> Limits {
    Limits {
        steps: settings.step_limit,
        cost_usd: settings.cost_limit,
    }
}

/// What every request of the run asks for.
fn request_options(settings: &Settings) -> RequestOptions {
    RequestOptions {
        max_output_tokens: settings.max_output_tokens,
        reasoning_effort: settings.reasoning_effort.clone(),
        output_schema: None,
    }
}

/// The run's document, new or continued from a checkpoint, the messages
/// it starts with, and a resumed checkpoint's final answer.
fn document(
    settings: &Settings,
    run_id: &str,
    resume: Option<resume::Checkpointed>,
    answers_checked: bool,
) -> (Trajectory, Vec<Message>, Option<Value>) {
    let fallback_models: Vec<String> = settings
        .fallbacks
        .iter()
        .map(|m| m.spec.to_string())
        .collect();
    let cwd = settings.cwd.display().to_string();
    match resume {
        Some(cp) => {
            let c = resume::continue_run(
                cp,
                resume::NewRun {
                    run_id,
                    fallback_models,
                    cwd: &cwd,
                    task: Some(settings.task.as_str()).filter(|t| !t.is_empty()),
                    started_at: now_rfc3339(),
                    answers_are_checked: answers_checked,
                },
            );
            (c.doc, c.new_messages, c.answered)
        }
        None => {
            let doc = Trajectory::new(
                run_id,
                &settings.task,
                &settings.primary.spec.to_string(),
                fallback_models,
                &cwd,
            );
            let task = Message::new(Role::User, settings.task.clone(), 0);
            (doc, vec![task], None)
        }
    }
}

/// The run's sinks (the view, the run store, the log database, GitHub
/// Actions, tracing) and, once the run store had its say, the trajectory's
/// path. Their warnings go into `diagnostics`.
fn outlets(
    settings: &Settings,
    session: Option<&interactive::Link>,
    run_id: &str,
    keep: Option<&runs::Keep>,
    log_db: Option<crate::events::sqlite::SqliteSink>,
    mut output_path: Option<PathBuf>,
    diagnostics: &mut Diagnostics,
) -> Outlets {
    let mut sinks = view(settings, session);
    if let Some(keep) = keep {
        let already = diagnostics.of(Origin::Store);
        let mut warnings = Vec::new();
        let recording;
        (output_path, recording) = keep.begin(run_id, output_path, &mut warnings);
        diagnostics.extend(Origin::Store, warnings);
        sinks.push(Box::new(RecordingSink::new(recording, already)));
    }
    if let Some(db) = log_db {
        sinks.push(Box::new(db));
    }
    // Under GitHub Actions: annotations and the step summary, which names
    // the checkpoint to resume.
    if let Some(sink) = GithubSink::from_env(&process_env, output_path.clone()) {
        diagnostics.extend(Origin::Github, sink.summary_problem());
        sinks.push(Box::new(sink));
    }
    // Tracing is one more sink; off (nothing initialised) without an endpoint.
    let spawn_env = SpawnEnv::default();
    if let Some(config) = OtelConfig::from_env(&process_env) {
        let slot = spawn_env.clone();
        let (sink, warnings) = OtelSink::start(config, Box::new(move |vars| slot.set(vars)));
        sinks.extend(sink.map(|s| Box::new(s) as Box<dyn Sink>));
        diagnostics.extend(Origin::Tracing, warnings);
    }
    Outlets {
        sinks,
        output_path,
        spawn_env,
    }
}

/// The view: the `--json` stream with the switch lines on stderr, or the
/// human view (which prints the switch lines itself, above its spinner).
fn view(settings: &Settings, session: Option<&interactive::Link>) -> Vec<Box<dyn Sink>> {
    if settings.json {
        return vec![Box::new(SwitchNotices), Box::new(JsonlSink::stdout())];
    }
    // A session's tool lines show the end of a command's output.
    let mut human = HumanSink::new(settings.quiet).with_output_tail(session.is_some());
    // A dearer fallback is said once per machine on the terminal; the
    // `warning` event still comes on every run.
    if let Some(dir) = runs::state_dir(&process_env) {
        let models: Vec<&ResolvedModel> = settings.chain().collect();
        let once = ShownOnce::new(
            dir.join("notices"),
            start_warnings::dearer_fallbacks(&models),
        );
        human = human.show_once(once);
    }
    let mut sinks: Vec<Box<dyn Sink>> = vec![Box::new(human)];
    if let Some(session) = session {
        sinks.push(session.ledger.sink());
    }
    sinks
}

/// The built-in tools (bash sandboxed under `--sandbox`) and every started
/// MCP server's, within the config's tool filter.
fn tools(
    filter: crate::tools::filter::ToolFilter,
    sandbox: Option<&Sandbox>,
    spawn_env: SpawnEnv,
    plan: &SharedPlan,
    mcp: &McpServers,
    emitter: &Emitter,
) -> ToolRegistry {
    let mut tools = ToolRegistry::with_filter(filter);
    let bash: Box<dyn CommandBuilder> = match sandbox {
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
    for tool in mcp.tools(emitter) {
        tools.add(tool);
    }
    tools
}

/// The checkpoint at `path` (the store's own file unsynced); a warning and
/// none when it cannot be written.
fn create_checkpoint(
    path: &Path,
    doc: &Trajectory,
    volatile: bool,
    emitter: &Emitter,
) -> Option<Checkpoint> {
    let created = if volatile {
        Checkpoint::create_volatile(path, doc)
    } else {
        Checkpoint::create(path, doc)
    };
    match created {
        Ok(cp) => Some(cp),
        Err(e) => {
            emitter.warn(format!(
                "cannot write the trajectory {}: {e}",
                path.display()
            ));
            None
        }
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
