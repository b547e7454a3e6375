//! The `azure` provider end to end, against the loopback fake of Azure
//! OpenAI (`tests/fakes/azure.py`, proven against openai's `AzureOpenAI` in
//! `tests/sdk/test_azure.py`): multi-step tool runs through both URL forms
//! (`/openai/v1` with the deployment as `model`, and the classic deployment
//! URL with its `api-version`), the `api-key` header and a Microsoft Entra
//! ID token, missing credentials or endpoint (exit 2, before any request),
//! a 429 waited out as `retry-after-ms` says, the content filter's
//! refusals, an outage crossed to `openai/…` and back (the fake's
//! `/openai/v1` speaks Chat Completions as OpenAI does), a named `api:
//! azure` provider, `--check` naming the credential source, replies priced
//! by the model they name, and the key in no output.

use serde_json::{json, Value};

use crate::support::fake_cloud::{cloud_env, FakeCloud};
use crate::support::{assert_secret_absent, events, finished, of_type, retry_reasons, TestEnv};

const MODEL: &str = "azure/prod-chat";
const KEY: &str = "azure-test-key-7f6e5d4c3b2a1908";
const TOKEN: &str = "eyJ0eXAiOiJKV1QiLCJhbGciOi.entra-test-token-55aa";
const VERSION: &str = "2024-10-21";

const RETRY: &str = "retry: {attempts: 2, backoff: 1ms, max_backoff: 5s, jitter: 0, stream_first_event_timeout: 2s, stream_idle_timeout: 2s}\n";

fn env_with(config: &str) -> TestEnv {
    cloud_env(RETRY, config)
}

/// A fake answering `replies` in order; `prod-chat` is a deployment of
/// `gpt-4o-2024-11-20`, `gpt-4o` and `gpt-5` are deployments named after
/// their models.
fn fake(env: &TestEnv, replies: Value) -> FakeCloud {
    FakeCloud::scripted(
        "azure",
        env,
        &replies,
        &[
            "--key",
            KEY,
            "--token",
            TOKEN,
            "--deployment",
            "prod-chat=gpt-4o-2024-11-20",
            "--deployment",
            "gpt-4o=gpt-4o-2024-11-20",
            "--deployment",
            "gpt-5=gpt-5-2025-08-07",
        ],
    )
}

/// The binary with the fake as the Azure resource and the key set.
fn cmd(env: &TestEnv, fake: &FakeCloud) -> assert_cmd::Command {
    let mut cmd = env.cmd();
    cmd.env("AZURE_OPENAI_ENDPOINT", fake.url())
        .env("AZURE_OPENAI_API_KEY", KEY);
    cmd
}

fn submit() -> Value {
    json!({"calls": [{"name": "submit", "args": {"output": "done"}}]})
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The `tool` messages of a logged request, in order.
fn tool_results(request: &Value) -> Vec<Value> {
    request["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect()
}

/// A write, a read back and a submit.
fn tool_run() -> Value {
    json!([
        {"text": "Writing it.", "calls": [{"name": "write_file", "args": {"path": "note.txt", "content": "hi\n"}}]},
        {"calls": [{"name": "bash", "args": {"command": "cat note.txt"}}]},
        submit(),
    ])
}

#[test]
fn a_tool_run_on_the_v1_url_sends_the_key_as_api_key() {
    let env = env_with("");
    let fake = fake(&env, tool_run());
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
    // The fake counts the prompt (a quarter of its bytes): below any cache minimum.
    let input = responses[0]["input_tokens"].as_f64().unwrap();
    assert!(input > 0.0);
    assert_eq!(responses[0]["output_tokens"], 12);
    assert_eq!(responses[0]["finish_reason"], "tool_calls");
    // `prod-chat` is in no price table; the model it names is.
    let cost = responses[0]["cost_usd"].as_f64().unwrap();
    let gpt_4o = (input * 2.50 + 12.0 * 10.0) / 1_000_000.0;
    assert!((cost - gpt_4o).abs() < 1e-12, "{cost}");

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    for req in &reqs {
        assert_eq!(req["path"], "/openai/v1/chat/completions");
        assert_eq!(req["query"], json!({}));
        assert_eq!(req["headers"]["api-key"], KEY);
        assert!(req["headers"].get("authorization").is_none(), "{req}");
        assert_eq!(req["body"]["model"], "prod-chat");
        assert_eq!(req["body"]["stream"], true);
    }
    let body = &reqs[0]["body"];
    assert_eq!(body["messages"][0]["role"], "system");
    assert!(body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["function"]["name"] == "bash"));
    let results = tool_results(&reqs[1]);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["tool_call_id"], "call_fake_0");
    let results = tool_results(&reqs[2]);
    assert_eq!(results.len(), 2);
    assert!(
        results[1]["content"].as_str().unwrap().contains("hi"),
        "{results:?}"
    );
    assert_secret_absent(KEY, &out, &[&traj]);
}

