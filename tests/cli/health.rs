//! Shared provider health across runs on one machine (SPEC section 13):
//! several processes sharing one state directory.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{json, Value};

use crate::support::stub::{Reply, Stub};
use crate::support::{events, finished, of_type, read_json, TestEnv};

const SUBMIT: &str = "- tool_calls:\n  - {name: submit, arguments: {output: done}}\n";
const DEAD: &str = "- error: {status: 503}\n";

/// A dead primary and a healthy fallback, with `config` as the user config.
fn setup(config: &str) -> (TestEnv, String, String) {
    let env = TestEnv::new();
    env.user_config(config);
    let primary = env.script("primary.yaml", DEAD);
    let fallback = env.script("fallback.yaml", SUBMIT);
    (env, primary, fallback)
}

const FAST: &str = "retry: {attempts: 3, backoff: 1ms, jitter: 0}\n";

fn run(env: &TestEnv, args: &[&str]) -> (Vec<Value>, String, Option<i32>) {
    let out = env
        .cmd()
        .arg("--json")
        .args(args)
        .arg("fix the bug")
        .output()
        .unwrap();
    (
        events(&out.stdout),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code(),
    )
}

fn chain_run(env: &TestEnv, primary: &str, fallback: &str) -> (Vec<Value>, String, Option<i32>) {
    run(env, &["-m", primary, "--fallback-model", fallback])
}

/// Requests this run made to `spec`: its `model.fallback` attempts, or its
/// retries plus the request that answered.
fn requests_to(ev: &[Value], spec: &str) -> u64 {
    let switched: u64 = of_type(ev, "model.fallback")
        .iter()
        .filter(|e| e["from"] == spec)
        .map(|e| e["attempts"].as_u64().unwrap())
        .sum();
    let answered = of_type(ev, "model.response")
        .iter()
        .filter(|e| e["model"] == spec)
        .count() as u64;
    let retries_before_answer = if answered > 0 {
        of_type(ev, "provider.retry")
            .iter()
            .filter(|e| e["model"] == spec)
            .count() as u64
    } else {
        0
    };
    switched + answered + retries_before_answer
}

fn default_db(env: &TestEnv) -> PathBuf {
    env.home().join(".local/state/tinyagent/health.db")
}

