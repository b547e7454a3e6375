//! Durability benchmarks (not tests): how fast the log database takes
//! events, and what a trajectory checkpoint costs per step as a run grows.
//!
//! Run: `cargo bench --bench durable` (or `bench/durable.sh`, which also
//! times the binary end to end).

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tinyagent::events::sqlite::SqliteSink;
use tinyagent::events::{Emitter, Event, RequestRecord};
use tinyagent::exit::Status;
use tinyagent::model::{Message, Role, ToolCall};
use tinyagent::trajectory::{Checkpoint, JournalOp, Totals, Trajectory};

/// The events of one agent step with one tool call (what the loop emits).
fn step_events(step: u32, output: &str) -> Vec<Event> {
    vec![
        Event::StepStarted {
            step,
            model: "anthropic/claude-sonnet-4-5".into(),
        },
        Event::ModelResponse {
            step,
            model: "anthropic/claude-sonnet-4-5".into(),
            input_tokens: 12000,
            output_tokens: 300,
            cached_input_tokens: 11000,
            cache_write_tokens: 700,
            cost_usd: 0.04,
            finish_reason: "tool_calls".into(),
            usage_estimated: false,
        },
        Event::AssistantMessage {
            step,
            model: "anthropic/claude-sonnet-4-5".into(),
            text: "Let me look at the tests.".into(),
            tool_calls: vec![],
        },
        Event::ToolStarted {
            step,
            call_id: format!("call_{step}"),
            tool: "bash".into(),
            arguments: json!({"command": "cargo test"}),
        },
        Event::ToolFinished {
            step,
            call_id: format!("call_{step}"),
            tool: "bash".into(),
            ok: true,
            output: output.to_string(),
            duration_ms: 1200,
        },
    ]
}

fn run_started() -> Event {
    Event::RunStarted {
        task: "fix the failing test".into(),
        model: "anthropic/claude-sonnet-4-5".into(),
        cwd: "/work".into(),
        fallback_models: vec!["openai/gpt-5".into()],
        resumed_from: None,
        worktree: None,
        instructions: Vec::new(),
    }
}

fn run_finished(steps: u32) -> Event {
    Event::RunFinished {
        status: tinyagent::exit::Status::Submitted,
        exit_code: 0,
        steps,
        input_tokens: 1,
        output_tokens: 1,
        cost_usd: 0.1,
        duration_ms: 1,
        model_fallbacks: 0,
        active_model: "anthropic/claude-sonnet-4-5".into(),
        output: Value::Null,
        error: None,
        down: Vec::new(),
        cache: Default::default(),
    }
}

/// One run of `steps` steps into `db`: returns (events, time spent in
/// `emit` per step, wall time until everything is on disk).
fn log_run(db: &std::path::Path, run_id: &str, steps: u32) -> (u64, Duration, Duration) {
    let output = "test result: ok. 120 passed\n".repeat(40); // ~1 KB
    let started = Instant::now();
    let sink = SqliteSink::open(db).expect("open");
    let emitter = Emitter::new(run_id, vec![Box::new(sink)]);
    let mut in_emit = Duration::ZERO;
    let mut events = 0;
    emitter.emit(run_started());
    for step in 1..=steps {
        for event in step_events(step, &output) {
            let t = Instant::now();
            emitter.emit(event);
            in_emit += t.elapsed();
            events += 1;
        }
    }
    emitter.emit(run_finished(steps));
    emitter.finish();
    (events + 2, in_emit / steps, started.elapsed())
}

fn bench_log_db() {
    let dir = tempfile::tempdir().unwrap();
    let steps = 2000;
    let db = dir.path().join("one.db");
    let (events, per_step, wall) = log_run(&db, "solo", steps);
    println!(
        "log-db, 1 run:   {events} events in {:.0} ms = {:.0} events/s; emit cost {:.1} us per step ({} events)",
        wall.as_secs_f64() * 1e3,
        events as f64 / wall.as_secs_f64(),
        per_step.as_secs_f64() * 1e6,
        step_events(1, "").len()
    );

    let db = dir.path().join("shared.db");
    drop(SqliteSink::open(&db).unwrap());
    let started = Instant::now();
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let db = db.clone();
            std::thread::spawn(move || log_run(&db, &format!("run-{i}"), steps))
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let wall = started.elapsed();
    let events: u64 = results.iter().map(|r| r.0).sum();
    let worst_emit = results.iter().map(|r| r.1).max().unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let stored: i64 = conn
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored as u64, events, "every event recorded");
    println!(
        "log-db, 8 runs:  {events} events in {:.0} ms = {:.0} events/s; worst emit cost {:.1} us per step; all {stored} stored",
        wall.as_secs_f64() * 1e3,
        events as f64 / wall.as_secs_f64(),
        worst_emit.as_secs_f64() * 1e6
    );
}

