//! The `foundry` provider end to end (SPEC 22), against the loopback fake
//! of Claude on Microsoft Foundry (`tests/fakes/foundry.py`, proven against
//! anthropic's `AnthropicFoundry` in `tests/sdk/test_foundry.py`): the
//! Anthropic Messages form at `{base}/v1/messages`, the key in the client's
//! two headers, prices, `--check` naming the credential source, a named
//! provider (`api: foundry`) with its own endpoint and key variable, and
//! missing credentials (exit 2 naming every place looked in).

use serde_json::{json, Value};

use crate::support::fake_cloud::{cloud_env, FakeCloud};
use crate::support::{assert_secret_absent, events, finished, of_type, TestEnv};

const CLAUDE: &str = "foundry/claude-sonnet-4-5";
const KEY: &str = "fdry-0123456789abcdef";
const RETRY: &str = "retry: {attempts: 2, backoff: 1ms, max_backoff: 5s, jitter: 0, stream_first_event_timeout: 2s, stream_idle_timeout: 2s}\n";

fn fake(env: &TestEnv, replies: Value) -> FakeCloud {
    FakeCloud::scripted("foundry", env, &replies, &["--key", KEY])
}

/// The binary with Foundry's base pointed at the fake and its key set.
fn cmd(env: &TestEnv, fake: &FakeCloud) -> assert_cmd::Command {
    let mut cmd = env.cmd();
    cmd.env(
        "ANTHROPIC_FOUNDRY_BASE_URL",
        format!("{}/anthropic", fake.url()),
    )
    .env("ANTHROPIC_FOUNDRY_API_KEY", KEY);
    cmd
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn claude_on_foundry_runs_tools_with_its_key_as_anthropics_client_sends_it() {
    let env = cloud_env(RETRY, "");
    let fake = fake(
        &env,
        json!([
            {"calls": [{"name": "write_file", "args": {"path": "f.txt", "content": "foundry\n"}}]},
            {"calls": [{"name": "submit", "args": {"output": "done"}}]},
        ]),
    );
    let traj = env.file("traj.json");
    let out = cmd(&env, &fake)
        .args(["-m", CLAUDE, "--json", "-o"])
        .arg(&traj)
        .arg("write it")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(env.work().join("f.txt")).unwrap(),
        "foundry\n"
    );
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["status"], "submitted");
    // Priced at Foundry's Claude Sonnet 4.5 prices (input, cache read and
    // write, output) for the usage the fake's prompt cache reports.
    let response = &of_type(&ev, "model.response")[0];
    let count = |field: &str| response[field].as_u64().unwrap() as f64;
    let (read, written) = (count("cached_input_tokens"), count("cache_write_tokens"));
    let fresh = count("input_tokens") - read - written;
    let list = (fresh * 3.0 + read * 0.3 + written * 3.75 + count("output_tokens") * 15.0) / 1e6;
    let cost = response["cost_usd"].as_f64().unwrap();
    assert!(cost > 0.0 && (cost - list).abs() < 1e-12, "{cost} {list}");

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0]["path"], "/anthropic/v1/messages");
    let headers = &reqs[0]["headers"];
    assert_eq!(headers["x-api-key"], KEY);
    assert_eq!(headers["api-key"], KEY);
    assert!(headers.get("authorization").is_none(), "{headers}");
    assert_eq!(headers["anthropic-version"], "2023-06-01");
    assert_eq!(reqs[0]["body"]["model"], "claude-sonnet-4-5");
    assert_eq!(reqs[0]["body"]["stream"], true);
    assert_eq!(
        reqs[1]["body"]["messages"][1]["content"][0]["type"],
        "tool_use"
    );
    assert_secret_absent(KEY, &out, &[&traj]);
}

