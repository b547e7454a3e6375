//! The fallback chain over script models (SPEC section 5): triggers and
//! non-triggers, the chain walk, stickiness, half-open restore, visibility.

use predicates::prelude::*;
use serde_json::Value;

use crate::support::{events, finished, of_type, read_json, TestEnv};

const FAST_RETRY: &str = "retry: {attempts: 3, backoff: 1ms, max_backoff: 5ms, jitter: 0}\n";
const SUBMIT_B: &str = "- tool_calls:\n  - {name: submit, arguments: {output: answered-by-b}}\n";

struct Run {
    code: Option<i32>,
    events: Vec<Value>,
    stderr: String,
}

fn run(env: &TestEnv, config: &str, args: &[&str]) -> Run {
    let cfg = env.write("config.yaml", config);
    let out = env
        .cmd()
        .args(["-c", cfg.to_str().unwrap(), "--json"])
        .args(args)
        .arg("task")
        .output()
        .unwrap();
    Run {
        code: out.status.code(),
        events: events(&out.stdout),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn without_a_chain_503_forever_ends_in_error_with_no_trace_of_fallback() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let out = env.file("t.json");
    let r = run(&env, FAST_RETRY, &["-m", &a, "-o", out.to_str().unwrap()]);
    assert_eq!(r.code, Some(75));
    assert_eq!(
        of_type(&r.events, "provider.retry").len(),
        2,
        "3 attempts = 2 retries"
    );
    assert!(of_type(&r.events, "model.fallback").is_empty());
    assert!(r.events[0].get("fallback_models").is_none());
    let end = finished(&r.events);
    assert_eq!(
        end["exit_code"], 75,
        "an outage without a chain is exit 75 too"
    );
    assert_eq!(end["model_fallbacks"], 0);
    assert_eq!(end["active_model"], a.as_str());
    assert!(end["error"].as_str().unwrap().contains("503"));
    assert!(!r.stderr.contains("model fallback"));
    let t = read_json(&out);
    assert!(t.get("fallback_models").is_none());
    assert!(t.get("model_switches").is_none());
}

#[test]
fn single_switch_on_503_finishes_on_the_fallback() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let b = env.script("b.yaml", SUBMIT_B);
    let out = env.file("t.json");
    let r = run(
        &env,
        FAST_RETRY,
        &[
            "-m",
            &a,
            "--fallback-model",
            &b,
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "model fallback: {a} -> {b} (http_503) at step 1\n"
        )),
        "{}",
        r.stderr
    );
    let fb = of_type(&r.events, "model.fallback");
    assert_eq!(fb.len(), 1);
    assert_eq!(fb[0]["step"], 1);
    assert_eq!(fb[0]["from"], a.as_str());
    assert_eq!(fb[0]["to"], b.as_str());
    assert_eq!(fb[0]["reason"], "http_503");
    assert_eq!(fb[0]["attempts"], 3);
    assert_eq!(r.events[0]["fallback_models"], serde_json::json!([b]));
    let end = finished(&r.events);
    assert_eq!(end["status"], "submitted");
    assert_eq!(end["model_fallbacks"], 1);
    assert_eq!(end["active_model"], b.as_str());
    assert_eq!(end["output"], "answered-by-b");
    assert_eq!(end["steps"], 1, "failed attempts are not steps");
    let response = of_type(&r.events, "model.response");
    assert_eq!(response[0]["model"], b.as_str());
    let t = read_json(&out);
    assert_eq!(t["model"], a.as_str());
    assert_eq!(t["active_model"], b.as_str());
    assert_eq!(t["fallback_models"], serde_json::json!([b]));
    assert_eq!(
        t["model_switches"],
        serde_json::json!([{"step": 1, "from": a, "to": b, "reason": "http_503", "attempts": 3}])
    );
    assert_eq!(t["messages"][1]["model"], b.as_str());
}

