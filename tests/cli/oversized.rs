//! A tool call whose arguments are over their bound (4 MiB for one call,
//! 16 MiB for all the calls of a reply; SPEC 4 "Hostile or broken input")
//! is refused like garbled arguments: not run, the model told in that
//! call's result, no retry used, and the run goes on. The same on every wire
//! API, streamed or sent as one JSON body, and the dropped arguments are
//! neither sent back nor kept in the trajectory.

use serde_json::{json, Value};

use crate::support::stub::{Reply, Stub};
use crate::support::{anthropic, ollama, openai, responses};
use crate::support::{events, finished, of_type, read_json, TestEnv};

const KEY: &str = "sk-test-oversized-0123456789";
const MIB: usize = 1 << 20;

/// A `write_file` of `content_bytes` bytes to `path`, as arguments.
fn write_args(path: &str, content_bytes: usize) -> Value {
    json!({"path": path, "content": "x".repeat(content_bytes)})
}

/// The first reply calling `write_file` with `arguments` (call id
/// `call_big`) in `api`'s form, and the reply submitting after it.
fn replies(api: &str, arguments: &Value) -> (Reply, Reply) {
    let text = arguments.to_string();
    match api {
        "openai" => (
            openai::chat_sse_tool_call("call_big", "write_file", &text),
            openai::chat_sse_submit("call_done", "done"),
        ),
        "openai-body" => {
            let body = |id: &str, name: &str, args: String| {
                Reply::json(
                    200,
                    &json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-5",
                        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
                            "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": args}}]}}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}),
                )
            };
            (
                body("call_big", "write_file", text),
                body("call_done", "submit", json!({"output": "done"}).to_string()),
            )
        }
        "responses" => (
            responses::tool_reply("call_big", "write_file", arguments.clone()),
            responses::tool_reply("call_done", "submit", json!({"output": "done"})),
        ),
        "anthropic" => (
            anthropic::tool_reply("call_big", "write_file", arguments.clone()),
            anthropic::tool_reply("call_done", "submit", json!({"output": "done"})),
        ),
        "ollama" => (
            // Ollama sends no ids: the made-up one is checked by name below.
            ollama::ollama_tool_call("write_file", arguments.clone()),
            ollama::ollama_tool_call("submit", json!({"output": "done"})),
        ),
        other => panic!("unknown api {other}"),
    }
}

/// The model spec for `api`.
fn model(api: &str) -> &'static str {
    match api {
        "openai" | "openai-body" => "openai/gpt-5",
        "responses" => "responses/gpt-5",
        "anthropic" => "anthropic/claude-sonnet-4-5",
        _ => "ollama/qwen3",
    }
}

/// A `--json -o` run of `api` against `stub`: exit code, events and the
/// trajectory.
fn run(env: &TestEnv, stub: &Stub, api: &str) -> (Option<i32>, Vec<Value>, Value) {
    env.user_config(
        "health_db: off\nretry: {attempts: 3, backoff: 1ms, max_backoff: 5ms, jitter: 0}\n",
    );
    let traj = env.file("t.json");
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", stub.url())
        .env("ANTHROPIC_API_KEY", KEY)
        .env("OLLAMA_HOST", stub.url())
        .args(["-m", model(api), "--json", "-o"])
        .arg(&traj)
        .arg("write big.txt")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code(), events(&out.stdout), read_json(&traj))
}

