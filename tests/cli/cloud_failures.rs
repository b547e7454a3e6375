//! What a cloud member's failures say (SPEC 4, 6, 15, 22), over the
//! loopback fakes and raw loopback sockets: one OAuth token per process
//! for members built apart, the Gemini API's key source under `--check`,
//! every missing Bedrock thing in one message (a profile not found among
//! them), which network failure it was (a host that does not resolve, a
//! refused connection, a TLS handshake, a reset) and a region this release
//! does not know, Bedrock's unknown model id, a failed `credential_process`
//! said once, a token endpoint's reason, and an account out of quota.

use std::io::{Read, Write};
use std::net::TcpListener;

use serde_json::json;

use crate::support::fake_cloud::{cloud_env, FakeCloud};
use crate::support::{events, finished, of_type, TestEnv};

const BEDROCK: &str = "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const CLAUDE_VERTEX: &str = "vertex/claude-sonnet-4-5@20250929";
const GEMINI_VERTEX: &str = "vertex/gemini-2.5-pro";
const AKID: &str = "AKIDTINYAGENTFAKE";
const SECRET: &str = "tinyagent/fake/secret+key";

const RETRY: &str = "retry: {attempts: 2, backoff: 1ms, max_backoff: 20ms, jitter: 0, stream_first_event_timeout: 2s, stream_idle_timeout: 2s}\n";

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A service account key file whose `token_uri` is the Vertex fake's.
fn service_account(env: &TestEnv, fake: &FakeCloud) -> std::path::PathBuf {
    let key = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fakes/fixtures/throwaway-service-account.pem"),
    )
    .unwrap();
    let file = json!({
        "type": "service_account",
        "project_id": "file-project",
        "private_key": key,
        "client_email": "agent@file-project.iam.gserviceaccount.com",
        "token_uri": format!("{}/token", fake.url()),
    });
    env.write("sa.json", &file.to_string())
}

fn vertex_cmd(env: &TestEnv, fake: &FakeCloud) -> assert_cmd::Command {
    let mut cmd = env.cmd();
    cmd.env("VERTEX_BASE_URL", fake.url())
        .env("GOOGLE_APPLICATION_CREDENTIALS", service_account(env, fake));
    cmd
}

fn token_requests(fake: &FakeCloud) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r["path"] == "/token")
        .count()
}

