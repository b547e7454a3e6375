//! The Anthropic request body: merged tool results, thinking replay, ids, budgets, Vertex AI's form.

use super::*;
use crate::model::spec::WireOptions;
use crate::model::wire_cache::WireCache;
use crate::model::wire_fixtures::{call, request};
use crate::model::ToolSpec;

fn conversation(extra: Option<Value>) -> Vec<Message> {
    let c1 = call("toolu_1", json!({"command": "ls"}));
    let c2 = call("toolu_2", json!({"command": "pwd"}));
    vec![
        Message::new(Role::User, "task", 0),
        Message {
            tool_calls: vec![c1.clone(), c2.clone()],
            model: Some("anthropic/claude-sonnet-4-5".into()),
            extra,
            ..Message::new(Role::Assistant, "Looking.", 1)
        },
        Message::tool_result(&c1, "a.txt", 1),
        Message::tool_result(&c2, "/work", 1),
        Message::new(Role::User, "keep going", 1),
    ]
}

#[test]
fn tool_results_merge_into_one_user_message() {
    let msgs = conversation(None);
    let tools = [ToolSpec {
        name: "bash".into(),
        description: "run".into(),
        parameters: json!({"type": "object"}),
    }];
    let body = request_body(
        "claude-sonnet-4-5",
        &request(&msgs, &tools, "anthropic/claude-sonnet-4-5"),
        None,
    );
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(body["stream"], true);
    assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
    assert_eq!(
        body["tools"][0],
        json!({"name": "bash", "description": "run", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}})
    );
    let m = body["messages"].as_array().unwrap();
    assert_eq!(m.len(), 3);
    assert_eq!(
        m[0],
        json!({"role": "user", "content": [{"type": "text", "text": "task", "cache_control": {"type": "ephemeral"}}]})
    );
    assert_eq!(
        m[1],
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}},
            {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {"command": "pwd"}},
        ]})
    );
    assert_eq!(
        m[2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "/work"},
            {"type": "text", "text": "keep going", "cache_control": {"type": "ephemeral"}},
        ]})
    );
    assert!(body.get("thinking").is_none());
}

#[test]
fn thinking_is_replayed_only_to_the_same_spec() {
    let thinking = json!({"type": "thinking", "thinking": "hmm", "signature": "sig=="});
    let msgs = conversation(Some(json!({"anthropic": {"content": [thinking.clone()]}})));
    let same = request_body(
        "claude-sonnet-4-5",
        &request(&msgs, &[], "anthropic/claude-sonnet-4-5"),
        None,
    );
    assert_eq!(same["messages"][1]["content"][0], thinking);
    let other = request_body(
        "claude-haiku-4-5",
        &request(&msgs, &[], "anthropic/claude-haiku-4-5"),
        None,
    );
    assert_eq!(other["messages"][1]["content"][0]["type"], "text");
}

#[test]
fn thinking_stays_off_for_a_turn_begun_without_it() {
    let thinking = json!({"type": "thinking", "thinking": "hmm", "signature": "sig=="});
    let with = conversation(Some(json!({"anthropic": {"content": [thinking]}})));
    // Ends in tool results: the assistant's tool-use turn is still open.
    let open_turn = &with[..4];
    let mut r = request(open_turn, &[], "anthropic/claude-sonnet-4-5");
    r.reasoning_effort = Some("low");
    assert!(request_body("claude-sonnet-4-5", &r, None)
        .get("thinking")
        .is_some());
    r.spec = "anthropic/claude-haiku-4-5";
    assert!(request_body("claude-haiku-4-5", &r, None)
        .get("thinking")
        .is_none());
    // A new user message starts a new turn: thinking is fine again.
    let mut r = request(&with, &[], "anthropic/claude-haiku-4-5");
    r.reasoning_effort = Some("low");
    assert!(request_body("claude-haiku-4-5", &r, None)
        .get("thinking")
        .is_some());
}

