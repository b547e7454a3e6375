//! Shared provider health (SPEC section 13): what runs on one machine learn
//! about failing models, kept in a small store so parallel runs fail over
//! together instead of each paying for the outage.
//!
//! This module keeps facts, never decides: `HealthStore` is the record
//! (SQLite by default, Redis for a fleet, in memory for tests; chosen in
//! `for_run`), `Health` one run's handle on it (the run's clock, one
//! warning when the store fails). What the facts mean (cooling elsewhere,
//! strikes reaching `switch_after`, who probes) is decided in `model::gate`.
//! Keys come resolved (`ResolvedModel::health_key`) and travel on each
//! chain member; this module reads no settings.

mod budget;
mod handle;
pub mod latency;
#[cfg(test)]
mod locked;
mod memory;
mod outage;
pub mod pacing;
mod redis;
mod sqlite;
#[cfg(test)]
mod store_tests;

use std::path::{Path, PathBuf};

pub use budget::{BudgetSlot, BudgetStore};
pub use handle::Health;
pub use latency::{LatencyStore, KEPT_FIRST_EVENTS};
#[cfg(test)]
pub(crate) use locked::LockedStore;
pub(crate) use memory::MemoryStore;
pub use outage::{OutageRecord, OutageStore};
pub use pacing::{
    Ask, Dim, Heard, PaceKey, PaceLimit, PaceSource, PacingStore, Published, Reservation, Reserved,
    Shortfall, Window,
};
pub use redis::RedisStore;
pub use sqlite::SqliteStore;

use crate::events::Emitter;
use crate::setup::Env;

/// Most strike times a store keeps per model.
pub(crate) const MAX_STRIKES: usize = 64;

/// Wall-clock time in milliseconds since the Unix epoch.
pub type Millis = i64;

/// The current wall-clock time in milliseconds.
pub(crate) fn now_millis() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

/// What a record is about: a model spec at one endpoint (base URL, port
/// included; for `script/` models the script file's absolute path).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HealthKey {
    pub model: String,
    pub endpoint: String,
}

/// What the store knows about one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record {
    /// Cooling down until this time (it may be past: the model awaits its
    /// probe). `None` after a success or when never recorded.
    pub cooling_until: Option<Millis>,
    /// The last successful request any run made to the model.
    pub last_success_at: Option<Millis>,
    /// The run probing the model after its cooldown, if one holds the lease.
    pub lease: Option<Lease>,
}

/// The probe lease: after a cooldown, one run of the whole fleet probes the
/// model at a time; the lease ends with the probe's recorded outcome, or on
/// its own at `until` if that run died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// A random token of the run that holds it.
    pub holder: u64,
    pub until: Millis,
}

impl Record {
    /// Whether a run other than `holder` holds a live probe lease at `now`.
    pub(crate) fn leased_by_other(&self, holder: u64, now: Millis) -> bool {
        self.lease
            .is_some_and(|l| l.holder != holder && l.until > now)
    }
}

/// The store could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

/// Everything the shared record keeps, in one store: the cooling records
/// of SPEC 13 (`HealthStore`) and what lives beside them: the pacing
/// records of SPEC 17 (`PacingStore`), the outage record of SPEC 18
/// (`OutageStore`), spend per budget and period of SPEC 19
/// (`BudgetStore`) and the first-event times of SPEC 23 (`LatencyStore`). Each concern is a trait of its own, implemented by
/// every store (memory, SQLite, Redis) in a file of its own; `Store` is all
/// of them, and what `Health` holds.
pub trait Store: HealthStore + PacingStore + OutageStore + BudgetStore + LatencyStore {}
impl<T: HealthStore + PacingStore + OutageStore + BudgetStore + LatencyStore> Store for T {}

/// The cooling records. Implementations hold only keys, reasons and times,
/// keep each call short, and may be called from several processes at once.
pub trait HealthStore: Send {
    /// The record of `key` (default when none).
    fn read(&mut self, key: &HealthKey) -> Result<Record, StoreError>;
    /// Adds a strike at `now` and returns the strikes recorded since the
    /// model's last success and no older than `window` ms, this one included.
    fn record_strike(
        &mut self,
        key: &HealthKey,
        reason: &str,
        now: Millis,
        window: Millis,
    ) -> Result<u32, StoreError>;
    /// Clears the model's strikes and cooling record.
    fn record_success(&mut self, key: &HealthKey, now: Millis) -> Result<(), StoreError>;
    /// Records the model as cooling down until `until`, written by the run
    /// `holder`. When `holder` holds the probe lease, this is its probe's
    /// recorded outcome and ends the lease; a lease another run holds is
    /// released only by its owner (or its expiry).
    fn mark_cooling(
        &mut self,
        key: &HealthKey,
        until: Millis,
        reason: &str,
        now: Millis,
        holder: u64,
    ) -> Result<(), StoreError>;
    /// Takes the probe lease of `key` for `holder` until `now + ttl` unless
    /// another holder has a live one; returns whether `holder` holds it.
    fn try_lease(
        &mut self,
        key: &HealthKey,
        holder: u64,
        now: Millis,
        ttl: Millis,
    ) -> Result<bool, StoreError>;
}