#[test]
fn switch_on_429_network_timeout_and_incomplete_streams() {
    for (error, reason) in [
        ("{status: 429}", "http_429"),
        ("{status: 529}", "http_529"),
        ("{kind: network}", "network"),
        ("{kind: timeout}", "timeout"),
        ("{kind: stream_incomplete}", "stream_incomplete"),
    ] {
        let env = TestEnv::new();
        let a = env.script("a.yaml", &format!("- error: {error}\n"));
        let b = env.script("b.yaml", SUBMIT_B);
        let r = run(&env, FAST_RETRY, &["-m", &a, "--fallback-model", &b]);
        assert_eq!(r.code, Some(0), "{error}");
        let fb = of_type(&r.events, "model.fallback");
        assert_eq!(fb.len(), 1, "{error}");
        assert_eq!(fb[0]["reason"], reason);
        assert!(r.stderr.contains(&format!("({reason}) at step 1")));
    }
}

#[test]
fn non_retryable_errors_never_switch() {
    for status in [400, 401, 403, 404, 413, 422] {
        let env = TestEnv::new();
        let a = env.script("a.yaml", &format!("- error: {{status: {status}}}\n"));
        let b = env.script("b.yaml", SUBMIT_B);
        let r = run(&env, FAST_RETRY, &["-m", &a, "--fallback-model", &b]);
        assert_eq!(r.code, Some(1), "{status}");
        assert!(of_type(&r.events, "model.fallback").is_empty(), "{status}");
        assert!(of_type(&r.events, "provider.retry").is_empty(), "{status}");
        assert_eq!(finished(&r.events)["status"], "error");
        assert_eq!(finished(&r.events)["active_model"], a.as_str());
    }
}

#[test]
fn quota_switches_at_once() {
    let env = TestEnv::new();
    let a = env.script(
        "a.yaml",
        "- error: {kind: quota, message: insufficient_quota}\n",
    );
    let b = env.script("b.yaml", SUBMIT_B);
    let r = run(&env, FAST_RETRY, &["-m", &a, "--fallback-model", &b]);
    assert_eq!(r.code, Some(0));
    assert!(of_type(&r.events, "provider.retry").is_empty());
    let fb = of_type(&r.events, "model.fallback");
    assert_eq!(fb[0]["reason"], "quota");
    assert_eq!(fb[0]["attempts"], 1);
}

#[test]
fn context_overflow_never_switches() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {kind: context_overflow}\n");
    let b = env.script("b.yaml", SUBMIT_B);
    let r = run(&env, FAST_RETRY, &["-m", &a, "--fallback-model", &b]);
    assert!(of_type(&r.events, "model.fallback").is_empty());
    assert_ne!(finished(&r.events)["active_model"], b.as_str());
}

#[test]
fn chain_walks_a_to_b_to_c() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let b = env.script("b.yaml", "- error: {kind: network}\n");
    let c = env.script(
        "c.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: from-c}}\n",
    );
    let r = run(
        &env,
        FAST_RETRY,
        &["-m", &a, "--fallback-model", &b, "--fallback-model", &c],
    );
    assert_eq!(r.code, Some(0));
    let fb = of_type(&r.events, "model.fallback");
    assert_eq!(fb.len(), 2);
    assert_eq!(
        (fb[0]["from"].as_str(), fb[0]["to"].as_str()),
        (Some(a.as_str()), Some(b.as_str()))
    );
    assert_eq!(
        (fb[1]["from"].as_str(), fb[1]["to"].as_str()),
        (Some(b.as_str()), Some(c.as_str()))
    );
    assert_eq!(fb[1]["reason"], "network");
    assert_eq!(finished(&r.events)["output"], "from-c");
    assert_eq!(finished(&r.events)["model_fallbacks"], 2);
}

#[test]
fn exhausted_chain_names_every_model_and_reason() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let b = env.script("b.yaml", "- error: {status: 429}\n");
    let c = env.script("c.yaml", "- error: {kind: network}\n");
    let r = run(
        &env,
        FAST_RETRY,
        &["-m", &a, "--fallback-model", &b, "--fallback-model", &c],
    );
    assert_eq!(r.code, Some(75));
    let error = finished(&r.events)["error"].as_str().unwrap().to_string();
    for part in [
        format!("{a} (http_503)"),
        format!("{b} (http_429)"),
        format!("{c} (network)"),
    ] {
        assert!(error.contains(&part), "{error}");
    }
}

