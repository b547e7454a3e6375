//! The rate limits a provider publishes on its responses (SPEC 17), read
//! from the headers of every response (a success, an error, a 429):
//! OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (resets
//! are Go-style durations: `1s`, `6m0s`, `20ms`) and Anthropic's
//! `anthropic-ratelimit-requests-*` and
//! `anthropic-ratelimit-{tokens,input-tokens,output-tokens}-*` (resets are
//! RFC 3339 times).
//!
//! Header values come from a server and are hostile until parsed: each is
//! bounded in length and parsed in linear time; a value that does not
//! parse, is negative, or resets more than 24 hours ahead is ignored, and a
//! window without its `remaining` and `reset` is no window at all.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

/// The furthest ahead a reset may lie; a later one is ignored.
pub(crate) const MAX_RESET_AHEAD: Duration = Duration::from_secs(24 * 3600);
/// The longest header value read; a longer one is ignored.
const MAX_VALUE_LEN: usize = 64;

/// Each family's `[limit, remaining, reset]` header names.
const OPENAI_REQUESTS: [&str; 3] = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
];
const OPENAI_TOKENS: [&str; 3] = [
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
];
const ANTHROPIC_REQUESTS: [&str; 3] = [
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
];
const ANTHROPIC_TOKENS: [&str; 3] = [
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
];
const ANTHROPIC_INPUT_TOKENS: [&str; 3] = [
    "anthropic-ratelimit-input-tokens-limit",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
];
const ANTHROPIC_OUTPUT_TOKENS: [&str; 3] = [
    "anthropic-ratelimit-output-tokens-limit",
    "anthropic-ratelimit-output-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
];

/// One published limit as a response stated it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    /// The limit itself (requests or tokens per window), when stated.
    pub limit: Option<u64>,
    /// What is left of it.
    pub remaining: u64,
    /// When it is whole again, from the moment the response was read.
    pub reset: Duration,
}

/// The limits one response published: either may be missing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RateLimits {
    pub requests: Option<Window>,
    /// The tokens a request's input may still use.
    pub tokens: Option<Window>,
}

impl RateLimits {
    /// The limits in `headers` of either family, read at `now`; `None` when
    /// no usable window is there (a provider that publishes none).
    pub(crate) fn from_headers(headers: &HeaderMap, now: SystemTime) -> Option<RateLimits> {
        let value = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| v.len() <= MAX_VALUE_LEN)
        };
        let read = |[limit, remaining, reset]: [&str; 3],
                    parse_reset: &dyn Fn(&str) -> Option<Duration>| {
            window(
                value(limit),
                value(remaining),
                value(reset).and_then(parse_reset),
            )
        };
        let openai = |names| read(names, &go_duration);
        let anthropic = |names| read(names, &|v: &str| rfc3339_from(v, now));
        // Anthropic's `tokens` is the tightest of its token limits and
        // `input-tokens` the one a request's input spends; `output-tokens`
        // holds a request back only once it is spent.
        let spent_output = anthropic(ANTHROPIC_OUTPUT_TOKENS).filter(|w| w.remaining == 0);
        let limits = RateLimits {
            requests: tighter(openai(OPENAI_REQUESTS), anthropic(ANTHROPIC_REQUESTS)),
            tokens: [
                openai(OPENAI_TOKENS),
                anthropic(ANTHROPIC_TOKENS),
                anthropic(ANTHROPIC_INPUT_TOKENS),
                spent_output,
            ]
            .into_iter()
            .fold(None, tighter),
        };
        (limits.requests.is_some() || limits.tokens.is_some()).then_some(limits)
    }
}

/// A window from its three header values: `remaining` and a valid `reset`
/// are needed; a `limit` that does not parse is left out.
fn window(limit: Option<&str>, remaining: Option<&str>, reset: Option<Duration>) -> Option<Window> {
    Some(Window {
        limit: limit.and_then(count),
        remaining: count(remaining?)?,
        reset: reset.filter(|r| *r <= MAX_RESET_AHEAD)?,
    })
}

/// The tighter of two windows: less left, or on a tie the later reset.
fn tighter(a: Option<Window>, b: Option<Window>) -> Option<Window> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if (a.remaining, b.reset) < (b.remaining, a.reset) {
            a
        } else {
            b
        }),
        (a, b) => a.or(b),
    }
}

