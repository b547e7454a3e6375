//! The `vertex` provider end to end, against the loopback fake of Vertex AI
//! with its token endpoint and metadata server (`tests/fakes/vertex.py`,
//! proven against google-genai and anthropic's `AnthropicVertex` in
//! `tests/sdk/test_vertex.py`): Claude through `:streamRawPredict` and
//! Gemini through `:streamGenerateContent`, each credential source (a
//! service account's JWT at its `token_uri`, an authorized user, gcloud's
//! file, the metadata server), one token per run, missing credentials
//! (exit 2 naming every place looked in), a token endpoint that refuses,
//! hangs or answers garbage, and no secret in any output or file.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::support::fake_cloud::{cloud_env, FakeCloud};
use crate::support::{assert_secret_absent, events, finished, of_type, retry_reasons, TestEnv};

pub(crate) const CLAUDE: &str = "vertex/claude-sonnet-4-5@20250929";
const GEMINI: &str = "vertex/gemini-2.5-pro";

const RETRY: &str = "retry: {attempts: 2, backoff: 1ms, max_backoff: 5s, jitter: 0, stream_first_event_timeout: 1s, stream_idle_timeout: 1s}\n";

pub(crate) fn env_with(config: &str) -> TestEnv {
    cloud_env(RETRY, config)
}

pub(crate) fn fake(env: &TestEnv, replies: Value, token_mode: &str) -> FakeCloud {
    FakeCloud::scripted("vertex", env, &replies, &["--token-mode", token_mode])
}

fn private_key() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fakes/fixtures/throwaway-service-account.pem");
    std::fs::read_to_string(path).unwrap()
}

/// A service account key file whose `token_uri` is the fake's.
fn service_account(env: &TestEnv, fake: &FakeCloud) -> PathBuf {
    let key = json!({
        "type": "service_account",
        "project_id": "file-project",
        "private_key_id": "k1",
        "private_key": private_key(),
        "client_email": "agent@file-project.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": format!("{}/token", fake.url()),
    });
    env.write("sa.json", &key.to_string())
}

/// The binary with Vertex pointed at the fake (region us-east5).
pub(crate) fn cmd(env: &TestEnv, fake: &FakeCloud) -> assert_cmd::Command {
    let mut cmd = env.cmd();
    cmd.env("VERTEX_BASE_URL", fake.url())
        .env("CLOUD_ML_REGION", "us-east5");
    cmd
}

pub(crate) fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub(crate) fn submit() -> Value {
    json!({"calls": [{"name": "submit", "args": {"output": "done"}}]})
}

/// The model requests among the fake's log.
pub(crate) fn model_requests(fake: &FakeCloud) -> Vec<Value> {
    fake.requests()
        .into_iter()
        .filter(|r| r["path"].as_str().unwrap().contains("/publishers/"))
        .collect()
}

#[test]
fn claude_on_vertex_runs_tools_with_a_service_accounts_token() {
    let env = env_with("");
    let fake = fake(
        &env,
        json!([
            {"calls": [{"name": "write_file", "args": {"path": "v.txt", "content": "vertex\n"}}]},
            submit(),
        ]),
        "ok",
    );
    let sa = service_account(&env, &fake);
    let traj = env.file("traj.json");
    let out = cmd(&env, &fake)
        .env("GOOGLE_APPLICATION_CREDENTIALS", &sa)
        .args(["-m", CLAUDE, "--json", "-o"])
        .arg(&traj)
        .arg("write it")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(env.work().join("v.txt")).unwrap(),
        "vertex\n"
    );
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["status"], "submitted");
    assert!(
        of_type(&ev, "model.response")[0]["cost_usd"]
            .as_f64()
            .unwrap()
            > 0.0
    );

    let all = fake.requests();
    let tokens: Vec<&Value> = all.iter().filter(|r| r["path"] == "/token").collect();
    assert_eq!(tokens.len(), 1, "one token for the whole run");
    let form = tokens[0]["body"].as_str().unwrap();
    assert!(
        form.contains("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"),
        "{form}"
    );
    let reqs = model_requests(&fake);
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[0]["path"],
        "/v1/projects/file-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"
    );
    assert_eq!(reqs[0]["headers"]["authorization"], "Bearer ya29.fake-1");
    assert_eq!(reqs[0]["body"]["anthropic_version"], "vertex-2023-10-16");
    assert!(reqs[0]["body"].get("model").is_none());
    assert_eq!(
        reqs[1]["body"]["messages"][1]["content"][0]["type"],
        "tool_use"
    );

    assert_secret_absent("ya29.fake-1", &out, &[&traj]);
    assert_secret_absent("BEGIN PRIVATE KEY", &out, &[&traj]);
}

