//! What one model request's response said, watched from outside the
//! adapters: the first stream event's time (noted by the timed stream
//! reader, `timed.rs`, and the scripted model), the response's status and
//! published rate limits (noted by the transport), and the first-event
//! deadline the gate set for it, all through a task-local, so no adapter
//! passes anything along. A hedge's race (`hedge.rs`) is told of the
//! first event at once, while the request is still in flight (SPEC 23).

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use reqwest::header::HeaderMap;

use super::ratelimit::RateLimits;

/// What watching one request saw: when its first stream event arrived, and
/// the HTTP response's status and published rate limits (SPEC 17). Only
/// the parsed limits are kept, never a header or a body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Watched {
    /// `None` when no stream event came.
    pub first_event: Option<Instant>,
    /// The response's status; `None` when no response came (or no HTTP).
    pub status: Option<u16>,
    /// The limits the response published, success or error alike.
    pub limits: Option<RateLimits>,
}

/// Called once, at the first stream event of a watched request (a hedge's
/// race picks its winner there: `hedge.rs`).
pub(crate) type FirstEventHook = std::sync::Arc<dyn Fn() + Send + Sync>;

/// The request being sent: its first-event deadline when the gate set one,
/// the cells its transport and stream readers fill in, and who is told of
/// its first event as it comes.
#[derive(Default)]
struct Watch {
    deadline: Option<Duration>,
    on_first_event: Option<FirstEventHook>,
    first_event: OnceLock<Instant>,
    response: OnceLock<(u16, Option<RateLimits>)>,
}

tokio::task_local! {
    /// The watch of the current request (set by `watch`; its deadline read
    /// by `HttpTransport::timeouts`, its cells filled by the transport and
    /// the timed stream reader).
    static WATCH: std::sync::Arc<Watch>;
}

/// The watch of one model request, kept by its sender: what it saw can be
/// read even when the request was dropped (cut by a stop, or past its whole
/// deadline) after its response came.
pub(crate) struct Watcher(std::sync::Arc<Watch>);

impl Watcher {
    /// A watch under the first-event deadline `deadline` (the transport's
    /// own when `None`), calling `on_first_event` at the first stream
    /// event, while the request is still in flight.
    pub(crate) fn new(
        deadline: Option<Duration>,
        on_first_event: Option<FirstEventHook>,
    ) -> Watcher {
        Watcher(std::sync::Arc::new(Watch {
            deadline,
            on_first_event,
            ..Watch::default()
        }))
    }

    /// Runs one model request under this watch. The timed stream reader
    /// (and the scripted model) calls `note_first_event`, the transport
    /// notes the response and reads the deadline itself; no adapter has to
    /// pass anything along.
    pub(crate) async fn watch<F: std::future::Future>(&self, request: F) -> F::Output {
        WATCH.scope(self.0.clone(), request).await
    }

    /// What the request showed so far: when its first stream event
    /// arrived, and its response's status and rate limits.
    pub(crate) fn seen(&self) -> Watched {
        let response = self.0.response.get().copied();
        Watched {
            first_event: self.0.first_event.get().copied(),
            status: response.map(|(status, _)| status),
            limits: response.and_then(|(_, limits)| limits),
        }
    }
}

/// Marks the first stream event of the request being watched, telling its
/// hook (later calls, and calls outside `watch`, change nothing).
pub(crate) fn note_first_event() {
    let _ = WATCH.try_with(|cell| {
        if cell.first_event.set(Instant::now()).is_ok() {
            if let Some(hook) = &cell.on_first_event {
                hook();
            }
        }
    });
}

/// The first-event deadline the gate set for the watched request, if any.
pub(crate) fn first_event_deadline() -> Option<Duration> {
    WATCH.try_with(|w| w.deadline).ok().flatten()
}

/// Notes the status and published limits of the watched request's
/// response (the first response only; nothing outside `watch`).
pub(crate) fn note_response(status: u16, headers: &HeaderMap) {
    let _ = WATCH.try_with(|cell| {
        cell.response
            .get_or_init(|| (status, RateLimits::from_headers(headers, SystemTime::now())));
    });
}
