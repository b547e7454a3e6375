//! Benchmarks for the Chat Completions and Ollama adapters against a loopback
//! stub (the test suite's own, `tests/cli/support/stub.rs`):
//!
//! 1. stream parsing throughput for one large streamed reply, in process
//!    (SSE parser + chunk assembler on in-memory bytes) and through the real
//!    adapter over loopback HTTP;
//! 2. whole agent runs of the release binary: N steps that each call
//!    `bash true`, then `submit`; wall time, tool time, peak RSS
//!    (`/usr/bin/time -v`), the same run on the offline script model, and
//!    the stub's own latency, to get the agent's overhead per step.
//!
//! Run with `bench/http.sh` (builds the release binary first).

#[path = "../tests/cli/support/stub.rs"]
#[allow(dead_code)]
mod stub;

#[path = "../tests/cli/support/openai.rs"]
#[allow(dead_code)]
mod openai;

#[path = "../tests/cli/support/ollama.rs"]
#[allow(dead_code)]
mod ollama;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{json, Value};

use stub::{End, Reply, Stub};
use tinyagent::model::adapter::HttpModel;
use tinyagent::model::http::{Auth, HttpTransport};
use tinyagent::model::openai::{ChunkAssembler, Dialect};
use tinyagent::model::sse::SseDecoder;
use tinyagent::model::{Message, Model, NoObserver, Request, Role};
use tinyagent::policy::StreamTimeouts;

const REPEATS: usize = 3;
const REPLY_BYTES: usize = 64 << 20;

