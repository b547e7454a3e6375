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

use super::bounds::MAX_EVENT;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event` field, `message` when the stream named none.
    pub event: String,
    pub data: String,
    pub id: String,
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
    data: String,
    has_data: bool,
    id: String,
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
            data: String::new(),
            has_data: false,
            id: String::new(),
            max,
        }
    }

    /// Appends bytes read from the wire.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.pos > 0 && self.pos >= self.buf.len() / 2 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event, if the bytes pushed so far hold one.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        loop {
            let rest = &self.buf[self.pos..];
            let Some(end) =
                memchr::memchr2(b'\n', b'\r', &rest[self.scanned..]).map(|i| i + self.scanned)
            else {
                self.scanned = rest.len();
                if rest.len() > self.max {
                    return Err(SseError::TooLarge);
                }
                return Ok(None);
            };
            let mut next = self.pos + end + 1;
            if rest[end] == b'\r' {
                match rest.get(end + 1) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    // A CR at the end of what we have may be half of a CRLF.
                    None => {
                        self.scanned = end;
                        return Ok(None);
                    }
                }
            }
            if end > self.max {
                return Err(SseError::TooLarge);
            }
            let line_start = self.pos;
            self.pos = next;
            self.scanned = 0;
            let mut line = &self.buf[line_start..line_start + end];
            if !self.started {
                self.started = true;
                line = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
            }
            if line.is_empty() {
                if let Some(event) = self.dispatch() {
                    return Ok(Some(event));
                }
                continue;
            }
            let (field, value) = match line.iter().position(|&b| b == b':') {
                Some(0) => continue, // a comment
                Some(i) => {
                    let value = &line[i + 1..];
                    (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
                }
                None => (line, &[][..]),
            };
            let value = std::str::from_utf8(value).map_err(|_| SseError::InvalidUtf8)?;
            match field {
                b"data" => {
                    if self.data.len().saturating_add(value.len()) >= self.max {
                        return Err(SseError::TooLarge);
                    }
                    if self.has_data {
                        self.data.push('\n');
                    }
                    self.data.push_str(value);
                    self.has_data = true;
                }
                b"event" => {
                    self.event.clear();
                    self.event.push_str(value);
                }
                b"id" if !value.contains('\0') => {
                    self.id.clear();
                    self.id.push_str(value);
                }
                _ => {} // `retry` and unknown fields
            }
        }
    }

    /// Ends an event at a blank line; one without data is dropped.
    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        if !std::mem::take(&mut self.has_data) {
            return None;
        }
        Some(SseEvent {
            event: if event.is_empty() {
                "message".into()
            } else {
                event
            },
            data: std::mem::take(&mut self.data),
            id: self.id.clone(),
        })
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
                out.push((e.event, e.data));
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
}
