//! A starting run's entry in the run store's index (and the pruning that
//! comes with it), written on a thread of its own so that the run's first
//! request never waits for the index; what it found (corrupt entries, an
//! index that cannot be written) joins the run's events as one `warning`
//! just before `run.finished`.

use std::thread::JoinHandle;

use super::{now_ms, Entry, RunStore};
use crate::events::{Event, EventRecord, Sink};

/// The index update of one starting run. Dropping it waits for the update,
/// so the process never exits with the index half written.
pub struct Recording(State);

enum State {
    Done(Vec<String>),
    Running(JoinHandle<Vec<String>>),
}

impl Recording {
    /// Nothing (more) to record.
    pub fn done() -> Recording {
        Recording(State::Done(Vec::new()))
    }

    /// Records `entry` and prunes old runs on a thread of its own (or here,
    /// when no thread can be had).
    pub(super) fn start(store: RunStore, entry: Entry) -> Recording {
        let spawned = std::thread::Builder::new().name("run-store".into()).spawn({
            let (store, entry) = (store.clone(), entry.clone());
            move || record(&store, entry)
        });
        match spawned {
            Ok(handle) => Recording(State::Running(handle)),
            Err(_) => Recording(State::Done(record(&store, entry))),
        }
    }

    /// Waits for the update; returns its warnings.
    pub fn wait(mut self) -> Vec<String> {
        self.take()
    }

    fn take(&mut self) -> Vec<String> {
        match std::mem::replace(&mut self.0, State::Done(Vec::new())) {
            State::Done(warnings) => warnings,
            State::Running(handle) => handle
                .join()
                .unwrap_or_else(|_| vec!["run store: recording this run failed".into()]),
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.take();
    }
}

fn record(store: &RunStore, entry: Entry) -> Vec<String> {
    match store.record(entry, now_ms()) {
        Ok(warnings) => warnings,
        Err(e) => vec![format!(
            "run store {}: {e}; this run cannot be found by --continue",
            store.dir().display()
        )],
    }
}

/// Hands the recording's warnings to the run's events: it waits for the
/// index update just before `run.finished` (by then long done, unless the
/// whole run took less time than the index update).
pub struct RecordingSink {
    recording: Option<Recording>,
    /// Warnings already emitted (the same corrupt entries found by
    /// `--continue` are not reported twice).
    already: Vec<String>,
}

impl RecordingSink {
    pub fn new(recording: Recording, already: Vec<String>) -> RecordingSink {
        RecordingSink {
            recording: Some(recording),
            already,
        }
    }
}

impl Sink for RecordingSink {
    fn handle(&mut self, _record: &EventRecord) {}

    fn before_run_finished(&mut self, _run_id: &str, _finished: &Event) -> Option<String> {
        let warnings: Vec<String> = self
            .recording
            .take()?
            .wait()
            .into_iter()
            .filter(|w| !self.already.contains(w))
            .collect();
        (!warnings.is_empty()).then(|| warnings.join("; "))
    }
}
