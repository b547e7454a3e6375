//! Fingerprints: what a kept entry's bytes were made from, hashed, so a
//! message changed in any way is never sent as its old bytes.

use std::hash::Hasher;

use serde_json::Value;
use xxhash_rust::xxh3::Xxh3;

use crate::conversation::{Message, Role};

/// A 128-bit seeded xxh3 of everything an entry's bytes are made from.
pub(crate) type Fingerprint = u128;

/// A fingerprint being computed. Every part is written with its length or
/// a tag, so different inputs never run together into the same stream.
pub(crate) struct Key(pub(super) Xxh3);

impl Key {
    pub(crate) fn finish(&self) -> Fingerprint {
        self.0.digest128()
    }

    pub(crate) fn tag(&mut self, tag: u8) -> &mut Self {
        self.0.update(&[tag]);
        self
    }

    pub(crate) fn str(&mut self, s: &str) -> &mut Self {
        self.0.update(&(s.len() as u64).to_le_bytes());
        self.0.update(s.as_bytes());
        self
    }

    fn opt_str(&mut self, s: Option<&str>) -> &mut Self {
        match s {
            Some(s) => self.tag(1).str(s),
            None => self.tag(0),
        }
    }

    /// A JSON value as it serialises: keys in their order, numbers by kind.
    pub(crate) fn value(&mut self, value: &Value) -> &mut Self {
        match value {
            Value::Null => self.tag(0),
            Value::Bool(b) => self.tag(1).tag(u8::from(*b)),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    self.tag(2).0.update(&u.to_le_bytes());
                } else if let Some(i) = n.as_i64() {
                    self.tag(3).0.update(&i.to_le_bytes());
                } else {
                    let f = n.as_f64().unwrap_or_default();
                    self.tag(4).0.update(&f.to_bits().to_le_bytes());
                }
                self
            }
            Value::String(s) => self.tag(5).str(s),
            Value::Array(items) => {
                self.tag(6).0.update(&(items.len() as u64).to_le_bytes());
                for item in items {
                    self.value(item);
                }
                self
            }
            Value::Object(map) => {
                self.tag(7).0.update(&(map.len() as u64).to_le_bytes());
                for (name, item) in map {
                    self.str(name).value(item);
                }
                self
            }
        }
    }

    /// Every field of a message that a wire form is made from (all but
    /// `step` and `model`), and `extra` as it is sent to this model: only
    /// when it is (`Request::extra_of`).
    pub(crate) fn message(&mut self, m: &Message, extra: Option<&Value>) -> &mut Self {
        let role = match m.role {
            Role::System => 0,
            Role::User => 1,
            Role::Assistant => 2,
            Role::Tool => 3,
        };
        self.tag(role).str(&m.content);
        self.0.update(&(m.tool_calls.len() as u64).to_le_bytes());
        for call in &m.tool_calls {
            self.str(&call.id)
                .str(&call.name)
                .tag(u8::from(call.garbled))
                .value(&call.arguments);
        }
        self.opt_str(m.tool_call_id.as_deref())
            .opt_str(m.name.as_deref());
        match extra {
            Some(extra) => self.tag(1).value(extra),
            None => self.tag(0),
        }
    }
}

/// Hashes a `Fingerprint` (already a hash) by taking its low bits.
#[derive(Default)]
pub(super) struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}
