//! The Anthropic Messages wire form of the one HTTP adapter: one streaming `POST {endpoint}/v1/messages`
//! per call. `request.rs` translates our conversation to the wire form,
//! `stream.rs` assembles the SSE events into a `Response`.

mod request;
mod stream;

use async_trait::async_trait;

#[cfg(test)]
pub(crate) use request::request_body;
pub(crate) use request::{request_bytes, request_bytes_on_vertex};
pub(crate) use stream::Assembly;

use super::adapter::{Call, HttpModel, WireForm};
use super::api::{Api, ToolChoiceForm};
use super::http::{Auth, HttpTransport};
use super::spec::{ToolChoice, WireApi};
use super::wire_cache::WireCache;
use super::{ModelError, Response};

/// The `anthropic-version` header every request carries.
pub(crate) const API_VERSION: &str = "2023-06-01";

/// The Anthropic Messages wire form, on the Anthropic API or on Vertex AI.
#[derive(Debug, Default)]
struct MessagesForm {
    /// Each message's content blocks as bytes.
    cache: WireCache<request::Blocks>,
    /// On Vertex AI: the body in its form, sent to the model's own URL
    /// (`:streamRawPredict`) instead of `/v1/messages`.
    on_vertex: bool,
}

impl HttpModel {
    /// A model on the Anthropic API (`transport` must authenticate with
    /// `x-api-key`; the version header is added here).
    pub(crate) fn anthropic(
        transport: HttpTransport,
        model: &str,
        max_output_tokens: Option<u32>,
    ) -> HttpModel {
        HttpModel::new(
            transport.with_header("anthropic-version", API_VERSION),
            model,
            max_output_tokens,
            MessagesForm::default(),
        )
    }

    /// Claude on Vertex AI (SPEC 22): `transport`'s endpoint is the
    /// publisher model's URL and it authorizes with a Google token; the
    /// version goes in the body, errors are read in Google's shape too.
    pub(crate) fn anthropic_on_vertex(
        transport: HttpTransport,
        model: &str,
        max_output_tokens: Option<u32>,
    ) -> HttpModel {
        let form = MessagesForm {
            on_vertex: true,
            ..MessagesForm::default()
        };
        HttpModel::new(
            transport.with_error_reader(super::gemini::error_from_google_body),
            model,
            max_output_tokens,
            form,
        )
    }
}

/// Anthropic Messages as a value (`model/api.rs`).
pub(crate) const API: Api = Api {
    name: WireApi::named("anthropic"),
    key: Auth::XApiKey,
    tool_choice: ToolChoiceForm::Field(tool_choice),
    build: |transport, resolved| {
        HttpModel::anthropic(transport, resolved.spec.model(), resolved.max_output_tokens)
    },
    resolve: None,
    home: None,
};

/// `tool_choice` in Anthropic's form.
pub(crate) fn tool_choice(choice: ToolChoice) -> serde_json::Value {
    match choice {
        ToolChoice::Auto => serde_json::json!({"type": "auto"}),
        ToolChoice::Required => serde_json::json!({"type": "any"}),
    }
}

#[async_trait]
impl WireForm for MessagesForm {
    async fn exchange(&self, call: Call<'_>) -> Result<Response, ModelError> {
        let (write, path): (fn(_, _, _, _, _) -> _, _) = match (self.on_vertex, call.wire.stream) {
            (false, _) => (request_bytes, "/v1/messages"),
            (true, true) => (request_bytes_on_vertex, ":streamRawPredict"),
            (true, false) => (request_bytes_on_vertex, ":rawPredict"),
        };
        let body = write(
            call.model,
            call.request,
            call.output_cap,
            call.wire,
            &self.cache,
        );
        super::wire::complete::<Assembly>(
            call.transport,
            path,
            self.cache.lend(body),
            call.observer,
        )
        .await
    }
}

#[cfg(test)]
mod bench {
    //! `cargo test --release --lib anthropic::bench -- --ignored --nocapture`
    //! (or `bench/providers-anthropic.sh`): SSE parsing throughput of a large
    //! streamed reply, through the whole adapter and through the event
    //! assembly alone.

    use std::collections::BTreeMap;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    use serde_json::json;

    use super::*;
    use crate::model::http::Auth;
    use crate::model::{Message, NoObserver, Role};
    use crate::model::{Model, Request};
    use crate::policy::StreamTimeouts;

