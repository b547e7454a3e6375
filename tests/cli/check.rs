//! `--check` (SPEC section 15): one small streamed request per model of the
//! configuration, in parallel, one verdict line each; FAIL with the reason
//! and the vendor's message; exit 0 / 1 / 2; `--json` events; no retries,
//! no health record, no key in any line.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::openai::{chat_sse_submit, chat_sse_text};
use crate::support::stub::{Reply, Stub};
use crate::support::{events, of_type, TestEnv};

const KEY: &str = "sk-test-Zq8SECRETkey1234567890";

/// A named OpenAI-compatible provider `name` at `stub`, keyed by `GW_KEY`.
fn provider(name: &str, url: &str, priced: bool) -> String {
    let models = if priced {
        "    models:\n      m: {input_price: 1.0, output_price: 2.0}\n"
    } else {
        ""
    };
    format!("  {name}:\n    api: openai\n    endpoint: {url}/v1\n    api_key_env: GW_KEY\n{models}")
}

struct Check {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn check(env: &TestEnv, config: &str, args: &[&str]) -> Check {
    let cfg = env.write("config.yaml", config);
    let out = env
        .cmd()
        .env("GW_KEY", KEY)
        .args(["--check", "-c", cfg.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    let c = Check {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !c.stdout.contains(KEY) && !c.stderr.contains(KEY),
        "key leaked"
    );
    c
}

/// The verdict lines with each `<n> ms` replaced by `N ms`.
fn shapes(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split("  ").collect();
            if fields[0] == "ok" {
                let ms = fields[2].strip_suffix(" ms").expect("<n> ms");
                assert!(ms.parse::<u64>().is_ok(), "{line}");
                let mut fields = fields.clone();
                fields[2] = "N ms";
                fields.join("  ")
            } else {
                line.to_string()
            }
        })
        .collect()
}

#[test]
fn a_three_model_chain_and_the_subagent_model_each_get_one_probe_and_a_line() {
    let env = TestEnv::new();
    let a = Stub::sequence(vec![chat_sse_submit("call_1", "pong")]);
    let b = Stub::sequence(vec![chat_sse_text("pong")]);
    let c = Stub::sequence(vec![chat_sse_submit("call_1", "pong")]);
    let sub = Stub::sequence(vec![chat_sse_submit("call_1", "pong")]);
    let config = format!(
        "model: a/m\nfallback_models: [b/m, c/m]\nsubagents: {{model: s/m}}\nproviders:\n{}{}{}{}",
        provider("a", &a.url(), true),
        provider("b", &b.url(), true),
        provider("c", &c.url(), false),
        provider("s", &sub.url(), true),
    );
    let r = check(&env, &config, &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(
        shapes(&r.stdout),
        [
            "ok  a/m  N ms  tool calls: yes  price: known",
            "ok  b/m  N ms  tool calls: no  price: known",
            "ok  c/m  N ms  tool calls: yes  price: unknown",
            "ok  s/m  N ms  tool calls: yes  price: known",
        ]
    );
    for stub in [&a, &b, &c, &sub] {
        let requests = stub.requests();
        assert_eq!(requests.len(), 1);
        let body = requests[0].json();
        assert_eq!(body["stream"], true);
        assert_eq!(body["tools"].as_array().unwrap().len(), 1, "{body}");
        let budget = body
            .get("max_completion_tokens")
            .or_else(|| body.get("max_tokens"))
            .and_then(Value::as_u64)
            .expect("a reply budget");
        assert!(budget <= 64, "{budget}");
    }
    assert_eq!(r.stderr, "");
}

#[test]
fn failures_name_the_reason_and_the_vendors_message_without_the_key_and_exit_1() {
    let env = TestEnv::new();
    let wrong_key = Stub::sequence(vec![Reply::json(
        401,
        &json!({"error": {"message": format!("Incorrect API key provided: sk-test-{}{}. You can find your API key at https://platform.openai.com/account/api-keys.", "*".repeat(16), &KEY[KEY.len() - 4..]), "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}),
    )]);
    let unknown = Stub::sequence(vec![Reply::json(
        404,
        &json!({"error": {"message": "The model `m` does not exist or you do not have access to it.", "type": "invalid_request_error", "param": null, "code": "model_not_found"}}),
    )]);
    let busy = Stub::sequence(vec![Reply::status(503)]);
    // A port with nothing listening: bind, read the port, close.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = format!(
        "model: a/m\nfallback_models: [b/m, c/m]\nsubagents: {{model: d/m}}\nretry: {{attempts: 6, backoff: 1ms}}\nproviders:\n{}{}{}{}",
        provider("a", &wrong_key.url(), true),
        provider("b", &unknown.url(), true),
        provider("c", &busy.url(), true),
        provider("d", &format!("http://127.0.0.1:{closed}"), true),
    );
    let r = check(&env, &config, &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", r.stdout);
    assert!(
        lines[0].starts_with("FAIL  a/m  http_401: Incorrect API key provided: sk-<redacted>"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].starts_with(
            "FAIL  b/m  http_404: The model `m` does not exist or you do not have access to it."
        ) && lines[1].ends_with("(hint: the model name may be wrong)"),
        "{}",
        lines[1]
    );
    assert_eq!(lines[2], "FAIL  c/m  http_503: stub status 503");
    assert!(lines[3].starts_with("FAIL  d/m  network"), "{}", lines[3]);
    // Never retried, never switched.
    assert_eq!(
        (wrong_key.count(), unknown.count(), busy.count()),
        (1, 1, 1)
    );
    assert!(!r.stderr.contains("model fallback"), "{}", r.stderr);
}

#[test]
fn a_model_that_hangs_is_cut_off_at_the_first_event_timeout() {
    let env = TestEnv::new();
    let ok = Stub::sequence(vec![chat_sse_submit("call_1", "pong")]);
    let hangs = Stub::sequence(vec![
        chat_sse_submit("call_1", "pong").delay(Duration::from_secs(5))
    ]);
    let config = format!(
        "model: a/m\nfallback_models: [b/m]\nretry: {{stream_first_event_timeout: 300ms}}\nproviders:\n{}{}",
        provider("a", &ok.url(), true),
        provider("b", &hangs.url(), true),
    );
    let started = std::time::Instant::now();
    let r = check(&env, &config, &[]);
    assert_eq!(r.code, Some(1));
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(lines[0].starts_with("ok  a/m  "), "{}", r.stdout);
    assert!(lines[1].starts_with("FAIL  b/m  timeout"), "{}", r.stdout);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn json_gives_one_result_per_model_then_finished() {
    let env = TestEnv::new();
    let ok = Stub::sequence(vec![chat_sse_submit("call_1", "pong")]);
    let busy = Stub::sequence(vec![Reply::status(503)]);
    let config = format!(
        "model: a/m\nfallback_models: [b/m]\nproviders:\n{}{}",
        provider("a", &ok.url(), true),
        provider("b", &busy.url(), false),
    );
    let db = env.file("log.db");
    let r = check(&env, &config, &["--json", "--log-db", db.to_str().unwrap()]);
    assert_eq!(r.code, Some(1));
    let ev = events(r.stdout.as_bytes());
    // Each probe is a model_requests row of step 0.
    let rows: Vec<(i64, String, String, i64)> = {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let mut stmt = conn
            .prepare("SELECT step, model, outcome, attempt FROM model_requests ORDER BY model")
            .unwrap();
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap();
        rows.map(Result::unwrap).collect()
    };
    assert_eq!(
        rows,
        [
            (0, "a/m".to_string(), "ok".to_string(), 1),
            (0, "b/m".to_string(), "http_503".to_string(), 1)
        ]
    );
    assert_eq!(ev.len(), 3);
    let results = of_type(&ev, "check.result");
    assert_eq!(results.len(), 2);
    let a = results[0];
    assert_eq!(a["model"], "a/m");
    assert_eq!(a["ok"], true);
    assert_eq!(a["reason"], Value::Null);
    assert!(a["first_event_ms"].is_u64(), "{a}");
    assert_eq!(a["tool_calls"], true);
    assert_eq!(a["priced"], true);
    let b = results[1];
    assert_eq!(b["model"], "b/m");
    assert_eq!(b["ok"], false);
    assert_eq!(b["reason"], "http_503");
    assert_eq!(b["priced"], false);
    let end = &ev[2];
    assert_eq!(end["type"], "check.finished");
    assert_eq!(end["ok"], false);
    assert_eq!(end["failed"], 1);
    let run_id = ev[0]["run_id"].as_str().unwrap();
    for (i, e) in ev.iter().enumerate() {
        assert_eq!(e["seq"], i as u64 + 1);
        assert_eq!(e["run_id"], run_id);
        assert!(e["ts"].as_str().unwrap().ends_with('Z'));
    }
}

#[test]
fn a_broken_config_or_a_missing_key_is_exit_2_before_any_request() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![chat_sse_submit("call_1", "pong")]);
    let r = check(
        &env,
        &format!(
            "model: a/m\nfalback_models: []\nproviders:\n{}",
            provider("a", &stub.url(), true)
        ),
        &[],
    );
    assert_eq!(r.code, Some(2));
    assert!(r.stderr.contains("falback_models"), "{}", r.stderr);
    let out = env
        .cmd()
        .args(["--check", "-m", "openai/gpt-5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("OPENAI_API_KEY"));
    assert_eq!(stub.count(), 0);
}

#[test]
fn no_health_record_is_written_and_script_models_are_probed_too() {
    let env = TestEnv::new();
    let busy = Stub::sequence(vec![Reply::status(503)]);
    let script = env.script("s.yaml", "- tool_calls:\n  - {name: ping, arguments: {}}\n");
    let health = env.file("health.db");
    let config = format!(
        "model: a/m\nfallback_models: ['{script}']\nhealth_db: {}\nproviders:\n{}",
        health.display(),
        provider("a", &busy.url(), true),
    );
    let r = check(&env, &config, &[]);
    assert_eq!(r.code, Some(1));
    let lines: Vec<String> = shapes(&r.stdout);
    assert_eq!(lines[0], "FAIL  a/m  http_503: stub status 503");
    assert_eq!(
        lines[1],
        format!("ok  {script}  N ms  tool calls: yes  price: unknown")
    );
    assert!(!health.exists(), "a health record was written");
}

/// SPEC 15: `--check` finds a broken setup before it matters. A shared
/// health record it cannot reach (a Redis nobody listens on, a file that is
/// not a database) is a FAIL line and exit 1, a `check.health` event under
/// `--json` and an `::error` under GitHub Actions, with the password nowhere;
/// the budgets it would read are not shown as spent nothing.
#[test]
fn an_unreachable_health_record_is_a_failed_check() {
    let env = TestEnv::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let a = Stub::start(|_, _| chat_sse_submit("call_1", "pong"));
    let config = format!(
        "model: a/m\nhealth_db: redis://:hunter2pw@127.0.0.1:{port}/0\nbudgets:\n  - {{usd: 50, per: day}}\nproviders:\n{}",
        provider("a", &a.url(), true),
    );
    let r = check(&env, &config, &[]);
    assert_eq!(r.code, Some(1), "{}{}", r.stdout, r.stderr);
    let lines = shapes(&r.stdout);
    assert_eq!(lines[0], "ok  a/m  N ms  tool calls: yes  price: known");
    assert_eq!(
        lines[1],
        format!("FAIL  health_db redis://:***@127.0.0.1:{port}/0  connection refused"),
        "{}",
        r.stdout
    );
    assert_eq!(lines.len(), 2, "no budget line claims 0.00 spent");
    assert!(!r.stdout.contains("hunter2pw") && !r.stderr.contains("hunter2pw"));

    let r = check(&env, &config, &["--json"]);
    assert_eq!(r.code, Some(1));
    let ev = events(r.stdout.as_bytes());
    let kinds: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["check.result", "check.health", "check.finished"]);
    assert_eq!(ev[1]["ok"], false);
    assert_eq!(
        ev[1]["health_db"],
        format!("redis://:***@127.0.0.1:{port}/0")
    );
    assert_eq!(ev[1]["message"], "connection refused");
    assert_eq!(ev[2]["ok"], false);
    assert_eq!(ev[2]["failed"], 1);
    assert!(!r.stdout.contains("hunter2pw"));

    let cfg = env.write("config.yaml", &config);
    let out = env
        .cmd()
        .env("GW_KEY", KEY)
        .env("GITHUB_ACTIONS", "true")
        .args(["--check", "-c", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("::error title=tinyagent check::FAIL  health_db redis://:***@127.0.0.1:"),
        "{stderr}"
    );

    // A file that is not a database fails the same way.
    let not_db = env.write("health.db", &"not a database\n".repeat(200));
    let config = format!(
        "model: a/m\nhealth_db: {}\nproviders:\n{}",
        not_db.display(),
        provider("a", &a.url(), true),
    );
    let r = check(&env, &config, &[]);
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert!(
        r.stdout
            .contains(&format!("FAIL  health_db {}  ", not_db.display())),
        "{}",
        r.stdout
    );
}
