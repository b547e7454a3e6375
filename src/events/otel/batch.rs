//! Batches of ended spans: the tracer's one span processor gathers them,
//! and the tracing thread itself exports them over OTLP/HTTP when a batch
//! is full, when the oldest has waited its scheduled delay, and at a flush.
//! No thread of the SDK's and no channel per span: a span ends on the
//! tracing thread, so gathering it is a push.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};

/// How spans are batched: `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`,
/// `OTEL_BSP_MAX_QUEUE_SIZE` and `OTEL_BSP_SCHEDULE_DELAY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BatchLimits {
    /// Spans per export.
    pub size: usize,
    /// Spans waiting at most; more are dropped (a collector too slow for
    /// the run must not grow its memory).
    pub queue: usize,
    /// The longest the oldest span waits for its batch.
    pub delay: Duration,
}

impl BatchLimits {
    /// Spans per export unless the variable says otherwise (the SDK's
    /// default is 512): smaller batches go out while the run goes on, so
    /// little is left for the flush at its end.
    const SIZE: usize = 64;
    const QUEUE: usize = 2048;
    const DELAY: Duration = Duration::from_millis(5000);

    /// From the variables (`var` gives a trimmed, non-empty value); a value
    /// that is not a positive number is the default, a batch never exceeds
    /// the queue.
    pub(crate) fn from_env(var: &dyn Fn(&str) -> Option<String>) -> BatchLimits {
        let number = |name: &str| {
            var(name)
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|n| *n > 0)
        };
        let queue = number("OTEL_BSP_MAX_QUEUE_SIZE").map_or(Self::QUEUE, clamp_usize);
        let size = number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE").map_or(Self::SIZE, clamp_usize);
        BatchLimits {
            size: size.min(queue),
            queue,
            delay: number("OTEL_BSP_SCHEDULE_DELAY").map_or(Self::DELAY, Duration::from_millis),
        }
    }
}

