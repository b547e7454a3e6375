//! Reads a newline-delimited JSON stream (Ollama's `/api/chat`) under the
//! stream timeouts of `timed.rs` (each deadline counts whole lines). Lines are found in linear time (the
//! search for a line's end resumes where the last read stopped, and the
//! buffer is compacted only when the consumed part dominates) and handed
//! out borrowed from the buffer, never copied: a 30 MB line costs its
//! buffer and nothing more. Lines are bounded (`MAX_EVENT`).

use std::ops::Range;
use std::time::Instant;

use futures::stream::StreamExt;

use super::bounds::{too_large, MAX_EVENT};
use super::timed::{BodyBytes, Framing, TimedStream};
use super::ModelError;
use crate::policy::StreamTimeouts;

/// A line past the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLong;

/// Splits pushed bytes into lines, each borrowed from the buffer.
#[derive(Debug)]
pub(crate) struct LineSplitter {
    buf: Vec<u8>,
    /// Start of the unread part of `buf`.
    pos: usize,
    /// How far past `pos` the current line is known to have no `\n`.
    scanned: usize,
    /// The line `poll` found, until the next `push` or `poll`.
    ready: Range<usize>,
    /// The longest line, in bytes.
    max: usize,
}

impl LineSplitter {
    pub(crate) fn with_max(max: usize) -> Self {
        LineSplitter {
            buf: Vec::new(),
            pos: 0,
            scanned: 0,
            ready: 0..0,
            max,
        }
    }

    /// Appends bytes read from the wire.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.ready = 0..0;
        if self.pos > 0 && self.pos >= self.buf.len() / 2 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// Finds the next line that is not blank (`true`: read it with `line`).
    /// At the end of the stream (`ended`) what is left is the last line.
    pub(crate) fn poll(&mut self, ended: bool) -> Result<bool, TooLong> {
        loop {
            let rest = &self.buf[self.pos..];
            let end = match memchr::memchr(b'\n', &rest[self.scanned..]) {
                Some(i) => self.scanned + i,
                None if ended && !rest.is_empty() => rest.len(),
                None => {
                    self.scanned = rest.len();
                    return if rest.len() > self.max {
                        Err(TooLong)
                    } else {
                        Ok(false)
                    };
                }
            };
            if end > self.max {
                return Err(TooLong);
            }
            let mut line = self.pos..self.pos + end;
            self.pos = (self.pos + end + 1).min(self.buf.len());
            self.scanned = 0;
            if self.buf[line.clone()].ends_with(b"\r") {
                line.end -= 1;
            }
            if !self.buf[line.clone()].trim_ascii().is_empty() {
                self.ready = line;
                return Ok(true);
            }
        }
    }

    /// The line `poll` found.
    pub(crate) fn line(&self) -> &[u8] {
        &self.buf[self.ready.clone()]
    }
}

impl Framing for LineSplitter {
    fn push(&mut self, chunk: &[u8]) {
        LineSplitter::push(self, chunk);
    }

    fn poll(&mut self, ended: bool) -> Result<bool, ModelError> {
        LineSplitter::poll(self, ended).map_err(|TooLong| too_large("a stream line"))
    }
}

/// Reads NDJSON lines from a response under the stream timeouts
/// (`timed.rs`): each line is one event.
pub(crate) struct NdjsonReader {
    stream: TimedStream,
    lines: LineSplitter,
}

impl NdjsonReader {
    pub(crate) fn new(
        response: reqwest::Response,
        sent: Instant,
        timeouts: StreamTimeouts,
    ) -> Self {
        Self::from_stream(response.bytes_stream().boxed(), sent, timeouts)
    }

    pub(crate) fn from_stream(bytes: BodyBytes, sent: Instant, timeouts: StreamTimeouts) -> Self {
        NdjsonReader {
            stream: TimedStream::new(bytes, sent, timeouts),
            lines: LineSplitter::with_max(MAX_EVENT),
        }
    }

    /// The next line that is not blank, borrowed until the next call;
    /// `Ok(None)` at the end of the stream. A line that is not UTF-8 fails
    /// the attempt as an incomplete stream; one past `MAX_EVENT` bytes as a
    /// malformed reply.
    pub(crate) async fn next(&mut self) -> Result<Option<&str>, ModelError> {
        if !self.stream.next_event(&mut self.lines).await? {
            return Ok(None);
        }
        std::str::from_utf8(self.lines.line())
            .map(Some)
            .map_err(|_| ModelError::StreamIncomplete)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(pieces: &[&[u8]], max: usize) -> Result<Vec<String>, TooLong> {
        let mut s = LineSplitter::with_max(max);
        let mut out = Vec::new();
        for (i, piece) in pieces.iter().enumerate() {
            s.push(piece);
            let ended = i + 1 == pieces.len();
            while s.poll(ended)? {
                out.push(String::from_utf8(s.line().to_vec()).unwrap());
            }
        }
        Ok(out)
    }

    #[test]
    fn lines_in_any_split_blank_lines_skipped_and_the_last_without_a_newline() {
        let text = b"{\"a\":1}\r\n\n  \n{\"b\":2}\n{\"c\":3}";
        let whole = split(&[text], 64).unwrap();
        assert_eq!(whole, ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]);
        for cut in 0..=text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(split(&[a, b], 64).unwrap(), whole, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(split(&bytes, 64).unwrap(), whole);
    }

    #[test]
    fn a_line_past_the_bound_is_refused_before_it_ends() {
        assert_eq!(split(&[b"0123456789", b"0123456789"], 16), Err(TooLong));
        assert_eq!(split(&[b"0123456789\n0123"], 10).unwrap().len(), 2);
        assert_eq!(split(&[b"01234567890\n"], 10), Err(TooLong));
    }

    #[test]
    fn a_long_line_in_many_reads_is_whole() {
        let line = format!("{}\n", "x".repeat(100_000));
        let pieces: Vec<&[u8]> = line.as_bytes().chunks(7).collect();
        assert_eq!(split(&pieces, 1 << 20).unwrap(), ["x".repeat(100_000)]);
    }
}
