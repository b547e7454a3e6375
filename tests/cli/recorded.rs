//! Replies recorded from real servers (`scripts/compat/run.sh --record`:
//! llama-cpp-python 0.3 serving SmolLM2-135M, LiteLLM proxy 1.90.0 in front
//! of it), replayed byte for byte through the loopback stub.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::support::stub::{End, Reply, Stub};
use crate::support::{events, finished, of_type, TestEnv};

/// A recorded body with its recorded status, served as the server sent it.
fn recorded(name: &str) -> Reply {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/recorded");
    let base = dir.join(name);
    let status: u16 = std::fs::read_to_string(base.with_extension("status"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let (ext, ctype) = if base.with_extension("sse").exists() {
        ("sse", "text/event-stream")
    } else {
        ("json", "application/json")
    };
    let body = std::fs::read(base.with_extension(ext)).unwrap();
    Reply {
        status,
        headers: vec![("content-type".into(), ctype.into())],
        delay: Duration::ZERO,
        chunks: vec![(Duration::ZERO, body)],
        end: End::Complete,
    }
}

fn config(env: &TestEnv, stub: &Stub, api: &str, path: &str) -> PathBuf {
    env.write(
        "c.yaml",
        &format!(
            "providers:\n  local:\n    api: {api}\n    endpoint: {}{path}\nretry: {{attempts: 1}}\n",
            stub.url()
        ),
    )
}

fn run(env: &TestEnv, config: &PathBuf) -> (Option<i32>, Vec<Value>) {
    let out = env
        .cmd()
        .args(["-m", "local/smollm2", "--json", "-c"])
        .arg(config)
        .arg("Use the bash tool to run the command: echo compat-ok")
        .output()
        .unwrap();
    (out.status.code(), events(&out.stdout))
}

#[test]
fn a_llama_cpp_python_tool_call_stream_is_one_call_with_estimated_usage() {
    let env = TestEnv::new();
    // The name is repeated whole in each of its ten deltas; no usage chunk.
    let stub = Stub::sequence(vec![
        recorded("llama-cpp-python/chat-stream-tool"),
        crate::support::openai::chat_sse_submit("call_2", "compat-ok"),
    ]);
    let cfg = config(&env, &stub, "openai", "/v1");
    let (code, ev) = run(&env, &cfg);
    assert_eq!(code, Some(0), "{ev:?}");
    let started = of_type(&ev, "tool.started");
    assert_eq!(started[0]["tool"], "bash");
    assert_eq!(started[0]["arguments"]["command"], "echo compat-ok");
    let done = of_type(&ev, "tool.finished");
    assert_eq!(done[0]["ok"], true);
    assert_eq!(done[0]["output"], "compat-ok\n");
    let first = of_type(&ev, "model.response")[0];
    assert_eq!(first["usage_estimated"], true, "{first}");
    assert!(first["input_tokens"].as_u64().unwrap() > 0);
    assert!(first["output_tokens"].as_u64().unwrap() > 0);
    assert_eq!(finished(&ev)["status"], "submitted");
    // The second request carries the call back in a form llama-cpp-python
    // accepts: content "" (not null), the name once.
    let second = stub.requests()[1].json();
    let assistant = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap()
        .clone();
    assert_eq!(assistant["content"], "");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "bash");
}

#[test]
fn an_unstreamed_llama_cpp_python_provider_runs_tools_with_counted_usage() {
    // `stream: false, tool_choice: auto`: the only way that server calls a
    // tool the model chose. Two recorded tool calls, then a scripted answer.
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![
        recorded("llama-cpp-python/chat-json-auto-tool"),
        recorded("llama-cpp-python/chat-json-auto-after-tool"),
        crate::support::openai::chat_sse_submit("call_3", "compat-ok"),
    ]);
    let cfg = env.write(
        "c.yaml",
        &format!(
            "providers:\n  local:\n    api: openai\n    endpoint: {}/v1\n    stream: false\n    tool_choice: auto\nretry: {{attempts: 1}}\n",
            stub.url()
        ),
    );
    let (code, ev) = run(&env, &cfg);
    assert_eq!(code, Some(0), "{ev:?}");
    let started = of_type(&ev, "tool.started");
    assert_eq!(started[0]["arguments"]["command"], "echo compat-ok");
    assert_eq!(of_type(&ev, "tool.finished")[0]["output"], "compat-ok\n");
    let first = of_type(&ev, "model.response")[0];
    assert_eq!(first["input_tokens"], 250, "{first}");
    assert_eq!(first["output_tokens"], 9, "{first}");
    assert!(first.get("usage_estimated").is_none_or(|v| v == false));
    let requests = stub.requests();
    for req in &requests[..2] {
        assert_eq!(req.json()["stream"], false);
        assert_eq!(req.json()["tool_choice"], "auto");
    }
}

#[test]
fn a_llama_cpp_python_overflow_ends_naming_the_sizes_it_reported() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![recorded("llama-cpp-python/chat-json-overflow")]);
    let cfg = config(&env, &stub, "openai", "/v1");
    let (code, ev) = run(&env, &cfg);
    assert_eq!(code, Some(1));
    assert!(of_type(&ev, "context.compacted").is_empty());
    let error = finished(&ev)["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("about 6077 tokens") && error.contains("window of 4096 tokens"),
        "{error}"
    );
}

#[test]
fn a_litellm_messages_tool_call_stream_runs_the_tool() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![
        recorded("litellm/messages-stream-tool"),
        crate::support::anthropic::tool_reply(
            "toolu_2",
            "submit",
            serde_json::json!({"output": "compat-ok"}),
        ),
    ]);
    let cfg = config(&env, &stub, "anthropic", "");
    let (code, ev) = run(&env, &cfg);
    assert_eq!(code, Some(0), "{ev:?}");
    let started = of_type(&ev, "tool.started");
    assert_eq!(started[0]["tool"], "bash");
    assert_eq!(of_type(&ev, "tool.finished")[0]["output"], "compat-ok\n");
    // LiteLLM reports zeros here: estimated, never 0.
    for r in of_type(&ev, "model.response") {
        assert!(r["input_tokens"].as_u64().unwrap() > 0, "{r}");
    }
}

#[test]
fn litellm_chat_and_responses_json_replies_are_accepted() {
    for (name, api) in [
        ("litellm/chat-json-tool", "openai"),
        ("litellm/responses-json-tool", "responses"),
    ] {
        let env = TestEnv::new();
        let stub = Stub::sequence(vec![
            recorded(name),
            match api {
                "openai" => crate::support::openai::chat_sse_submit("call_2", "ok"),
                _ => crate::support::responses::tool_reply(
                    "call_2",
                    "submit",
                    serde_json::json!({"output": "ok"}),
                ),
            },
        ]);
        let cfg = config(&env, &stub, api, "/v1");
        let (code, ev) = run(&env, &cfg);
        assert_eq!(code, Some(0), "{name}: {ev:?}");
        assert_eq!(of_type(&ev, "tool.started")[0]["tool"], "bash", "{name}");
    }
}
