//! The answer to a question, read from raw terminal input as pure logic:
//! one read's bytes at a time in, an answer out. One key answers: `y`, `a`,
//! `n` (then an optional reason, ended by Enter), Enter alone declines,
//! Ctrl-C declines and interrupts, Ctrl-D is the end of input. A paste
//! (bracketed by the terminal, or several keys arriving in one read) is
//! never taken for `y` or `a`.

/// The longest reason kept, in bytes; what is typed past it is dropped.
pub(crate) const MAX_REASON_BYTES: usize = 1000;

/// How a person answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    Yes,
    /// Yes, and the same kind of call for the rest of the session.
    Always,
    /// Declined, with the reason typed after `n`, if any.
    No(Option<String>),
    /// Ctrl-C: declined, and the run is interrupted.
    Interrupted,
    /// The end of input (Ctrl-D, or the terminal went away): declined.
    Eof,
}

/// What one read's bytes came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fed {
    /// Nothing decided yet (a reason being typed, or no bytes).
    Pending,
    /// Not an answer (another key, a paste, type-ahead): ask again.
    Again,
    Answer(Answer),
}

/// The terminal's bracketed-paste markers.
const PASTE_START: &[u8] = b"\x1b[200~";
const PASTE_END: &[u8] = b"\x1b[201~";

/// One byte of input, typed or inside a bracketed paste.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    Typed(u8),
    Pasted(u8),
    /// A paste began or ended here.
    Marker,
}

/// Where an escape sequence being skipped is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Escape {
    #[default]
    None,
    /// After ESC.
    Started,
    /// After `ESC [`: up to a final byte in `@`..`~`.
    Csi,
    /// After `ESC O`: one more byte.
    Ss3,
}

/// The state of one question's input.
#[derive(Debug, Default)]
pub(crate) struct Keys {
    /// Inside a bracketed paste.
    in_paste: bool,
    /// The start of a paste marker cut off at the end of the last read.
    partial: Vec<u8>,
    escape: Escape,
    /// `Some` once `n` was pressed: the reason typed so far.
    reason: Option<Vec<u8>>,
    /// `a` is no answer (the question does not offer "always").
    no_always: bool,
}

impl Keys {
    /// The input of a question that offers `a` (always) or not.
    pub(crate) fn offering_always(always: bool) -> Keys {
        Keys {
            no_always: !always,
            ..Keys::default()
        }
    }

    /// Forgets input in flight (a paste, an escape sequence) after the
    /// caller discarded what followed it; a reason being typed stays.
    pub(crate) fn reset_input(&mut self) {
        self.in_paste = false;
        self.partial.clear();
        self.escape = Escape::None;
    }

    /// Whether `n` was pressed and a reason may be typed.
    pub(crate) fn declining(&self) -> bool {
        self.reason.is_some()
    }

    /// The reason typed so far (after `n`).
    pub(crate) fn reason(&self) -> String {
        self.reason
            .as_deref()
            .map(|r| String::from_utf8_lossy(r).into_owned())
            .unwrap_or_default()
    }

