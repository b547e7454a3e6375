//! tinyagent: a command-line coding agent that survives provider outages.
//!
//! `run` is the one place that wires settings, models, tools and sinks
//! together; see CONTRIBUTING.md for the map of the code.

pub mod agent;
pub mod cli;
pub mod config;
pub mod duration;
pub mod events;
pub mod exit;
pub mod mcp;
pub mod model;
pub mod sandbox;
pub mod settings;
pub mod stop;
pub mod tools;
pub mod trajectory;
pub mod worktree;

use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use agent::{Agent, Limits, RequestOptions};
use cli::Cli;
use events::human::HumanSink;
use events::jsonl::JsonlSink;
use events::{Emitter, Event, Sink, SwitchNotices};
use exit::Status;
use mcp::McpServers;
use model::chain::{ChainModel, Member};
use model::registry::{build_member, StreamTimeouts};
use model::{Message, Role};
use sandbox::Sandbox;
use settings::{process_env, Settings, SetupError};
use stop::Stop;
use tools::bash::{BashTool, CommandBuilder, PlainBash};
use tools::files::{EditFile, ListFiles, ReadFile, WriteFile};
use tools::plan::{PlanTool, SharedPlan};
use tools::{ToolCtx, ToolRegistry};
use trajectory::{Checkpoint, Totals, Trajectory};

/// The current time as RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Runs tinyagent for parsed flags and returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    match prepare(&cli) {
        Ok((settings, members)) => {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("tinyagent: error: cannot start the async runtime: {e}");
                    return 1;
                }
            };
            runtime.block_on(run_agent(settings, members))
        }
        Err(e) => {
            eprintln!("tinyagent: error: {e}");
            exit::USAGE
        }
    }
}

/// Everything that can fail before the first request: settings and models.
fn prepare(cli: &Cli) -> Result<(Settings, Vec<Member>), SetupError> {
    let settings = Settings::resolve(cli, &process_env)?;
    let timeouts = StreamTimeouts {
        first_event: settings.retry.stream_first_event_timeout,
        idle: settings.retry.stream_idle_timeout,
    };
    let mut members = Vec::new();
    for spec in std::iter::once(&settings.primary).chain(&settings.fallbacks) {
        members.push(build_member(
            spec,
            &settings.providers,
            timeouts,
            &process_env,
        )?);
    }
    Ok((settings, members))
}

fn sinks(settings: &Settings) -> Vec<Box<dyn Sink>> {
    let mut sinks: Vec<Box<dyn Sink>> = vec![Box::new(SwitchNotices)];
    if settings.json {
        sinks.push(Box::new(JsonlSink::stdout()));
    } else {
        sinks.push(Box::new(HumanSink::new(settings.quiet)));
    }
    sinks
}

/// Warnings due before the first request: unpriced models under a cost
/// limit, and fallbacks dearer than the primary.
fn price_warnings(members: &[Member], cost_limit: Option<f64>, emitter: &Emitter) {
    if cost_limit.is_some_and(|c| c > 0.0) {
        for m in members.iter().filter(|m| m.pricing.is_none()) {
            emitter.warn(format!(
                "model {} has no known price: its responses count as $0 toward the cost limit",
                m.spec
            ));
        }
    }
    if let Some(primary) = members[0].pricing {
        for m in &members[1..] {
            if let Some(p) = m.pricing {
                if p.input > primary.input || p.output > primary.output {
                    emitter.warn(format!(
                        "fallback model {} costs more than the primary {} (${}/${} vs ${}/${} per million input/output tokens)",
                        m.spec, members[0].spec, p.input, p.output, primary.input, primary.output
                    ));
                }
            }
        }
    }
}

/// Cancels `token` on Ctrl-C or SIGTERM; a second signal exits at once.
fn watch_signals(token: CancellationToken) {
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let mut count = 0;
        loop {
            tokio::select! {
                r = tokio::signal::ctrl_c() => { if r.is_err() { return; } }
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
            }
            count += 1;
            if count > 1 {
                std::process::exit(Status::Interrupted.exit_code());
            }
            token.cancel();
        }
    });
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

async fn run_agent(mut settings: Settings, members: Vec<Member>) -> i32 {
    let run_id = uuid::Uuid::new_v4().to_string();
    let (sandbox, worktree) = match start_isolation(&mut settings, &run_id).await {
        Ok(isolation) => isolation,
        Err(e) => {
            eprintln!("tinyagent: error: {e}");
            return exit::USAGE;
        }
    };
    let worktree = worktree.map(|wt| wt.path.display().to_string());
    let emitter = Emitter::new(&run_id, sinks(&settings));
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let deadline = settings.time_limit.map(|t| Instant::now() + t);
    let stop = Stop::new(cancel, deadline);

    let fallback_models: Vec<String> = settings.fallbacks.iter().map(|s| s.to_string()).collect();
    let cwd = settings.cwd.display().to_string();
    emitter.emit(Event::RunStarted {
        task: settings.task.clone(),
        model: settings.primary.to_string(),
        cwd: cwd.clone(),
        fallback_models: fallback_models.clone(),
        resumed_from: None,
        worktree: worktree.clone(),
    });
    price_warnings(&members, settings.cost_limit, &emitter);
    let mcp = McpServers::start(
        &settings.config.mcp_servers,
        &settings.cwd,
        &process_env,
        &emitter,
        mcp::START_TIMEOUT,
        &stop,
    )
    .await;

    let doc = Trajectory {
        schema_version: 1,
        tinyagent_version: env!("CARGO_PKG_VERSION").to_string(),
        run_id: run_id.clone(),
        task: settings.task.clone(),
        model: settings.primary.to_string(),
        fallback_models,
        active_model: settings.primary.to_string(),
        status: Status::Running,
        error: None,
        started_at: now_rfc3339(),
        finished_at: None,
        steps: 0,
        totals: Totals::default(),
        model_switches: Vec::new(),
        plan: Vec::new(),
        messages: Vec::new(),
        output: Value::Null,
        resumed_from: None,
        cwd: Some(cwd),
        worktree,
    };
    let checkpoint = match &settings.output {
        Some(path) => match Checkpoint::create(path, &doc) {
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

    let plan: SharedPlan = Arc::new(Mutex::new(Vec::new()));
    let mut tools = ToolRegistry::default();
    let bash: Box<dyn CommandBuilder> = match &sandbox {
        Some(sandbox) => Box::new(sandbox.bash()),
        None => Box::new(PlainBash),
    };
    tools.add(Box::new(BashTool::new(bash)));
    tools.add(Box::new(ReadFile));
    tools.add(Box::new(WriteFile));
    tools.add(Box::new(EditFile));
    tools.add(Box::new(ListFiles));
    tools.add(Box::new(PlanTool { plan: plan.clone() }));
    for tool in mcp.tools(&emitter) {
        tools.add(tool);
    }

    let chain = ChainModel::new(members, settings.retry.clone(), settings.fallback.clone());
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
        prior_switches: 0,
    };
    let task = Message::new(Role::User, settings.task.clone(), 0);
    let outcome = agent.run(vec![task]).await;
    mcp.shutdown().await;
    drop(sandbox);
    if !settings.json {
        print_answer(&outcome.output);
    }
    outcome.status.exit_code()
}

/// Prints the final answer on stdout: text as is, JSON as JSON.
fn print_answer(output: &Value) {
    use std::io::Write;
    let text = match output {
        Value::Null => return,
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", text.trim_end_matches('\n'));
    let _ = out.flush();
}
