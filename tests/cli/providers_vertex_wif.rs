//! Vertex AI with workload identity federation, end to end against the
//! loopback fake (`tests/fakes/vertex.py`, whose OIDC, STS and IAM
//! Credentials endpoints google-auth itself talks to in
//! `tests/sdk/test_vertex.py`): the `external_account` file that
//! `google-github-actions/auth` writes (a GitHub OIDC token from a URL,
//! exchanged at STS, then for a service account's token), the direct form
//! without impersonation, a file-sourced subject token (Kubernetes), gcloud's
//! `impersonated_service_account`, files tinyagent cannot use (exit 2 naming
//! the file), and no token or header secret in any output or file.

use serde_json::{json, Value};

use crate::providers_vertex::{cmd, env_with, fake, model_requests, stderr, submit, CLAUDE};
use crate::support::fake_cloud::FakeCloud;
use crate::support::{assert_secret_absent, TestEnv};

const AUDIENCE: &str =
    "//iam.googleapis.com/projects/123456789/locations/global/workloadIdentityPools/github/providers/tinyagent";
const ACCOUNT: &str = "ci@wif-project.iam.gserviceaccount.com";

/// The credentials file `google-github-actions/auth` writes, pointed at the
/// fake (`impersonate`: with `service_account`, as the action does when one
/// is given).
fn github_actions_file(env: &TestEnv, fake: &FakeCloud, impersonate: bool) -> std::path::PathBuf {
    let mut file = json!({
        "type": "external_account",
        "audience": AUDIENCE,
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": format!("{}/sts/v1/token", fake.url()),
        "credential_source": {
            "url": format!("{}/oidc?api-version=2.0&audience=https%3A%2F%2Fiam.googleapis.com%2Fprojects%2F123456789", fake.url()),
            "headers": {"Authorization": "Bearer gh-request-token"},
            "format": {"type": "json", "subject_token_field_name": "value"}
        }
    });
    if impersonate {
        file["service_account_impersonation_url"] = json!(format!(
            "{}/v1/projects/-/serviceAccounts/{ACCOUNT}:generateAccessToken",
            fake.url()
        ));
    }
    env.write("gha-creds-1a2b3c.json", &file.to_string())
}

fn one_step() -> (TestEnv, FakeCloud) {
    let env = env_with("");
    let fake = fake(&env, json!([submit()]), "ok");
    (env, fake)
}

