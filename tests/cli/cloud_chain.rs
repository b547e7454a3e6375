//! A chain across clouds (SPEC 22 with SPEC 5): Claude on the Anthropic
//! API, then on Bedrock, then on Vertex AI. A 529 outage of the first is
//! crossed at a step boundary with the conversation carried over in each
//! cloud's own form (Anthropic's `tool_use` blocks become Converse
//! `toolUse` / `toolResult`), every switch visible, every member priced.

use serde_json::{json, Value};

use crate::support::anthropic::{error_reply, tool_reply};
use crate::support::fake_cloud::FakeCloud;
use crate::support::stub::Stub;
use crate::support::{events, finished, of_type, TestEnv};

const ANTHROPIC: &str = "anthropic/claude-sonnet-4-5";
const BEDROCK: &str = "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const VERTEX: &str = "vertex/claude-sonnet-4-5@20250929";

const CONFIG: &str = "health_db: off\nretry: {attempts: 2, backoff: 1ms, max_backoff: 20ms, jitter: 0, rate_limit_attempts: 2}\nfallback: {switch_after: 2}\n";

fn fake(env: &TestEnv, name: &str, script: Value, extra: &[&str]) -> FakeCloud {
    let path = env.write(&format!("{name}-script.json"), &script.to_string());
    let mut args = vec!["--script", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    FakeCloud::start(name, &env.dir.path().join("files"), &args)
}

/// A service account key whose `token_uri` is the Vertex fake's own.
fn service_account(env: &TestEnv, vertex: &FakeCloud) -> std::path::PathBuf {
    let pem = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fakes/fixtures/throwaway-service-account.pem");
    let key = json!({
        "type": "service_account",
        "project_id": "chain-project",
        "private_key_id": "k1",
        "private_key": std::fs::read_to_string(pem).unwrap(),
        "client_email": "agent@chain-project.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": format!("{}/token", vertex.url()),
    });
    env.write("sa.json", &key.to_string())
}

/// The binary with all three doors pointed at their loopback fakes.
fn chain_cmd(
    env: &TestEnv,
    anthropic: &Stub,
    bedrock: &FakeCloud,
    vertex: &FakeCloud,
) -> assert_cmd::Command {
    let sa = service_account(env, vertex);
    let mut cmd = env.cmd();
    cmd.env("ANTHROPIC_BASE_URL", anthropic.url())
        .env("ANTHROPIC_API_KEY", "sk-ant-chain")
        .env("AWS_ACCESS_KEY_ID", "AKIDTINYAGENTFAKE")
        .env("AWS_SECRET_ACCESS_KEY", "tinyagent/fake/secret+key")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", bedrock.url())
        .env("VERTEX_BASE_URL", vertex.url())
        .env("CLOUD_ML_REGION", "us-east5")
        .env("GOOGLE_APPLICATION_CREDENTIALS", sa)
        .args(["-m", ANTHROPIC, "--fallback-model", BEDROCK])
        .args(["--fallback-model", VERTEX, "--json"]);
    cmd
}

fn model_calls(vertex: &FakeCloud) -> Vec<Value> {
    vertex
        .requests()
        .into_iter()
        .filter(|r| r["path"].as_str().unwrap().contains("/publishers/"))
        .collect()
}

#[test]
fn a_529_outage_of_the_anthropic_api_moves_the_run_to_bedrock_with_its_conversation() {
    let env = TestEnv::new();
    env.user_config(CONFIG);
    // Step 1 answers on the Anthropic API; from step 2 on it is overloaded.
    let anthropic = Stub::sequence(vec![
        tool_reply(
            "toolu_01",
            "write_file",
            json!({"path": "a.txt", "content": "from anthropic\n"}),
        ),
        error_reply(529, "overloaded_error", "Overloaded"),
    ]);
    let bedrock = fake(
        &env,
        "bedrock",
        json!({"replies": [
            {"text": "Writing the second.", "tool_use": [{"name": "write_file", "id": "tooluse_B1", "input": {"path": "b.txt", "content": "from bedrock\n"}}]},
            {"text": "Both files are written."},
        ]}),
        &[],
    );
    let vertex = fake(&env, "vertex", json!([]), &["--token-mode", "ok"]);
    let traj = env.file("traj.json");
    let out = chain_cmd(&env, &anthropic, &bedrock, &vertex)
        .arg("-o")
        .arg(&traj)
        .arg("write two files")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(env.work().join("a.txt")).unwrap(),
        "from anthropic\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.work().join("b.txt")).unwrap(),
        "from bedrock\n"
    );
    assert!(
        stderr.contains(&format!(
            "model fallback: {ANTHROPIC} -> {BEDROCK} (http_529) at step 2"
        )),
        "{stderr}"
    );
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["output"], "Both files are written.");
    let switches = of_type(&ev, "model.fallback");
    assert_eq!(switches.len(), 1, "{switches:?}");
    assert_eq!(
        (
            &switches[0]["from"],
            &switches[0]["to"],
            &switches[0]["reason"]
        ),
        (&json!(ANTHROPIC), &json!(BEDROCK), &json!("http_529"))
    );
    // Every response priced: Bedrock's id costs what claude-sonnet-4-5 costs.
    for response in of_type(&ev, "model.response") {
        assert!(response["cost_usd"].as_f64().unwrap() > 0.0, "{response}");
    }

    // Bedrock got the whole conversation in Converse's own form: the
    // Anthropic API's tool call and its result.
    let reqs = bedrock.requests();
    assert_eq!(reqs[0]["signature_ok"], true, "{}", reqs[0]);
    let messages = reqs[0]["body"]["messages"].as_array().unwrap();
    let tool_use = messages
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap())
        .find(|c| c.get("toolUse").is_some())
        .expect("the first step's tool call");
    assert_eq!(tool_use["toolUse"]["name"], "write_file");
    let use_id = tool_use["toolUse"]["toolUseId"].clone();
    let result = messages
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap())
        .find(|c| c.get("toolResult").is_some())
        .expect("the first step's tool result");
    assert_eq!(result["toolResult"]["toolUseId"], use_id);
    assert!(model_calls(&vertex).is_empty(), "vertex was never needed");

    let trajectory: Value = serde_json::from_slice(&std::fs::read(&traj).unwrap()).unwrap();
    assert_eq!(
        trajectory["model_switches"][0]["to"], BEDROCK,
        "{trajectory}"
    );
}

