//! Command-line flags (SPEC section 1). Doc comments are the `--help` text;
//! no logic lives here.

use std::path::PathBuf;

use clap::Parser;

/// A command-line coding agent that survives provider outages.
///
/// Give it a task; it talks to a language model, runs tools in a working
/// directory, and ends with an answer and an exit code.
#[derive(Debug, Clone, Parser)]
#[command(name = "tinyagent", version, about, max_term_width = 100)]
#[command(after_help = crate::help::after_help())]
pub struct Cli {
    /// The task; `-` (or no TASK with piped stdin) reads it from stdin, a piped stdin given with a TASK is added to it, and no TASK on a terminal starts an interactive session
    #[arg(value_name = "TASK")]
    pub task: Option<String>,

    /// The task as an option instead of TASK, as `claude -p` and `gemini -p` take it
    #[arg(
        short = 'p',
        long = "prompt",
        alias = "print",
        value_name = "TASK",
        conflicts_with = "task"
    )]
    pub prompt: Option<String>,

    /// Primary model, <provider>/<model> (config `model`)
    #[arg(short = 'm', long, value_name = "SPEC")]
    pub model: Option<String>,

    /// A fallback model, tried in order after transient failures (repeatable; replaces config `fallback_models`)
    #[arg(
        long = "fallback-model",
        value_name = "SPEC",
        conflicts_with = "no_fallback"
    )]
    pub fallback_model: Vec<String>,

    /// Ignore any configured fallback chain for this run
    #[arg(long)]
    pub no_fallback: bool,

    /// A config file laid over the user config (repeatable, later wins)
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: Vec<PathBuf>,

    /// Working directory for tools (default: current directory)
    #[arg(short = 'C', long = "cwd", value_name = "DIR")]
    pub cwd: Option<PathBuf>,

    /// JSONL events on stdout instead of human output
    #[arg(long)]
    pub json: bool,

    /// Also record the run in a SQLite database (created when missing)
    #[arg(long = "log-db", value_name = "FILE")]
    pub log_db: Option<PathBuf>,

    /// Write the trajectory, a crash-safe checkpoint at every moment
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// The final answer must be JSON valid against this JSON Schema
    #[arg(long, value_name = "FILE")]
    pub output_schema: Option<PathBuf>,
    /// Continue a trajectory checkpoint (TASK, if given, is added as a new message)
    #[arg(long, value_name = "FILE")]
    pub resume: Option<PathBuf>,

    /// Continue the most recent run of this working directory (TASK, if given, is the follow-up)
    #[arg(long = "continue", conflicts_with = "resume")]
    pub continue_run: bool,

    /// After each answer, ask for a follow-up on the terminal and go on in the same conversation
    #[arg(short = 'i', long, conflicts_with = "json")]
    pub interactive: bool,

    /// Who approves shell commands and file changes before they run (config `approval`). Default: ask in an interactive session, auto otherwise
    #[arg(long, value_name = "MODE", value_enum)]
    pub approval: Option<crate::approval_config::Mode>,

    /// Do not keep this run in the run store (config `save_runs`)
    #[arg(long)]
    pub no_save: bool,
    /// Project instructions to use instead of the AGENTS.md files found (config `instructions`)
    #[arg(long, value_name = "FILE")]
    pub instructions: Option<PathBuf>,

    /// Stop after N model steps (config `step_limit`)
    #[arg(long, value_name = "N")]
    pub step_limit: Option<u32>,

    /// Stop when the run's cost reaches USD (config `cost_limit`)
    #[arg(long, value_name = "USD")]
    pub cost_limit: Option<f64>,

    /// Stop after a wall-clock duration such as 90s or 20m (config `time_limit`)
    #[arg(long, value_name = "DURATION")]
    pub time_limit: Option<String>,

    /// When every model is down, wait up to this long (e.g. 20m) for one to answer again instead of ending with exit 75 (config `outage_wait`; default 0: off)
    #[arg(long, value_name = "DURATION")]
    pub outage_wait: Option<String>,

    /// When the active model has sent no first stream event this long (e.g. 2s), also send the request to the next fallback model and take whichever answers first; auto learns the delay from the model's first-event times (config `fallback.hedge_after`; default off)
    // Hyphen values reach the parser, which says what is accepted.
    #[arg(long, value_name = "DURATION|auto|off", allow_hyphen_values = true)]
    pub hedge_after: Option<String>,

    /// Reply budget per model request (config `max_output_tokens`)
    #[arg(long, value_name = "N")]
    pub max_output_tokens: Option<u32>,

    /// Reasoning effort for providers that support it (config `reasoning_effort`)
    #[arg(long, value_name = "LEVEL", value_parser = ["low", "medium", "high"])]
    pub reasoning_effort: Option<String>,

    /// Run inside a new git worktree and branch (tinyagent/NAME) beside the current repository; NAME defaults to the run id
    #[arg(long, value_name = "NAME", num_args = 0..=1)]
    pub worktree: Option<Option<String>>,

    /// Run shell commands in a sandbox: no network except --sandbox-allow-domain hosts, writes only in the working directory and temp
    #[arg(long)]
    pub sandbox: bool,

    /// A host sandboxed commands may reach over HTTP(S), subdomains included (repeatable; replaces config `sandbox_allowed_domains`)
    #[arg(
        long = "sandbox-allow-domain",
        value_name = "HOST",
        requires = "sandbox"
    )]
    pub sandbox_allow_domain: Vec<String>,

    /// Probe every model of the configuration with one small request each, print a verdict per model, and exit (0 all answered, 1 any failed)
    #[arg(long, conflicts_with = "resume")]
    pub check: bool,

    /// Print shell completions or the man page and exit
    #[arg(long, value_name = "KIND", value_enum)]
    pub generate: Option<crate::help::Generate>,

    /// Human mode: print only the final answer and errors
    #[arg(short = 'q', long)]
    pub quiet: bool,

    // Never a flag: the chain a session's `/model` put in a new order (a
    // member moved first), each spec with its reply budget; it replaces
    // `--model` and the fallbacks when set.
    #[arg(skip)]
    pub session_chain: Option<Vec<(String, Option<u32>)>>,
}

