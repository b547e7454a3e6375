//! One request to one member, and its bookkeeping: the result, the time to
//! the first event, the `RequestRecord` (SPEC 8 `model_requests`, the trace's
//! chat span) and the reply's cost. The retry loop and `--check` both send
//! through `send_once`; nothing else asks a model.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use super::member::Member;
use super::ratelimit::RateLimits;
use super::watch::{FirstEventHook, Watched, Watcher};
use super::{FinishReason, ModelError, Request, Response, StreamObserver};
use crate::events::RequestRecord;
use crate::reason::RequestOutcome;
use crate::stop::StopCause;

/// Where a request happens: its step, the event emitter and the run's stop
/// signal.
#[derive(Clone, Copy)]
pub(crate) struct RequestCtx<'a> {
    pub step: u32,
    pub emitter: &'a crate::events::Emitter,
    pub stop: &'a crate::stop::Stop,
}

/// Where a request sits in the run: its step (0 for `--check`) and its
/// attempt on the member in that step, from 1.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    pub step: u32,
    pub attempt: u32,
}

/// Which finished replies count as answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Accept {
    /// Any reply (`--check` judges a probe's reply itself).
    AnyReply,
    /// A reply with text or tool calls: one that finished with neither is
    /// failure `empty_response` (SPEC 4 "Empty reply"). A cut-off reply
    /// (`length`) is left to the truncation rule.
    NonEmpty,
}

/// A request that came to an end (an answer or an error).
#[derive(Debug)]
pub(crate) struct Sent {
    pub result: Result<Response, ModelError>,
    /// Time from sending to the first stream event (headers included).
    pub first_event: Option<Duration>,
    pub record: RequestRecord,
    /// The rate limits its response published (SPEC 17), success or error.
    pub limits: Option<RateLimits>,
}

/// What sending came to.
#[derive(Debug)]
// One per request, moved once: its size costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Attempted<C> {
    Sent(Sent),
    /// `cut` fired first: the request was dropped; its record's outcome is
    /// the cut's (`Cut::outcome`).
    Cut(C, RequestRecord),
}

/// Why a request was cut, as its record says it ended.
pub(crate) trait Cut {
    fn outcome(&self) -> RequestOutcome;
}

/// The run's stop: a cancel or a limit.
impl Cut for StopCause {
    fn outcome(&self) -> RequestOutcome {
        RequestOutcome::Interrupted
    }
}

/// A cut that never fires (`--check`).
impl Cut for std::convert::Infallible {
    fn outcome(&self) -> RequestOutcome {
        match *self {}
    }
}

/// How long a request may take: its first-event deadline (the transport's
/// own when `None`), and a bound on the whole request (`--check`: a model
/// that never answers fails `timeout`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Deadlines {
    pub first_event: Option<Duration>,
    pub whole: Option<Duration>,
}

/// Sends `request` to `member` once, racing `cut` (the run's stop signal;
/// `--check` gives one that never fires), under `deadlines`.
pub(crate) async fn send_once<C: Cut>(
    member: &Member,
    request: &Request<'_>,
    observer: &dyn StreamObserver,
    place: Place,
    accept: Accept,
    deadlines: Deadlines,
    cut: impl Future<Output = C>,
) -> Attempted<C> {
    let sending = Sending {
        member,
        request,
        observer,
        place,
        accept,
        deadlines,
    };
    sending.send(None, cut).await
}

/// One request about to be sent, as `send_once` takes it; a hedge's race
/// (`hedge.rs`) sends its two through `Sending::send` with a hook on each
/// first event.
#[derive(Clone, Copy)]
pub(crate) struct Sending<'a> {
    pub member: &'a Member,
    pub request: &'a Request<'a>,
    pub observer: &'a dyn StreamObserver,
    pub place: Place,
    pub accept: Accept,
    pub deadlines: Deadlines,
}

