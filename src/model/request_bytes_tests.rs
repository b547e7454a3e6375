//! Every adapter's cached request path (`request_bytes`, messages written
//! from kept bytes) against its uncached one (`request_body`, the whole body
//! serialised as one `Value`): byte for byte the same body, step after step,
//! for another model's spec, after the history was compacted or edited,
//! and under a provider's `stream` and `tool_choice` options.

use serde_json::{json, Value};

use super::anthropic;
use super::gemini;
use super::ollama;
use super::openai::{self, Dialect};
use super::responses;
use super::spec::WireOptions;
use super::wire_cache::{WireBody, WireCache};
use super::{Message, PromptCache, Request, Role, ToolCall, ToolSpec};

const OWN: &str = "x/own";

/// A body as a request sends it, given back once sent: the next body
/// through `cache` is written over it, as in a run.
fn sent<M>(cache: &WireCache<M>, body: WireBody) -> Vec<u8> {
    cache.lend(body).to_vec()
}

type Cached = Box<dyn Fn(&Request<'_>) -> Vec<u8>>;
type Fresh = Box<dyn Fn(&Request<'_>) -> Value>;

/// One adapter's two paths, the cached one with its own cache.
struct Paths {
    name: &'static str,
    cached: Cached,
    fresh: Fresh,
}

fn adapters() -> Vec<Paths> {
    let chat = WireCache::default();
    let router = WireCache::default();
    let messages = WireCache::default();
    let responses = WireCache::default();
    let ollama = WireCache::default();
    let gemini = WireCache::default();
    vec![
        Paths {
            name: "chat completions",
            cached: Box::new(move |r| {
                sent(
                    &chat,
                    openai::request_bytes(
                        "gpt-5",
                        Dialect::OpenAi,
                        Some(900),
                        r,
                        WireOptions::default(),
                        &chat,
                    ),
                )
            }),
            fresh: Box::new(|r| openai::request_body("gpt-5", Dialect::OpenAi, Some(900), r)),
        },
        Paths {
            name: "openrouter",
            cached: Box::new(move |r| {
                sent(
                    &router,
                    openai::request_bytes(
                        "x/y",
                        Dialect::OpenRouter,
                        None,
                        r,
                        WireOptions::default(),
                        &router,
                    ),
                )
            }),
            fresh: Box::new(|r| openai::request_body("x/y", Dialect::OpenRouter, None, r)),
        },
        Paths {
            name: "anthropic",
            cached: Box::new(move |r| {
                sent(
                    &messages,
                    anthropic::request_bytes(
                        "claude-sonnet-4-5",
                        r,
                        None,
                        WireOptions::default(),
                        &messages,
                    ),
                )
            }),
            fresh: Box::new(|r| anthropic::request_body("claude-sonnet-4-5", r, None)),
        },
        Paths {
            name: "responses",
            cached: Box::new(move |r| {
                sent(
                    &responses,
                    responses::request_bytes(
                        "gpt-5",
                        r,
                        Some(500),
                        WireOptions::default(),
                        &responses,
                    ),
                )
            }),
            fresh: Box::new(|r| responses::request_body("gpt-5", r, Some(500))),
        },
        Paths {
            name: "ollama",
            cached: Box::new(move |r| {
                sent(
                    &ollama,
                    ollama::request_bytes("qwen3", Some(300), r, WireOptions::default(), &ollama),
                )
            }),
            fresh: Box::new(|r| ollama::request_body("qwen3", Some(300), r)),
        },
        Paths {
            name: "gemini",
            cached: Box::new(move |r| {
                sent(
                    &gemini,
                    gemini::request_bytes(
                        "gemini-3-pro-preview",
                        r,
                        Some(700),
                        WireOptions::default(),
                        &gemini,
                    ),
                )
            }),
            fresh: Box::new(|r| {
                gemini::request_body("gemini-3-pro-preview", r, Some(700), WireOptions::default())
            }),
        },
    ]
}

fn call(id: &str, name: &str, arguments: Value, garbled: bool) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
        garbled,
        oversized: None,
    }
}

