//! Benchmark: what one step's request costs as the history grows, for each
//! wire adapter: building the body and writing it to a loopback server that
//! reads it whole and answers at once (an HTTP 400, so no reply parsing is
//! timed). Histories of about 1, 4 and 16 MB of agent steps (a `bash` call
//! and a 2 KB tool result each); each measured step appends one more step
//! to the history, as the loop does. Prints medians of `STEPS` steps per
//! size and the slope in ms per MB, in wall time and in CPU time of the
//! agent's thread alone (the server's reading not in it). The same is
//! measured for a body built beforehand and only sent (the transport
//! alone), and tinyagent's own part is what a step grows beyond that.
//!
//! A second benchmark builds the bodies alone, in process, both ways (one
//! `Value` serialised, as before the cache, and from kept bytes), each way
//! in its own run of steps.
//!
//! `bench/request.sh`, or
//! `cargo test --release --lib model::request_bench -- --ignored --nocapture`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use serde_json::json;

use super::adapter::HttpModel;
use super::http::{Auth, HttpTransport};
use super::openai::Dialect;
use super::{Message, Model, NoObserver, Request, Role, ToolCall, ToolSpec};
use crate::policy::StreamTimeouts;

const STEPS: usize = 15;
const SIZES_MB: [usize; 3] = [1, 4, 16];

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// A loopback server on its own thread: per request, reads the head and
/// `content-length` bytes of body, then answers a short HTTP 400 (keep-alive).
fn sink_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || serve(stream));
        }
    });
    port
}

fn serve(stream: TcpStream) {
    stream.set_nodelay(true).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::with_capacity(1 << 20, stream);
    let mut sink = vec![0u8; 1 << 20];
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        while length > 0 {
            let n = reader.read(&mut sink[..length.min(1 << 20)]).unwrap();
            length -= n;
        }
        let body = r#"{"error":{"message":"bench","type":"invalid_request_error"}}"#;
        let reply = format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        writer.write_all(reply.as_bytes()).unwrap();
    }
}

/// About 2 KB of source-like text with quotes, backslashes and newlines.
fn tool_output(i: usize) -> String {
    let line = format!(
        "    let value_{i} = format!(\"{{}}\\t{{:?}}\", name, \"quoted\"); // naïve → done\n"
    );
    line.repeat(2048 / line.len() + 1)
}

/// One agent step: an assistant `bash` call and its result.
fn step(history: &mut Vec<Message>, spec: &str) {
    let i = history.len();
    let call = ToolCall {
        id: format!("call_{i}"),
        name: "bash".into(),
        arguments: json!({"command": format!("sed -n 1,40p src/file_{i}.rs")}),
        garbled: false,
        oversized: None,
    };
    history.push(Message {
        tool_calls: vec![call.clone()],
        model: Some(spec.into()),
        ..Message::new(Role::Assistant, "", i as u32)
    });
    history.push(Message::tool_result(&call, tool_output(i), i as u32));
}

fn history(mb: usize, spec: &str) -> (Vec<Message>, usize) {
    let mut messages = vec![Message::new(Role::User, "fix the failing test", 0)];
    let mut bytes = 0;
    while bytes < mb << 20 {
        step(&mut messages, spec);
        bytes += messages[messages.len() - 1].content.len() + 60;
    }
    (messages, bytes)
}

fn tools() -> Vec<ToolSpec> {
    ["bash", "read_file", "write_file", "submit"]
        .iter()
        .map(|name| ToolSpec {
            name: (*name).into(),
            description: format!("The {name} tool."),
            parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
        })
        .collect()
}

/// One step's request for `messages`.
fn request<'a>(messages: &'a [Message], tools: &'a [ToolSpec], spec: &'a str) -> Request<'a> {
    Request {
        system: "You are a coding agent.",
        messages,
        tools,
        output_schema: None,
        max_output_tokens: None,
        reasoning_effort: None,
        spec,
        prompt_cache: crate::model::PromptCache::On,
        cache_key: None,
    }
}

fn transport(port: u16, auth: Auth) -> HttpTransport {
    let timeouts = StreamTimeouts {
        first_event: Duration::from_secs(60),
        idle: Duration::from_secs(60),
    };
    HttpTransport::new(
        &format!("http://127.0.0.1:{port}"),
        Some("k"),
        auth,
        &BTreeMap::new(),
        timeouts,
    )
    .unwrap()
}