fn clamp_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Why spans were dropped (the end of the run's one tracing warning).
const QUEUE_FULL: &str = "the export queue (OTEL_BSP_MAX_QUEUE_SIZE) was full";

/// Ended spans waiting for their export.
#[derive(Debug, Default)]
struct Waiting {
    spans: Vec<SpanData>,
    /// When the oldest waiting span ended.
    since: Option<Instant>,
    /// Spans dropped because the queue was full.
    dropped: u64,
}

/// The tracer's span processor: keeps each ended, sampled span for the
/// thread's next export.
#[derive(Clone, Debug)]
pub(crate) struct Gathered {
    waiting: Arc<Mutex<Waiting>>,
    queue: usize,
}

impl Gathered {
    pub(crate) fn new(limits: BatchLimits) -> Gathered {
        Gathered {
            waiting: Arc::default(),
            queue: limits.queue,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SpanProcessor for Gathered {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        let mut waiting = self.lock();
        if waiting.spans.len() >= self.queue {
            waiting.dropped += 1;
            return;
        }
        if waiting.spans.is_empty() {
            waiting.since = Some(Instant::now());
        }
        waiting.spans.push(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// The exporter and the spans gathered for it, driven by the tracing thread.
pub(crate) struct Batches {
    exporter: opentelemetry_otlp::SpanExporter,
    /// Drives the exporter's requests (reqwest) on the tracing thread.
    runtime: tokio::runtime::Runtime,
    gathered: Gathered,
    limits: BatchLimits,
    /// The first export failure, kept for the one warning a run gets.
    first_failure: Option<String>,
}

impl Batches {
    pub(crate) fn new(
        exporter: opentelemetry_otlp::SpanExporter,
        runtime: tokio::runtime::Runtime,
        gathered: Gathered,
        limits: BatchLimits,
    ) -> Batches {
        Batches {
            exporter,
            runtime,
            gathered,
            limits,
            first_failure: None,
        }
    }

    /// How long until a batch is due (none when no span waits, zero when a
    /// batch is full).
    pub(crate) fn due_in(&self) -> Option<Duration> {
        let waiting = self.gathered.lock();
        if waiting.spans.len() >= self.limits.size {
            return Some(Duration::ZERO);
        }
        let since = waiting.since?;
        Some(self.limits.delay.saturating_sub(since.elapsed()))
    }

    /// Exports one batch if one is due: full, or its oldest span has waited
    /// the scheduled delay. One at a time, so that the thread takes new
    /// notes between exports to a slow collector. Failures are noted, not
    /// returned.
    pub(crate) fn export_due(&mut self) {
        if self.due_in() != Some(Duration::ZERO) {
            return;
        }
        let batch = take(&mut self.gathered.lock(), self.limits.size);
        let _ = self.export(batch, None);
    }

    /// Exports everything waiting within `budget`; the first failure ends it.
    pub(crate) fn export_all(&mut self, budget: Duration) -> OTelSdkResult {
        let deadline = Instant::now() + budget;
        loop {
            let batch = take(&mut self.gathered.lock(), self.limits.size);
            if batch.is_empty() {
                return Ok(());
            }
            self.export(batch, Some(deadline))?;
        }
    }

    /// Exports what is left within `wait`, then shuts the exporter down.
    pub(crate) fn shutdown(&mut self, wait: Duration) -> OTelSdkResult {
        let outcome = if wait.is_zero() {
            Ok(())
        } else {
            self.export_all(wait)
        };
        let _ = self.exporter.shutdown_with_timeout(Duration::ZERO);
        outcome
    }

    /// The first failure of any export so far, else spans dropped because
    /// the queue was full.
    pub(crate) fn first_failure(&self) -> Option<String> {
        if let Some(reason) = &self.first_failure {
            return Some(reason.clone());
        }
        match self.gathered.lock().dropped {
            0 => None,
            1 => Some(format!("1 span dropped: {QUEUE_FULL}")),
            n => Some(format!("{n} spans dropped: {QUEUE_FULL}")),
        }
    }

    fn export(&mut self, batch: Vec<SpanData>, deadline: Option<Instant>) -> OTelSdkResult {
        let exporter = &self.exporter;
        let outcome = match deadline {
            None => self.runtime.block_on(exporter.export(batch)),
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                self.runtime.block_on(async {
                    tokio::time::timeout(left, exporter.export(batch))
                        .await
                        .unwrap_or(Err(OTelSdkError::Timeout(left)))
                })
            }
        };
        if let Err(e) = &outcome {
            self.first_failure.get_or_insert_with(|| short_reason(e));
        }
        outcome
    }
}

/// Takes at most `size` of the oldest waiting spans.
fn take(waiting: &mut Waiting, size: usize) -> Vec<SpanData> {
    let batch = if waiting.spans.len() <= size {
        std::mem::take(&mut waiting.spans)
    } else {
        let rest = waiting.spans.split_off(size);
        std::mem::replace(&mut waiting.spans, rest)
    };
    // The rest keep the taken batch's time, earlier than their own: they go
    // out no later than their delay says.
    if waiting.spans.is_empty() {
        waiting.since = None;
    }
    batch
}

/// A short reason for an export error: the SDK's messages can hold the
/// collector's response body, which never reaches our output.
pub(crate) fn short_reason(error: &OTelSdkError) -> String {
    match error {
        OTelSdkError::Timeout(_) => "timed out".to_string(),
        OTelSdkError::AlreadyShutdown => "already shut down".to_string(),
        OTelSdkError::InternalFailure(text) => {
            // The SDK's own message, or reqwest's `error_for_status`.
            for marker in ["Status Code: ", "Status("] {
                if let Some(rest) = text.split(marker).nth(1) {
                    let code: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    if !code.is_empty() {
                        return format!("HTTP {code}");
                    }
                }
            }
            let lower = text.to_ascii_lowercase();
            if lower.contains("timed out") || lower.contains("timeout") {
                "timed out".to_string()
            } else if lower.contains("connect") {
                "could not connect".to_string()
            } else {
                "export failed".to_string()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{
        Span as _, SpanContext, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer as _,
        TracerProvider as _,
    };
    use opentelemetry_otlp::WithHttpConfig;
    use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
    use std::collections::HashMap;

    /// A tracer whose spans gather in `gathered`, sampled as the sink's is.
    fn provider(gathered: &Gathered) -> SdkTracerProvider {
        SdkTracerProvider::builder()
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
            .with_span_processor(gathered.clone())
            .build()
    }

    #[test]
    fn ended_spans_gather_in_order_up_to_the_queue_and_the_rest_are_counted() {
        let limits = BatchLimits {
            size: 2,
            queue: 3,
            delay: Duration::from_secs(5),
        };
        let gathered = Gathered::new(limits);
        let tracer = provider(&gathered).tracer("test");
        for name in ["a", "b", "c", "d", "e"] {
            tracer.start(name).end();
        }
        let mut waiting = gathered.lock();
        let names: Vec<_> = waiting.spans.iter().map(|s| s.name.to_string()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(waiting.dropped, 2);
        assert!(waiting.since.is_some());
        let first = take(&mut waiting, limits.size);
        assert_eq!(first.len(), 2);
        assert_eq!(waiting.spans[0].name, "c", "the oldest go first");
        assert!(waiting.since.is_some());
        assert_eq!(take(&mut waiting, limits.size).len(), 1);
        assert!(waiting.since.is_none(), "nothing waits");
    }

    #[test]
    fn spans_dropped_from_a_full_queue_are_the_failure_when_no_export_failed() {
        let limits = BatchLimits {
            size: 1,
            queue: 1,
            delay: Duration::from_secs(5),
        };
        let gathered = Gathered::new(limits);
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(
                super::super::client::OtlpClient::new(Duration::from_secs(1)).unwrap(),
            )
            .build()
            .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut batches = Batches::new(exporter, runtime, gathered.clone(), limits);
        let tracer = provider(&gathered).tracer("test");
        tracer.start("kept").end();
        assert_eq!(batches.first_failure(), None);
        tracer.start("dropped").end();
        tracer.start("dropped too").end();
        assert_eq!(
            batches.first_failure().as_deref(),
            Some("2 spans dropped: the export queue (OTEL_BSP_MAX_QUEUE_SIZE) was full")
        );
        batches.first_failure = Some("HTTP 503".to_string());
        assert_eq!(batches.first_failure().as_deref(), Some("HTTP 503"));
    }

    #[test]
    fn spans_under_an_unsampled_parent_are_not_kept() {
        let gathered = Gathered::new(BatchLimits::from_env(&|_| None));
        let tracer = provider(&gathered).tracer("test");
        let parent = SpanContext::new(
            TraceId::from(7),
            opentelemetry::trace::SpanId::from(9),
            TraceFlags::default(),
            true,
            TraceState::default(),
        );
        let cx = opentelemetry::Context::new().with_remote_span_context(parent);
        tracer.start_with_context("quiet", &cx).end();
        assert!(gathered.lock().spans.is_empty());
        tracer.start("heard").end();
        assert_eq!(gathered.lock().spans.len(), 1);
    }

    fn limits(vars: &[(&str, &str)]) -> BatchLimits {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        BatchLimits::from_env(&move |name| map.get(name).cloned())
    }

    #[test]
    fn limits_default_and_follow_the_variables() {
        assert_eq!(
            limits(&[]),
            BatchLimits {
                size: 64,
                queue: 2048,
                delay: Duration::from_secs(5)
            }
        );
        let set = limits(&[
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "10"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ]);
        assert_eq!((set.size, set.queue), (10, 100));
        assert_eq!(set.delay, Duration::from_millis(200));
    }

    #[test]
    fn a_batch_never_exceeds_the_queue_and_bad_values_are_defaults() {
        let set = limits(&[
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "5000"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
            ("OTEL_BSP_SCHEDULE_DELAY", "soon"),
        ]);
        assert_eq!((set.size, set.queue), (100, 100));
        assert_eq!(set.delay, Duration::from_secs(5));
        assert_eq!(limits(&[("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "0")]).size, 64);
    }

    #[test]
    fn export_errors_become_short_reasons() {
        let status = OTelSdkError::InternalFailure(
            "OpenTelemetry trace export failed. Url: http://x/v1/traces, Status Code: 503, Response: \"secret body\"".into(),
        );
        assert_eq!(short_reason(&status), "HTTP 503");
        let status = OTelSdkError::InternalFailure(
            "reqwest::Error { kind: Status(404, None), url: \"http://x/v1/traces\" }".into(),
        );
        assert_eq!(short_reason(&status), "HTTP 404");
        let refused = OTelSdkError::InternalFailure(
            "reqwest::Error { kind: Request, source: hyper_util::client::legacy::Error(Connect, ConnectError(\"tcp connect error\")) }".into(),
        );
        assert_eq!(short_reason(&refused), "could not connect");
        assert_eq!(
            short_reason(&OTelSdkError::Timeout(Duration::from_secs(2))),
            "timed out"
        );
    }
}