/// The `cooling_until` (unix ms) the record holds for `spec`.
fn cooling_until(db: &Path, spec: &str) -> Option<i64> {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row(
        "SELECT cooling_until FROM model_health WHERE model = ?1",
        [spec],
        |r| r.get(0),
    )
    .unwrap()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn a_second_run_skips_the_primary_another_run_found_dead() {
    let (env, primary, fallback) = setup(FAST);
    let (first, stderr, code) = chain_run(&env, &primary, &fallback);
    assert_eq!(code, Some(0), "{stderr}");
    let switch = of_type(&first, "model.fallback")[0];
    assert_eq!(switch["reason"], "http_503");
    assert_eq!(switch["attempts"], 3);

    let out_path = env.file("second.json");
    let (second, stderr, code) = run(
        &env,
        &[
            "-m",
            &primary,
            "--fallback-model",
            &fallback,
            "-o",
            out_path.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let switches = of_type(&second, "model.fallback");
    assert_eq!(switches.len(), 1, "{second:?}");
    assert_eq!(switches[0]["from"], primary.as_str());
    assert_eq!(switches[0]["to"], fallback.as_str());
    assert_eq!(switches[0]["reason"], "cooldown");
    assert_eq!(switches[0]["attempts"], 0, "no request to the dead primary");
    assert!(of_type(&second, "provider.retry").is_empty(), "{second:?}");
    assert_eq!(requests_to(&second, &primary), 0);
    assert!(
        stderr.contains(&format!(
            "model fallback: {primary} -> {fallback} (cooldown) at step 1"
        )),
        "{stderr}"
    );
    let end = finished(&second);
    assert_eq!(end["model_fallbacks"], 1);
    assert_eq!(end["active_model"], fallback.as_str());
    let doc = read_json(&out_path);
    assert_eq!(doc["model_switches"][0]["reason"], "cooldown");
    assert_eq!(doc["model_switches"][0]["attempts"], 0);
}

#[test]
fn eight_runs_started_together_fail_over_after_about_one_round() {
    let (env, primary, fallback) = setup("retry: {attempts: 6, backoff: 200ms, jitter: 0}\n");
    let children: Vec<_> = (0..8)
        .map(|_| {
            env.std_cmd()
                .args([
                    "--json",
                    "-m",
                    &primary,
                    "--fallback-model",
                    &fallback,
                    "fix the bug",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut total = 0;
    let mut skipped = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ev = events(&out.stdout);
        assert_eq!(finished(&ev)["active_model"], fallback.as_str());
        let switch = of_type(&ev, "model.fallback");
        assert_eq!(switch.len(), 1);
        skipped += (switch[0]["reason"] == "cooldown") as u32;
        total += requests_to(&ev, &primary);
    }
    eprintln!("dead primary: {total} requests, {skipped} runs skipped");
    // Alone, each run would spend its whole budget: 8 × 6 = 48 requests.
    assert!(total <= 16, "the dead primary got {total} requests");
    assert!(
        skipped >= 6,
        "only {skipped} runs skipped on the shared record"
    );
}

#[test]
fn health_db_off_does_not_share() {
    let (env, primary, fallback) = setup(&format!("{FAST}health_db: off\n"));
    for _ in 0..2 {
        let (ev, stderr, code) = chain_run(&env, &primary, &fallback);
        assert_eq!(code, Some(0), "{stderr}");
        let switch = of_type(&ev, "model.fallback")[0];
        assert_eq!(switch["reason"], "http_503");
        assert_eq!(switch["attempts"], 3);
    }
    // No health record (the run store keeps its runs beside it).
    let state = env.home().join(".local/state/tinyagent");
    assert!(!state.join("health.db").exists());
    assert!(std::fs::read_dir(&state)
        .map(|d| d.flatten().all(|e| e.path().is_dir()))
        .unwrap_or(true));
}

#[test]
fn a_run_without_a_chain_ignores_the_record_and_its_success_clears_it() {
    let env = TestEnv::new();
    env.user_config(&format!("{FAST}fallback: {{switch_after: 2}}\n"));
    let flaky = env.script(
        "flaky.yaml",
        &format!("- error: {{status: 503}}\n  repeat: 2\n{SUBMIT}"),
    );
    let fallback = env.script("fallback.yaml", SUBMIT);
    let (ev, _, _) = chain_run(&env, &flaky, &fallback);
    assert_eq!(of_type(&ev, "model.fallback")[0]["reason"], "http_503");
    assert!(cooling_until(&default_db(&env), &flaky).is_some_and(|t| t > now_ms()));

    // No chain: the record is no reason to skip; the model is asked until it answers.
    let (ev, stderr, code) = run(&env, &["-m", &flaky]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(of_type(&ev, "provider.retry").len(), 2);
    assert!(of_type(&ev, "model.fallback").is_empty());
    assert_eq!(finished(&ev)["active_model"], flaky.as_str());
    assert_eq!(
        cooling_until(&default_db(&env), &flaky),
        None,
        "cleared by the success"
    );

    // So the next run with a chain asks it again.
    let (ev, _, _) = chain_run(&env, &flaky, &fallback);
    let switch = of_type(&ev, "model.fallback")[0];
    assert_eq!(switch["reason"], "http_503");
    assert_eq!(switch["attempts"], 2);
}

#[test]
fn an_expired_record_is_probed_once_and_a_success_clears_it() {
    let (env, primary, fallback) = setup(&format!("{FAST}fallback: {{cooldown: 1s}}\n"));
    chain_run(&env, &primary, &fallback);
    let db = default_db(&env);
    assert!(cooling_until(&db, &primary).is_some());
    // The provider recovers (same spec, same endpoint).
    std::fs::write(primary.strip_prefix("script/").unwrap(), SUBMIT).unwrap();
    let (ev, _, _) = chain_run(&env, &primary, &fallback);
    assert_eq!(
        of_type(&ev, "model.fallback")[0]["reason"],
        "cooldown",
        "still cooling"
    );

    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (ev, stderr, code) = chain_run(&env, &primary, &fallback);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(of_type(&ev, "model.fallback").is_empty(), "{ev:?}");
    assert_eq!(requests_to(&ev, &primary), 1);
    assert_eq!(finished(&ev)["active_model"], primary.as_str());
    assert_eq!(cooling_until(&db, &primary), None, "cleared for everyone");
}

#[test]
fn a_failed_probe_renews_the_record_and_moves_on_at_once() {
    let (env, primary, fallback) = setup(&format!("{FAST}fallback: {{cooldown: 1s}}\n"));
    chain_run(&env, &primary, &fallback);
    let db = default_db(&env);
    let first = cooling_until(&db, &primary).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (ev, stderr, code) = chain_run(&env, &primary, &fallback);
    assert_eq!(code, Some(0), "{stderr}");
    let switch = of_type(&ev, "model.fallback")[0];
    assert_eq!(switch["reason"], "http_503");
    assert_eq!(switch["attempts"], 1, "one probe, no retries");
    assert!(of_type(&ev, "provider.retry").is_empty());
    assert!(cooling_until(&db, &primary).unwrap() > first, "renewed");
}

#[test]
fn the_record_holds_no_prompt_output_or_key() {
    let env = TestEnv::new();
    env.user_config(FAST);
    let primary = env.script("primary.yaml", DEAD);
    let fallback = env.script(
        "fallback.yaml",
        "- text: OUTPUT-MARKER-91c2 thinking\n  tool_calls:\n  - {name: submit, arguments: {output: ANSWER-MARKER-5d0e}}\n",
    );
    let secret = "sk-SECRET-MARKER-4411";
    for _ in 0..2 {
        let out = env
            .cmd()
            .env("OPENAI_API_KEY", secret)
            .args([
                "--json",
                "-m",
                &primary,
                "--fallback-model",
                &fallback,
                "TASK-MARKER-7f3a fix it",
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
    }
    let dir = env.home().join(".local/state/tinyagent");
    let mut bytes = Vec::new();
    // The record's files; the run store's directory beside them is not the record.
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            bytes.extend(std::fs::read(path).unwrap());
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("http_503"), "read the right files");
    for marker in [
        "TASK-MARKER",
        "OUTPUT-MARKER",
        "ANSWER-MARKER",
        "SECRET-MARKER",
        "fix it",
    ] {
        assert!(
            !text.contains(marker),
            "{marker} found in the health record"
        );
    }
}

#[test]
fn an_unusable_health_db_only_warns() {
    let env = TestEnv::new();
    let blocker = env.write("not-a-dir", "plain file\n");
    env.user_config(&format!(
        "{FAST}health_db: {}/health.db\n",
        blocker.display()
    ));
    let primary = env.script("primary.yaml", DEAD);
    let fallback = env.script("fallback.yaml", SUBMIT);
    for _ in 0..2 {
        let (ev, stderr, code) = chain_run(&env, &primary, &fallback);
        assert_eq!(code, Some(0), "{stderr}");
        let warnings = of_type(&ev, "warning");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let message = warnings[0]["message"].as_str().unwrap();
        assert!(
            message.contains("health record") && message.contains("not-a-dir"),
            "{message}"
        );
        // Section 5 alone: nothing was shared.
        assert_eq!(of_type(&ev, "model.fallback")[0]["reason"], "http_503");
    }
    // Human mode shows it on stderr and still answers.
    env.cmd()
        .args(["-m", &primary, "--fallback-model", &fallback, "fix"])
        .assert()
        .success()
        .stdout("done\n")
        .stderr(predicates::str::contains("health record"));
}

#[test]
fn health_db_path_expands_the_home_directory() {
    let env = TestEnv::new();
    env.user_config(&format!("{FAST}health_db: ~/shared/health.db\n"));
    let primary = env.script("primary.yaml", DEAD);
    let fallback = env.script("fallback.yaml", SUBMIT);
    chain_run(&env, &primary, &fallback);
    let db = env.home().join("shared/health.db");
    assert!(cooling_until(&db, &primary).is_some());
    assert!(!default_db(&env).exists());
}

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

const KEY: &str = "sk-test-HEALTH-SECRET-0042";

/// A std command running `openai/gpt-5` at `stub` with a script fallback.
fn http_cmd(env: &TestEnv, stub: &Stub, fallback: &str) -> std::process::Command {
    let mut cmd = env.std_cmd();
    cmd.env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", KEY)
        .args(["--json", "-m", "openai/gpt-5", "--fallback-model", fallback])
        .arg("TASK-MARKER-http fix it")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn eight_runs_against_a_dead_http_primary_send_about_one_budget_in_total() {
    let (env, _, fallback) = setup("retry: {attempts: 6, backoff: 200ms, jitter: 0}\n");
    let stub = Stub::sequence(vec![overloaded()]);
    let children: Vec<_> = (0..8)
        .map(|_| http_cmd(&env, &stub, &fallback).spawn().unwrap())
        .collect();
    let mut reported = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        reported += requests_to(&events(&out.stdout), "openai/gpt-5");
    }
    let received = stub.count() as u64;
    eprintln!("the dead primary received {received} requests");
    assert_eq!(received, reported, "the events account for every request");
    // Each run alone would send 6: 48 in all.
    assert!(
        received <= 16,
        "the dead primary received {received} requests"
    );

    // A ninth run, after them, sends it nothing.
    let out = http_cmd(&env, &stub, &fallback).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stub.count() as u64, received);
    let ev = events(&out.stdout);
    assert_eq!(of_type(&ev, "model.fallback")[0]["reason"], "cooldown");

    // The record names the endpoint with its port, and holds no key or task.
    let bytes = std::fs::read_dir(env.home().join(".local/state/tinyagent"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .flat_map(|p| std::fs::read(p).unwrap())
        .collect::<Vec<u8>>();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains(&format!("127.0.0.1:{}/v1", stub.port)),
        "endpoint with port"
    );
    assert!(!text.contains("HEALTH-SECRET") && !text.contains("TASK-MARKER"));
}

#[test]
fn a_locked_health_db_costs_one_warning_not_the_run() {
    let (env, primary, fallback) = setup(FAST);
    // A first run creates the record; then another process holds its write lock.
    let (_, stderr, code) = run(&env, &["-m", &fallback]);
    assert_eq!(code, Some(0), "{stderr}");
    let conn = rusqlite::Connection::open(default_db(&env)).unwrap();
    conn.execute_batch("BEGIN EXCLUSIVE; UPDATE model_health SET updated_at = 0;")
        .unwrap();
    let (ev, stderr, code) = chain_run(&env, &primary, &fallback);
    assert_eq!(code, Some(0), "{stderr}");
    let warnings = of_type(&ev, "warning");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0]["message"].as_str().unwrap().contains("locked"),
        "{warnings:?}"
    );
    let switch = of_type(&ev, "model.fallback")[0];
    assert_eq!(
        (switch["reason"].as_str(), switch["attempts"].as_u64()),
        (Some("http_503"), Some(3))
    );
    conn.execute_batch("ROLLBACK").unwrap();
}

#[test]
fn a_resumed_run_skips_the_primary_its_failed_run_recorded() {
    let (env, primary, fallback) = setup(FAST);
    let traj = env.file("t.json");
    let (ev, _, code) = run(&env, &["-m", &primary, "-o", traj.to_str().unwrap()]);
    assert_eq!(code, Some(75));
    assert_eq!(
        of_type(&ev, "provider.retry").len(),
        2,
        "no chain: the whole budget"
    );
    let out = env
        .cmd()
        .args([
            "--json",
            "--resume",
            traj.to_str().unwrap(),
            "--fallback-model",
            &fallback,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    let switch = of_type(&ev, "model.fallback")[0];
    assert_eq!(switch["reason"], "cooldown");
    assert_eq!(switch["attempts"], 0);
    assert!(of_type(&ev, "provider.retry").is_empty());
}
