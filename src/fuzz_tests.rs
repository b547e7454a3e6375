//! Fuzz harnesses on stable (proptest) for what tinyagent loads from disk or
//! a child process: the config loader, the checkpoint loader (a trajectory
//! and its journal, then the resumed run built from them) and MCP server
//! messages (bounded lines, rmcp's message types, our tool specs and
//! outputs). Whatever the bytes, each returns a value or an error, never
//! panics. The stream parsers' harnesses are in `model/fuzz_tests.rs`.
//!
//! `cargo test --lib fuzz_` runs a few cases each (fast); more with
//! `PROPTEST_CASES=100000 cargo test --release --lib fuzz_`.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{json, Value};

use crate::conversation::{Message, Role, ToolCall};
use crate::model::fuzz_tests::config;
use crate::trajectory::{journal_path, JournalOp, Trajectory};

/// Config keys at every level, so random documents reach real fields.
const CONFIG_KEYS: &[&str] = &[
    "model",
    "fallback_models",
    "step_limit",
    "cost_limit",
    "time_limit",
    "max_output_tokens",
    "reasoning_effort",
    "providers",
    "api",
    "endpoint",
    "api_key_env",
    "headers",
    "models",
    "input_price",
    "context_window",
    "stream",
    "tool_choice",
    "retry",
    "attempts",
    "backoff",
    "max_backoff",
    "jitter",
    "fallback",
    "switch_after",
    "cooldown",
    "subagents",
    "mcp_servers",
    "command",
    "args",
    "env",
    "tool_timeout",
    "hooks",
    "stop",
    "health_db",
    "tools",
    "allow",
    "deny",
    "save_runs",
    "instructions",
    "compaction",
];

const CONFIG_WORDS: &[&str] = &[
    "openai",
    "ollama",
    "anthropic",
    "responses",
    "auto",
    "never",
    "0",
    "500ms",
    "5m",
    "-1s",
    "99999999999999999999h",
    "off",
    "redis://127.0.0.1:1/0",
    "script/x.yaml",
    "~",
    "mcp__*",
    "true",
    "1e309",
    "-0",
    "!!binary aGk=",
    "&a [*a]",
];

fn yaml_leaf() -> impl Strategy<Value = String> {
    prop_oneof![
        (0..CONFIG_WORDS.len()).prop_map(|i| CONFIG_WORDS[i].to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| f.to_string()),
        "[ -~]{0,16}".prop_map(|s| format!("{s:?}")),
        Just("null".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
    ]
}

/// A YAML document in flow style: nested mappings of known keys.
fn yaml_doc() -> impl Strategy<Value = String> {
    yaml_leaf().prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(", "))),
            prop::collection::vec(((0..CONFIG_KEYS.len()), inner), 0..6).prop_map(|pairs| {
                let body: Vec<String> = pairs
                    .into_iter()
                    .map(|(k, v)| format!("{}: {v}", CONFIG_KEYS[k]))
                    .collect();
                format!("{{{}}}", body.join(", "))
            }),
        ]
    })
}

/// Reads `text` as a config layer and, when it passes, resolves it with
/// the flags of a plain run: either way without a panic.
fn load_config(text: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, text).unwrap();
    if let Ok(Some(value)) = crate::config::read_layer(&path, true) {
        let _ = crate::config::check(&value);
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn fuzz_config_documents(doc in yaml_doc()) {
        load_config(&doc);
    }

    #[test]
    fn fuzz_config_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        load_config(&String::from_utf8_lossy(&bytes));
    }
}

#[test]
fn fuzz_config_alias_bombs_are_refused_quickly() {
    // "Billion laughs": nine levels of nine aliases each.
    let mut doc = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
    for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"]
        .iter()
        .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
    {
        let refs = vec![format!("*{prev}"); 9].join(", ");
        doc.push_str(&format!("{name}: &{name} [{refs}]\n"));
    }
    let deep = format!("model: {}x{}\n", "[".repeat(100_000), "]".repeat(100_000));
    for text in [doc, deep] {
        load_config(&text);
    }
}

fn base_doc() -> Trajectory {
    let call = ToolCall {
        id: "call_1".into(),
        name: "bash".into(),
        arguments: json!({"command": "ls"}),
        garbled: false,
        oversized: None,
    };
    let mut reply = Message::new(Role::Assistant, "", 1);
    reply.tool_calls = vec![call];
    reply.model = Some("script/x.yaml".into());
    let value = json!({
        "schema_version": 1, "tinyagent_version": "0", "run_id": "r1", "task": "t",
        "model": "script/x.yaml", "active_model": "script/x.yaml", "status": "interrupted",
        "error": null, "started_at": "2026-01-01T00:00:00Z", "finished_at": null, "steps": 1,
        "totals": {"input_tokens": 1, "output_tokens": 1, "cached_input_tokens": 0, "cost_usd": 0.0},
        "messages": [Message::new(Role::User, "t", 0), reply], "output": null,
    });
    serde_json::from_value(value).expect("the base checkpoint parses")
}

/// Values a hostile checkpoint might hold in any field.
fn odd_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!(u32::MAX)),
        Just(json!(u64::MAX)),
        Just(json!(-1)),
        Just(json!(1e308)),
        Just(json!("")),
        Just(json!("\u{0}\u{ffff}")),
        Just(json!([])),
        Just(json!({})),
        any::<u32>().prop_map(|n| json!(n)),
        "[ -~]{0,12}".prop_map(Value::String),
    ]
}