/// Where the record lives: config `health_db` (`off`, or a path with `~`
/// expanded), else `$XDG_STATE_HOME/tinyagent/health.db`, else
/// `~/.local/state/tinyagent/health.db`. `None`: no record for this run.
pub(crate) fn db_path(setting: Option<&str>, env: Env) -> Option<PathBuf> {
    let home = || env("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    match setting.map(str::trim) {
        Some("off") => None,
        Some("~") => home(),
        Some(path) if path.starts_with("~/") => home().map(|h| h.join(&path[2..])),
        Some(path) => Some(PathBuf::from(path)),
        None => match env("XDG_STATE_HOME").filter(|x| !x.is_empty()) {
            Some(state) => Some(PathBuf::from(state).join("tinyagent/health.db")),
            None => home().map(|h| h.join(".local/state/tinyagent/health.db")),
        },
    }
}

/// Opens the SQLite record at `path` (creating it and its directory), or
/// explains why it cannot be used.
pub(crate) fn open(path: &Path) -> Result<Box<dyn Store>, StoreError> {
    Ok(Box::new(SqliteStore::open(path)?))
}

/// Where a run's record lives (config `health_db`).
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Location {
    File(PathBuf),
    /// A `redis://` or `rediss://` URL and the password from
    /// `TINYAGENT_REDIS_PASSWORD`; `Debug` hides both passwords.
    Redis {
        url: String,
        password: Option<String>,
    },
}

impl std::fmt::Debug for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::File(path) => f.debug_tuple("File").field(path).finish(),
            Location::Redis { url, .. } => {
                f.debug_tuple("Redis").field(&redis::redacted(url)).finish()
            }
        }
    }
}

impl Location {
    /// How warnings name the record: the file, or the URL without its password.
    pub(crate) fn label(&self) -> String {
        match self {
            Location::File(path) => path.display().to_string(),
            Location::Redis { url, .. } => redis::redacted(url),
        }
    }

    /// What the record says about each of `keys`, read once and nothing
    /// written (`/model` in an interactive session shows it).
    pub(crate) fn read_records(&self, keys: &[HealthKey]) -> Result<Vec<Record>, StoreError> {
        let mut store = self.open()?;
        keys.iter().map(|key| store.read(key)).collect()
    }

    /// The limit the record learned for each of `keys` (SPEC 24), read
    /// once (`--check` and `/model` list it). A file not made yet is read
    /// as empty, not created.
    pub(crate) fn read_learned(&self, keys: &[PaceKey]) -> Result<Vec<Option<u64>>, StoreError> {
        if matches!(self, Location::File(path) if !path.exists()) {
            return Ok(vec![None; keys.len()]);
        }
        let mut store = self.open()?;
        let now = now_millis();
        keys.iter().map(|key| store.learned(key, now)).collect()
    }

    fn open(&self) -> Result<Box<dyn Store>, StoreError> {
        match self {
            Location::File(path) => open(path),
            Location::Redis { url, password } => {
                Ok(Box::new(RedisStore::connect(url, password.clone())?))
            }
        }
    }
}

/// The record's location for config `health_db`: a Redis URL (its password
/// may also come from `TINYAGENT_REDIS_PASSWORD`), else `db_path`.
pub(crate) fn location(setting: Option<&str>, env: Env) -> Option<Location> {
    match setting.map(str::trim) {
        Some(url) if url.starts_with("redis://") || url.starts_with("rediss://") => {
            Some(Location::Redis {
                url: url.to_string(),
                password: env("TINYAGENT_REDIS_PASSWORD"),
            })
        }
        _ => db_path(setting, env).map(Location::File),
    }
}

/// The shared record at `location`: off without one (`health_db: off`, or
/// no home directory); an unusable file or an unreachable Redis costs one
/// `warning` and the run goes on without it.
pub(crate) fn for_run(location: Option<&Location>, emitter: &Emitter) -> Health {
    let Some(location) = location else {
        return Health::off();
    };
    let label = location.label();
    let store = match location.open() {
        Ok(store) => store,
        Err(e) => {
            emitter.warn(format!(
                "health record {label}: {e}; this run goes on without the shared provider health"
            ));
            return Health::off();
        }
    };
    let warner = emitter.clone();
    Health::new(store, label, move |message| warner.warn(message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setup::fixed_env as env;

    #[test]
    fn path_rules() {
        let both = env(&[("HOME", "/h"), ("XDG_STATE_HOME", "/s")]);
        assert_eq!(
            db_path(None, &both),
            Some(PathBuf::from("/s/tinyagent/health.db"))
        );
        assert_eq!(
            db_path(None, &env(&[("HOME", "/h")])),
            Some(PathBuf::from("/h/.local/state/tinyagent/health.db"))
        );
        assert_eq!(db_path(Some("off"), &both), None);
        assert_eq!(
            db_path(Some("~/x/h.db"), &both),
            Some(PathBuf::from("/h/x/h.db"))
        );
        assert_eq!(
            db_path(Some("/abs/h.db"), &both),
            Some(PathBuf::from("/abs/h.db"))
        );
        assert_eq!(db_path(None, &env(&[])), None);
    }
}
