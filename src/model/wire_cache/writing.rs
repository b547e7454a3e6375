//! Writing a body's JSON: over the last body, in its buffer (`Out`), and
//! the arrays that hold kept entries (`JsonArray`).

use std::io;

use serde::Serialize;
use serde_json::Value;

use super::{Entry, Spare, WireBody};

/// A body being written over the last one, in that one's buffer: bytes go
/// at `at`, over what is there, and the buffer is cut there at the end.
pub(crate) struct Out {
    buf: Vec<u8>,
    at: usize,
    /// What of `buf` the last body left: the generation that wrote it and
    /// its length.
    old: (u64, usize),
    generation: u64,
}

impl Out {
    pub(super) fn over(spare: Spare, generation: u64) -> Self {
        Out {
            old: (spare.generation, spare.bytes.len()),
            buf: spare.bytes,
            at: 0,
            generation,
        }
    }

    pub(super) fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    pub(crate) fn extend_from_slice(&mut self, bytes: &[u8]) {
        let end = self.at + bytes.len();
        if self.at == self.buf.len() {
            self.buf.extend_from_slice(bytes);
        } else if end <= self.buf.len() {
            self.buf[self.at..end].copy_from_slice(bytes);
        } else {
            let (over, after) = bytes.split_at(self.buf.len() - self.at);
            self.buf[self.at..].copy_from_slice(over);
            self.buf.extend_from_slice(after);
        }
        self.at = end;
    }

    pub(crate) fn push(&mut self, byte: u8) {
        self.extend_from_slice(&[byte]);
    }

    /// Writes an entry's bytes, unless they are already here: the last
    /// body wrote them at this very offset (and nothing of this body has
    /// been written past it, as writing only goes forward).
    fn entry<M>(&mut self, entry: &Entry<M>) {
        let (at, (generation, length)) = (self.at, self.old);
        if entry.placed.get() == Some((generation, at)) && at + entry.bytes.len() <= length {
            self.at += entry.bytes.len();
        } else {
            self.extend_from_slice(&entry.bytes);
        }
        entry.placed.set(Some((self.generation, at)));
    }

    pub(super) fn finish(mut self) -> WireBody {
        self.buf.truncate(self.at);
        WireBody {
            bytes: self.buf,
            generation: self.generation,
        }
    }
}

impl io::Write for Out {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.extend_from_slice(bytes);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A JSON array being written: items as bytes already serialised (several
/// comma-joined items at once, or none), or as values.
pub(crate) struct JsonArray<'o> {
    out: &'o mut Out,
    empty: bool,
}

impl<'o> JsonArray<'o> {
    pub(crate) fn open(out: &'o mut Out) -> Self {
        out.push(b'[');
        JsonArray { out, empty: true }
    }

    /// Appends serialised items (nothing when `items` is empty).
    pub(crate) fn push_raw(&mut self, items: &[u8]) {
        if items.is_empty() {
            return;
        }
        self.separate();
        self.out.extend_from_slice(items);
    }

    /// Appends a kept entry's items (nothing when it has none), copied
    /// only when the last body did not have them here.
    pub(crate) fn push_entry<M>(&mut self, entry: &Entry<M>) {
        if entry.bytes.is_empty() {
            return;
        }
        self.separate();
        self.out.entry(entry);
    }

    pub(crate) fn push_value(&mut self, item: &impl Serialize) {
        self.separate();
        push_json(self.out, item);
    }

    /// Where items written by hand go.
    pub(crate) fn out(&mut self) -> &mut Out {
        self.separate();
        self.out
    }

    fn separate(&mut self) {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
    }

    pub(crate) fn close(self) {
        self.out.push(b']');
    }
}

/// Appends `value` as compact JSON (writing into a `Vec` cannot fail).
pub(crate) fn push_json(out: &mut impl io::Write, value: &(impl Serialize + ?Sized)) {
    let _ = serde_json::to_writer(out, value);
}

/// Values serialised and joined by commas: an entry's bytes.
pub(crate) fn joined(items: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_json(&mut out, item);
    }
    out
}
