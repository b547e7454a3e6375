//! An incremental server-sent events parser (the WHATWG event-stream
//! format): bytes in, `Event`s out, in amortised linear time. It replaces
//! `eventsource-stream`'s parser, which copies the rest of its buffer after
//! every line and so slows down quadratically with the size of a network
//! read (see docs/providers-chat.md for the measurements).

pub use eventsource_stream::Event;

/// A malformed stream (a line that is not UTF-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseError;

/// Parser state: unread bytes and the event being built.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    /// Start of the unread part of `buffer`.
    read: usize,
    started: bool,
    event: String,
    data: String,
    id: String,
    has_data: bool,
}

impl SseParser {
    /// Appends bytes from the network.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.read > 0 && self.read * 2 >= self.buffer.len() {
            self.buffer.drain(..self.read);
            self.read = 0;
        }
        self.buffer.extend_from_slice(bytes);
        if !self.started && self.buffer.len() - self.read >= 3 {
            self.started = true;
            if self.buffer[self.read..].starts_with(b"\xEF\xBB\xBF") {
                self.read += 3;
            }
        }
    }

    /// The next complete event, if the buffer holds one. `at_end` says no
    /// more bytes will come (a final line without its line ending counts).
    pub fn next_event(&mut self, at_end: bool) -> Result<Option<Event>, SseError> {
        loop {
            let rest = &self.buffer[self.read..];
            let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') else {
                if at_end && !rest.is_empty() {
                    let line = rest.to_vec();
                    self.read = self.buffer.len();
                    self.line(&line)?;
                }
                return Ok(None);
            };
            // A CR at the end of the buffer may be the first half of a CRLF.
            let width = match rest[end] {
                b'\r' if end + 1 == rest.len() && !at_end => return Ok(None),
                b'\r' if rest.get(end + 1) == Some(&b'\n') => 2,
                _ => 1,
            };
            let (start, stop) = (self.read, self.read + end);
            self.read = stop + width;
            if start == stop {
                if let Some(event) = self.dispatch() {
                    return Ok(Some(event));
                }
                continue;
            }
            let line = std::mem::take(&mut self.buffer);
            let result = self.line(&line[start..stop]);
            self.buffer = line;
            result?;
        }
    }

    fn line(&mut self, line: &[u8]) -> Result<(), SseError> {
        let line = std::str::from_utf8(line).map_err(|_| SseError)?;
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => value.clone_into(&mut self.event),
            "id" if !value.contains('\0') => value.clone_into(&mut self.id),
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self) -> Option<Event> {
        let event = std::mem::take(&mut self.event);
        if !std::mem::take(&mut self.has_data) {
            return None;
        }
        Some(Event {
            event: if event.is_empty() {
                "message".into()
            } else {
                event
            },
            data: std::mem::take(&mut self.data),
            id: self.id.clone(),
            retry: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pieces: &[&[u8]]) -> Vec<(String, String)> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for piece in pieces {
            p.push(piece);
            while let Some(e) = p.next_event(false).unwrap() {
                out.push((e.event, e.data));
            }
        }
        while let Some(e) = p.next_event(true).unwrap() {
            out.push((e.event, e.data));
        }
        out
    }

    fn ev(event: &str, data: &str) -> (String, String) {
        (event.to_string(), data.to_string())
    }

    #[test]
    fn events_fields_comments_and_multiline_data() {
        let stream = b": OPENROUTER PROCESSING\n\nevent: message_start\ndata: {\"a\":1}\n\ndata: x\ndata:y\nid: 7\nretry: 10\n\ndata: [DONE]\n\n";
        assert_eq!(
            parse(&[stream]),
            vec![
                ev("message_start", "{\"a\":1}"),
                ev("message", "x\ny"),
                ev("message", "[DONE]")
            ]
        );
    }

    #[test]
    fn any_split_of_the_bytes_gives_the_same_events() {
        let stream: &[u8] =
            b"\xEF\xBB\xBFdata: caf\xC3\xA9\r\n\r\nevent: e\rdata: 2\r\rdata: 3\n\n";
        let whole = parse(&[stream]);
        assert_eq!(
            whole,
            vec![ev("message", "café"), ev("e", "2"), ev("message", "3")]
        );
        for cut in 0..stream.len() {
            let (a, b) = stream.split_at(cut);
            assert_eq!(parse(&[a, b]), whole, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(parse(&bytes), whole);
    }

    #[test]
    fn an_unterminated_event_is_dropped_and_bad_utf8_fails() {
        assert_eq!(
            parse(&[b"data: one\n\ndata: two"]),
            vec![ev("message", "one")]
        );
        let mut p = SseParser::default();
        p.push(b"data: \xFF\n\n");
        assert_eq!(p.next_event(false), Err(SseError));
    }
}
