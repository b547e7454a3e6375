//! Reads an AWS event stream (Bedrock's ConverseStream reply) under the
//! stream timeouts of `timed.rs`, the one rule of every framing: each
//! deadline counts whole frames, so bytes that never complete
//! a frame keep nothing alive. Frames are decoded by `aws-smithy-eventstream`
//! (headers, payload, both CRCs); before a frame's bytes are waited for, its
//! prelude is checked here: a length past `MAX_EVENT` is refused at once,
//! and a prelude whose CRC does not match is not believed, so a lying length
//! never makes the buffer grow past the bound. A broken frame (a bad CRC, a
//! length that lies, a header of an unknown type) fails the attempt as a
//! stream that ended without its finish marker.

use std::time::Instant;

use aws_smithy_eventstream::frame::read_message_from;
use aws_smithy_types::event_stream::Message;
use bytes::BytesMut;

use super::bounds::{too_large, MAX_EVENT};
use super::timed::{Framing, TimedStream};
use super::ModelError;
use crate::policy::StreamTimeouts;

/// Total length, headers length, prelude CRC: 4 bytes each.
const PRELUDE: usize = 12;
/// The smallest frame: the prelude and the message CRC.
const MIN_FRAME: usize = PRELUDE + 4;

/// Splits pushed bytes into whole frames.
#[derive(Debug, Default)]
pub(crate) struct FrameDecoder {
    buf: BytesMut,
    /// The length of the frame at the head of `buf`, once its prelude is
    /// read and checked.
    frame_len: Option<usize>,
}

impl FrameDecoder {
    /// Appends bytes read from the wire.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole frame, if its bytes have all arrived.
    pub(crate) fn poll(&mut self) -> Result<Option<Message>, ModelError> {
        let len = match self.frame_len {
            Some(len) => len,
            None if self.buf.len() < PRELUDE => return Ok(None),
            None => {
                let len = prelude_length(&self.buf[..PRELUDE])?;
                self.frame_len = Some(len);
                len
            }
        };
        if self.buf.len() < len {
            return Ok(None);
        }
        self.frame_len = None;
        let frame = self.buf.split_to(len).freeze();
        read_message_from(frame)
            .map(Some)
            .map_err(|_| ModelError::StreamIncomplete)
    }

    /// Whether bytes of an unfinished frame are left over.
    pub(crate) fn has_partial(&self) -> bool {
        !self.buf.is_empty()
    }
}

/// A frame's total length from its prelude: the prelude's own CRC must
/// match, the length must hold the prelude and the message CRC, and it may
/// not pass `MAX_EVENT`.
fn prelude_length(prelude: &[u8]) -> Result<usize, ModelError> {
    let word = |at: usize| {
        u32::from_be_bytes([
            prelude[at],
            prelude[at + 1],
            prelude[at + 2],
            prelude[at + 3],
        ])
    };
    if crc32fast::hash(&prelude[..8]) != word(8) {
        return Err(ModelError::StreamIncomplete);
    }
    let total = usize::try_from(word(0)).unwrap_or(usize::MAX);
    let headers = usize::try_from(word(4)).unwrap_or(usize::MAX);
    if total > MAX_EVENT {
        return Err(too_large("an event-stream frame"));
    }
    if total < MIN_FRAME || headers > total - MIN_FRAME {
        return Err(ModelError::StreamIncomplete);
    }
    Ok(total)
}

/// `FrameDecoder` as a framing of `timed.rs`: the frame `poll` found waits
/// in `ready`.
#[derive(Default)]
struct Frames {
    decoder: FrameDecoder,
    ready: Option<Message>,
}

impl Framing for Frames {
    fn push(&mut self, chunk: &[u8]) {
        self.decoder.push(chunk);
    }

    fn poll(&mut self, ended: bool) -> Result<bool, ModelError> {
        self.ready = self.decoder.poll()?;
        if self.ready.is_none() && ended && self.decoder.has_partial() {
            return Err(ModelError::StreamIncomplete);
        }
        Ok(self.ready.is_some())
    }
}

/// Reads event-stream frames from a response under the stream timeouts.
pub(crate) struct FrameReader {
    stream: TimedStream,
    frames: Frames,
}

impl FrameReader {
    pub(crate) fn new(
        response: reqwest::Response,
        sent: Instant,
        timeouts: StreamTimeouts,
    ) -> Self {
        FrameReader {
            stream: TimedStream::of(response, sent, timeouts),
            frames: Frames::default(),
        }
    }