#[test]
fn non_retryable_error_from_a_fallback_stops_the_chain() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let b = env.script(
        "b.yaml",
        "- error: {status: 400, message: unsupported parameter}\n",
    );
    let c = env.script("c.yaml", SUBMIT_B);
    let r = run(
        &env,
        FAST_RETRY,
        &["-m", &a, "--fallback-model", &b, "--fallback-model", &c],
    );
    assert_eq!(r.code, Some(1));
    assert_eq!(of_type(&r.events, "model.fallback").len(), 1);
    let error = finished(&r.events)["error"].as_str().unwrap();
    assert!(error.contains(&b) && error.contains("400"), "{error}");
}

#[test]
fn switch_after_one_moves_on_after_one_failure() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let b = env.script("b.yaml", SUBMIT_B);
    let r = run(
        &env,
        &format!("{FAST_RETRY}fallback: {{switch_after: 1}}\n"),
        &["-m", &a, "--fallback-model", &b],
    );
    assert!(of_type(&r.events, "provider.retry").is_empty());
    assert_eq!(of_type(&r.events, "model.fallback")[0]["attempts"], 1);
}

#[test]
fn later_steps_stay_on_the_model_that_answered() {
    let env = TestEnv::new();
    // If A were asked again at step 2, it would answer from-a.
    let a = env.script(
        "a.yaml",
        "- error: {status: 503}\n- tool_calls:\n  - {name: submit, arguments: {output: from-a}}\n",
    );
    let b = env.script(
        "b.yaml",
        "- tool_calls:\n  - {name: bash, arguments: {command: 'true'}}\n- tool_calls:\n  - {name: submit, arguments: {output: from-b}}\n",
    );
    let r = run(
        &env,
        &format!("{FAST_RETRY}fallback: {{switch_after: 1}}\n"),
        &["-m", &a, "--fallback-model", &b],
    );
    assert_eq!(finished(&r.events)["output"], "from-b");
    let steps = of_type(&r.events, "step.started");
    assert_eq!(steps[1]["model"], b.as_str());
    assert!(of_type(&r.events, "model.restore").is_empty());
}

#[test]
fn cooldown_zero_probes_the_primary_and_restores_it() {
    let env = TestEnv::new();
    let a = env.script(
        "a.yaml",
        "- error: {status: 503}\n- tool_calls:\n  - {name: bash, arguments: {command: 'true'}}\n- tool_calls:\n  - {name: submit, arguments: {output: from-a}}\n",
    );
    let b = env.script(
        "b.yaml",
        "- tool_calls:\n  - {name: bash, arguments: {command: 'true'}}\n",
    );
    let r = run(
        &env,
        &format!("{FAST_RETRY}fallback: {{switch_after: 1, cooldown: 0}}\n"),
        &["-m", &a, "--fallback-model", &b],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let restore = of_type(&r.events, "model.restore");
    assert_eq!(restore.len(), 1);
    assert_eq!(restore[0]["step"], 2);
    assert_eq!(restore[0]["from"], b.as_str());
    assert_eq!(restore[0]["to"], a.as_str());
    assert!(
        r.stderr
            .contains(&format!("model restore: {b} -> {a} at step 2\n")),
        "{}",
        r.stderr
    );
    assert_eq!(finished(&r.events)["output"], "from-a");
    assert_eq!(finished(&r.events)["active_model"], a.as_str());
}

#[test]
fn failed_probe_moves_on_at_once_and_counts_as_a_switch() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let b = env.script(
        "b.yaml",
        "- tool_calls:\n  - {name: bash, arguments: {command: 'true'}}\n- tool_calls:\n  - {name: submit, arguments: {output: from-b}}\n",
    );
    let r = run(
        &env,
        &format!("{FAST_RETRY}fallback: {{cooldown: 0}}\n"),
        &["-m", &a, "--fallback-model", &b],
    );
    assert_eq!(r.code, Some(0));
    let fb = of_type(&r.events, "model.fallback");
    assert_eq!(fb.len(), 2);
    assert_eq!(fb[0]["attempts"], 3);
    assert_eq!(fb[1]["step"], 2);
    assert_eq!(fb[1]["from"], a.as_str());
    assert_eq!(fb[1]["attempts"], 1, "a probe is one request");
    // The probe gets no backoff: no retry event at step 2.
    assert!(of_type(&r.events, "provider.retry")
        .iter()
        .all(|e| e["step"] == 1));
    assert_eq!(finished(&r.events)["model_fallbacks"], 2);
}

