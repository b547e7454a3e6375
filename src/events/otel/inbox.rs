//! What the trace sink hands its thread (`Note`), and the inbox the notes
//! wait in until the thread takes them.

use std::sync::mpsc::Sender;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use opentelemetry::trace::SpanId;

use crate::events::{Event, RequestRecord};

/// What the sink hands this thread, in the order it happened.
pub(super) enum Note {
    /// An event of run `run_id` (content already dropped unless captured).
    /// A `tool.started` carries the id its span gets, chosen by the sink
    /// so that `bash` can be given the span's `TRACEPARENT` at once.
    Event {
        ts: String,
        run_id: String,
        parent_run_id: Option<String>,
        event: Event,
        span_id: Option<SpanId>,
    },
    /// One request sent to a model.
    Request {
        run_id: String,
        parent_run_id: Option<String>,
        record: RequestRecord,
    },
    /// Ends run `run_id` as its `run.finished` says, exports everything
    /// queued and answers the first failure, if any.
    Flush {
        run_id: String,
        finished: Event,
        done: Sender<Option<String>>,
    },
    /// Exports what is left, waiting at most `wait`, and answers as `Flush`.
    Shutdown {
        wait: Duration,
        done: Sender<Option<String>>,
    },
}

/// Notes on their way to the thread. The sink adds them without waking the
/// thread, except when enough have gathered or one needs an answer; the
/// thread also looks on its own every `LOOK_EVERY` at the latest (sooner
/// when a batch of spans is due), so nothing waits there for long while a
/// run sits in a long step.
#[derive(Default)]
pub(super) struct Inbox {
    waiting: Mutex<Waiting>,
    ready: Condvar,
}

#[derive(Default)]
struct Waiting {
    notes: Vec<Note>,
    closed: bool,
    /// The thread waits for a wake-up, and none was sent yet.
    sleeping: bool,
}

/// The longest the thread waits for notes when nobody wakes it.
pub(super) const LOOK_EVERY: Duration = Duration::from_secs(1);

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a note, waking the thread when `wake` or when `gathered` notes
    /// are waiting, if it sleeps (once per sleep: a busy thread takes what
    /// is waiting when it is done).
    pub(super) fn put(&self, note: Note, wake: bool, gathered: usize) {
        let woken = {
            let mut inbox = self.lock();
            inbox.notes.push(note);
            let woken = inbox.sleeping && (wake || inbox.notes.len() >= gathered);
            if woken {
                inbox.sleeping = false;
            }
            woken
        };
        if woken {
            self.ready.notify_one();
        }
    }

    /// No more notes: the thread ends once it has applied those waiting.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
    }

    /// The notes waiting (perhaps none, after waiting `within`), or `None`
    /// once closed and empty.
    pub(super) fn take(&self, within: Duration) -> Option<Vec<Note>> {
        let mut inbox = self.lock();
        if inbox.notes.is_empty() && !inbox.closed {
            inbox.sleeping = true;
            inbox = self
                .ready
                .wait_timeout(inbox, within)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            inbox.sleeping = false;
        }
        if inbox.notes.is_empty() && inbox.closed {
            return None;
        }
        Some(std::mem::take(&mut inbox.notes))
    }
}