#[test]
fn a_tool_run_on_the_classic_url_with_an_entra_token() {
    let env = env_with("");
    let fake = fake(&env, tool_run());
    let out = env
        .cmd()
        .env("AZURE_OPENAI_ENDPOINT", format!("{}/", fake.url()))
        .env("AZURE_OPENAI_AD_TOKEN", TOKEN)
        .env("AZURE_OPENAI_API_VERSION", VERSION)
        .args(["-m", "azure/gpt-5", "--json", "write a note"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(finished(&events(&out.stdout))["status"], "submitted");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    for req in &reqs {
        assert_eq!(req["path"], "/openai/deployments/gpt-5/chat/completions");
        assert_eq!(req["query"], json!({"api-version": VERSION}));
        assert_eq!(req["headers"]["authorization"], format!("Bearer {TOKEN}"));
        assert!(req["headers"].get("api-key").is_none(), "{req}");
    }
    assert_eq!(tool_results(&reqs[2]).len(), 2);
    assert_secret_absent(TOKEN, &out, &[]);
}

#[test]
fn the_key_wins_over_the_token_and_a_wrong_key_is_an_auth_error() {
    let env = env_with("");
    let fake = fake(&env, json!([submit()]));
    let out = cmd(&env, &fake)
        .env("AZURE_OPENAI_AD_TOKEN", TOKEN)
        .args(["-m", MODEL, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let req = &fake.requests()[0];
    assert_eq!(req["headers"]["api-key"], KEY);
    assert!(req["headers"].get("authorization").is_none(), "{req}");

    let out = env
        .cmd()
        .env("AZURE_OPENAI_ENDPOINT", fake.url())
        .env("AZURE_OPENAI_API_KEY", "azure-wrong-key-000")
        .args(["-m", MODEL, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(fake.requests().len(), 2, "auth is not retried");
    let error = finished(&events(&out.stdout))["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        error.contains("HTTP 401") && error.contains("invalid subscription key"),
        "{error}"
    );
    assert_secret_absent("azure-wrong-key-000", &out, &[]);
}

#[test]
fn missing_credentials_or_endpoint_exit_2_before_any_request() {
    let env = env_with("");
    let fake = fake(&env, json!([submit()]));
    let out = env
        .cmd()
        .env("AZURE_OPENAI_ENDPOINT", fake.url())
        .args(["-m", MODEL, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // Azure's identity chain was looked in too (providers_azure_identity.rs).
    assert!(
        stderr(&out).starts_with(
            "tinyagent: error: model 'azure/prod-chat': no Azure OpenAI credentials: neither AZURE_OPENAI_API_KEY nor AZURE_OPENAI_AD_TOKEN is set, and no Microsoft Entra ID credentials found (looked in "
        ),
        "{}",
        stderr(&out)
    );
    assert!(fake.requests().is_empty());
    let out = env
        .cmd()
        .env("AZURE_OPENAI_API_KEY", KEY)
        .args(["-m", "openai/gpt-5", "--fallback-model", MODEL, "go"])
        .env("OPENAI_API_KEY", "sk-unused")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim(),
        "tinyagent: error: fallback model 'azure/prod-chat': Azure OpenAI needs the resource's endpoint: AZURE_OPENAI_ENDPOINT is not set (https://<resource>.openai.azure.com)"
    );
    assert!(fake.requests().is_empty());
    assert_secret_absent(KEY, &out, &[]);
}

#[test]
fn a_429_waits_retry_after_ms_then_succeeds() {
    let env = env_with("");
    let fake = fake(
        &env,
        json!([{"http": 429, "retry_after": 5, "retry_after_ms": 1200}, submit()]),
    );
    let started = std::time::Instant::now();
    let out = cmd(&env, &fake)
        .args(["-m", MODEL, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let elapsed = started.elapsed();
    assert!(
        elapsed >= std::time::Duration::from_millis(1200),
        "{elapsed:?}"
    );
    assert!(elapsed < std::time::Duration::from_secs(5), "{elapsed:?}");
    let ev = events(&out.stdout);
    assert_eq!(retry_reasons(&ev), ["http_429"]);
    assert_eq!(
        of_type(&ev, "provider.retry")[0]["wait_seconds"].as_f64(),
        Some(1.2)
    );
    assert_eq!(fake.requests().len(), 2);
}

#[test]
fn a_429_with_retry_after_alone_waits_that() {
    let env = env_with("");
    let fake = fake(&env, json!([{"http": 429, "retry_after": 1}, submit()]));
    let out = cmd(&env, &fake)
        .args(["-m", MODEL, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    assert_eq!(
        of_type(&ev, "provider.retry")[0]["wait_seconds"].as_f64(),
        Some(1.0)
    );
}

#[test]
fn an_azure_outage_is_crossed_by_openai_and_an_openai_one_by_azure() {
    let env = env_with("");
    let azure = fake(&env, json!([{"http": 503}]));
    let openai = fake(&env, json!([submit()]));
    let out = cmd(&env, &azure)
        .env("OPENAI_BASE_URL", format!("{}/openai/v1", openai.url()))
        .env("OPENAI_API_KEY", KEY)
        .args(["-m", "azure/gpt-4o", "--fallback-model", "openai/gpt-4o"])
        .args(["--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("model fallback: azure/gpt-4o -> openai/gpt-4o (http_503) at step 1"),
        "{}",
        stderr(&out)
    );
    assert_eq!(azure.requests().len(), 2, "attempts: 2 on azure");
    let asked = openai.requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        asked[0]["headers"]["authorization"],
        format!("Bearer {KEY}")
    );
    assert_eq!(
        finished(&events(&out.stdout))["active_model"],
        "openai/gpt-4o"
    );

    let env = env_with("");
    let openai = fake(&env, json!([{"http": 503}]));
    let azure = fake(&env, json!([submit()]));
    let out = cmd(&env, &azure)
        .env("OPENAI_BASE_URL", format!("{}/openai/v1", openai.url()))
        .env("OPENAI_API_KEY", KEY)
        .args(["-m", "openai/gpt-4o", "--fallback-model", "azure/gpt-4o"])
        .args(["--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("model fallback: openai/gpt-4o -> azure/gpt-4o (http_503) at step 1"),
        "{}",
        stderr(&out)
    );
    let asked = azure.requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["headers"]["api-key"], KEY);
    assert_secret_absent(KEY, &out, &[]);
}

#[test]
fn a_named_azure_provider_is_a_second_resource_with_its_own_version_and_key() {
    let env = env_with("");
    let primary = fake(&env, json!([{"http": 500}]));
    let second = fake(&env, json!([submit()]));
    env.user_config(&format!(
        "health_db: off\n{RETRY}providers:\n  eastus:\n    api: azure\n    endpoint: {}/openai/v1/\n    api_version: {VERSION}\n    api_key_env: EAST_KEY\n",
        second.url()
    ));
    let out = cmd(&env, &primary)
        .env("EAST_KEY", KEY)
        .args(["-m", MODEL, "--fallback-model", "eastus/prod-chat"])
        .args(["--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("model fallback: azure/prod-chat -> eastus/prod-chat (http_500) at step 1"),
        "{}",
        stderr(&out)
    );
    let asked = second.requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        asked[0]["path"],
        "/openai/deployments/prod-chat/chat/completions"
    );
    assert_eq!(asked[0]["query"], json!({"api-version": VERSION}));
    assert_eq!(asked[0]["headers"]["api-key"], KEY);
    assert_eq!(primary.requests()[0]["path"], "/openai/v1/chat/completions");
}

#[test]
fn the_content_filter_is_a_refusal_that_no_fallback_crosses() {
    let env = env_with("");
    let fake = fake(&env, json!([{"content_filter": "prompt"}]));
    let backup = fake_backup(&env);
    let out = cmd(&env, &fake)
        .env("OPENAI_BASE_URL", format!("{}/openai/v1", backup.url()))
        .env("OPENAI_API_KEY", KEY)
        .args([
            "-m",
            MODEL,
            "--fallback-model",
            "openai/gpt-5",
            "--json",
            "go",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let error = finished(&events(&out.stdout))["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        error.starts_with("model refused: The response was filtered due to the prompt")
            && error.ends_with("(violence: high)"),
        "{error}"
    );
    assert_eq!(fake.requests().len(), 1, "a refusal is not retried");
    assert!(backup.requests().is_empty(), "nor crossed");

    let fake = self::fake(
        &env,
        json!([{"content_filter": "reply", "text": "Here is how"}]),
    );
    let out = cmd(&env, &fake)
        .args(["-m", MODEL, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let error = finished(&events(&out.stdout))["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        error,
        "model refused: Azure OpenAI's content filter stopped the reply (violence: high)"
    );
}

/// A fake that answers anything with a submit.
fn fake_backup(env: &TestEnv) -> FakeCloud {
    fake(env, json!([submit()]))
}

#[test]
fn check_asks_once_and_names_the_credential_source() {
    let env = env_with("");
    let fake = fake(&env, json!([{"calls": [{"name": "ping", "args": {}}]}]));
    let out = cmd(&env, &fake)
        .args(["--check", "-m", MODEL])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with(&format!("ok  {MODEL}  ")), "{stdout}");
    assert!(
        stdout.contains(
            "tool calls: yes  price: known  credentials: environment (AZURE_OPENAI_API_KEY)"
        ),
        "{stdout}"
    );
    let asked = fake.requests();
    assert_eq!(asked.len(), 1);
    // OpenAI's own parameter names: Azure takes them for every model.
    assert!(
        asked[0]["body"]["max_completion_tokens"].is_u64(),
        "{}",
        asked[0]
    );
    assert!(asked[0]["body"].get("max_tokens").is_none());

    let out = env
        .cmd()
        .env("AZURE_OPENAI_ENDPOINT", fake.url())
        .env("AZURE_OPENAI_AD_TOKEN", TOKEN)
        .args(["--check", "-m", "azure/missing"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("FAIL  azure/missing  http_404")
            && stdout.contains("deployment for this resource does not exist"),
        "{stdout}"
    );
    assert!(
        stdout.contains("credentials: environment (AZURE_OPENAI_AD_TOKEN)"),
        "{stdout}"
    );
    assert_secret_absent(TOKEN, &out, &[]);
}
