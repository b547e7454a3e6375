//! The `gemini` provider end to end, against the loopback fake of the
//! Gemini API (`tests/fakes/gemini.py`, proven against google-genai in
//! `tests/sdk/test_gemini.py`): a multi-step tool run in Google's wire form,
//! thought signatures sent back to their model only, Google's errors
//! (`RESOURCE_EXHAUSTED` with its `retryDelay`, a per-day quota, a refusal,
//! a malformed call), the key's variables, and the key in no output.

use serde_json::{json, Value};

use crate::support::fake_cloud::{cloud_env, FakeCloud};
use crate::support::{assert_secret_absent, events, finished, of_type, retry_reasons, TestEnv};

const MODEL: &str = "gemini/gemini-2.5-flash";
const KEY: &str = "AIzaSy-test-gemini-key-5f4e3d2c1b";

const RETRY: &str = "retry: {attempts: 2, backoff: 1ms, max_backoff: 5s, jitter: 0, stream_first_event_timeout: 500ms, stream_idle_timeout: 500ms}\n";

fn env_with(config: &str) -> TestEnv {
    cloud_env(RETRY, config)
}

/// A fake answering `replies` in order.
fn fake(env: &TestEnv, replies: Value) -> FakeCloud {
    FakeCloud::scripted("gemini", env, &replies, &["--key", KEY])
}

fn cmd(env: &TestEnv, fake: &FakeCloud) -> assert_cmd::Command {
    let mut cmd = env.cmd();
    cmd.env("GEMINI_BASE_URL", format!("{}/v1beta", fake.url()))
        .env("GEMINI_API_KEY", KEY);
    cmd
}

fn submit() -> Value {
    json!({"calls": [{"name": "submit", "args": {"output": "done"}}]})
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The `model` parts of a logged request's contents, in order.
fn model_parts(request: &Value) -> Vec<Value> {
    request["body"]["contents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["role"] == "model")
        .flat_map(|c| c["parts"].as_array().unwrap().clone())
        .collect()
}

#[test]
fn a_tool_run_in_googles_form_sends_the_signature_back() {
    let env = env_with("");
    let fake = fake(
        &env,
        json!([
            {"text": "Writing it.", "calls": [{"name": "write_file", "args": {"path": "note.txt", "content": "hi\n"}}], "signature": "c2lnLTE="},
            {"calls": [{"name": "bash", "args": {"command": "cat note.txt"}}], "signature": "c2lnLTI="},
            submit(),
        ]),
    );
    let traj = env.file("traj.json");
    let out = cmd(&env, &fake)
        .args(["-m", MODEL, "--json", "-o"])
        .arg(&traj)
        .arg("write a note")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(env.work().join("note.txt")).unwrap(),
        "hi\n"
    );
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["status"], "submitted");
    let responses = of_type(&ev, "model.response");
    assert_eq!(responses.len(), 3);
    assert!(responses[0]["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(responses[0]["output_tokens"], 12);
    assert_eq!(responses[0]["finish_reason"], "tool_calls");
    assert!(responses[0]["cost_usd"].as_f64().unwrap() > 0.0, "priced");

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    let first = &reqs[0];
    assert_eq!(
        first["path"],
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    );
    assert_eq!(first["query"], json!({"alt": "sse"}));
    assert_eq!(first["headers"]["x-goog-api-key"], KEY);
    let body = &first["body"];
    assert!(body["systemInstruction"]["parts"][0]["text"]
        .as_str()
        .unwrap()
        .contains("submit"));
    assert_eq!(body["contents"][0]["role"], "user");
    let declarations = body["tools"][0]["functionDeclarations"].as_array().unwrap();
    assert!(declarations
        .iter()
        .any(|d| d["name"] == "bash" && d["parametersJsonSchema"]["type"] == "object"));

    // The second request: the model's signed part as it came, then the result.
    let parts = model_parts(&reqs[1]);
    assert_eq!(
        parts,
        vec![
            json!({"text": "Writing it."}),
            json!({"functionCall": {"name": "write_file", "args": {"path": "note.txt", "content": "hi\n"}}, "thoughtSignature": "c2lnLTE="}),
        ]
    );
    let last = reqs[1]["body"]["contents"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "user");
    assert_eq!(
        last["parts"][0]["functionResponse"]["name"], "write_file",
        "{last}"
    );
    let parts = model_parts(&reqs[2]);
    assert_eq!(parts[2]["thoughtSignature"], "c2lnLTI=");

    assert_secret_absent(KEY, &out, &[&traj]);
}

#[test]
fn another_model_gets_the_history_without_the_signatures() {
    let env = env_with(
        "providers:\n  backup:\n    api: gemini\n    endpoint: ENDPOINT\n    api_key_env: BACKUP_KEY\n",
    );
    let primary = fake(
        &env,
        json!([
            {"calls": [{"name": "bash", "args": {"command": "true"}}], "signature": "c2lnLTE="},
            {"http": 503},
        ]),
    );
    let backup = fake(&env, json!([submit()]));
    let config = std::fs::read_to_string(env.home().join(".config/tinyagent/config.yaml"))
        .unwrap()
        .replace("ENDPOINT", &format!("{}/v1beta", backup.url()));
    env.user_config(&config);
    let out = cmd(&env, &primary)
        .env("BACKUP_KEY", KEY)
        .args([
            "-m",
            MODEL,
            "--fallback-model",
            "backup/gemini-2.5-pro",
            "--json",
        ])
        .arg("go")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "model fallback: gemini/gemini-2.5-flash -> backup/gemini-2.5-pro (http_503) at step 2"
        ),
        "{}",
        stderr(&out)
    );
    let own = primary.requests();
    assert_eq!(model_parts(&own[1])[0]["thoughtSignature"], "c2lnLTE=");
    let other = backup.requests();
    assert_eq!(other.len(), 1);
    assert_eq!(
        other[0]["path"],
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
    );
    let parts = model_parts(&other[0]);
    assert_eq!(
        parts,
        vec![json!({"functionCall": {"name": "bash", "args": {"command": "true"}}})]
    );
}

