//! A linear-time server-sent-events decoder (the WHATWG event-stream format:
//! `event`, `data`, `id`, `retry` fields, comments, LF / CRLF / CR line
//! ends, a leading BOM).
//!
//! Why not `eventsource-stream`: it copies the rest of its buffer after every
//! line (`String::split_off`), so a reply that arrives in large reads costs
//! time quadratic in the read size; on a 45 MB streamed reply it managed
//! about 2 MB/s. This decoder keeps a cursor and compacts its buffer only
//! when the consumed part dominates, so every byte is scanned and moved a
//! bounded number of times (see `bench/providers-anthropic.sh`). A line that
//! arrives in many reads is scanned once: the search for its end resumes
//! where the last one stopped. Lines and events are bounded (`max`).

use std::borrow::Cow;
use std::ops::Range;

use super::bounds::MAX_EVENT;

/// One dispatched event. Its data is borrowed from the decoder's buffer
/// when it came in one `data` line (the usual case, and the one a huge
/// line takes), so a line is never copied out of the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event` field, `message` when the stream named none.
    pub event: String,
    pub data: Cow<'a, str>,
    pub id: String,
}

/// How many bytes of other lines may follow a pending data line before it
/// is copied out of the buffer (so that the buffer can be compacted).
const PENDING_SLACK: usize = 64 << 10;

/// Where an event's data is, once it is ready.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Data {
    /// One `data` line: these bytes of `buf`, already checked as UTF-8.
    Line(Range<usize>),
    /// Several lines joined in `SseDecoder::data`.
    Joined,
}

/// Decodes pushed bytes into events.
#[derive(Debug)]
pub struct SseDecoder {
    buf: Vec<u8>,
    /// Start of the unread part of `buf`.
    pos: usize,
    /// How far past `pos` the current line is known to have no line end.
    scanned: usize,
    started: bool,
    event: String,
    /// The pending event's data: `None` before its first `data` line.
    pending: Option<Data>,
    /// The data of an event of several `data` lines.
    data: String,
    id: String,
    /// An event is ready to be taken (`take`).
    ready: bool,
    /// The largest line, and the largest event's data, in bytes.
    max: usize,
}

impl Default for SseDecoder {
    fn default() -> Self {
        SseDecoder::with_max(MAX_EVENT)
    }
}

/// Why the stream cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseError {
    /// The stream is not UTF-8.
    InvalidUtf8,
    /// A line or an event's data went past the bound.
    TooLarge,
}

impl SseDecoder {
    /// A decoder whose lines and events may hold at most `max` bytes.
    pub(crate) fn with_max(max: usize) -> Self {
        SseDecoder {
            buf: Vec::new(),
            pos: 0,
            scanned: 0,
            started: false,
            event: String::new(),
            pending: None,
            data: String::new(),
            id: String::new(),
            ready: false,
            max,
        }
    }

    /// Appends bytes read from the wire. The bytes already read are dropped
    /// from the buffer when they are at least half of it (so each byte
    /// moves a bounded number of times), all but a pending data line.
    pub fn push(&mut self, chunk: &[u8]) {
        self.drop_taken();
        if let Some(Data::Line(range)) = &self.pending {
            // Other lines (comments, say) keep coming before the event ends:
            // the data line is copied out once, so the buffer can shrink.
            if self.pos.saturating_sub(range.end) > PENDING_SLACK {
                let line = std::str::from_utf8(&self.buf[range.clone()]).unwrap_or_default();
                self.data.clear();
                self.data.push_str(line);
                self.pending = Some(Data::Joined);
            }
        }
        let keep_from = match &self.pending {
            Some(Data::Line(range)) => range.start.min(self.pos),
            _ => self.pos,
        };
        if keep_from > 0 && keep_from >= self.buf.len() / 2 {
            self.buf.drain(..keep_from);
            self.pos -= keep_from;
            if let Some(Data::Line(range)) = &mut self.pending {
                *range = range.start - keep_from..range.end - keep_from;
            }
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event, if the bytes pushed so far hold one.
    pub fn next_event(&mut self) -> Result<Option<SseEvent<'_>>, SseError> {
        Ok(if self.poll()? {
            Some(self.take())
        } else {
            None
        })
    }

    /// Reads on until an event is ready (`true`: `take` it) or the bytes
    /// pushed so far hold none.
    pub(crate) fn poll(&mut self) -> Result<bool, SseError> {
        self.drop_taken();
        loop {
            let rest = &self.buf[self.pos..];
            let Some(end) =
                memchr::memchr2(b'\n', b'\r', &rest[self.scanned..]).map(|i| i + self.scanned)
            else {
                self.scanned = rest.len();
                if rest.len() > self.max {
                    return Err(SseError::TooLarge);
                }
                return Ok(false);
            };
            let mut next = self.pos + end + 1;
            if rest[end] == b'\r' {
                match rest.get(end + 1) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    // A CR at the end of what we have may be half of a CRLF.
                    None => {
                        self.scanned = end;
                        return Ok(false);
                    }
                }
            }
            if end > self.max {
                return Err(SseError::TooLarge);
            }
            let mut line = self.pos..self.pos + end;
            self.pos = next;
            self.scanned = 0;
            if !self.started {
                self.started = true;
                if self.buf[line.clone()].starts_with("\u{feff}".as_bytes()) {
                    line.start += 3;
                }
            }
            if line.is_empty() {
                if self.pending.is_some() {
                    self.ready = true;
                    return Ok(true);
                }
                self.event.clear(); // an event without data is dropped
                continue;
            }
            self.field(line)?;
        }
    }