fn paths(fake: &FakeCloud) -> Vec<String> {
    fake.requests()
        .iter()
        .map(|r| r["path"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A run on `creds` (`json`: with `--json` and a trajectory at traj.json).
fn run_on(
    env: &TestEnv,
    fake: &FakeCloud,
    creds: &std::path::Path,
    json: bool,
) -> std::process::Output {
    let mut cmd = cmd(env, fake);
    cmd.env("GOOGLE_APPLICATION_CREDENTIALS", creds)
        .env("GOOGLE_CLOUD_PROJECT", "wif-project")
        .args(["-m", CLAUDE]);
    if json {
        cmd.args(["--json", "-o"]).arg(env.file("traj.json"));
    }
    cmd.arg("do it").output().unwrap()
}

fn run(env: &TestEnv, fake: &FakeCloud, creds: &std::path::Path) -> std::process::Output {
    run_on(env, fake, creds, true)
}

/// `--check`'s output on `creds`.
fn run_check(env: &TestEnv, fake: &FakeCloud, creds: &std::path::Path) -> String {
    let out = cmd(env, fake)
        .env("GOOGLE_APPLICATION_CREDENTIALS", creds)
        .env("GOOGLE_CLOUD_PROJECT", "wif-project")
        .args(["-m", CLAUDE, "--check"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn github_actions_federation_exchanges_the_oidc_token_and_impersonates_the_account() {
    let (env, fake) = one_step();
    let creds = github_actions_file(&env, &fake, true);
    let out = run(&env, &fake, &creds);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let all = fake.requests();
    assert_eq!(
        paths(&fake)[..3],
        [
            "/oidc".to_string(),
            "/sts/v1/token".to_string(),
            format!("/v1/projects/-/serviceAccounts/{ACCOUNT}:generateAccessToken"),
        ],
        "OIDC token, then STS, then impersonation, once for the run"
    );
    assert_eq!(
        all[0]["headers"]["authorization"],
        "Bearer gh-request-token"
    );
    assert!(all[0]["query"]["audience"]
        .as_str()
        .unwrap()
        .starts_with("https://iam.googleapis.com/"));
    let form: Vec<(String, String)> = url_form(all[1]["body"].as_str().unwrap());
    let field = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(
        field("grant_type"),
        Some("urn:ietf:params:oauth:grant-type:token-exchange")
    );
    assert_eq!(field("audience"), Some(AUDIENCE));
    assert_eq!(
        field("subject_token_type"),
        Some("urn:ietf:params:oauth:token-type:jwt")
    );
    assert_eq!(
        field("requested_token_type"),
        Some("urn:ietf:params:oauth:token-type:access_token")
    );
    // Only IAM, to impersonate with (as google-auth asks).
    assert_eq!(field("scope"), Some("https://www.googleapis.com/auth/iam"));
    let federated = all[2]["headers"]["authorization"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(federated.starts_with("Bearer ya29.fed-"), "{federated}");
    assert_eq!(
        all[2]["body"]["scope"][0],
        "https://www.googleapis.com/auth/cloud-platform"
    );

    let reqs = model_requests(&fake);
    assert_eq!(reqs.len(), 1);
    assert_eq!(
        reqs[0]["path"],
        "/v1/projects/wif-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"
    );
    let bearer = reqs[0]["headers"]["authorization"].as_str().unwrap();
    assert!(bearer.starts_with("Bearer ya29.imp-"), "{bearer}");

    let traj = env.file("traj.json");
    for secret in [
        "gh-request-token",
        &federated["Bearer ".len()..],
        &bearer["Bearer ".len()..],
        "c2lnbmF0dXJl",
    ] {
        assert_secret_absent(secret, &out, &[&traj]);
    }
    // --check names the source and its kind.
    let check = run_check(&env, &fake, &creds);
    assert!(
        check.contains("gha-creds-1a2b3c.json), workload identity federation"),
        "{check}"
    );
}

#[test]
fn direct_federation_uses_the_federated_token_and_a_file_source_is_read() {
    let (env, fake) = one_step();
    let creds = github_actions_file(&env, &fake, false);
    let out = run(&env, &fake, &creds);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = model_requests(&fake);
    let bearer = reqs[0]["headers"]["authorization"].as_str().unwrap();
    assert!(bearer.starts_with("Bearer ya29.fed-"), "{bearer}");
    assert!(!paths(&fake)
        .iter()
        .any(|p| p.contains("generateAccessToken")));

    // A Kubernetes-style source: the subject token is a file, plain text.
    // The fake knows only tokens it issued, so take one from its OIDC endpoint.
    let subject: Value = ureq_get(&format!("{}/oidc?audience=k8s", fake.url()));
    let token_file = env.write("k8s-token", subject["value"].as_str().unwrap());
    let file = json!({
        "type": "external_account",
        "audience": AUDIENCE,
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": format!("{}/sts/v1/token", fake.url()),
        "credential_source": {"file": token_file, "format": {"type": "text"}}
    });
    let creds = env.write("k8s-creds.json", &file.to_string());
    let out = run_on(&env, &fake, &creds, false);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sts: Vec<Value> = fake
        .requests()
        .into_iter()
        .filter(|r| r["path"] == "/sts/v1/token")
        .collect();
    assert_eq!(sts.len(), 2);
    let form = url_form(sts[1]["body"].as_str().unwrap());
    assert!(form.contains(&(
        "subject_token".into(),
        subject["value"].as_str().unwrap().into()
    )));
    let last = model_requests(&fake).pop().unwrap();
    assert!(last["headers"]["authorization"]
        .as_str()
        .unwrap()
        .starts_with("Bearer ya29.fed-"));
}

#[test]
fn gclouds_impersonated_service_account_impersonates_with_its_source_token() {
    let (env, fake) = one_step();
    let file = json!({
        "type": "impersonated_service_account",
        "service_account_impersonation_url": format!("{}/v1/projects/-/serviceAccounts/{ACCOUNT}:generateAccessToken", fake.url()),
        "delegates": [],
        "source_credentials": {
            "type": "authorized_user",
            "client_id": "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com",
            "client_secret": "d-FL95Q19q7MQmFpd7hHD0Ty",
            "refresh_token": "1//fake-refresh-token",
            "token_uri": format!("{}/token", fake.url())
        }
    });
    let creds = env.write("impersonated.json", &file.to_string());
    let out = run(&env, &fake, &creds);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let check = run_check(&env, &fake, &creds);
    assert!(
        check.contains(&format!("impersonated.json), impersonating {ACCOUNT}")),
        "{check}"
    );
    assert_eq!(
        paths(&fake)[..2],
        [
            "/token".to_string(),
            format!("/v1/projects/-/serviceAccounts/{ACCOUNT}:generateAccessToken")
        ]
    );
    let bearer = model_requests(&fake)[0]["headers"]["authorization"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(bearer.starts_with("Bearer ya29.imp-"), "{bearer}");
    assert_secret_absent("1//fake-refresh-token", &out, &[&env.file("traj.json")]);
}

#[test]
fn federation_files_tinyagent_cannot_use_are_exit_2_naming_the_file() {
    let env = env_with("");
    let fake = fake(&env, json!([submit()]), "ok");
    for (name, source, why) in [
        (
            "aws.json",
            json!({"environment_id": "aws1", "region_url": "http://169.254.169.254/latest/meta-data/placement/availability-zone"}),
            "AWS or an executable",
        ),
        (
            "exec.json",
            json!({"executable": {"command": "/usr/bin/true", "timeout_millis": 5000}}),
            "AWS or an executable",
        ),
        (
            "missing.json",
            json!({"file": "/nonexistent/tinyagent/token"}),
            "does not exist",
        ),
    ] {
        let file = json!({
            "type": "external_account",
            "audience": AUDIENCE,
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
            "token_url": format!("{}/sts/v1/token", fake.url()),
            "credential_source": source,
        });
        let creds = env.write(name, &file.to_string());
        let out = run_on(&env, &fake, &creds, false);
        assert_eq!(out.status.code(), Some(2), "{name}");
        let err = stderr(&out);
        assert!(err.contains(name) && err.contains(why), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    assert!(fake.requests().is_empty(), "nothing was sent");
}

#[test]
fn a_refused_subject_token_is_an_auth_error_naming_the_file_not_a_retry() {
    let (env, fake) = one_step();
    let mut file: Value = serde_json::from_str(
        &std::fs::read_to_string(github_actions_file(&env, &fake, false)).unwrap(),
    )
    .unwrap();
    file["credential_source"]["headers"]["Authorization"] = json!("Bearer wrong-request-token");
    let creds = env.write("gha-creds-wrong.json", &file.to_string());
    let out = run_on(&env, &fake, &creds, false);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("gha-creds-wrong.json"), "{err}");
    assert!(
        err.contains("/oidc refused them"),
        "names the endpoint: {err}"
    );
    assert!(!err.contains("wrong-request-token"), "{err}");
    assert_eq!(paths(&fake), ["/oidc"], "asked once, no retry");
}

/// A loopback GET's JSON body (the fake's OIDC endpoint, as a runner asks it).
fn ureq_get(url: &str) -> Value {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {host}\r\nAuthorization: Bearer gh-request-token\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    serde_json::from_str(reply.split_once("\r\n\r\n").unwrap().1).unwrap()
}

/// A form body's fields, decoded.
fn url_form(body: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(body.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}
