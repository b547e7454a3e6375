//! Hostile and huge replies through the real adapters over loopback: time
//! and peak RSS per case (SPEC 4 "Hostile or broken input", issue 12).
//!
//! The parent process serves each case from the test suite's stub; a child
//! process (this binary again, `--case NAME`) runs one adapter request
//! against it and reports its wall time and its peak RSS growth (VmHWM after
//! minus VmHWM before the request), so the stub's own buffers never count.
//!
//! The second table runs the whole binary (`tinyagent --json`) against a
//! stub whose first reply calls `write_file` with a 30 MB argument, in each
//! wire API's form, and whose next reply submits: the figure is the
//! tinyagent process's own peak RSS (`ru_maxrss` from `wait4`, which counts
//! a descendant only if one outgrew it; these runs start none).
//!
//! Run: `cargo bench --bench hostile` (release profile). Prints Markdown
//! tables of medians over `REPEATS` runs. `cargo bench --bench hostile --
//! --serve CASE` only serves a whole-run case and prints its URL, for timing
//! the binary with an outside tool (see `docs/maintainers/hostile.md`).

#[path = "../tests/cli/support/stub.rs"]
#[allow(dead_code)]
mod stub;

#[path = "../tests/cli/support/openai.rs"]
#[allow(dead_code)]
mod openai;

#[path = "../tests/cli/support/ollama.rs"]
#[allow(dead_code)]
mod ollama;

#[path = "../tests/cli/support/anthropic.rs"]
#[allow(dead_code)]
mod anthropic;

#[path = "../tests/cli/support/responses.rs"]
#[allow(dead_code)]
mod responses;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use stub::{End, Reply, Stub};
use tinyagent::model::adapter::HttpModel;
use tinyagent::model::http::{Auth, HttpTransport};
use tinyagent::model::openai::Dialect;
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
        "sse_arg_3mb",
        "Chat Completions: 3 MB tool argument in one SSE line",
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

/// (name, what it is): whole runs of the binary, the first reply calling
/// `write_file` with a 30 MB argument in the wire API's own form.
const RUNS: &[(&str, &str)] = &[
    ("run_chat", "Chat Completions, one SSE line"),
    (
        "run_chat_body",
        "Chat Completions, one JSON body (not streamed)",
    ),
    ("run_responses", "Responses, deltas then `.done` items"),
    ("run_anthropic", "Anthropic, one `input_json_delta`"),
    ("run_ollama", "Ollama, one NDJSON line"),
];

/// The size of the whole runs' tool argument.
const RUN_ARGUMENT: usize = 30 * MB;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--case") {
        child(&args[i + 1], &args[i + 2]);
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--measure") {
        measure(&args[i + 1], &args[i + 2]);
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--serve") {
        serve(&args[i + 1]);
        return;
    }
    // `cargo bench --bench hostile -- run_` runs only the cases so named.
    let filter = args[1..]
        .iter()
        .find(|a| !a.starts_with('-'))
        .cloned()
        .unwrap_or_default();
    let chosen = |name: &str| name.contains(filter.as_str());
    println!("# tinyagent hostile-input benchmark ({REPEATS} runs each, medians)\n");
    if filter.is_empty() {
        in_process();
    }
    println!("| case | outcome | wall time | peak RSS growth |");
    println!("| --- | --- | --- | --- |");
    for (name, what) in CASES.iter().filter(|(n, _)| chosen(n)) {
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
    whole_runs(&chosen);
}

/// The whole binary per wire API: its own peak RSS over a run whose first
/// reply carries a 30 MB tool argument.
fn whole_runs(chosen: &dyn Fn(&str) -> bool) {
    println!(
        "\n## Whole runs: `tinyagent --json`, first reply `write_file` with a {} MB argument, then `submit`\n",
        RUN_ARGUMENT / MB
    );
    println!("| wire form | outcome | wall time | tinyagent peak RSS |");
    println!("| --- | --- | --- | --- |");
    for (name, what) in RUNS.iter().filter(|(n, _)| chosen(n)) {
        let mut times = Vec::new();
        let mut rss = Vec::new();
        let mut outcome = String::new();
        for _ in 0..REPEATS {
            let stub = run_stub(name);
            let (secs, peak_mb, said) = whole_run(name, &stub.url());
            times.push(secs);
            rss.push(peak_mb);
            outcome = said;
        }
        println!(
            "| {what} | {outcome} | {:.3} s | {:.0} MB |",
            median(times),
            median(rss)
        );
    }
}

