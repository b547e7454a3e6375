//! The one place a reply's deadlines are kept (SPEC 4): the first event
//! must come within the first-event timeout of sending the request, each
//! later one within the idle timeout of the one before, and both count
//! whole events: bytes that never complete one (an SSE event, an NDJSON
//! line, an event-stream frame, a whole JSON body) keep nothing alive.
//! `TimedStream` reads a response's bytes into any `Framing`, the decoder
//! that says when a whole event is in.

use std::time::{Duration, Instant};

use futures::stream::{BoxStream, StreamExt};

use super::watch::note_first_event;
use super::ModelError;
use crate::policy::StreamTimeouts;

/// The bytes of a response body as they arrive.
pub(crate) type BodyBytes = BoxStream<'static, Result<bytes::Bytes, reqwest::Error>>;

/// A decoder of one framing: bytes in, whole events out.
pub(crate) trait Framing {
    /// Appends bytes read from the wire.
    fn push(&mut self, chunk: &[u8]);

    /// Whether a whole event is ready to be taken from the decoder. `ended`
    /// says no more bytes will come (what is left may be the last event, or
    /// an incomplete stream). A malformed or oversized event is an error.
    fn poll(&mut self, ended: bool) -> Result<bool, ModelError>;
}

/// A response's body read under the stream timeouts.
pub(crate) struct TimedStream {
    bytes: BodyBytes,
    timeouts: StreamTimeouts,
    sent: Instant,
    seen_any: bool,
    ended: bool,
}

impl TimedStream {
    /// `sent` is when the request went out: the first-event deadline runs
    /// from there.
    pub(crate) fn new(bytes: BodyBytes, sent: Instant, timeouts: StreamTimeouts) -> Self {
        TimedStream {
            bytes,
            timeouts,
            sent,
            seen_any: false,
            ended: false,
        }
    }

    /// A response's body.
    pub(crate) fn of(response: reqwest::Response, sent: Instant, timeouts: StreamTimeouts) -> Self {
        Self::new(response.bytes_stream().boxed(), sent, timeouts)
    }

    /// Reads until `framing` holds a whole event (`true`) or the body ended
    /// without another one (`false`), within the deadline: the first-event
    /// timeout from sending for the first event, the idle timeout from the
    /// event before for each later one. Bytes that arrive in between do not
    /// move the deadline.
    pub(crate) async fn next_event(
        &mut self,
        framing: &mut impl Framing,
    ) -> Result<bool, ModelError> {
        let deadline = if self.seen_any {
            Instant::now() + self.timeouts.idle
        } else {
            self.sent + self.timeouts.first_event
        };
        loop {
            if framing.poll(self.ended)? {
                if !self.seen_any {
                    note_first_event();
                }
                self.seen_any = true;
                return Ok(true);
            }
            if self.ended {
                return Ok(false);
            }
            let limit = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(limit, self.bytes.next()).await {
                Err(_) => return Err(self.timed_out()),
                Ok(None) => self.ended = true,
                Ok(Some(Err(e))) => return Err(dropped_error(&e)),
                Ok(Some(Ok(chunk))) => framing.push(&chunk),
            }
        }
    }

    /// Waits at most `limit` for each later event (a reply already whole
    /// whose trailer alone is awaited).
    pub(crate) fn shorten_idle(&mut self, limit: Duration) {
        self.timeouts.idle = self.timeouts.idle.min(limit);
    }

    /// The deadline that ran out, named.
    fn timed_out(&self) -> ModelError {
        let (message, deadline) = if self.seen_any {
            (
                "the stream went silent past the idle timeout",
                self.timeouts.idle,
            )
        } else {
            (
                "no first stream event within the first-event timeout",
                self.timeouts.first_event,
            )
        };
        ModelError::Timeout {
            message: message.into(),
            deadline: Some(deadline),
        }
    }
}

/// A connection that failed while reading a reply the server had answered
/// 200 to: a glitch (`ModelError::after_ok`), not overload.
pub(crate) fn dropped_error(_e: &reqwest::Error) -> ModelError {
    ModelError::Dropped {
        message: "connection dropped during the reply".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events are `;`-terminated: a tiny framing for the deadline rule.
    #[derive(Default)]
    struct Semicolons {
        buf: Vec<u8>,
        taken: Vec<String>,
    }

    impl Framing for Semicolons {
        fn push(&mut self, chunk: &[u8]) {
            self.buf.extend_from_slice(chunk);
        }
        fn poll(&mut self, _ended: bool) -> Result<bool, ModelError> {
            let Some(end) = self.buf.iter().position(|&b| b == b';') else {
                return Ok(false);
            };
            let event: Vec<u8> = self.buf.drain(..=end).collect();
            self.taken
                .push(String::from_utf8_lossy(&event[..end]).into_owned());
            Ok(true)
        }
    }

    /// A body sending `pieces`, each after its delay in milliseconds (real
    /// time: the deadlines are read on `std::time::Instant`).
    fn body(pieces: Vec<(u64, &'static str)>) -> BodyBytes {
        futures::stream::unfold(pieces.into_iter(), |mut pieces| async move {
            let (delay, piece) = pieces.next()?;
            tokio::time::sleep(Duration::from_millis(delay)).await;
            Some((Ok(bytes::Bytes::from_static(piece.as_bytes())), pieces))
        })
        .boxed()
    }

    fn timeouts(first_event: u64, idle: u64) -> StreamTimeouts {
        StreamTimeouts {
            first_event: Duration::from_millis(first_event),
            idle: Duration::from_millis(idle),
        }
    }

    fn deadline_of(error: &ModelError) -> Option<Duration> {
        match error {
            ModelError::Timeout { deadline, .. } => *deadline,
            other => panic!("not a timeout: {other:?}"),
        }
    }

    #[tokio::test]
    async fn whole_events_in_time_are_read_to_the_end() {
        let pieces = vec![(0, "a;b"), (50, ";"), (50, "c;")];
        let mut stream = TimedStream::new(body(pieces), Instant::now(), timeouts(100, 100));
        let mut framing = Semicolons::default();
        while stream.next_event(&mut framing).await.unwrap() {}
        assert_eq!(framing.taken, ["a", "b", "c"]);
    }

    #[tokio::test]
    async fn bytes_without_a_first_whole_event_do_not_keep_the_stream_alive() {
        let trickle: Vec<(u64, &str)> = (0..100).map(|_| (20, "x")).collect();
        let sent = Instant::now();
        let mut stream = TimedStream::new(body(trickle), sent, timeouts(300, 10_000));
        let error = stream
            .next_event(&mut Semicolons::default())
            .await
            .unwrap_err();
        assert_eq!(deadline_of(&error), Some(Duration::from_millis(300)));
        assert!(sent.elapsed() < Duration::from_millis(350));
    }

    #[tokio::test]
    async fn bytes_after_an_event_that_never_complete_the_next_run_into_the_idle_limit() {
        let mut pieces = vec![(0, "first;")];
        pieces.extend((0..100).map(|_| (20, "x")));
        let mut stream = TimedStream::new(body(pieces), Instant::now(), timeouts(10_000, 300));
        let mut framing = Semicolons::default();
        assert!(stream.next_event(&mut framing).await.unwrap());
        let waiting = Instant::now();
        let error = stream.next_event(&mut framing).await.unwrap_err();
        assert_eq!(deadline_of(&error), Some(Duration::from_millis(300)));
        assert!(waiting.elapsed() < Duration::from_millis(350));
    }
}
