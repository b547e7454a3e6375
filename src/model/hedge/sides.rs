//! Who won a hedged request's race, and whose output reaches the caller:
//! the first side to send an event wins (`Race`, set once from either
//! side's first-event hook), and each side's stream is held back until it
//! is the winner, then forwarded, or dropped if it lost (`SideObserver`).

use std::future::Future;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use super::Side;
use crate::model::StreamObserver;

/// Who sent the first event; set once, from either side's first-event hook.
#[derive(Default)]
pub(super) struct Race {
    winner: AtomicU8,
}

impl Race {
    pub(super) fn winner(&self) -> Option<Side> {
        match self.winner.load(Ordering::Acquire) {
            1 => Some(Side::Original),
            2 => Some(Side::Hedge),
            _ => None,
        }
    }

    pub(super) fn hook(self: &Arc<Self>, side: Side) -> crate::model::watch::FirstEventHook {
        let race = self.clone();
        Arc::new(move || {
            let _ =
                race.winner
                    .compare_exchange(0, side as u8, Ordering::AcqRel, Ordering::Acquire);
        })
    }

    /// Ready once the other side won. It registers no waker: the race polls
    /// the loser again right after a winner is set.
    pub(super) fn lost(&self, side: Side) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |_| match self.winner() {
            Some(winner) if winner != side => Poll::Ready(()),
            _ => Poll::Pending,
        })
    }
}

/// Forwards one side's stream to the turn's observer once it is the
/// winner; until then holds it back, and drops it if it lost.
pub(super) struct SideObserver<'a> {
    side: Side,
    race: &'a Race,
    target: &'a dyn StreamObserver,
    held: Mutex<Vec<Option<String>>>,
}

impl<'a> SideObserver<'a> {
    pub(super) fn new(side: Side, race: &'a Race, target: &'a dyn StreamObserver) -> Self {
        SideObserver {
            side,
            race,
            target,
            held: Mutex::new(Vec::new()),
        }
    }

    fn pass(&self, delta: Option<&str>) {
        match self.race.winner() {
            Some(winner) if winner == self.side => {
                self.flush();
                match delta {
                    Some(text) => self.target.text_delta(text),
                    None => self.target.tool_call_delta(),
                }
            }
            Some(_) => {}
            None => self
                .held
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(delta.map(str::to_string)),
        }
    }

    pub(super) fn flush(&self) {
        let held = std::mem::take(&mut *self.held.lock().unwrap_or_else(|e| e.into_inner()));
        for delta in held {
            match delta {
                Some(text) => self.target.text_delta(&text),
                None => self.target.tool_call_delta(),
            }
        }
    }
}

impl StreamObserver for SideObserver<'_> {
    fn text_delta(&self, text: &str) {
        self.pass(Some(text));
    }
    fn tool_call_delta(&self) {
        self.pass(None);
    }
}
