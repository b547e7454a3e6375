//! The fallback chain across wire APIs (SPEC section 5): foreign provider
//! state never crosses models, per-provider option carry-over, and pricing
//! each response with the model that produced it.

use serde_json::{json, Value};

use crate::support::anthropic as ant;
use crate::support::ollama::ollama_tool_call;
use crate::support::openai::{self as oai, chat_sse_submit};
use crate::support::responses::{self as resp, Stream};
use crate::support::stub::{Captured, Reply, Stub};
use crate::support::{events, finished, of_type, read_json, TestEnv};

const RETRY: &str =
    "health_db: off\nretry: {attempts: 2, backoff: 1ms, max_backoff: 5ms, jitter: 0}\n";

fn env() -> TestEnv {
    let env = TestEnv::new();
    env.user_config(RETRY);
    env
}

/// Whether any key or string value anywhere in `v` contains `needle`.
fn mentions(v: &Value, needle: &str) -> bool {
    v.to_string().contains(needle)
}

/// An Anthropic reply: a signed thinking block, then a bash tool call.
fn anthropic_thinking_then_tool() -> Reply {
    Reply::sse(ant::message(
        vec![
            ant::thinking_block(0, "Let me check the files first.", "sig-EqQBCkYIARgCKkA"),
            ant::tool_use_block(1, "toolu_01", "bash", &[r#"{"command": "echo hi"}"#]),
        ],
        "tool_use",
    ))
}

fn overloaded() -> Reply {
    ant::error_reply(529, "overloaded_error", "Overloaded")
}

fn last(stub: &Stub) -> Captured {
    stub.requests().pop().expect("a request")
}

#[test]
fn anthropic_to_chat_completions_drops_thinking_and_keeps_it_in_the_trajectory() {
    let env = env();
    let primary = Stub::start(|i, _| {
        if i == 0 {
            anthropic_thinking_then_tool()
        } else {
            overloaded()
        }
    });
    let fallback = Stub::sequence(vec![chat_sse_submit("call_9", "done")]);
    let out_path = env.file("t.json");
    let out = env
        .cmd()
        .env("ANTHROPIC_BASE_URL", primary.url())
        .env("ANTHROPIC_API_KEY", "k1")
        .env("OPENAI_BASE_URL", format!("{}/v1", fallback.url()))
        .env("OPENAI_API_KEY", "k2")
        .args([
            "-m",
            "anthropic/claude-sonnet-4-5",
            "--fallback-model",
            "openai/gpt-5",
        ])
        .args([
            "--reasoning-effort",
            "high",
            "--max-output-tokens",
            "3000",
            "--json",
        ])
        .args(["-o", out_path.to_str().unwrap(), "task"])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert_eq!(
        finished(&ev)["status"],
        "submitted",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(of_type(&ev, "model.fallback")[0]["reason"], "http_529");

    // The primary got the effort and budget; the foreign fallback did not.
    let first = primary.requests()[0].json();
    assert_eq!(first["max_tokens"], 3000);
    let request = last(&fallback).json();
    assert_eq!(last(&fallback).path, "/v1/chat/completions");
    assert!(!mentions(&request, "sig-EqQBCkYIARgCKkA"), "{request}");
    assert!(!mentions(&request, "thinking"), "{request}");
    assert!(request.get("reasoning_effort").is_none(), "{request}");
    assert!(request.get("max_completion_tokens").is_none() && request.get("max_tokens").is_none());
    // The conversation itself crossed over, in Chat Completions' own form.
    let messages = request["messages"].as_array().unwrap();
    let assistant = messages.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(assistant["tool_calls"][0]["id"], "toolu_01");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "bash");
    let tool = messages.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool["tool_call_id"], "toolu_01");
    assert_eq!(tool["content"], "hi\n");

    let t = read_json(&out_path);
    assert!(mentions(&t["messages"][1]["extra"], "sig-EqQBCkYIARgCKkA"));
    assert_eq!(t["messages"][1]["model"], "anthropic/claude-sonnet-4-5");
}

#[test]
fn responses_to_anthropic_drops_encrypted_reasoning() {
    let env = env();
    let step1 = Reply::sse(
        Stream::new()
            .reasoning("rs_1", "gAAAAB-ENCRYPTED-BLOB")
            .function_call("call_1", "bash", &[r#"{"command":"echo hi"}"#], true)
            .completed(100, 0, 20),
    );
    let primary = Stub::start(move |i, _| {
        if i == 0 {
            step1.clone()
        } else {
            resp::error_reply(503, "server_error", None, "The server is overloaded")
        }
    });
    let fallback = Stub::sequence(vec![ant::tool_reply(
        "toolu_9",
        "submit",
        json!({"output": "ok"}),
    )]);
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", primary.url()))
        .env("OPENAI_API_KEY", "k1")
        .env("ANTHROPIC_BASE_URL", fallback.url())
        .env("ANTHROPIC_API_KEY", "k2")
        .args([
            "-m",
            "responses/gpt-5",
            "--fallback-model",
            "anthropic/claude-sonnet-4-5",
            "--json",
            "task",
        ])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert_eq!(
        finished(&ev)["status"],
        "submitted",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let request = last(&fallback).json();
    assert!(!mentions(&request, "ENCRYPTED"), "{request}");
    assert!(!mentions(&request, "encrypted_content"), "{request}");
    assert!(!mentions(&request, "\"reasoning\""), "{request}");
    let messages = request["messages"].as_array().unwrap();
    let assistant = messages.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(
        assistant["content"].as_array().unwrap().last().unwrap()["type"],
        "tool_use"
    );
    let results = &messages.last().unwrap()["content"];
    assert_eq!(results[0]["type"], "tool_result");
    assert_eq!(results[0]["tool_use_id"], "call_1");
    // The primary replays its own reasoning to itself on later requests.
    let second = primary.requests()[1].json();
    assert!(mentions(&second, "gAAAAB-ENCRYPTED-BLOB"), "{second}");
}

#[test]
fn anthropic_to_ollama_drops_thinking() {
    let env = env();
    let primary = Stub::start(|i, _| {
        if i == 0 {
            anthropic_thinking_then_tool()
        } else {
            overloaded()
        }
    });
    let fallback = Stub::sequence(vec![ollama_tool_call("submit", json!({"output": "ok"}))]);
    let out = env
        .cmd()
        .env("ANTHROPIC_BASE_URL", primary.url())
        .env("ANTHROPIC_API_KEY", "k1")
        .env("OLLAMA_HOST", fallback.url())
        .args([
            "-m",
            "anthropic/claude-sonnet-4-5",
            "--fallback-model",
            "ollama/qwen3-coder",
            "--json",
            "task",
        ])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert_eq!(
        finished(&ev)["status"],
        "submitted",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let request = last(&fallback).json();
    assert_eq!(last(&fallback).path, "/api/chat");
    assert!(!mentions(&request, "sig-EqQBCkYIARgCKkA"), "{request}");
    assert!(
        !mentions(&request, "Let me check the files first."),
        "{request}"
    );
    let tool = request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap();
    assert_eq!(tool["content"], "hi\n");
}

/// One Chat Completions stub serving two models: `gpt-5` answers step 1
/// (`usage` 1000 in / 400 cached / 100 out) then fails; `gpt-5-mini` submits.
fn two_models() -> Stub {
    Stub::start(|_, req| {
        let body = req.json();
        let model = body["model"].as_str().unwrap_or_default().to_string();
        let answered = body["messages"]
            .as_array()
            .map(|m| m.iter().any(|m| m["role"] == "tool"))
            .unwrap_or(false);
        match (model.as_str(), answered) {
            ("gpt-5", false) => {
                let mut events = oai::tool_call_events("call_1", "bash", r#"{"command":"true"}"#);
                let n = events.len();
                events[n - 2] = oai::usage_chunk(1000, 100, 400);
                Reply::sse(events)
            }
            ("gpt-5", true) => Reply::status(503),
            _ => {
                let mut events = oai::tool_call_events("call_2", "submit", r#"{"output":"ok"}"#);
                let n = events.len();
                events[n - 2] = oai::usage_chunk(2000, 100, 0);
                Reply::sse(events)
            }
        }
    })
}

#[test]
fn same_provider_fallback_keeps_effort_and_budget_and_prices_each_response() {
    let env = env();
    let stub = two_models();
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", "k")
        .args([
            "-m",
            "openai/gpt-5",
            "--fallback-model",
            "openai/gpt-5-mini",
        ])
        .args([
            "--reasoning-effort",
            "low",
            "--max-output-tokens",
            "1234",
            "--json",
            "task",
        ])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert_eq!(
        finished(&ev)["status"],
        "submitted",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mini = stub
        .requests()
        .into_iter()
        .map(|r| r.json())
        .find(|r| r["model"] == "gpt-5-mini")
        .unwrap();
    assert_eq!(mini["reasoning_effort"], "low");
    assert!(mentions(&mini, "1234"), "{mini}");

    let costs: Vec<(String, f64)> = of_type(&ev, "model.response")
        .iter()
        .map(|e| {
            (
                e["model"].as_str().unwrap().to_string(),
                e["cost_usd"].as_f64().unwrap(),
            )
        })
        .collect();
    // gpt-5: 600 fresh * 1.25 + 400 cached * 0.125 + 100 out * 10, per million.
    let gpt5 = (600.0 * 1.25 + 400.0 * 0.125 + 100.0 * 10.0) / 1e6;
    // gpt-5-mini: 2000 * 0.25 + 100 * 2.0, per million.
    let mini_cost = (2000.0 * 0.25 + 100.0 * 2.0) / 1e6;
    assert_eq!(costs[0].0, "openai/gpt-5");
    assert!((costs[0].1 - gpt5).abs() < 1e-12, "{costs:?}");
    assert_eq!(costs[1].0, "openai/gpt-5-mini");
    assert!((costs[1].1 - mini_cost).abs() < 1e-12, "{costs:?}");
    assert!((finished(&ev)["cost_usd"].as_f64().unwrap() - (gpt5 + mini_cost)).abs() < 1e-12);
}

#[test]
fn dearer_fallback_is_warned_about_and_named_provider_prices_apply() {
    let env = env();
    let stub = Stub::sequence(vec![oai::chat_sse_submit("c1", "ok")]);
    let cfg = env.write(
        "gw.yaml",
        &format!(
            "providers:\n  gw:\n    api: openai\n    endpoint: {}/v1\n    models:\n      big: {{input_price: 100, output_price: 200}}\n",
            stub.url()
        ),
    );
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", "k")
        .args([
            "-c",
            cfg.to_str().unwrap(),
            "-m",
            "openai/gpt-5-mini",
            "--fallback-model",
            "gw/big",
            "--json",
            "task",
        ])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    let warnings = of_type(&ev, "warning");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0]["message"].as_str().unwrap().contains("gw/big"));

    // A named provider's model is priced from its config (cached input at
    // the input price when no cached price is given).
    let out = env
        .cmd()
        .args([
            "-c",
            cfg.to_str().unwrap(),
            "-m",
            "gw/big",
            "--json",
            "task",
        ])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    let response = of_type(&ev, "model.response")[0].clone();
    let (input, output) = (
        response["input_tokens"].as_f64().unwrap(),
        response["output_tokens"].as_f64().unwrap(),
    );
    let expected = (input * 100.0 + output * 200.0) / 1e6;
    assert!(expected > 0.0);
    assert!(
        (response["cost_usd"].as_f64().unwrap() - expected).abs() < 1e-12,
        "{response}"
    );
}
