//! The Bedrock provider end to end (SPEC 22), over the loopback fake
//! `tests/fakes/bedrock.py`, which checks each request's SigV4 signature
//! itself and answers ConverseStream in AWS event-stream frames: a whole
//! tool run signed with keys from the environment, from a profile file (a
//! named provider with its own region and profile), a Bedrock API key as a
//! bearer token; missing credentials as a setup error; exceptions and
//! hostile frames as classified failures; secrets nowhere.

use serde_json::{json, Value};

use crate::support::fake_cloud::{cloud_env, FakeCloud};
use crate::support::{assert_secret_absent, events, finished, of_type, retry_reasons, TestEnv};

const MODEL: &str = "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const MODEL_ID: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
/// The fake's default key pair.
const AKID: &str = "AKIDTINYAGENTFAKE";
const SECRET: &str = "tinyagent/fake/secret+key";

const RETRY: &str = "retry: {attempts: 3, backoff: 1ms, max_backoff: 20ms, jitter: 0, stream_first_event_timeout: 2s, stream_idle_timeout: 2s}\n";

fn env_with(config: &str) -> TestEnv {
    cloud_env(RETRY, config)
}

/// The fake answering `replies` in turn.
fn start_fake(env: &TestEnv, replies: Value, extra: &[&str]) -> FakeCloud {
    FakeCloud::scripted("bedrock", env, &json!({ "replies": replies }), extra)
}

/// A signed `--json` run of the task "go".
fn signed_go(env: &TestEnv, fake: &FakeCloud) -> std::process::Output {
    signed_cmd(env, fake)
        .args(["-m", MODEL, "--json", "go"])
        .output()
        .unwrap()
}

/// The binary with keys in the environment, pointed at the fake.
fn signed_cmd(env: &TestEnv, fake: &FakeCloud) -> assert_cmd::Command {
    let mut cmd = env.cmd();
    cmd.env("AWS_ACCESS_KEY_ID", AKID)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", fake.url());
    cmd
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn write_then_answer() -> Value {
    json!([
        {"text": "Writing it.", "tool_use": [{"name": "write_file", "id": "tooluse_A1", "input": {"path": "note.txt", "content": "hi\n"}}]},
        {"text": "The note is written."},
    ])
}

#[test]
fn a_tool_run_signed_with_keys_from_the_environment() {
    let env = env_with("");
    let fake = start_fake(&env, write_then_answer(), &[]);
    let traj = env.file("traj.json");
    let db = env.file("log.db");
    let out = signed_cmd(&env, &fake)
        .args(["-m", MODEL, "--json", "-o"])
        .arg(&traj)
        .arg("--log-db")
        .arg(&db)
        .arg("write a note")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(env.work().join("note.txt")).unwrap(),
        "hi\n"
    );
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["output"], "The note is written.");
    let responses = of_type(&ev, "model.response");
    assert_eq!(responses[0]["finish_reason"], "tool_calls");
    // The fake counts the prompt (a quarter of its bytes): below any cache minimum.
    assert!(responses[0]["input_tokens"].as_u64().unwrap() > 0);
    assert!(
        responses[0]["cost_usd"].as_f64().unwrap() > 0.0,
        "priced as claude-sonnet-4-5"
    );

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        assert_eq!(r["auth"], "sigv4");
        assert_eq!(r["signature_ok"], true, "{r}");
        assert_eq!(r["model"], MODEL_ID);
        let auth = r["headers"]["authorization"].as_str().unwrap();
        assert!(auth.contains("/us-east-1/bedrock/aws4_request"), "{auth}");
    }
    let first = &reqs[0]["body"];
    assert!(first["system"][0]["text"].as_str().unwrap().len() > 10);
    let tools = first["toolConfig"]["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["toolSpec"]["name"] == "write_file"
        && t["toolSpec"]["inputSchema"]["json"]["type"] == "object"));
    assert_eq!(first["inferenceConfig"]["maxTokens"], 16000);
    let second = reqs[1]["body"]["messages"].as_array().unwrap();
    assert_eq!(second.len(), 3);
    assert_eq!(second[1]["role"], "assistant");
    assert_eq!(
        second[1]["content"][1]["toolUse"]["toolUseId"],
        "tooluse_A1"
    );
    assert_eq!(
        second[2]["content"][0]["toolResult"]["toolUseId"],
        "tooluse_A1"
    );
    assert_secret_absent(SECRET, &out, &[&traj, &db]);
    let auth = reqs[0]["headers"]["authorization"].as_str().unwrap();
    let signature = auth.rsplit("Signature=").next().unwrap();
    assert_secret_absent(signature, &out, &[&traj, &db]);
}

