//! Token counts the run side works out itself: a request's size before it
//! is sent (for compaction), and a reply's usage when the provider reported
//! none (SPEC 4 "Usage").
//!
//! Both start from what each model's server said about an earlier request:
//! the input tokens it reported for a request of known size (or the size it
//! named in a context-overflow error) fix that model's tokens per character,
//! and a new request is that base plus what was added since, at the same
//! rate. A model the server never counted for is estimated at four
//! characters a token. An estimate is never 0.

use std::collections::{HashMap, HashSet};

use super::Agent;
use crate::conversation::{Message, ToolCall, ToolSpec, Usage};
use crate::model::chain::Answer;

/// Characters a token when no server count is known.
const CHARS_PER_TOKEN: u64 = 4;

/// The characters of a request as the estimates count them.
pub(crate) fn request_chars(system: &str, messages: &[Message], tools: &[ToolSpec]) -> u64 {
    let mut chars = system.len();
    for m in messages {
        chars += m.content.len() + 8;
        chars += calls_chars(&m.tool_calls);
    }
    for tool in tools {
        chars += tool.name.len() + tool.description.len() + json_len(&tool.parameters);
    }
    chars as u64
}

/// The characters of a reply: its text and its tool calls.
pub(crate) fn reply_chars(text: &str, calls: &[ToolCall]) -> u64 {
    (text.len() + calls_chars(calls)) as u64
}

fn calls_chars(calls: &[ToolCall]) -> usize {
    calls
        .iter()
        .map(|c| c.name.len() + json_len(&c.arguments))
        .sum()
}

/// The length of `value` as compact JSON, counted without building the text
/// (this runs over the whole history before every request).
fn json_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// A server's count for one request of a model: `tokens` for `chars`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Base {
    chars: u64,
    tokens: u64,
}

/// What the run has learnt about each model's token counts, by spec.
#[derive(Debug, Default)]
pub(crate) struct TokenMeter {
    bases: HashMap<String, Base>,
    /// Context windows named by servers in their overflow errors.
    windows: HashMap<String, u64>,
    /// Models already warned about for reporting no usage.
    warned: HashSet<String>,
}

impl TokenMeter {
    /// Records that `spec`'s server counted `tokens` input tokens for a
    /// request of `chars` characters.
    pub(crate) fn record(&mut self, spec: &str, chars: u64, tokens: u64) {
        if chars > 0 && tokens > 0 {
            self.bases.insert(spec.to_string(), Base { chars, tokens });
        }
    }

    /// Records a context window that `spec`'s server named.
    pub(crate) fn record_window(&mut self, spec: &str, window: u64) {
        if window > 0 {
            self.windows.insert(spec.to_string(), window);
        }
    }

    /// The window `spec`'s server named in an overflow error, if any.
    pub(crate) fn window(&self, spec: &str) -> Option<u64> {
        self.windows.get(spec).copied()
    }

    /// Estimated tokens of `chars` characters sent to `spec`: the server's
    /// count for its last counted request plus what was added since at the
    /// same rate (or scaled down when the request shrank), else chars / 4.
    /// At least 1 for any text.
    pub(crate) fn estimate(&self, spec: &str, chars: u64) -> u64 {
        if chars == 0 {
            return 0;
        }
        let tokens = match self.bases.get(spec) {
            Some(base) if chars >= base.chars => {
                let added = chars - base.chars;
                base.tokens + div_ceil_scaled(added, base.tokens, base.chars)
            }
            Some(base) => div_ceil_scaled(chars, base.tokens, base.chars),
            None => chars.div_ceil(CHARS_PER_TOKEN),
        };
        tokens.max(1)
    }

    /// The usage of a reply from `spec` whose server reported none: input
    /// from the request's size, output from the reply's, never 0.
    pub(crate) fn estimate_usage(&self, spec: &str, request_chars: u64, reply_chars: u64) -> Usage {
        Usage {
            input_tokens: self.estimate(spec, request_chars).max(1),
            output_tokens: self.estimate(spec, reply_chars).max(1),
            ..Usage::default()
        }
    }

    /// True the first time it is asked about `spec`: that model's warning
    /// is due.
    pub(crate) fn first_estimate(&mut self, spec: &str) -> bool {
        self.warned.insert(spec.to_string())
    }
}

impl Agent {
    /// Adds a reply's tokens and cost to the run's totals. When the provider
    /// reported no usage (or only zeros), the usage is estimated from the
    /// request's and the reply's size and priced with the answering model,
    /// and the first such reply of each model costs a `warning`. With
    /// `calibrate`, a reported count becomes that model's base for later
    /// estimates. Returns whether the usage is an estimate.
    pub(super) fn account(
        &mut self,
        answer: &mut Answer,
        request_chars: u64,
        calibrate: bool,
    ) -> bool {
        let response = &mut answer.response;
        let usage = response.usage;
        let estimated =
            !response.usage_reported || (usage.input_tokens == 0 && usage.output_tokens == 0);
        if estimated {
            let reply = reply_chars(&response.text, &response.tool_calls);
            response.usage = self
                .meter
                .estimate_usage(&answer.spec, request_chars, reply);
            if response.cost_override.is_none() {
                let member = self.chain.active_member();
                answer.cost_usd = match member.pricing {
                    Some(pricing) if member.spec == *answer.spec => pricing.cost(&response.usage),
                    _ => 0.0,
                };
            }
            if self.meter.first_estimate(&answer.spec) {
                self.emitter.warn(format!(
                    "{} reported no token usage: its tokens and cost are estimated from the size of the text",
                    answer.spec
                ));
            }
        } else if calibrate {
            self.meter
                .record(&answer.spec, request_chars, usage.input_tokens);
        }
        self.doc.totals.add(&answer.response.usage, answer.cost_usd);
        // What the run counts is what the budgets count (SPEC 19).
        self.chain.record_spend(&answer.spec, answer.cost_usd);
        estimated
    }
}