    /// Takes the bytes of one read.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Fed {
        let inputs = self.scan(bytes);
        if self.reason.is_some() {
            return self.feed_reason(&inputs);
        }
        if self.in_paste || inputs.iter().any(|i| !matches!(i, Input::Typed(_))) {
            return Fed::Again;
        }
        let typed: Vec<u8> = inputs
            .iter()
            .filter_map(|i| match i {
                Input::Typed(b) => Some(*b),
                _ => None,
            })
            .collect();
        self.first_key(&typed)
    }

    /// Splits a read into typed and pasted bytes, across reads.
    fn scan(&mut self, bytes: &[u8]) -> Vec<Input> {
        let mut data = std::mem::take(&mut self.partial);
        data.extend_from_slice(bytes);
        let mut out = Vec::with_capacity(data.len());
        let mut i = 0;
        while i < data.len() {
            let marker = if self.in_paste {
                PASTE_END
            } else {
                PASTE_START
            };
            let rest = &data[i..];
            if rest[0] == 0x1b {
                if rest.starts_with(marker) {
                    self.in_paste = !self.in_paste;
                    out.push(Input::Marker);
                    i += marker.len();
                    continue;
                }
                // A lone ESC at the end is the Esc key, not a cut marker.
                if rest.len() >= 2 && rest.len() < marker.len() && marker.starts_with(rest) {
                    self.partial = rest.to_vec();
                    break;
                }
            }
            out.push(if self.in_paste {
                Input::Pasted(rest[0])
            } else {
                Input::Typed(rest[0])
            });
            i += 1;
        }
        out
    }

    /// The first key of a question: the whole read must be one answer.
    fn first_key(&mut self, typed: &[u8]) -> Fed {
        let Some(&first) = typed.first() else {
            return Fed::Pending;
        };
        if typed.contains(&0x03) {
            return Fed::Answer(Answer::Interrupted);
        }
        let word = trim_enter(typed).to_ascii_lowercase();
        match first {
            0x04 => Fed::Answer(Answer::Eof),
            b'\r' | b'\n' if word.is_empty() => Fed::Answer(Answer::No(None)),
            b'y' | b'Y' if word == b"y" || word == b"yes" => Fed::Answer(Answer::Yes),
            b'a' | b'A' if (word == b"a" || word == b"always") && !self.no_always => {
                Fed::Answer(Answer::Always)
            }
            b'n' | b'N' => {
                self.reason = Some(Vec::new());
                // `no reason` reads as `n` with the reason `reason`.
                let after = &typed[1..];
                let no = matches!(after.first(), Some(b'o' | b'O'))
                    && matches!(after.get(1), None | Some(b' ' | b'\t' | b'\r' | b'\n'));
                let skip = if no { 2 } else { 1 };
                let rest: Vec<Input> = typed[skip..].iter().map(|&b| Input::Typed(b)).collect();
                self.feed_reason(&rest)
            }
            _ => Fed::Again,
        }
    }

    /// Keys after `n`: the reason, ended by Enter.
    fn feed_reason(&mut self, inputs: &[Input]) -> Fed {
        for input in inputs {
            let byte = match *input {
                Input::Marker => continue,
                Input::Pasted(b) => {
                    match b {
                        b'\r' | b'\n' | b'\t' => self.push(b' '),
                        b if b < 0x20 || b == 0x7f => {}
                        b => self.push(b),
                    }
                    continue;
                }
                Input::Typed(b) => b,
            };
            if self.skip_escape(byte) {
                continue;
            }
            match byte {
                0x03 => return Fed::Answer(Answer::Interrupted),
                0x04 => return Fed::Answer(Answer::Eof),
                b'\r' | b'\n' => {
                    let reason = self.reason();
                    let reason = reason.trim();
                    return Fed::Answer(Answer::No(
                        (!reason.is_empty()).then(|| reason.to_string()),
                    ));
                }
                0x7f | 0x08 => self.pop_char(),
                0x15 => {
                    if let Some(r) = self.reason.as_mut() {
                        r.clear();
                    }
                }
                0x1b => self.escape = Escape::Started,
                b'\t' => self.push(b' '),
                b if b < 0x20 => {}
                b => self.push(b),
            }
        }
        Fed::Pending
    }

    /// Whether `byte` belongs to an escape sequence (an arrow key) being
    /// skipped.
    fn skip_escape(&mut self, byte: u8) -> bool {
        self.escape = match (self.escape, byte) {
            (Escape::None, _) => return false,
            (Escape::Started, b'[') => Escape::Csi,
            (Escape::Started, b'O') => Escape::Ss3,
            (Escape::Csi, 0x40..=0x7e) => Escape::None,
            (Escape::Csi, _) => Escape::Csi,
            (Escape::Started | Escape::Ss3, _) => Escape::None,
        };
        true
    }

    fn push(&mut self, byte: u8) {
        if let Some(r) = self.reason.as_mut() {
            if r.len() < MAX_REASON_BYTES {
                r.push(byte);
            }
        }
    }

    /// Removes the last character (all its UTF-8 bytes).
    fn pop_char(&mut self) {
        if let Some(r) = self.reason.as_mut() {
            while let Some(b) = r.pop() {
                if b & 0xc0 != 0x80 {
                    break;
                }
            }
        }
    }
}

