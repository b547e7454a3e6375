//! The one collector for warnings found before a run's emitter exists:
//! skipped run-store entries, the run store itself, the GitHub summary,
//! instruction files and tracing. They go out together, just after
//! `run.started`, in a fixed order of where they came from.

use crate::events::Emitter;

/// Where a warning came from; warnings go out in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Origin {
    /// The GitHub Actions step summary.
    Github,
    /// The run store: entries `--continue` skipped, a store that cannot be used.
    Store,
    /// `AGENTS.md` files cut, skipped or unreadable.
    Instructions,
    /// The OpenTelemetry exporter.
    Tracing,
}

/// Warnings gathered before the run could emit them.
#[derive(Debug, Default)]
pub(crate) struct Diagnostics {
    warnings: Vec<(Origin, String)>,
}

impl Diagnostics {
    /// Adds `warnings` from `origin`.
    pub(crate) fn extend(&mut self, origin: Origin, warnings: impl IntoIterator<Item = String>) {
        self.warnings
            .extend(warnings.into_iter().map(|w| (origin, w)));
    }

    /// The warnings from `origin` so far.
    pub(crate) fn of(&self, origin: Origin) -> Vec<String> {
        self.warnings
            .iter()
            .filter(|(o, _)| *o == origin)
            .map(|(_, w)| w.clone())
            .collect()
    }

    /// Emits every warning, by origin, each origin's in the order found.
    pub(crate) fn emit(mut self, emitter: &Emitter) {
        self.warnings.sort_by_key(|(origin, _)| *origin);
        for (_, warning) in self.warnings {
            emitter.warn(warning);
        }
    }
}
