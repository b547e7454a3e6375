//! The emitter and its sinks: each event stamped with `seq`, `ts` and
//! `run_id` (a subagent's also `parent_run_id`, its own `seq`) into an
//! `EventRecord` and handed to every `Sink` in order; per-request records,
//! streamed text and outage progress go to the sinks beside the events.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde_json::{Map, Value};

use super::{Event, EventRecord, OutageNotice, RequestRecord};

/// A consumer of events. Sinks must not fail the run: they report their own
/// trouble on stderr at most.
pub trait Sink: Send {
    fn handle(&mut self, record: &EventRecord);
    /// One request sent to a model by run `run_id` (a subagent's carries
    /// its parent's id too); not an event.
    fn model_request(
        &mut self,
        _run_id: &str,
        _parent_run_id: Option<&str>,
        _record: &RequestRecord,
    ) {
    }
    /// Streamed reply text, for live display; not an event.
    fn text_delta(&mut self, _step: u32, _text: &str) {}
    /// How an outage wait stands (its countdown, a reminder line); not an
    /// event.
    fn outage_progress(&mut self, _notice: &OutageNotice) {}
    /// Called just before the top-level run's `run.finished` (given here)
    /// goes out. A sink that ships data elsewhere ends and flushes it here;
    /// the warning it may return is emitted first, so it is in the stream.
    fn before_run_finished(&mut self, _run_id: &str, _finished: &Event) -> Option<String> {
        None
    }
    /// Called once at the very end, after `run.finished`.
    fn finish(&mut self) {}
    /// The terminal is someone else's for a while (an approval question,
    /// `hold` true) and then given back: a live display (a spinner) stops
    /// drawing, and comes back; not an event.
    fn hold_live(&mut self, _hold: bool) {}
}

struct EmitterInner {
    sinks: Vec<Box<dyn Sink>>,
}

/// Stamps and fans out events. Cheap to clone; shared by the agent loop,
/// the retry loop and the chain.
///
/// A subagent's emitter (`child`) writes to the same sinks, stamped with
/// its own `run_id`, a `parent_run_id`, and its own `seq` counting from 1,
/// so each run's events stay numbered 1, 2, 3 ... in the shared stream.
#[derive(Clone)]
pub struct Emitter {
    run_id: Arc<str>,
    parent_run_id: Option<Arc<str>>,
    seq: Arc<AtomicU64>,
    inner: Arc<Mutex<EmitterInner>>,
}

impl Emitter {
    pub fn new(run_id: &str, sinks: Vec<Box<dyn Sink>>) -> Self {
        Emitter {
            run_id: run_id.into(),
            parent_run_id: None,
            seq: Arc::new(AtomicU64::new(0)),
            inner: Arc::new(Mutex::new(EmitterInner { sinks })),
        }
    }

    /// An emitter for a subagent run `run_id` delegated from this run: same
    /// sinks, its own sequence, marked with this run as its parent.
    pub(crate) fn child(&self, run_id: &str) -> Emitter {
        Emitter {
            run_id: run_id.into(),
            parent_run_id: Some(self.run_id.clone()),
            seq: Arc::new(AtomicU64::new(0)),
            inner: self.inner.clone(),
        }
    }

    /// Whether this is a subagent's emitter (`child`).
    pub(crate) fn is_child(&self) -> bool {
        self.parent_run_id.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, EmitterInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Emits one event to every sink, in order.
    pub fn emit(&self, event: Event) {
        let mut inner = self.lock();
        if self.parent_run_id.is_none() && matches!(event, Event::RunFinished { .. }) {
            let warnings: Vec<String> = inner
                .sinks
                .iter_mut()
                .filter_map(|sink| sink.before_run_finished(&self.run_id, &event))
                .collect();
            for message in warnings {
                self.dispatch(&mut inner, Event::Warning { message });
            }
        }
        self.dispatch(&mut inner, event);
    }

    fn dispatch(&self, inner: &mut EmitterInner, event: Event) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let ts = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let parent = self.parent_run_id.as_deref();
        let json = envelope(&event, seq, &ts, &self.run_id, parent);
        let record = EventRecord {
            seq,
            ts,
            run_id: self.run_id.to_string(),
            parent_run_id: parent.map(str::to_string),
            event,
            json,
        };
        for sink in inner.sinks.iter_mut() {
            sink.handle(&record);
        }
    }

    /// Shorthand for a `warning` event.
    pub(crate) fn warn(&self, message: impl Into<String>) {
        self.emit(Event::Warning {
            message: message.into(),
        });
    }

    /// Hands one per-request record to every sink.
    pub fn model_request(&self, record: RequestRecord) {
        let parent = self.parent_run_id.as_deref();
        for sink in self.lock().sinks.iter_mut() {
            sink.model_request(&self.run_id, parent, &record);
        }
    }

    /// Forwards streamed reply text to sinks that display it.
    pub(crate) fn text_delta(&self, step: u32, text: &str) {
        for sink in self.lock().sinks.iter_mut() {
            sink.text_delta(step, text);
        }
    }

    /// Hands how an outage wait stands to every sink.
    pub(crate) fn outage_progress(&self, notice: &OutageNotice) {
        for sink in self.lock().sinks.iter_mut() {
            sink.outage_progress(notice);
        }
    }

    /// Holds (or gives back) the live display of every sink, around an
    /// approval question.
    pub(crate) fn hold_live(&self, hold: bool) {
        for sink in self.lock().sinks.iter_mut() {
            sink.hold_live(hold);
        }
    }

    /// Flushes and closes every sink. A subagent's emitter leaves them open
    /// for its parent.
    pub fn finish(&self) {
        if self.parent_run_id.is_some() {
            return;
        }
        for sink in self.lock().sinks.iter_mut() {
            sink.finish();
        }
    }
}

pub(super) fn envelope(
    event: &Event,
    seq: u64,
    ts: &str,
    run_id: &str,
    parent_run_id: Option<&str>,
) -> Value {
    let body = serde_json::to_value(event).unwrap_or(Value::Null);
    let mut map = Map::new();
    map.insert("type".into(), Value::from(event.type_name()));
    map.insert("seq".into(), Value::from(seq));
    map.insert("ts".into(), Value::from(ts));
    map.insert("run_id".into(), Value::from(run_id));
    if let Some(parent) = parent_run_id {
        map.insert("parent_run_id".into(), Value::from(parent));
    }
    if let Value::Object(fields) = body {
        map.extend(fields);
    }
    Value::Object(map)
}
