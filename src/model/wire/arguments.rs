//! A tool call's arguments as they arrive, under the bound on what one call
//! (and one reply's calls together) may send. Arguments past it are not
//! kept: their pieces are counted and dropped as they come, so a hostile
//! 30 MB argument costs what its stream line costs and no copy more, and the
//! call comes out refused like a garbled one (SPEC 4: not run, the model
//! told, no retry used).
//!
//! Pieces arrive as raw JSON (`serde_json::value::RawValue`, borrowed from
//! the stream's line): a JSON string is measured before it is unescaped, and
//! unescaped only when it is kept.

use std::borrow::Cow;

use serde::de::{Deserializer as _, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

use super::made_up_id;
use crate::model::{ModelError, ToolCall};

/// The largest arguments one tool call may send: the JSON text as the model
/// wrote it (a streamed string's text once unescaped). A call past it is not
/// run. 4 MiB is eight times the 128K output tokens of the largest reply
/// budgets at four bytes a token.
pub(crate) const MAX_CALL_ARGUMENTS: usize = 4 << 20;
/// The most argument text all the calls of one reply keep together; a call
/// whose arguments do not fit in what is left is refused the same way.
pub(crate) const MAX_REPLY_ARGUMENTS: usize = 16 << 20;

/// How much argument text the calls of one reply keep between them.
#[derive(Debug, Default)]
pub(crate) struct Kept(usize);

/// One call's argument text so far.
#[derive(Debug, Default)]
pub(crate) struct Arguments {
    text: String,
    /// Bytes of text that arrived, kept or not.
    len: usize,
    /// The text went past a bound and is no longer kept.
    dropped: bool,
}

impl Arguments {
    /// Whether no argument text has arrived.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends a piece of text.
    pub(crate) fn push(&mut self, piece: &str, kept: &mut Kept) {
        if self.admit(piece.len(), kept) {
            self.keep(kept, |text| text.push_str(piece));
        }
    }

    /// Appends a piece as sent: a JSON string is its text, `null` nothing,
    /// any other JSON value its own JSON text (arguments sent as an object).
    pub(crate) fn push_raw(&mut self, raw: &RawValue, kept: &mut Kept) -> Result<(), ModelError> {
        let json = raw.get();
        match json.as_bytes().first() {
            Some(b'"') => {
                if self.admit(unescaped_len(json), kept) {
                    let mut result = Ok(());
                    self.keep(kept, |text| result = unescape_into(json, text));
                    result?;
                }
            }
            Some(b'n') if json == "null" => {}
            _ => self.push(json, kept),
        }
        Ok(())
    }

    /// Replaces the text so far with `raw`: a `.done` event or a finished
    /// item that carries the whole arguments again.
    pub(crate) fn replace_raw(
        &mut self,
        raw: &RawValue,
        kept: &mut Kept,
    ) -> Result<(), ModelError> {
        self.release(kept);
        *self = Arguments::default();
        self.push_raw(raw, kept)
    }

    /// Drops these arguments (their call is dropped), giving their bytes
    /// back to the reply's budget.
    pub(crate) fn discard(mut self, kept: &mut Kept) {
        self.release(kept);
    }

    /// Gives the text's bytes back to the reply's budget (the call is
    /// replaced or dropped).
    fn release(&mut self, kept: &mut Kept) {
        kept.0 = kept.0.saturating_sub(self.text.len());
    }

    /// Counts `n` more bytes; whether they may be kept. Past a bound the
    /// text so far is dropped and its bytes go back to the reply's budget.
    fn admit(&mut self, n: usize, kept: &mut Kept) -> bool {
        self.len = self.len.saturating_add(n);
        if self.dropped {
            return false;
        }
        if self.len > MAX_CALL_ARGUMENTS || kept.0.saturating_add(n) > MAX_REPLY_ARGUMENTS {
            self.release(kept);
            self.text = String::new();
            self.dropped = true;
            return false;
        }
        true
    }

    /// Adds to the text, counting what was added against the reply.
    fn keep(&mut self, kept: &mut Kept, add: impl FnOnce(&mut String)) {
        let before = self.text.len();
        add(&mut self.text);
        kept.0 += self.text.len() - before;
    }

    /// The tool call, under the garbled-arguments rule: empty text is `{}`,
    /// a JSON object is the arguments, anything else is garbled and kept as
    /// the raw text; arguments past the bound were dropped, and the call is
    /// garbled with `{}` and their size. An id is made up when the server
    /// sent none.
    pub(crate) fn into_call(self, id: String, name: String) -> ToolCall {
        let id = if id.is_empty() { made_up_id() } else { id };
        let (arguments, garbled, oversized) = if self.dropped {
            let size = u64::try_from(self.len).unwrap_or(u64::MAX);
            (Value::Object(Default::default()), true, Some(size))
        } else {
            let (arguments, garbled) = parse_arguments(self.text);
            (arguments, garbled, None)
        };
        ToolCall {
            id,
            name,
            arguments,
            garbled,
            oversized,
        }
    }
}

/// The garbled-arguments rule on raw argument text.
pub(crate) fn parse_arguments(raw: String) -> (Value, bool) {
    if raw.trim().is_empty() {
        return (Value::Object(Default::default()), false);
    }
    match serde_json::from_str::<Value>(&raw) {
        Ok(value @ Value::Object(_)) => (value, false),
        _ => (Value::String(raw), true),
    }
}

/// A JSON string as text, borrowed when it holds no escapes; anything but a
/// string (`null` included) is empty.
pub(crate) fn raw_text(raw: &RawValue) -> Result<Cow<'_, str>, ModelError> {
    if !raw.get().starts_with('"') {
        return Ok(Cow::Borrowed(""));
    }
    let mut de = serde_json::Deserializer::from_str(raw.get());
    de.deserialize_str(CowVisitor)
        .map_err(|_| ModelError::StreamIncomplete)
}