#[test]
fn with_bedrock_down_too_the_run_crosses_to_vertex() {
    let env = TestEnv::new();
    env.user_config(CONFIG);
    let anthropic = Stub::sequence(vec![error_reply(529, "overloaded_error", "Overloaded")]);
    let bedrock = fake(
        &env,
        "bedrock",
        // The fake takes each reply once: one 503 per request it expects.
        json!({"replies": [
            {"http_error": {"status": 503, "type": "ServiceUnavailableException", "message": "Bedrock is unable to process your request."}},
            {"http_error": {"status": 503, "type": "ServiceUnavailableException", "message": "Bedrock is unable to process your request."}},
        ]}),
        &[],
    );
    let vertex = fake(
        &env,
        "vertex",
        json!([
            {"text": "On Vertex.", "calls": [{"name": "write_file", "args": {"path": "v.txt", "content": "vertex\n"}}]},
            {"calls": [{"name": "submit", "args": {"output": "done on vertex"}}]},
        ]),
        &["--token-mode", "ok"],
    );
    let out = chain_cmd(&env, &anthropic, &bedrock, &vertex)
        .arg("write it")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(env.work().join("v.txt")).unwrap(),
        "vertex\n"
    );
    for line in [
        format!("model fallback: {ANTHROPIC} -> {BEDROCK} (http_529) at step 1"),
        format!("model fallback: {BEDROCK} -> {VERTEX} (http_503) at step 1"),
    ] {
        assert!(stderr.contains(&line), "{line}\n{stderr}");
    }
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["output"], "done on vertex");
    let reasons: Vec<Value> = of_type(&ev, "model.fallback")
        .iter()
        .map(|s| s["reason"].clone())
        .collect();
    assert_eq!(reasons, [json!("http_529"), json!("http_503")]);
    // Each door was asked its retries' worth, no more.
    assert_eq!(anthropic.count(), 2);
    assert_eq!(bedrock.requests().len(), 2);
    assert_eq!(model_calls(&vertex).len(), 2);
}

const FOUNDRY: &str = "foundry/claude-sonnet-4-5";

/// Issue 46: Anthropic -> Bedrock -> Vertex -> Foundry, the first three
/// down (a 529, Bedrock's 503s, Vertex's UNAVAILABLE), the run ends on
/// Claude on Microsoft Foundry.
#[test]
fn with_vertex_down_too_the_run_crosses_to_foundry() {
    let env = TestEnv::new();
    env.user_config(CONFIG);
    let anthropic = Stub::sequence(vec![error_reply(529, "overloaded_error", "Overloaded")]);
    let unavailable = json!({"http_error": {"status": 503, "type": "ServiceUnavailableException", "message": "Bedrock is unable to process your request."}});
    let bedrock = fake(
        &env,
        "bedrock",
        json!({"replies": [unavailable.clone(), unavailable]}),
        &[],
    );
    let vertex = fake(
        &env,
        "vertex",
        json!([{"http": 503}, {"http": 503}]),
        &["--token-mode", "ok"],
    );
    let foundry = fake(
        &env,
        "foundry",
        json!([
            {"calls": [{"name": "write_file", "args": {"path": "f.txt", "content": "foundry\n"}}]},
            {"calls": [{"name": "submit", "args": {"output": "done on foundry"}}]},
        ]),
        &["--key", "fdry-chain"],
    );
    let out = chain_cmd(&env, &anthropic, &bedrock, &vertex)
        .env(
            "ANTHROPIC_FOUNDRY_BASE_URL",
            format!("{}/anthropic", foundry.url()),
        )
        .env("ANTHROPIC_FOUNDRY_API_KEY", "fdry-chain")
        .args(["--fallback-model", FOUNDRY, "write it"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(env.work().join("f.txt")).unwrap(),
        "foundry\n"
    );
    for line in [
        format!("model fallback: {ANTHROPIC} -> {BEDROCK} (http_529) at step 1"),
        format!("model fallback: {BEDROCK} -> {VERTEX} (http_503) at step 1"),
        format!("model fallback: {VERTEX} -> {FOUNDRY} (http_503) at step 1"),
    ] {
        assert!(stderr.contains(&line), "{line}\n{stderr}");
    }
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["output"], "done on foundry");
    assert_eq!(model_calls(&vertex).len(), 2);
    let calls = foundry.requests();
    assert_eq!(calls.len(), 2);
    // The conversation crossed in Anthropic's form, the tool call and its
    // result carried over.
    assert_eq!(
        calls[1]["body"]["messages"][1]["content"][0]["type"],
        "tool_use"
    );
    let responses = of_type(&ev, "model.response");
    let last = responses.last().unwrap();
    assert_eq!(last["model"], FOUNDRY);
    assert!(last["cost_usd"].as_f64().unwrap() > 0.0);
}
