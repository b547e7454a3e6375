//! Each message's wire bytes, serialised once and kept between requests, and
//! request bodies written from them.
//!
//! Every HTTP adapter keeps one `WireCache`, so a message's bytes are only
//! ever sent in the form of the API that made them. An entry is found by a
//! fingerprint of everything its bytes are made from (the message's fields,
//! the provider state sent with it, whatever else the adapter adds to the
//! `Key`): a message changed in any way (compaction, an edit, state no
//! longer sent to this model) has a new fingerprint and is serialised again,
//! so stale bytes are never sent. A request keeps the entries it used and
//! drops the others.
//!
//! The body is the adapter's field map written as `serde_json::to_vec`
//! writes it (compact, in insertion order), with the one field holding the
//! conversation written from the kept bytes: the same bytes as serialising
//! the whole body as one `Value`.
//!
//! Each body is written into the last one's buffer, over the last body: an
//! entry whose bytes that body held at the very offset the new body puts
//! them is not copied again (on a step that only added messages, that is
//! every entry before the new ones). Which body a buffer holds, and where
//! each entry was written in it, are tracked by a generation number.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use bytes::Bytes;

use serde_json::{Map, Value};
use xxhash_rust::xxh3::Xxh3;

mod fingerprint;
mod writing;

use fingerprint::PassThrough;
pub(crate) use fingerprint::{Fingerprint, Key};
use writing::Out;
pub(crate) use writing::{joined, push_json, JsonArray};

/// One adapter's kept message bytes, with `M` (small facts about the bytes
/// the adapter needs to assemble a body) beside each entry.
pub(crate) struct WireCache<M = ()> {
    /// Per cache, so fingerprints cannot be aimed at from outside.
    seed: u64,
    kept: Mutex<Kept<M>>,
    /// The last body's buffer, back from the request that sent it: the
    /// next body is written into memory already in use instead of pages
    /// the system must first hand out (which cost more than the writing),
    /// and over the body it holds.
    spare_body: Arc<Mutex<Spare>>,
}

/// A body's buffer, holding that body.
#[derive(Default)]
struct Spare {
    bytes: Vec<u8>,
    generation: u64,
}

struct Kept<M> {
    /// The last request's entries, in the order it used them.
    entries: Slots<M>,
    /// An emptied list to fill next time, so no request allocates one.
    spare: Slots<M>,
    /// The last body's length: the next one is about as long.
    last_body: usize,
    /// The last body's generation: each body has the next one.
    generation: u64,
}

type Slots<M> = Vec<(Fingerprint, Option<Entry<M>>)>;

/// One message's wire bytes (for APIs where a message becomes several
/// items, those items joined by commas; empty when it becomes none).
pub(crate) struct Entry<M> {
    pub bytes: Vec<u8>,
    pub meta: M,
    /// Where `bytes` were last written whole: a body's generation and the
    /// offset in it.
    placed: Cell<Option<(u64, usize)>>,
}

impl<M> Entry<M> {
    pub(crate) fn new(bytes: Vec<u8>, meta: M) -> Self {
        Entry {
            bytes,
            meta,
            placed: Cell::new(None),
        }
    }
}

/// A request body, written by `Fill::body`, to send through `WireCache::lend`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct WireBody {
    pub bytes: Vec<u8>,
    generation: u64,
}

impl std::ops::Deref for WireBody {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl<M> Default for WireCache<M> {
    fn default() -> Self {
        WireCache {
            seed: RandomState::new().build_hasher().finish(),
            kept: Mutex::new(Kept {
                entries: Vec::new(),
                spare: Vec::new(),
                last_body: 0,
                generation: 0,
            }),
            spare_body: Arc::default(),
        }
    }
}

impl<M> std::fmt::Debug for WireCache<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireCache").finish_non_exhaustive()
    }
}

