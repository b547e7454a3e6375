//! Interactive sessions (SPEC section 14): ask for the task on the
//! terminal, run it, then ask for a follow-up, each one a new run resumed
//! from the last. Prompts and line editing use the terminal itself
//! (`/dev/tty`), never stdout, so `tinyagent -i > answers.md` keeps only
//! the answers. Slash commands (`slash`) are answered here, never sent to
//! a model; what the session spent is its `ledger`.

mod ledger;
mod slash;

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rustyline::config::Behavior;
use rustyline::error::ReadlineError;
use rustyline::{
    Cmd, ConditionalEventHandler, DefaultEditor, Event, EventContext, EventHandler, KeyEvent,
    RepeatCount,
};

use crate::approval::Always;
use crate::cli::Cli;
use crate::exit::{self, Status};
use crate::runs;
use crate::settings::{self, process_env, Settings};
use crate::stop;
use crate::trajectory::Trajectory;
use crate::worktree;

/// The prompt for a task or a follow-up.
pub(crate) const PROMPT: &str = "> ";
/// The prompt after a line ending in `\`.
pub(crate) const MORE: &str = ". ";
/// Said once when a session starts by asking.
pub(crate) const HINT: &str =
    "tinyagent: interactive session; exit, Ctrl-D or Ctrl-C twice ends it, a line ending in \\ continues";
/// Said after Ctrl-C at an empty prompt.
pub(crate) const AGAIN: &str = "(Ctrl-C again ends the session)";
/// The history file under the state directory.
const HISTORY: &str = "history";

/// What a run starts from besides its flags (an interactive follow-up).
#[derive(Default)]
pub(crate) struct Start {
    /// The task, already read (from the session's prompt): stdin is not read.
    pub task: Option<String>,
    /// The finished run this one continues, in memory.
    pub previous: Option<Trajectory>,
    /// The directory the run store records the run under.
    pub store_cwd: Option<PathBuf>,
    /// The session the run belongs to (`None`: a run on its own).
    pub session: Option<Link>,
    /// `/compact`: the run compacts `previous` and ends, with no task.
    pub compact: bool,
}

/// What each run of a session shares with it: the "always" answers given
/// at approval questions, and the spending `/cost` reports.
#[derive(Clone, Default)]
pub(crate) struct Link {
    pub always: Always,
    pub ledger: ledger::Ledger,
}

/// How a run ended.
pub(crate) struct Ended {
    pub code: i32,
    /// The run's final document (`None` when it never started).
    pub doc: Option<Trajectory>,
    /// The directory the run store recorded the run under.
    pub store_cwd: Option<PathBuf>,
}

impl Ended {
    /// A run that ended with `code` before it started.
    pub(crate) fn not_started(code: i32) -> Ended {
        Ended {
            code,
            doc: None,
            store_cwd: None,
        }
    }
}

/// `-i` without a terminal to read follow-ups from (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("-i/--interactive needs a terminal on stdin (follow-ups are read from it)")]
pub(crate) struct NoTerminal;

/// Whether these flags start an interactive session: `-i` (which needs a
/// terminal on stdin), or no TASK with a terminal on stdin and stderr and
/// no `--json`, `--resume` or `--continue`.
pub(crate) fn wanted(cli: &Cli) -> Result<bool, NoTerminal> {
    let stdin_tty = std::io::stdin().is_terminal();
    if cli.interactive {
        if !stdin_tty {
            return Err(NoTerminal);
        }
        return Ok(true);
    }
    let no_task = task_arg(cli).is_none();
    Ok(no_task
        && cli.resume.is_none()
        && !cli.continue_run
        && !cli.json
        && stdin_tty
        && std::io::stderr().is_terminal())
}

fn task_arg(cli: &Cli) -> Option<&str> {
    worktree::split_task_and_name(cli.task.as_deref(), cli.worktree.as_ref()).0
}

/// What the user answered at the prompt.
#[derive(Debug, PartialEq)]
enum Input {
    Task(String),
    /// `exit` or Ctrl-D.
    End,
    /// Ctrl-C twice in a row at an empty prompt.
    Interrupted,
}