#[test]
fn garbled_calls_and_foreign_ids_stay_valid() {
    let mut bad = call("call.9/x", Value::String("{\"command\": ".into()));
    bad.garbled = true;
    let msgs = vec![
        Message::new(Role::User, "task", 0),
        Message {
            tool_calls: vec![bad.clone()],
            ..Message::new(Role::Assistant, "", 1)
        },
        Message::tool_result(&bad, "", 1),
    ];
    let body = request_body("claude-sonnet-4-5", &request(&msgs, &[], "x/y"), None);
    let m = &body["messages"];
    assert_eq!(
        m[1]["content"],
        json!([{"type": "tool_use", "id": "call_9_x", "name": "bash", "input": {}}])
    );
    assert_eq!(m[2]["content"][0]["tool_use_id"], "call_9_x");
    assert_eq!(m[2]["content"][0]["content"], "(no output)");
}

#[test]
fn max_tokens_and_thinking_budgets() {
    let msgs = [Message::new(Role::User, "t", 0)];
    let mut r = request(&msgs, &[], "a/b");
    assert_eq!(
        request_body("claude-3-5-haiku-latest", &r, None)["max_tokens"],
        8192
    );
    assert_eq!(
        request_body("claude-3-haiku-20240307", &r, None)["max_tokens"],
        4096
    );
    assert_eq!(
        request_body("claude-opus-4-1", &r, Some(32000))["max_tokens"],
        32000
    );
    r.reasoning_effort = Some("high");
    let body = request_body("claude-sonnet-4-5", &r, None);
    assert_eq!(body["max_tokens"], 20_480 + 8_192);
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 20_480})
    );
    r.reasoning_effort = Some("low");
    assert_eq!(
        request_body("claude-sonnet-4-5", &r, None)["max_tokens"],
        DEFAULT_MAX_TOKENS
    );
    r.max_output_tokens = Some(6000);
    let body = request_body("claude-sonnet-4-5", &r, None);
    assert_eq!(body["max_tokens"], 6000);
    assert_eq!(body["thinking"]["budget_tokens"], 3000);
    r.max_output_tokens = Some(1500);
    assert!(request_body("claude-sonnet-4-5", &r, None)
        .get("thinking")
        .is_none());
}

#[test]
fn on_vertex_the_body_names_its_version_not_its_model() {
    let msgs = [Message::new(Role::User, "t", 0)];
    let r = request(&msgs, &[], "vertex/claude-sonnet-4-5@20250929");
    let cache = WireCache::default();
    let body = request_bytes_on_vertex(
        "claude-sonnet-4-5@20250929",
        &r,
        None,
        WireOptions::default(),
        &cache,
    );
    let mut expected = request_body("claude-sonnet-4-5@20250929", &r, None);
    on_vertex(expected.as_object_mut().unwrap());
    assert_eq!(
        String::from_utf8(body.bytes.clone()).unwrap(),
        expected.to_string()
    );
    let body: Value = serde_json::from_slice(&body.bytes).unwrap();
    assert!(body.get("model").is_none());
    assert_eq!(body["anthropic_version"], "vertex-2023-10-16");
    assert_eq!(body["stream"], true);
}

