//! The trajectory (`-o FILE`, SPEC section 7): the document, and its
//! crash-safe checkpoint writer (an atomically replaced FILE plus an
//! append-only `FILE.journal`), and loading both back.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::conversation::{Message, Usage};
use crate::exit::Status;
use crate::model::chain::Switch;
use crate::model::hedge::Hedge;
use crate::tools::plan::PlanItem;

/// The current time as RFC 3339 UTC with milliseconds: the trajectory's
/// `started_at` and `finished_at`.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Token and cost totals of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_input_tokens: u64,
    /// Tokens written to a prompt cache (SPEC 25); 0 in older checkpoints.
    #[serde(default)]
    pub cache_write_tokens: u64,
    pub cost_usd: f64,
}

impl Totals {
    /// Adds one response's tokens and cost: the one place totals grow.
    pub fn add(&mut self, usage: &Usage, cost_usd: f64) {
        // Saturating: a resumed checkpoint's counters come from a file.
        self.input_tokens = self.input_tokens.saturating_add(usage.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(usage.output_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(usage.cached_input_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(usage.cache_write_tokens);
        self.cost_usd += cost_usd;
    }
}

/// A child run's totals added to its parent's.
impl std::ops::AddAssign for Totals {
    fn add_assign(&mut self, child: Totals) {
        let usage = Usage {
            input_tokens: child.input_tokens,
            output_tokens: child.output_tokens,
            cached_input_tokens: child.cached_input_tokens,
            cache_write_tokens: child.cache_write_tokens,
            cache_write_1h_tokens: 0,
        };
        self.add(&usage, child.cost_usd);
    }
}

/// The trajectory document.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Trajectory {
    pub schema_version: u32,
    pub tinyagent_version: String,
    pub run_id: String,
    pub task: String,
    /// The primary model.
    pub model: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_models: Vec<String>,
    pub active_model: String,
    pub status: Status,
    pub error: Option<String>,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub steps: u32,
    pub totals: Totals,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_switches: Vec<Switch>,
    /// The hedges sent (SPEC 23); only when one was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hedges: Vec<Hedge>,
    /// Reply caps models reported by refusing a larger budget, by spec
    /// (SPEC 4 "Reply caps per member"; a resumed run keeps them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reply_caps: BTreeMap<String, u32>,
    #[serde(default)]
    pub plan: Vec<PlanItem>,
    pub messages: Vec<Message>,
    pub output: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<String>,
    /// The run id of the first run a resumed run continues (its lineage:
    /// the prompt cache key stays the same across resumes, SPEC 25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The worktree created by `--worktree`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
}

impl Trajectory {
    /// The `prompt_cache_key` of the run's lineage (SPEC 25): the same for
    /// a run, its resumes and its follow-ups, another for every other run.
    /// Made of run ids only, never of anything secret.
    pub(crate) fn cache_key(&self) -> String {
        format!(
            "tinyagent-{}",
            self.lineage.as_deref().unwrap_or(&self.run_id)
        )
    }

    /// The document of a new run, started now, with no messages yet.
    pub(crate) fn new(
        run_id: &str,
        task: &str,
        model: &str,
        fallback_models: Vec<String>,
        cwd: &str,
    ) -> Trajectory {
        Trajectory {
            schema_version: 1,
            tinyagent_version: env!("CARGO_PKG_VERSION").to_string(),
            run_id: run_id.to_string(),
            task: task.to_string(),
            model: model.to_string(),
            fallback_models,
            active_model: model.to_string(),
            status: Status::Running,
            error: None,
            started_at: now_rfc3339(),
            finished_at: None,
            steps: 0,
            totals: Totals::default(),
            model_switches: Vec::new(),
            hedges: Vec::new(),
            reply_caps: BTreeMap::new(),
            plan: Vec::new(),
            messages: Vec::new(),
            output: Value::Null,
            resumed_from: None,
            lineage: None,
            cwd: Some(cwd.to_string()),
            worktree: None,
        }
    }
}

/// One journal line. Each is idempotent when replayed over a FILE that
/// already holds it (messages carry their index).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum JournalOp {
    /// Append `message` at position `index` of `messages`.
    Message { index: usize, message: Message },
    /// Replace the whole message list (after a context compaction). Written
    /// just before a rewrite, so replaying an old journal over the new FILE
    /// still ends with the compacted list.
    Messages { messages: Vec<Message> },
    /// The run's counters after a step (or any other change).
    State {
        steps: u32,
        totals: Totals,
        active_model: String,
        #[serde(default)]
        model_switches: Vec<Switch>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        hedges: Vec<Hedge>,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        reply_caps: BTreeMap<String, u32>,
        #[serde(default)]
        plan: Vec<PlanItem>,
        /// How many messages the run had when this was written; a replay
        /// skips a state older than the document it is replayed over.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        messages: Option<usize>,
    },
    /// A tool call about to run.
    ToolStarted {
        step: u32,
        call_id: String,
        tool: String,
        arguments: Value,
    },
    /// A tool call that has finished (its result follows as a message).
    ToolFinished {
        step: u32,
        call_id: String,
        ok: bool,
    },
}

/// The journal is folded into FILE once it grows past this share of FILE.
const JOURNAL_SHARE: f64 = 0.5;
/// ... but never before it reaches this many bytes.
const JOURNAL_MIN_BYTES: u64 = 64 * 1024;

/// Writes FILE and its journal so that at every moment FILE is one whole
/// valid document and FILE plus journal is the complete run.
pub struct Checkpoint {
    path: PathBuf,
    journal_path: PathBuf,
    journal: Option<File>,
    journal_bytes: u64,
    file_bytes: u64,
    written: u64,
    /// Whether each rewrite is synced to disk (survives a power loss, not
    /// only a crash of the process).
    durable: bool,
    /// The first write of FILE, still under way on its own thread
    /// (`create_volatile`): it yields FILE's size. Every later write waits
    /// for it first, so no journal line ever precedes FILE.
    first_write: Option<std::thread::JoinHandle<io::Result<(u64, File)>>>,
}

/// `FILE.journal` for a trajectory at `path`.
pub fn journal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".journal");
    PathBuf::from(name)
}

