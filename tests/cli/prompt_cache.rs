//! Prompt caches on every door (SPEC 25), from the binary against the
//! loopback fakes that simulate each vendor's cache (`tests/fakes/`):
//! where each API's breakpoints go, a tool-heavy run reading more of its
//! prompt from the cache step after step, `prompt_cache: off` asking
//! nothing, and a `prompt_cache_key` that a resume keeps and another run
//! does not share.

use serde_json::{json, Value};

use crate::support::fake_cloud::{cloud_env, FakeCloud};
use crate::support::{events, of_type, TestEnv};

const RETRY: &str = "retry: {attempts: 2, backoff: 1ms, max_backoff: 20ms, jitter: 0, stream_first_event_timeout: 5s, stream_idle_timeout: 5s}\n";
const KEY: &str = "sk-fake-cache";

/// `steps` tool calls whose output grows the conversation, then an answer,
/// by turn (the fakes' `--script` form); `anthropic`/`openai` fakes take
/// `{"text", "calls"}` replies.
fn tool_run(steps: usize) -> Value {
    let mut replies: Vec<Value> = (0..steps)
        .map(|i| json!({"text": format!("Step {i}."), "calls": [{"name": "bash", "args": {"command": format!("seq {} {}", i * 1000, i * 1000 + 600)}}]}))
        .collect();
    replies.push(json!({"text": "All done."}));
    json!({"by_turn": true, "replies": replies})
}