/// A stub for a whole-run case: the hostile reply until a tool result comes
/// back, then `submit`.
fn run_stub(case: &str) -> Stub {
    let (first, then) = (run_reply(case, true), run_reply(case, false));
    Stub::start(move |_, request| {
        let body = String::from_utf8_lossy(&request.body);
        let answered = [
            "\"role\":\"tool\"",
            "\"tool_result\"",
            "\"function_call_output\"",
        ]
        .iter()
        .any(|m| body.contains(m));
        if answered {
            then.clone()
        } else {
            first.clone()
        }
    })
}

/// The first (`hostile`) or the closing reply of a whole-run case.
fn run_reply(case: &str, hostile: bool) -> Reply {
    let arguments = if hostile {
        json!({"path": "big.txt", "content": "x".repeat(RUN_ARGUMENT)})
    } else {
        json!({"output": "done"})
    };
    let name = if hostile { "write_file" } else { "submit" };
    match case {
        "run_chat" => openai::chat_sse_tool_call("call_1", name, &arguments.to_string()),
        "run_chat_body" => Reply::json(
            200,
            &json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
                    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments.to_string()}}]}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}),
        ),
        "run_responses" => responses::tool_reply("call_1", name, arguments),
        "run_anthropic" => anthropic::tool_reply("toolu_1", name, arguments),
        "run_ollama" => ollama::ollama_tool_call(name, arguments),
        other => panic!("unknown whole-run case {other}"),
    }
}

/// The model spec and the environment that point the binary at `url`.
fn run_target(case: &str, url: &str) -> (&'static str, Vec<(&'static str, String)>) {
    match case {
        "run_chat" | "run_chat_body" => (
            "openai/m",
            vec![
                ("OPENAI_BASE_URL", format!("{url}/v1")),
                ("OPENAI_API_KEY", "k".into()),
            ],
        ),
        "run_responses" => (
            "responses/m",
            vec![
                ("OPENAI_BASE_URL", format!("{url}/v1")),
                ("OPENAI_API_KEY", "k".into()),
            ],
        ),
        "run_anthropic" => (
            "anthropic/m",
            vec![
                ("ANTHROPIC_BASE_URL", url.to_string()),
                ("ANTHROPIC_API_KEY", "k".into()),
            ],
        ),
        "run_ollama" => ("ollama/m", vec![("OLLAMA_HOST", url.to_string())]),
        other => panic!("unknown whole-run case {other}"),
    }
}

/// Runs the binary once for `case` through a `--measure` child of ours:
/// wall seconds, its peak RSS in MB, and what became of the call.
fn whole_run(case: &str, url: &str) -> (f64, f64, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--measure", case, url])
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(line.trim())
        .unwrap_or_else(|_| panic!("{case}: {line} {}", String::from_utf8_lossy(&out.stderr)));
    (
        v["secs"].as_f64().unwrap(),
        v["rss_mb"].as_f64().unwrap(),
        v["outcome"].as_str().unwrap().to_string(),
    )
}