/// Every `cache_control` of a body, as (where, value).
fn breakpoints(body: &Value) -> Vec<(String, Value)> {
    fn walk(at: String, v: &Value, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    if k == "cache_control" {
                        out.push((at.clone(), v.clone()));
                    } else {
                        walk(format!("{at}/{k}"), v, out);
                    }
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(format!("{at}/{i}"), v, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(String::new(), body, &mut out);
    out
}

fn two_tools() -> Vec<ToolSpec> {
    ["bash", "read_file"]
        .map(|name| ToolSpec {
            name: name.into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        })
        .to_vec()
}

#[test]
fn breakpoints_end_the_tools_the_system_prompt_and_the_conversation() {
    let msgs = conversation(None);
    let tools = two_tools();
    let five = json!({"type": "ephemeral"});
    let hour = json!({"type": "ephemeral", "ttl": "1h"});
    for (cache, expected) in [(PromptCache::On, &five), (PromptCache::OneHour, &hour)] {
        let r = Request {
            prompt_cache: cache,
            ..request(&msgs, &tools, "anthropic/claude-sonnet-4-5")
        };
        let body = request_body("claude-sonnet-4-5", &r, None);
        let at: Vec<String> = breakpoints(&body)
            .iter()
            .map(|(at, _)| at.clone())
            .collect();
        assert_eq!(
            at,
            [
                "/system/0",
                "/messages/0/content/0",
                "/messages/2/content/2",
                "/tools/1"
            ],
            "{cache:?}"
        );
        assert!(breakpoints(&body).iter().all(|(_, v)| v == expected));
        // The cached path writes the same body.
        let cache_bytes = WireCache::default();
        let bytes = request_bytes(
            "claude-sonnet-4-5",
            &r,
            None,
            WireOptions::default(),
            &cache_bytes,
        );
        assert_eq!(serde_json::from_slice::<Value>(&bytes.bytes).unwrap(), body);
    }
}

#[test]
fn prompt_cache_off_sends_no_breakpoint_and_a_plain_system_prompt() {
    let msgs = conversation(None);
    let tools = two_tools();
    let r = Request {
        prompt_cache: PromptCache::Off,
        ..request(&msgs, &tools, "anthropic/claude-sonnet-4-5")
    };
    let body = request_body("claude-sonnet-4-5", &r, None);
    assert!(breakpoints(&body).is_empty(), "{body}");
    assert_eq!(body["system"], "be brief");
    let cache_bytes = WireCache::default();
    let bytes = request_bytes(
        "claude-sonnet-4-5",
        &r,
        None,
        WireOptions::default(),
        &cache_bytes,
    );
    assert!(!String::from_utf8_lossy(&bytes.bytes).contains("cache_control"));
}

#[test]
fn kept_markers_are_dropped_and_absent_parts_get_none() {
    // Kept blocks of a reply may carry a marker of their own: the request
    // never has more than the API's four.
    let kept = json!({"anthropic": {"content": [{"type": "text", "text": "k", "cache_control": {"type": "ephemeral"}}]}});
    let msgs = conversation(Some(kept));
    let tools = two_tools();
    let r = request(&msgs, &tools, "anthropic/claude-sonnet-4-5");
    let body = request_body("claude-sonnet-4-5", &r, None);
    assert_eq!(breakpoints(&body).len(), 4, "{body}");
    let none = Request {
        system: "",
        ..request(&msgs, &[], "anthropic/claude-sonnet-4-5")
    };
    let body = request_body("claude-sonnet-4-5", &none, None);
    assert_eq!(breakpoints(&body).len(), 2, "{body}");
    assert!(body.get("system").is_none());
}

#[test]
fn the_previous_request_end_keeps_its_breakpoint_however_long_the_step() {
    // Twelve calls in one reply: more blocks than the API looks back over.
    let calls: Vec<_> = (0..12)
        .map(|i| call(&format!("toolu_{i}"), json!({"command": "ls"})))
        .collect();
    let mut msgs = vec![
        Message::new(Role::User, "task", 0),
        Message {
            tool_calls: vec![calls[0].clone()],
            ..Message::new(Role::Assistant, "", 1)
        },
        Message::tool_result(&calls[0], "a", 1),
        Message {
            tool_calls: calls[1..].to_vec(),
            ..Message::new(Role::Assistant, "Many.", 2)
        },
    ];
    msgs.extend(calls[1..].iter().map(|c| Message::tool_result(c, "out", 2)));
    let r = request(&msgs, &[], "anthropic/claude-sonnet-4-5");
    let body = request_body("claude-sonnet-4-5", &r, None);
    let at: Vec<String> = breakpoints(&body).into_iter().map(|(at, _)| at).collect();
    assert_eq!(
        at,
        [
            "/system/0",
            "/messages/2/content/0",
            "/messages/4/content/10"
        ]
    );
    let cache = WireCache::default();
    let bytes = request_bytes(
        "claude-sonnet-4-5",
        &r,
        None,
        WireOptions::default(),
        &cache,
    );
    assert_eq!(serde_json::from_slice::<Value>(&bytes.bytes).unwrap(), body);
    // A conversation of one user turn has one breakpoint on it.
    let one = request(&msgs[..1], &[], "anthropic/claude-sonnet-4-5");
    let body = request_body("claude-sonnet-4-5", &one, None);
    assert_eq!(breakpoints(&body).len(), 2, "{body}");
}