/// SPEC 22: tokens are fetched once per process however many requests
/// or checks are in flight, even for two members built apart.
#[test]
fn two_vertex_members_checked_together_fetch_one_token() {
    let env = cloud_env(RETRY, "");
    let ping = json!({"calls": [{"name": "ping", "args": {}}]});
    let fake = FakeCloud::scripted("vertex", &env, &json!([ping, ping]), &[]);
    let out = vertex_cmd(&env, &fake)
        .env("CLOUD_ML_REGION", "us-east5")
        .args([
            "--check",
            "-m",
            CLAUDE_VERTEX,
            "--fallback-model",
            GEMINI_VERTEX,
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(token_requests(&fake), 1, "{:#?}", fake.requests());
    let text = stdout(&out);
    assert!(
        text.contains(&format!("ok  {CLAUDE_VERTEX}  "))
            && text.contains(&format!("ok  {GEMINI_VERTEX}  ")),
        "{text}"
    );
}

/// SPEC 22: `--check` names the credential source of the Gemini API's
/// members too: the variable that holds the key, never the key.
#[test]
fn check_names_the_gemini_keys_variable() {
    let env = cloud_env(RETRY, "");
    let fake = FakeCloud::scripted(
        "gemini",
        &env,
        &json!([{"calls": [{"name": "ping", "args": {}}]}]),
        &["--key", "g-key-123"],
    );
    let out = env
        .cmd()
        .env("GEMINI_BASE_URL", format!("{}/v1beta", fake.url()))
        .env("GOOGLE_API_KEY", "g-key-123")
        .args(["--check", "-m", "gemini/gemini-2.5-flash"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let text = stdout(&out);
    assert!(
        text.contains("price: known  credentials: environment (GOOGLE_API_KEY)"),
        "{text}"
    );
    assert!(!text.contains("g-key-123"));
}

/// SPEC 22 "Validation": with neither a region nor credentials, both are
/// named in one message; a profile that is in neither file is named as
/// not found, whether `AWS_PROFILE` or a named provider names it.
#[test]
fn every_missing_bedrock_thing_is_named_at_once() {
    let env = cloud_env(RETRY, "");
    let out = env.cmd().args(["-m", BEDROCK, "go"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("no AWS region"), "{err}");
    assert!(err.contains("no AWS credentials found"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    let aws = env.home().join(".aws");
    std::fs::create_dir_all(&aws).unwrap();
    std::fs::write(
        aws.join("config"),
        "[default]\nregion = us-east-1\n\n[profile team]\nregion = eu-west-1\n",
    )
    .unwrap();
    std::fs::write(
        aws.join("credentials"),
        format!("[default]\naws_access_key_id = {AKID}\naws_secret_access_key = {SECRET}\n"),
    )
    .unwrap();
    let out = env
        .cmd()
        .env("AWS_PROFILE", "typo")
        .args(["-m", BEDROCK, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("profile 'typo' not found"), "{err}");
    assert!(
        err.contains(".aws/config") && err.contains(".aws/credentials"),
        "{err}"
    );
    assert!(!err.contains(SECRET));

    let config = env.write(
        "c.yaml",
        "providers:\n  eu:\n    api: bedrock\n    region: eu-west-1\n    profile: nope\n",
    );
    let out = env
        .cmd()
        .args(["-c", config.to_str().unwrap(), "-m", "eu/m", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("profile 'nope' not found"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("no AWS region"), "{}", stderr(&out));

    // A profile that exists (in the config file only) is no error.
    let fake = FakeCloud::scripted("bedrock", &env, &json!({"replies": [{"text": "hi"}]}), &[]);
    let out = env
        .cmd()
        .env("AWS_PROFILE", "team")
        .env("AWS_ACCESS_KEY_ID", AKID)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", fake.url())
        .args(["-m", BEDROCK, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// SPEC 4 and 22: a mistyped region is a warning naming the closest known
/// one, the request is still made, and a host that does not resolve says
/// so in the retry line, the error and `--check` (reason `network`).
/// `.invalid` names never resolve (RFC 6761) and no DNS is asked for them.
#[test]
fn a_mistyped_region_warns_and_its_host_is_said_not_to_resolve() {
    let env = cloud_env(RETRY, "");
    let host = "bedrock-runtime.us-east-7.invalid";
    let mut cmd = env.cmd();
    cmd.env("AWS_REGION", "us-east-7")
        .env("AWS_ACCESS_KEY_ID", AKID)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env(
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
            format!("https://{host}"),
        );
    let out = cmd.args(["-m", BEDROCK, "go"]).output().unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "warning: model {BEDROCK}: AWS region 'us-east-7' is not one tinyagent knows (did you mean 'us-east-1'?)"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("(network: could not resolve host {host}")),
        "the retry line says which: {err}"
    );
    assert!(!err.contains("connection failed"), "{err}");

    let out = env
        .cmd()
        .env("AWS_REGION", "us-east-7")
        .env("AWS_ACCESS_KEY_ID", AKID)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env(
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
            format!("https://{host}"),
        )
        .args(["-m", BEDROCK, "--json", "go"])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    let error = finished(&ev)["error"].as_str().unwrap().to_string();
    assert!(
        error.contains(&format!("could not resolve host {host}")),
        "{error}"
    );
    assert!(of_type(&ev, "warning")
        .iter()
        .any(|w| w["message"].as_str().unwrap().contains("'us-east-7'")));
    assert!(of_type(&ev, "provider.retry")
        .iter()
        .all(|r| r["reason"] == "network" && r.get("cause").is_none()));

    let out = env
        .cmd()
        .env("AWS_REGION", "us-east-7")
        .env("AWS_ACCESS_KEY_ID", AKID)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env(
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
            format!("https://{host}"),
        )
        .args(["--check", "-m", BEDROCK])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains(&format!(
            "FAIL  {BEDROCK}  network: could not resolve host {host}"
        )),
        "{}",
        stdout(&out)
    );
}

/// SPEC 22: a Vertex location this release does not know is a warning
/// naming the closest known one; the request is still made.
#[test]
fn an_unknown_vertex_location_warns_and_is_still_asked() {
    let env = cloud_env(RETRY, "");
    let fake = FakeCloud::scripted("vertex", &env, &json!([{"text": "fine"}]), &[]);
    let out = vertex_cmd(&env, &fake)
        .env("CLOUD_ML_REGION", "us-east-5")
        .args(["-m", CLAUDE_VERTEX, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "Vertex AI location 'us-east-5' is not one tinyagent knows (did you mean 'us-east5'?)"
        ),
        "{}",
        stderr(&out)
    );
    assert!(fake.requests().iter().any(|r| r["path"]
        .as_str()
        .unwrap()
        .contains("/locations/us-east-5/")));
}

/// An OpenAI run against `base` that fails on the network once: its
/// `run.finished` error.
fn network_error_against(base: &str) -> String {
    let env = TestEnv::new();
    env.user_config("health_db: off\nretry: {attempts: 1, backoff: 1ms, jitter: 0}\n");
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", base)
        .env("OPENAI_API_KEY", "sk-test-net")
        .args(["-m", "openai/gpt-5", "--json", "t"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let ev = events(&out.stdout);
    assert_eq!(of_type(&ev, "provider.retry").len(), 0, "one attempt only");
    finished(&ev)["error"].as_str().unwrap().to_string()
}

/// A loopback server that answers every connection with `answer` after
/// reading what came (a plain HTTP server's 400 to bytes it cannot read),
/// or with a TCP reset when `answer` is `None`.
fn raw_server(answer: Option<&'static [u8]>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            match answer {
                Some(bytes) => {
                    let _ = stream.write_all(bytes);
                }
                None => reset(&stream),
            }
        }
    });
    port
}

/// Closes `stream` with a RST (`SO_LINGER` of zero).
fn reset(stream: &std::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket and a `linger` of the size given.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::addr_of!(linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// SPEC 4: `network` says which: a refused connection, a TLS handshake
/// against a server that does not speak TLS, a reset before any reply.
#[test]
fn a_network_failure_says_which_it_was() {
    let free = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = network_error_against(&format!("http://127.0.0.1:{free}/v1"));
    assert!(
        error.contains("network error: connection refused at http://127.0.0.1:"),
        "{error}"
    );

    let plain = raw_server(Some(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    ));
    let error = network_error_against(&format!("https://127.0.0.1:{plain}/v1"));
    assert!(
        error.contains("network error: TLS handshake failed"),
        "{error}"
    );

    let resetting = raw_server(None);
    let error = network_error_against(&format!("http://127.0.0.1:{resetting}/v1"));
    assert!(error.contains("network error: connection reset"), "{error}");
}

/// SPEC 4: a 404's hint that the model name may be wrong is given to
/// Bedrock's 400 "The provided model identifier is invalid." too, with
/// the form of an id.
#[test]
fn bedrocks_invalid_model_identifier_gets_the_model_name_hint() {
    let env = cloud_env(RETRY, "");
    let fake = FakeCloud::scripted(
        "bedrock",
        &env,
        &json!({"replies": [{"http_error": {"status": 400, "type": "ValidationException", "message": "The provided model identifier is invalid."}}]}),
        &[],
    );
    let out = env
        .cmd()
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", AKID)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", fake.url())
        .args(["-m", "bedrock/claude-sonnet-4-5", "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let error = finished(&events(&out.stdout))["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        error.contains("The provided model identifier is invalid.")
            && error.contains("hint: the model name may be wrong")
            && error.contains("us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
        "{error}"
    );
}

/// A failed `credential_process` names the profile once and its failure
/// once: aws-config's wrapped error repeats its phrase, which is not.
#[test]
fn a_failed_credential_process_says_its_failure_once() {
    let env = cloud_env(RETRY, "");
    let failing = env.write("fail.sh", "#!/bin/sh\necho 'stderr-secret' >&2\nexit 1\n");
    std::fs::set_permissions(
        &failing,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let aws = env.home().join(".aws");
    std::fs::create_dir_all(&aws).unwrap();
    std::fs::write(
        aws.join("config"),
        format!(
            "[default]\nregion = us-east-1\ncredential_process = {}\n",
            failing.display()
        ),
    )
    .unwrap();
    let out = env.cmd().args(["-m", BEDROCK, "go"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    let phrase = "an error occurred while loading credentials";
    assert!(err.contains("profile 'default'"), "{err}");
    assert!(err.matches(phrase).count() <= 1, "said twice: {err}");
    assert!(!err.contains("stderr-secret"), "{err}");
}

/// SPEC 22: a token endpoint that refuses the credentials is an auth
/// error naming the file, with the vendor's short reason.
#[test]
fn a_token_endpoints_refusal_gives_its_reason() {
    let env = cloud_env(RETRY, "");
    let fake = FakeCloud::scripted(
        "vertex",
        &env,
        &json!([{"text": "x"}]),
        &["--token-mode", "refuse"],
    );
    let out = vertex_cmd(&env, &fake)
        .env("CLOUD_ML_REGION", "us-east5")
        .args(["-m", CLAUDE_VERTEX, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let error = finished(&events(&out.stdout))["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        error.contains("sa.json") && error.contains("invalid_grant: Invalid JWT Signature."),
        "{error}"
    );
    assert!(!error.contains("BEGIN PRIVATE KEY"));
}

/// SPEC 4 and 6: an account out of quota ends with exit 75, and the
/// summary says it was out of quota (not only down) and that resuming
/// waits for the account, not the provider; a real outage keeps SPEC 6's
/// words.
#[test]
fn an_account_out_of_quota_is_said_so_with_how_to_resume() {
    let env = TestEnv::new();
    env.user_config("health_db: off\n");
    let broke = env.script("broke.yaml", "- error: {kind: quota}\n");
    let traj = env.file("run.json");
    let out = env
        .cmd()
        .args([
            "-m",
            &broke,
            "-o",
            traj.to_str().unwrap(),
            "--no-save",
            "go",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            " · every model was out of quota or down ({broke}: quota)"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "to resume: tinyagent --resume {} (once the account has quota or credit again: that waits on the account, not the provider; or --fallback-model SPEC to go on with another model)",
            traj.display()
        )),
        "{err}"
    );
    assert!(!err.contains("--outage-wait"), "{err}");
}
