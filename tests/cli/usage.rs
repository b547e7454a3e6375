//! Usage estimation (SPEC 4 "Usage"): a provider that reports no token
//! usage gets its tokens estimated, marked `usage_estimated` on
//! `model.response`, with one `warning` per model; costs and `--cost-limit`
//! use the estimate, and it is never silently 0.

use serde_json::Value;

use crate::support::openai::{chunk, text_events, tool_call_events};
use crate::support::stub::{Reply, Stub};
use crate::support::{events, finished, of_type, TestEnv};

/// A priced gateway model served by `stub`.
fn gateway(env: &TestEnv, stub: &Stub) -> std::path::PathBuf {
    env.write(
        "c.yaml",
        &format!(
            "providers:\n  local:\n    api: openai\n    endpoint: {}/v1\n    models:\n      tiny: {{input_price: 1000, output_price: 2000}}\nretry: {{attempts: 1}}\n",
            stub.url()
        ),
    )
}

/// The events without the usage chunk that `stream_options` asks for (as
/// llama-cpp-python sends them).
fn without_usage(events: Vec<String>) -> Reply {
    Reply::sse(
        events
            .into_iter()
            .filter(|e| !e.contains("\"usage\""))
            .collect(),
    )
}

fn run(env: &TestEnv, stub: &Stub, extra: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let config = gateway(env, stub);
    let out = env
        .cmd()
        .args(["-m", "local/tiny", "--json", "-c"])
        .arg(&config)
        .args(extra)
        .arg("list the files")
        .output()
        .unwrap();
    (
        out.status.code(),
        events(&out.stdout),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn a_stream_without_usage_is_estimated_marked_and_warned_about_once() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![
        without_usage(tool_call_events("c1", "bash", r#"{"command":"ls"}"#)),
        without_usage(text_events("There are no files here at all.")),
    ]);
    let (code, ev, stderr) = run(&env, &stub, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let responses = of_type(&ev, "model.response");
    assert_eq!(responses.len(), 2);
    let mut input = 0;
    let mut output = 0;
    let mut cost = 0.0;
    for r in &responses {
        assert_eq!(r["usage_estimated"], true, "{r}");
        let i = r["input_tokens"].as_u64().unwrap();
        let o = r["output_tokens"].as_u64().unwrap();
        assert!(
            i > 100,
            "the request holds the system prompt and tools: {r}"
        );
        assert!(o > 0, "{r}");
        let c = r["cost_usd"].as_f64().unwrap();
        let priced = (i as f64 * 1000.0 + o as f64 * 2000.0) / 1e6;
        assert!((c - priced).abs() < 1e-9, "priced with the estimate: {r}");
        input += i;
        output += o;
        cost += c;
    }
    // The second request holds the first reply and its result: larger.
    assert!(
        responses[1]["input_tokens"].as_u64() > responses[0]["input_tokens"].as_u64(),
        "{responses:?}"
    );
    let warnings = of_type(&ev, "warning");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let message = warnings[0]["message"].as_str().unwrap();
    assert!(message.contains("local/tiny"), "{message}");
    assert!(message.contains("estimated"), "{message}");
    let end = finished(&ev);
    assert_eq!(end["input_tokens"], input);
    assert_eq!(end["output_tokens"], output);
    assert!((end["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-9);
}

#[test]
fn the_cost_limit_fires_on_estimated_usage() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![without_usage(tool_call_events(
        "c1",
        "bash",
        r#"{"command":"touch ran.txt"}"#,
    ))]);
    // At $1000 per million input tokens, the first request's estimate alone
    // passes a cent.
    let (code, ev, stderr) = run(&env, &stub, &["--cost-limit", "0.01"]);
    assert_eq!(code, Some(3), "{stderr}");
    let end = finished(&ev);
    assert_eq!(end["status"], "cost_limit");
    assert!(end["cost_usd"].as_f64().unwrap() >= 0.01, "{end}");
    // The reply that crossed the limit has its tool call left unrun.
    assert!(of_type(&ev, "tool.started").is_empty());
    assert!(!env.work().join("ran.txt").exists());
}

#[test]
fn reported_usage_is_not_marked_and_costs_no_warning() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![Reply::sse(text_events("Nothing to do."))]);
    let (code, ev, _) = run(&env, &stub, &[]);
    assert_eq!(code, Some(0));
    let response = of_type(&ev, "model.response")[0];
    assert!(response.get("usage_estimated").is_none(), "{response}");
    assert_eq!(response["input_tokens"], 50);
    assert_eq!(response["output_tokens"], 10);
    assert!(of_type(&ev, "warning").is_empty());
}

#[test]
fn a_usage_of_zeros_is_no_usage() {
    let env = TestEnv::new();
    let zeros = chunk(serde_json::json!({}), None).replace(
        "\"choices\"",
        "\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0,\"total_tokens\":0},\"choices\"",
    );
    let mut reply = without_usage(text_events("Nothing to do."));
    let last = reply.chunks.len() - 1;
    reply
        .chunks
        .insert(last, (Default::default(), zeros.into_bytes()));
    let stub = Stub::sequence(vec![reply]);
    let (code, ev, _) = run(&env, &stub, &[]);
    assert_eq!(code, Some(0));
    let response = of_type(&ev, "model.response")[0];
    assert_eq!(response["usage_estimated"], true, "{response}");
    assert!(response["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(of_type(&ev, "warning").len(), 1);
}