impl Checkpoint {
    /// Starts checkpointing to `path` with the document as it is now.
    pub fn create(path: &Path, doc: &Trajectory) -> io::Result<Checkpoint> {
        Self::start(path, doc, true)
    }

    /// `create` without syncing to disk: the same atomic replacement and
    /// journal, so it survives a crash or kill of the process, but not a
    /// power loss (the run store's trajectories, which must stay cheap).
    /// The first FILE is written, and the journal opened, on a thread of
    /// their own while the run sends its first request; the first journal
    /// line, rewrite or `finish` waits for them (and reports their error).
    pub fn create_volatile(path: &Path, doc: &Trajectory) -> io::Result<Checkpoint> {
        let mut cp = Self::new(path, false);
        let owned = doc.clone();
        let target = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("trajectory".into())
            .spawn(move || {
                let bytes = write_atomically(&target, &owned, false)?;
                Ok((bytes, open_journal(&journal_path(&target))?))
            });
        match thread {
            Ok(handle) => cp.first_write = Some(handle),
            // No thread to be had: write it here.
            Err(_) => cp.rewrite(doc)?,
        }
        Ok(cp)
    }

    fn start(path: &Path, doc: &Trajectory, durable: bool) -> io::Result<Checkpoint> {
        let mut cp = Self::new(path, durable);
        cp.rewrite(doc)?;
        Ok(cp)
    }

    fn new(path: &Path, durable: bool) -> Checkpoint {
        Checkpoint {
            path: path.to_path_buf(),
            journal_path: journal_path(path),
            journal: None,
            journal_bytes: 0,
            file_bytes: 0,
            written: 0,
            durable,
            first_write: None,
        }
    }

    /// Waits for the first write of FILE when it runs on its own thread.
    fn settle(&mut self) -> io::Result<()> {
        if let Some(handle) = self.first_write.take() {
            let (bytes, journal) = handle
                .join()
                .map_err(|_| io::Error::other("the first write of the trajectory failed"))??;
            self.file_bytes = bytes;
            self.written += bytes + 1;
            self.journal = Some(journal);
        }
        Ok(())
    }

    /// Bytes written to FILE and the journal so far (benchmarks).
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Appends one op to the journal (flushed before returning), folding the
    /// journal into FILE when it has grown past its share. The fold waits for
    /// a message or state op, so a started tool call stays in the journal
    /// until its result is in the document (resume tells "started" from
    /// "never started" by it).
    pub fn append(&mut self, op: &JournalOp, doc: &Trajectory) -> io::Result<()> {
        self.settle()?;
        let mut line = serde_json::to_vec(op).map_err(io::Error::other)?;
        line.push(b'\n');
        if self.journal.is_none() {
            self.journal = Some(open_journal(&self.journal_path)?);
        }
        if let Some(journal) = self.journal.as_mut() {
            journal.write_all(&line)?;
            journal.flush()?;
        }
        self.journal_bytes += line.len() as u64;
        self.written += line.len() as u64;
        let limit = ((self.file_bytes as f64 * JOURNAL_SHARE) as u64).max(JOURNAL_MIN_BYTES);
        let foldable = !matches!(
            op,
            JournalOp::ToolStarted { .. } | JournalOp::ToolFinished { .. }
        );
        if foldable && self.journal_bytes > limit {
            self.rewrite(doc)?;
        }
        Ok(())
    }

    /// Replaces FILE atomically with `doc` and empties the journal.
    pub fn rewrite(&mut self, doc: &Trajectory) -> io::Result<()> {
        self.replace(doc)?;
        // Replaying the old journal over the new FILE is harmless (ops are
        // idempotent), so a crash between rename and truncate loses nothing.
        match &self.journal {
            Some(journal) if self.journal_bytes > 0 => journal.set_len(0)?,
            Some(_) => {}
            None if self.journal_path.exists() => {
                File::create(&self.journal_path)?;
            }
            None => {}
        }
        self.journal_bytes = 0;
        // Last, so the window between the rename and emptying the journal
        // stays as short as it can be.
        if self.durable {
            sync_parent(&self.path);
        }
        Ok(())
    }

