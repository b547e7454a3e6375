//! Pacing where no limits are published (SPEC 24): the binary against
//! loopback fakes that enforce a hidden limit and send no rate-limit
//! headers. Declared limits hold fleets of parallel runs under the hidden
//! limit (one machine through the SQLite file, two "machines" through one
//! real `redis-server`), never more than the limit in any window of the
//! fake's log; a refusal teaches a limit (`provider.limit_learned`, the
//! stderr line, `provider.paced` with `source: learned`); bad `limits`
//! are exit 2 naming the key and the file.

use std::process::Output;

use serde_json::{json, Value};

use crate::support::fake_cloud::FakeCloud;
use crate::support::openai::chat_sse_submit;
use crate::support::redis::RedisServer;
use crate::support::stub::{Reply, Stub};
use crate::support::{events, finished, of_type, TestEnv};

const MODEL: &str = "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const AKID: &str = "AKIDTINYAGENTFAKE";
const SECRET: &str = "tinyagent/fake/secret+key";
const RETRY: &str = "retry: {attempts: 6, backoff: 1ms, max_backoff: 30s, jitter: 0, stream_first_event_timeout: 5s, stream_idle_timeout: 5s}\n";

/// `steps - 1` tool calls, then an answer, by the conversation's turn (one
/// fake serves every run).
fn task(steps: usize) -> Value {
    let mut replies: Vec<Value> = (1..steps)
        .map(|i| json!({"tool_use": [{"name": "bash", "id": format!("tooluse_{i}"), "input": {"command": "true"}}]}))
        .collect();
    replies.push(json!({"text": "done"}));
    json!({"replies": replies, "by_turn": true})
}

fn env(config: &str) -> TestEnv {
    let env = TestEnv::new();
    env.user_config(&format!("{RETRY}{config}"));
    env
}

fn bedrock_cmd(env: &TestEnv, fake: &FakeCloud) -> std::process::Command {
    let mut cmd = env.std_cmd();
    cmd.env("AWS_ACCESS_KEY_ID", AKID)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", fake.url())
        .args(["-m", MODEL, "--json", "go"]);
    cmd
}