#[test]
fn long_retry_after_switches_at_once_with_a_chain_and_waits_the_cap_without() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 429, retry_after: 3600}\n");
    let b = env.script("b.yaml", SUBMIT_B);
    let config = "retry: {attempts: 2, rate_limit_attempts: 2, backoff: 1ms, max_backoff: 20ms, jitter: 0}\n";
    let r = run(&env, config, &["-m", &a, "--fallback-model", &b]);
    assert_eq!(r.code, Some(0));
    assert!(of_type(&r.events, "provider.retry").is_empty());
    assert_eq!(of_type(&r.events, "model.fallback")[0]["attempts"], 1);
    let r = run(&env, config, &["-m", &a]);
    let retries = of_type(&r.events, "provider.retry");
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0]["wait_seconds"], 0.02);
    assert_eq!(r.code, Some(75));
}

#[test]
fn time_limit_during_backoff_sends_no_fallback_request() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let b = env.script("b.yaml", SUBMIT_B);
    let config = "retry: {attempts: 3, backoff: 10s, jitter: 0}\n";
    let r = run(
        &env,
        config,
        &["-m", &a, "--fallback-model", &b, "--time-limit", "300ms"],
    );
    assert_eq!(r.code, Some(3));
    assert_eq!(finished(&r.events)["status"], "time_limit");
    assert!(of_type(&r.events, "model.fallback").is_empty());
    assert!(of_type(&r.events, "model.response").is_empty());
}