    /// Replaces FILE atomically with `doc`, the journal left as it is.
    fn replace(&mut self, doc: &Trajectory) -> io::Result<()> {
        self.settle()?;
        let bytes = write_atomically(&self.path, doc, self.durable)?;
        self.file_bytes = bytes;
        self.written += bytes + 1;
        Ok(())
    }

    /// Writes the final FILE and removes the journal (not emptied first:
    /// until it is gone, replaying it over the final FILE changes nothing).
    pub fn finish(&mut self, doc: &Trajectory) -> io::Result<()> {
        self.replace(doc)?;
        self.journal = None;
        self.journal_bytes = 0;
        let removed = match fs::remove_file(&self.journal_path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
        if self.durable {
            sync_parent(&self.path);
        }
        removed
    }
}

impl Drop for Checkpoint {
    /// A first write still under way is finished, never cut off.
    fn drop(&mut self) {
        let _ = self.settle();
    }
}

/// Opens (creates) a journal for appending.
fn open_journal(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Writes `doc` to `path.tmp` and renames it over `path` (synced first
/// when `durable`); returns the document's size in bytes.
fn write_atomically(path: &Path, doc: &Trajectory, durable: bool) -> io::Result<u64> {
    let bytes = serde_json::to_vec_pretty(doc).map_err(io::Error::other)?;
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    {
        let mut f = File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.write_all(b"\n")?;
        if durable {
            f.sync_data()?;
        }
    }
    fs::rename(&tmp, path)?;
    Ok(bytes.len() as u64)
}

/// Makes a rename durable across a power loss (best effort).
fn sync_parent(path: &Path) {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// The largest trajectory (and journal) loaded: far beyond any real run's,
/// short of what would exhaust memory.
const MAX_CHECKPOINT_BYTES: u64 = 512 << 20;

/// A checkpoint that cannot be loaded; the message names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{} (or its journal) is larger than {} MiB: not a tinyagent checkpoint", .0.display(), MAX_CHECKPOINT_BYTES >> 20)]
    TooLarge(std::path::PathBuf),
    #[error("cannot read {}: {error}", path.display())]
    Unreadable {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error("{} is not a tinyagent trajectory: {error}", path.display())]
    NotATrajectory {
        path: std::path::PathBuf,
        error: serde_json::Error,
    },
}

/// A tool call the journal records as started: `(step, call_id)`.
pub type StartedCall = (u32, String);

/// Reads FILE and replays `FILE.journal` over it. A torn last journal line
/// (a crash mid-write) is ignored.
pub fn load(path: &Path) -> Result<Trajectory, LoadError> {
    load_checkpoint(path).map(|(doc, _)| doc)
}

/// Like `load`, also returning the tool calls the journal records as
/// started, in order (whether or not they finished).
pub fn load_checkpoint(path: &Path) -> Result<(Trajectory, Vec<StartedCall>), LoadError> {
    let too_big = |p: &Path| fs::metadata(p).is_ok_and(|m| m.len() > MAX_CHECKPOINT_BYTES);
    if too_big(path) || too_big(&journal_path(path)) {
        return Err(LoadError::TooLarge(path.to_path_buf()));
    }
    let text = fs::read_to_string(path).map_err(|e| LoadError::Unreadable {
        path: path.to_path_buf(),
        error: e,
    })?;
    let mut doc: Trajectory =
        serde_json::from_str(&text).map_err(|e| LoadError::NotATrajectory {
            path: path.to_path_buf(),
            error: e,
        })?;
    let mut started = Vec::new();
    if let Ok(journal) = fs::read_to_string(journal_path(path)) {
        for line in journal.lines() {
            let Ok(op) = serde_json::from_str::<JournalOp>(line) else {
                break;
            };
            if let JournalOp::ToolStarted { step, call_id, .. } = &op {
                started.push((*step, call_id.clone()));
            }
            apply(&mut doc, op);
        }
    }
    Ok((doc, started))
}

fn apply(doc: &mut Trajectory, op: JournalOp) {
    match op {
        JournalOp::Message { index, message } => {
            if index == doc.messages.len() {
                doc.messages.push(message);
            }
        }
        JournalOp::Messages { messages } => doc.messages = messages,
        JournalOp::State {
            steps,
            totals,
            active_model,
            model_switches,
            hedges,
            reply_caps,
            plan,
            messages,
        } => {
            if messages.is_some_and(|n| n < doc.messages.len()) {
                return;
            }
            doc.steps = steps;
            doc.totals = totals;
            doc.active_model = active_model;
            doc.model_switches = model_switches;
            doc.hedges = hedges;
            doc.reply_caps = reply_caps;
            doc.plan = plan;
        }
        JournalOp::ToolStarted { .. } | JournalOp::ToolFinished { .. } => {}
    }
}

#[cfg(test)]
mod tests;