/// Reads a string borrowed from the input when it can be.
struct CowVisitor;

impl<'de> Visitor<'de> for CowVisitor {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_string()))
    }
}

/// Appends a string's text to the `String` it holds, with no copy between.
struct AppendTo<'s>(&'s mut String);

impl<'de> Visitor<'de> for AppendTo<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.0.push_str(v);
        Ok(())
    }
}

/// Appends the text of the JSON string `json` (quotes included) to `out`.
fn unescape_into(json: &str, out: &mut String) -> Result<(), ModelError> {
    let mut de = serde_json::Deserializer::from_str(json);
    de.deserialize_str(AppendTo(out))
        .map_err(|_| ModelError::StreamIncomplete)
}

/// The length in bytes of the text of the JSON string `json` (quotes
/// included, already checked by the parser), without unescaping it.
pub(crate) fn unescaped_len(json: &str) -> usize {
    let inner = json
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(json)
        .as_bytes();
    let mut len = 0;
    let mut at = 0;
    while let Some(i) = memchr::memchr(b'\\', &inner[at..]) {
        len += i;
        at += i;
        match inner.get(at + 1) {
            Some(b'u') => {
                let unit = hex4(inner.get(at + 2..at + 6));
                let low = match inner.get(at + 6..at + 8) {
                    Some(b"\\u") => hex4(inner.get(at + 8..at + 12)),
                    _ => None,
                };
                match (unit, low) {
                    (Some(0xD800..=0xDBFF), Some(0xDC00..=0xDFFF)) => {
                        len += 4;
                        at += 12;
                    }
                    (Some(unit), _) => {
                        len += char::from_u32(u32::from(unit)).map_or(3, char::len_utf8);
                        at += 6;
                    }
                    (None, _) => {
                        len += 1;
                        at += 2;
                    }
                }
            }
            Some(_) => {
                len += 1;
                at += 2;
            }
            None => break,
        }
    }
    len + inner.len().saturating_sub(at)
}