fn doc() -> Trajectory {
    Trajectory {
        schema_version: 1,
        tinyagent_version: "bench".into(),
        run_id: "bench".into(),
        task: "fix the failing test".into(),
        model: "anthropic/claude-sonnet-4-5".into(),
        fallback_models: vec![],
        active_model: "anthropic/claude-sonnet-4-5".into(),
        status: Status::Running,
        error: None,
        started_at: "2026-01-01T00:00:00Z".into(),
        finished_at: None,
        steps: 0,
        totals: Totals::default(),
        model_switches: vec![],
        hedges: vec![],
        reply_caps: Default::default(),
        plan: vec![],
        messages: vec![Message::new(Role::User, "fix the failing test", 0)],
        output: Value::Null,
        resumed_from: None,
        lineage: None,
        cwd: None,
        worktree: None,
    }
}

/// Journals one step exactly as the agent loop does.
fn checkpoint_step(cp: &mut Checkpoint, d: &mut Trajectory, step: u32, output: &str) {
    let call = ToolCall {
        id: format!("call_{step}"),
        name: "bash".into(),
        arguments: json!({"command": "cargo test 2>&1 | tail -200"}),
        garbled: false,
        oversized: None,
    };
    let push = |cp: &mut Checkpoint, d: &mut Trajectory, m: Message| {
        d.messages.push(m.clone());
        let op = JournalOp::Message {
            index: d.messages.len() - 1,
            message: m,
        };
        cp.append(&op, d).unwrap();
    };
    let state = |d: &Trajectory| JournalOp::State {
        steps: d.steps,
        totals: d.totals,
        active_model: d.active_model.clone(),
        model_switches: vec![],
        hedges: vec![],
        reply_caps: Default::default(),
        plan: vec![],
        messages: Some(d.messages.len()),
    };
    d.steps = step;
    d.totals.input_tokens += 12000;
    push(
        cp,
        d,
        Message {
            tool_calls: vec![call.clone()],
            model: Some(d.active_model.clone()),
            ..Message::new(Role::Assistant, "Running the tests.", step)
        },
    );
    cp.append(&state(d), d).unwrap();
    let started = JournalOp::ToolStarted {
        step,
        call_id: call.id.clone(),
        tool: "bash".into(),
        arguments: call.arguments.clone(),
    };
    cp.append(&started, d).unwrap();
    let finished = JournalOp::ToolFinished {
        step,
        call_id: call.id.clone(),
        ok: true,
    };
    cp.append(&finished, d).unwrap();
    push(cp, d, Message::tool_result(&call, output, step));
    cp.append(&state(d), d).unwrap();
}

fn bench_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.json");
    let mut d = doc();
    let mut cp = Checkpoint::create(&path, &d).unwrap();
    let output: String = "x"
        .repeat(99)
        .chars()
        .chain(['\n'])
        .cycle()
        .take(10 * 1024)
        .collect();
    let mut times = Vec::new();
    let mut bytes = Vec::new();
    for step in 1..=1000u32 {
        let before = cp.bytes_written();
        let t = Instant::now();
        checkpoint_step(&mut cp, &mut d, step, &output);
        times.push(t.elapsed());
        bytes.push(cp.bytes_written() - before);
    }
    cp.finish(&d).unwrap();
    let final_size = std::fs::metadata(&path).unwrap().len();
    println!("checkpoint, 10 KB tool output per step:");
    for at in [10usize, 100, 1000] {
        let lo = at.saturating_sub(10);
        let mut window: Vec<Duration> = times[lo..at].to_vec();
        window.sort();
        let median = window[window.len() / 2];
        // Amortised: the mean over the second half of the run up to here,
        // which always spans a fold of the journal into FILE (FILE grows
        // by half between folds).
        let span = (at / 2).max(5);
        let mean = times[at - span..at].iter().sum::<Duration>() / span as u32;
        let mean_bytes = bytes[at - span..at].iter().sum::<u64>() / span as u64;
        let max = times[at - span..at].iter().max().unwrap();
        println!(
            "  step {at:>4}: median {:.3} ms, amortised {:.3} ms, max {:.1} ms, {:.1} KB written per step",
            median.as_secs_f64() * 1e3,
            mean.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3,
            mean_bytes as f64 / 1024.0
        );
    }
    println!(
        "  whole run: {:.1} MB written for a {:.1} MB trajectory ({:.1}x)",
        cp.bytes_written() as f64 / 1e6,
        final_size as f64 / 1e6,
        cp.bytes_written() as f64 / final_size as f64
    );
}