#[test]
fn resource_exhausted_waits_its_retry_delay_then_succeeds() {
    let env = env_with("");
    let fake = fake(&env, json!([{"retry_delay": "1s"}, submit()]));
    let started = std::time::Instant::now();
    let out = cmd(&env, &fake)
        .args(["-m", MODEL, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(started.elapsed() >= std::time::Duration::from_secs(1));
    let ev = events(&out.stdout);
    let retries = of_type(&ev, "provider.retry");
    assert_eq!(retry_reasons(&ev), ["http_429"]);
    assert_eq!(retries[0]["wait_seconds"].as_f64(), Some(1.0));
}

#[test]
fn a_per_day_quota_is_not_waited_out() {
    let env = env_with("");
    let fake = fake(&env, json!([{"daily_quota": true}]));
    let out = cmd(&env, &fake)
        .args(["-m", MODEL, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert_eq!(fake.requests().len(), 1, "quota is not retried");
    let ev = events(&out.stdout);
    assert!(retry_reasons(&ev).is_empty());
    let error = finished(&ev)["error"].to_string();
    assert!(error.contains("quota"), "{error}");
}

#[test]
fn a_safety_stop_is_a_refusal() {
    let env = env_with("");
    let fake = fake(&env, json!([{"finish": "SAFETY"}]));
    let out = cmd(&env, &fake)
        .args(["-m", MODEL, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let ev = events(&out.stdout);
    let error = finished(&ev)["error"].as_str().unwrap().to_string();
    assert!(
        error.starts_with("model refused:") && error.contains("SAFETY"),
        "{error}"
    );
    assert_eq!(fake.requests().len(), 1);
}

#[test]
fn a_malformed_function_call_is_sent_back_as_a_garbled_call() {
    let env = env_with("");
    let fake = fake(
        &env,
        json!([
            {"finish": "MALFORMED_FUNCTION_CALL", "finish_message": "Malformed function call: print(default_api.bash(command=))"},
            submit(),
        ]),
    );
    let out = cmd(&env, &fake)
        .args(["-m", MODEL, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    assert!(retry_reasons(&ev).is_empty(), "no retry used");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let last = reqs[1]["body"]["contents"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let response = &last["parts"][0]["functionResponse"];
    assert_eq!(response["name"], "bash");
    assert!(
        response["response"]["result"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{response}"
    );
}

#[test]
fn a_stream_without_a_finish_reason_or_a_stall_is_retried() {
    let env = TestEnv::new();
    env.user_config(&format!(
        "health_db: off\n{}",
        RETRY.replace("attempts: 2", "attempts: 3")
    ));
    let fake = fake(
        &env,
        json!([{"text": "half", "no_finish": true}, {"stall": 3}, submit()]),
    );
    let out = cmd(&env, &fake)
        .args(["-m", MODEL, "--json", "-q", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    assert_eq!(retry_reasons(&ev), ["stream_incomplete", "timeout"]);
}

#[test]
fn the_key_is_either_variable_and_a_missing_one_names_both() {
    let env = env_with("");
    let fake = fake(&env, json!([submit()]));
    let out = env
        .cmd()
        .env("GEMINI_BASE_URL", format!("{}/v1beta", fake.url()))
        .env("GOOGLE_API_KEY", KEY)
        .args(["-m", MODEL, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(fake.requests()[0]["headers"]["x-goog-api-key"], KEY);

    let out = env.cmd().args(["-m", MODEL, "go"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim(),
        "tinyagent: error: model 'gemini/gemini-2.5-flash': the API key variable GEMINI_API_KEY (or GOOGLE_API_KEY) is not set"
    );
}

#[test]
fn a_wrong_key_is_an_auth_error_without_the_key() {
    let env = env_with("");
    let fake = fake(&env, json!([submit()]));
    let out = env
        .cmd()
        .env("GEMINI_BASE_URL", format!("{}/v1beta", fake.url()))
        .env("GEMINI_API_KEY", "AIzaSy-wrong-key-000")
        .args(["-m", MODEL, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(fake.requests().len(), 1, "auth is not retried");
    let ev = events(&out.stdout);
    let error = finished(&ev)["error"].as_str().unwrap().to_string();
    assert!(error.contains("API key not valid"), "{error}");
    assert!(!error.contains("wrong-key"));
}