/// Four hex digits.
fn hex4(digits: Option<&[u8]>) -> Option<u16> {
    let digits = std::str::from_utf8(digits?).ok()?;
    u16::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn raw(json: &str) -> Box<RawValue> {
        RawValue::from_string(json.to_string()).unwrap()
    }

    /// `n` bytes of argument text as one JSON string piece.
    fn piece(n: usize) -> Box<RawValue> {
        raw(&serde_json::to_string(&"x".repeat(n)).unwrap())
    }

    #[test]
    fn the_unescaped_length_is_the_decoded_length() {
        for json in [
            r#""""#,
            r#""plain""#,
            r#""a\"b\\c\/d\n\t\r\b\f""#,
            r#""\u0041\u00e9\u20ac""#,
            r#""\ud83d\ude00 and \uD83D\uDE00""#,
            r#""é€😀 raw""#,
            r#""{\"command\": \"ls -la\"}""#,
        ] {
            let text: String = serde_json::from_str(json).unwrap();
            assert_eq!(unescaped_len(json), text.len(), "{json}");
        }
    }

    proptest! {
        #![proptest_config(crate::model::fuzz_tests::config())]

        #[test]
        fn fuzz_unescaped_length(text in ".{0,64}", escapes in prop::collection::vec(0u32..0x11_0000, 0..6)) {
            let mut json = serde_json::to_string(&text).unwrap();
            json.pop();
            for c in escapes.into_iter().filter_map(char::from_u32) {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    json.push_str(&format!("\\u{unit:04x}"));
                }
            }
            json.push('"');
            let decoded: String = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(unescaped_len(&json), decoded.len());
        }
    }

    #[test]
    fn arguments_within_the_bound_follow_the_garbled_rule() {
        let mut kept = Kept::default();
        let mut a = Arguments::default();
        a.push_raw(&raw(r#""{\"command\":""#), &mut kept).unwrap();
        a.push("\"ls\"}", &mut kept);
        assert_eq!(kept.0, "{\"command\":\"ls\"}".len());
        let call = a.into_call("c1".into(), "bash".into());
        assert_eq!(call.arguments, json!({"command": "ls"}));
        assert!(!call.garbled && call.oversized.is_none());

        let mut a = Arguments::default();
        a.push_raw(&raw(r#"{"path": "a"}"#), &mut kept).unwrap();
        a.push_raw(&raw("null"), &mut kept).unwrap();
        assert_eq!(
            a.into_call(String::new(), "x".into()).arguments,
            json!({"path": "a"})
        );

        let mut garbled = Arguments::default();
        garbled.push("{\"a\"", &mut kept);
        let call = garbled.into_call("c".into(), "x".into());
        assert!(call.garbled && call.oversized.is_none());
        assert_eq!(call.arguments, json!("{\"a\""));
    }

    #[test]
    fn arguments_past_the_bound_are_dropped_and_the_call_refused() {
        let mut kept = Kept::default();
        let mut at_bound = Arguments::default();
        at_bound
            .push_raw(&piece(MAX_CALL_ARGUMENTS), &mut kept)
            .unwrap();
        assert!(!at_bound.dropped, "exactly the bound is kept");
        at_bound.discard(&mut kept);
        assert_eq!(kept.0, 0);

        let mut a = Arguments::default();
        a.push_raw(&piece(MAX_CALL_ARGUMENTS - 10), &mut kept)
            .unwrap();
        assert_eq!(kept.0, MAX_CALL_ARGUMENTS - 10);
        a.push_raw(&piece(11), &mut kept).unwrap();
        assert!(a.dropped && a.text.capacity() == 0, "the text is freed");
        assert_eq!(kept.0, 0, "its bytes go back to the reply");
        a.push("more", &mut kept);
        let call = a.into_call("call_1".into(), "write_file".into());
        assert_eq!(call.oversized, Some((MAX_CALL_ARGUMENTS + 5) as u64));
        assert!(call.garbled);
        assert_eq!(call.arguments, json!({}));
        assert_eq!(call.id, "call_1");
    }

    #[test]
    fn the_calls_of_one_reply_share_a_bound() {
        let mut kept = Kept::default();
        let size = MAX_CALL_ARGUMENTS - 1;
        let calls: Vec<ToolCall> = (0..MAX_REPLY_ARGUMENTS / size + 1)
            .map(|i| {
                let mut a = Arguments::default();
                a.push_raw(&piece(size), &mut kept).unwrap();
                a.into_call(format!("c{i}"), "x".into())
            })
            .collect();
        let refused: Vec<bool> = calls.iter().map(|c| c.oversized.is_some()).collect();
        let fit = MAX_REPLY_ARGUMENTS / size;
        assert_eq!(refused, [vec![false; fit], vec![true]].concat());

        // Arguments sent whole again replace those streamed: the budget
        // counts them once.
        let mut kept = Kept::default();
        let mut a = Arguments::default();
        for _ in 0..2 {
            a.replace_raw(&piece(MAX_CALL_ARGUMENTS), &mut kept)
                .unwrap();
        }
        assert_eq!(kept.0, MAX_CALL_ARGUMENTS);
    }

    #[test]
    fn raw_text_borrows_when_it_can() {
        let plain = raw(r#""abc""#);
        assert!(matches!(raw_text(&plain).unwrap(), Cow::Borrowed("abc")));
        let escaped = raw(r#""a\nb""#);
        assert_eq!(raw_text(&escaped).unwrap(), "a\nb");
        assert_eq!(raw_text(&raw("12")).unwrap(), "");
        assert!(raw_text(&raw(r#""\ud800""#)).is_err());
    }
}
