//! Fuzz harnesses on stable (proptest): whatever bytes a server sends, the
//! SSE decoder, the NDJSON reader, the four stream assemblers, error-body
//! classification, Retry-After parsing and the rate-limit headers return a
//! value or a classified error, never panic, and keep their bounds.
//!
//! `cargo test --lib fuzz_` runs a few cases each (fast); more with
//! `PROPTEST_CASES=100000 cargo test --release --lib fuzz_`.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::anthropic::Assembly as AnthropicAssembly;
use super::http::{error_from_body, parse_retry_after, MAX_RETRY_AFTER};
use super::ndjson::NdjsonReader;
use super::ollama::LineAssembler;
use super::openai::ChunkAssembler;
use super::price::Pricing;
use super::ratelimit::{go_duration, RateLimits, MAX_RESET_AHEAD};
use super::responses::Assembly as ResponsesAssembly;
use super::sse::SseDecoder;
use super::wire::{stream_error, Assembly, Progress, MAX_MESSAGE_CHARS, MAX_TOOL_CALLS};
use super::{ModelError, NoObserver, Response, Usage};
use crate::conversation::MAX_RESPONSE_TOKENS;

/// The proptest settings of every fuzz harness: `PROPTEST_CASES` cases
/// (32 by default), nothing persisted.
pub(crate) fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Keys the four wire APIs use, so random objects hit real code paths.
const KEYS: &[&str] = &[
    "type",
    "index",
    "id",
    "delta",
    "choices",
    "tool_calls",
    "function",
    "name",
    "arguments",
    "content",
    "refusal",
    "finish_reason",
    "usage",
    "prompt_tokens",
    "completion_tokens",
    "error",
    "code",
    "status",
    "message",
    "retry_after",
    "content_block",
    "text",
    "partial_json",
    "stop_reason",
    "input",
    "output_index",
    "item",
    "call_id",
    "response",
    "output",
    "done",
    "done_reason",
    "eval_count",
    "prompt_eval_count",
    "input_tokens",
    "output_tokens",
    "thinking",
    "signature",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "cache_creation",
    "ephemeral_1h_input_tokens",
    "prompt_tokens_details",
    "input_tokens_details",
    "cached_tokens",
    "cache_write_tokens",
];

/// Strings the APIs give meaning to.
const WORDS: &[&str] = &[
    "message_start",
    "content_block_start",
    "content_block_delta",
    "message_delta",
    "message_stop",
    "error",
    "text",
    "tool_use",
    "text_delta",
    "input_json_delta",
    "thinking",
    "refusal",
    "response.output_item.added",
    "response.output_item.done",
    "response.output_text.delta",
    "response.refusal.delta",
    "response.refusal.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "function_call",
    "message",
    "reasoning",
    "tool_calls",
    "length",
    "stop",
    "[DONE]",
    "429",
    "500",
    "rate_limit_exceeded",
    "context_length_exceeded",
    "billing_error",
    "{\"a\":",
    "{}",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        prop_oneof![Just(1e30), Just(-1.0), Just(1e300), any::<f64>()]
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        (0..WORDS.len()).prop_map(|i| json!(WORDS[i])),
        ".{0,24}".prop_map(Value::String),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(((0..KEYS.len()), inner), 0..6).prop_map(|pairs| {
                Value::Object(
                    pairs
                        .into_iter()
                        .map(|(k, v)| (KEYS[k].to_string(), v))
                        .collect(),
                )
            }),
        ]
    })
}

/// Event payloads: random objects, raw text, and nothing at all.
fn payloads() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop_oneof![
            4 => value().prop_map(|v| v.to_string()),
            1 => ".{0,40}",
            1 => Just("[DONE]".to_string()),
        ],
        0..24,
    )
}

/// Every bound a finished reply must keep.
fn bounded(result: &Result<Response, ModelError>) {
    if let Ok(r) = result {
        assert!(r.tool_calls.len() <= MAX_TOOL_CALLS);
        // Whatever the usage said, it adds up (SPEC 25).
        let u = r.usage;
        assert!(u.input_tokens <= MAX_RESPONSE_TOKENS && u.output_tokens <= MAX_RESPONSE_TOKENS);
        assert!(
            u.cached_input_tokens + u.cache_write_tokens <= u.input_tokens,
            "{u:?}"
        );
        assert!(u.cache_write_1h_tokens <= u.cache_write_tokens, "{u:?}");
    }
    if let Err(e) = result {
        let _ = (e.class(), e.reason(), e.to_string());
    }
}

fn assemble<A: Assembly>(payloads: &[String]) -> Result<Response, ModelError> {
    let mut a = A::default();
    for p in payloads {
        if a.apply(p, &NoObserver)? == Progress::Finished {
            break;
        }
    }
    a.finish()
}