    /// A documented-shape stream: `text_events` text deltas, then a tool
    /// call whose input arrives in `json_events` pieces.
    fn big_stream(text_events: usize, json_events: usize) -> Vec<String> {
        let ev = |v: serde_json::Value| {
            format!("event: {}\ndata: {}\n\n", v["type"].as_str().unwrap(), v)
        };
        let mut out = vec![ev(
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 2000, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}}}),
        )];
        out.push(ev(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})));
        for i in 0..text_events {
            let text =
                format!("word{i} and \"quoted\" text with a newline\n and some more plain prose ");
            out.push(ev(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})));
        }
        out.push(ev(json!({"type": "content_block_stop", "index": 0})));
        out.push(ev(json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": {}}})));
        out.push(ev(json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"a.txt\", \"content\": \""}})));
        for _ in 0..json_events {
            out.push(ev(json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "fn main() { println!(\\\"hi\\\"); }\\n"}})));
        }
        out.push(ev(json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"}"}})));
        out.push(ev(json!({"type": "content_block_stop", "index": 1})));
        out.push(ev(json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 90000}})));
        out.push(ev(json!({"type": "message_stop"})));
        out
    }

    fn median(mut xs: Vec<f64>) -> f64 {
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    }

    #[test]
    #[ignore = "benchmark: run with --release --ignored --nocapture"]
    fn sse_parsing_throughput() {
        let events = big_stream(150_000, 100_000);
        let body: String = events.concat();
        let mb = body.len() as f64 / 1e6;

        // The event assembly alone, on pre-split event data.
        let datas: Vec<&str> = events
            .iter()
            .map(|e| e.split_once("data: ").unwrap().1.trim_end())
            .collect();
        let mut alone = Vec::new();
        for _ in 0..5 {
            let start = Instant::now();
            let mut a = Assembly::default();
            for d in &datas {
                a.apply(d, &NoObserver).unwrap();
            }
            let r = a.finish().unwrap();
            assert_eq!(r.tool_calls.len(), 1);
            alone.push(mb / start.elapsed().as_secs_f64());
        }

        // A reference point for this machine: parsing the same payloads into
        // `serde_json::Value`, the least any JSON-reading consumer does.
        let mut baseline = Vec::new();
        for _ in 0..5 {
            let start = Instant::now();
            for d in &datas {
                std::hint::black_box(serde_json::from_str::<serde_json::Value>(d).unwrap());
            }
            baseline.push(mb / start.elapsed().as_secs_f64());
        }

        // The whole adapter over loopback HTTP: reqwest, SSE parsing, assembly.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = body.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let mut s = stream.unwrap();
                let mut buf = vec![0u8; 1 << 20];
                let mut seen = Vec::new();
                // Read the request head and body (Content-Length).
                loop {
                    let n = s.read(&mut buf).unwrap();
                    seen.extend_from_slice(&buf[..n]);
                    if let Some(head_end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&seen[..head_end]).to_ascii_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        if seen.len() >= head_end + 4 + len {
                            break;
                        }
                    }
                }
                let head = format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", served.len());
                s.write_all(head.as_bytes()).unwrap();
                for piece in served.as_bytes().chunks(16 * 1024) {
                    s.write_all(piece).unwrap();
                }
            }
        });
        let timeouts = StreamTimeouts {
            first_event: Duration::from_secs(30),
            idle: Duration::from_secs(30),
        };
        let transport = HttpTransport::new(
            &format!("http://127.0.0.1:{port}"),
            Some("k"),
            Auth::XApiKey,
            &BTreeMap::new(),
            timeouts,
        )
        .unwrap();
        let model = HttpModel::anthropic(transport, "claude-sonnet-4-5", None);
        let messages = [Message::new(Role::User, "go", 0)];
        let request = Request {
            system: "",
            messages: &messages,
            tools: &[],
            output_schema: None,
            max_output_tokens: None,
            reasoning_effort: None,
            spec: "anthropic/claude-sonnet-4-5",
            prompt_cache: crate::model::PromptCache::On,
            cache_key: None,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut whole = Vec::new();
        for _ in 0..5 {
            let start = Instant::now();
            let r = rt.block_on(model.complete(&request, &NoObserver)).unwrap();
            assert_eq!(r.tool_calls.len(), 1);
            assert!(!r.tool_calls[0].garbled);
            whole.push(mb / start.elapsed().as_secs_f64());
        }
        println!(
            "anthropic SSE: {mb:.1} MB, {} events; serde_json::Value baseline {:.0} MB/s; assembly alone {:.0} MB/s; whole adapter over loopback {:.0} MB/s (medians of 5)",
            events.len(),
            median(baseline),
            median(alone),
            median(whole)
        );
    }
}