#[test]
fn a_named_provider_signs_with_its_own_profile_and_region() {
    let env = env_with("");
    let fake = start_fake(&env, json!([{"text": "hello from the profile"}]), &[]);
    std::fs::create_dir_all(env.home().join(".aws")).unwrap();
    std::fs::write(
        env.home().join(".aws/credentials"),
        format!("[work]\naws_access_key_id = {AKID}\naws_secret_access_key = {SECRET}\n"),
    )
    .unwrap();
    std::fs::write(
        env.home().join(".aws/config"),
        "[profile work]\nregion = eu-west-1\n",
    )
    .unwrap();
    let config = format!(
        "health_db: off\n{RETRY}providers:\n  west:\n    api: bedrock\n    region: us-west-2\n    profile: work\n    endpoint: {}\n",
        fake.url()
    );
    env.user_config(&config);
    let out = env
        .cmd()
        .args(["-m", &format!("west/{MODEL_ID}"), "--json", "say hello"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0]["signature_ok"], true);
    let auth = reqs[0]["headers"]["authorization"].as_str().unwrap();
    assert!(
        auth.contains("/us-west-2/bedrock/aws4_request"),
        "the provider's region wins: {auth}"
    );

    // Without the provider's region, the profile's own is used.
    let out = env
        .cmd()
        .env("AWS_PROFILE", "work")
        .env("AWS_ENDPOINT_URL", fake.url())
        .args(["-m", MODEL, "--json", "say hello"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let auth = fake.requests()[1]["headers"]["authorization"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(auth.contains("/eu-west-1/bedrock/"), "{auth}");
}

#[test]
fn a_bedrock_api_key_is_sent_as_a_bearer_token() {
    let env = env_with("");
    let token = "ABSKQmVkcm9ja0FQSUtleS10ZXN0";
    let fake = start_fake(&env, write_then_answer(), &["--bearer", token]);
    let traj = env.file("traj.json");
    let out = env
        .cmd()
        .env("AWS_BEARER_TOKEN_BEDROCK", token)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", fake.url())
        .args(["-m", MODEL, "--json", "-o"])
        .arg(&traj)
        .arg("write a note")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs
        .iter()
        .all(|r| r["auth"] == "bearer" && r["signature_ok"] == true));
    assert_secret_absent(token, &out, &[&traj]);
}

#[test]
fn missing_credentials_are_a_setup_error_naming_every_place_looked_in() {
    let env = env_with("");
    let fake = start_fake(&env, json!([]), &[]);
    let out = env
        .cmd()
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", fake.url())
        .args([
            "-m",
            "anthropic/claude-sonnet-4-5",
            "--fallback-model",
            MODEL,
            "go",
        ])
        .env("ANTHROPIC_API_KEY", "k")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(&format!("fallback model '{MODEL}'")), "{err}");
    for place in [
        "AWS_BEARER_TOKEN_BEDROCK",
        "AWS_ACCESS_KEY_ID",
        "profile 'default'",
        "web identity",
        "container credentials",
        "EC2 instance metadata (disabled",
    ] {
        assert!(err.contains(place), "{place} in {err}");
    }
    assert!(fake.requests().is_empty());

    // No region anywhere: said so, naming where it was looked for.
    let out = env
        .cmd()
        .env("AWS_ACCESS_KEY_ID", AKID)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .args(["-m", MODEL, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("no AWS region") && err.contains("AWS_REGION"),
        "{err}"
    );
    assert!(!err.contains(SECRET));
}

#[test]
fn throttling_inside_the_stream_is_retried_and_http_errors_take_their_classes() {
    let env = env_with("");
    let fake = start_fake(
        &env,
        json!([
            {"exception": {"type": "throttlingException", "message": "Too many tokens, please wait before trying again."}},
            {"http_error": {"status": 503, "type": "ServiceUnavailableException", "message": "try later"}},
            {"text": "fine now"},
        ]),
        &[],
    );
    let out = signed_go(&env, &fake);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    assert_eq!(retry_reasons(&ev), ["http_429", "http_503"]);
    assert_eq!(finished(&ev)["output"], "fine now");

    let fake = start_fake(
        &env,
        json!([{"http_error": {"status": 400, "type": "ValidationException", "message": "The model returned the following errors: malformed"}}]),
        &[],
    );
    let out = signed_go(&env, &fake);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(fake.requests().len(), 1, "not retried");
    let ev = events(&out.stdout);
    let error = finished(&ev)["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        error.contains("HTTP 400") && error.contains("malformed"),
        "{error}"
    );

    let fake = start_fake(
        &env,
        json!([{"http_error": {"status": 400, "type": "ServiceQuotaExceededException", "message": "quota"}}]),
        &[],
    );
    let out = signed_go(&env, &fake);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert_eq!(fake.requests().len(), 1, "quota is not retried");
}

#[test]
fn a_wrong_secret_is_an_auth_error_that_names_no_secret() {
    let env = env_with("");
    let fake = start_fake(&env, json!([]), &[]);
    let wrong = "not-the-secret-at-all";
    let out = signed_cmd(&env, &fake)
        .env("AWS_SECRET_ACCESS_KEY", wrong)
        .args(["-m", MODEL, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("signature"), "{}", stderr(&out));
    assert_eq!(fake.requests().len(), 1);
    assert_secret_absent(wrong, &out, &[]);
}

#[test]
fn hostile_frames_are_classified_failures_then_retried() {
    let env = env_with("");
    let fake = start_fake(
        &env,
        json!([
            {"hostile": "bad_crc"},
            {"hostile": "huge_length"},
            {"text": "survived"},
        ]),
        &[],
    );
    let out = signed_go(&env, &fake);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    assert_eq!(
        retry_reasons(&ev),
        ["stream_incomplete", "stream_incomplete"]
    );

    let fake = start_fake(
        &env,
        json!([
            {"hostile": "lying_length"},
            {"hostile": "unknown_header_type"},
            {"hostile": "no_stop"},
            {"text": "survived"},
        ]),
        &[],
    );
    let out = signed_cmd(&env, &fake)
        .args(["-m", MODEL, "--json", "go"])
        .env("TINYAGENT_CONFIG", env.write("r.yaml", "health_db: off\nretry: {attempts: 4, backoff: 1ms, max_backoff: 20ms, jitter: 0}\n"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    assert_eq!(
        retry_reasons(&ev),
        [
            "stream_incomplete",
            "stream_incomplete",
            "stream_incomplete"
        ]
    );
}

#[test]
fn bytes_that_never_complete_a_frame_do_not_keep_the_stream_alive() {
    let env = TestEnv::new();
    env.user_config("health_db: off\nretry: {attempts: 2, backoff: 1ms, max_backoff: 20ms, jitter: 0, stream_first_event_timeout: 1s, stream_idle_timeout: 1s}\n");
    let fake = start_fake(&env, json!([{"hostile": "trickle"}, {"text": "ok"}]), &[]);
    let started = std::time::Instant::now();
    let out = signed_go(&env, &fake);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(retry_reasons(&events(&out.stdout)), ["timeout"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
}

#[test]
fn check_asks_once_and_names_the_credential_source() {
    let env = env_with("");
    let fake = start_fake(
        &env,
        json!([{"tool_use": [{"name": "ping", "input": {}}]}]),
        &[],
    );
    let out = signed_cmd(&env, &fake)
        .args(["--check", "-m", MODEL])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with(&format!("ok  {MODEL}  ")), "{stdout}");
    assert!(
        stdout.contains("price: known  credentials: environment (AWS_ACCESS_KEY_ID"),
        "{stdout}"
    );
    assert_eq!(fake.requests().len(), 1);
    assert_secret_absent(SECRET, &out, &[]);
}

#[test]
fn expired_credentials_are_fetched_again_and_the_request_resent_at_once() {
    let env = env_with("");
    let fake = start_fake(
        &env,
        json!([
            {"http_error": {"status": 403, "type": "ExpiredTokenException", "message": "The security token included in the request is expired"}},
            {"text": "fresh"},
        ]),
        &[],
    );
    let out = signed_go(&env, &fake);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&out.stdout);
    assert!(retry_reasons(&ev).is_empty(), "no retry used up");
    assert_eq!(finished(&ev)["output"], "fresh");
    assert_eq!(fake.requests().len(), 2);
}

#[test]
fn a_credential_process_signs_and_one_that_fails_is_a_setup_error() {
    let env = env_with("");
    let fake = start_fake(&env, json!([{"text": "from the process"}]), &[]);
    let aws = env.home().join(".aws");
    std::fs::create_dir_all(&aws).unwrap();
    let expires = "2999-01-01T00:00:00Z";
    let process = env.write(
        "creds.sh",
        &format!("#!/bin/sh\necho '{{\"Version\": 1, \"AccessKeyId\": \"{AKID}\", \"SecretAccessKey\": \"{SECRET}\", \"SessionToken\": \"tok-from-process\", \"Expiration\": \"{expires}\"}}'\n"),
    );
    std::fs::set_permissions(
        &process,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(
        aws.join("config"),
        format!(
            "[default]\nregion = us-east-1\ncredential_process = {}\n",
            process.display()
        ),
    )
    .unwrap();
    let fake_tok = start_fake(
        &env,
        json!([{"text": "from the process"}]),
        &[
            "--credentials",
            &format!("{AKID}:{SECRET}:tok-from-process"),
        ],
    );
    drop(fake);
    let out = env
        .cmd()
        .env("AWS_ENDPOINT_URL", fake_tok.url())
        .args(["-m", MODEL, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = fake_tok.requests();
    assert_eq!(reqs[0]["signature_ok"], true);
    assert_secret_absent("tok-from-process", &out, &[]);

    let failing = env.write(
        "fail.sh",
        "#!/bin/sh\necho 'the-secret-on-stderr' >&2\nexit 1\n",
    );
    std::fs::set_permissions(
        &failing,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(
        aws.join("config"),
        format!(
            "[default]\nregion = us-east-1\ncredential_process = {}\n",
            failing.display()
        ),
    )
    .unwrap();
    let out = env
        .cmd()
        .env("AWS_ENDPOINT_URL", fake_tok.url())
        .args(["-m", MODEL, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("model '{MODEL}'")) && err.contains("profile 'default'"),
        "{err}"
    );
    assert!(err.contains(".aws/config"), "names the file: {err}");
    assert_secret_absent("the-secret-on-stderr", &out, &[]);
    assert_eq!(fake_tok.requests().len(), 1, "nothing sent");
}