fn extra() -> Value {
    json!({
        "anthropic": {"content": [{"type": "thinking", "thinking": "hmm", "signature": "c2ln"}]},
        "responses": {"reasoning": [{"type": "reasoning", "id": "rs_1", "status": "completed", "summary": [], "encrypted_content": "gAAB"}]},
        "gemini": {"parts": [{"text": "Looking.", "thoughtSignature": "c2ln"}, {"functionCall": {"name": "bash", "args": {}}}]},
    })
}

/// A history with every kind of message and wire quirk the adapters know.
fn history() -> Vec<Message> {
    let ls = call(
        "call_1",
        "bash",
        json!({"command": "ls \"a b\"", "n": 3, "f": 1.5, "neg": -2, "nested": {"z": [null, true]}}),
        false,
    );
    let garbled = call("call.2/x", "write_file", json!("{\"path\": "), true);
    let odd = call("", "read_file", json!([1, 2]), false);
    vec![
        Message::new(Role::User, "fix the test — naïve 😀 \\ \"q\"\n\t", 0),
        Message::new(Role::System, "extra instructions", 0),
        Message {
            tool_calls: vec![ls.clone(), garbled.clone()],
            model: Some(OWN.into()),
            extra: Some(extra()),
            ..Message::new(Role::Assistant, "Looking.", 1)
        },
        Message::tool_result(&ls, "a.txt\nb.txt", 1),
        Message {
            name: None,
            ..Message::tool_result(&garbled, "", 1)
        },
        Message::new(Role::User, "keep going", 1),
        Message::new(Role::User, "", 1),
        Message {
            tool_calls: vec![odd.clone()],
            model: Some("y/other".into()),
            extra: Some(extra()),
            ..Message::new(Role::Assistant, "", 2)
        },
        Message::tool_result(&odd, "x", 2),
        Message::new(Role::Assistant, "", 3),
        Message {
            model: Some(OWN.into()),
            extra: Some(extra()),
            ..Message::new(Role::Assistant, "", 3)
        },
        Message {
            model: Some(OWN.into()),
            extra: Some(json!({"anthropic": {"content": [
                {"type": "text", "text": "kept", "cache_control": {"type": "ephemeral"}},
            ]}})),
            ..Message::new(Role::Assistant, "", 4)
        },
        Message::new(Role::Assistant, "done", 5),
    ]
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "bash".into(),
        description: "Run a command".into(),
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    }]
}

fn request<'a>(
    messages: &'a [Message],
    tools: &'a [ToolSpec],
    spec: &'a str,
    effort: Option<&'a str>,
) -> Request<'a> {
    Request {
        system: "be brief",
        messages,
        tools,
        output_schema: None,
        max_output_tokens: None,
        reasoning_effort: effort,
        spec,
        prompt_cache: PromptCache::On,
        cache_key: None,
    }
}

fn assert_same(paths: &Paths, request: &Request<'_>, what: &str) {
    let cached = String::from_utf8((paths.cached)(request)).unwrap();
    let fresh = serde_json::to_string(&(paths.fresh)(request)).unwrap();
    assert_eq!(cached, fresh, "{}: {what}", paths.name);
}

#[test]
fn cached_bodies_are_the_uncached_bytes_step_after_step() {
    let history = history();
    let tools = tools();
    for paths in adapters() {
        // One cache across steps, the other spec and thinking on and off.
        for spec in [OWN, "y/other"] {
            for (effort, prompt_cache, cache_key) in [
                (None, PromptCache::On, None),
                (Some("low"), PromptCache::OneHour, Some("tinyagent-k")),
                (None, PromptCache::Off, None),
            ] {
                for len in 0..=history.len() {
                    let r = Request {
                        prompt_cache,
                        cache_key,
                        ..request(&history[..len], &tools, spec, effort)
                    };
                    assert_same(
                        &paths,
                        &r,
                        &format!("{len} messages for {spec}, {effort:?}, {prompt_cache}"),
                    );
                    // The same request again, from kept bytes only.
                    assert_same(&paths, &r, &format!("{len} messages again"));
                }
            }
        }
        let none = request(&[], &[], OWN, None);
        assert_same(&paths, &Request { system: "", ..none }, "nothing at all");
    }
}