#[test]
fn check_names_the_credential_source_and_a_refused_key_fails() {
    let env = cloud_env(RETRY, "");
    let fake = fake(&env, json!([{"text": "ok"}]));
    let out = cmd(&env, &fake)
        .args(["-m", CLAUDE, "--check"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", stderr(&out));
    assert!(
        stdout.contains(CLAUDE)
            && stdout.contains("price: known")
            && stdout.contains("credentials: environment (ANTHROPIC_FOUNDRY_API_KEY)"),
        "{stdout}"
    );
    assert!(!stdout.contains(KEY));

    let out = cmd(&env, &fake)
        .env("ANTHROPIC_FOUNDRY_API_KEY", "wrong-key")
        .args(["-m", CLAUDE, "--check"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.starts_with(&format!("FAIL  {CLAUDE}")), "{stdout}");
    assert!(!stdout.contains("wrong-key") && !stderr(&out).contains("wrong-key"));
}

#[test]
fn a_named_foundry_provider_takes_its_own_endpoint_and_key_variable() {
    let env = TestEnv::new();
    let fake = fake(
        &env,
        json!([{"calls": [{"name": "submit", "args": {"output": "named"}}]}]),
    );
    env.user_config(&format!(
        "health_db: off\n{RETRY}providers:\n  claude-eu:\n    api: foundry\n    endpoint: {}/anthropic/\n    api_key_env: TEAM_FOUNDRY_KEY\n",
        fake.url()
    ));
    let out = env
        .cmd()
        .env("TEAM_FOUNDRY_KEY", KEY)
        .env("ANTHROPIC_FOUNDRY_BASE_URL", "http://127.0.0.1:9/never")
        .args(["-m", "claude-eu/claude-haiku-4-5", "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["output"], "named");
    let cost = of_type(&ev, "model.response")[0]["cost_usd"]
        .as_f64()
        .unwrap();
    assert!(cost > 0.0, "priced as Foundry prices Claude Haiku 4.5");
    let reqs = fake.requests();
    assert_eq!(reqs[0]["path"], "/anthropic/v1/messages");
    assert_eq!(reqs[0]["headers"]["x-api-key"], KEY);
}

#[test]
fn missing_credentials_are_exit_2_naming_every_place() {
    let env = cloud_env(RETRY, "");
    let out = env
        .cmd()
        .env_remove("ANTHROPIC_FOUNDRY_RESOURCE")
        .env_remove("ANTHROPIC_FOUNDRY_BASE_URL")
        .env_remove("ANTHROPIC_FOUNDRY_API_KEY")
        .args(["-m", CLAUDE, "go"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for place in [
        "model 'foundry/claude-sonnet-4-5'",
        "ANTHROPIC_FOUNDRY_RESOURCE",
        "ANTHROPIC_FOUNDRY_BASE_URL",
        "ANTHROPIC_FOUNDRY_API_KEY",
        "no Microsoft Entra ID credentials found",
    ] {
        assert!(err.contains(place), "{place}: {err}");
    }

    // With the resource set, only the credentials are missing.
    let out = env
        .cmd()
        .env("ANTHROPIC_FOUNDRY_RESOURCE", "my-resource")
        .env_remove("ANTHROPIC_FOUNDRY_API_KEY")
        .args(["-m", CLAUDE, "go"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("ANTHROPIC_FOUNDRY_API_KEY")
            && err.contains("no Microsoft Entra ID credentials found")
            && !err.contains("ANTHROPIC_FOUNDRY_RESOURCE"),
        "{err}"
    );
}

/// Without a key, Foundry takes a Microsoft Entra ID token from Azure's
/// credential chain (a service principal's secret here, at the fake's login
/// host), for the scope anthropic's `AnthropicFoundry` asks for, fetched
/// once for the whole run and named by `--check`.
#[test]
fn without_a_key_foundry_takes_an_entra_id_token_for_its_scope() {
    const TENANT: &str = "72f988bf-0000-4000-8000-0000000000aa";
    const CLIENT: &str = "0f3c1a2b-0000-4000-8000-0000000000bb";
    const SECRET: &str = "foundry-entra-test-secret~1a2b3c";
    let env = cloud_env(RETRY, "");
    let replies = json!([
        {"calls": [{"name": "bash", "args": {"command": "echo one"}}]},
        {"calls": [{"name": "submit", "args": {"output": "done"}}]},
    ]);
    let fake = FakeCloud::scripted(
        "foundry",
        &env,
        &replies,
        &[
            "--tenant",
            TENANT,
            "--client-id",
            CLIENT,
            "--client-secret",
            SECRET,
        ],
    );
    let cmd = |args: &[&str]| {
        let mut cmd = env.cmd();
        cmd.env(
            "ANTHROPIC_FOUNDRY_BASE_URL",
            format!("{}/anthropic", fake.url()),
        )
        .env_remove("ANTHROPIC_FOUNDRY_API_KEY")
        .env("AZURE_AUTHORITY_HOST", fake.url())
        .env("AZURE_TENANT_ID", TENANT)
        .env("AZURE_CLIENT_ID", CLIENT)
        .env("AZURE_CLIENT_SECRET", SECRET)
        .args(args);
        cmd.output().unwrap()
    };
    let out = cmd(&["-m", CLAUDE, "--json", "-o", "run.json", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["status"], "submitted");
    let requests = fake.requests();
    let tokens: Vec<&Value> = requests
        .iter()
        .filter(|r| r["path"] == format!("/{TENANT}/oauth2/v2.0/token"))
        .collect();
    assert_eq!(tokens.len(), 1, "one token for the whole run: {requests:?}");
    let body = tokens[0]["body"].as_str().unwrap();
    assert!(
        body.contains("scope=https%3A%2F%2Fai.azure.com%2F.default"),
        "{body}"
    );
    let messages: Vec<&Value> = requests
        .iter()
        .filter(|r| r["path"] == "/anthropic/v1/messages")
        .collect();
    assert_eq!(messages.len(), 2);
    for m in &messages {
        let auth = m["headers"]["authorization"].as_str().unwrap();
        assert!(auth.starts_with("Bearer eyJ"), "{auth}");
        assert!(m["headers"].get("x-api-key").is_none());
    }
    let token = messages[0]["headers"]["authorization"]
        .as_str()
        .unwrap()
        .trim_start_matches("Bearer ")
        .to_string();
    let trajectory = env.work().join("run.json");
    for secret in [SECRET, token.as_str()] {
        assert_secret_absent(secret, &out, &[&trajectory]);
    }

    let out = cmd(&["-m", CLAUDE, "--check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(
        text.contains("credentials: Entra ID, service principal (AZURE_CLIENT_ID)"),
        "{text}"
    );
}