fn main() {
    let bin = binary();
    println!("# tinyagent HTTP benchmark ({REPEATS} repeats, medians)\n");
    parsing();
    let latency = stub_latency(32);
    let large = stub_latency(64 << 10);
    println!(
        "stub latency (minimal keep-alive client, tool-call reply): {:.0} µs/request with a 32-byte request body, {:.0} µs with 64 KiB (a 200-step history)\n",
        latency * 1e6,
        large * 1e6
    );
    runs(&bin, latency);
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

// ---------- 1. parsing throughput ----------

/// A large text reply as Chat Completions SSE: ~230-byte chunk events of
/// ~28 bytes of text each, as OpenAI streams them.
fn sse_reply(target: usize) -> Vec<u8> {
    let piece = openai::chunk(json!({"content": "lorem ipsum dolor sit amet, "}), None);
    let mut body = Vec::with_capacity(target + 4096);
    body.extend_from_slice(
        openai::chunk(json!({"role": "assistant", "content": ""}), None).as_bytes(),
    );
    while body.len() < target {
        body.extend_from_slice(piece.as_bytes());
    }
    body.extend_from_slice(openai::chunk(json!({}), Some("stop")).as_bytes());
    body.extend_from_slice(openai::usage_chunk(10, 10, 0).as_bytes());
    body.extend_from_slice(openai::done().as_bytes());
    body
}

/// The same as Ollama NDJSON lines.
fn ndjson_reply(target: usize) -> Vec<u8> {
    let line = format!(
        "{}\n",
        ollama::message_line(
            json!({"role": "assistant", "content": "lorem ipsum dolor sit amet, "})
        )
    );
    let mut body = Vec::with_capacity(target + 4096);
    while body.len() < target {
        body.extend_from_slice(line.as_bytes());
    }
    body.extend_from_slice(format!("{}\n", ollama::done_line("stop")).as_bytes());
    body
}

/// A stub reply sending `body` in 64 KiB HTTP chunks.
fn big_reply(body: &[u8], content_type: &str) -> Reply {
    Reply {
        status: 200,
        headers: vec![("content-type".into(), content_type.into())],
        delay: Duration::ZERO,
        chunks: body
            .chunks(64 << 10)
            .map(|c| (Duration::ZERO, c.to_vec()))
            .collect(),
        end: End::Complete,
    }
}

fn parsing() {
    let rt = runtime();
    let sse = Arc::new(sse_reply(REPLY_BYTES));
    let mb = sse.len() as f64 / 1e6;

    // In process: our SSE parser and the chunk assembler on 16 KiB pieces,
    // and the same through `eventsource-stream` (the crate it replaced).
    let in_process: Vec<f64> = (0..REPEATS)
        .map(|_| {
            let started = Instant::now();
            let mut parser = SseDecoder::default();
            let mut reply = ChunkAssembler::default();
            for piece in sse.chunks(16 << 10) {
                parser.push(piece);
                while let Some(event) = parser.next_event().unwrap() {
                    reply.feed(&event.data, &NoObserver).unwrap();
                }
            }
            assert!(reply.finish().unwrap().text.len() > REPLY_BYTES / 10);
            mb / started.elapsed().as_secs_f64()
        })
        .collect();
    let crate_parser: Vec<f64> = (0..REPEATS)
        .map(|_| {
            let pieces: Vec<bytes::Bytes> = sse
                .chunks(16 << 10)
                .map(bytes::Bytes::copy_from_slice)
                .collect();
            let started = Instant::now();
            let text_len = rt.block_on(async {
                let mut events = futures::stream::iter(
                    pieces.into_iter().map(Ok::<_, std::convert::Infallible>),
                )
                .eventsource();
                let mut reply = ChunkAssembler::default();
                while let Some(Ok(event)) = events.next().await {
                    reply.feed(&event.data, &NoObserver).unwrap();
                }
                reply.finish().unwrap().text.len()
            });
            assert!(text_len > REPLY_BYTES / 10);
            mb / started.elapsed().as_secs_f64()
        })
        .collect();

    // Over loopback HTTP through the real adapter.
    let reply = big_reply(&sse, "text/event-stream");
    let server = Stub::start(move |_, _| reply.clone());
    let chat = HttpModel::chat_completions(
        transport(&format!("{}/v1", server.url())),
        "gpt-5",
        Dialect::OpenAi,
        None,
    );
    let sse_http = adapter_throughput(&rt, &chat, mb);

    let nd = ndjson_reply(REPLY_BYTES);
    let nd_mb = nd.len() as f64 / 1e6;
    let reply = big_reply(&nd, "application/x-ndjson");
    let server = Stub::start(move |_, _| reply.clone());
    let olla = HttpModel::ollama(transport(&server.url()), "qwen3", None);
    let nd_http = adapter_throughput(&rt, &olla, nd_mb);

    println!("## Stream parsing, one {mb:.0} MB reply\n");
    println!("| path | MB/s |\n| --- | --- |");
    println!(
        "| Chat Completions SSE, in process: `model::sse` parser + assembler | {:.0} |",
        median(in_process)
    );
    println!(
        "| same with `eventsource-stream` 0.2 as the parser (replaced) | {:.0} |",
        median(crate_parser)
    );
    println!(
        "| Chat Completions SSE, loopback HTTP, whole adapter | {:.0} |",
        median(sse_http)
    );
    println!(
        "| Ollama NDJSON, loopback HTTP, whole adapter | {:.0} |\n",
        median(nd_http)
    );
}

fn transport(endpoint: &str) -> HttpTransport {
    let timeouts = StreamTimeouts {
        first_event: Duration::from_secs(30),
        idle: Duration::from_secs(30),
    };
    HttpTransport::new(
        endpoint,
        Some("sk-bench"),
        Auth::Bearer,
        &BTreeMap::new(),
        timeouts,
    )
    .unwrap()
}

fn adapter_throughput(rt: &tokio::runtime::Runtime, model: &dyn Model, mb: f64) -> Vec<f64> {
    let messages = [Message::new(Role::User, "go", 0)];
    let request = Request {
        system: "",
        messages: &messages,
        tools: &[],
        output_schema: None,
        max_output_tokens: None,
        reasoning_effort: None,
        spec: "bench/model",
        prompt_cache: tinyagent::model::PromptCache::On,
        cache_key: None,
    };
    (0..REPEATS)
        .map(|_| {
            let started = Instant::now();
            let response = rt.block_on(model.complete(&request, &NoObserver)).unwrap();
            assert!(response.text.len() > REPLY_BYTES / 10);
            mb / started.elapsed().as_secs_f64()
        })
        .collect()
}

// ---------- 2. agent runs ----------

/// Seconds per request of the stub as a minimal keep-alive client sees it.
fn stub_latency(body_len: usize) -> f64 {
    let server = Stub::sequence(vec![openai::chat_sse_tool_call(
        "call_1",
        "bash",
        r#"{"command":"true"}"#,
    )]);
    let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let body = format!(
        "{{\"model\":\"gpt-5\",\"pad\":\"{}\"}}",
        "x".repeat(body_len.saturating_sub(26))
    );
    let body = body.as_bytes();
    let mut samples = Vec::new();
    for _ in 0..400 {
        let started = Instant::now();
        write!(
            stream,
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        stream.write_all(body).unwrap();
        read_chunked_reply(&mut reader);
        samples.push(started.elapsed().as_secs_f64());
    }
    median(samples)
}

fn read_chunked_reply(reader: &mut BufReader<TcpStream>) {
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
    }
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let size = usize::from_str_radix(line.trim(), 16).unwrap();
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk).unwrap();
        if size == 0 {
            return;
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Api {
    Chat,
    Ollama,
    Script,
}

struct RunStats {
    wall: f64,
    tool_seconds: f64,
    rss_kb: u64,
}

fn runs(bin: &Path, latency: f64) {
    println!("## Agent runs: N steps of `bash true`, then `submit`\n");
    println!("| API | steps | wall (s) | per step (ms) | tool time per step (ms) | agent overhead per step (ms) | over script model per step (ms) | peak RSS (MB) |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for steps in [200usize, 50, 800] {
        let script = median_run(bin, Api::Script, steps);
        for api in [Api::Chat, Api::Ollama] {
            let run = median_run(bin, api, steps);
            let total = steps as f64 + 1.0;
            let per_step = run.wall / total * 1e3;
            let tool = run.tool_seconds / steps as f64 * 1e3;
            let overhead = (run.wall - run.tool_seconds) / total * 1e3 - latency * 1e3;
            let over_script = (run.wall - script.wall) / total * 1e3;
            println!(
                "| {} | {steps} | {:.3} | {per_step:.2} | {tool:.2} | {overhead:.2} | {over_script:.2} | {:.1} |",
                name(api),
                run.wall,
                run.rss_kb as f64 / 1024.0
            );
        }
        println!(
            "| script (no HTTP) | {steps} | {:.3} | {:.2} | {:.2} | {:.2} | 0 | {:.1} |",
            script.wall,
            script.wall / (steps as f64 + 1.0) * 1e3,
            script.tool_seconds / steps as f64 * 1e3,
            (script.wall - script.tool_seconds) / (steps as f64 + 1.0) * 1e3,
            script.rss_kb as f64 / 1024.0
        );
    }
    println!();
}

fn name(api: Api) -> &'static str {
    match api {
        Api::Chat => "Chat Completions",
        Api::Ollama => "Ollama",
        Api::Script => "script",
    }
}

fn median_run(bin: &Path, api: Api, steps: usize) -> RunStats {
    let runs: Vec<RunStats> = (0..REPEATS).map(|_| agent_run(bin, api, steps)).collect();
    RunStats {
        wall: median(runs.iter().map(|r| r.wall).collect()),
        tool_seconds: median(runs.iter().map(|r| r.tool_seconds).collect()),
        rss_kb: median(runs.iter().map(|r| r.rss_kb as f64).collect()) as u64,
    }
}

fn agent_run(bin: &Path, api: Api, steps: usize) -> RunStats {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let server = match api {
        Api::Chat => Some(Stub::start(move |i, _| {
            if i < steps {
                openai::chat_sse_tool_call(&format!("call_{i}"), "bash", r#"{"command":"true"}"#)
            } else {
                openai::chat_sse_submit("call_end", "done")
            }
        })),
        Api::Ollama => Some(Stub::start(move |i, _| {
            if i < steps {
                ollama::ollama_tool_call("bash", json!({"command": "true"}))
            } else {
                ollama::ollama_tool_call("submit", json!({"output": "done"}))
            }
        })),
        Api::Script => None,
    };
    let mut cmd = Command::new("/usr/bin/time");
    cmd.arg("-v").arg(bin);
    match (api, &server) {
        (Api::Chat, Some(s)) => {
            cmd.args(["-m", "openai/gpt-5"])
                .env("OPENAI_BASE_URL", format!("{}/v1", s.url()))
                .env("OPENAI_API_KEY", "sk-bench");
        }
        (Api::Ollama, Some(s)) => {
            cmd.args(["-m", "ollama/qwen3"]).env("OLLAMA_HOST", s.url());
        }
        _ => {
            let script = dir.path().join("script.yaml");
            std::fs::write(
                &script,
                format!("- tool_calls: [{{name: bash, arguments: {{command: \"true\"}}}}]\n  repeat: {steps}\n- tool_calls: [{{name: submit, arguments: {{output: done}}}}]\n"),
            )
            .unwrap();
            cmd.args(["-m", &format!("script/{}", script.display())]);
        }
    }
    let home = dir.path().join("home");
    cmd.args(["--json", "bench task"])
        .current_dir(&work)
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .stdin(Stdio::null());
    let started = Instant::now();
    let out = cmd.output().unwrap();
    let wall = started.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut tool_ms = 0u64;
    let mut status = Value::Null;
    for line in stdout.lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        match event["type"].as_str() {
            Some("tool.finished") => tool_ms += event["duration_ms"].as_u64().unwrap_or(0),
            Some("run.finished") => status = event["status"].clone(),
            _ => {}
        }
    }
    assert_eq!(status, "submitted", "run failed: {stderr}");
    let rss_kb = stderr
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    RunStats {
        wall,
        tool_seconds: tool_ms as f64 / 1e3,
        rss_kb,
    }
}

fn binary() -> PathBuf {
    let path = std::env::var_os("TINYAGENT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/tinyagent"));
    assert!(
        path.exists(),
        "build the release binary first: {}",
        path.display()
    );
    path
}
