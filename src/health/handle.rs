//! `Health`: one run's handle on the shared record's store. It keeps
//! facts only: it reads and writes the store on the run's clock, and a
//! store that fails costs one `warning`, after which the run goes on
//! without it. What the facts mean for a run (cooling elsewhere, strikes
//! reaching `switch_after`, the probe lease) is decided in `model::gate`.

use std::sync::Mutex;

use super::{Millis, Store, StoreError};

type Clock = Box<dyn Fn() -> Millis + Send + Sync>;
type Warn = Box<dyn Fn(String) + Send + Sync>;

/// The store of the shared record as one run uses it; off when
/// `health_db: off`, or after its store failed once.
pub struct Health {
    /// `None` when off; `Some(None)` once the store failed (after one warning).
    store: Option<Mutex<Option<Box<dyn Store>>>>,
    clock: Clock,
    warn: Warn,
    label: String,
    /// This run's probe-lease token.
    token: u64,
}

impl Health {
    /// No shared record.
    pub(crate) fn off() -> Health {
        Health {
            store: None,
            clock: Box::new(super::now_millis),
            warn: Box::new(|_| {}),
            label: String::new(),
            token: 0,
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
            store: Some(Mutex::new(Some(store))),
            clock: Box::new(super::now_millis),
            warn: Box::new(warn),
            label: label.into(),
            token: fastrand::u64(1..),
        }
    }

    /// Replaces the wall clock (tests).
    #[cfg(test)]
    pub(crate) fn with_clock(
        mut self,
        clock: impl Fn() -> Millis + Send + Sync + 'static,
    ) -> Health {
        self.clock = Box::new(clock);
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
                (self.warn)(format!(
                    "health record {}: {e}; this run goes on without the shared provider health",
                    self.label
                ));
                None
            }
        }
    }
}
