//! The run store (SPEC section 7): every run's trajectory is kept (under
//! the state directory, or where `-o` put it), an index records each run
//! and so the most recent one per working directory (`--continue`), and old
//! runs are pruned when a run starts. Nothing here can fail a run: a store
//! that cannot be used costs one `warning`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::resume::{self, Checkpointed};
use crate::setup::{Env, SetupError};

mod record;
pub use record::{Recording, RecordingSink};

/// The store keeps at least this many runs ...
pub const KEEP_RUNS: usize = 100;
/// ... and every run younger than this.
pub const KEEP_FOR: Duration = Duration::from_secs(30 * 24 * 3600);
const INDEX: &str = "index.json";
const LOCK: &str = "index.lock";
/// An index larger than this is not read (it is treated as corrupt).
const MAX_INDEX_BYTES: u64 = 16 * 1024 * 1024;
/// How long a run waits for another run's index update before it writes
/// anyway (last writer wins).
const LOCK_WAIT: Duration = Duration::from_millis(250);
/// Longest run id accepted from the index (ours are 36-character UUIDs).
const MAX_RUN_ID: usize = 64;

/// Why the store could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

impl From<io::Error> for StoreError {
    fn from(e: io::Error) -> Self {
        StoreError(e.to_string())
    }
}

/// One run in the index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub run_id: String,
    /// The trajectory: `runs/<run_id>.json`, or the run's `-o FILE`.
    pub path: PathBuf,
    /// The working directory the run was started in (after `-C`, canonical).
    pub cwd: PathBuf,
    /// When the run started, in milliseconds since the Unix epoch.
    pub started_ms: u64,
}

impl Entry {
    fn valid(&self) -> bool {
        !self.run_id.is_empty()
            && self.run_id.len() <= MAX_RUN_ID
            && self
                .run_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && self.path.is_absolute()
            && self.cwd.is_absolute()
    }
}

/// The index as read: each entry parsed on its own, so a corrupt one is
/// skipped, not the whole index.
#[derive(Deserialize)]
struct IndexIn<'a> {
    #[serde(borrow)]
    runs: Vec<&'a serde_json::value::RawValue>,
}

#[derive(Serialize)]
struct IndexOut<'a> {
    version: u32,
    runs: &'a [Entry],
}

/// What reading the index found.
#[derive(Debug, Default)]
struct Index {
    /// Valid entries, oldest first.
    entries: Vec<Entry>,
    /// Entries skipped as corrupt.
    skipped: usize,
    /// The whole file was unreadable (it is replaced on the next write).
    corrupt: Option<String>,
}

