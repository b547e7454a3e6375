//! Azure's credential chain for `azure` end to end (SPEC 22), against the
//! Azure OpenAI fake serving Microsoft Entra ID and the managed identity
//! endpoints on its own port (`tests/fakes/entra.py`, proven against
//! azure-identity in `tests/sdk/test_entra.py`): a service principal's
//! secret and certificate, workload identity (its file read again when it
//! changes), App Service's managed identity, the instance metadata service
//! (asked only when nothing earlier was found), the Azure CLI (a fake `az`),
//! one token for a whole run, an expired token refreshed and the request
//! sent again once, refusals and an unreachable token endpoint, nothing
//! found (exit 2 naming every place), `--check` naming the source, and no
//! secret, assertion or token in any output, trajectory or log database.
//! Every test points the instance metadata service at loopback (the
//! support's default is a dead port) and `AZURE_CONFIG_DIR` at its home.

use base64::Engine as _;
use serde_json::{json, Value};

use crate::support::fake_cloud::{cloud_env, FakeCloud};
use crate::support::{assert_secret_absent, events, finished, of_type, retry_reasons, TestEnv};

const MODEL: &str = "azure/prod-chat";
const TENANT: &str = "72f988bf-0000-4000-8000-0000000000aa";
const CLIENT: &str = "0f3c1a2b-0000-4000-8000-0000000000bb";
const SECRET: &str = "entra-cli-test-secret~9f8e7d6c5b4a";
const SCOPE: &str = "https://cognitiveservices.azure.com/.default";
/// What the fake's tokens start with (never in any output).
const TOKEN_PREFIX: &str = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.entra-fake-";

const RETRY: &str = "retry: {attempts: 2, backoff: 1ms, max_backoff: 5s, jitter: 0, stream_first_event_timeout: 5s, stream_idle_timeout: 5s}\n";

fn certificate() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fakes/fixtures/throwaway-entra-certificate.pem")
}

/// The Azure fake as resource, authority and managed identity endpoints
/// of `TENANT`'s app `CLIENT`, answering `replies`, with `args` more.
fn fake(env: &TestEnv, replies: Value, args: &[&str]) -> FakeCloud {
    let mut all = vec![
        "--tenant",
        TENANT,
        "--client-id",
        CLIENT,
        "--deployment",
        "prod-chat=gpt-4o-2024-11-20",
    ];
    all.extend_from_slice(args);
    FakeCloud::scripted("azure", env, &replies, &all)
}

/// The binary with the fake as the resource, the login host and the
/// instance metadata service (so that any request to it is seen).
fn cmd(env: &TestEnv, fake: &FakeCloud) -> assert_cmd::Command {
    let mut cmd = env.cmd();
    cmd.env("AZURE_OPENAI_ENDPOINT", fake.url())
        .env("AZURE_AUTHORITY_HOST", fake.url())
        .env("AZURE_POD_IDENTITY_AUTHORITY_HOST", fake.url())
        .env("PATH", "/usr/bin:/bin");
    cmd
}

/// `cmd` with the service principal's secret.
fn with_secret(env: &TestEnv, fake: &FakeCloud) -> assert_cmd::Command {
    let mut cmd = cmd(env, fake);
    cmd.env("AZURE_TENANT_ID", TENANT)
        .env("AZURE_CLIENT_ID", CLIENT)
        .env("AZURE_CLIENT_SECRET", SECRET);
    cmd
}

fn submit() -> Value {
    json!({"calls": [{"name": "submit", "args": {"output": "done"}}]})
}