fn run(env: &TestEnv, vars: &[(&str, &str)], args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let mut cmd = env.cmd();
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.args(args).output().unwrap();
    (
        out.status.code(),
        events(&out.stdout),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What each answer read from the fake's cache, in the vendor's field.
fn reads(fake: &FakeCloud, field: &str) -> Vec<u64> {
    fake.usages()
        .iter()
        .map(|u| u[field].as_u64().unwrap_or(0))
        .collect()
}

/// Every `cache_control` in a body, by JSON pointer.
fn breakpoints(at: String, v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "cache_control" {
                    out.push(at.clone());
                } else {
                    breakpoints(format!("{at}/{k}"), v, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                breakpoints(format!("{at}/{i}"), v, out);
            }
        }
        _ => {}
    }
}

#[test]
fn anthropic_breakpoints_end_tools_system_and_the_last_two_requests_and_reads_grow() {
    let env = cloud_env(RETRY, "");
    let fake = FakeCloud::scripted("anthropic", &env, &tool_run(5), &["--key", KEY]);
    let url = fake.url();
    let vars = [
        ("ANTHROPIC_BASE_URL", url.as_str()),
        ("ANTHROPIC_API_KEY", KEY),
    ];
    let (code, ev, stderr) = run(
        &env,
        &vars,
        &["-m", "anthropic/claude-sonnet-4-5", "--json", "go"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 6);
    for req in &reqs {
        let body = &req["body"];
        let mut at = Vec::new();
        breakpoints(String::new(), body, &mut at);
        let tools = body["tools"].as_array().unwrap().len();
        let messages = body["messages"].as_array().unwrap();
        let last = messages.len() - 1;
        let blocks = messages[last]["content"].as_array().unwrap().len();
        let mut expected = vec![
            "/system/0".to_string(),
            format!("/messages/{last}/content/{}", blocks - 1),
            format!("/tools/{}", tools - 1),
        ];
        // The previous request's end keeps its breakpoint.
        if last >= 2 && messages[last - 1]["role"] == "assistant" {
            let before = messages[last - 2]["content"].as_array().unwrap().len();
            expected.push(format!("/messages/{}/content/{}", last - 2, before - 1));
        }
        assert!(at.len() <= 4, "{body}");
        expected.sort();
        at.sort();
        assert_eq!(at, expected, "{body}");
    }
    // Step after step, more of the prompt is read from the cache.
    let reads = reads(&fake, "cache_read_input_tokens");
    assert_eq!(reads.len(), 6);
    assert_eq!(reads[0], 0);
    assert!(reads.windows(2).all(|w| w[1] > w[0]), "{reads:?}");
    // The whole prompt (as tinyagent counts it) is mostly read from the cache.
    let inputs: Vec<u64> = of_type(&ev, "model.response")
        .iter()
        .map(|r| r["input_tokens"].as_u64().unwrap())
        .collect();
    assert!(reads[5] * 10 > inputs[5] * 7, "{reads:?} of {inputs:?}");
}

#[test]
fn bedrock_gets_cache_points_and_reads_grow() {
    let env = cloud_env(RETRY, "");
    let replies: Vec<Value> = tool_run(4)["replies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| match r["calls"].as_array() {
            Some(calls) => json!({"text": r["text"], "tool_use": [{"name": "bash", "input": calls[0]["args"]}]}),
            None => json!({"text": r["text"]}),
        })
        .collect();
    let fake = FakeCloud::scripted(
        "bedrock",
        &env,
        &json!({"by_turn": true, "replies": replies}),
        &[],
    );
    let url = fake.url();
    let vars = [
        ("AWS_ACCESS_KEY_ID", "AKIDTINYAGENTFAKE"),
        ("AWS_SECRET_ACCESS_KEY", "tinyagent/fake/secret+key"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", url.as_str()),
    ];
    let model = "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0";
    let (code, _, stderr) = run(&env, &vars, &["-m", model, "--json", "go"]);
    assert_eq!(code, Some(0), "{stderr}");
    let point = json!({"cachePoint": {"type": "default"}});
    for req in fake.requests() {
        let body = &req["body"];
        assert_eq!(
            body["toolConfig"]["tools"].as_array().unwrap().last(),
            Some(&point)
        );
        assert_eq!(body["system"].as_array().unwrap().last(), Some(&point));
        let last = body["messages"].as_array().unwrap().last().unwrap();
        assert_eq!(last["content"].as_array().unwrap().last(), Some(&point));
    }
    let reads = reads(&fake, "cacheReadInputTokens");
    assert_eq!(reads.len(), 5);
    assert!(reads[1..].windows(2).all(|w| w[1] > w[0]), "{reads:?}");
    assert!(reads[1] > 0, "{reads:?}");
}

#[test]
fn bedrock_one_hour_where_the_model_takes_it() {
    let env = cloud_env(RETRY, "prompt_cache: 1h\n");
    let fake = FakeCloud::scripted("bedrock", &env, &json!({"replies": [{"text": "hi"}]}), &[]);
    let url = fake.url();
    let vars = [
        ("AWS_ACCESS_KEY_ID", "AKIDTINYAGENTFAKE"),
        ("AWS_SECRET_ACCESS_KEY", "tinyagent/fake/secret+key"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", url.as_str()),
    ];
    let model = "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0";
    let (code, _, stderr) = run(&env, &vars, &["-m", model, "--json", "go"]);
    assert_eq!(code, Some(0), "{stderr}");
    let body = &fake.requests()[0]["body"];
    let hour = json!({"cachePoint": {"type": "default", "ttl": "1h"}});
    assert_eq!(body["system"].as_array().unwrap().last(), Some(&hour));
    assert_eq!(
        body["toolConfig"]["tools"].as_array().unwrap().last(),
        Some(&hour)
    );
}

#[test]
fn prompt_cache_off_sends_no_marker_and_no_key() {
    let env = cloud_env(RETRY, "");
    let anthropic = FakeCloud::scripted("anthropic", &env, &tool_run(1), &["--key", KEY]);
    let openai = FakeCloud::scripted("openai", &env, &tool_run(1), &["--key", KEY]);
    let base = format!("{}/v1", openai.url());
    // Off for the run; a named provider's model turns it back on for itself.
    env.user_config(&format!(
        "health_db: off\n{RETRY}prompt_cache: off\nproviders:\n  gw:\n    api: openai\n    endpoint: {base}\n    api_key_env: GW_KEY\n    models:\n      m: {{prompt_cache: on}}\n"
    ));
    let url = anthropic.url();
    let vars = [
        ("ANTHROPIC_BASE_URL", url.as_str()),
        ("ANTHROPIC_API_KEY", KEY),
    ];
    let (code, _, stderr) = run(
        &env,
        &vars,
        &["-m", "anthropic/claude-sonnet-4-5", "--json", "go"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let reqs = anthropic.requests();
    assert_eq!(reqs.len(), 2);
    for req in reqs {
        assert!(
            !req["body"].to_string().contains("cache_control"),
            "{}",
            req["body"]
        );
        assert!(req["body"]["system"].is_string());
    }
    let written = reads(&anthropic, "cache_creation_input_tokens");
    assert!(written.iter().all(|&w| w == 0), "{written:?}");

    let vars = [
        ("OPENAI_BASE_URL", base.as_str()),
        ("OPENAI_API_KEY", KEY),
        ("GW_KEY", KEY),
    ];
    for model in ["openai/gpt-5", "responses/gpt-5"] {
        let (code, _, stderr) = run(&env, &vars, &["-m", model, "--json", "go"]);
        assert_eq!(code, Some(0), "{model}: {stderr}");
    }
    let reqs = openai.requests();
    assert_eq!(reqs.len(), 4);
    assert!(reqs
        .iter()
        .all(|r| r["body"].get("prompt_cache_key").is_none()));
    let (code, _, stderr) = run(&env, &vars, &["-m", "gw/m", "--json", "go"]);
    assert_eq!(code, Some(0), "{stderr}");
    let reqs = openai.requests();
    assert_eq!(reqs.len(), 6);
    assert!(reqs[4..]
        .iter()
        .all(|r| r["body"]["prompt_cache_key"].is_string()));
}

#[test]
fn the_key_is_kept_across_a_resume_and_differs_between_runs() {
    let env = cloud_env(RETRY, "");
    let fake = FakeCloud::scripted("openai", &env, &tool_run(2), &["--key", KEY]);
    let base = format!("{}/v1", fake.url());
    let vars = [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", KEY)];
    let traj = env.file("t.json");
    let path = traj.to_str().unwrap();
    let (code, _, _) = run(
        &env,
        &vars,
        &[
            "-m",
            "openai/gpt-5",
            "-o",
            path,
            "--step-limit",
            "1",
            "--json",
            "go",
        ],
    );
    assert_eq!(code, Some(3));
    let (code, _, stderr) = run(
        &env,
        &vars,
        &["--resume", path, "--step-limit", "10", "--json"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = run(&env, &vars, &["-m", "openai/gpt-5", "--json", "go"]);
    assert_eq!(code, Some(0), "{stderr}");
    let keys: Vec<String> = fake
        .requests()
        .iter()
        .map(|r| r["body"]["prompt_cache_key"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(keys.len(), 6, "{keys:?}");
    // The first run and its resume: one key; the next run: another.
    assert!(keys[..3].iter().all(|k| *k == keys[0]), "{keys:?}");
    assert!(keys[3..].iter().all(|k| *k == keys[3]), "{keys:?}");
    assert_ne!(keys[0], keys[3]);
    assert!(!keys[0].contains(KEY));
}

#[test]
fn a_bad_prompt_cache_value_is_a_setup_error_naming_key_and_file() {
    for (config, key) in [
        ("prompt_cache: sometimes\n", "prompt_cache"),
        ("fallback_models: [{model: openai/gpt-5, prompt_cache: 2h}]\n", "prompt_cache"),
        ("providers:\n  gw:\n    api: openai\n    endpoint: http://127.0.0.1:9/v1\n    models:\n      m: {prompt_cache: yes}\n", "prompt_cache"),
    ] {
        let env = TestEnv::new();
        let file = env.user_config(config);
        let out = env
            .cmd()
            .args(["-m", "script/x.yaml", "go"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{config}: {stderr}");
        assert!(stderr.contains(key), "{config}: {stderr}");
        assert!(stderr.contains(&file.display().to_string()), "{config}: {stderr}");
        assert!(stderr.contains("on, off or 1h"), "{config}: {stderr}");
    }
}

#[test]
fn a_step_of_many_parallel_calls_still_reads_the_previous_prefix() {
    // Twelve calls a reply: each step adds 25 blocks, more than the 20 the
    // API looks back over from a breakpoint; the previous request's end
    // keeps its own, so each step reads all the one before wrote.
    let calls: Vec<Value> = (0..12)
        .map(|i| json!({"name": "bash", "args": {"command": format!("seq {i} {}", i + 300)}}))
        .collect();
    let script = json!({"by_turn": true, "replies": [
        {"text": "Many.", "calls": calls},
        {"text": "More.", "calls": calls},
        {"text": "More.", "calls": calls},
        {"text": "All done."},
    ]});
    let env = cloud_env(RETRY, "");
    let fake = FakeCloud::scripted("anthropic", &env, &script, &["--key", KEY]);
    let url = fake.url();
    let vars = [
        ("ANTHROPIC_BASE_URL", url.as_str()),
        ("ANTHROPIC_API_KEY", KEY),
    ];
    let (code, _, stderr) = run(
        &env,
        &vars,
        &["-m", "anthropic/claude-sonnet-4-5", "--json", "go"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let usages = fake.usages();
    assert_eq!(usages.len(), 4);
    for pair in usages.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        let written_before = before["cache_read_input_tokens"].as_u64().unwrap()
            + before["cache_creation_input_tokens"].as_u64().unwrap();
        assert_eq!(
            after["cache_read_input_tokens"].as_u64().unwrap(),
            written_before,
            "{usages:?}"
        );
    }
}