#[test]
fn interrupt_during_backoff_sends_no_fallback_request() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let b = env.script("b.yaml", SUBMIT_B);
    let cfg = env.write(
        "config.yaml",
        "retry: {attempts: 3, backoff: 10s, jitter: 0}\n",
    );
    let path = env.file("t.json");
    let child = env
        .std_cmd()
        .args([
            "-c",
            cfg.to_str().unwrap(),
            "--json",
            "-m",
            &a,
            "--fallback-model",
            &b,
            "-o",
            path.to_str().unwrap(),
            "task",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Signal once the run is under way (its checkpoint exists) and in its
    // 10 s backoff.
    for _ in 0..200 {
        if path.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: signalling our own child.
    unsafe { kill(child.id() as i32, 2) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["status"], "interrupted");
    assert!(of_type(&ev, "model.fallback").is_empty());
    assert!(of_type(&ev, "model.response").is_empty());
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn combined_cost_limit_counts_every_model() {
    let env = TestEnv::new();
    let a = env.script(
        "a.yaml",
        "- tool_calls:\n  - {name: bash, arguments: {command: 'true'}}\n  cost: 0.4\n- error: {status: 503}\n",
    );
    let b = env.script(
        "b.yaml",
        "- tool_calls:\n  - {name: bash, arguments: {command: 'true'}}\n  cost: 0.7\n",
    );
    let r = run(
        &env,
        &format!("{FAST_RETRY}fallback: {{switch_after: 1}}\n"),
        &["-m", &a, "--fallback-model", &b, "--cost-limit", "1"],
    );
    assert_eq!(r.code, Some(3));
    let end = finished(&r.events);
    assert_eq!(end["status"], "cost_limit");
    assert!((end["cost_usd"].as_f64().unwrap() - 1.1).abs() < 1e-9);
    let costs: Vec<f64> = of_type(&r.events, "model.response")
        .iter()
        .map(|e| e["cost_usd"].as_f64().unwrap())
        .collect();
    assert_eq!(costs, [0.4, 0.7]);
}

#[test]
fn unpriced_chain_members_are_warned_about_before_the_first_request() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", SUBMIT_B);
    let b = env.script("b.yaml", SUBMIT_B);
    let r = run(
        &env,
        FAST_RETRY,
        &["-m", &a, "--fallback-model", &b, "--cost-limit", "1"],
    );
    let first_step = r
        .events
        .iter()
        .position(|e| e["type"] == "step.started")
        .unwrap();
    let warnings: Vec<&Value> = r.events[..first_step]
        .iter()
        .filter(|e| e["type"] == "warning")
        .collect();
    assert_eq!(warnings.len(), 2);
    assert!(warnings[0]["message"].as_str().unwrap().contains(&a));
    assert!(warnings[1]["message"].as_str().unwrap().contains(&b));
}

#[test]
fn chain_validation_errors_exit_two_before_any_request() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", SUBMIT_B);
    let b = env.script("b.yaml", SUBMIT_B);
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec!["--fallback-model".into(), "nope/x".into()],
            "nope/x".into(),
        ),
        (
            vec!["--fallback-model".into(), "justaname".into()],
            "justaname".into(),
        ),
        (vec!["--fallback-model".into(), a.clone()], a.clone()),
        (
            vec![
                "--fallback-model".into(),
                b.clone(),
                "--fallback-model".into(),
                b.clone(),
            ],
            b.clone(),
        ),
        (
            vec![
                "--fallback-model".into(),
                "anthropic/claude-sonnet-4-5".into(),
            ],
            "ANTHROPIC_API_KEY".into(),
        ),
        (
            vec![
                "--fallback-model".into(),
                "script/x1".into(),
                "--fallback-model".into(),
                "script/x2".into(),
                "--fallback-model".into(),
                "script/x3".into(),
                "--fallback-model".into(),
                "script/x4".into(),
            ],
            "script/x4".into(),
        ),
    ];
    for (args, named) in cases {
        let out = env
            .cmd()
            .args(["-m", &a, "--json"])
            .args(&args)
            .arg("t")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            out.stdout.is_empty(),
            "no events before validation: {args:?}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&named), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    }
}

#[test]
fn no_fallback_conflicts_with_fallback_model_and_ignores_config() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let b = env.script("b.yaml", SUBMIT_B);
    env.cmd()
        .args(["-m", &a, "--fallback-model", &b, "--no-fallback", "t"])
        .assert()
        .code(2);
    let r = run(
        &env,
        &format!("{FAST_RETRY}fallback_models: [{b}]\n"),
        &["-m", &a, "--no-fallback"],
    );
    assert_eq!(r.code, Some(75));
    assert!(of_type(&r.events, "model.fallback").is_empty());
    // And the config chain applies without the flag.
    let r = run(
        &env,
        &format!("{FAST_RETRY}fallback_models: [{b}]\n"),
        &["-m", &a],
    );
    assert_eq!(r.code, Some(0));
}

#[test]
fn fallback_lines_print_in_quiet_mode_too() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let b = env.script("b.yaml", SUBMIT_B);
    let cfg = env.write("config.yaml", FAST_RETRY);
    env.cmd()
        .args([
            "-c",
            cfg.to_str().unwrap(),
            "-q",
            "-m",
            &a,
            "--fallback-model",
            &b,
            "t",
        ])
        .assert()
        .success()
        .stdout("answered-by-b\n")
        .stderr(format!("model fallback: {a} -> {b} (http_503) at step 1\n"));
    env.cmd()
        .args([
            "-c",
            cfg.to_str().unwrap(),
            "-m",
            &a,
            "--fallback-model",
            &b,
            "t",
        ])
        .assert()
        .success()
        .stderr(predicate::str::contains(format!(
            "1 model fallback (now {b})"
        )));
}