/// Starts every command at once and waits for all.
fn fleet(cmds: Vec<std::process::Command>) -> Vec<Output> {
    let children: Vec<_> = cmds
        .into_iter()
        .map(|mut c| {
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

/// The fake's request times and whether each was throttled.
fn log(fake: &FakeCloud) -> Vec<(f64, bool)> {
    fake.requests()
        .iter()
        .map(|r| (r["at"].as_f64().unwrap(), r["throttled"].as_bool().unwrap()))
        .collect()
}

/// The most requests any window of `secs` seconds of the log held.
fn most_in_any_window(times: &[(f64, bool)], secs: f64) -> usize {
    times
        .iter()
        .map(|(t, _)| {
            times
                .iter()
                .filter(|(u, _)| *u >= *t && *u < t + secs)
                .count()
        })
        .max()
        .unwrap_or(0)
}

fn all_succeeded(outs: &[Output]) {
    for out in outs {
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(finished(&events(&out.stdout))["status"], "completed");
    }
}

fn sources(outs: &[Output]) -> Vec<String> {
    outs.iter()
        .flat_map(|o| {
            of_type(&events(&o.stdout), "provider.paced")
                .iter()
                .map(|e| e["source"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Hidden: 2 requests a second, from a full bucket. Declared the same.
const DECLARED: &str = "limits: [{model: \"bedrock/*\", requests: 2, per: second}]\n";

fn check_fleet(fake: &FakeCloud, outs: &[Output], requests: usize) {
    all_succeeded(outs);
    let times = log(fake);
    assert_eq!(times.len(), requests, "no request refused, none resent");
    assert!(times.iter().all(|(_, throttled)| !throttled));
    // A bucket of 2 refilling 2 a second: at most 2 + 2 in any second.
    assert!(most_in_any_window(&times, 1.0) <= 4, "{times:?}");
    let sources = sources(outs);
    assert!(!sources.is_empty(), "the fleet waited for its limit");
    assert!(sources.iter().all(|s| s == "declared"), "{sources:?}");
}

#[test]
fn a_declared_limit_holds_a_fleet_on_one_machine_under_the_hidden_limit() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("health.db");
    let env = env(&format!("health_db: {}\n{DECLARED}", db.display()));
    let fake = FakeCloud::scripted(
        "bedrock",
        &env,
        &task(3),
        &["--hidden-limit", "2", "--hidden-period", "1"],
    );
    let outs = fleet((0..4).map(|_| bedrock_cmd(&env, &fake)).collect());
    check_fleet(&fake, &outs, 12);
}

#[test]
fn a_declared_limit_holds_two_machines_sharing_one_redis() {
    let redis = RedisServer::start(&[]);
    let config = format!("health_db: {}\n{DECLARED}", redis.url(0));
    let (a, b) = (env(&config), env(&config));
    let fake = FakeCloud::scripted(
        "bedrock",
        &a,
        &task(3),
        &["--hidden-limit", "2", "--hidden-period", "1"],
    );
    let cmds = vec![
        bedrock_cmd(&a, &fake),
        bedrock_cmd(&a, &fake),
        bedrock_cmd(&b, &fake),
        bedrock_cmd(&b, &fake),
    ];
    let outs = fleet(cmds);
    check_fleet(&fake, &outs, 12);
}

#[test]
fn a_bedrock_throttle_without_retry_after_teaches_a_limit() {
    // Hidden: 20 a minute. The 21st request is refused: 21 sent in the
    // minute before, the limit learned is 14.
    // The refused request's retries go as SPEC 4 says (backoff 1 s, 2 s:
    // the third passes); the two requests after it wait for the limit.
    let env = TestEnv::new();
    env.user_config("health_db: off\nretry: {attempts: 6, backoff: 1s, max_backoff: 30s, jitter: 0, stream_first_event_timeout: 5s, stream_idle_timeout: 5s}\n");
    let fake = FakeCloud::scripted("bedrock", &env, &task(23), &["--hidden-limit", "20"]);
    let out = bedrock_cmd(&env, &fake)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let ev = events(&out.stdout);
    let learned = of_type(&ev, "provider.limit_learned");
    assert_eq!(learned.len(), 1, "{learned:?}");
    assert_eq!(learned[0]["model"], MODEL);
    assert_eq!(learned[0]["requests_per_minute"], 14);
    assert_eq!(learned[0]["reason"], "http_429");
    assert!(learned[0]["step"].as_u64().is_some());
    assert!(
        stderr.contains(&format!("rate limit learned: {MODEL} at 14 requests/min")),
        "in every mode, --json included: {stderr}"
    );
    let paced = of_type(&ev, "provider.paced");
    assert!(!paced.is_empty());
    assert!(paced
        .iter()
        .all(|p| p["source"] == "learned" && p["limit"] == "requests"));
    let throttled = log(&fake).iter().filter(|(_, t)| *t).count();
    assert_eq!(throttled, 2, "the refusal and its first retry, then paced");
}

#[test]
fn a_plain_429_teaches_a_limit() {
    // An OpenAI-compatible gateway refuses with a bare 429: one request
    // sent, a limit of one a minute learned; the refused request's retries
    // go as SPEC 4 says, then the chain moves on.
    let refusing = Stub::start(|_, _| Reply::status(429));
    let answering = Stub::sequence(vec![chat_sse_submit("call_1", "ok")]);
    let env = TestEnv::new();
    env.user_config(&format!(
        "health_db: off\nretry: {{attempts: 3, backoff: 1ms, max_backoff: 2s, jitter: 0}}\nproviders:\n  gw: {{api: openai, endpoint: {}/v1}}\n  gw2: {{api: openai, endpoint: {}/v1}}\n",
        refusing.url(),
        answering.url()
    ));
    let out = env
        .cmd()
        .args(["--json", "-m", "gw/m", "--fallback-model", "gw2/m", "go"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let ev = events(&out.stdout);
    let learned = of_type(&ev, "provider.limit_learned");
    assert_eq!(learned.len(), 1);
    assert_eq!(learned[0]["requests_per_minute"], 1);
    assert!(
        stderr.contains("rate limit learned: gw/m at 1 requests/min"),
        "{stderr}"
    );
    let fallback = of_type(&ev, "model.fallback");
    assert_eq!(fallback[0]["reason"], "http_429", "{fallback:?}");
    assert_eq!(refusing.count(), 3, "switch_after: attempts");
}

#[test]
fn pacing_off_learns_nothing() {
    let refusing = Stub::start(|_, _| Reply::status(429));
    let env = TestEnv::new();
    env.user_config(&format!(
        "health_db: off\npacing: off\nretry: {{attempts: 2, rate_limit_attempts: 2, backoff: 1ms, max_backoff: 5ms, jitter: 0}}\nproviders:\n  gw: {{api: openai, endpoint: {}/v1}}\n",
        refusing.url()
    ));
    let out = env
        .cmd()
        .args(["--json", "-m", "gw/m", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert!(of_type(&events(&out.stdout), "provider.limit_learned").is_empty());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("rate limit learned"));
}

#[test]
fn a_server_refusing_everything_ends_as_section_4_says() {
    // Learned at the floor (one a minute); waiting for it counts toward the
    // step's rate-limit budget, so the run ends with exit 75, promptly.
    let refusing = Stub::start(|_, _| Reply::status(429));
    let env = TestEnv::new();
    env.user_config(&format!(
        "health_db: off\nretry: {{attempts: 2, rate_limit_attempts: 3, rate_limit_budget: 1s, backoff: 1ms, max_backoff: 50ms, jitter: 0}}\nproviders:\n  gw: {{api: openai, endpoint: {}/v1}}\n",
        refusing.url()
    ));
    let started = std::time::Instant::now();
    let out = env
        .cmd()
        .args(["--json", "--time-limit", "30s", "-m", "gw/m", "go"])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    let fin = finished(&ev);
    assert_eq!(out.status.code(), Some(75), "{fin}");
    assert_eq!(fin["status"], "error");
    let learned = of_type(&ev, "provider.limit_learned");
    assert_eq!(learned[0]["requests_per_minute"], 1, "the floor");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn nonsense_limits_are_exit_2_naming_the_key_and_the_file() {
    for (yaml, key) in [
        (
            "limits: [{model: \"bedrock/*\", requests: 0}]",
            "limits[0].requests",
        ),
        (
            "limits: [{model: \"bedrock/*\", requests: -3}]",
            "limits[0].requests",
        ),
        (
            "limits: [{model: \"bedrock/*\", requests: 1.5}]",
            "limits[0].requests",
        ),
        (
            "limits: [{model: \"bedrock/*\", tokens: ten}]",
            "limits[0].tokens",
        ),
        (
            "limits: [{model: \"bedrock/*\", requests: 5, per: fortnight}]",
            "limits[0].per",
        ),
        (
            "limits: [{model: \"bedrock/*\", requests: 5, burst: 2}]",
            "burst",
        ),
        ("limits: [{requests: 5}]", "limits[0]"),
        ("limits: [{model: \"bedrock/*\"}]", "limits[0]"),
        (
            "providers: {bw: {api: bedrock, region: us-west-2, limits: {requests: 0}}}",
            "providers.bw.limits.requests",
        ),
        (
            "limits: [{provider: nope, requests: 5}]",
            "limits[0].provider",
        ),
    ] {
        let env = TestEnv::new();
        let file = env.user_config(yaml);
        let out = env
            .cmd()
            .args(["-m", "script/x.json", "go"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{yaml}: {stderr}");
        assert!(stderr.contains(key), "{yaml}: {stderr}");
        if key != "limits[0].provider" {
            assert!(
                stderr.contains(&file.display().to_string()),
                "{yaml}: {stderr}"
            );
        }
    }
}

#[test]
fn a_named_providers_own_limits_apply_to_its_models() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("health.db");
    let env = env(&format!(
        "health_db: {}\nproviders:\n  bw: {{api: bedrock, region: us-east-1, limits: {{requests: 2, per: second}}}}\n",
        db.display()
    ));
    let fake = FakeCloud::scripted(
        "bedrock",
        &env,
        &task(3),
        &["--hidden-limit", "2", "--hidden-period", "1"],
    );
    let cmds = (0..2)
        .map(|_| {
            let mut cmd = env.std_cmd();
            cmd.env("AWS_ACCESS_KEY_ID", AKID)
                .env("AWS_SECRET_ACCESS_KEY", SECRET)
                .env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", fake.url())
                .args([
                    "-m",
                    "bw/us.anthropic.claude-sonnet-4-5-20250929-v1:0",
                    "--json",
                    "go",
                ]);
            cmd
        })
        .collect();
    let outs = fleet(cmds);
    all_succeeded(&outs);
    assert!(log(&fake).iter().all(|(_, t)| !t));
    assert!(sources(&outs).iter().all(|s| s == "declared"));
    assert!(!sources(&outs).is_empty());
}

#[test]
fn a_google_resource_exhausted_teaches_a_limit_and_a_daily_quota_does_not() {
    const KEY: &str = "AIzaSy-fake-PACING-0000000000000000";
    let run = |replies: Value| {
        let env = TestEnv::new();
        env.user_config(
            "health_db: off\nretry: {attempts: 3, backoff: 1ms, max_backoff: 5s, jitter: 0}\n",
        );
        let fake = FakeCloud::scripted("gemini", &env, &replies, &["--key", KEY]);
        let out = env
            .cmd()
            .env("GEMINI_BASE_URL", format!("{}/v1beta", fake.url()))
            .env("GEMINI_API_KEY", KEY)
            .args(["--json", "-m", "gemini/gemini-2.5-flash", "go"])
            .output()
            .unwrap();
        (
            out.status.code(),
            events(&out.stdout),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, ev, stderr) = run(json!([{"retry_delay": "1s"}, {"text": "done"}]));
    assert_eq!(code, Some(0), "{stderr}");
    let learned = of_type(&ev, "provider.limit_learned");
    assert_eq!(learned.len(), 1, "{ev:?}");
    assert_eq!(learned[0]["reason"], "http_429");
    assert_eq!(learned[0]["requests_per_minute"], 1);
    assert!(stderr.contains("rate limit learned: gemini/gemini-2.5-flash at 1 requests/min"));
    // A daily quota is `quota`, not a rate limit: nothing is learned.
    let (_, ev, stderr) = run(json!([{"daily_quota": true}]));
    assert!(of_type(&ev, "provider.limit_learned").is_empty(), "{ev:?}");
    assert!(!stderr.contains("rate limit learned"));
}

#[test]
fn check_lists_each_models_limits_with_their_source() {
    let refusing = Stub::start(|_, _| Reply::status(429));
    let answering = Stub::start(|_, _| chat_sse_submit("call_1", "ok"));
    let env = TestEnv::new();
    let db = env.home().join("shared-health.db");
    env.user_config(&format!(
        "health_db: {}\nretry: {{attempts: 1, rate_limit_attempts: 1, backoff: 1ms, jitter: 0}}\nlimits: [{{model: \"gw2/*\", requests: 5, per: hour}}]\nproviders:\n  gw: {{api: openai, endpoint: {}/v1}}\n  gw2: {{api: openai, endpoint: {}/v1}}\n",
        db.display(),
        refusing.url(),
        answering.url()
    ));
    // A refused run teaches gw/m its limit on the shared record.
    let out = env.cmd().args(["-q", "-m", "gw/m", "go"]).output().unwrap();
    assert_eq!(out.status.code(), Some(75));
    let out = env
        .cmd()
        .args(["--check", "-m", "gw/m", "--fallback-model", "gw2/m"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("limit  gw/m  1 requests/min  learned"),
        "{stdout}"
    );
    assert!(
        stdout.contains("limit  gw2/m  5 requests/h  declared"),
        "{stdout}"
    );
    let out = env
        .cmd()
        .args([
            "--check",
            "--json",
            "-m",
            "gw/m",
            "--fallback-model",
            "gw2/m",
        ])
        .output()
        .unwrap();
    let limits = of_type(&events(&out.stdout), "check.limit")
        .iter()
        .map(|e| (e["model"].to_string(), e["source"].to_string()))
        .collect::<Vec<_>>();
    assert_eq!(limits.len(), 2, "{limits:?}");
}