#[test]
fn gemini_on_vertex_from_gclouds_file_with_the_project_variable() {
    let env = env_with("");
    let fake = fake(
        &env,
        json!([
            {"calls": [{"name": "bash", "args": {"command": "true"}}], "signature": "c2lnLVY="},
            submit(),
        ]),
        "ok",
    );
    let adc = json!({
        "type": "authorized_user",
        "client_id": "cid.apps.googleusercontent.com",
        "client_secret": "gcloud-client-secret-123",
        "refresh_token": "1//refresh-token-456",
        "token_uri": format!("{}/token", fake.url()),
    });
    let gcloud = env.home().join(".config/gcloud");
    std::fs::create_dir_all(&gcloud).unwrap();
    std::fs::write(
        gcloud.join("application_default_credentials.json"),
        adc.to_string(),
    )
    .unwrap();
    let out = cmd(&env, &fake)
        .env("GOOGLE_CLOUD_PROJECT", "env-project")
        .env("GOOGLE_CLOUD_LOCATION", "global")
        .args(["-m", GEMINI, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = model_requests(&fake);
    assert_eq!(
        reqs[0]["path"],
        "/v1/projects/env-project/locations/global/publishers/google/models/gemini-2.5-pro:streamGenerateContent"
    );
    let parts: Vec<Value> = reqs[1]["body"]["contents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["role"] == "model")
        .flat_map(|c| c["parts"].as_array().unwrap().clone())
        .collect();
    assert_eq!(parts[0]["thoughtSignature"], "c2lnLVY=");
    let token = fake
        .requests()
        .into_iter()
        .find(|r| r["path"] == "/token")
        .unwrap();
    assert!(token["body"]
        .as_str()
        .unwrap()
        .contains("grant_type=refresh_token"));
    assert_secret_absent("refresh-token-456", &out, &[]);
    assert_secret_absent("gcloud-client-secret-123", &out, &[]);
}

#[test]
fn the_metadata_server_gives_the_token_and_the_project() {
    let env = env_with("");
    let fake = fake(&env, json!([submit()]), "ok");
    let out = cmd(&env, &fake)
        .env("GCE_METADATA_HOST", fake.host())
        .args(["-m", GEMINI, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let all = fake.requests();
    assert!(all.iter().any(|r| r["path"]
        == "/computeMetadata/v1/instance/service-accounts/default/token"
        && r["headers"]["metadata-flavor"] == "Google"));
    let reqs = model_requests(&fake);
    assert!(
        reqs[0]["path"]
            .as_str()
            .unwrap()
            .starts_with("/v1/projects/fake-metadata-project/locations/us-east5/"),
        "{}",
        reqs[0]["path"]
    );
}

#[test]
fn missing_credentials_are_exit_2_naming_every_place() {
    let env = env_with("");
    let out = env
        .cmd()
        .env_remove("GCE_METADATA_HOST")
        .env("GOOGLE_CLOUD_PROJECT", "p")
        .args(["-m", CLAUDE, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(
        text.contains(&format!("model '{CLAUDE}': no Google credentials found")),
        "{text}"
    );
    assert!(
        text.contains("GOOGLE_APPLICATION_CREDENTIALS (not set)"),
        "{text}"
    );
    assert!(
        text.contains("application_default_credentials.json (not found)"),
        "{text}"
    );
    assert!(text.contains("the metadata server"), "{text}");

    let bad = env.write("bad.json", "{not json");
    let out = env
        .cmd()
        .env("GOOGLE_APPLICATION_CREDENTIALS", &bad)
        .args(["-m", CLAUDE, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("bad.json: not a Google credentials file"),
        "{}",
        stderr(&out)
    );

    let out = env
        .cmd()
        .env("GOOGLE_CLOUD_PROJECT", "p")
        .args(["-m", "vertex/llama-4-maverick", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("claude… models") && stderr(&out).contains("gemini… models"));
}

#[test]
fn a_refusing_token_endpoint_is_an_auth_error_naming_the_file() {
    let env = env_with("");
    let fake = fake(&env, json!([submit()]), "refuse");
    let sa = service_account(&env, &fake);
    let out = cmd(&env, &fake)
        .env("GOOGLE_APPLICATION_CREDENTIALS", &sa)
        .args(["-m", CLAUDE, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let ev = events(&out.stdout);
    let error = finished(&ev)["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("sa.json") && error.contains("refused"),
        "{error}"
    );
    assert!(model_requests(&fake).is_empty());
    assert_secret_absent("BEGIN PRIVATE KEY", &out, &[]);
}

#[test]
fn a_hanging_or_garbled_token_endpoint_is_a_retried_failure() {
    for (mode, reason) in [("hang", "timeout"), ("garbage", "network")] {
        let env = env_with("");
        let fake = fake(&env, json!([submit()]), mode);
        let sa = service_account(&env, &fake);
        let out = cmd(&env, &fake)
            .env("GOOGLE_APPLICATION_CREDENTIALS", &sa)
            .args(["-m", CLAUDE, "--json", "go"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(75), "{mode}: {}", stderr(&out));
        let ev = events(&out.stdout);
        assert_eq!(retry_reasons(&ev), [reason], "{mode}");
        assert!(model_requests(&fake).is_empty(), "{mode}");
    }
}

/// SPEC 22: a 401 for a token that expired early fetches a new token and
/// sends the request again at once, without using up a retry.
#[test]
fn a_token_refused_as_expired_is_fetched_again_and_the_request_resent() {
    let env = env_with("");
    let expired = json!({"http": 401, "error": {"error": {"code": 401, "message": "Request had invalid authentication credentials. Expected OAuth 2 access token.", "status": "UNAUTHENTICATED"}}});
    let fake = fake(&env, json!([expired, submit()]), "ok");
    let sa = service_account(&env, &fake);
    let out = cmd(&env, &fake)
        .env("GOOGLE_APPLICATION_CREDENTIALS", &sa)
        .args(["-m", GEMINI, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    assert!(retry_reasons(&ev).is_empty(), "no retry was used up");
    let tokens = fake
        .requests()
        .into_iter()
        .filter(|r| r["path"] == "/token")
        .count();
    assert_eq!(tokens, 2, "a fresh token for the resend");
    let reqs = model_requests(&fake);
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0]["headers"]["authorization"], "Bearer ya29.fake-1");
    assert_eq!(reqs[1]["headers"]["authorization"], "Bearer ya29.fake-2");
}

/// Issue 47: the guide's own `vertex-eu` (a named provider of Vertex's API)
/// is priced as Vertex prices the model, not at $0.
#[test]
fn a_named_vertex_provider_is_priced_as_vertex() {
    let env = env_with(
        "providers:\n  vertex-eu: {api: vertex, project: my-project, region: europe-west1}\n",
    );
    let fake = fake(&env, json!([submit()]), "ok");
    let sa = service_account(&env, &fake);
    let out = cmd(&env, &fake)
        .env("GOOGLE_APPLICATION_CREDENTIALS", &sa)
        .args(["-m", "vertex-eu/claude-sonnet-4-5@20250929", "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    let cost = of_type(&ev, "model.response")[0]["cost_usd"]
        .as_f64()
        .unwrap();
    assert!(cost > 0.0, "priced as Vertex's Claude Sonnet 4.5: {cost}");
    let reqs = model_requests(&fake);
    assert!(
        reqs[0]["path"]
            .as_str()
            .unwrap()
            .starts_with("/v1/projects/my-project/locations/europe-west1/"),
        "{}",
        reqs[0]["path"]
    );
}