impl Agent {
    /// Counts what the losers of this step's hedges cost (their estimated
    /// input at their price, SPEC 23) in the run's cost and its budgets,
    /// as a reply's cost is counted: a cancelled request may be billed.
    pub(super) fn account_hedged_out(&mut self) {
        for (spec, usd) in self.chain.take_hedge_charges() {
            self.doc.totals.cost_usd += usd;
            self.chain.record_spend(&spec, usd);
        }
    }
}

/// `ceil(x * num / den)` without overflow.
fn div_ceil_scaled(x: u64, num: u64, den: u64) -> u64 {
    let wide = (x as u128 * num as u128).div_ceil(den.max(1) as u128);
    u64::try_from(wide).unwrap_or(u64::MAX)
}

/// The sizes a context-overflow message names: `(requested, window)`, as
/// vendors word them ("Requested tokens (7930) exceed context window of
/// 2048", "maximum context length is 2048 tokens. However, you requested
/// 7930 tokens", "prompt is too long: 210000 tokens > 200000 maximum").
pub(crate) fn overflow_sizes(message: &str) -> (Option<u64>, Option<u64>) {
    let lower = message.to_ascii_lowercase();
    let mut words: Vec<&str> = Vec::new();
    let mut requested = None;
    let mut window = None;
    let mut rest = lower.as_str();
    while !rest.is_empty() {
        let start = rest
            .find(|c: char| c.is_ascii_alphanumeric() || c == '>')
            .unwrap_or(rest.len());
        rest = &rest[start..];
        if rest.is_empty() {
            break;
        }
        let end = if rest.starts_with('>') {
            1
        } else {
            rest.find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len())
        };
        let token = &rest[..end];
        rest = &rest[end..];
        if let Ok(n) = token.parse::<u64>() {
            let recent = &words[words.len().saturating_sub(4)..];
            let next = rest
                .trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
                .split(|c: char| !c.is_ascii_alphanumeric())
                .next()
                .unwrap_or("");
            let names_window = next == "maximum"
                || recent.last() == Some(&">")
                || recent
                    .iter()
                    .any(|w| matches!(*w, "window" | "length" | "limit" | "size" | "maximum"));
            let names_request = recent
                .iter()
                .any(|w| matches!(*w, "requested" | "resulted" | "long" | "has" | "prompt"));
            if names_window && window.is_none() {
                window = Some(n);
            } else if names_request && requested.is_none() {
                requested = Some(n);
            }
        }
        words.push(token);
        if words.len() > 64 {
            words.drain(..32);
        }
    }
    (requested, window)
}

#[cfg(test)]
mod tests {
    #[test]
    fn json_len_is_the_compact_texts_length() {
        for value in [
            serde_json::json!({"command": "echo \"hi\"\n", "n": [1, 2.5, null]}),
            serde_json::json!("é\u{1}"),
            serde_json::json!({}),
        ] {
            assert_eq!(super::json_len(&value), value.to_string().len());
        }
    }

    use super::*;

    #[test]
    fn without_a_server_count_it_is_chars_over_four_and_never_zero() {
        let meter = TokenMeter::default();
        assert_eq!(meter.estimate("a/x", 400), 100);
        assert_eq!(meter.estimate("a/x", 1), 1);
        let usage = meter.estimate_usage("a/x", 0, 0);
        assert_eq!((usage.input_tokens, usage.output_tokens), (1, 1));
    }

    #[test]
    fn a_server_count_is_the_base_and_additions_go_at_its_rate() {
        let mut meter = TokenMeter::default();
        // The numbers: 18184 chars (4546 at chars/4) counted 7930.
        meter.record("a/x", 18_184, 7_930);
        assert_eq!(meter.estimate("a/x", 18_184), 7_930);
        // 1000 characters more at 7930/18184 tokens a character.
        assert_eq!(meter.estimate("a/x", 19_184), 7_930 + 437);
        // A smaller request (after compaction) scales down.
        assert_eq!(meter.estimate("a/x", 9_092), 3_965);
        // Other models keep their own rate.
        assert_eq!(meter.estimate("b/y", 400), 100);
    }

    #[test]
    fn warns_once_per_model() {
        let mut meter = TokenMeter::default();
        assert!(meter.first_estimate("a/x"));
        assert!(!meter.first_estimate("a/x"));
        assert!(meter.first_estimate("b/y"));
    }

    #[test]
    fn overflow_messages_name_their_sizes() {
        let cases = [
            (
                "Requested tokens (7930) exceed context window of 2048",
                (Some(7930), Some(2048)),
            ),
            (
                "This model's maximum context length is 2048 tokens. However, you requested 7930 tokens (7000 in the messages, 930 in the completion).",
                (Some(7930), Some(2048)),
            ),
            (
                "prompt is too long: 210000 tokens > 200000 maximum",
                (Some(210000), Some(200000)),
            ),
            (
                "This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens.",
                (Some(130532), Some(128000)),
            ),
            ("context length exceeded", (None, None)),
        ];
        for (message, sizes) in cases {
            assert_eq!(overflow_sizes(message), sizes, "{message}");
        }
    }

    #[test]
    fn overflow_parsing_is_linear_on_long_input() {
        let long = "9".repeat(100_000) + &" word".repeat(100_000);
        assert_eq!(overflow_sizes(&long), (None, None));
    }
}
