//! Pacing (SPEC section 17): the binary against loopback servers that
//! publish their rate limits in OpenAI's and Anthropic's headers. A spent
//! limit is waited out before the next request (`provider.paced`, the
//! stderr line, `paced_ms`), shared by runs on one key through the SQLite
//! file and through Redis, never by runs on another key; a wait too long
//! switches (`rate_limit`); bad values are ignored; `pacing: off`.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::anthropic;
use crate::support::openai::{chat_sse_submit, chat_sse_tool_call};
use crate::support::redis::RedisServer;
use crate::support::stub::{Reply, Stub};
use crate::support::{assert_secret_absent, events, finished, of_type, TestEnv};

const KEY: &str = "sk-test-PACING-KEY-5fe1c0ffee";
const OTHER_KEY: &str = "sk-test-OTHER-KEY-77aa";
const SPEC: &str = "openai/gpt-5";

/// OpenAI's six headers on `reply`.
fn openai_limits(reply: Reply, requests: (u64, &str), tokens: (u64, &str)) -> Reply {
    reply
        .header("x-ratelimit-limit-requests", "10")
        .header("x-ratelimit-remaining-requests", &requests.0.to_string())
        .header("x-ratelimit-reset-requests", requests.1)
        .header("x-ratelimit-limit-tokens", "100000")
        .header("x-ratelimit-remaining-tokens", &tokens.0.to_string())
        .header("x-ratelimit-reset-tokens", tokens.1)
}

/// A reply that spends the requests' limit until `reset`.
fn spent(reply: Reply, reset: &str) -> Reply {
    openai_limits(reply, (0, reset), (90_000, "1ms"))
}