/// tinyagent's state directory: `$XDG_STATE_HOME/tinyagent`, else
/// `~/.local/state/tinyagent` (`paths::state_dir`).
pub fn state_dir(env: Env) -> Option<PathBuf> {
    crate::paths::state_dir(env)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The run store's part in one run, decided before it starts.
#[derive(Debug, Clone)]
pub struct Keep {
    /// `None`: no state directory could be found.
    pub store: Option<RunStore>,
    /// The directory the run is recorded under (`--continue` looks it up).
    pub cwd: PathBuf,
}

impl Keep {
    /// Decides where the starting run's trajectory goes: `output` when it
    /// writes one anyway (`-o`, a resumed FILE), else its file in the
    /// store. Only the store's directory is made here; the index entry and
    /// pruning are done on their own thread (`Recording`), so the run's
    /// first request never waits for them. A store that cannot be used
    /// costs one warning (in `warnings`), and the run is then not kept.
    pub fn begin(
        &self,
        run_id: &str,
        output: Option<PathBuf>,
        warnings: &mut Vec<String>,
    ) -> (Option<PathBuf>, Recording) {
        let Some(store) = &self.store else {
            warnings.push(
                "run store: neither XDG_STATE_HOME nor HOME is set, so this run is not kept".into(),
            );
            return (output, Recording::done());
        };
        if let Err(e) = fs::create_dir_all(store.dir()) {
            warnings.push(format!(
                "run store {}: {e}; this run is not kept",
                store.dir().display()
            ));
            return (output, Recording::done());
        }
        let path = match &output {
            Some(path) => std::path::absolute(path).unwrap_or_else(|_| path.clone()),
            None => store.trajectory_path(run_id),
        };
        let entry = Entry {
            run_id: run_id.to_string(),
            path: path.clone(),
            cwd: self.cwd.clone(),
            started_ms: now_ms(),
        };
        let recording = Recording::start(store.clone(), entry);
        (Some(output.unwrap_or(path)), recording)
    }
}

/// The checkpoint `--continue` resumes: the most recent run recorded for
/// `cwd` whose trajectory can be read (a missing or unreadable one is
/// skipped with a warning), with the warnings to emit once the run starts.
/// A finished run continues only with a TASK, as with `--resume`.
pub fn find_continue(
    store: Option<&RunStore>,
    cwd: &Path,
    has_task: bool,
) -> Result<(Checkpointed, Vec<String>), SetupError> {
    let (runs, mut warnings) = match store {
        Some(store) => store.runs_in(cwd),
        None => (Vec::new(), Vec::new()),
    };
    for entry in runs {
        match resume::read(&entry.path) {
            Ok(cp) => {
                resume::check_status(&cp, has_task)?;
                return Ok((cp, warnings));
            }
            Err(e) => warnings.push(format!("run store: skipping run {}: {e}", entry.run_id)),
        }
    }
    Err(SetupError(format!(
        "--continue: no run to continue in {} (the run store has none started there)",
        cwd.display()
    )))
}

/// The store's directory of runs.
#[derive(Debug, Clone)]
pub struct RunStore {
    dir: PathBuf,
}

impl RunStore {
    /// `$XDG_STATE_HOME/tinyagent/runs`, else `~/.local/state/tinyagent/runs`.
    pub fn locate(env: Env) -> Option<RunStore> {
        Some(RunStore::at(state_dir(env)?.join("runs")))
    }

    pub fn at(dir: impl Into<PathBuf>) -> RunStore {
        RunStore { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where a run without `-o` keeps its trajectory.
    pub fn trajectory_path(&self, run_id: &str) -> PathBuf {
        self.dir.join(format!("{run_id}.json"))
    }

    /// Records a starting run (replacing any entry for the same file) and
    /// prunes old runs. Returns warnings about corrupt entries it skipped.
    pub fn record(&self, entry: Entry, now_ms: u64) -> Result<Vec<String>, StoreError> {
        fs::create_dir_all(&self.dir)?;
        let _lock = Lock::take(&self.dir.join(LOCK));
        let index = self.read_index();
        let warnings = self.index_warnings(&index);
        let mut entries = index.entries;
        entries.retain(|e| e.run_id != entry.run_id && e.path != entry.path);
        entries.push(entry);
        let removed = prune(&mut entries, now_ms, KEEP_RUNS);
        self.write_index(&entries)?;
        for gone in &removed {
            self.remove_owned(gone, &entries);
        }
        if index.corrupt.is_some() {
            self.sweep(&entries, now_ms);
        }
        Ok(warnings)
    }

    /// The runs started in `cwd`, most recent first, and warnings about
    /// corrupt entries skipped on the way.
    pub fn runs_in(&self, cwd: &Path) -> (Vec<Entry>, Vec<String>) {
        let index = self.read_index();
        let warnings = self.index_warnings(&index);
        let mut runs: Vec<Entry> = index.entries.into_iter().filter(|e| e.cwd == cwd).collect();
        runs.reverse();
        (runs, warnings)
    }

    fn index_path(&self) -> PathBuf {
        self.dir.join(INDEX)
    }

    fn index_warnings(&self, index: &Index) -> Vec<String> {
        let path = self.index_path();
        let mut warnings = Vec::new();
        if let Some(why) = &index.corrupt {
            warnings.push(format!(
                "run store {}: {why}; it is replaced by a new index",
                path.display()
            ));
        }
        if index.skipped > 0 {
            warnings.push(format!(
                "run store {}: skipped {} corrupt {}",
                path.display(),
                index.skipped,
                if index.skipped == 1 {
                    "entry"
                } else {
                    "entries"
                }
            ));
        }
        warnings
    }

    /// Reads the index; a missing one is empty, an unreadable one corrupt,
    /// and each entry that does not parse is skipped.
    fn read_index(&self) -> Index {
        let file = match File::open(self.index_path()) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Index::default(),
            Err(e) => {
                return Index {
                    corrupt: Some(format!("cannot read it: {e}")),
                    ..Index::default()
                }
            }
        };
        let mut bytes = Vec::new();
        if let Err(e) = file.take(MAX_INDEX_BYTES + 1).read_to_end(&mut bytes) {
            return Index {
                corrupt: Some(format!("cannot read it: {e}")),
                ..Index::default()
            };
        }
        if bytes.len() as u64 > MAX_INDEX_BYTES {
            return Index {
                corrupt: Some(format!("larger than {MAX_INDEX_BYTES} bytes")),
                ..Index::default()
            };
        }
        let runs = match serde_json::from_slice::<IndexIn>(&bytes) {
            Ok(index) => index.runs,
            Err(e) => {
                // Valid JSON (checked without building it) that is no index.
                let corrupt = match serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
                    Ok(_) => "not a run index (no runs list)".to_string(),
                    Err(_) => format!("not valid JSON ({e})"),
                };
                return Index {
                    corrupt: Some(corrupt),
                    ..Index::default()
                };
            }
        };
        let mut index = Index::default();
        for run in runs {
            match serde_json::from_str::<Entry>(run.get()) {
                Ok(entry) if entry.valid() => index.entries.push(entry),
                _ => index.skipped += 1,
            }
        }
        index
    }

    /// Replaces the index atomically (a temporary file, then a rename).
    fn write_index(&self, entries: &[Entry]) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(&IndexOut {
            version: 1,
            runs: entries,
        })
        .map_err(|e| StoreError(e.to_string()))?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".index.")
            .suffix(".tmp")
            .tempfile_in(&self.dir)?;
        tmp.write_all(&bytes)?;
        tmp.persist(self.index_path()).map_err(|e| e.error)?;
        Ok(())
    }

    /// Removes a pruned run's trajectory when the store owns it (never a
    /// `-o FILE`) and no kept run uses the same file.
    fn remove_owned(&self, gone: &Entry, kept: &[Entry]) {
        if gone.path != self.trajectory_path(&gone.run_id)
            || kept.iter().any(|k| k.path == gone.path)
        {
            return;
        }
        remove_trajectory(&gone.path);
    }

    /// After the index was lost: prunes trajectory files no entry names, by
    /// their modification time, with the same rule as the index.
    fn sweep(&self, kept: &[Entry], now_ms: u64) {
        let Ok(dir) = fs::read_dir(&self.dir) else {
            return;
        };
        let mut orphans: Vec<Entry> = dir
            .flatten()
            .filter_map(|item| {
                let path = item.path();
                if item.file_name() == INDEX {
                    return None;
                }
                let run_id = path
                    .file_name()?
                    .to_str()?
                    .strip_suffix(".json")?
                    .to_string();
                let modified = item.metadata().ok()?.modified().ok()?;
                let started_ms = modified.duration_since(UNIX_EPOCH).ok()?.as_millis() as u64;
                let entry = Entry {
                    run_id,
                    path,
                    cwd: PathBuf::from("/"),
                    started_ms,
                };
                (entry.valid() && !kept.iter().any(|k| k.path == entry.path)).then_some(entry)
            })
            .collect();
        orphans.sort_by_key(|e| e.started_ms);
        let room = KEEP_RUNS.saturating_sub(kept.len());
        for gone in prune(&mut orphans, now_ms, room) {
            remove_trajectory(&gone.path);
        }
    }
}

