//! Replies in the forms self-hosted servers and gateways really send
//! (llama-cpp-python, LiteLLM, vLLM, llama.cpp), refusals on every wire API,
//! and hostile replies that must end as classified failures with
//! `run.finished` and a whole checkpoint (SPEC 4).

use serde_json::{json, Value};

use crate::support::openai::{chat_sse_submit, chunk, data, done, usage_chunk};
use crate::support::stub::{Reply, Stub};
use crate::support::{anthropic, responses};
use crate::support::{events, finished, of_type, read_json, retry_reasons, TestEnv};

const KEY: &str = "sk-test-compat-0123456789";
const RETRY: &str = "retry: {attempts: 2, backoff: 1ms, max_backoff: 20ms, jitter: 0, stream_first_event_timeout: 2s, stream_idle_timeout: 2s}\n";

fn env_with(extra: &str) -> TestEnv {
    let env = TestEnv::new();
    env.user_config(&format!("health_db: off\n{RETRY}{extra}"));
    env
}

/// A `--json` run of `model` against `stub` (all HTTP providers point at it).
fn run(env: &TestEnv, stub: &Stub, model: &str, args: &[&str]) -> (Option<i32>, Vec<Value>) {
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", stub.url())
        .env("ANTHROPIC_API_KEY", KEY)
        .args(["-m", model, "--json"])
        .args(args)
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), ev)
}

/// llama-cpp-python 0.3.x: a role chunk with null fields, then every
/// fragment of the call repeating its id and whole name (and the legacy
/// `function_call`), a `tool_calls` finish, no usage, `[DONE]`.
fn llama_cpp_tool_call(name: &str, args: &str) -> Reply {
    let id = format!("call__0_{name}_cmpl-6c4d1e0a");
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": null, "function_call": null, "tool_calls": null}),
        None,
    )];
    let cut = args.len() / 2;
    for piece in [&args[..cut], &args[cut..]] {
        events.push(chunk(
            json!({"role": null, "content": null,
                "function_call": {"name": name, "arguments": piece},
                "tool_calls": [{"index": 0, "id": id, "type": "function",
                    "function": {"name": name, "arguments": piece}}]}),
            None,
        ));
    }
    events.push(chunk(
        json!({"role": null, "content": null, "function_call": null, "tool_calls": null}),
        Some("tool_calls"),
    ));
    events.push(done());
    Reply::sse(events)
}

#[test]
fn a_llama_cpp_python_tool_run_names_tools_once_and_sends_empty_content() {
    let env = env_with("");
    let stub = Stub::sequence(vec![
        llama_cpp_tool_call("bash", r#"{"command": "echo hi > a.txt"}"#),
        llama_cpp_tool_call("submit", r#"{"output": "wrote a.txt"}"#),
    ]);
    let (code, ev) = run(&env, &stub, "openai/smollm2", &["write a.txt"]);
    assert_eq!(code, Some(0), "{ev:?}");
    assert_eq!(finished(&ev)["output"], "wrote a.txt");
    let started = of_type(&ev, "tool.started");
    assert_eq!(started[0]["tool"], "bash");
    assert_eq!(
        std::fs::read_to_string(env.work().join("a.txt")).unwrap(),
        "hi\n"
    );
    // The call goes back with `content: ""`, which llama-cpp-python accepts.
    let second = stub.requests()[1].json();
    let assistant = &second["messages"][2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"], "");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "bash");
}

#[test]
fn a_reply_sent_as_one_json_body_is_accepted_on_every_api() {
    let chat = json!({"id": "chatcmpl-9", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "submit", "arguments": "{\"output\":\"from a body\"}"}}]},
            "logprobs": null, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35}});
    let messages = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "submit", "input": {"output": "from a body"}}],
        "stop_reason": "tool_use", "stop_sequence": null, "usage": {"input_tokens": 30, "output_tokens": 5}});
    let resp = json!({"id": "resp_1", "object": "response", "status": "completed", "error": null,
        "output": [{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "submit",
            "arguments": "{\"output\":\"from a body\"}", "status": "completed"}],
        "usage": {"input_tokens": 30, "output_tokens": 5, "total_tokens": 35}});
    for (model, body) in [
        ("openai/gpt-5", chat),
        ("anthropic/claude-sonnet-4-5", messages),
        ("responses/gpt-5", resp),
    ] {
        let env = env_with("");
        let stub = Stub::sequence(vec![Reply::json(200, &body)]);
        let (code, ev) = run(&env, &stub, model, &["go"]);
        assert_eq!(code, Some(0), "{model}: {ev:?}");
        assert_eq!(finished(&ev)["output"], "from a body", "{model}");
        assert_eq!(finished(&ev)["input_tokens"], 30, "{model}");
    }
}

