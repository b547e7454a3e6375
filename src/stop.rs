//! Why a run must stop early: an interrupt (Ctrl-C, SIGTERM) or the
//! wall-clock time limit. Waits anywhere in the run race against this.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// Set once SIGTERM arrived: an interactive session ends after the run.
static TERMINATED: AtomicBool = AtomicBool::new(false);

/// Records that the process was asked to terminate (SIGTERM).
pub(crate) fn mark_terminated() {
    TERMINATED.store(true, Ordering::SeqCst);
}

/// Whether the process was asked to terminate (SIGTERM).
pub(crate) fn terminated() -> bool {
    TERMINATED.load(Ordering::SeqCst)
}

/// What ended a wait early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopCause {
    Interrupted,
    TimeLimit,
}

/// The run's interrupt token and deadline. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Stop {
    cancel: CancellationToken,
    deadline: Option<Instant>,
}

impl Stop {
    pub(crate) fn new(cancel: CancellationToken, deadline: Option<Instant>) -> Self {
        Stop { cancel, deadline }
    }

    /// A stop that never fires (tests).
    #[cfg(test)]
    pub(crate) fn never() -> Self {
        Stop::new(CancellationToken::new(), None)
    }

    /// Interrupts the run, as Ctrl-C does (Ctrl-C at an approval question,
    /// read as a key in raw mode, is no signal).
    pub(crate) fn interrupt(&self) {
        self.cancel.cancel();
    }

    /// The cause that is already pending, if any (interrupt first).
    pub(crate) fn pending(&self) -> Option<StopCause> {
        if self.cancel.is_cancelled() {
            Some(StopCause::Interrupted)
        } else if self.deadline.is_some_and(|d| Instant::now() >= d) {
            Some(StopCause::TimeLimit)
        } else {
            None
        }
    }

    /// Resolves when the run must stop.
    pub(crate) async fn fired(&self) -> StopCause {
        match self.deadline {
            Some(deadline) => tokio::select! {
                _ = self.cancel.cancelled() => StopCause::Interrupted,
                _ = tokio::time::sleep_until(deadline.into()) => StopCause::TimeLimit,
            },
            None => {
                self.cancel.cancelled().await;
                StopCause::Interrupted
            }
        }
    }

    /// Sleeps for `duration` unless the run must stop first.
    pub(crate) async fn sleep(&self, duration: Duration) -> Result<(), StopCause> {
        tokio::select! {
            cause = self.fired() => Err(cause),
            _ = tokio::time::sleep(duration) => Ok(()),
        }
    }
}