/// Removes entries (oldest first) that are neither among the newest
/// `keep_runs` nor younger than `KEEP_FOR`, and returns them.
fn prune(entries: &mut Vec<Entry>, now_ms: u64, keep_runs: usize) -> Vec<Entry> {
    let keep_for = KEEP_FOR.as_millis() as u64;
    let newest_from = entries.len().saturating_sub(keep_runs);
    let mut removed = Vec::new();
    let mut i = 0;
    entries.retain(|e| {
        let keep = i >= newest_from || e.started_ms.saturating_add(keep_for) >= now_ms;
        i += 1;
        if !keep {
            removed.push(e.clone());
        }
        keep
    });
    removed
}

/// Removes a trajectory with its journal and temporary file.
fn remove_trajectory(path: &Path) {
    let _ = fs::remove_file(path);
    for suffix in [".journal", ".tmp"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let _ = fs::remove_file(PathBuf::from(name));
    }
}

/// An exclusive advisory lock on the index, released when dropped. Taking
/// it gives up after `LOCK_WAIT` (a stuck run never blocks another).
struct Lock(#[allow(dead_code)] Option<File>);

impl Lock {
    fn take(path: &Path) -> Lock {
        use std::os::fd::AsRawFd;
        let Ok(file) = OpenOptions::new().create(true).append(true).open(path) else {
            return Lock(None);
        };
        let start = Instant::now();
        loop {
            // SAFETY: flock on a descriptor this function owns.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Lock(Some(file));
            }
            if start.elapsed() >= LOCK_WAIT {
                return Lock(None);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(store: &RunStore, id: &str, cwd: &str, started_ms: u64) -> Entry {
        Entry {
            run_id: id.into(),
            path: store.trajectory_path(id),
            cwd: cwd.into(),
            started_ms,
        }
    }

    const DAY: u64 = 24 * 3600 * 1000;

    #[test]
    fn the_most_recent_run_of_a_directory_comes_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = RunStore::at(dir.path().join("runs"));
        assert!(store.runs_in(Path::new("/a")).0.is_empty());
        store.record(entry(&store, "r1", "/a", 1), 10).unwrap();
        store.record(entry(&store, "r2", "/b", 2), 10).unwrap();
        store.record(entry(&store, "r3", "/a", 3), 10).unwrap();
        let (runs, warnings) = store.runs_in(Path::new("/a"));
        let ids: Vec<&str> = runs.iter().map(|e| e.run_id.as_str()).collect();
        assert_eq!(ids, ["r3", "r1"]);
        assert!(warnings.is_empty());
    }

    #[test]
    fn keeps_the_last_hundred_runs_or_thirty_days_whichever_is_more() {
        let dir = tempfile::tempdir().unwrap();
        let store = RunStore::at(dir.path().join("runs"));
        let now = 1000 * DAY;
        // 150 old runs: only the newest 100 of them stay.
        for i in 0..150 {
            let e = entry(&store, &format!("old{i}"), "/a", now - 40 * DAY + i);
            fs::create_dir_all(store.dir()).unwrap();
            fs::write(&e.path, "{}").unwrap();
            store.record(e, now).unwrap();
        }
        let (runs, _) = store.runs_in(Path::new("/a"));
        assert_eq!(runs.len(), 100);
        assert_eq!(runs.last().unwrap().run_id, "old50");
        assert!(!store.trajectory_path("old49").exists());
        assert!(store.trajectory_path("old50").exists());
        // 120 recent runs: all of them stay, and the old ones go.
        for i in 0..120 {
            store
                .record(entry(&store, &format!("new{i}"), "/a", now - DAY + i), now)
                .unwrap();
        }
        let (runs, _) = store.runs_in(Path::new("/a"));
        assert_eq!(runs.len(), 120);
        assert!(runs.iter().all(|e| e.run_id.starts_with("new")));
        assert!(!store.trajectory_path("old149").exists());
    }

    #[test]
    fn a_pruned_output_file_is_never_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = RunStore::at(dir.path().join("runs"));
        let mine = dir.path().join("mine.json");
        fs::write(&mine, "{}").unwrap();
        let e = Entry {
            run_id: "o".into(),
            path: mine.clone(),
            cwd: "/a".into(),
            started_ms: 0,
        };
        store.record(e, 0).unwrap();
        for i in 0..KEEP_RUNS {
            store
                .record(entry(&store, &format!("r{i}"), "/a", 1), 100 * DAY)
                .unwrap();
        }
        assert_eq!(store.runs_in(Path::new("/a")).0.len(), KEEP_RUNS);
        assert!(mine.exists());
    }

    #[test]
    fn a_new_run_on_the_same_file_replaces_its_entry() {
        let dir = tempfile::tempdir().unwrap();
        let store = RunStore::at(dir.path().join("runs"));
        let file = PathBuf::from("/t/out.json");
        for id in ["a", "b"] {
            let e = Entry {
                run_id: id.into(),
                path: file.clone(),
                cwd: "/a".into(),
                started_ms: 1,
            };
            store.record(e, 1).unwrap();
        }
        let ids: Vec<String> = store
            .runs_in(Path::new("/a"))
            .0
            .into_iter()
            .map(|e| e.run_id)
            .collect();
        assert_eq!(ids, ["b"]);
    }

    #[test]
    fn corrupt_entries_are_skipped_and_a_corrupt_index_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let store = RunStore::at(dir.path().join("runs"));
        fs::create_dir_all(store.dir()).unwrap();
        let good = serde_json::to_value(entry(&store, "ok", "/a", 1)).unwrap();
        let text = serde_json::json!({"version": 1, "runs": [
            {"run_id": 7}, good, {"run_id": "../../x", "path": "/x", "cwd": "/a", "started_ms": 1}
        ]});
        fs::write(store.dir().join(INDEX), text.to_string()).unwrap();
        let (runs, warnings) = store.runs_in(Path::new("/a"));
        assert_eq!(runs.len(), 1);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("skipped 2 corrupt entries"),
            "{warnings:?}"
        );

        fs::write(store.dir().join(INDEX), "{not json").unwrap();
        let (runs, warnings) = store.runs_in(Path::new("/a"));
        assert!(runs.is_empty());
        assert!(warnings[0].contains("not valid JSON"), "{warnings:?}");
        let warnings = store.record(entry(&store, "n", "/a", 5), 5).unwrap();
        assert_eq!(warnings.len(), 1);
        assert_eq!(store.runs_in(Path::new("/a")).0.len(), 1);
    }

    #[test]
    fn a_lost_index_prunes_orphaned_trajectories_by_age() {
        let dir = tempfile::tempdir().unwrap();
        let store = RunStore::at(dir.path().join("runs"));
        fs::create_dir_all(store.dir()).unwrap();
        for i in 0..(KEEP_RUNS + 5) {
            fs::write(store.trajectory_path(&format!("f{i:03}")), "{}").unwrap();
        }
        fs::write(store.dir().join(INDEX), "garbage").unwrap();
        // Far in the future: every file is older than 30 days.
        store
            .record(entry(&store, "new", "/a", 0), now_ms() + 365 * DAY)
            .unwrap();
        let left = fs::read_dir(store.dir())
            .unwrap()
            .flatten()
            .filter(|f| f.file_name().to_string_lossy().starts_with('f'))
            .count();
        assert_eq!(left, KEEP_RUNS - 1);
    }

    #[test]
    fn store_location_follows_xdg_then_home() {
        let env = |k: &str| (k == "HOME").then(|| "/h".to_string());
        assert_eq!(
            RunStore::locate(&env).unwrap().dir(),
            Path::new("/h/.local/state/tinyagent/runs")
        );
        let env = |k: &str| match k {
            "HOME" => Some("/h".to_string()),
            "XDG_STATE_HOME" => Some("/s".to_string()),
            _ => None,
        };
        assert_eq!(
            RunStore::locate(&env).unwrap().dir(),
            Path::new("/s/tinyagent/runs")
        );
        assert!(RunStore::locate(&|_: &str| None).is_none());
    }
}