#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn request_cost_per_step() {
    let port = sink_server();
    let adapters: Vec<(&str, &str, Box<dyn Model>)> = vec![
        (
            "Chat Completions",
            "openai/gpt-5",
            Box::new(HttpModel::chat_completions(
                transport(port, Auth::Bearer),
                "gpt-5",
                Dialect::OpenAi,
                None,
            )),
        ),
        (
            "Anthropic Messages",
            "anthropic/claude-sonnet-4-5",
            Box::new(HttpModel::anthropic(
                transport(port, Auth::XApiKey),
                "claude-sonnet-4-5",
                None,
            )),
        ),
        (
            "Responses",
            "responses/gpt-5",
            Box::new(HttpModel::responses(
                transport(port, Auth::Bearer),
                "gpt-5",
                None,
            )),
        ),
        (
            "Ollama",
            "ollama/qwen3",
            Box::new(HttpModel::ollama(
                transport(port, Auth::Bearer),
                "qwen3",
                None,
            )),
        ),
    ];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tools = tools();
    println!("\n| API | history (MB) | messages | per step, median (ms) | ms per MB | agent thread CPU per step (ms) |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let mut slopes = Vec::new();
    let mut cpu_slopes = Vec::new();
    for (name, spec, model) in &adapters {
        let mut points = Vec::new();
        let mut cpu_points = Vec::new();
        for mb in SIZES_MB {
            let (mut messages, bytes) = history(mb, spec);
            let mut samples = Vec::new();
            let mut cpu_samples = Vec::new();
            // The first request fills any cache; the loop's steps follow.
            for i in 0..=STEPS {
                step(&mut messages, spec);
                let request = request(&messages, &tools, spec);
                let started = Instant::now();
                let cpu_before = thread_cpu_ms();
                let result = rt.block_on(model.complete(&request, &NoObserver));
                let cpu = thread_cpu_ms() - cpu_before;
                let elapsed = started.elapsed().as_secs_f64() * 1e3;
                assert!(result.is_err(), "the sink answers 400");
                if i > 0 {
                    samples.push(elapsed);
                    cpu_samples.push(cpu);
                }
            }
            let ms = median(samples);
            let cpu = median(cpu_samples);
            let size = bytes as f64 / (1 << 20) as f64;
            points.push((size, ms));
            cpu_points.push((size, cpu));
            println!(
                "| {name} | {size:.1} | {} | {ms:.2} | {:.2} | {cpu:.2} |",
                messages.len(),
                ms / size
            );
        }
        slopes.push((*name, slope(&points)));
        cpu_slopes.push((*name, slope(&cpu_points)));
    }
    let floor = transport_alone(port, &rt, &tools);
    let (floor_ms, floor_cpu) = (slope(&floor.0), slope(&floor.1));
    slopes.push((TRANSPORT_ALONE, floor_ms));
    cpu_slopes.push((TRANSPORT_ALONE, floor_cpu));
    print_slopes(&slopes);
    println!("\nOn the agent's thread alone (CPU time: building the body and writing it to the socket, not the server reading it):");
    print_slopes(&cpu_slopes);
    println!("\ntinyagent's own part: growth per MB beyond sending the same bytes (ms per step, wall | agent thread CPU):\n");
    println!("| API | wall | CPU |\n| --- | --- | --- |");
    for ((name, ms), (_, cpu)) in slopes.iter().zip(&cpu_slopes) {
        if *name != TRANSPORT_ALONE {
            println!("| {name} | {:.2} | {:.2} |", ms - floor_ms, cpu - floor_cpu);
        }
    }
}

/// (history in MB, ms) for each size measured.
type Points = Vec<(f64, f64)>;

const TRANSPORT_ALONE: &str = "the same bytes, built beforehand (transport alone)";

/// What sending a step's bytes costs with nothing built: a Chat Completions
/// body for each history size, made once and posted `STEPS` times through
/// the same transport. Points (MB, ms) in wall time and agent-thread CPU.
fn transport_alone(
    port: u16,
    rt: &tokio::runtime::Runtime,
    tools: &[ToolSpec],
) -> (Points, Points) {
    use super::spec::WireOptions;
    use super::wire_cache::WireCache;
    let spec = "openai/gpt-5";
    let transport = transport(port, Auth::Bearer);
    let (mut points, mut cpu_points) = (Vec::new(), Vec::new());
    for mb in SIZES_MB {
        let (messages, bytes) = history(mb, spec);
        let request = request(&messages, tools, spec);
        let cache = WireCache::default();
        let body = bytes::Bytes::from(
            super::openai::request_bytes(
                "gpt-5",
                Dialect::OpenAi,
                None,
                &request,
                WireOptions::default(),
                &cache,
            )
            .bytes,
        );
        let (mut samples, mut cpu_samples) = (Vec::new(), Vec::new());
        for i in 0..=STEPS {
            let started = Instant::now();
            let cpu_before = thread_cpu_ms();
            let result = rt.block_on(transport.post("/v1/chat/completions", body.clone()));
            cpu_samples.push(thread_cpu_ms() - cpu_before);
            samples.push(started.elapsed().as_secs_f64() * 1e3);
            assert!(result.is_err(), "the sink answers 400");
            if i == 0 {
                samples.clear();
                cpu_samples.clear();
            }
        }
        let (ms, cpu) = (median(samples), median(cpu_samples));
        let size = bytes as f64 / (1 << 20) as f64;
        println!(
            "| {TRANSPORT_ALONE} | {size:.1} | {} | {ms:.2} | {:.2} | {cpu:.2} |",
            messages.len(),
            ms / size
        );
        points.push((size, ms));
        cpu_points.push((size, cpu));
    }
    (points, cpu_points)
}