fn request_record(step: u32, attempt: u32) -> RequestRecord {
    RequestRecord {
        step,
        model: "anthropic/claude-sonnet-4-5".into(),
        provider: "anthropic".into(),
        endpoint: Some("https://api.anthropic.com:443".into()),
        attempt,
        started_at: "2026-01-01T00:00:00.000Z".into(),
        first_event_ms: Some(420),
        duration_ms: 3100,
        outcome: tinyagent::reason::RequestOutcome::Ok,
        http_status: Some(200),
        paced_ms: 0,
        input_tokens: 12000,
        output_tokens: 300,
        cached_input_tokens: 11000,
        cache_write_tokens: 700,
        cost_usd: 0.04,
        response_model: None,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// What a `model_requests` row costs: on the run's thread (handing the
/// record to the writer), and on the writer thread (the row on disk, in
/// batches as a run produces them). Medians of 5 runs of 2000 requests.
fn bench_model_requests() {
    let dir = tempfile::tempdir().unwrap();
    let n = 2000;
    let mut handoff = Vec::new();
    let mut on_disk = Vec::new();
    let mut with_events = Vec::new();
    for round in 0..5 {
        // Records alone: time to hand each over, and until all are stored.
        let db = dir.path().join(format!("requests-{round}.db"));
        let sink = SqliteSink::open(&db).expect("open");
        let emitter = Emitter::new("bench", vec![Box::new(sink)]);
        let mut each = Vec::with_capacity(n);
        let started = Instant::now();
        for i in 0..n as u32 {
            let t = Instant::now();
            emitter.model_request(request_record(i + 1, 1));
            each.push(t.elapsed().as_secs_f64() * 1e6);
        }
        emitter.finish();
        on_disk.push(started.elapsed().as_secs_f64() * 1e3 / n as f64);
        handoff.push(median(each));
        let stored: i64 = rusqlite::Connection::open(&db)
            .unwrap()
            .query_row("SELECT count(*) FROM model_requests", [], |r| r.get(0))
            .unwrap();
        assert_eq!(stored as usize, n, "every request recorded");
        // A whole run's events with and without one record per step.
        let output = "test result: ok. 120 passed\n".repeat(40);
        let mut wall = [0.0; 2];
        for (k, records) in [false, true].into_iter().enumerate() {
            let db = dir.path().join(format!("run-{round}-{k}.db"));
            let sink = SqliteSink::open(&db).expect("open");
            let emitter = Emitter::new("bench", vec![Box::new(sink)]);
            let started = Instant::now();
            emitter.emit(run_started());
            for step in 1..=n as u32 {
                if records {
                    emitter.model_request(request_record(step, 1));
                }
                for event in step_events(step, &output) {
                    emitter.emit(event);
                }
            }
            emitter.emit(run_finished(n as u32));
            emitter.finish();
            wall[k] = started.elapsed().as_secs_f64() * 1e3;
        }
        with_events.push((wall[1] - wall[0]) / n as f64);
    }
    println!(
        "model_requests:  hand-off {:.2} us per request (run thread); {:.3} ms per row until on disk (records alone); {:+.3} ms per request over a {n}-step run's events until on disk (medians of 5)",
        median(handoff),
        median(on_disk),
        median(with_events)
    );
}

fn main() {
    bench_model_requests();
    bench_log_db();
    bench_checkpoint();
}