impl<M> WireCache<M> {
    /// Starts one request's body. Requests through one adapter take turns.
    pub(crate) fn fill(&self) -> Fill<'_, M> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let old = std::mem::take(&mut kept.entries);
        let mut used = std::mem::take(&mut kept.spare);
        used.reserve(old.len() + 8);
        Fill {
            seed: self.seed,
            kept,
            spare_body: &self.spare_body,
            untaken: old.len(),
            old,
            next: 0,
            index: None,
            used,
        }
    }

    /// A body to send: its buffer comes back to this cache for the next
    /// body once the request is done with it.
    pub(crate) fn lend(&self, body: WireBody) -> Bytes {
        Bytes::from_owner(Lent {
            body: Spare {
                bytes: body.bytes,
                generation: body.generation,
            },
            home: Arc::downgrade(&self.spare_body),
        })
    }
}

/// A body lent to a request (see `WireCache::lend`).
struct Lent {
    body: Spare,
    home: Weak<Mutex<Spare>>,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.body.bytes
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(home) = self.home.upgrade() {
            let mut spare = home.lock().unwrap_or_else(PoisonError::into_inner);
            // The newest body is the one the next is most like.
            if spare.generation < self.body.generation {
                *spare = std::mem::take(&mut self.body);
            }
        }
    }
}

/// Where a request's entry is, for `Fill::get`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot(usize);

/// One request's use of a cache: entries it uses move from the last
/// request's (or are made); when it ends, they are what is kept.
///
/// The history mostly grows at its end, so the entry a message needs is
/// nearly always the one after the last one taken: that is looked at first,
/// and the last request's entries are indexed by fingerprint only when it
/// is not the one (after a compaction or an edit).
pub(crate) struct Fill<'a, M> {
    seed: u64,
    kept: MutexGuard<'a, Kept<M>>,
    spare_body: &'a Mutex<Spare>,
    /// The last request's entries; those taken are `None`.
    old: Slots<M>,
    /// How many of `old`'s entries are not taken yet: none left means a
    /// message not found where expected is new, and nothing is indexed.
    untaken: usize,
    /// Where in `old` the next message's entry probably is.
    next: usize,
    /// `old`'s positions by fingerprint, once one was needed.
    index: Option<HashMap<Fingerprint, usize, BuildHasherDefault<PassThrough>>>,
    used: Slots<M>,
}

impl<M> Fill<'_, M> {
    /// A fingerprint under this cache's seed.
    pub(crate) fn key(&self) -> Key {
        Key(Xxh3::with_seed(self.seed))
    }

    /// The entry for `key`: kept from the last request, else made now.
    pub(crate) fn entry(&mut self, key: Fingerprint, make: impl FnOnce() -> Entry<M>) -> &Entry<M> {
        let slot = self.slot(key, make);
        self.get(slot)
    }

    /// `entry`, answering where it is.
    pub(crate) fn slot(&mut self, key: Fingerprint, make: impl FnOnce() -> Entry<M>) -> Slot {
        let entry = self.take(key).unwrap_or_else(make);
        self.used.push((key, Some(entry)));
        Slot(self.used.len() - 1)
    }

    /// An entry this request took or made.
    pub(crate) fn get(&self, slot: Slot) -> &Entry<M> {
        self.used[slot.0]
            .1
            .as_ref()
            .expect("a request's own entries are never taken")
    }

    /// The last request's entry for `key`, if it had one not yet taken.
    fn take(&mut self, key: Fingerprint) -> Option<Entry<M>> {
        if let Some((fingerprint, entry)) = self.old.get_mut(self.next) {
            if *fingerprint == key && entry.is_some() {
                self.next += 1;
                self.untaken -= 1;
                return entry.take();
            }
        }
        if self.untaken == 0 {
            return None;
        }
        let old = &self.old;
        let index = self.index.get_or_insert_with(|| {
            let mut index = HashMap::with_capacity_and_hasher(old.len(), Default::default());
            for (at, (fingerprint, _)) in old.iter().enumerate().rev() {
                index.insert(*fingerprint, at);
            }
            index
        });
        let at = *index.get(&key)?;
        let entry = self.old[at].1.take();
        if entry.is_some() {
            index.remove(&key);
            self.next = at + 1;
            self.untaken -= 1;
        }
        entry
    }

    /// Writes `fields` as compact JSON, except that the value of field
    /// `spliced` is the array `write` fills.
    pub(crate) fn body(
        mut self,
        fields: &Map<String, Value>,
        spliced: &str,
        write: impl FnOnce(&mut Self, &mut JsonArray<'_>),
    ) -> WireBody {
        let spare = std::mem::take(
            &mut *self
                .spare_body
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        self.kept.generation += 1;
        let mut out = Out::over(spare, self.kept.generation);
        // Room for the body to grow for a while: a buffer that is too small
        // is replaced (never grown, which would copy its old bytes).
        let want = self.kept.last_body + (64 << 10);
        if out.capacity() < want {
            out = Out::over(
                Spare {
                    bytes: Vec::with_capacity(want + want / 4),
                    generation: 0,
                },
                self.kept.generation,
            );
        }
        let mut write = Some(write);
        out.push(b'{');
        for (i, (name, value)) in fields.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_json(&mut out, name);
            out.push(b':');
            match write.take_if(|_| name == spliced) {
                Some(write) => {
                    let mut array = JsonArray::open(&mut out);
                    write(&mut self, &mut array);
                    array.close();
                }
                None => push_json(&mut out, value),
            }
        }
        out.push(b'}');
        let body = out.finish();
        self.kept.last_body = body.bytes.len();
        body
    }
}

