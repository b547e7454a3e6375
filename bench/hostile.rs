//! Hostile and huge replies through the real adapters over loopback: time
//! and peak RSS per case (SPEC 4 "Hostile or broken input", issue 12).
//!
//! The parent process serves each case from the test suite's stub; a child
//! process (this binary again, `--case NAME`) runs one adapter request
//! against it and reports its wall time and its peak RSS growth (VmHWM after
//! minus VmHWM before the request), so the stub's own buffers never count.
//!
//! Run: `cargo bench --bench hostile` (release profile). Prints a Markdown
//! table of medians over `REPEATS` runs.

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
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use stub::{End, Reply, Stub};
use tinyagent::model::http::{Auth, HttpTransport};
use tinyagent::model::ollama::OllamaChat;
use tinyagent::model::openai::{ChatCompletions, Dialect};
use tinyagent::model::{Message, Model, NoObserver, Request, Role};
use tinyagent::policy::StreamTimeouts;

const REPEATS: usize = 3;
const MB: usize = 1 << 20;

/// (name, what it is)
const CASES: &[(&str, &str)] = &[
    (
        "sse_arg_1mb",
        "Chat Completions: 1 MB tool argument in one SSE line",
    ),
    (
        "sse_arg_4mb",
        "Chat Completions: 4 MB tool argument in one SSE line",
    ),
    (
        "sse_arg_30mb",
        "Chat Completions: 30 MB tool argument in one SSE line",
    ),
    (
        "ndjson_arg_30mb",
        "Ollama: 30 MB tool argument in one NDJSON line",
    ),
    (
        "sse_line_300mb",
        "Chat Completions: 300 MB SSE line (refused past 64 MiB)",
    ),
    (
        "ndjson_line_300mb",
        "Ollama: 300 MB NDJSON line (refused past 64 MiB)",
    ),
    (
        "error_body_300mb",
        "HTTP 400 with a 300 MB error body (64 KiB read)",
    ),
    ("index_1e12", "tool_calls index 10^12"),
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--case") {
        child(&args[i + 1], &args[i + 2]);
        return;
    }
    println!("# tinyagent hostile-input benchmark ({REPEATS} runs each, medians)\n");
    println!("| case | outcome | wall time | peak RSS growth |");
    println!("| --- | --- | --- | --- |");
    for (name, what) in CASES {
        let mut times = Vec::new();
        let mut rss = Vec::new();
        let mut outcome = String::new();
        for _ in 0..REPEATS {
            let stub = Stub::sequence(vec![reply(name)]);
            let out = Command::new(std::env::current_exe().unwrap())
                .args(["--case", name, &stub.url()])
                .output()
                .unwrap();
            let line = String::from_utf8_lossy(&out.stdout);
            let v: Value = serde_json::from_str(line.trim()).unwrap_or_else(|_| {
                panic!("{name}: {line} {}", String::from_utf8_lossy(&out.stderr))
            });
            times.push(v["secs"].as_f64().unwrap());
            rss.push(v["rss_mb"].as_f64().unwrap());
            outcome = v["outcome"].as_str().unwrap().to_string();
        }
        println!(
            "| {what} | {outcome} | {:.3} s | {:.0} MB |",
            median(times),
            median(rss)
        );
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// A reply of `body` bytes in 16 KiB HTTP chunks.
fn chunked(status: u16, content_type: &str, body: Vec<u8>) -> Reply {
    Reply {
        status,
        headers: vec![("content-type".into(), content_type.into())],
        delay: Duration::ZERO,
        chunks: body
            .chunks(16 << 10)
            .map(|c| (Duration::ZERO, c.to_vec()))
            .collect(),
        end: End::Complete,
    }
}

/// A tool call whose arguments (`{"content": "xxx…"}`) are `size` bytes, in
/// one chunk event.
fn sse_arg(size: usize) -> Reply {
    let arguments = json!({"content": "x".repeat(size)}).to_string();
    let mut body = openai::chunk(
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "write_file", "arguments": arguments}}]}),
        None,
    )
    .into_bytes();
    body.extend_from_slice(openai::chunk(json!({}), Some("tool_calls")).as_bytes());
    body.extend_from_slice(openai::usage_chunk(10, 10, 0).as_bytes());
    body.extend_from_slice(openai::done().as_bytes());
    chunked(200, "text/event-stream", body)
}

fn reply(name: &str) -> Reply {
    match name {
        "sse_arg_1mb" => sse_arg(MB),
        "sse_arg_4mb" => sse_arg(4 * MB),
        "sse_arg_30mb" => sse_arg(30 * MB),
        "ndjson_arg_30mb" => {
            let line = ollama::message_line(
                json!({"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "write_file", "arguments": {"content": "x".repeat(30 * MB)}}}]}),
            );
            let body = format!("{line}\n{}\n", ollama::done_line("stop"));
            chunked(200, "application/x-ndjson", body.into_bytes())
        }
        "sse_line_300mb" => {
            let mut body = b"data: ".to_vec();
            body.resize(300 * MB, b'x');
            chunked(200, "text/event-stream", body)
        }
        "ndjson_line_300mb" => {
            let mut body = b"{\"message\": \"".to_vec();
            body.resize(300 * MB, b'x');
            chunked(200, "application/x-ndjson", body)
        }
        "error_body_300mb" => {
            let mut body = br#"{"error": {"message": ""#.to_vec();
            body.resize(300 * MB, b'x');
            chunked(400, "application/json", body)
        }
        "index_1e12" => Reply::sse(vec![
            openai::chunk(
                json!({"tool_calls": [{"index": 1_000_000_000_000u64, "id": "c", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}),
                None,
            ),
            openai::chunk(json!({}), Some("tool_calls")),
            openai::done(),
        ]),
        other => panic!("unknown case {other}"),
    }
}

fn peak_rss_kb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0)
}

/// One request of `case` against `url`; prints `{secs, rss_mb, outcome}`.
fn child(case: &str, url: &str) {
    let timeouts = StreamTimeouts {
        first_event: Duration::from_secs(60),
        idle: Duration::from_secs(60),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let messages = [Message::new(Role::User, "go", 0)];
    let request = Request {
        system: "",
        messages: &messages,
        tools: &[],
        output_schema: None,
        max_output_tokens: None,
        reasoning_effort: None,
        spec: "bench/m",
    };
    let model: Box<dyn Model> = if case.starts_with("ndjson") {
        let transport = HttpTransport::new(url, None, Auth::Bearer, &BTreeMap::new(), timeouts);
        Box::new(OllamaChat::new(transport.unwrap(), "m", None))
    } else {
        let transport = HttpTransport::new(
            &format!("{url}/v1"),
            Some("k"),
            Auth::Bearer,
            &BTreeMap::new(),
            timeouts,
        );
        Box::new(ChatCompletions::new(
            transport.unwrap(),
            "m",
            Dialect::Compatible,
            None,
        ))
    };
    let before = peak_rss_kb();
    let started = Instant::now();
    let result = rt.block_on(model.complete(&request, &NoObserver));
    let secs = started.elapsed().as_secs_f64();
    let rss_mb = (peak_rss_kb() - before) / 1024.0;
    let outcome = match &result {
        Ok(r) => format!(
            "ok, {} call(s), {} argument bytes",
            r.tool_calls.len(),
            r.tool_calls
                .iter()
                .map(|c| c.arguments.to_string().len())
                .sum::<usize>()
        ),
        Err(e) => format!("{} ({})", e.reason(), e),
    };
    println!(
        "{}",
        json!({"secs": secs, "rss_mb": rss_mb, "outcome": outcome})
    );
}