fn bash() -> Reply {
    chat_sse_tool_call("call_1", "bash", r#"{"command":"true"}"#)
}

fn submit() -> Reply {
    chat_sse_submit("call_2", "done")
}

/// The binary on `stub` as `openai/gpt-5` with `KEY`, `--json`.
fn cmd(env: &TestEnv, stub: &Stub) -> assert_cmd::Command {
    let mut cmd = env.cmd();
    cmd.env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", KEY)
        .args(["--json", "-m", SPEC]);
    cmd
}

fn run(mut cmd: assert_cmd::Command) -> (Vec<Value>, String, Option<i32>) {
    let out = cmd.arg("fix it").output().unwrap();
    (
        events(&out.stdout),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code(),
    )
}

/// `(step, model, wait_seconds, limit)` of each `provider.paced`.
fn paced(ev: &[Value]) -> Vec<(u64, String, f64, String)> {
    of_type(ev, "provider.paced")
        .iter()
        .map(|e| {
            (
                e["step"].as_u64().unwrap(),
                e["model"].as_str().unwrap().to_string(),
                e["wait_seconds"].as_f64().unwrap(),
                e["limit"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_spent_limit_is_waited_out_before_the_next_request() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![spent(bash(), "1s"), submit()]);
    let db = env.file("log.db");
    let mut c = cmd(&env, &stub);
    c.arg("--log-db").arg(&db);
    let (ev, stderr, code) = run(c);
    assert_eq!(code, Some(0), "{stderr}");
    let paced = paced(&ev);
    assert_eq!(paced.len(), 1, "{ev:?}");
    let (step, model, wait, limit) = &paced[0];
    assert_eq!(
        (*step, model.as_str(), limit.as_str()),
        (2, SPEC, "requests")
    );
    assert!(*wait > 0.5 && *wait <= 1.1, "{wait}");
    let gap = stub.gaps()[0];
    assert!(gap >= Duration::from_millis(900), "{gap:?}");
    // The wait is announced before it, and recorded with the request.
    let order: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let at = order.iter().position(|t| *t == "provider.paced").unwrap();
    assert_eq!(order[at - 1], "step.started", "{order:?}");
    let rows: Vec<(i64, Option<i64>, i64)> = {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let mut stmt = conn
            .prepare("SELECT step, http_status, paced_ms FROM model_requests ORDER BY rowid")
            .unwrap();
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap();
        rows.map(Result::unwrap).collect()
    };
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0], (1, Some(200), 0));
    assert_eq!((rows[1].0, rows[1].1), (2, Some(200)));
    assert!(rows[1].2 >= 500 && rows[1].2 <= 1_500, "{rows:?}");
}

#[test]
fn human_mode_says_what_it_waits_for() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![spent(bash(), "1s"), submit()]);
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", KEY)
        .args(["-m", SPEC, "fix it"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("pacing "))
        .unwrap_or_else(|| panic!("no pacing line: {stderr}"));
    let seconds = line
        .strip_prefix("pacing openai/gpt-5: waiting ")
        .and_then(|rest| rest.strip_suffix("s for its requests limit"))
        .unwrap_or_else(|| panic!("{line}"));
    assert!(matches!(seconds, "1" | "2"), "{line}");
}

#[test]
fn fewer_tokens_left_than_the_request_needs_wait_for_the_tokens_reset() {
    let env = TestEnv::new();
    let first = openai_limits(bash(), (9, "1s"), (3, "1s"));
    let stub = Stub::sequence(vec![first, submit()]);
    let (ev, stderr, code) = run(cmd(&env, &stub));
    assert_eq!(code, Some(0), "{stderr}");
    let paced = paced(&ev);
    assert_eq!(paced.len(), 1, "{ev:?}");
    assert_eq!(paced[0].3, "tokens");
}

#[test]
fn a_429s_headers_pace_the_retry() {
    let env = TestEnv::new();
    env.user_config("retry: {backoff: 1ms, jitter: 0}\n");
    let stub = Stub::sequence(vec![spent(Reply::status(429), "1s"), submit()]);
    let (ev, stderr, code) = run(cmd(&env, &stub));
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(of_type(&ev, "provider.retry").len(), 1);
    let paced = paced(&ev);
    assert_eq!(paced.len(), 1, "{ev:?}");
    assert_eq!(paced[0].0, 1);
    assert!(stub.gaps()[0] >= Duration::from_millis(900));
}

#[test]
fn a_limit_longer_than_max_backoff_moves_the_chain_on() {
    let env = TestEnv::new();
    env.user_config("retry: {max_backoff: 2s}\n");
    let fallback = env.script(
        "fallback.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: done}}\n",
    );
    let stub = Stub::sequence(vec![spent(bash(), "10m"), submit()]);
    let mut c = cmd(&env, &stub);
    c.args(["--fallback-model", &fallback]);
    let started = Instant::now();
    let (ev, stderr, code) = run(c);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(stub.count(), 1, "the limited model was not asked again");
    let switch = of_type(&ev, "model.fallback");
    assert_eq!(switch.len(), 1, "{ev:?}");
    assert_eq!(
        (
            &switch[0]["reason"],
            &switch[0]["attempts"],
            &switch[0]["step"]
        ),
        (&json!("rate_limit"), &json!(0), &json!(2))
    );
    assert!(stderr.contains(&format!(
        "model fallback: {SPEC} -> {fallback} (rate_limit) at step 2"
    )));
    assert!(paced(&ev).is_empty(), "no wait: a switch at once");
    assert_eq!(finished(&ev)["model_fallbacks"], 1);
}

#[test]
fn without_a_chain_a_long_limit_is_looked_at_again_every_max_backoff() {
    let env = TestEnv::new();
    env.user_config("retry: {max_backoff: 1s}\n");
    let stub = Stub::sequence(vec![spent(bash(), "2500ms"), submit()]);
    let (ev, stderr, code) = run(cmd(&env, &stub));
    assert_eq!(code, Some(0), "{stderr}");
    let waits: Vec<f64> = paced(&ev).iter().map(|p| p.2).collect();
    assert!(waits.len() >= 3, "{waits:?}");
    assert_eq!(&waits[..2], [1.0, 1.0], "max_backoff, then look again");
    assert!(stub.gaps()[0] >= Duration::from_millis(2_300));
}

#[test]
fn a_pacing_wait_counts_toward_the_time_limit() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![spent(bash(), "30s"), submit()]);
    let mut c = cmd(&env, &stub);
    c.args(["--time-limit", "2s"]);
    let started = Instant::now();
    let (ev, stderr, code) = run(c);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(8));
    assert_eq!(finished(&ev)["status"], "time_limit");
    assert_eq!(stub.count(), 1);
    assert_eq!(paced(&ev).len(), 1);
}

