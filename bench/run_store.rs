//! Run store benchmark (not a test): what keeping a run in the store adds
//! to its start (read the index, prune, write it back atomically) and what
//! the trajectory a run without `-o` now writes costs at its start and end.
//! Medians over many repetitions, with an index of 100 and of 1000 runs.
//!
//! Run: `cargo bench --bench run_store` (and `bench/run_store.sh` for the
//! whole binary with and without `--no-save`, through hyperfine).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use tinyagent::exit::Status;
use tinyagent::runs::{Keep, RunStore};
use tinyagent::trajectory::{Checkpoint, Totals, Trajectory};

const ROUNDS: usize = 200;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn doc(run_id: &str) -> Trajectory {
    Trajectory {
        schema_version: 1,
        tinyagent_version: "bench".into(),
        run_id: run_id.into(),
        task: "fix the failing test in src/lib.rs".into(),
        model: "anthropic/claude-sonnet-4-5".into(),
        fallback_models: vec![],
        active_model: "anthropic/claude-sonnet-4-5".into(),
        status: Status::Running,
        error: None,
        started_at: "2026-01-01T00:00:00.000Z".into(),
        finished_at: None,
        steps: 0,
        totals: Totals::default(),
        model_switches: vec![],
        plan: vec![],
        messages: vec![],
        output: Value::Null,
        resumed_from: None,
        cwd: Some("/work/project".into()),
        worktree: None,
    }
}

/// `Keep::begin` (index read, prune, atomic write) with `runs` runs kept.
fn bench_begin(runs: usize) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let store = RunStore::at(dir.path().join("runs"));
    let keep = Keep {
        store: Some(store.clone()),
        cwd: PathBuf::from("/work/project"),
    };
    // Fill the index with recent runs (all within 30 days: none pruned).
    for i in 0..runs {
        keep.begin(&format!("seed-{i:05}"), None, &|w| panic!("{w}"));
    }
    let mut samples = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let id = uuid::Uuid::new_v4().to_string();
        let start = Instant::now();
        keep.begin(&id, None, &|w| panic!("{w}"));
        samples.push(start.elapsed());
    }
    median(samples)
}

/// The trajectory a run without `-o` now writes: created at the start,
/// finished (rewritten, journal removed) at the end.
fn bench_trajectory() -> (Duration, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let store = RunStore::at(dir.path().join("runs"));
    std::fs::create_dir_all(store.dir()).unwrap();
    let mut starts = Vec::with_capacity(ROUNDS);
    let mut ends = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let id = uuid::Uuid::new_v4().to_string();
        let mut d = doc(&id);
        let path = store.trajectory_path(&id);
        let start = Instant::now();
        let mut cp = Checkpoint::create(&path, &d).unwrap();
        starts.push(start.elapsed());
        d.status = Status::Completed;
        let start = Instant::now();
        cp.finish(&d).unwrap();
        ends.push(start.elapsed());
    }
    (median(starts), median(ends))
}

fn main() {
    for runs in [100, 1000] {
        let m = bench_begin(runs);
        println!(
            "run store start (index of {runs} runs: read, prune, atomic write): median {:.3} ms",
            m.as_secs_f64() * 1000.0
        );
    }
    let (start, end) = bench_trajectory();
    println!(
        "trajectory of a run without -o: create at start median {:.3} ms, finish at end median {:.3} ms",
        start.as_secs_f64() * 1000.0,
        end.as_secs_f64() * 1000.0
    );
}
