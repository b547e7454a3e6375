//! Run store benchmark (not a test): what keeping a run in the store costs
//! at its start and at its end, library level, against a run with
//! `--no-save` (which does none of it). Medians of 200, with an index of
//! 100 and of 1000 runs.
//!
//! What a kept run pays, in the order it pays it:
//! - start, on the critical path: `Keep::begin` (the store's directory, and
//!   starting the index update on its own thread) and
//!   `Checkpoint::create_volatile` (starting the first trajectory write on
//!   its own thread);
//! - meanwhile, on those threads: the index update (read, prune, atomic
//!   write) and the first trajectory write (shown for scale);
//! - end: the first step's journal lines and `Checkpoint::finish` (the
//!   final atomic write, the journal removed), then waiting for the index
//!   update (by then long done in any real run).
//!
//! Run: `cargo bench --bench run_store`; `python3 bench/run_store_e2e.py`
//! measures the same end to end with the binary (spawn to first request,
//! reply to exit) and `bench/run_store.sh` runs both.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use tinyagent::exit::Status;
use tinyagent::runs::{Keep, RunStore};
use tinyagent::trajectory::{Checkpoint, JournalOp, Totals, Trajectory};

const ROUNDS: usize = 200;

fn median(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1000.0
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
        hedges: vec![],
        reply_caps: Default::default(),
        plan: vec![],
        messages: serde_json::from_value(serde_json::json!([
            {"role": "user", "content": "fix the failing test in src/lib.rs", "step": 0}
        ]))
        .unwrap(),
        output: Value::Null,
        resumed_from: None,
        lineage: None,
        cwd: Some("/work/project".into()),
        worktree: None,
    }
}

fn keep_at(dir: &std::path::Path) -> Keep {
    Keep {
        store: Some(RunStore::at(dir.join("runs"))),
        cwd: PathBuf::from("/work/project"),
    }
}

/// `Keep::begin` on the critical path, and the index update it starts.
fn bench_begin(runs: usize) -> (f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let keep = keep_at(dir.path());
    let mut warnings = Vec::new();
    // Fill the index with recent runs (all within 30 days: none pruned).
    for i in 0..runs {
        keep.begin(&format!("seed-{i:05}"), None, &mut warnings)
            .1
            .wait();
    }
    let (mut begin, mut update) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let id = uuid::Uuid::new_v4().to_string();
        let start = Instant::now();
        let (_, recording) = keep.begin(&id, None, &mut warnings);
        begin.push(start.elapsed());
        assert!(recording.wait().is_empty());
        update.push(start.elapsed());
    }
    assert!(warnings.is_empty(), "{warnings:?}");
    (median(begin), median(update))
}

/// The store's trajectory of a one-step run: created at the start (the
/// first write on its thread), one step journaled, finished at the end.
fn bench_trajectory() -> (f64, f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let store = RunStore::at(dir.path().join("runs"));
    std::fs::create_dir_all(store.dir()).unwrap();
    let (mut starts, mut firsts, mut ends) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let id = uuid::Uuid::new_v4().to_string();
        let mut d = doc(&id);
        let path = store.trajectory_path(&id);
        let start = Instant::now();
        let mut cp = Checkpoint::create_volatile(&path, &d).unwrap();
        starts.push(start.elapsed());
        // The first request is out meanwhile (20 ms for a fast model).
        std::thread::sleep(Duration::from_millis(20));
        let first = Instant::now();
        d.messages = serde_json::from_value(serde_json::json!([
            {"role": "user", "content": "fix the failing test in src/lib.rs", "step": 0},
            {"role": "assistant", "content": "done", "step": 1}
        ]))
        .unwrap();
        d.steps = 1;
        let op = JournalOp::State {
            steps: 1,
            totals: d.totals,
            active_model: d.active_model.clone(),
            model_switches: vec![],
            hedges: vec![],
            reply_caps: Default::default(),
            plan: vec![],
            messages: Some(2),
        };
        cp.append(&op, &d).unwrap();
        firsts.push(first.elapsed());
        d.status = Status::Completed;
        cp.finish(&d).unwrap();
        ends.push(first.elapsed());
    }
    (median(starts), median(firsts), median(ends))
}

fn main() {
    for runs in [100, 1000] {
        let (begin, update) = bench_begin(runs);
        println!(
            "index of {runs} runs: Keep::begin on the critical path median {begin:.3} ms; \
             the index update on its thread (read, prune, atomic write) median {update:.3} ms"
        );
    }
    let (start, first, end) = bench_trajectory();
    println!(
        "store trajectory of a one-step run: start median {start:.3} ms; \
         end (the step's journal line, the final write, the journal removed) median {end:.3} ms, \
         of which the journal line {first:.3} ms"
    );
}