/// Runs a session, each run through `run_one`, and returns its exit code:
/// the last run's (0 when no task was given), 130 for Ctrl-C twice at an
/// empty prompt.
pub(crate) fn session(cli: Cli, run_one: impl Fn(&Cli, Start) -> Ended) -> i32 {
    let resuming = cli.resume.is_some() || cli.continue_run;
    // A configuration that cannot run is said before asking for a task.
    let config = match settings::load_config(&cli.config, &process_env) {
        Ok(config) => config,
        Err(e) => return usage(e),
    };
    let save = settings::save_runs(&cli, &config);
    let link = Link::default();
    if !resuming {
        let checked = Settings::from_parts(&cli, config, "-".into(), &process_env, None)
            .and_then(|s| s.approval.gate(Some(&link.always), cli.json).map(drop));
        if let Err(e) = checked {
            return usage(e);
        }
    }
    let history = save
        .then(|| runs::state_dir(&process_env).map(|d| d.join(HISTORY)))
        .flatten();
    let mut lines = Lines::open(history);
    let mut talk = Conversation::new(cli, link);
    if task_arg(&talk.first).is_some() {
        let ended = run_one(&talk.first, talk.start(None));
        if let Some(code) = talk.ended(ended) {
            return code;
        }
    } else {
        eprintln!("{HINT}");
    }
    loop {
        let task = match lines.ask() {
            Input::Task(task) => task,
            Input::End => return talk.code,
            Input::Interrupted => return Status::Interrupted.exit_code(),
        };
        if let Some(command) = slash::parse(&task) {
            if command == slash::Slash::Compact {
                if let Some(code) = talk.compact(&run_one) {
                    return code;
                }
                continue;
            }
            match talk.command(command) {
                Some(code) => return code,
                None => continue,
            }
        }
        let ended = match talk.doc.take() {
            Some(doc) => run_one(&talk.follow_up, talk.start_after(task, doc)),
            None => run_one(&talk.first, talk.start(Some(task))),
        };
        if let Some(code) = talk.ended(ended) {
            return code;
        }
    }
}

/// Where a session is: the conversation a follow-up continues, and the
/// flags of its next run.
struct Conversation {
    /// The flags of a run that starts a conversation: the session's, then,
    /// once a run has made the working directory (a worktree), flags that
    /// stay in it.
    first: Cli,
    /// The flags of a follow-up.
    follow_up: Cli,
    /// The conversation a follow-up continues (none before the first run
    /// and after `/clear`).
    doc: Option<Trajectory>,
    store_cwd: Option<PathBuf>,
    /// The last run's exit code (0 before any).
    code: i32,
    link: Link,
}

impl Conversation {
    fn new(cli: Cli, link: Link) -> Conversation {
        Conversation {
            follow_up: follow_up_cli(&cli),
            first: cli,
            doc: None,
            store_cwd: None,
            code: 0,
            link,
        }
    }

    /// A run that starts a conversation.
    fn start(&self, task: Option<String>) -> Start {
        Start {
            task,
            previous: None,
            store_cwd: self.store_cwd.clone(),
            session: Some(self.link.clone()),
            compact: false,
        }
    }

    /// A follow-up continuing `doc`.
    fn start_after(&self, task: String, doc: Trajectory) -> Start {
        Start {
            task: Some(task),
            previous: Some(doc),
            store_cwd: self.store_cwd.clone(),
            session: Some(self.link.clone()),
            compact: false,
        }
    }

    /// `/compact`: a run that compacts the conversation now (as a context
    /// overflow would) and ends; the conversation goes on from it.
    /// `Some(code)` when the session ends with it.
    fn compact(&mut self, run_one: &impl Fn(&Cli, Start) -> Ended) -> Option<i32> {
        let Some(doc) = self.doc.take() else {
            eprintln!("(nothing to compact: no conversation yet)");
            return None;
        };
        let start = Start {
            task: None,
            previous: Some(doc.clone()),
            store_cwd: self.store_cwd.clone(),
            session: Some(self.link.clone()),
            compact: true,
        };
        let ended = run_one(&self.follow_up, start);
        if ended.doc.is_none() {
            // It never started: the conversation stays as it was.
            self.doc = Some(doc);
        }
        self.ended(ended)
    }

    /// Takes a run's end; `Some(code)` when the session ends with it (a
    /// setup error, SIGTERM).
    fn ended(&mut self, ended: Ended) -> Option<i32> {
        self.code = ended.code;
        if stop::terminated() {
            // SIGTERM ends the session, not only the run.
            return Some(ended.code);
        }
        // A run that never started (a setup error): asking again would
        // fail the same way.
        let doc = ended.doc?;
        self.store_cwd = ended.store_cwd;
        // A conversation started after `/clear` stays where this one ran.
        self.first = self.follow_up.clone();
        self.first.cwd = doc.cwd.as_ref().map(PathBuf::from);
        self.doc = Some(doc);
        None
    }

