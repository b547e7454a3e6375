//! Provider health across machines (SPEC section 13, "Across machines"):
//! two simulated machines (each its own HOME and XDG_STATE_HOME) sharing
//! one real redis-server, against a loopback primary that answers 503.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::redis::RedisServer;
use crate::support::stub::{Reply, Stub};
use crate::support::{events, finished, of_type, TestEnv};

const SUBMIT: &str = "- tool_calls:\n  - {name: submit, arguments: {output: done}}\n";
const KEY: &str = "sk-test-REDIS-FLEET-KEY-0077";

/// An OpenAI-style 503, as the Chat Completions API documents its errors.
fn overloaded() -> Reply {
    Reply::json(
        503,
        &json!({"error": {
            "message": "The server is overloaded or not ready yet.",
            "type": "server_error", "param": null, "code": null
        }}),
    )
}

/// `overloaded()` with the limits the API publishes on every response
/// (SPEC 17): the pacing record keeps them in Redis too, under a
/// fingerprint of the key.
fn overloaded_publishing_limits() -> Reply {
    overloaded()
        .header("x-ratelimit-limit-requests", "500")
        .header("x-ratelimit-remaining-requests", "499")
        .header("x-ratelimit-reset-requests", "120ms")
}

/// One machine of the fleet: its own home and state, the shared Redis.
struct Machine {
    env: TestEnv,
    fallback: String,
}

impl Machine {
    /// A machine with three fast retries and `extra_config`.
    fn new(health_db: &str, extra_config: &str) -> Machine {
        Machine::with(
            health_db,
            &format!("retry: {{attempts: 3, backoff: 50ms, jitter: 0}}\n{extra_config}"),
        )
    }

    fn with(health_db: &str, config: &str) -> Machine {
        let env = TestEnv::new();
        env.user_config(&format!("health_db: \"{health_db}\"\n{config}"));
        let fallback = env.script("fallback.yaml", SUBMIT);
        Machine { env, fallback }
    }