#[test]
fn in_stream_error_codes_count_as_strings_or_numbers() {
    // LiteLLM 1.x: `{"error": {..., "code": "429"}}`, the code a string.
    for error in [
        json!({"message": "litellm.RateLimitError: slow down", "type": "None", "param": "None", "code": "429"}),
        json!({"message": "slow down", "code": 429}),
        json!({"message": "slow down", "type": "rate_limit_exceeded", "code": "rate_limit_exceeded"}),
    ] {
        let env = env_with("");
        let stub = Stub::sequence(vec![
            Reply::sse(vec![data(&json!({"error": error}))]),
            chat_sse_submit("call_2", "ok"),
        ]);
        let (code, ev) = run(&env, &stub, "openai/gpt-5", &["go"]);
        assert_eq!(code, Some(0), "{error}");
        assert_eq!(retry_reasons(&ev), ["http_429"], "{error}");
    }
    // The same for Anthropic's and Responses' stream forms.
    let env = env_with("");
    let stub = Stub::sequence(vec![
        Reply::sse(vec![
            anthropic::message_start(5, 0),
            data(
                &json!({"error": {"message": "busy", "type": "None", "param": "None", "code": "503"}}),
            ),
        ]),
        anthropic::tool_reply("toolu_1", "submit", json!({"output": "ok"})),
    ]);
    let (code, ev) = run(&env, &stub, "anthropic/claude-sonnet-4-5", &["go"]);
    assert_eq!(code, Some(0));
    assert_eq!(retry_reasons(&ev), ["http_503"]);
    let env = env_with("");
    let stub = Stub::sequence(vec![
        Reply::sse(vec![
            "event: error\ndata: {\"type\":\"error\",\"code\":\"429\",\"message\":\"slow down\",\"param\":null,\"sequence_number\":1}\n\n".into(),
        ]),
        responses::tool_reply("call_1", "submit", json!({"output": "ok"})),
    ]);
    let (code, ev) = run(&env, &stub, "responses/gpt-5", &["go"]);
    assert_eq!(code, Some(0));
    assert_eq!(retry_reasons(&ev), ["http_429"]);
}