#[test]
fn ctrl_c_ends_a_pacing_wait() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![spent(bash(), "30s"), submit()]);
    let mut child = env
        .std_cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", KEY)
        .args(["--json", "-m", SPEC, "fix it"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let paced = line.contains("\"provider.paced\"");
        seen.push(line);
        if paced {
            break;
        }
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    seen.extend(lines.map(Result::unwrap));
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let ev = events(seen.join("\n").as_bytes());
    assert_eq!(finished(&ev)["status"], "interrupted");
    assert_eq!(stub.count(), 1);
}

#[test]
fn bad_header_values_are_ignored() {
    let env = TestEnv::new();
    let long = "9".repeat(300);
    let bad = [
        ("-1", "1s"),
        ("0", "-5s"),
        ("0", "25h"),
        ("0", "soon"),
        ("0", long.as_str()),
        (long.as_str(), "1s"),
        ("0.5", "1s"),
        ("0", "1s1"),
        ("0", "2026-13-45T99:00:00Z"),
    ];
    let replies: Vec<Reply> = bad
        .iter()
        .map(|(remaining, reset)| {
            bash()
                .header("x-ratelimit-remaining-requests", remaining)
                .header("x-ratelimit-reset-requests", reset)
                .header("anthropic-ratelimit-requests-remaining", remaining)
                .header("anthropic-ratelimit-requests-reset", reset)
        })
        .chain([submit()])
        .collect();
    let stub = Stub::sequence(replies);
    let started = Instant::now();
    let (ev, stderr, code) = run(cmd(&env, &stub));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(paced(&ev).is_empty(), "{:?}", paced(&ev));
    assert_eq!(stub.count(), bad.len() + 1);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn pacing_off_sends_at_once_and_other_values_are_refused() {
    let env = TestEnv::new();
    env.user_config("pacing: off\n");
    let stub = Stub::sequence(vec![spent(bash(), "5s"), submit()]);
    let (ev, stderr, code) = run(cmd(&env, &stub));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(paced(&ev).is_empty());
    assert!(stub.gaps()[0] < Duration::from_secs(2));

    env.user_config("pacing: sometimes\n");
    let out = cmd(&env, &stub).arg("x").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("pacing") && stderr.contains("expected on or off"),
        "{stderr}"
    );
    env.user_config("pacing: on\n");
    let out = cmd(&env, &Stub::sequence(vec![submit()]))
        .arg("x")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn anthropics_headers_pace_too() {
    let env = TestEnv::new();
    let reset =
        humantime::format_rfc3339_seconds(std::time::SystemTime::now() + Duration::from_secs(2))
            .to_string();
    let mut tool = vec![anthropic::message_start(30, 0)];
    tool.extend(anthropic::tool_use_block(
        0,
        "toolu_1",
        "bash",
        &[r#"{"command":"true"}"#],
    ));
    tool.extend([
        anthropic::message_delta("tool_use", 5),
        anthropic::message_stop(),
    ]);
    let mut answer = vec![anthropic::message_start(40, 0)];
    answer.extend(anthropic::tool_use_block(
        0,
        "toolu_2",
        "submit",
        &[r#"{"output":"done"}"#],
    ));
    answer.extend([
        anthropic::message_delta("tool_use", 5),
        anthropic::message_stop(),
    ]);
    let first = Reply::sse(tool)
        .header("anthropic-ratelimit-requests-limit", "50")
        .header("anthropic-ratelimit-requests-remaining", "0")
        .header("anthropic-ratelimit-requests-reset", &reset);
    let stub = Stub::sequence(vec![first, Reply::sse(answer)]);
    let out = env
        .cmd()
        .env("ANTHROPIC_BASE_URL", stub.url())
        .env("ANTHROPIC_API_KEY", KEY)
        .args(["--json", "-m", "anthropic/claude-sonnet-4-5", "fix it"])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{ev:?}");
    let paced = paced(&ev);
    assert_eq!(paced.len(), 1, "{ev:?}");
    assert_eq!(paced[0].3, "requests");
    assert!(paced[0].2 > 0.5, "{paced:?}");
}

/// A run that only learns the limit: one request, answered with `submit`
/// and the requests' limit spent for `reset`.
fn learn(env: &TestEnv, stub: &Stub, key: &str) -> Vec<Value> {
    let out = cmd(env, stub)
        .env("OPENAI_API_KEY", key)
        .arg("learn")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_secret_absent(key, &out, &[]);
    events(&out.stdout)
}

#[test]
fn runs_on_one_key_share_its_limit_through_the_file_and_no_other_run_does() {
    let env = TestEnv::new();
    let stub = Stub::start(|i, _| {
        if i == 0 {
            spent(chat_sse_submit("call_1", "learnt"), "5s")
        } else {
            chat_sse_submit("call_2", "done")
        }
    });
    learn(&env, &stub, KEY);
    // Another key on the same machine is not held back.
    let mut other = cmd(&env, &stub);
    other.env("OPENAI_API_KEY", OTHER_KEY);
    let (ev, _, code) = run(other);
    assert_eq!(code, Some(0));
    assert!(paced(&ev).is_empty(), "another key: {ev:?}");
    // Nor is the same key on another machine (another state directory).
    let elsewhere = TestEnv::new();
    let (ev, _, _) = run(cmd(&elsewhere, &stub));
    assert!(paced(&ev).is_empty(), "another machine: {ev:?}");
    // The same key on the same machine waits for the reset.
    let (ev, stderr, code) = run(cmd(&env, &stub));
    assert_eq!(code, Some(0), "{stderr}");
    let paced = paced(&ev);
    assert_eq!(paced.len(), 1, "{ev:?}");
    assert_eq!((paced[0].0, paced[0].3.as_str()), (1, "requests"));
    assert!(paced[0].2 > 1.0, "{paced:?}");
    // The file holds a fingerprint of the key, never the key.
    let db = env.home().join(".local/state/tinyagent/health.db");
    let bytes = std::fs::read(&db).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains(&format!("127.0.0.1:{}/v1", stub.port)),
        "read the right file"
    );
    assert!(!text.contains("PACING-KEY") && !text.contains("OTHER-KEY"));
    let accounts: Vec<String> = {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let mut stmt = conn.prepare("SELECT account FROM pacing").unwrap();
        let rows = stmt.query_map([], |r| r.get(0)).unwrap();
        rows.map(Result::unwrap).collect()
    };
    assert_eq!(accounts.len(), 1, "one key published a limit: {accounts:?}");
    assert!(accounts[0].len() == 32 && !KEY.contains(accounts[0].as_str()));
}

#[test]
fn two_machines_share_a_keys_limit_through_redis() {
    let redis = RedisServer::start(&[]);
    let config = format!("health_db: \"{}\"\n", redis.url(0));
    let a = TestEnv::new();
    a.user_config(&config);
    let b = TestEnv::new();
    b.user_config(&config);
    let stub = Stub::start(|i, _| {
        if i == 0 {
            spent(chat_sse_submit("call_1", "learnt"), "5s")
        } else {
            chat_sse_submit("call_2", "done")
        }
    });
    learn(&a, &stub, KEY);
    let (ev, stderr, code) = run(cmd(&b, &stub));
    assert_eq!(code, Some(0), "{stderr}");
    let paced = paced(&ev);
    assert_eq!(paced.len(), 1, "machine B learnt from machine A: {ev:?}");
    assert!(stub.gaps()[0] >= Duration::from_millis(2_000));
    let dump = redis.dump();
    assert!(dump.contains("tinyagent:pace:openai/gpt-5|"), "{dump}");
    assert!(
        !dump.contains("PACING-KEY") && !dump.contains("fix it"),
        "{dump}"
    );
}