    /// Answers a slash command; `Some(code)` ends the session.
    fn command(&mut self, command: slash::Slash) -> Option<i32> {
        use slash::Slash;
        match command {
            Slash::Exit => return Some(self.code),
            Slash::Help => eprintln!("{}", slash::HELP),
            Slash::Unknown(name) => eprintln!("unknown command {name}\n{}", slash::HELP),
            Slash::Cost => eprintln!("{}", self.link.ledger.report()),
            Slash::Model(None) => {
                eprintln!(
                    "{}",
                    slash::model_report(self.next_cli(), self.doc.as_ref())
                )
            }
            Slash::Model(Some(spec)) => match self.switch_model(&spec) {
                Ok((spec, None)) => eprintln!("model: {spec} (from the next task on)"),
                Ok((spec, Some(chain))) => eprintln!(
                    "model: {spec} (from the next task on); chain: {}",
                    chain.join(" → ")
                ),
                Err(e) => eprintln!("tinyagent: error: /model: {e}"),
            },
            // Answered in `session`, which runs it.
            Slash::Compact => {}
            Slash::Clear => {
                self.doc = None;
                // Before any run, a `--resume` or `--continue` is dropped too.
                self.first.resume = None;
                self.first.continue_run = false;
                eprintln!("(a new conversation: the next task starts from scratch)");
            }
        }
        None
    }
}

impl Conversation {
    /// The flags the next run takes.
    fn next_cli(&self) -> &Cli {
        if self.doc.is_some() {
            &self.follow_up
        } else {
            &self.first
        }
    }

    /// `/model SPEC`: the next run (a follow-up or a new conversation)
    /// and every one after it have SPEC as their primary, checked first as
    /// `-m` is; a bad SPEC changes nothing. A member of the chain moves
    /// first and the others keep their order behind it (then the new
    /// chain is returned too); any other SPEC replaces the primary, as
    /// `-m` would.
    fn switch_model(&mut self, spec: &str) -> Result<(String, Option<Vec<String>>), SwitchRefused> {
        if self.doc.is_none() && (self.first.resume.is_some() || self.first.continue_run) {
            return Err(SwitchRefused::Resuming);
        }
        let current = slash::chain_of(self.next_cli(), self.doc.as_ref())?;
        let reordered = slash::lead_with(&current, spec.trim());
        let mut cli = self.next_cli().clone();
        cli.model = Some(spec.to_string());
        cli.session_chain = reordered;
        let doc = self.doc.clone().map(|mut doc| {
            doc.model = spec.to_string();
            doc
        });
        let chain = slash::chain_of(&cli, doc.as_ref())?;
        let spec = chain[0].0.clone();
        for next in [&mut self.first, &mut self.follow_up] {
            next.model = Some(spec.clone());
            next.session_chain = cli.session_chain.clone();
        }
        if let Some(doc) = &mut self.doc {
            doc.model = spec.clone();
        }
        let moved = cli
            .session_chain
            .map(|_| chain.into_iter().map(|(member, _)| member).collect());
        Ok((spec, moved))
    }
}

/// Why `/model SPEC` switched nothing.
#[derive(Debug, thiserror::Error)]
enum SwitchRefused {
    #[error(
        "the session resumes a run, which keeps its primary model; switch after its first task"
    )]
    Resuming,
    #[error(transparent)]
    Setup(#[from] settings::SetupError),
}

fn usage(e: impl std::fmt::Display) -> i32 {
    eprintln!("tinyagent: error: {e}");
    exit::USAGE
}

/// The flags of a follow-up: the session's, continuing the last run in its
/// own directory (a worktree is made once, by the first run).
fn follow_up_cli(cli: &Cli) -> Cli {
    let mut cli = cli.clone();
    cli.task = None;
    cli.resume = None;
    cli.continue_run = false;
    cli.worktree = None;
    cli.cwd = None;
    cli
}

/// One reading of the prompt.
enum Asked {
    Input(Input),
    /// An empty line (or only spaces).
    Empty,
    /// Ctrl-C with something typed, which is dropped.
    Cleared,
    /// Ctrl-C at an empty prompt.
    CtrlC,
}

/// Where lines come from: rustyline on the terminal, or plain lines from
/// stdin (prompts on stderr) on a terminal rustyline does not support.
enum Lines {
    Editor {
        editor: Box<DefaultEditor>,
        history: Option<PathBuf>,
        /// Whether the line was empty when Ctrl-C was last pressed.
        typed: Arc<AtomicBool>,
    },
    Plain,
}