/// CPU time this thread has used, in ms.
fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

/// How much a step's cost grows per MB of history: from the smallest to
/// the largest history measured.
fn slope(points: &[(f64, f64)]) -> f64 {
    let (first, last) = (points[0], points[points.len() - 1]);
    (last.1 - first.1) / (last.0 - first.0)
}

fn print_slopes(slopes: &[(&str, f64)]) {
    println!("\n| API | growth per MB of history (ms per step) |");
    println!("| --- | --- |");
    for (name, slope) in slopes {
        println!("| {name} | {slope:.2} |");
    }
}

// ---------- in process: the body alone ----------

type Build = Box<dyn Fn(&Request<'_>) -> bytes::Bytes>;

/// Each adapter's body built two ways, no HTTP: the whole body as one
/// `serde_json::Value` serialised (how every request was built before the
/// cache) and written from the kept message bytes.
#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn request_building_in_process() {
    use super::spec::WireOptions;
    use super::wire_cache::WireCache;
    use super::{anthropic, ollama, openai, responses};

    let bytes = |v: serde_json::Value| bytes::Bytes::from(serde_json::to_vec(&v).unwrap());
    let chat = WireCache::default();
    let messages = WireCache::default();
    let items = WireCache::default();
    let olla = WireCache::default();
    let builders: Vec<(&str, &str, Build, Build)> = vec![
        (
            "Chat Completions",
            "openai/gpt-5",
            Box::new(move |r| bytes(openai::request_body("gpt-5", Dialect::OpenAi, None, r))),
            Box::new(move |r| {
                let body = openai::request_bytes(
                    "gpt-5",
                    Dialect::OpenAi,
                    None,
                    r,
                    WireOptions::default(),
                    &chat,
                );
                chat.lend(body)
            }),
        ),
        (
            "Anthropic Messages",
            "anthropic/claude-sonnet-4-5",
            Box::new(move |r| bytes(anthropic::request_body("claude-sonnet-4-5", r, None))),
            Box::new(move |r| {
                let body = anthropic::request_bytes(
                    "claude-sonnet-4-5",
                    r,
                    None,
                    WireOptions::default(),
                    &messages,
                );
                messages.lend(body)
            }),
        ),
        (
            "Responses",
            "responses/gpt-5",
            Box::new(move |r| bytes(responses::request_body("gpt-5", r, None))),
            Box::new(move |r| {
                let body =
                    responses::request_bytes("gpt-5", r, None, WireOptions::default(), &items);
                items.lend(body)
            }),
        ),
        (
            "Ollama",
            "ollama/qwen3",
            Box::new(move |r| bytes(ollama::request_body("qwen3", None, r))),
            Box::new(move |r| {
                let body = ollama::request_bytes("qwen3", None, r, WireOptions::default(), &olla);
                olla.lend(body)
            }),
        ),
    ];
    let tools = tools();
    println!("\n| API | history (MB) | one `Value`, serialised (ms) | from kept bytes (ms) | kept bytes, ms per MB |");
    println!("| --- | --- | --- | --- | --- |");
    let mut slopes = Vec::new();
    for (name, spec, fresh, cached) in &builders {
        let mut points = Vec::new();
        for mb in SIZES_MB {
            // Each way in its own loop, as the loop would run it: one way's
            // freed memory is not in the other's measurement.
            let (history_before, size) = history(mb, spec);
            let run = |build: &Build| {
                let mut messages = history_before.clone();
                let mut times = Vec::new();
                let mut last = bytes::Bytes::new();
                for i in 0..=STEPS {
                    step(&mut messages, spec);
                    let request = request(&messages, &tools, spec);
                    // The last request is done with its body, as in the loop.
                    drop(std::mem::take(&mut last));
                    let started = Instant::now();
                    last = std::hint::black_box(build(&request));
                    if i > 0 {
                        times.push(started.elapsed().as_secs_f64() * 1e3);
                    }
                }
                (times, last)
            };
            let (after, b) = run(cached);
            let (before, a) = run(fresh);
            assert_eq!(a, b);
            let size = size as f64 / (1 << 20) as f64;
            let after = median(after);
            points.push((size, after));
            println!(
                "| {name} | {size:.1} | {:.2} | {after:.2} | {:.2} |",
                median(before),
                after / size
            );
        }
        slopes.push((*name, slope(&points)));
    }
    print_slopes(&slopes);
}