fn assemble_body<A: Assembly>(body: &Value) -> Result<Response, ModelError> {
    let mut a = A::default();
    a.apply_body(&body.to_string(), &NoObserver)?;
    a.finish()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn fuzz_sse_decoder(bytes in prop::collection::vec(any::<u8>(), 0..512), cut in any::<prop::sample::Index>()) {
        let decode = |pieces: &[&[u8]]| {
            let mut d = SseDecoder::with_max(64);
            let mut out = Vec::new();
            for p in pieces {
                d.push(p);
                loop {
                    match d.next_event() {
                        Ok(Some(e)) => {
                            assert!(e.data.len() <= 64);
                            out.push(Ok((e.event, e.data.into_owned(), e.id)));
                        }
                        Ok(None) => break,
                        Err(e) => {
                            out.push(Err(e));
                            return out;
                        }
                    }
                }
            }
            out
        };
        let whole = decode(&[&bytes]);
        let at = cut.index(bytes.len() + 1);
        let (a, b) = bytes.split_at(at);
        let split = decode(&[a, b]);
        // A split changes nothing, except that an over-long line may be
        // noticed earlier (with fewer events before it), never later.
        if !whole.iter().chain(&split).any(|e| e.is_err()) {
            prop_assert_eq!(whole, split);
        }
    }

    #[test]
    fn fuzz_ndjson_reader(lines in prop::collection::vec(prop_oneof![value().prop_map(|v| v.to_string()), ".{0,30}"], 0..8), size in 1usize..64) {
        let mut body = lines.join("\n").into_bytes();
        body.extend_from_slice(b"\n");
        let chunks: Vec<Result<bytes::Bytes, reqwest::Error>> = body
            .chunks(size)
            .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let timeouts = crate::policy::StreamTimeouts {
            first_event: std::time::Duration::from_secs(5),
            idle: std::time::Duration::from_secs(5),
        };
        rt.block_on(async {
            let mut reader = NdjsonReader::from_stream(
                Box::pin(futures::stream::iter(chunks)),
                std::time::Instant::now(),
                timeouts,
            );
            let mut asm = LineAssembler::default();
            for _ in 0..64 {
                match reader.next().await {
                    Ok(Some(line)) => {
                        if asm.feed(line, &NoObserver).is_err() {
                            break;
                        }
                    }
                    Ok(None) | Err(_) => break,
                }
            }
            bounded(&asm.finish());
        });
    }

    #[test]
    fn fuzz_chat_completions_assembler(p in payloads(), body in value()) {
        bounded(&assemble::<ChunkAssembler>(&p));
        bounded(&assemble_body::<ChunkAssembler>(&body));
    }

    #[test]
    fn fuzz_anthropic_assembler(p in payloads(), body in value()) {
        bounded(&assemble::<AnthropicAssembly>(&p));
        bounded(&assemble_body::<AnthropicAssembly>(&body));
    }

    #[test]
    fn fuzz_responses_assembler(p in payloads(), body in value()) {
        bounded(&assemble::<ResponsesAssembly>(&p));
        bounded(&assemble_body::<ResponsesAssembly>(&body));
    }

    #[test]
    fn fuzz_ollama_assembler(lines in prop::collection::vec(value(), 0..12)) {
        let mut asm = LineAssembler::default();
        let mut failed = false;
        for line in &lines {
            if asm.feed(&line.to_string(), &NoObserver).is_err() {
                failed = true;
                break;
            }
        }
        if !failed {
            bounded(&asm.finish());
        }
    }

    #[test]
    fn fuzz_cost_of_any_usage(
        counts in prop::array::uniform5(prop_oneof![any::<u64>(), 0u64..2_000_000]),
        prices in prop::array::uniform4(prop_oneof![0.0f64..100.0, any::<f64>()]),
    ) {
        let usage = Usage {
            input_tokens: counts[0],
            output_tokens: counts[1],
            cached_input_tokens: counts[2],
            cache_write_tokens: counts[3],
            cache_write_1h_tokens: counts[4],
        };
        let p = Pricing { input: prices[0], output: prices[1], cached_input: prices[2], cache_write: prices[3] };
        let cost = p.cost(&usage);
        prop_assert!(cost >= 0.0, "{cost}");
        if prices.iter().all(|p| p.is_finite() && p.abs() < 1e6) {
            prop_assert!(cost.is_finite(), "{cost}");
        }
    }

    #[test]
    fn fuzz_error_classification(status in 100u16..600, raw in prop::collection::vec(any::<u8>(), 0..256), body in value()) {
        for bytes in [raw, body.to_string().into_bytes()] {
            let e = error_from_body(status, &bytes, None);
            let _ = (e.class(), e.reason());
            prop_assert!(e.to_string().chars().count() <= MAX_MESSAGE_CHARS + 80);
        }
        let e = stream_error(&body);
        let _ = (e.class(), e.reason(), e.retry_after());
    }

    #[test]
    fn fuzz_retry_after(text in prop_oneof![".{0,40}", "[0-9]{0,60}", "-?[0-9]{1,400}(\\.[0-9]{0,5})?(e[0-9]{1,4})?"]) {
        if let Some(wait) = parse_retry_after(&text) {
            prop_assert!(wait <= MAX_RETRY_AFTER);
        }
    }

    #[test]
    fn fuzz_rate_limit_headers(
        values in prop::collection::vec(prop_oneof![
            ".{0,30}",
            "-?[0-9]{0,25}",
            "([0-9]{1,6}(\\.[0-9]{0,4})?(h|m|s|ms|us|ns|x)){0,6}",
            "20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9](\\.[0-9]{1,9})?(Z|[+-][0-2][0-9]:[0-5][0-9])",
            "[0-9a-z.:+-]{60,200}",
        ], 18),
    ) {
        use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
        const NAMES: [&str; 18] = [
            "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
            "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
            "anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset",
            "anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset",
            "anthropic-ratelimit-input-tokens-limit", "anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-reset",
            "anthropic-ratelimit-output-tokens-limit", "anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-reset",
        ];
        let mut headers = HeaderMap::new();
        for (name, value) in NAMES.iter().zip(&values) {
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.insert(HeaderName::from_static(name), value);
            }
            if let Some(d) = go_duration(value) {
                prop_assert!(!value.starts_with('-'), "{value}");
                let _ = d;
            }
        }
        if let Some(limits) = RateLimits::from_headers(&headers, std::time::SystemTime::now()) {
            for w in [limits.requests, limits.tokens].into_iter().flatten() {
                prop_assert!(w.reset <= MAX_RESET_AHEAD);
            }
        }
    }
}