/// The largest count kept: every store holds it exactly (a Lua number in
/// Redis, an `INTEGER` in SQLite).
const MAX_COUNT: u64 = 1 << 53;

/// A count: decimal digits only (no sign, no fraction), at most 19 of
/// them, capped at `MAX_COUNT`.
pub(crate) fn count(value: &str) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse::<u64>().ok().map(|n| n.min(MAX_COUNT))
}

/// A Go-style duration (`1s`, `6m0s`, `20ms`, `1h2m3.5s`, `0`), or a bare
/// number of seconds as some compatible servers send. Negative values and
/// anything else are `None`.
pub(crate) fn go_duration(value: &str) -> Option<Duration> {
    let bytes = value.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_VALUE_LEN {
        return None;
    }
    if let Some(secs) = plain_number(value) {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let mut total = 0.0_f64;
    let mut rest = value;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = plain_number(&rest[..digits])?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" | "μs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * seconds_per;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// `12`, `0.5`, `3.`: digits with at most one point and at least one digit.
fn plain_number(text: &str) -> Option<f64> {
    let points = text.bytes().filter(|&b| b == b'.').count();
    let digits = text.bytes().filter(u8::is_ascii_digit).count();
    if digits == 0 || points > 1 || digits + points != text.len() {
        return None;
    }
    text.parse().ok()
}

/// The time from `now` until an RFC 3339 time; zero when it has passed.
fn rfc3339_from(value: &str, now: SystemTime) -> Option<Duration> {
    let at = chrono::DateTime::parse_from_rfc3339(value).ok()?;
    let millis = at.timestamp_millis();
    let now_ms = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .ok()?
        .as_millis()
        .min(i64::MAX as u128) as i64;
    Some(Duration::from_millis(
        millis.saturating_sub(now_ms).max(0) as u64
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(n, v)| {
                (
                    HeaderName::from_bytes(n.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                )
            })
            .collect()
    }

    /// 2025-08-21T12:41:00Z, the `date` of the recorded Anthropic reply.
    fn noon() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_755_780_060)
    }

    #[test]
    fn go_durations_as_openai_sends_them() {
        let d = |s| go_duration(s);
        assert_eq!(d("1s"), Some(Duration::from_secs(1)));
        assert_eq!(d("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(d("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(d("1h2m3.5s"), Some(Duration::from_millis(3_723_500)));
        assert_eq!(d("7.66s"), Some(Duration::from_millis(7_660)));
        assert_eq!(d("0"), Some(Duration::ZERO));
        assert_eq!(d("2"), Some(Duration::from_secs(2)), "bare seconds");
        assert_eq!(d("1500us"), Some(Duration::from_micros(1500)));
        for bad in [
            "", "-1s", "1x", "s", "1.2.3s", "ms", "1 s", "+1s", "1e3s", "NaN",
        ] {
            assert_eq!(d(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_openai_family() {
        let h = headers(&[
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-limit-tokens", "150000"),
            ("x-ratelimit-remaining-tokens", "149984"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        let limits = RateLimits::from_headers(&h, noon()).unwrap();
        assert_eq!(
            limits.requests,
            Some(Window {
                limit: Some(60),
                remaining: 59,
                reset: Duration::from_secs(1)
            })
        );
        assert_eq!(
            limits.tokens,
            Some(Window {
                limit: Some(150_000),
                remaining: 149_984,
                reset: Duration::from_secs(360)
            })
        );
    }

    /// The headers of a real Anthropic reply (2025-08-21), as a published
    /// test fixture recorded them.
    #[test]
    fn the_anthropic_family() {
        let h = headers(&[
            ("anthropic-ratelimit-input-tokens-limit", "80000"),
            ("anthropic-ratelimit-input-tokens-remaining", "80000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2025-08-21T12:40:59Z",
            ),
            ("anthropic-ratelimit-output-tokens-limit", "16000"),
            ("anthropic-ratelimit-output-tokens-remaining", "16000"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2025-08-21T12:41:00Z",
            ),
            ("anthropic-ratelimit-requests-limit", "1000"),
            ("anthropic-ratelimit-requests-remaining", "999"),
            ("anthropic-ratelimit-requests-reset", "2025-08-21T12:40:59Z"),
            ("anthropic-ratelimit-tokens-limit", "96000"),
            ("anthropic-ratelimit-tokens-remaining", "96000"),
            ("anthropic-ratelimit-tokens-reset", "2025-08-21T12:40:59Z"),
        ]);
        let limits = RateLimits::from_headers(&h, noon()).unwrap();
        assert_eq!(
            limits.requests,
            Some(Window {
                limit: Some(1000),
                remaining: 999,
                reset: Duration::ZERO
            }),
            "a reset already past is zero"
        );
        assert_eq!(limits.tokens.unwrap().remaining, 80_000, "input tokens");
        let later = headers(&[
            ("anthropic-ratelimit-tokens-remaining", "5000"),
            (
                "anthropic-ratelimit-tokens-reset",
                "2025-08-21T12:41:30+00:00",
            ),
            ("anthropic-ratelimit-output-tokens-remaining", "0"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2025-08-21T14:41:20+02:00",
            ),
        ]);
        let limits = RateLimits::from_headers(&later, noon()).unwrap();
        assert_eq!(
            limits.tokens,
            Some(Window {
                limit: None,
                remaining: 0,
                reset: Duration::from_secs(20)
            }),
            "spent output tokens hold requests back"
        );
        assert_eq!(limits.requests, None);
    }

    /// A header block as `curl -D` recorded it from a real server.
    fn recorded(name: &str) -> HeaderMap {
        let path = format!(
            "{}/testdata/recorded/litellm/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let pairs: Vec<(&str, &str)> = text
            .lines()
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim(), v.trim()))
            .collect();
        headers(&pairs)
    }

    /// LiteLLM 1.90.0's proxy in front of a backend that publishes
    /// OpenAI's headers: it passes them on, standardised, on a stream.
    #[test]
    fn litellm_passes_a_backends_limits_on() {
        let limits =
            RateLimits::from_headers(&recorded("ratelimit-passthrough-stream.headers"), noon())
                .unwrap();
        assert_eq!(
            limits,
            RateLimits {
                requests: Some(Window {
                    limit: Some(60),
                    remaining: 57,
                    reset: Duration::from_secs(3)
                }),
                tokens: Some(Window {
                    limit: Some(150_000),
                    remaining: 149_000,
                    reset: Duration::from_millis(400)
                }),
            }
        );
        // Its JSON replies drop the resets, and its own router limits send
        // no reset and negative counts once spent: nothing to pace by.
        for name in [
            "ratelimit-passthrough-json.headers",
            "ratelimit-router-json.headers",
        ] {
            assert_eq!(
                RateLimits::from_headers(&recorded(name), noon()),
                None,
                "{name}"
            );
        }
    }

    #[test]
    fn bad_values_are_ignored() {
        let none = |pairs: &[(&str, &str)]| RateLimits::from_headers(&headers(pairs), noon());
        assert_eq!(none(&[]), None);
        assert_eq!(
            none(&[("x-ratelimit-remaining-requests", "5")]),
            None,
            "no reset"
        );
        let long = "9".repeat(100);
        for (remaining, reset) in [
            ("-1", "1s"),
            ("5", "-1s"),
            ("5", "25h"),
            ("5.5", "1s"),
            ("99999999999999999999", "1s"),
            (long.as_str(), "1s"),
            ("5", long.as_str()),
            ("five", "1s"),
        ] {
            let h = [
                ("x-ratelimit-remaining-requests", remaining),
                ("x-ratelimit-reset-requests", reset),
            ];
            assert_eq!(none(&h), None, "{remaining} {reset}");
        }
        let h = [
            ("anthropic-ratelimit-requests-remaining", "3"),
            ("anthropic-ratelimit-requests-reset", "2025-08-23T12:41:00Z"),
        ];
        assert_eq!(none(&h), None, "more than 24 hours ahead");
        let h = [
            ("anthropic-ratelimit-requests-remaining", "3"),
            ("anthropic-ratelimit-requests-reset", "tomorrow"),
        ];
        assert_eq!(none(&h), None);
        let h = [
            ("x-ratelimit-limit-requests", "lots"),
            ("x-ratelimit-remaining-requests", "3"),
            ("x-ratelimit-reset-requests", "24h"),
        ];
        assert_eq!(
            none(&h).unwrap().requests,
            Some(Window {
                limit: None,
                remaining: 3,
                reset: MAX_RESET_AHEAD
            }),
            "a bad limit is left out; 24 hours is still allowed"
        );
    }
}