    /// Applies one non-empty line (`buf[line]`).
    fn field(&mut self, line: Range<usize>) -> Result<(), SseError> {
        let bytes = &self.buf[line.clone()];
        let (name, value) = match bytes.iter().position(|&b| b == b':') {
            Some(0) => return Ok(()), // a comment
            Some(i) => {
                let skip = usize::from(bytes.get(i + 1) == Some(&b' '));
                (&bytes[..i], line.start + i + 1 + skip..line.end)
            }
            None => (bytes, line.end..line.end),
        };
        let text =
            std::str::from_utf8(&self.buf[value.clone()]).map_err(|_| SseError::InvalidUtf8)?;
        match name {
            b"data" => {
                let so_far = match &self.pending {
                    None => 0,
                    Some(Data::Line(range)) => range.len(),
                    Some(Data::Joined) => self.data.len(),
                };
                if so_far.saturating_add(text.len()) >= self.max {
                    return Err(SseError::TooLarge);
                }
                self.pending = Some(match self.pending.take() {
                    None => Data::Line(value),
                    Some(Data::Line(first)) => {
                        self.data.clear();
                        // Checked as UTF-8 when it came.
                        self.data
                            .push_str(std::str::from_utf8(&self.buf[first]).unwrap_or_default());
                        self.data.push('\n');
                        self.data.push_str(text);
                        Data::Joined
                    }
                    Some(Data::Joined) => {
                        self.data.push('\n');
                        self.data.push_str(text);
                        Data::Joined
                    }
                });
            }
            b"event" => {
                self.event.clear();
                self.event.push_str(text);
            }
            b"id" if !text.contains('\0') => {
                self.id.clear();
                self.id.push_str(text);
            }
            _ => {} // `retry` and unknown fields
        }
        Ok(())
    }