/// The base checkpoint with some fields (top level, or of a message)
/// replaced or removed.
fn checkpoint() -> impl Strategy<Value = Value> {
    let keys = prop::collection::vec(
        (
            0..3usize,
            prop_oneof![
                Just("steps"),
                Just("status"),
                Just("messages"),
                Just("totals"),
                Just("schema_version"),
                Just("model"),
                Just("plan"),
                Just("model_switches"),
                Just("role"),
                Just("tool_calls"),
                Just("step"),
                Just("content"),
                Just("tool_call_id"),
                Just("extra"),
            ],
            prop::option::of(odd_value()),
        ),
        0..6,
    );
    keys.prop_map(|edits| {
        let mut doc = serde_json::to_value(base_doc()).unwrap();
        for (target, key, value) in edits {
            let object = match target {
                0 => doc.as_object_mut(),
                n => doc["messages"]
                    .get_mut(n - 1)
                    .and_then(Value::as_object_mut),
            };
            if let Some(object) = object {
                match value {
                    Some(v) => object.insert(key.to_string(), v),
                    None => object.remove(key),
                };
            }
        }
        doc
    })
}

fn journal_line() -> impl Strategy<Value = String> {
    prop_oneof![
        (any::<u16>(), "[ -~]{0,8}").prop_map(|(index, text)| {
            let op = JournalOp::Message {
                index: index as usize % 4,
                message: Message::new(Role::Tool, text, 1),
            };
            serde_json::to_string(&op).unwrap()
        }),
        (any::<u32>(), prop::option::of(any::<u16>())).prop_map(|(steps, messages)| {
            json!({"op": "state", "steps": steps, "active_model": "script/x.yaml",
                "totals": {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0},
                "messages": messages})
            .to_string()
        }),
        (any::<u32>(), "[ -~]{0,8}").prop_map(|(step, id)| {
            json!({"op": "tool_started", "step": step, "call_id": id, "tool": "bash", "arguments": {}})
                .to_string()
        }),
        Just(r#"{"op": "messages", "messages": []}"#.to_string()),
        "[ -~]{0,40}",
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn fuzz_checkpoints_load_and_resume_or_are_refused(
        doc in checkpoint(),
        journal in prop::collection::vec(journal_line(), 0..6),
        cut in any::<u16>(),
        task in prop::option::of("[a-z]{1,8}"),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.json");
        let mut text = serde_json::to_string(&doc).unwrap();
        // Sometimes a torn file.
        if cut % 5 == 0 {
            let at = (cut as usize) % (text.len() + 1);
            text = String::from_utf8_lossy(&text.as_bytes()[..at]).into_owned();
        }
        std::fs::write(&path, text).unwrap();
        std::fs::write(journal_path(&path), journal.join("\n")).unwrap();
        if let Ok(cp) = crate::resume::read(&path) {
            let _ = crate::resume::check_status(&cp, task.is_some());
            let _ = crate::resume::check_model(Some("script/x.yaml"), &cp);
            let next = crate::resume::continue_run(cp, crate::resume::NewRun {
                run_id: "r2",
                fallback_models: Vec::new(),
                cwd: "/",
                task: task.as_deref(),
                started_at: "2026-01-01T00:00:01Z".into(),
                answers_are_checked: cut % 2 == 0,
            });
            prop_assert!(next.doc.steps >= doc["steps"].as_u64().map_or(0, |s| s.min(u32::MAX as u64)) as u32);
        }
    }
}

/// MCP message shapes a server might send.
fn mcp_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(|n| json!(n)),
        Just(json!("text")),
        Just(json!("image")),
        Just(json!("resource_link")),
        Just(json!("2.0")),
        "[ -~]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        let keys = prop_oneof![
            Just("jsonrpc"),
            Just("id"),
            Just("result"),
            Just("error"),
            Just("method"),
            Just("params"),
            Just("content"),
            Just("type"),
            Just("text"),
            Just("isError"),
            Just("structuredContent"),
            Just("tools"),
            Just("name"),
            Just("inputSchema"),
            Just("description"),
            Just("mimeType"),
            Just("uri"),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((keys, inner), 0..6).prop_map(|pairs| Value::Object(
                pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
            )),
        ]
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn fuzz_mcp_messages(message in mcp_value(), bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        use rmcp::model::{CallToolResult, ServerJsonRpcMessage, Tool};
        let text = message.to_string();
        let _ = serde_json::from_str::<ServerJsonRpcMessage>(&text);
        let _ = serde_json::from_slice::<ServerJsonRpcMessage>(&bytes);
        if let Ok(result) = serde_json::from_value::<CallToolResult>(message.clone()) {
            let _ = crate::mcp::fuzz_output(&result);
        }
        if let Ok(tool) = serde_json::from_value::<Tool>(message) {
            let _ = crate::mcp::fuzz_spec("server", &tool);
        }
    }

    #[test]
    fn fuzz_mcp_lines_keep_their_bound(
        chunks in prop::collection::vec(prop::collection::vec(prop_oneof![Just(b'\n'), any::<u8>()], 0..64), 0..8),
        max in 1usize..32,
    ) {
        let input: Vec<u8> = chunks.concat();
        let tripped = Arc::new(AtomicBool::new(false));
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let out = runtime.block_on(async {
            use tokio::io::AsyncReadExt;
            let mut reader = crate::mcp::fuzz_bounded(&input[..], max, tripped.clone());
            let mut out = Vec::new();
            reader.read_to_end(&mut out).await.unwrap();
            out
        });
        // What passes is a prefix of the input, and no line in it past the
        // bound is ever whole.
        prop_assert!(input.starts_with(&out));
        for line in out.split(|b| *b == b'\n') {
            prop_assert!(line.len() <= max);
        }
    }
}