    /// The next frame; `Ok(None)` when the stream ended between frames (a
    /// stream that ends inside one is incomplete).
    pub(crate) async fn next(&mut self) -> Result<Option<Message>, ModelError> {
        self.stream.next_event(&mut self.frames).await?;
        Ok(self.frames.ready.take())
    }

    /// Waits at most `limit` for each later frame (a reply already whole
    /// that only its trailer is awaited for).
    pub(crate) fn shorten_idle(&mut self, limit: std::time::Duration) {
        self.stream.shorten_idle(limit);
    }
}

/// A header's string value, if the frame has it as a string.
pub(crate) fn header<'m>(message: &'m Message, name: &str) -> Option<&'m str> {
    message
        .headers()
        .iter()
        .find(|h| h.name().as_str() == name)
        .and_then(|h| h.value().as_string().ok())
        .map(|s| s.as_str())
}

#[cfg(test)]
mod tests {
    use aws_smithy_eventstream::frame::write_message_to;
    use aws_smithy_types::event_stream::{Header, HeaderValue};

    use super::*;

    fn frame(event: &str, payload: &str) -> Vec<u8> {
        let message = Message::new(payload.as_bytes().to_vec())
            .add_header(Header::new(
                ":message-type",
                HeaderValue::String("event".into()),
            ))
            .add_header(Header::new(
                ":event-type",
                HeaderValue::String(event.to_string().into()),
            ));
        let mut out = Vec::new();
        write_message_to(&message, &mut out).unwrap();
        out
    }

    #[test]
    fn frames_split_anywhere_come_out_whole() {
        let mut bytes = frame("messageStart", r#"{"role":"assistant"}"#);
        bytes.extend(frame("messageStop", r#"{"stopReason":"end_turn"}"#));
        for cut in 1..bytes.len() {
            let mut d = FrameDecoder::default();
            let mut seen = Vec::new();
            for piece in [&bytes[..cut], &bytes[cut..]] {
                d.push(piece);
                while let Some(m) = d.poll().unwrap() {
                    seen.push(header(&m, ":event-type").unwrap().to_string());
                }
            }
            assert_eq!(seen, ["messageStart", "messageStop"], "cut at {cut}");
            assert!(!d.has_partial());
        }
    }

    #[test]
    fn a_frame_past_the_bound_is_refused_before_it_is_read() {
        let mut prelude = Vec::new();
        prelude.extend_from_slice(&(100u32 << 20).to_be_bytes());
        prelude.extend_from_slice(&0u32.to_be_bytes());
        let crc = crc32fast::hash(&prelude);
        prelude.extend_from_slice(&crc.to_be_bytes());
        let mut d = FrameDecoder::default();
        d.push(&prelude);
        assert!(matches!(d.poll(), Err(ModelError::Malformed { .. })));
    }

    #[test]
    fn lies_and_bad_checksums_are_an_incomplete_stream() {
        // A length whose prelude CRC does not match.
        let mut bytes = frame("messageStart", "{}");
        bytes[3] ^= 0x40;
        let mut d = FrameDecoder::default();
        d.push(&bytes);
        assert_eq!(d.poll().unwrap_err(), ModelError::StreamIncomplete);
        // A payload byte changed: the message CRC fails.
        let mut bytes = frame("messageStart", r#"{"role":"assistant"}"#);
        let at = bytes.len() - 6;
        bytes[at] ^= 1;
        let mut d = FrameDecoder::default();
        d.push(&bytes);
        assert_eq!(d.poll().unwrap_err(), ModelError::StreamIncomplete);
        // A header of an unknown type (type byte 42), CRCs made to match.
        // A one-byte name `x`, then the type byte.
        let body = vec![1u8, b'x', 42];
        let total = (PRELUDE + body.len() + 4) as u32;
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&total.to_be_bytes());
        bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_be_bytes());
        bytes.extend_from_slice(&body);
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_be_bytes());
        let mut d = FrameDecoder::default();
        d.push(&bytes);
        assert_eq!(d.poll().unwrap_err(), ModelError::StreamIncomplete);
        // A headers length larger than the frame.
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&20u32.to_be_bytes());
        bytes.extend_from_slice(&50u32.to_be_bytes());
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_be_bytes());
        let mut d = FrameDecoder::default();
        d.push(&bytes);
        assert_eq!(d.poll().unwrap_err(), ModelError::StreamIncomplete);
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..2000 {
            let n = rng.usize(0..200);
            let bytes: Vec<u8> = (0..n).map(|_| rng.u8(..)).collect();
            let mut d = FrameDecoder::default();
            d.push(&bytes);
            while let Ok(Some(_)) = d.poll() {}
        }
    }
}
