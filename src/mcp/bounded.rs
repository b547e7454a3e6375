//! The bound on one message from an MCP server: its stdout is read through
//! `BoundedLines`, which ends the stream (as if the server had closed it)
//! once a line grows past `MAX_MESSAGE`, so no server can make the run hold
//! an unbounded line or wait for an answer that was dropped.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// The largest message an MCP server may send (one JSON-RPC line).
pub(super) const MAX_MESSAGE: usize = 16 << 20;

/// An `AsyncRead` that passes bytes through until a line passes `max`
/// bytes, then reports end of stream for good and raises `tripped`.
pub(crate) struct BoundedLines<R> {
    inner: R,
    max: usize,
    /// Bytes since the last newline.
    line: usize,
    tripped: Arc<AtomicBool>,
}

impl<R> BoundedLines<R> {
    pub(super) fn new(inner: R, max: usize, tripped: Arc<AtomicBool>) -> Self {
        BoundedLines {
            inner,
            max,
            line: 0,
            tripped,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for BoundedLines<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.tripped.load(Ordering::SeqCst) {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &poll {
            let fresh = &buf.filled()[before..];
            // Every line in the fresh bytes counts, the one carried over
            // from earlier reads included; cut before the first too long.
            let mut start = 0;
            let mut cut = None;
            for newline in memchr::memchr_iter(b'\n', fresh) {
                if this.line.saturating_add(newline - start) > this.max {
                    cut = Some(start);
                    break;
                }
                this.line = 0;
                start = newline + 1;
            }
            if cut.is_none() {
                this.line = this.line.saturating_add(fresh.len() - start);
                if this.line > this.max {
                    cut = Some(start);
                }
            }
            if let Some(cut) = cut {
                this.tripped.store(true, Ordering::SeqCst);
                // The oversized line's fresh bytes are never handed on.
                buf.set_filled(before + cut);
            }
        }
        poll
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn read_all(input: &[u8], max: usize) -> (Vec<u8>, bool) {
        let tripped = Arc::new(AtomicBool::new(false));
        let mut reader = BoundedLines::new(input, max, tripped.clone());
        let mut out = Vec::new();
        reader.read_to_end(&mut out).await.unwrap();
        (out, tripped.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn lines_within_the_bound_pass_whole() {
        let input = b"{\"a\":1}\n{\"b\":2}\n";
        assert_eq!(read_all(input, 8).await, (input.to_vec(), false));
    }

    #[tokio::test]
    async fn a_long_line_between_short_ones_in_one_read_is_caught() {
        let input = b"ab\nxxxxxxxxxxxxxxxxxxxx\ncd\n";
        let (out, tripped) = read_all(input, 4).await;
        assert!(tripped);
        assert_eq!(out, b"ab\n");
    }

    #[tokio::test]
    async fn a_line_past_the_bound_ends_the_stream_before_it() {
        let mut input = b"{\"ok\":1}\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 100));
        input.extend(b"\n{\"after\":1}\n");
        let (out, tripped) = read_all(&input, 16).await;
        assert!(tripped);
        assert_eq!(out, b"{\"ok\":1}\n");
    }
}