fn three_steps() -> Value {
    json!([
        {"calls": [{"name": "bash", "args": {"command": "echo one"}}]},
        {"calls": [{"name": "bash", "args": {"command": "echo two"}}]},
        submit(),
    ])
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn on_path(requests: &[Value], path: &str) -> Vec<Value> {
    requests
        .iter()
        .filter(|r| r["path"] == path)
        .cloned()
        .collect()
}

fn token_requests(fake: &FakeCloud) -> Vec<Value> {
    on_path(&fake.requests(), &format!("/{TENANT}/oauth2/v2.0/token"))
}

fn model_requests(fake: &FakeCloud) -> Vec<Value> {
    on_path(&fake.requests(), "/openai/v1/chat/completions")
}

/// The form a token request sent.
fn form(request: &Value) -> std::collections::HashMap<String, String> {
    url::form_urlencoded::parse(request["body"].as_str().unwrap().as_bytes())
        .into_owned()
        .collect()
}

/// A federated token as AKS or GitHub Actions writes it (its signature
/// is the issuer's; the fake trusts the tokens it is given).
fn federated_token(subject: &str) -> String {
    let part = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    format!(
        "{}.{}.c2lnbmF0dXJl",
        part(json!({"alg": "RS256", "typ": "JWT", "kid": "k1"})),
        part(
            json!({"iss": "https://oidc.prod-aks.azure.com/x/", "sub": subject, "aud": "api://AzureADTokenExchange", "exp": exp})
        )
    )
}

fn check_line(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_service_principals_secret_gets_one_token_for_a_whole_run() {
    let env = cloud_env(RETRY, "");
    let fake = fake(&env, three_steps(), &["--client-secret", SECRET]);
    let traj = env.file("traj.json");
    let db = env.file("log.db");
    let out = with_secret(&env, &fake)
        .args(["-m", MODEL, "--json", "-o"])
        .arg(&traj)
        .arg("--log-db")
        .arg(&db)
        .arg("go")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(finished(&events(&out.stdout))["status"], "submitted");
    let tokens = token_requests(&fake);
    assert_eq!(tokens.len(), 1, "one token for the run");
    let sent = form(&tokens[0]);
    assert_eq!(sent["grant_type"], "client_credentials");
    assert_eq!(sent["client_id"], CLIENT);
    assert_eq!(sent["client_secret"], SECRET);
    assert_eq!(sent["scope"], SCOPE);
    let models = model_requests(&fake);
    assert_eq!(models.len(), 3);
    let bearer = format!("Bearer {TOKEN_PREFIX}1.c2ln");
    for r in &models {
        assert_eq!(r["headers"]["authorization"], bearer.as_str());
        assert!(r["headers"].get("api-key").is_none());
    }
    assert!(
        on_path(&fake.requests(), "/metadata/identity/oauth2/token").is_empty(),
        "the instance metadata service is never asked when a source came first"
    );
    for secret in [SECRET, TOKEN_PREFIX] {
        assert_secret_absent(secret, &out, &[&traj, &db]);
    }

    // `AZURE_OPENAI_AD_TOKEN` is still used as given, before the chain.
    let out = with_secret(&env, &fake)
        .env("AZURE_OPENAI_AD_TOKEN", "eyJhbGciOi.given-token")
        .args(["-m", MODEL, "--check"])
        .output()
        .unwrap();
    assert!(check_line(&out).contains("credentials: environment (AZURE_OPENAI_AD_TOKEN)"));
    assert_eq!(token_requests(&fake).len(), 1);
    let out = with_secret(&env, &fake)
        .args(["-m", MODEL, "--check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        check_line(&out).contains("credentials: Entra ID, service principal (AZURE_CLIENT_ID)"),
        "{}",
        check_line(&out)
    );
    assert_secret_absent(SECRET, &out, &[]);
}

#[test]
fn a_certificates_assertion_is_signed_and_checked() {
    let env = cloud_env(RETRY, "");
    let cert = certificate();
    let fake = fake(&env, json!([submit()]), &["--cert", cert.to_str().unwrap()]);
    let out = cmd(&env, &fake)
        .env("AZURE_TENANT_ID", TENANT)
        .env("AZURE_CLIENT_ID", CLIENT)
        .env("AZURE_CLIENT_CERTIFICATE_PATH", &cert)
        .args(["-m", MODEL, "--check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        check_line(&out)
            .contains("credentials: Entra ID, service principal (AZURE_CLIENT_CERTIFICATE_PATH)"),
        "{}",
        check_line(&out)
    );
    let sent = form(&token_requests(&fake)[0]);
    assert_eq!(
        sent["client_assertion_type"],
        "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    );
    assert!(!sent.contains_key("client_secret"));
    assert_secret_absent(&sent["client_assertion"], &out, &[]);

    // A file whose key cannot be used: exit 2 naming the variable and the
    // file, never its contents.
    let other = env.write(
        "other.pem",
        &std::fs::read_to_string(&cert)
            .unwrap()
            .replace("MII", "MIJ"),
    );
    let out = cmd(&env, &fake)
        .env("AZURE_TENANT_ID", TENANT)
        .env("AZURE_CLIENT_ID", CLIENT)
        .env("AZURE_CLIENT_CERTIFICATE_PATH", &other)
        .args(["-m", MODEL, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("AZURE_CLIENT_CERTIFICATE_PATH (") && !stderr(&out).contains("MIJ"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn workload_identity_reads_its_file_again_when_it_changes() {
    let env = cloud_env(RETRY, "");
    let first = federated_token("system:serviceaccount:default:agent-1");
    let second = federated_token("system:serviceaccount:default:agent-2");
    let file = env.write("azure-identity-token", &first);
    // The platform rotates the file (the token itself stays out of the
    // tool call, which the events show).
    let staged = env.write("next-token", &second);
    let rotate = format!("sleep 1; cp '{}' '{}'", staged.display(), file.display());
    let replies = json!([
        {"calls": [{"name": "bash", "args": {"command": rotate}}]},
        submit(),
    ]);
    let fake = fake(
        &env,
        replies,
        &[
            "--federated",
            &first,
            "--federated",
            &second,
            "--lifetime",
            "1",
        ],
    );
    let out = cmd(&env, &fake)
        .env("AZURE_TENANT_ID", TENANT)
        .env("AZURE_CLIENT_ID", CLIENT)
        .env("AZURE_FEDERATED_TOKEN_FILE", &file)
        .args(["-m", MODEL, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let assertions: Vec<String> = token_requests(&fake)
        .iter()
        .map(|r| form(r)["client_assertion"].clone())
        .collect();
    assert_eq!(assertions, [first.clone(), second.clone()]);
    for secret in [&first, &second] {
        assert_secret_absent(secret, &out, &[]);
    }
    let out = cmd(&env, &fake)
        .env("AZURE_TENANT_ID", TENANT)
        .env("AZURE_CLIENT_ID", CLIENT)
        .env("AZURE_FEDERATED_TOKEN_FILE", &file)
        .args(["-m", MODEL, "--check"])
        .output()
        .unwrap();
    assert!(
        check_line(&out)
            .contains("credentials: Entra ID, workload identity (AZURE_FEDERATED_TOKEN_FILE)"),
        "{}",
        check_line(&out)
    );
}

#[test]
fn app_services_managed_identity_endpoint() {
    let env = cloud_env(RETRY, "");
    let header = "msi-header-0123456789abcdef";
    let fake = fake(&env, three_steps(), &["--identity-header", header]);
    let out = cmd(&env, &fake)
        .env("IDENTITY_ENDPOINT", format!("{}/msi/token", fake.url()))
        .env("IDENTITY_HEADER", header)
        .args(["-m", MODEL, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let asked = on_path(&fake.requests(), "/msi/token");
    assert_eq!(asked.len(), 1);
    assert_eq!(
        asked[0]["query"],
        json!({"api-version": "2019-08-01", "resource": "https://cognitiveservices.azure.com"})
    );
    assert_eq!(asked[0]["headers"]["x-identity-header"], header);
    assert_eq!(model_requests(&fake).len(), 3);
    assert!(on_path(&fake.requests(), "/metadata/identity/oauth2/token").is_empty());
    assert_secret_absent(header, &out, &[]);
    assert_secret_absent(TOKEN_PREFIX, &out, &[]);

    let out = cmd(&env, &fake)
        .env("IDENTITY_ENDPOINT", format!("{}/msi/token", fake.url()))
        .env("IDENTITY_HEADER", header)
        .env("AZURE_CLIENT_ID", "user-assigned-7")
        .args(["-m", MODEL, "--check"])
        .output()
        .unwrap();
    assert!(
        check_line(&out).contains("credentials: Entra ID, managed identity (IDENTITY_ENDPOINT)"),
        "{}",
        check_line(&out)
    );
    let asked = on_path(&fake.requests(), "/msi/token");
    assert_eq!(asked[1]["query"]["client_id"], "user-assigned-7");
}

#[test]
fn the_instance_metadata_service_is_asked_only_when_nothing_earlier_was_found() {
    let env = cloud_env(RETRY, "");
    let fake = fake(&env, json!([submit()]), &[]);
    let out = cmd(&env, &fake)
        .args(["-m", MODEL, "--check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        check_line(&out)
            .contains("credentials: Entra ID, managed identity (instance metadata service)"),
        "{}",
        check_line(&out)
    );
    let asked = on_path(&fake.requests(), "/metadata/identity/oauth2/token");
    // The probe at validation (no Metadata header: refused), then one token.
    assert!(asked[0]["headers"].get("metadata").is_none(), "{asked:?}");
    let tokens: Vec<&Value> = asked
        .iter()
        .filter(|r| r["headers"]["metadata"] == "true")
        .collect();
    assert_eq!(tokens.len(), 1, "{asked:?}");
    assert_eq!(
        tokens[0]["query"]["resource"],
        "https://cognitiveservices.azure.com"
    );
    assert_eq!(tokens[0]["query"]["api-version"], "2018-02-01");
}

#[test]
fn the_azure_clis_own_token() {
    let env = cloud_env(RETRY, "");
    let token = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.az-cli-token.c2ln";
    let fake = FakeCloud::scripted(
        "azure",
        &env,
        &json!([submit()]),
        &[
            "--token",
            token,
            "--deployment",
            "prod-chat=gpt-4o-2024-11-20",
        ],
    );
    let config_dir = env.home().join(".azure");
    let bin = env.file("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let calls = env.file("az-calls.txt");
    let az = bin.join("az");
    std::fs::write(
        &az,
        format!(
            "#!/bin/sh\necho \"$AZURE_CONFIG_DIR $*\" >> '{}'\nexp=$(( $(date +%s) + 3600 ))\nprintf '{{\"accessToken\": \"{token}\", \"expiresOn\": \"2030-01-01 00:00:00.000000\", \"expires_on\": %s, \"subscription\": \"s\", \"tenant\": \"t\", \"tokenType\": \"Bearer\"}}\\n' \"$exp\"\n",
            calls.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&az, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());

    // Installed but not logged in: nothing found, exit 2, naming it.
    let out = cmd(&env, &fake)
        .env("AZURE_POD_IDENTITY_AUTHORITY_HOST", "http://127.0.0.1:9")
        .env("PATH", &path)
        .args(["-m", MODEL, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the Azure CLI (not logged in: no subscription in"),
        "{}",
        stderr(&out)
    );

    std::fs::create_dir_all(&config_dir).unwrap();
    std::fs::write(
        config_dir.join("azureProfile.json"),
        "\u{feff}{\"installationId\": \"i\", \"subscriptions\": [{\"id\": \"s\", \"isDefault\": true}]}",
    )
    .unwrap();
    let out = cmd(&env, &fake)
        .env("AZURE_POD_IDENTITY_AUTHORITY_HOST", "http://127.0.0.1:9")
        .env("PATH", &path)
        .args(["-m", MODEL, "--check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        check_line(&out).contains("credentials: Entra ID, Azure CLI"),
        "{}",
        check_line(&out)
    );
    let logged = std::fs::read_to_string(&calls).unwrap();
    assert_eq!(
        logged.trim(),
        format!(
            "{} account get-access-token --output json --scope {SCOPE}",
            config_dir.display()
        )
    );
    let req = &model_requests(&fake)[0];
    assert_eq!(req["headers"]["authorization"], format!("Bearer {token}"));
    assert_secret_absent(token, &out, &[]);
}

#[test]
fn an_expired_token_is_fetched_again_and_the_request_sent_once_more() {
    let env = cloud_env(RETRY, "");
    // Each token is taken for one request, then answered 401 as expired.
    let fake = fake(
        &env,
        three_steps(),
        &["--client-secret", SECRET, "--expire-after", "1"],
    );
    let out = with_secret(&env, &fake)
        .args(["-m", MODEL, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["status"], "submitted");
    assert!(retry_reasons(&ev).is_empty(), "no retry used up");
    assert_eq!(of_type(&ev, "model.response").len(), 3);
    assert_eq!(token_requests(&fake).len(), 3);
    let bearers: Vec<String> = model_requests(&fake)
        .iter()
        .map(|r| r["headers"]["authorization"].as_str().unwrap().to_string())
        .collect();
    let token = |n: u32| format!("Bearer {TOKEN_PREFIX}{n}.c2ln");
    assert_eq!(
        bearers,
        [token(1), token(1), token(2), token(2), token(3)],
        "each refused request sent again once, with a fresh token"
    );
    assert_secret_absent(TOKEN_PREFIX, &out, &[]);
}

#[test]
fn a_refusal_names_the_source_and_entras_reason_and_no_secret() {
    let env = cloud_env(RETRY, "");
    let fake = fake(
        &env,
        json!([submit()]),
        &["--client-secret", "another-secret"],
    );
    let out = with_secret(&env, &fake)
        .args(["-m", MODEL, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let error = finished(&events(&out.stdout))["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        error.contains("Entra ID, service principal (AZURE_CLIENT_ID)")
            && error.contains("AADSTS7000215: Invalid client secret provided")
            && !error.contains("Trace ID"),
        "{error}"
    );
    assert_eq!(token_requests(&fake).len(), 1, "a refusal is not retried");
    assert!(model_requests(&fake).is_empty());
    assert_secret_absent(SECRET, &out, &[]);

    // An unreachable token endpoint is a network failure of the member.
    let out = with_secret(&env, &fake)
        .env("AZURE_AUTHORITY_HOST", "http://127.0.0.1:9")
        .args(["-m", MODEL, "--check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let line = check_line(&out);
    assert!(
        line.starts_with(&format!("FAIL  {MODEL}  network"))
            && line.contains("could not be reached"),
        "{line}"
    );
    assert_secret_absent(SECRET, &out, &[]);
}

#[test]
fn nothing_found_exits_2_naming_every_place_before_any_request() {
    let env = cloud_env(RETRY, "");
    let fake = fake(&env, json!([submit()]), &[]);
    let out = env
        .cmd()
        .env("AZURE_OPENAI_ENDPOINT", fake.url())
        .env("AZURE_CLIENT_ID", CLIENT)
        .env("PATH", "/usr/bin:/bin")
        .args(["-m", MODEL, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    for place in [
        "model 'azure/prod-chat': no Azure OpenAI credentials: neither AZURE_OPENAI_API_KEY nor AZURE_OPENAI_AD_TOKEN is set, and no Microsoft Entra ID credentials found",
        "a service principal (AZURE_TENANT_ID, AZURE_CLIENT_SECRET or AZURE_CLIENT_CERTIFICATE_PATH not set)",
        "workload identity (AZURE_FEDERATED_TOKEN_FILE, AZURE_TENANT_ID not set)",
        "a managed identity (IDENTITY_ENDPOINT, IDENTITY_HEADER not set)",
        "the instance metadata service (http://127.0.0.1:9: no answer within 2 s)",
        "the Azure CLI (",
    ] {
        assert!(err.contains(place), "{place}: {err}");
    }
    assert!(!err.contains(CLIENT), "{err}");
    assert!(fake.requests().is_empty());
}