impl Cli {
    /// Parses the process's arguments; `-p TASK` is taken as TASK.
    pub fn from_args() -> Result<Cli, clap::Error> {
        let mut cli = Cli::try_parse()?;
        if let Some(task) = cli.prompt.take() {
            cli.task = Some(task);
        }
        Ok(cli)
    }
}

/// Prints a flag-parsing error the way tinyagent's own usage errors start
/// (`tinyagent: error: ...`), or the help or version text clap was asked
/// for, and returns the exit code (2 for a usage error). A task given as
/// several words and a flag of another agent get one line saying what to
/// type instead (SPEC section 21).
pub fn exit_on_parse_error(e: clap::Error) -> std::process::ExitCode {
    use clap::error::ErrorKind;
    let code = u8::try_from(e.exit_code()).unwrap_or(2);
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return std::process::ExitCode::from(code);
    }
    if let Some(line) = forgiven(&e) {
        eprintln!("tinyagent: error: {line}");
        return std::process::ExitCode::from(code);
    }
    let text = e.render().to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    eprint!("tinyagent: error: {text}");
    std::process::ExitCode::from(code)
}

/// One line for an unknown argument we can say more about: a word after
/// the task (the task was not quoted), or another agent's flag.
fn forgiven(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    if arg.starts_with('-') {
        let ours = crate::suggest::flag_instead(arg)?;
        return Some(format!(
            "unexpected argument '{arg}' (did you mean {ours}?)"
        ));
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let example = match crate::suggest::quoted_task(&args, arg) {
        Some(fixed) => format!("tinyagent {}", fixed.join(" ")),
        None => "tinyagent \"fix the failing test\"".to_string(),
    };
    Some(format!(
        "unexpected argument '{arg}': the task is one argument, quote it: {example}"
    ))
}