#[test]
fn an_edited_or_compacted_history_is_never_sent_stale() {
    let tools = tools();
    for paths in adapters() {
        let mut history = history();
        let r = request(&history, &tools, OWN, Some("low"));
        assert_same(&paths, &r, "before");
        let before = (paths.cached)(&r);

        // Edited in place: the same messages, other contents.
        history[3].content = "changed output".into();
        history[2].tool_calls[0].arguments = json!({"command": "pwd"});
        history[2].tool_calls[1].garbled = false;
        history[10].extra =
            Some(json!({"anthropic": {"content": []}, "responses": {"reasoning": []}}));
        history[4].name = Some("renamed".into());
        let r = request(&history, &tools, OWN, Some("low"));
        assert_same(&paths, &r, "edited");
        assert_ne!((paths.cached)(&r), before, "{}", paths.name);

        // Compacted: a summary replaces the start, the end is kept.
        let mut compacted = vec![Message::new(Role::User, "summary of the work so far", 0)];
        compacted.extend_from_slice(&history[7..]);
        let r = request(&compacted, &tools, OWN, Some("low"));
        assert_same(&paths, &r, "compacted");
        compacted.push(Message::new(Role::User, "next", 6));
        let r = request(&compacted, &tools, OWN, None);
        assert_same(&paths, &r, "compacted, one step on");
    }
}

#[test]
fn wire_options_apply_to_the_cached_body_as_to_the_uncached_one() {
    use super::api::ToolChoiceForm as Form;
    use super::spec::ToolChoice;
    use super::wire::apply_options;

    let options = WireOptions {
        stream: false,
        tool_choice: Some(ToolChoice::Required),
    };
    let history = history();
    let tools = tools();
    let r = request(&history, &tools, OWN, None);
    let fresh = |mut body: Value, api: Form| {
        apply_options(body.as_object_mut().unwrap(), api, options);
        serde_json::to_string(&body).unwrap()
    };
    let cache = WireCache::default();
    let cached = openai::request_bytes("gpt-5", Dialect::OpenAi, None, &r, options, &cache);
    let expected = fresh(
        openai::request_body("gpt-5", Dialect::OpenAi, None, &r),
        openai::API.tool_choice,
    );
    assert_eq!(String::from_utf8(cached.bytes).unwrap(), expected);
    assert!(
        expected.contains(r#""stream":false"#) && expected.contains(r#""tool_choice":"required""#)
    );

    let cache = WireCache::default();
    let cached = anthropic::request_bytes("claude-sonnet-4-5", &r, None, options, &cache);
    let expected = fresh(
        anthropic::request_body("claude-sonnet-4-5", &r, None),
        anthropic::API.tool_choice,
    );
    assert_eq!(String::from_utf8(cached.bytes).unwrap(), expected);

    let cache = WireCache::default();
    let cached = responses::request_bytes("gpt-5", &r, None, options, &cache);
    let expected = fresh(
        responses::request_body("gpt-5", &r, None),
        openai::API.tool_choice,
    );
    assert_eq!(String::from_utf8(cached.bytes).unwrap(), expected);

    let cache = WireCache::default();
    let cached = ollama::request_bytes("qwen3", None, &r, options, &cache);
    let expected = fresh(
        ollama::request_body("qwen3", None, &r),
        ollama::API.tool_choice,
    );
    assert_eq!(String::from_utf8(cached.bytes).unwrap(), expected);

    let cache = WireCache::default();
    let cached = gemini::request_bytes("gemini-2.5-pro", &r, None, options, &cache);
    let expected =
        serde_json::to_string(&gemini::request_body("gemini-2.5-pro", &r, None, options)).unwrap();
    assert_eq!(String::from_utf8(cached.bytes).unwrap(), expected);
    assert!(expected.contains(r#""toolConfig":{"functionCallingConfig":{"mode":"ANY"}}"#));
}
