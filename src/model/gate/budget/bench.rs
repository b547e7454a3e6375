//! Benchmark: what budgets add to each request (SPEC 19 asks for under
//! 1 ms, median). One chain step at a time (the gate's look before the
//! request, the request, the spend added after it, as the agent adds it),
//! with no budgets and with three (the fleet's per day, the model's per
//! day, the provider's per month), on the SQLite file and on Redis (a
//! `redis-server` of its own on loopback). Two members are measured: a
//! scripted model answering in process, and Chat Completions over
//! loopback HTTP to a small server thread that streams a tool call with
//! usage. Prints the median time per step of each, and the difference.
//!
//! `bench/budgets.sh`, or
//! `cargo test --release --lib model::gate::budget::bench -- --ignored --nocapture`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::budget::{Budget, Period, Scope};
use crate::events::Emitter;
use crate::health::{Health, RedisStore, SqliteStore, Store};
use crate::model::adapter::HttpModel;
use crate::model::chain::ChainModel;
use crate::model::gate::BudgetBook;
use crate::model::http::{Auth, HttpTransport};
use crate::model::member::Member;
use crate::model::openai::Dialect;
use crate::model::price::Pricing;
use crate::model::retry::RequestCtx;
use crate::model::script::ScriptModel;
use crate::model::spec::ModelSpec;
use crate::model::{Message, Model, Prompt, Role};
use crate::policy::{Cooldown, FallbackPolicy, RetryPolicy, StreamTimeouts};
use crate::stop::Stop;

const STEPS: usize = 300;
const ROUNDS: usize = 7;

/// A Chat Completions stream: one tool call, usage, `[DONE]`.
const SSE: &str = concat!(
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"plan\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":100,\"total_tokens\":1100}}\n\n",
    "data: [DONE]\n\n"
);

/// A loopback server on its own thread streaming `SSE` to every request.
fn sse_server() -> u16 {
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
    let mut reader = BufReader::new(stream);
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
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body).unwrap();
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{SSE}",
            SSE.len()
        );
        writer.write_all(reply.as_bytes()).unwrap();
    }
}

fn budgets() -> Vec<Budget> {
    vec![
        Budget {
            usd: 1e9,
            per: Period::Day,
            scope: Scope::Fleet,
        },
        Budget {
            usd: 1e9,
            per: Period::Day,
            scope: Scope::Model("gw/m".into()),
        },
        Budget {
            usd: 1e9,
            per: Period::Month,
            scope: Scope::Provider("gw".into()),
        },
    ]
}

fn member(loopback: Option<u16>) -> Member {
    let model: Box<dyn Model> = match loopback {
        None => Box::new(
            ScriptModel::parse("- tool_calls:\n    - {name: plan, arguments: {}}\n  usage: {input: 1000, output: 100}\n")
                .unwrap(),
        ),
        Some(port) => {
            let timeouts = StreamTimeouts {
                first_event: Duration::from_secs(10),
                idle: Duration::from_secs(10),
            };
            let transport = HttpTransport::new(
                &format!("http://127.0.0.1:{port}/v1"),
                Some("k"),
                Auth::Bearer,
                &BTreeMap::new(),
                timeouts,
            )
            .unwrap();
            Box::new(HttpModel::chat_completions(transport, "m", Dialect::Compatible, None))
        }
    };
    let pricing = Pricing {
        input: 1.0,
        output: 2.0,
        cached_input: 1.0,
        cache_write: 1.0,
    };
    Member::new(
        ModelSpec::parse("gw/m").unwrap(),
        model,
        Some(pricing),
        None,
    )
}

/// The median time of one step (a request and its spend) over `ROUNDS`
/// rounds of `STEPS`, on `store` with `budgets`.
fn per_step(
    rt: &tokio::runtime::Runtime,
    loopback: Option<u16>,
    store: Option<Box<dyn Store>>,
    budgets: Vec<Budget>,
) -> Duration {
    let retry = RetryPolicy::default();
    let fallback = FallbackPolicy::new(6, Cooldown::For(Duration::from_secs(300)), 6);
    let health = match store {
        Some(store) => Health::new(store, "bench", |w| eprintln!("{w}")),
        None => Health::off(),
    };
    let book = BudgetBook::new(budgets, health.clone());
    let mut chain = ChainModel::new(vec![member(loopback)], retry, fallback)
        .with_health(health)
        .with_budgets(book);
    let emitter = Emitter::new("bench", Vec::new());
    let stop = Stop::never();
    let messages = vec![Message::new(Role::User, "fix the failing test", 0)];
    let mut rounds: Vec<Duration> = (0..ROUNDS)
        .map(|_| {
            let started = Instant::now();
            for step in 0..STEPS {
                let prompt = Prompt {
                    system: "You are a coding agent.",
                    messages: &messages,
                    tools: &[],
                    output_schema: None,
                    max_output_tokens: None,
                    reasoning_effort: None,
                    estimated_input_tokens: 0,
                };
                let ctx = RequestCtx {
                    step: step as u32 + 1,
                    emitter: &emitter,
                    stop: &stop,
                };
                let answer = rt.block_on(chain.complete(&prompt, ctx)).unwrap();
                chain.record_spend(&answer.spec, answer.cost_usd);
            }
            started.elapsed() / STEPS as u32
        })
        .collect();
    rounds.sort();
    rounds[ROUNDS / 2]
}

struct RedisServer(std::process::Child, u16);

impl RedisServer {
    fn start() -> Option<RedisServer> {
        let port = TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(5) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(RedisServer(child, port))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn budget_cost_per_request() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("health.db");
    let redis = RedisServer::start();
    let port = sse_server();
    let sqlite = || Some(Box::new(SqliteStore::open(&file).unwrap()) as Box<dyn Store>);
    let redis_store = |r: &RedisServer| {
        Some(
            Box::new(RedisStore::connect(&format!("redis://127.0.0.1:{}/0", r.1), None).unwrap())
                as Box<dyn Store>,
        )
    };
    println!("| member | record | no budgets | 3 budgets | added per request |");
    println!("| --- | --- | --- | --- | --- |");
    for (label, loopback) in [
        ("in process (script)", None),
        ("Chat Completions over loopback", Some(port)),
    ] {
        let mut cases: Vec<(&str, Duration, Duration)> = vec![(
            "SQLite file",
            per_step(&rt, loopback, sqlite(), Vec::new()),
            per_step(&rt, loopback, sqlite(), budgets()),
        )];
        if let Some(r) = &redis {
            cases.push((
                "Redis (loopback)",
                per_step(&rt, loopback, redis_store(r), Vec::new()),
                per_step(&rt, loopback, redis_store(r), budgets()),
            ));
        }
        cases.push((
            "off (memory)",
            per_step(&rt, loopback, None, Vec::new()),
            per_step(&rt, loopback, None, budgets()),
        ));
        for (record, without, with) in cases {
            println!(
                "| {label} | {record} | {:.0} µs | {:.0} µs | {:+.0} µs |",
                us(without),
                us(with),
                us(with) - us(without)
            );
        }
    }
}