#[test]
fn an_overflow_reported_after_the_stream_started_compacts() {
    // llama.cpp's server and vLLM report an overflow as an in-stream error.
    let env = env_with("");
    // A first step with a long tool output, so compaction has something to
    // shorten (it never reports a compaction that shrinks nothing).
    let stub = Stub::start(|i, _| match i {
        0 => crate::support::openai::chat_sse_tool_call(
            "call_1",
            "bash",
            r#"{"command":"head -c 3000 /dev/zero | tr '\\0' x"}"#,
        ),
        1 => Reply::sse(vec![
            chunk(json!({"role": "assistant", "content": ""}), None),
            data(
                &json!({"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 7930, "n_ctx": 2048}}),
            ),
        ]),
        _ => chat_sse_submit("call_9", "done"),
    });
    let (code, ev) = run(&env, &stub, "openai/qwen", &["go"]);
    assert_eq!(code, Some(0), "{ev:?}");
    assert_eq!(of_type(&ev, "context.compacted").len(), 1, "{ev:?}");
    assert!(of_type(&ev, "provider.retry").is_empty());
}

/// A refusal on every wire API ends the run `error`, exit 1, with
/// `model refused: <text>`, after one request and with no fallback.
#[test]
fn a_refusal_ends_the_run_with_its_text_and_never_falls_back() {
    let text = "I'm sorry, but I can't help with that.";
    let chat = Reply::sse(vec![
        chunk(
            json!({"role": "assistant", "content": null, "refusal": ""}),
            None,
        ),
        chunk(json!({"refusal": "I'm sorry, but "}), None),
        chunk(json!({"refusal": "I can't help with that."}), None),
        chunk(json!({}), Some("stop")),
        usage_chunk(20, 9, 0),
        done(),
    ]);
    let claude = Reply::sse(anthropic::message(
        vec![anthropic::text_block(0, &[text])],
        "refusal",
    ));
    let ev = |v: Value| format!("event: {}\ndata: {}\n\n", v["type"].as_str().unwrap(), v);
    let resp = Reply::sse(vec![
        ev(
            json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1", "status": "in_progress"}}),
        ),
        ev(
            json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": {"type": "message", "id": "msg_1", "status": "in_progress", "role": "assistant", "content": []}}),
        ),
        ev(
            json!({"type": "response.content_part.added", "sequence_number": 2, "output_index": 0, "content_index": 0, "item_id": "msg_1", "part": {"type": "refusal", "refusal": ""}}),
        ),
        ev(
            json!({"type": "response.refusal.delta", "sequence_number": 3, "output_index": 0, "content_index": 0, "item_id": "msg_1", "delta": text}),
        ),
        ev(
            json!({"type": "response.refusal.done", "sequence_number": 4, "output_index": 0, "content_index": 0, "item_id": "msg_1", "refusal": text}),
        ),
        ev(
            json!({"type": "response.output_item.done", "sequence_number": 5, "output_index": 0, "item": {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant", "content": [{"type": "refusal", "refusal": text}]}}),
        ),
        ev(
            json!({"type": "response.completed", "sequence_number": 6, "response": {"id": "resp_1", "status": "completed", "usage": {"input_tokens": 20, "output_tokens": 9}}}),
        ),
    ]);
    for (model, reply) in [
        ("openai/gpt-5", chat),
        ("anthropic/claude-sonnet-4-5", claude),
        ("responses/gpt-5", resp),
    ] {
        let env = env_with("");
        let backup = env.script("b.yaml", "- text: should not be asked\n");
        let stub = Stub::sequence(vec![reply]);
        let (code, ev) = run(&env, &stub, model, &["--fallback-model", &backup, "go"]);
        assert_eq!(code, Some(1), "{model}: {ev:?}");
        let end = finished(&ev);
        assert_eq!(end["status"], "error");
        assert_eq!(end["error"], format!("model refused: {text}"), "{model}");
        assert_eq!(end["model_fallbacks"], 0);
        assert_eq!(stub.count(), 1, "{model}: a refusal is never retried");
        assert!(of_type(&ev, "model.fallback").is_empty());
        assert!(of_type(&ev, "provider.retry").is_empty());
    }
}

#[test]
fn a_scripted_refusal_behaves_the_same() {
    let env = TestEnv::new();
    let primary = env.script("a.yaml", "- refusal: No, I won't do that.\n");
    let backup = env.script("b.yaml", "- text: unused\n");
    let out = env
        .cmd()
        .args(["-m", &primary, "--fallback-model", &backup, "--json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let ev = events(&out.stdout);
    assert_eq!(
        finished(&ev)["error"],
        "model refused: No, I won't do that."
    );
    assert!(of_type(&ev, "model.fallback").is_empty());
}

/// What a hostile server sends ends as a classified failure: `run.finished`
/// comes, the checkpoint is whole JSON, and the process is not killed.
#[test]
fn hostile_tool_call_indexes_are_a_classified_failure() {
    for index in [json!(1_000_000_000_000u64), json!(50_000_000), json!(1e30)] {
        let env = env_with("");
        let reply = Reply::sse(vec![
            chunk(
                json!({"tool_calls": [{"index": index, "id": "c", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}),
                None,
            ),
            chunk(json!({}), Some("tool_calls")),
            done(),
        ]);
        let stub = Stub::sequence(vec![reply]);
        let traj = env.file("t.json");
        let traj_arg = traj.to_str().unwrap().to_string();
        let (code, ev) = run(
            &env,
            &stub,
            "openai/gpt-5",
            &["--step-limit", "2", "-o", &traj_arg, "go"],
        );
        // A sparse index is only a number: the call runs (then the stub
        // repeats it until the step limit), or the chunk is refused.
        assert!(matches!(code, Some(0..=3) | Some(75)), "{index}: {code:?}");
        assert_eq!(of_type(&ev, "run.finished").len(), 1);
        assert!(read_json(&traj).is_object());
    }
    // More calls than the cap: retried as a malformed reply, then given up.
    let env = env_with("");
    let calls: Vec<Value> = (0..200)
        .map(|i| json!({"index": i, "id": format!("c{i}"), "type": "function", "function": {"name": "bash", "arguments": "{}"}}))
        .collect();
    let stub = Stub::sequence(vec![Reply::sse(vec![
        chunk(json!({"tool_calls": calls}), None),
        done(),
    ])]);
    let traj = env.file("t.json");
    let traj_arg = traj.to_str().unwrap().to_string();
    let (code, ev) = run(&env, &stub, "openai/gpt-5", &["-o", &traj_arg, "go"]);
    // An outage-like failure: exit 75 (1 before exit 75 exists).
    assert!(matches!(code, Some(1) | Some(75)), "{ev:?}");
    assert_eq!(retry_reasons(&ev), ["stream_incomplete"]);
    assert_eq!(finished(&ev)["status"], "error");
    assert_eq!(read_json(&traj)["status"], "error");
}

#[test]
fn a_retry_after_of_forty_nines_does_not_panic_and_moves_the_chain() {
    let nines = "9".repeat(40);
    let env = env_with("");
    let backup = env.script(
        "b.yaml",
        "- tool_calls: [{name: submit, arguments: {output: backup}}]\n",
    );
    let stub = Stub::sequence(vec![Reply::status(429).header("retry-after", &nines)]);
    let (code, ev) = run(
        &env,
        &stub,
        "openai/gpt-5",
        &["--fallback-model", &backup, "go"],
    );
    assert_eq!(code, Some(0), "{ev:?}");
    assert_eq!(finished(&ev)["output"], "backup");
    assert_eq!(
        stub.count(),
        1,
        "beyond max_backoff: the chain moves on at once"
    );
    // Without a chain: max_backoff is waited, never the server's ask.
    let env = env_with("");
    let body = json!({"error": {"message": "later", "retry_after": 1e300}});
    let stub = Stub::sequence(vec![Reply::json(429, &body).header("retry-after", &nines)]);
    let (code, ev) = run(&env, &stub, "openai/gpt-5", &["go"]);
    assert!(matches!(code, Some(1) | Some(75)));
    assert_eq!(of_type(&ev, "provider.retry")[0]["wait_seconds"], 0.02);
}

#[test]
fn a_huge_error_body_is_read_only_in_part() {
    let env = env_with("");
    let mut body = br#"{"error": {"message": "#.to_vec();
    body.extend(std::iter::repeat_n(b'x', 8 << 20));
    let mut reply = Reply::status(400);
    reply.chunks = vec![(std::time::Duration::ZERO, body)];
    let stub = Stub::sequence(vec![reply]);
    let (code, ev) = run(&env, &stub, "openai/gpt-5", &["go"]);
    assert_eq!(code, Some(1));
    let error = finished(&ev)["error"].as_str().unwrap().to_string();
    assert!(error.contains("HTTP 400"), "{error}");
    assert!(error.len() < 1000);
}
