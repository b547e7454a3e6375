//! `Health`: one run's handle on the shared record's store. It keeps
//! facts only: it reads and writes the store on the run's clock, and a
//! store that fails costs one `warning`, after which the run goes on
//! without it. What the facts mean for a run (cooling elsewhere, strikes
//! reaching `switch_after`, the probe lease) is decided in `model::gate`.
//!
//! Pacing records (SPEC 17) are kept even without a shared record: with
//! `health_db: off`, or once the store failed, they live in the run's own
//! memory (`pace`).

use std::sync::{Arc, Mutex};

use super::pacing::PacingStore;
use super::{MemoryStore, Millis, Store, StoreError};

type Clock = Arc<dyn Fn() -> Millis + Send + Sync>;
type Warn = Arc<dyn Fn(String) + Send + Sync>;
/// The store behind its lock; `None` inside once it failed.
type Shared = Arc<Mutex<Option<Box<dyn Store>>>>;

/// The store of the shared record as one run uses it; off when
/// `health_db: off`, or after its store failed once. A clone is the same
/// handle (one connection, one warning): the run's chain and its budgets
/// (which subagents share) hold one each.
#[derive(Clone)]
pub struct Health {
    /// `None` when off; `Some(None)` once the store failed (after one warning).
    store: Option<Shared>,
    clock: Clock,
    warn: Warn,
    label: String,
    /// This run's probe-lease token.
    token: u64,
    /// The pacing records when there is no shared store to keep them.
    local: Arc<Mutex<MemoryStore>>,
}

impl Health {
    /// No shared record.
    pub(crate) fn off() -> Health {
        Health {
            store: None,
            clock: Arc::new(super::now_millis),
            warn: Arc::new(|_| {}),
            label: String::new(),
            token: 0,
            local: Arc::default(),
        }
    }

    /// A handle on `store`. `label` names the store in the warning, `warn`
    /// emits it.
    pub fn new(
        store: Box<dyn Store>,
        label: impl Into<String>,
        warn: impl Fn(String) + Send + Sync + 'static,
    ) -> Health {
        Health {
            store: Some(Arc::new(Mutex::new(Some(store)))),
            clock: Arc::new(super::now_millis),
            warn: Arc::new(warn),
            label: label.into(),
            token: fastrand::u64(1..),
            local: Arc::default(),
        }
    }

    /// Replaces the wall clock (tests).
    #[cfg(test)]
    pub(crate) fn with_clock(
        mut self,
        clock: impl Fn() -> Millis + Send + Sync + 'static,
    ) -> Health {
        self.clock = Arc::new(clock);
        self
    }

    /// The current time on this run's clock (also the gate's clock for the
    /// run's own cooldowns).
    pub fn now(&self) -> Millis {
        (self.clock)()
    }

    /// This run's probe-lease token (random, never 0 when on).
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Runs `f` on the store at the current time; `None` when off or
    /// broken. A store error warns once and turns the record off for the
    /// rest of the run.
    pub fn with<R>(
        &self,
        f: impl FnOnce(&mut dyn Store, Millis) -> Result<R, StoreError>,
    ) -> Option<R> {
        let mut slot = self
            .store
            .as_ref()?
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let store = slot.as_deref_mut()?;
        match f(store, self.now()) {
            Ok(value) => Some(value),
            Err(e) => {
                *slot = None;
                self.warn_broken(&e);
                None
            }
        }
    }

    fn warn_broken(&self, e: &StoreError) {
        (self.warn)(format!(
            "health record {}: {e}; this run goes on without the shared provider health",
            self.label
        ));
    }

    /// Runs `f` on the pacing records at the current time: the shared
    /// store's, else (off or broken) the run's own in memory. A store error
    /// warns once, as in `with`, and `f` runs again on the run's own.
    pub fn pace<R>(&self, f: impl Fn(&mut dyn PacingStore, Millis) -> Result<R, StoreError>) -> R
    where
        R: Default,
    {
        let now = self.now();
        if let Some(shared) = &self.store {
            let mut slot = shared.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(store) = slot.as_deref_mut() {
                match f(store, now) {
                    Ok(value) => return value,
                    Err(e) => {
                        *slot = None;
                        self.warn_broken(&e);
                    }
                }
            }
        }
        let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut *local, now).unwrap_or_default()
    }
}