/// The text of the tool result answering the first call, in the second
/// request `api` sent, and the arguments that request sent back for it.
fn told(api: &str, request: &Value) -> (String, Value) {
    match api {
        "openai" | "openai-body" => {
            let messages = request["messages"].as_array().unwrap();
            let result = messages.iter().find(|m| m["role"] == "tool").unwrap();
            assert_eq!(result["tool_call_id"], "call_big");
            let call =
                &messages.iter().find(|m| m["role"] == "assistant").unwrap()["tool_calls"][0];
            (
                result["content"].as_str().unwrap().to_string(),
                call["function"]["arguments"].clone(),
            )
        }
        "responses" => {
            let input = request["input"].as_array().unwrap();
            let result = input
                .iter()
                .find(|i| i["type"] == "function_call_output")
                .unwrap();
            assert_eq!(result["call_id"], "call_big");
            let call = input.iter().find(|i| i["type"] == "function_call").unwrap();
            (
                result["output"].as_str().unwrap().to_string(),
                call["arguments"].clone(),
            )
        }
        "anthropic" => {
            let messages = request["messages"].as_array().unwrap();
            let blocks: Vec<&Value> = messages
                .iter()
                .filter_map(|m| m["content"].as_array())
                .flatten()
                .collect();
            let result = blocks.iter().find(|b| b["type"] == "tool_result").unwrap();
            assert_eq!(result["tool_use_id"], "call_big");
            let call = blocks.iter().find(|b| b["type"] == "tool_use").unwrap();
            let content = match &result["content"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (content, call["input"].clone())
        }
        _ => {
            let messages = request["messages"].as_array().unwrap();
            let result = messages.iter().find(|m| m["role"] == "tool").unwrap();
            assert_eq!(result["tool_name"], "write_file");
            let call =
                &messages.iter().find(|m| m["role"] == "assistant").unwrap()["tool_calls"][0];
            (
                result["content"].as_str().unwrap().to_string(),
                call["function"]["arguments"].clone(),
            )
        }
    }
}

#[test]
fn a_call_over_the_bound_is_not_run_the_model_is_told_and_no_retry_is_used() {
    // 5 MiB of content: over the 4 MiB a call's arguments may hold.
    let arguments = write_args("big.txt", 5 * MIB);
    let size = arguments.to_string().len();
    for api in ["openai", "openai-body", "responses", "anthropic", "ollama"] {
        let env = TestEnv::new();
        let (big, submit) = replies(api, &arguments);
        let stub = Stub::sequence(vec![big, submit]);
        let (code, ev, traj) = run(&env, &stub, api);

        // Not run; the run goes on and ends with the next reply's answer.
        assert_eq!(code, Some(0), "{api}: {ev:?}");
        assert!(!env.work().join("big.txt").exists(), "{api}: the call ran");
        assert_eq!(finished(&ev)["status"], "submitted", "{api}");
        // No retry used: two requests, no provider.retry.
        assert!(of_type(&ev, "provider.retry").is_empty(), "{api}");
        assert_eq!(stub.count(), 2, "{api}");

        // The model is told, in that call's result, why and how big.
        let refused = of_type(&ev, "tool.finished")[0];
        assert_eq!(refused["tool"], "write_file", "{api}");
        assert_eq!(refused["ok"], false, "{api}");
        let (content, sent_back) = told(api, &stub.requests()[1].json());
        assert!(content.contains("not run"), "{api}: {content}");
        assert!(
            content.contains(&format!("{size} bytes")),
            "{api}: {content}"
        );
        assert!(content.contains("4 MiB"), "{api}: {content}");
        // Dropped arguments are neither sent back nor kept.
        assert!(
            sent_back == json!({}) || sent_back == json!("{}"),
            "{api}: {sent_back}"
        );
        assert!(stub.requests()[1].body.len() < 64 << 10, "{api}");
        let call = &traj["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "assistant")
            .unwrap()["tool_calls"][0];
        assert_eq!(call["oversized"], size as u64, "{api}: {call}");
        assert_eq!(call["arguments"], json!({}), "{api}");
        assert!(traj.to_string().len() < 64 << 10, "{api}");
    }
}

#[test]
fn a_call_within_the_bound_runs() {
    let env = TestEnv::new();
    let arguments = write_args("big.txt", 3 * MIB);
    let (big, submit) = replies("openai", &arguments);
    let stub = Stub::sequence(vec![big, submit]);
    let (code, ev, _) = run(&env, &stub, "openai");
    assert_eq!(code, Some(0), "{ev:?}");
    let written = std::fs::metadata(env.work().join("big.txt")).unwrap();
    assert_eq!(written.len(), 3 * MIB as u64);
    assert_eq!(of_type(&ev, "tool.finished")[0]["ok"], true);
}

#[test]
fn the_calls_of_one_reply_share_a_bound() {
    // Five calls of 3.5 MiB: four fit in the reply's 16 MiB, the fifth
    // does not and is refused; the four run.
    let env = TestEnv::new();
    let mut events = vec![];
    for i in 0..5 {
        let args = write_args(&format!("part{i}.txt"), 7 * MIB / 2).to_string();
        events.push(openai::chunk(
            json!({"tool_calls": [{"index": i, "id": format!("call_{i}"), "type": "function",
                "function": {"name": "write_file", "arguments": args}}]}),
            None,
        ));
    }
    events.push(openai::chunk(json!({}), Some("tool_calls")));
    events.push(openai::done());
    let stub = Stub::sequence(vec![
        Reply::sse(events),
        openai::chat_sse_submit("call_done", "done"),
    ]);
    let (code, ev, _) = run(&env, &stub, "openai");
    assert_eq!(code, Some(0), "{ev:?}");
    let ok: Vec<bool> = of_type(&ev, "tool.finished")
        .iter()
        .take(5)
        .map(|e| e["ok"].as_bool().unwrap())
        .collect();
    assert_eq!(ok, [true, true, true, true, false]);
    assert!(env.work().join("part3.txt").exists());
    assert!(!env.work().join("part4.txt").exists());
    assert_eq!(stub.count(), 2);
}