/// `--measure CASE URL`: runs the binary once and prints `{secs, rss_mb,
/// outcome}`. A process of its own, small when it forks: a child's
/// `ru_maxrss` starts at the RSS of the process it was forked from, and the
/// bench's parent holds the stubs' replies.
// The child is reaped by `wait4` (for its rusage), not by `Child::wait`.
#[allow(clippy::zombie_processes)]
fn measure(case: &str, url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let (spec, vars) = run_target(case, url);
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_tinyagent"))
        .env_clear()
        .env("HOME", dir.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(vars)
        .current_dir(&work)
        .args(["--json", "--no-save", "-m", spec, "write big.txt"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (code, peak_kb) = wait_with_peak(child.id() as libc::pid_t);
    let secs = started.elapsed().as_secs_f64();
    let ran = work.join("big.txt").exists();
    let outcome = format!(
        "exit {code}, the call {}",
        if ran { "ran" } else { "was refused" }
    );
    println!(
        "{}",
        json!({"secs": secs, "rss_mb": peak_kb as f64 / 1024.0, "outcome": outcome})
    );
}

/// Waits for `pid`; its exit code and peak RSS in KiB (`ru_maxrss`).
fn wait_with_peak(pid: libc::pid_t) -> (i32, i64) {
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our own unwaited child; both pointers are live.
    let got = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(got, pid, "wait4");
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (code, usage.ru_maxrss)
}

/// `--serve CASE`: serves a whole-run case until killed, printing the URL
/// and the model spec and variables that point the binary at it.
fn serve(case: &str) {
    let stub = run_stub(case);
    let (spec, vars) = run_target(case, &stub.url());
    let vars: Vec<String> = vars.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("{} -m {spec}", vars.join(" "));
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::park();
    }
}

/// The parsing alone, on in-memory 16 KiB pieces (no HTTP, no stub), next
/// to plain `serde_json::Value` parsing of the same line: the least any
/// JSON-reading consumer does, as this machine's reference point.
fn in_process() {
    use tinyagent::model::openai::ChunkAssembler;
    use tinyagent::model::sse::SseDecoder;
    let Reply { chunks, .. } = sse_arg(30 * MB);
    let body: Vec<u8> = chunks.into_iter().flat_map(|(_, c)| c).collect();
    let mut ours = Vec::new();
    let mut plain = Vec::new();
    for _ in 0..REPEATS {
        let started = Instant::now();
        let mut decoder = SseDecoder::default();
        let mut reply = ChunkAssembler::default();
        for piece in body.chunks(16 << 10) {
            decoder.push(piece);
            while let Some(event) = decoder.next_event().unwrap() {
                reply.feed(&event.data, &NoObserver).unwrap();
            }
        }
        let r = reply.finish().unwrap();
        ours.push(started.elapsed().as_secs_f64());
        assert_eq!(r.tool_calls.len(), 1);
        let end = body.iter().position(|&b| b == b'\n').unwrap();
        let line = std::str::from_utf8(&body[6..end]).unwrap();
        let started = Instant::now();
        std::hint::black_box(serde_json::from_str::<Value>(line).unwrap());
        plain.push(started.elapsed().as_secs_f64());
    }
    println!(
        "In process, 30 MB tool argument in one SSE line: SSE decoder + chunk assembler (the argument measured and refused, not parsed) {:.3} s; plain serde_json::Value of the line {:.3} s\n",
        median(ours),
        median(plain)
    );
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
        "sse_arg_3mb" => sse_arg(3 * MB),
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
        prompt_cache: tinyagent::model::PromptCache::On,
        cache_key: None,
    };
    let model: Box<dyn Model> = if case.starts_with("ndjson") {
        let transport = HttpTransport::new(url, None, Auth::Bearer, &BTreeMap::new(), timeouts);
        Box::new(HttpModel::ollama(transport.unwrap(), "m", None))
    } else {
        let transport = HttpTransport::new(
            &format!("{url}/v1"),
            Some("k"),
            Auth::Bearer,
            &BTreeMap::new(),
            timeouts,
        );
        Box::new(HttpModel::chat_completions(
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
        Ok(r) => {
            let (refused, kept): (Vec<_>, Vec<_>) =
                r.tool_calls.iter().partition(|c| c.oversized.is_some());
            let kept_bytes: usize = kept.iter().map(|c| c.arguments.to_string().len()).sum();
            let refused_bytes: u64 = refused.iter().filter_map(|c| c.oversized).sum();
            match (kept.len(), refused.len()) {
                (n, 0) => format!("ok, {n} call(s), {kept_bytes} argument bytes"),
                (0, n) => format!(
                    "ok, {n} call(s) refused ({refused_bytes} argument bytes, over the bound)"
                ),
                (k, n) => format!("ok, {k} call(s) kept, {n} refused ({refused_bytes} bytes)"),
            }
        }
        Err(e) => format!("{} ({})", e.reason(), e),
    };
    println!(
        "{}",
        json!({"secs": secs, "rss_mb": rss_mb, "outcome": outcome})
    );
}