impl<M: Default> Fill<'_, M> {
    /// `entry` for entries without facts beside the bytes.
    #[cfg(test)]
    pub(crate) fn bytes_or(&mut self, key: Fingerprint, make: impl FnOnce() -> Vec<u8>) -> &[u8] {
        &self.entry(key, || Entry::new(make(), M::default())).bytes
    }

    /// `bytes_or`'s entry pushed onto `array`.
    pub(crate) fn push_or(
        &mut self,
        array: &mut JsonArray<'_>,
        key: Fingerprint,
        make: impl FnOnce() -> Vec<u8>,
    ) {
        array.push_entry(self.entry(key, || Entry::new(make(), M::default())));
    }
}

impl<M> Drop for Fill<'_, M> {
    fn drop(&mut self) {
        let mut old = std::mem::take(&mut self.old);
        // Entries no message of this request used go now.
        old.clear();
        self.kept.spare = old;
        self.kept.entries = std::mem::take(&mut self.used);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::conversation::{Message, Role, ToolCall};

    #[test]
    fn a_body_is_written_as_serde_json_writes_it() {
        let cache = WireCache::<()>::default();
        let mut fields = Map::new();
        fields.insert("model".into(), json!("m \"quoted\""));
        fields.insert("items".into(), Value::Null);
        fields.insert("stream".into(), json!(true));
        let items = [json!({"a": 1}), json!("b"), json!({"c": [1.5, -2]})];
        let bytes = cache.fill().body(&fields, "items", |fill, array| {
            array.push_value(&items[0]);
            array.push_raw(b"");
            let key = fill.key().str("b").finish();
            array.push_raw(fill.bytes_or(key, || joined(&items[1..])));
        });
        let mut whole = fields.clone();
        whole.insert("items".into(), Value::Array(items.to_vec()));
        assert_eq!(
            bytes.bytes,
            serde_json::to_vec(&Value::Object(whole)).unwrap()
        );
    }

    #[test]
    fn a_lent_body_s_buffer_is_the_next_body_s() {
        let cache = WireCache::<()>::default();
        let mut fields = Map::new();
        fields.insert("items".into(), Value::Null);
        let write = |fill: &mut Fill<'_, ()>, array: &mut JsonArray<'_>| {
            let key = fill.key().str("x").finish();
            array.push_raw(fill.bytes_or(key, || b"\"x\"".to_vec()));
        };
        let first = cache.fill().body(&fields, "items", write);
        let at = first.as_ptr();
        let sent = cache.lend(first);
        assert_eq!(&sent[..], br#"{"items":["x"]}"#);
        let copy = sent.clone();
        drop(sent);
        let second = cache.fill().body(&fields, "items", write);
        assert_ne!(second.as_ptr(), at, "still in use by a copy of the request");
        drop(copy);
        let third = cache.fill().body(&fields, "items", write);
        assert_eq!(third.as_ptr(), at, "back once the request let go of it");
        assert_eq!(third.bytes, br#"{"items":["x"]}"#);
    }

    #[test]
    fn a_request_keeps_only_the_entries_it_used() {
        let cache = WireCache::<u8>::default();
        let made = std::cell::Cell::new(0);
        let make = |meta: u8| {
            made.set(made.get() + 1);
            Entry::new(vec![b'0' + meta], meta)
        };
        let (k1, k2, k3) = {
            let mut fill = cache.fill();
            let k1 = fill.key().str("one").finish();
            let k2 = fill.key().str("two").finish();
            let k3 = fill.key().str("three").finish();
            fill.entry(k1, || make(1));
            fill.entry(k2, || make(2));
            fill.entry(k3, || make(3));
            (k1, k2, k3)
        };
        assert_eq!(made.get(), 3);
        {
            // The first one dropped (as by a compaction): the others are
            // found all the same, and a new one is made.
            let mut fill = cache.fill();
            let slot = fill.slot(k2, || make(9));
            assert_eq!(fill.get(slot).meta, 2, "kept");
            assert_eq!(fill.get(slot).bytes, b"2");
            assert_eq!(fill.entry(k3, || make(9)).meta, 3, "kept");
            let k4 = fill.key().str("four").finish();
            assert_eq!(fill.entry(k4, || make(4)).meta, 4, "made");
        }
        assert_eq!(made.get(), 4);
        let mut fill = cache.fill();
        assert_eq!(fill.entry(k1, || make(5)).meta, 5, "dropped, made again");
        // In another order, each is still found once.
        assert_eq!(fill.entry(k3, || make(9)).meta, 3);
        assert_eq!(fill.entry(k2, || make(9)).meta, 2);
        assert_eq!(
            fill.entry(k2, || make(6)).meta,
            6,
            "a second use makes its own"
        );
    }

    #[test]
    fn an_entry_already_in_place_is_not_written_again() {
        let cache = WireCache::<()>::default();
        let mut fields = Map::new();
        fields.insert("items".into(), Value::Null);
        let body = |first: &str, items: &[&str]| {
            let bytes = cache.fill().body(&fields, "items", |fill, array| {
                array.push_value(&first);
                for item in items {
                    let key = fill.key().str(item).finish();
                    fill.push_or(array, key, || serde_json::to_vec(item).unwrap());
                }
            });
            let sent = cache.lend(bytes);
            String::from_utf8(sent.to_vec()).unwrap()
        };
        assert_eq!(body("s", &["one", "two"]), r#"{"items":["s","one","two"]}"#);
        // Marks the kept body where "one" is: the mark shows whether the
        // next body copied those bytes or left them where they were.
        let mark = |from: &str, to: &str| {
            let mut spare = cache.spare_body.lock().unwrap();
            let at = spare
                .bytes
                .windows(from.len())
                .position(|w| w == from.as_bytes());
            spare.bytes[at.unwrap()..][..to.len()].copy_from_slice(to.as_bytes());
        };
        mark("one", "ONE");
        assert_eq!(
            body("s", &["one", "two", "six"]),
            r#"{"items":["s","ONE","two","six"]}"#,
            "in place: not copied"
        );
        // Something before them changed length: every entry is elsewhere
        // now, so each is written again.
        assert_eq!(
            body("st", &["one", "two", "six"]),
            r#"{"items":["st","one","two","six"]}"#
        );
        mark("two", "TWO");
        // Same length, other bytes before them: written over, the entries
        // still in place.
        assert_eq!(
            body("ts", &["one", "two"]),
            r#"{"items":["ts","one","TWO"]}"#
        );
        // One dropped before another: that one is now elsewhere.
        mark("one", "ONE");
        assert_eq!(body("ts", &["two"]), r#"{"items":["ts","two"]}"#);
        // A body still in use cannot be written over.
        let held = cache.lend(cache.fill().body(&fields, "items", |_, array| {
            array.push_value(&"held");
        }));
        assert_eq!(body("ts", &["two"]), r#"{"items":["ts","two"]}"#);
        assert_eq!(&held[..], br#"{"items":["held"]}"#);
    }

    #[test]
    fn a_grown_history_is_never_indexed() {
        let cache = WireCache::<()>::default();
        let keys: Vec<_> = {
            let fill = cache.fill();
            (0..100)
                .map(|i| fill.key().str(&i.to_string()).finish())
                .collect()
        };
        let mut fill = cache.fill();
        for key in &keys[..90] {
            fill.bytes_or(*key, || b"x".to_vec());
        }
        drop(fill);
        let mut fill = cache.fill();
        for key in &keys {
            fill.bytes_or(*key, || b"y".to_vec());
        }
        assert!(fill.index.is_none(), "each entry was where it was expected");
        assert_eq!(fill.untaken, 0);
        drop(fill);
        let mut fill = cache.fill();
        fill.bytes_or(keys[5], || b"z".to_vec());
        assert!(
            fill.index.is_some(),
            "out of order: found by its fingerprint"
        );
        assert_eq!(fill.get(Slot(0)).bytes, b"x", "and kept");
    }

    #[test]
    fn fingerprints_see_every_input_of_a_wire_form() {
        let cache = WireCache::<()>::default();
        let fill = cache.fill();
        let call = ToolCall {
            id: "c1".into(),
            name: "bash".into(),
            arguments: json!({"a": 1, "b": [true, null, "x", -1, 2.5]}),
            garbled: false,
            oversized: None,
        };
        let base = Message {
            tool_calls: vec![call.clone()],
            ..Message::new(Role::Assistant, "text", 1)
        };
        let key = |m: &Message, extra: Option<&Value>| fill.key().message(m, extra).finish();
        let k = key(&base, None);
        assert_eq!(k, key(&base.clone(), None));
        assert_eq!(
            k,
            key(
                &Message {
                    step: 7,
                    model: Some("a/b".into()),
                    ..base.clone()
                },
                None
            )
        );
        let mut variants = vec![
            Message {
                content: "text ".into(),
                ..base.clone()
            },
            Message {
                role: Role::User,
                ..base.clone()
            },
            Message {
                tool_call_id: Some("c1".into()),
                ..base.clone()
            },
            Message {
                name: Some("bash".into()),
                ..base.clone()
            },
            Message {
                tool_calls: vec![],
                ..base.clone()
            },
            Message {
                tool_calls: vec![call.clone(), call.clone()],
                ..base.clone()
            },
        ];
        for change in [
            |c: &mut ToolCall| c.id.push('x'),
            |c: &mut ToolCall| c.name.push('x'),
            |c: &mut ToolCall| c.garbled = true,
            // Same keys, another order: other bytes.
            |c: &mut ToolCall| c.arguments = json!({"b": [true, null, "x", -1, 2.5], "a": 1}),
            |c: &mut ToolCall| c.arguments = json!({"a": 1.0, "b": [true, null, "x", -1, 2.5]}),
        ] {
            let mut m = base.clone();
            change(&mut m.tool_calls[0]);
            variants.push(m);
        }
        for m in &variants {
            assert_ne!(key(m, None), k, "{m:?}");
        }
        assert_ne!(key(&base, Some(&json!({}))), k, "extra sent");
        // Strings do not run into each other.
        let ab = Message {
            tool_call_id: Some("ab".into()),
            name: Some("c".into()),
            ..base.clone()
        };
        let a_bc = Message {
            tool_call_id: Some("a".into()),
            name: Some("bc".into()),
            ..base.clone()
        };
        assert_ne!(key(&ab, None), key(&a_bc, None));
    }
}
