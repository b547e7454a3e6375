//! Reply caps per member (SPEC 4): a model that refuses its reply budget as
//! above its maximum gets the request again at once at the maximum it
//! named, without using up a retry, with one warning; the cap is that
//! model's alone, and a resumed run keeps it. A `fallback_models` entry may
//! set its own budget. The refusals are the vendors' own wordings.

use serde_json::{json, Value};

use crate::support::anthropic;
use crate::support::openai::{chat_sse_submit, chat_sse_text, chat_sse_tool_call};
use crate::support::stub::{Reply, Stub};
use crate::support::{events, finished, of_type, read_json, TestEnv};

/// OpenAI's refusal of a budget above a model's maximum, as its API sends it.
fn openai_refusal(asked: u32, cap: u32) -> Reply {
    Reply::json(
        400,
        &json!({"error": {
            "message": format!("max_tokens is too large: {asked}. This model supports at most {cap} completion tokens, whereas you provided {asked}."),
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": null
        }}),
    )
}

/// A config with the named OpenAI-compatible provider `gw` at `stub`.
fn gateway(stub: &Stub, extra: &str) -> String {
    format!(
        "health_db: off\nretry: {{backoff: 10ms, jitter: 0}}\n\
         providers:\n  gw:\n    api: openai\n    endpoint: {}/v1\n{extra}",
        stub.url()
    )
}

fn budgets(stub: &Stub) -> Vec<Value> {
    stub.requests()
        .iter()
        .map(|r| r.json()["max_tokens"].clone())
        .collect()
}

fn warnings(ev: &[Value]) -> Vec<String> {
    of_type(ev, "warning")
        .iter()
        .map(|w| w["message"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_refused_budget_is_lowered_to_the_named_cap_at_once_for_the_rest_of_the_run() {
    let stub = Stub::sequence(vec![
        openai_refusal(20000, 16384),
        chat_sse_tool_call("c1", "bash", r#"{"command":"true"}"#),
        chat_sse_submit("c2", "done"),
    ]);
    let env = TestEnv::new();
    env.user_config(&gateway(&stub, ""));
    let trajectory = env.file("run.json");
    let out = env
        .cmd()
        .args([
            "-m",
            "gw/big",
            "--max-output-tokens",
            "20000",
            "--json",
            "-o",
        ])
        .arg(&trajectory)
        .arg("go")
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{ev:?}");
    assert_eq!(finished(&ev)["status"], "submitted");
    assert_eq!(budgets(&stub), [json!(20000), json!(16384), json!(16384)]);
    assert!(of_type(&ev, "provider.retry").is_empty(), "no retry used");
    let warnings = warnings(&ev);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("gw/big") && warnings[0].contains("16384"),
        "{warnings:?}"
    );
    // Kept in the checkpoint: a resumed run starts at the cap.
    assert_eq!(
        read_json(&trajectory)["reply_caps"],
        json!({"gw/big": 16384})
    );
    let again = Stub::sequence(vec![chat_sse_text("more")]);
    env.user_config(&gateway(&again, ""));
    let out = env
        .cmd()
        .args(["--resume"])
        .arg(&trajectory)
        .args(["--max-output-tokens", "20000", "--json", "and more"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{:?}", events(&out.stdout));
    assert_eq!(
        budgets(&again),
        [json!(16384)],
        "never above a reported cap"
    );
}

#[test]
fn anthropic_s_wording_lowers_its_default_budget() {
    let stub = Stub::sequence(vec![
        anthropic::error_reply(
            400,
            "invalid_request_error",
            "max_tokens: 16000 > 8192, which is the maximum allowed number of output tokens for claude-3-7-sonnet-20250219",
        ),
        anthropic::text_reply("ok"),
    ]);
    let env = TestEnv::new();
    env.user_config("health_db: off\n");
    let out = env
        .cmd()
        .env("ANTHROPIC_BASE_URL", stub.url())
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .args(["-m", "anthropic/claude-3-7-sonnet-20250219", "--json", "go"])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{ev:?}");
    let sent: Vec<Value> = stub
        .requests()
        .iter()
        .map(|r| r.json()["max_tokens"].clone())
        .collect();
    assert_eq!(sent, [json!(16000), json!(8192)]);
}

#[test]
fn a_refusal_that_names_no_cap_or_repeats_itself_ends_the_run() {
    let vague = Reply::json(
        400,
        &json!({"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}}),
    );
    let stub = Stub::sequence(vec![vague]);
    let env = TestEnv::new();
    env.user_config(&gateway(&stub, ""));
    let out = env
        .cmd()
        .args([
            "-m",
            "gw/big",
            "--max-output-tokens",
            "20000",
            "--json",
            "go",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stub.count(), 1);

    // A server that refuses the very cap it named is not asked a third time.
    let stub = Stub::sequence(vec![openai_refusal(20000, 16384)]);
    env.user_config(&gateway(&stub, ""));
    let out = env
        .cmd()
        .args([
            "-m",
            "gw/big",
            "--max-output-tokens",
            "20000",
            "--json",
            "go",
        ])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{ev:?}");
    assert_eq!(stub.count(), 2);
    assert!(finished(&ev)["error"]
        .as_str()
        .unwrap()
        .contains("supports at most 16384"));
}

#[test]
fn a_chain_entry_sets_its_own_reply_budget_and_a_cap_stays_with_its_model() {
    // The primary is down; the fallback, of another provider, gets the
    // budget its entry sets (the run's would not carry over to it).
    let primary = Stub::sequence(vec![Reply::status(503)]);
    let fallback = Stub::sequence(vec![openai_refusal(4000, 3000), chat_sse_text("ok")]);
    let env = TestEnv::new();
    env.user_config(&format!(
        "health_db: off\nretry: {{attempts: 1, backoff: 10ms, jitter: 0}}\n\
         fallback_models: [{{model: small/m, max_output_tokens: 4000}}]\n\
         providers:\n  big:\n    api: openai\n    endpoint: {}/v1\n  small:\n    api: openai\n    endpoint: {}/v1\n",
        primary.url(),
        fallback.url()
    ));
    let out = env
        .cmd()
        .args([
            "-m",
            "big/m",
            "--max-output-tokens",
            "20000",
            "--json",
            "go",
        ])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{ev:?}");
    assert_eq!(budgets(&primary), [json!(20000)]);
    assert_eq!(budgets(&fallback), [json!(4000), json!(3000)]);
}

#[test]
fn a_chain_entry_mapping_is_strict() {
    let env = TestEnv::new();
    let config = env
        .user_config("fallback_models: [{model: script/x.yaml, max_tokns: 5}]\nhealth_db: off\n");
    let out = env
        .cmd()
        .args(["-m", "script/y.yaml", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("max_tokns"), "{stderr}");
    assert!(stderr.contains(&config.display().to_string()), "{stderr}");
}