    /// The event `poll` found ready. Its data borrows the buffer, which
    /// stays as it is until the next `push` or `poll`.
    ///
    /// Panics when no event is ready.
    pub(crate) fn take(&mut self) -> SseEvent<'_> {
        assert!(self.ready, "take() without a ready event");
        let event = std::mem::take(&mut self.event);
        let data = match self.pending.clone() {
            Some(Data::Line(range)) => {
                // Checked as UTF-8 when the line came.
                Cow::Borrowed(std::str::from_utf8(&self.buf[range]).unwrap_or_default())
            }
            _ => Cow::Owned(std::mem::take(&mut self.data)),
        };
        SseEvent {
            event: if event.is_empty() {
                "message".into()
            } else {
                event
            },
            data,
            id: self.id.clone(),
        }
    }

    /// Forgets the event last taken.
    fn drop_taken(&mut self) {
        if std::mem::take(&mut self.ready) {
            self.pending = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(pieces: &[&[u8]]) -> Vec<(String, String)> {
        let mut d = SseDecoder::default();
        let mut out = Vec::new();
        for p in pieces {
            d.push(p);
            while let Some(e) = d.next_event().unwrap() {
                out.push((e.event, e.data.into_owned()));
            }
        }
        out
    }

    #[test]
    fn events_fields_and_comments() {
        let got = decode(&[b"\xEF\xBB\xBF: hello\nevent: ping\ndata: {\"type\": \"ping\"}\n\ndata: a\ndata:b\nid: 7\n\n"]);
        assert_eq!(
            got,
            [
                ("ping".into(), "{\"type\": \"ping\"}".into()),
                ("message".into(), "a\nb".into())
            ]
        );
    }

    #[test]
    fn any_split_and_line_end_gives_the_same_events() {
        let text = b"event: x\r\ndata: one\r\n\r\nevent: y\rdata: two\r\revent: z\ndata: three\n\n";
        let whole = decode(&[text]);
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[1], ("y".into(), "two".into()));
        for cut in 1..text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(decode(&[a, b]), whole, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(decode(&bytes), whole);
    }

    #[test]
    fn an_unfinished_event_is_not_dispatched() {
        assert!(decode(&[b"event: x\ndata: partial\n"]).is_empty());
        assert!(decode(&[b"event: only-a-type\n\n"]).is_empty());
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let mut d = SseDecoder::default();
        d.push(b"data: \xff\xfe\n\n");
        assert_eq!(d.next_event(), Err(SseError::InvalidUtf8));
    }

    #[test]
    fn lines_and_events_past_the_bound_are_errors() {
        let mut d = SseDecoder::with_max(16);
        d.push(b"data: 0123456789");
        assert_eq!(d.next_event(), Ok(None));
        d.push(b"0123456789");
        assert_eq!(d.next_event(), Err(SseError::TooLarge));

        let mut d = SseDecoder::with_max(16);
        d.push(b"data: 0123456\ndata: 0123456\ndata: 0\n\n");
        assert_eq!(d.next_event(), Err(SseError::TooLarge));

        let mut d = SseDecoder::with_max(16);
        d.push(b"data: 012345\n\n");
        assert_eq!(d.next_event().unwrap().unwrap().data, "012345");
    }

    #[test]
    fn a_long_line_in_many_reads_is_whole() {
        let mut d = SseDecoder::default();
        let arg = "x".repeat(100_000);
        let line = format!("data: {arg}\r\n\r\n");
        for piece in line.as_bytes().chunks(7) {
            d.push(piece);
            if let Some(e) = d.next_event().unwrap() {
                assert_eq!(e.data, arg);
                return;
            }
        }
        panic!("no event");
    }

    #[test]
    fn one_data_line_is_borrowed_and_survives_compaction_before_its_event_ends() {
        let mut d = SseDecoder::default();
        d.push(b"event: big\ndata: {\"a\": 1}\n");
        assert_eq!(d.next_event(), Ok(None));
        // Comments keep arriving (and the read part of the buffer is
        // compacted) before the blank line ends the event.
        for _ in 0..100 {
            d.push(b": keep-alive\n");
            assert_eq!(d.next_event(), Ok(None));
        }
        d.push(b"\ndata: next\n\n");
        let e = d.next_event().unwrap().unwrap();
        assert!(matches!(e.data, Cow::Borrowed(_)), "not copied out");
        assert_eq!((e.event.as_str(), &*e.data), ("big", "{\"a\": 1}"));
        assert_eq!(d.next_event().unwrap().unwrap().data, "next");
        d.push(b": x\n");
        assert!(d.buf.len() < 8, "the read part is dropped: {}", d.buf.len());
    }

    #[test]
    fn endless_comments_after_a_data_line_do_not_grow_the_buffer() {
        let mut d = SseDecoder::default();
        d.push(b"data: kept\n");
        for _ in 0..10_000 {
            d.push(b": a comment that never ends the event\n");
            assert_eq!(d.next_event(), Ok(None));
        }
        assert!(d.buf.len() < 2 * PENDING_SLACK + 1024, "{}", d.buf.len());
        d.push(b"\n");
        assert_eq!(d.next_event().unwrap().unwrap().data, "kept");
    }

    #[test]
    fn several_data_lines_are_joined() {
        let mut d = SseDecoder::default();
        d.push(b"data: a\ndata: b\n");
        d.push(b"data: c\n\n");
        let e = d.next_event().unwrap().unwrap();
        assert!(matches!(e.data, Cow::Owned(_)));
        assert_eq!(e.data, "a\nb\nc");
    }
}