/// Ctrl-C at the prompt: notes whether something was typed on the line,
/// then interrupts the line as rustyline does.
struct CtrlC(Arc<AtomicBool>);

impl ConditionalEventHandler for CtrlC {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, ctx: &EventContext) -> Option<Cmd> {
        self.0.store(!ctx.line().is_empty(), Ordering::Relaxed);
        Some(Cmd::Interrupt)
    }
}

impl Lines {
    fn open(history: Option<PathBuf>) -> Lines {
        let config = rustyline::Config::builder()
            .behavior(Behavior::PreferTerm)
            .auto_add_history(false)
            .build();
        let unsupported = std::env::var("TERM")
            .is_ok_and(|t| ["dumb", "cons25", "emacs"].contains(&t.to_ascii_lowercase().as_str()));
        match DefaultEditor::with_config(config) {
            Ok(mut editor) if !unsupported => {
                if let Some(path) = &history {
                    let _ = editor.load_history(path);
                }
                let typed = Arc::new(AtomicBool::new(false));
                editor.bind_sequence(
                    KeyEvent::ctrl('C'),
                    EventHandler::Conditional(Box::new(CtrlC(typed.clone()))),
                );
                Lines::Editor {
                    editor: Box::new(editor),
                    history,
                    typed,
                }
            }
            _ => Lines::Plain,
        }
    }

    /// Reads one task, asking again after an empty line or Ctrl-C: a
    /// Ctrl-C clears what was being typed, and a second one in a row at an
    /// empty prompt ends the session.
    fn ask(&mut self) -> Input {
        let mut armed = false;
        loop {
            match self.ask_once() {
                Asked::Input(input) => return input,
                // rustyline has ended the line the key was pressed on.
                Asked::Empty | Asked::Cleared => armed = false,
                Asked::CtrlC if armed => return Input::Interrupted,
                Asked::CtrlC => {
                    armed = true;
                    eprintln!("{AGAIN}");
                }
            }
        }
    }

    /// Reads one task: lines ending in `\` continue on the next line.
    fn ask_once(&mut self) -> Asked {
        let mut text = String::new();
        let mut prompt = PROMPT;
        loop {
            let line = match self.read_line(prompt) {
                Ok(Some(line)) => line,
                Ok(None) => return Asked::Input(Input::End),
                Err(ReadlineError::Interrupted) if text.is_empty() && !self.typed() => {
                    return Asked::CtrlC
                }
                Err(ReadlineError::Interrupted) => return Asked::Cleared,
                Err(ReadlineError::Eof) => return Asked::Input(Input::End),
                Err(e) => {
                    eprintln!("tinyagent: error: cannot read from the terminal: {e}");
                    return Asked::Input(Input::End);
                }
            };
            match line.strip_suffix('\\') {
                Some(part) => {
                    text.push_str(part);
                    text.push('\n');
                    prompt = MORE;
                }
                None => {
                    text.push_str(&line);
                    break;
                }
            }
        }
        let task = text.trim();
        if task.is_empty() {
            return Asked::Empty;
        }
        if task == "exit" {
            return Asked::Input(Input::End);
        }
        self.remember(task);
        Asked::Input(Input::Task(task.to_string()))
    }

    /// Whether something was typed on the line when Ctrl-C was pressed.
    fn typed(&self) -> bool {
        match self {
            Lines::Editor { typed, .. } => typed.swap(false, Ordering::Relaxed),
            Lines::Plain => false,
        }
    }

    fn read_line(&mut self, prompt: &str) -> Result<Option<String>, ReadlineError> {
        match self {
            Lines::Editor { editor, .. } => editor.readline(prompt).map(Some),
            Lines::Plain => {
                eprint!("{prompt}");
                let _ = std::io::stderr().flush();
                let mut line = String::new();
                match std::io::stdin().lock().read_line(&mut line)? {
                    0 => Ok(None),
                    _ => Ok(Some(line.trim_end_matches(['\n', '\r']).to_string())),
                }
            }
        }
    }

    fn remember(&mut self, task: &str) {
        if let Lines::Editor {
            editor, history, ..
        } = self
        {
            let _ = editor.add_history_entry(task);
            if let Some(path) = history {
                if let Some(dir) = path.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                let _ = editor.append_history(path);
            }
        }
    }
}