impl Sending<'_> {
    /// Sends the request once, racing `cut`; `on_first_event` is called at
    /// its first stream event. A cut request's record has the cut's outcome
    /// and what its response said so far.
    pub(crate) async fn send<C: Cut>(
        self,
        on_first_event: Option<FirstEventHook>,
        cut: impl Future<Output = C>,
    ) -> Attempted<C> {
        let Sending {
            member,
            request,
            observer,
            place,
            accept,
            deadlines,
        } = self;
        let started = Instant::now();
        let started_at = SystemTime::now();
        let limit = deadlines.whole;
        let watcher = Watcher::new(deadlines.first_event, on_first_event);
        let bounded = async {
            let sending = watcher.watch(member.model.complete(request, observer));
            match limit {
                None => sending.await,
                Some(limit) => tokio::time::timeout(limit, sending)
                    .await
                    .unwrap_or_else(|_| Err(no_answer_within(limit))),
            }
        };
        let result = tokio::select! {
            sent = bounded => sent,
            cause = cut => {
                let ended = Ended::Cut(cause.outcome());
                let record = record(member, place, started, started_at, watcher.seen(), ended);
                return Attempted::Cut(cause, record);
            }
        };
        let watched = watcher.seen();
        let result = match accept {
            Accept::AnyReply => result,
            Accept::NonEmpty => result.and_then(not_empty),
        };
        let first_event = watched
            .first_event
            .map(|t| t.saturating_duration_since(started));
        let record = record(
            member,
            place,
            started,
            started_at,
            watched,
            Ended::Replied(&result),
        );
        Attempted::Sent(Sent {
            result,
            first_event,
            record,
            limits: watched.limits,
        })
    }
}

fn no_answer_within(limit: Duration) -> ModelError {
    ModelError::Timeout {
        message: format!("no answer within {}", humantime::format_duration(limit)),
        deadline: Some(limit),
    }
}

/// A reply that finished properly but holds no text and no tool calls is
/// no answer (SPEC 4 "Empty reply").
fn not_empty(response: Response) -> Result<Response, ModelError> {
    let empty = response.text.trim().is_empty()
        && response.tool_calls.is_empty()
        && response.finish != FinishReason::Length;
    if empty {
        Err(ModelError::EmptyResponse)
    } else {
        Ok(response)
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

/// How a request came to its end, for its record.
#[derive(Clone, Copy)]
enum Ended<'a> {
    /// The model replied: an answer or an error.
    Replied(&'a Result<Response, ModelError>),
    /// It was cut, ending as `outcome`.
    Cut(RequestOutcome),
}

/// The record of one request, its outcome set here once: `ok`, the
/// failure's reason, or the cut's. The status is the response's own
/// whenever one came (SPEC 8): a 200 whose stream then dropped or carried
/// an error is 200. Without HTTP (a script) a success is 200 and an error
/// its own.
fn record(
    member: &Member,
    place: Place,
    started: Instant,
    started_at: SystemTime,
    watched: Watched,
    ended: Ended<'_>,
) -> RequestRecord {
    let first_event = watched
        .first_event
        .map(|t| t.saturating_duration_since(started));
    let (outcome, http_status, input_tokens, output_tokens, cost_usd) = match ended {
        Ended::Replied(Ok(response)) => (
            RequestOutcome::Ok,
            Some(watched.status.unwrap_or(200)),
            response.usage.input_tokens,
            response.usage.output_tokens,
            member.cost(response),
        ),
        Ended::Cut(outcome) => (outcome, watched.status, 0, 0, 0.0),
        Ended::Replied(Err(error)) => (
            RequestOutcome::Failed(error.reason()),
            watched.status.or_else(|| error.http_status()),
            0,
            0,
            0.0,
        ),
    };
    // The prompt-cache counts of a reply; none for a failure.
    let cache_usage = match ended {
        Ended::Replied(Ok(response)) => response.usage,
        _ => crate::conversation::Usage::default(),
    };
    RequestRecord {
        step: place.step,
        model: member.spec.to_string(),
        provider: member.spec.provider().to_string(),
        endpoint: member.endpoint.clone(),
        attempt: place.attempt,
        started_at: humantime::format_rfc3339_millis(started_at).to_string(),
        first_event_ms: first_event.map(millis),
        duration_ms: millis(started.elapsed()),
        outcome,
        http_status,
        paced_ms: 0,
        input_tokens,
        output_tokens,
        cached_input_tokens: cache_usage.cached_input_tokens,
        cache_write_tokens: cache_usage.cache_write_tokens,
        cost_usd,
        response_model: match ended {
            Ended::Replied(Ok(response)) => response.model.clone(),
            _ => None,
        },
    }
}