/// `bytes` without the line endings at its end.
fn trim_enter(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .rposition(|b| !matches!(b, b'\r' | b'\n'))
        .map_or(0, |i| i + 1);
    &bytes[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(reads: &[&[u8]]) -> Fed {
        let mut keys = Keys::default();
        let mut last = Fed::Pending;
        for read in reads {
            last = keys.feed(read);
            if matches!(last, Fed::Answer(_)) {
                break;
            }
        }
        last
    }

    fn no(reason: &str) -> Fed {
        Fed::Answer(Answer::No(Some(reason.into())))
    }

    #[test]
    fn one_key_answers() {
        assert_eq!(answer(&[b"y"]), Fed::Answer(Answer::Yes));
        assert_eq!(answer(&[b"Y"]), Fed::Answer(Answer::Yes));
        assert_eq!(answer(&[b"a"]), Fed::Answer(Answer::Always));
        assert_eq!(answer(&[b"\r"]), Fed::Answer(Answer::No(None)));
        assert_eq!(answer(&[b"\n"]), Fed::Answer(Answer::No(None)));
        assert_eq!(answer(&[b"\x03"]), Fed::Answer(Answer::Interrupted));
        assert_eq!(answer(&[b"\x04"]), Fed::Answer(Answer::Eof));
        // A key and Enter in one read, or the whole word, is the same answer.
        assert_eq!(answer(&[b"y\n"]), Fed::Answer(Answer::Yes));
        assert_eq!(answer(&[b"yes\r\n"]), Fed::Answer(Answer::Yes));
        assert_eq!(answer(&[b"always\r"]), Fed::Answer(Answer::Always));
        // Where "always" is not offered, `a` is a key that asks again.
        let mut keys = Keys::offering_always(false);
        assert_eq!(keys.feed(b"a"), Fed::Again);
        assert_eq!(keys.feed(b"y"), Fed::Answer(Answer::Yes));
    }

    #[test]
    fn n_takes_a_reason_ended_by_enter() {
        assert_eq!(answer(&[b"n", b"\r"]), Fed::Answer(Answer::No(None)));
        assert_eq!(answer(&[b"n", b"   \r"]), Fed::Answer(Answer::No(None)));
        assert_eq!(answer(&[b"n", b"too ", b"risky", b"\r"]), no("too risky"));
        assert_eq!(answer(&[b"n too risky\n"]), no("too risky"));
        assert_eq!(answer(&[b"no too risky\n"]), no("too risky"));
        assert_eq!(answer(&[b"no\n"]), Fed::Answer(Answer::No(None)));
        assert_eq!(answer(&[b"n", b"no way", b"\r"]), no("no way"));
        // Editing: backspace (over a multi-byte character too), Ctrl-U,
        // arrow keys skipped.
        assert_eq!(
            answer(&[b"n", b"abc\x7f\x7fd", "é".as_bytes(), b"\x7f\x1b[Dx\r"]),
            no("adx")
        );
        assert_eq!(answer(&[b"n", b"junk\x15", b"ok\r"]), no("ok"));
        assert_eq!(answer(&[b"n", b"\x1bOAok\r"]), no("ok"));
        assert_eq!(answer(&[b"n", "ça va\r".as_bytes()]), no("ça va"));
        // Ctrl-C and EOF while typing a reason.
        assert_eq!(
            answer(&[b"n", b"why\x03"]),
            Fed::Answer(Answer::Interrupted)
        );
        assert_eq!(answer(&[b"n", b"why\x04"]), Fed::Answer(Answer::Eof));
        assert_eq!(answer(&[b"n", b"why"]), Fed::Pending);
    }

    #[test]
    fn any_other_key_asks_again() {
        for other in [&b"x"[..], b"\x1b[A", b"\x1b", b" ", b"1", b"\x1a", b"\t"] {
            let mut keys = Keys::default();
            assert_eq!(keys.feed(other), Fed::Again, "{other:?}");
            // And the question is still open.
            assert_eq!(keys.feed(b"y"), Fed::Answer(Answer::Yes), "{other:?}");
        }
    }

    #[test]
    fn pastes_and_type_ahead_never_say_yes() {
        for read in [&b"yy"[..], b"yes please", b"ay", b"y\rrm -rf", b"ya", b"yn"] {
            assert_eq!(answer(&[read]), Fed::Again, "{read:?}");
        }
        // Bracketed pastes: ignored at the question, even a lone `y`.
        assert_eq!(answer(&[b"\x1b[200~y\x1b[201~"]), Fed::Again);
        let mut keys = Keys::default();
        assert_eq!(keys.feed(b"\x1b[20"), Fed::Pending);
        assert_eq!(keys.feed(b"0~yyyy"), Fed::Again);
        assert_eq!(keys.feed(b"y\x03y"), Fed::Again);
        assert_eq!(keys.feed(b"\x1b[201~"), Fed::Again);
        keys.reset_input();
        assert_eq!(keys.feed(b"y"), Fed::Answer(Answer::Yes));
        // After `n`, a paste is part of the reason, its line breaks spaces.
        assert_eq!(
            answer(&[b"n", b"\x1b[200~not\nnow\x03\x1b[201~", b"\r"]),
            no("not now")
        );
    }

    #[test]
    fn a_huge_paste_is_bounded_and_never_an_answer() {
        let mut keys = Keys::default();
        let chunk = vec![b'y'; 4096];
        for _ in 0..1000 {
            assert_eq!(keys.feed(&chunk), Fed::Again);
        }
        let mut keys = Keys::default();
        assert_eq!(keys.feed(b"n"), Fed::Pending);
        for _ in 0..1000 {
            assert_eq!(keys.feed(&chunk), Fed::Pending);
        }
        assert_eq!(keys.reason().len(), MAX_REASON_BYTES);
        match keys.feed(b"\r") {
            Fed::Answer(Answer::No(Some(r))) => assert_eq!(r.len(), MAX_REASON_BYTES),
            other => panic!("{other:?}"),
        }
    }
}
