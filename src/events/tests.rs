//! Tests of `events`.

use super::*;
use std::sync::{Arc, Mutex};

struct Capture(Arc<Mutex<Vec<Value>>>);
impl Sink for Capture {
    fn handle(&mut self, record: &EventRecord) {
        self.0.lock().unwrap().push(record.json.clone());
    }
}

#[test]
fn envelope_comes_first_and_seq_counts_from_one() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let emitter = Emitter::new("r1", vec![Box::new(Capture(seen.clone()))]);
    emitter.emit(Event::StepStarted {
        step: 1,
        model: "script/a".into(),
    });
    emitter.warn("careful");
    let seen = seen.lock().unwrap();
    let keys: Vec<&String> = seen[0].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["type", "seq", "ts", "run_id", "step", "model"]);
    assert_eq!(seen[0]["type"], "step.started");
    assert_eq!(seen[0]["seq"], 1);
    assert_eq!(seen[1]["seq"], 2);
    assert_eq!(seen[1]["message"], "careful");
}

#[test]
fn a_child_emitter_shares_sinks_with_its_own_seq_and_parent() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let emitter = Emitter::new("parent", vec![Box::new(Capture(seen.clone()))]);
    emitter.warn("one");
    let child = emitter.child("kid");
    child.warn("child one");
    child.warn("child two");
    emitter.warn("two");
    let seen = seen.lock().unwrap();
    let stamps: Vec<(u64, &str, Option<&str>)> = seen
        .iter()
        .map(|e| {
            (
                e["seq"].as_u64().unwrap(),
                e["run_id"].as_str().unwrap(),
                e["parent_run_id"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        stamps,
        [
            (1, "parent", None),
            (1, "kid", Some("parent")),
            (2, "kid", Some("parent")),
            (2, "parent", None)
        ]
    );
    let keys: Vec<&String> = seen[1].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["type", "seq", "ts", "run_id", "parent_run_id", "message"]
    );
}

struct Flusher;
impl Sink for Flusher {
    fn handle(&mut self, _record: &EventRecord) {}
    fn before_run_finished(&mut self, _run_id: &str, finished: &Event) -> Option<String> {
        matches!(finished, Event::RunFinished { .. }).then(|| "could not ship".to_string())
    }
}

fn run_finished() -> Event {
    Event::RunFinished {
        status: Status::Completed,
        exit_code: 0,
        steps: 1,
        input_tokens: 0,
        output_tokens: 0,
        cost_usd: 0.0,
        duration_ms: 0,
        model_fallbacks: 0,
        active_model: "script/a".into(),
        output: Value::Null,
        error: None,
        down: Vec::new(),
        cache: Default::default(),
    }
}

#[test]
fn a_sinks_flush_warning_comes_just_before_run_finished_and_only_for_the_top_run() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let emitter = Emitter::new(
        "r1",
        vec![Box::new(Flusher), Box::new(Capture(seen.clone()))],
    );
    emitter.child("kid").emit(run_finished());
    emitter.emit(run_finished());
    let seen = seen.lock().unwrap();
    let kinds: Vec<(&str, &str, u64)> = seen
        .iter()
        .map(|e| {
            (
                e["run_id"].as_str().unwrap(),
                e["type"].as_str().unwrap(),
                e["seq"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("kid", "run.finished", 1),
            ("r1", "warning", 1),
            ("r1", "run.finished", 2)
        ]
    );
    assert_eq!(seen[1]["message"], "could not ship");
}

#[test]
fn outage_lines_match_spec() {
    let models = vec![
        DownModel {
            model: "a/x".into(),
            reason: crate::reason::SwitchReason::parse("http_503"),
        },
        DownModel {
            model: "b/y".into(),
            reason: crate::reason::SwitchReason::parse("network"),
        },
    ];
    let waiting = Event::OutageWaiting {
        step: 7,
        models: models.clone(),
        until: "2026-01-01T00:10:00.000Z".into(),
        wait: Duration::from_secs(600),
        next_try: Duration::from_millis(1200),
    };
    assert_eq!(
            outage_event_line(&waiting).unwrap(),
            "outage: every model is down (a/x: http_503, b/y: network); waiting up to 10m, next try in 2s"
        );
    let json = envelope(&waiting, 1, "t", "r", None);
    let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["type", "seq", "ts", "run_id", "step", "models", "until"]
    );
    let over = Event::OutageOver {
        step: 7,
        model: "a/x".into(),
        waited_seconds: 92.4,
        probes: 1,
    };
    assert_eq!(
        outage_event_line(&over).unwrap(),
        "outage over: a/x answered again after 1m32s (1 request), going on with step 7"
    );
    let reminder = OutageNotice {
        models,
        left: Duration::from_secs(90),
        next_try: Duration::ZERO,
        remind: true,
    };
    assert!(reminder
        .line()
        .ends_with("waiting up to 1m30s, next try in 0s"));
}

#[test]
fn switch_lines_match_spec() {
    let line = switch_line(&Event::ModelFallback {
        step: 3,
        from: "a/x".into(),
        to: "b/y".into(),
        reason: crate::reason::SwitchReason::parse("http_503"),
        attempts: 6,
    });
    assert_eq!(
        line.unwrap(),
        "model fallback: a/x -> b/y (http_503) at step 3"
    );
}
