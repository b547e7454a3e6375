//! The outage wait's probes from the outside (SPEC 18), measured at a
//! loopback provider: the first probe keeps the last failure's
//! Retry-After, and a fleet of waiting runs (on one machine sharing a
//! SQLite record, on two sharing a real redis-server) sends one request to
//! a dead model at a time: never two within 100 ms once they wait, a run
//! that joins the wait late included.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};

use crate::support::openai::chat_sse_submit;
use crate::support::redis::RedisServer;
use crate::support::stub::{Captured, Reply, Stub};
use crate::support::{events, finished, of_type, TestEnv};

/// An OpenAI-style 503.
fn overloaded() -> Reply {
    Reply::json(
        503,
        &json!({"error": {"message": "The server is overloaded or not ready yet.",
            "type": "server_error", "param": null, "code": null}}),
    )
}

struct Out {
    code: Option<i32>,
    events: Vec<Value>,
    stderr: String,
}

fn output(child: Child) -> Out {
    let out = child.wait_with_output().unwrap();
    Out {
        code: out.status.code(),
        events: events(&out.stdout),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn spawn(env: &TestEnv, stub: &Stub, args: &[&str]) -> Child {
    env.std_cmd()
        .env("OPENAI_API_KEY", "sk-test-outage-probes")
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn the_waits_first_probe_keeps_the_servers_retry_after() {
    let env = TestEnv::new();
    env.user_config("retry: {attempts: 2, backoff: 100ms, jitter: 0}\n");
    // Two attempts and the wait's first probe fail asking for 3 s; the
    // second probe is answered.
    let stub = Stub::start(|i, _| {
        if i < 3 {
            overloaded().header("retry-after", "3")
        } else {
            chat_sse_submit("call_1", "done")
        }
    });
    let args = ["--json", "-m", "openai/gpt-5", "--outage-wait", "1m", "x"];
    let out = output(spawn(&env, &stub, &args));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(finished(&out.events)["status"], "submitted");
    let gaps = stub.gaps();
    assert_eq!(gaps.len(), 3, "{gaps:?}");
    for gap in &gaps {
        assert!(*gap >= Duration::from_millis(2_990), "{gaps:?}");
        assert!(*gap < Duration::from_secs(6), "{gaps:?}");
    }
    assert!(
        out.stderr.contains(
            "outage: every model is down (openai/gpt-5: http_503); waiting up to 1m, next try in 3s"
        ),
        "{}",
        out.stderr
    );
}

/// How long the provider is down in the fleet tests, from its first request.
const DOWN: Duration = Duration::from_secs(9);

/// Config of a fleet run: two quick attempts, probes from 200 ms doubling.
const FLEET_CONFIG: &str =
    "retry: {attempts: 2, backoff: 200ms, max_backoff: 1s, jitter: 0}\nfallback: {cooldown: 1s}\n";

/// A provider of two models that answers 503 to everything for `DOWN`
/// from its first request, then submits.
fn dead_for_a_while() -> Stub {
    let began = std::sync::OnceLock::<Instant>::new();
    Stub::start(move |_, _| {
        if began.get_or_init(Instant::now).elapsed() < DOWN {
            overloaded()
        } else {
            chat_sse_submit("call_1", "done")
        }
    })
}

/// When an event was written, on this process's monotonic clock.
fn instant_of(event: &Value, base: (Instant, SystemTime)) -> Instant {
    let ts = humantime::parse_rfc3339(event["ts"].as_str().unwrap()).unwrap();
    match ts.duration_since(base.1) {
        Ok(after) => base.0 + after,
        Err(before) => base.0 - before.duration(),
    }
}

/// Pairs of requests to one model less than 100 ms apart among
/// `requests`, as (model, gap) for the message.
fn close_pairs(requests: &[&Captured]) -> Vec<(String, Duration)> {
    let mut by_model: std::collections::BTreeMap<String, Vec<Instant>> = Default::default();
    for r in requests {
        let model = r.json()["model"].as_str().unwrap_or("?").to_string();
        by_model.entry(model).or_default().push(r.at);
    }
    let mut pairs = Vec::new();
    for (model, mut times) in by_model {
        times.sort();
        for w in times.windows(2) {
            let gap = w[1] - w[0];
            if gap < Duration::from_millis(100) {
                pairs.push((model.clone(), gap));
            }
        }
    }
    pairs
}

/// Runs `early` runs together on `machines` (round robin), and one more
/// once they all wait, each with a chain of two models on the provider
/// that is down for a while and `--outage-wait 2m`; checks that once they
/// wait, no two requests to one model come within 100 ms, and that every
/// run goes on when the provider is back.
fn fleet_sends_one_probe_at_a_time(machines: &[TestEnv], early: usize) {
    let stub = dead_for_a_while();
    let base = (Instant::now(), SystemTime::now());
    let args = |task: &str| {
        [
            "--json",
            "-m",
            "openai/gpt-5",
            "--fallback-model",
            "openai/gpt-5-mini",
            "--outage-wait",
            "2m",
            task,
        ]
        .map(str::to_string)
    };
    let spawn_run = |i: usize| {
        let env = &machines[i % machines.len()];
        let args = args(&format!("run-{i}"));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        spawn(env, &stub, &args)
    };
    let children: Vec<Child> = (0..early).map(spawn_run).collect();
    // The late run starts once the early ones wait (two quick attempts on
    // each model take well under 2 s); the check below makes sure they did.
    std::thread::sleep(Duration::from_secs(2));
    let late_start = Instant::now();
    let late = spawn_run(early);
    let outs: Vec<Out> = children.into_iter().chain([late]).map(output).collect();
    let mut waiting = Vec::new();
    for out in &outs {
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let waited = of_type(&out.events, "outage.waiting");
        assert_eq!(waited.len(), 1, "{}", out.stderr);
        waiting.push(instant_of(waited[0], base));
    }
    let requests = stub.requests();
    let first = requests[0].at;
    let all_wait = waiting[..early].iter().max().copied().unwrap();
    assert!(
        all_wait < late_start,
        "the late run joined a wait in progress"
    );
    let while_down: Vec<&Captured> = requests
        .iter()
        .filter(|r| r.at >= all_wait && r.at < first + DOWN)
        .collect();
    let pairs = close_pairs(&while_down);
    assert!(
        pairs.is_empty(),
        "{} requests to a dead model within 100 ms of another once the fleet waited \
         ({} requests while all waited): {pairs:?}",
        pairs.len(),
        while_down.len()
    );
    assert!(!while_down.is_empty(), "the fleet probed while it waited");
}

fn machine(health_db: &str) -> TestEnv {
    let env = TestEnv::new();
    env.user_config(&format!("health_db: \"{health_db}\"\n{FLEET_CONFIG}"));
    env
}

#[test]
fn a_fleet_on_one_machine_sends_a_dead_model_one_probe_at_a_time() {
    let shared = TestEnv::new();
    let db = shared.file("health.db");
    let machines = [machine(db.to_str().unwrap())];
    fleet_sends_one_probe_at_a_time(&machines, 5);
}

#[test]
fn a_fleet_on_two_machines_sharing_redis_sends_a_dead_model_one_probe_at_a_time() {
    let redis = RedisServer::start(&[]);
    let url = redis.url(0);
    let machines = [machine(&url), machine(&url)];
    fleet_sends_one_probe_at_a_time(&machines, 5);
}