    fn cmd(&self, stub: &Stub) -> std::process::Command {
        let mut cmd = self.env.std_cmd();
        cmd.env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
            .env("OPENAI_API_KEY", KEY)
            .args([
                "--json",
                "-m",
                "openai/gpt-5",
                "--fallback-model",
                &self.fallback,
            ])
            .arg("TASK-MARKER-fleet fix it")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn run(&self, stub: &Stub) -> (Vec<Value>, String, Option<i32>) {
        let out = self.cmd(stub).output().unwrap();
        (
            events(&out.stdout),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            out.status.code(),
        )
    }
}

fn switch_reasons(ev: &[Value]) -> Vec<String> {
    of_type(ev, "model.fallback")
        .iter()
        .map(|e| e["reason"].as_str().unwrap().to_string())
        .collect()
}

fn warnings(ev: &[Value]) -> Vec<String> {
    of_type(ev, "warning")
        .iter()
        .map(|e| e["message"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn an_outage_found_on_one_machine_is_skipped_on_another() {
    let redis = RedisServer::start(&[]);
    let stub = Stub::sequence(vec![overloaded_publishing_limits()]);
    let a = Machine::new(&redis.url(0), "");
    let b = Machine::new(&redis.url(0), "");

    let (ev, stderr, code) = a.run(&stub);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(switch_reasons(&ev), ["http_503"]);
    assert_eq!(stub.count(), 3, "machine A paid the retry budget once");
    assert!(warnings(&ev).is_empty(), "{ev:?}");

    let (ev, stderr, code) = b.run(&stub);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(switch_reasons(&ev), ["cooldown"], "{ev:?}");
    assert_eq!(of_type(&ev, "model.fallback")[0]["attempts"], 0);
    assert_eq!(stub.count(), 3, "machine B sent the dead primary nothing");
    assert!(stderr.contains(&format!(
        "model fallback: openai/gpt-5 -> {} (cooldown) at step 1",
        b.fallback
    )));

    // Nothing but specs, endpoints, reasons and times in Redis.
    let dump = redis.dump();
    assert!(
        dump.contains(&format!("127.0.0.1:{}/v1", stub.port)),
        "{dump}"
    );
    assert!(dump.contains("tinyagent:pace:"), "{dump}");
    assert!(
        !dump.contains("REDIS-FLEET-KEY") && !dump.contains("TASK-MARKER"),
        "{dump}"
    );
}

#[test]
fn eight_runs_on_two_machines_send_about_one_budget_in_total() {
    let redis = RedisServer::start(&[]);
    let config = "retry: {attempts: 6, backoff: 200ms, jitter: 0}\n";
    let stub = Stub::sequence(vec![overloaded()]);
    let a = Machine::with(&redis.url(0), config);
    let b = Machine::with(&redis.url(0), config);
    let children: Vec<_> = (0..8)
        .map(|i| if i % 2 == 0 { &a } else { &b }.cmd(&stub).spawn().unwrap())
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Each run alone would send 6: 48 in all. Strikes add up across both
    // machines, so the fleet stops after about one run's budget.
    let received = stub.count();
    assert!(
        received <= 16,
        "the dead primary received {received} requests"
    );
}

#[test]
fn after_the_cooldown_exactly_one_run_of_the_fleet_probes() {
    let redis = RedisServer::start(&[]);
    let config = "fallback: {cooldown: 1s}\n";
    // After the first run's three requests, the probe is slow: every other
    // run reaches the model while it is under way.
    let stub = Stub::start(|i, _| match i {
        0..=2 => overloaded(),
        _ => overloaded().delay(Duration::from_millis(1_500)),
    });
    let a = Machine::new(&redis.url(0), config);
    let b = Machine::new(&redis.url(0), config);
    let (_, stderr, code) = a.run(&stub);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stub.count(), 3);
    std::thread::sleep(Duration::from_millis(1_200));
    // The cooldown is over: six runs on two machines reach the model together.
    let children: Vec<_> = (0..6)
        .map(|i| if i % 2 == 0 { &a } else { &b }.cmd(&stub).spawn().unwrap())
        .collect();
    let mut reasons = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        reasons.extend(switch_reasons(&events(&out.stdout)));
    }
    assert_eq!(
        stub.count(),
        4,
        "one probe for the whole fleet: {reasons:?}"
    );
    assert_eq!(
        reasons.iter().filter(|r| *r == "http_503").count(),
        1,
        "{reasons:?}"
    );
    assert_eq!(
        reasons.iter().filter(|r| *r == "cooldown").count(),
        5,
        "{reasons:?}"
    );
}

#[test]
fn a_redis_that_is_down_costs_one_warning_and_the_run_goes_on() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let stub = Stub::sequence(vec![overloaded()]);
    let m = Machine::new(&format!("redis://127.0.0.1:{port}/0"), "");
    let (ev, stderr, code) = m.run(&stub);
    assert_eq!(code, Some(0), "{stderr}");
    let w = warnings(&ev);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains(&format!("redis://127.0.0.1:{port}/0")),
        "{w:?}"
    );
    assert_eq!(
        switch_reasons(&ev),
        ["http_503"],
        "it goes on as a single run"
    );
}

#[test]
fn redis_stopped_mid_run_costs_one_warning_and_the_run_finishes_on_the_fallback() {
    let mut redis = RedisServer::start(&[]);
    // The primary answers slowly, so Redis is stopped while the run waits.
    let stub = Stub::start(|_, _| overloaded().delay(Duration::from_millis(300)));
    let m = Machine::new(&redis.url(0), "");
    let child = m.cmd(&stub).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(450));
    redis.stop();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["active_model"], m.fallback.as_str());
    let w = warnings(&ev);
    assert!(w.len() <= 1, "{w:?}");
}

#[test]
fn the_redis_password_appears_nowhere() {
    let password = "pw-REDIS-SECRET-9931";
    let redis = RedisServer::start(&["--requirepass", password]);
    let stub = Stub::sequence(vec![overloaded()]);
    let log = "log.db";
    // From the variable, with the URL free of it: works.
    let m = Machine::new(&redis.url(0), "");
    let mut cmd = m.cmd(&stub);
    let out_file = m.env.file("run.json");
    cmd.env("TINYAGENT_REDIS_PASSWORD", password)
        .arg("-o")
        .arg(&out_file)
        .arg("--log-db")
        .arg(m.env.file(log));
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(warnings(&events(&out.stdout)).is_empty());
    crate::support::assert_secret_absent(password, &out, &[&out_file, &m.env.file(log)]);

    // In the URL and wrong: one warning, with the password hidden.
    let wrong = Machine::new(
        &format!("redis://:{password}-wrong@127.0.0.1:{}/0", redis.port),
        "",
    );
    let out = wrong.cmd(&stub).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let w = warnings(&events(&out.stdout));
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("password") && w[0].contains("***"), "{w:?}");
    crate::support::assert_secret_absent(password, &out, &[]);
}
