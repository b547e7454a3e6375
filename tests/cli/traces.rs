//! Traces (SPEC 16): spans exported over OTLP/HTTP to a loopback receiver,
//! decoded from protobuf and JSON; TRACEPARENT in and out; no content
//! without the capture variable; an unreachable collector is one warning.

use serde_json::Value;

use crate::support::otlp::{Collector, FlatSpan};
use crate::support::{events, finished, of_type, TestEnv};

const FAST_RETRY: &str = "retry: {attempts: 3, backoff: 1ms, max_backoff: 5ms, jitter: 0}\n";
const UPSTREAM_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const UPSTREAM_SPAN: &str = "b7ad6b7169203331";
const TASK: &str = "summarise the confidential-task-words";

/// A reply running `bash` (printing TRACEPARENT), then a submit.
const BASH_THEN_SUBMIT: &str = "- text: Looking first.\n  tool_calls:\n  - {name: bash, arguments: {command: 'echo \"TP=$TRACEPARENT\" private-argument-words'}}\n  usage: {input: 100, output: 10}\n\
- tool_calls:\n  - {name: submit, arguments: {output: 'private-answer-words'}}\n  usage: {input: 200, output: 20, cached_input: 90, cache_write: 60}\n";

struct Run {
    code: Option<i32>,
    events: Vec<Value>,
    stderr: String,
}

fn run(env: &TestEnv, vars: &[(&str, &str)], config: &str, args: &[&str]) -> Run {
    let cfg = env.write("config.yaml", config);
    let mut cmd = env.cmd();
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd
        .args(["-c", cfg.to_str().unwrap(), "--json"])
        .args(args)
        .arg(TASK)
        .output()
        .unwrap();
    Run {
        code: out.status.code(),
        events: events(&out.stdout),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn named<'a>(spans: &'a [FlatSpan], name: &str) -> Vec<&'a FlatSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [FlatSpan], name: &str) -> &'a FlatSpan {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "spans named {name}: {spans:#?}");
    found[0]
}

#[test]
fn a_run_exports_run_and_tool_spans_as_protobuf_joining_traceparent() {
    let env = TestEnv::new();
    let collector = Collector::start();
    let model = env.script("m.yaml", BASH_THEN_SUBMIT);
    let traceparent = format!("00-{UPSTREAM_TRACE}-{UPSTREAM_SPAN}-01");
    let r = run(
        &env,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url()),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=k3y-value"),
            ("TRACEPARENT", &traceparent),
        ],
        FAST_RETRY,
        &["-m", &model],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(of_type(&r.events, "warning").is_empty(), "{:?}", r.events);
    let requests = collector.requests();
    assert!(!requests.is_empty());
    for req in &requests {
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, "/v1/traces");
        assert_eq!(req.header("content-type"), Some("application/x-protobuf"));
        assert_eq!(req.header("x-collector-key"), Some("k3y-value"));
    }
    let spans = collector.spans();

    let run_span = one(&spans, "invoke_agent tinyagent");
    assert_eq!(run_span.trace_id, UPSTREAM_TRACE);
    assert_eq!(run_span.parent_span_id, UPSTREAM_SPAN);
    assert_eq!(run_span.kind, 1, "internal");
    assert_eq!(run_span.attr("gen_ai.operation.name"), "invoke_agent");
    assert_eq!(run_span.attr("gen_ai.agent.name"), "tinyagent");
    assert_eq!(run_span.attr("tinyagent.run_id"), &r.events[0]["run_id"]);
    assert_eq!(run_span.attr("tinyagent.status"), "submitted");
    let end = finished(&r.events);
    assert_eq!(
        run_span.attr("gen_ai.usage.input_tokens"),
        &end["input_tokens"]
    );
    assert_eq!(
        run_span.attr("gen_ai.usage.output_tokens"),
        &end["output_tokens"]
    );
    assert_eq!(run_span.attr("tinyagent.cost_usd"), &end["cost_usd"]);
    assert_eq!(run_span.attr("gen_ai.usage.cache_read.input_tokens"), 90);
    assert_eq!(
        run_span.attr("gen_ai.usage.cache_creation.input_tokens"),
        60
    );
    assert!(run_span.end_ns > run_span.start_ns);
    assert_eq!(run_span.resource["service.name"], "tinyagent");

    let bash = one(&spans, "execute_tool bash");
    let started = of_type(&r.events, "tool.started");
    assert_eq!(bash.attr("gen_ai.operation.name"), "execute_tool");
    assert_eq!(bash.attr("gen_ai.tool.name"), "bash");
    assert_eq!(bash.attr("gen_ai.tool.call.id"), &started[0]["call_id"]);
    assert_eq!(bash.trace_id, UPSTREAM_TRACE);
    assert_eq!(bash.parent_span_id, run_span.span_id);
    assert!(bash.start_ns >= run_span.start_ns && bash.end_ns <= run_span.end_ns);
    let submit = one(&spans, "execute_tool submit");
    assert_eq!(submit.parent_span_id, run_span.span_id);

    let chats = named(&spans, &format!("chat {model}"));
    assert_eq!(chats.len(), 2, "{spans:#?}");
    let mut chats = chats.clone();
    chats.sort_by_key(|s| s.start_ns);
    for (i, chat) in chats.iter().enumerate() {
        assert_eq!(chat.kind, 3, "client");
        assert_eq!(chat.parent_span_id, run_span.span_id);
        assert_eq!(chat.attr("gen_ai.operation.name"), "chat");
        assert_eq!(chat.attr("gen_ai.provider.name"), "script");
        assert_eq!(
            chat.attr("gen_ai.request.model"),
            model.strip_prefix("script/").unwrap()
        );
        assert!(chat.attr("gen_ai.response.model").is_string());
        assert_eq!(chat.attr("tinyagent.attempt"), 1);
        assert_eq!(chat.attr("tinyagent.step"), i as i64 + 1);
        assert_eq!(chat.status_code, 0);
        assert!(!chat.attributes.contains_key("error.type"));
    }
    assert_eq!(chats[0].attr("gen_ai.usage.input_tokens"), 100);
    assert_eq!(chats[0].attr("gen_ai.usage.output_tokens"), 10);
    assert_eq!(chats[1].attr("gen_ai.usage.input_tokens"), 200);
    assert_eq!(chats[0].attr("gen_ai.usage.cache_read.input_tokens"), 0);
    assert_eq!(chats[1].attr("gen_ai.usage.cache_read.input_tokens"), 90);
    assert_eq!(
        chats[1].attr("gen_ai.usage.cache_creation.input_tokens"),
        60
    );
    assert_eq!(
        chats[0].attr("gen_ai.response.finish_reasons"),
        &serde_json::json!(["tool_calls"])
    );
    assert!(
        chats[0].end_ns <= bash.start_ns,
        "the request came before its tool call"
    );

    // TRACEPARENT out: the command ran inside its own tool span.
    let output = of_type(&r.events, "tool.finished")[0]["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        output.contains(&format!("TP=00-{UPSTREAM_TRACE}-{}-01", bash.span_id)),
        "{output}"
    );

    // No content without the capture variable, nor the header's value.
    for req in &requests {
        let body = String::from_utf8_lossy(&req.body);
        for private in [
            "confidential-task-words",
            "private-argument-words",
            "private-answer-words",
            "Looking first",
            "k3y-value",
        ] {
            assert!(!body.contains(private), "{private} exported");
        }
    }
}

#[test]
fn json_encoding_service_name_and_resource_attributes_from_the_environment() {
    let env = TestEnv::new();
    let collector = Collector::start();
    let model = env.script("m.yaml", BASH_THEN_SUBMIT);
    let r = run(
        &env,
        &[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                &format!("{}/custom/traces", collector.url()),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_SERVICE_NAME", "ci-agent"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=ci,team=infra",
            ),
        ],
        FAST_RETRY,
        &["-m", &model],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let requests = collector.requests();
    assert!(!requests.is_empty());
    for req in &requests {
        assert_eq!(req.path, "/custom/traces");
        assert_eq!(req.header("content-type"), Some("application/json"));
    }
    let spans = collector.spans();
    let run_span = one(&spans, "invoke_agent tinyagent");
    assert_eq!(run_span.parent_span_id, "", "no TRACEPARENT: a root span");
    assert_eq!(run_span.resource["service.name"], "ci-agent");
    assert_eq!(run_span.resource["deployment.environment"], "ci");
    assert_eq!(run_span.resource["team"], "infra");
    let bash = one(&spans, "execute_tool bash");
    assert_eq!(bash.trace_id, run_span.trace_id);
    // Without TRACEPARENT in, the command still gets its span's.
    let output = of_type(&r.events, "tool.finished")[0]["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        output.contains(&format!("TP=00-{}-{}-01", bash.trace_id, bash.span_id)),
        "{output}"
    );
}

#[test]
fn a_switch_is_a_fallback_event_on_the_run_span() {
    let env = TestEnv::new();
    let collector = Collector::start();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let b = env.script(
        "b.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: done}}\n",
    );
    let r = run(
        &env,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url())],
        FAST_RETRY,
        &["-m", &a, "--fallback-model", &b],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let spans = collector.spans();
    let run_span = one(&spans, "invoke_agent tinyagent");
    let switches: Vec<_> = run_span
        .events
        .iter()
        .filter(|(name, _)| name == "tinyagent.model.fallback")
        .collect();
    assert_eq!(switches.len(), 1, "{:?}", run_span.events);
    let attrs = &switches[0].1;
    assert_eq!(attrs["from"], a.as_str());
    assert_eq!(attrs["to"], b.as_str());
    assert_eq!(attrs["reason"], "http_503");
    assert_eq!(attrs["attempts"], 3);
    assert_eq!(run_span.attr("tinyagent.model_fallbacks"), 1);
    assert_eq!(run_span.attr("tinyagent.active_model"), b.as_str());

    // Every attempt is a chat span: three failed ones on a, one on b.
    let mut failed = named(&spans, &format!("chat {a}"));
    failed.sort_by_key(|s| s.start_ns);
    assert_eq!(failed.len(), 3, "{spans:#?}");
    for (i, chat) in failed.iter().enumerate() {
        assert_eq!(chat.attr("error.type"), "http_503");
        assert_eq!(chat.status_code, 2, "error");
        assert_eq!(chat.attr("tinyagent.attempt"), i as i64 + 1);
        assert_eq!(chat.parent_span_id, run_span.span_id);
    }
    let answered = one(&spans, &format!("chat {b}"));
    assert_eq!(answered.status_code, 0);
    assert_eq!(answered.attr("tinyagent.attempt"), 1);
    assert!(!answered.attributes.contains_key("error.type"));
}

#[test]
fn content_is_exported_only_with_the_capture_variable() {
    let env = TestEnv::new();
    let collector = Collector::start();
    let model = env.script("m.yaml", BASH_THEN_SUBMIT);
    let r = run(
        &env,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url()),
            ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true"),
        ],
        FAST_RETRY,
        &["-m", &model],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let spans = collector.spans();
    let run_span = one(&spans, "invoke_agent tinyagent");
    let input: Value =
        serde_json::from_str(run_span.attr("gen_ai.input.messages").as_str().unwrap()).unwrap();
    assert_eq!(input[0]["role"], "user");
    assert_eq!(input[0]["parts"][0]["content"], TASK);
    assert!(run_span
        .attr("gen_ai.output.messages")
        .as_str()
        .unwrap()
        .contains("private-answer-words"));
    let bash = one(&spans, "execute_tool bash");
    assert!(bash
        .attr("gen_ai.tool.call.arguments")
        .as_str()
        .unwrap()
        .contains("private-argument-words"));
    assert!(bash
        .attr("gen_ai.tool.call.result")
        .as_str()
        .unwrap()
        .contains("TP=00-"));
}

#[test]
fn an_unreachable_collector_costs_one_warning_and_not_the_run() {
    let env = TestEnv::new();
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let model = env.script("m.yaml", BASH_THEN_SUBMIT);
    let r = run(
        &env,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)],
        FAST_RETRY,
        &["-m", &model],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let warnings = of_type(&r.events, "warning");
    assert_eq!(warnings.len(), 1, "{:?}", r.events);
    assert_eq!(
        warnings[0]["message"],
        format!("traces could not be exported to {endpoint}: could not connect")
    );
    assert_eq!(finished(&r.events)["status"], "submitted");
    assert!(!r.stderr.contains("warning"), "{}", r.stderr);

    // In human mode the same single warning is a stderr line.
    let cfg = env.write("config.yaml", FAST_RETRY);
    let out = env
        .cmd()
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .args(["-c", cfg.to_str().unwrap(), "-m", &model, TASK])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("traces could not be exported").count(),
        1,
        "{stderr}"
    );
}

#[test]
fn without_an_endpoint_nothing_is_exported_and_traceparent_passes_through() {
    let env = TestEnv::new();
    let model = env.script("m.yaml", BASH_THEN_SUBMIT);
    let traceparent = format!("00-{UPSTREAM_TRACE}-{UPSTREAM_SPAN}-01");
    let r = run(
        &env,
        &[("TRACEPARENT", &traceparent)],
        FAST_RETRY,
        &["-m", &model],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let output = of_type(&r.events, "tool.finished")[0]["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(output.contains(&format!("TP={traceparent}")), "{output}");
}

#[test]
fn a_return_to_the_primary_is_a_restore_event() {
    let env = TestEnv::new();
    let collector = Collector::start();
    let a = env.script(
        "a.yaml",
        "- error: {status: 503}\n- tool_calls:\n  - {name: bash, arguments: {command: 'true'}}\n- tool_calls:\n  - {name: submit, arguments: {output: from-a}}\n",
    );
    let b = env.script(
        "b.yaml",
        "- tool_calls:\n  - {name: bash, arguments: {command: 'true'}}\n",
    );
    let r = run(
        &env,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url())],
        &format!("{FAST_RETRY}fallback: {{switch_after: 1, cooldown: 0}}\n"),
        &["-m", &a, "--fallback-model", &b],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let spans = collector.spans();
    let run_span = one(&spans, "invoke_agent tinyagent");
    let names: Vec<&str> = run_span.events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["tinyagent.model.fallback", "tinyagent.model.restore"]
    );
    let restore = &run_span.events[1].1;
    assert_eq!(restore["from"], b.as_str());
    assert_eq!(restore["to"], a.as_str());
    assert_eq!(restore["step"], 2);
}

#[test]
fn a_subagent_is_a_child_run_inside_its_delegate_call() {
    let env = TestEnv::new();
    let collector = Collector::start();
    let child = env.script(
        "child.yaml",
        "- tool_calls:\n  - {name: list_files, arguments: {path: .}}\n- tool_calls:\n  - {name: submit, arguments: {output: report}}\n",
    );
    let parent = env.script(
        "parent.yaml",
        "- tool_calls:\n  - {name: delegate, arguments: {task: look around}}\n- tool_calls:\n  - {name: submit, arguments: {output: done}}\n",
    );
    let r = run(
        &env,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url())],
        &format!("{FAST_RETRY}subagents: {{model: '{child}', step_limit: 5}}\n"),
        &["-m", &parent],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let spans = collector.spans();
    let runs = named(&spans, "invoke_agent tinyagent");
    assert_eq!(runs.len(), 2, "{spans:#?}");
    let parent_id = r.events[0]["run_id"].as_str().unwrap();
    let (top, sub): (Vec<&FlatSpan>, Vec<&FlatSpan>) = runs
        .iter()
        .partition(|s| s.attr("tinyagent.run_id") == parent_id);
    let (top, sub) = (top[0], sub[0]);
    assert_eq!(sub.attr("tinyagent.parent_run_id"), parent_id);
    let delegate = one(&spans, "execute_tool delegate");
    assert_eq!(delegate.parent_span_id, top.span_id);
    assert_eq!(sub.parent_span_id, delegate.span_id);
    assert_eq!(sub.trace_id, top.trace_id);
    let list = one(&spans, "execute_tool list_files");
    assert_eq!(list.parent_span_id, sub.span_id);
    let child_chats = named(&spans, &format!("chat {child}"));
    assert_eq!(child_chats.len(), 2);
    assert!(child_chats.iter().all(|c| c.parent_span_id == sub.span_id));
}

#[test]
fn a_collector_that_refuses_the_export_is_one_warning_without_its_body() {
    let env = TestEnv::new();
    let refusing = crate::support::stub::Stub::start(|_, _| {
        crate::support::stub::Reply::json(
            500,
            &serde_json::json!({"message": "collector-body-words"}),
        )
    });
    let model = env.script("m.yaml", BASH_THEN_SUBMIT);
    let r = run(
        &env,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &refusing.url())],
        FAST_RETRY,
        &["-m", &model],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(refusing.count() >= 1);
    let warnings = of_type(&r.events, "warning");
    assert_eq!(warnings.len(), 1, "{:?}", r.events);
    assert_eq!(
        warnings[0]["message"],
        format!(
            "traces could not be exported to {}: HTTP 500",
            refusing.url()
        )
    );
    assert!(!r.stderr.contains("collector-body-words"));
}

#[test]
fn the_response_model_is_the_one_the_server_names() {
    // OpenAI answers a request for `gpt-5` with a dated snapshot name.
    let env = TestEnv::new();
    let collector = Collector::start();
    let stub = crate::support::stub::Stub::sequence(vec![crate::support::openai::chat_sse_submit(
        "call_1", "done",
    )]);
    let r = run(
        &env,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url()),
            ("OPENAI_BASE_URL", &format!("{}/v1", stub.url())),
            ("OPENAI_API_KEY", "sk-test-trace-0123456789"),
        ],
        "health_db: off\n",
        &["-m", "openai/gpt-5"],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let spans = collector.spans();
    let chat = one(&spans, "chat openai/gpt-5");
    assert_eq!(chat.attr("gen_ai.request.model"), "gpt-5");
    assert_eq!(chat.attr("gen_ai.response.model"), "gpt-5-2025-08-07");
}

#[test]
fn a_long_run_sends_every_span_in_batches_while_it_goes() {
    let env = TestEnv::new();
    let collector = Collector::start();
    let model = env.script(
        "m.yaml",
        "- tool_calls:\n  - {name: plan, arguments: {items: [{text: step, status: in_progress}]}}\n  usage: {input: 10, output: 2}\n  repeat: 119\n\
- tool_calls:\n  - {name: submit, arguments: {output: done}}\n",
    );
    let r = run(
        &env,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url())],
        FAST_RETRY,
        &["-m", &model, "--step-limit", "200"],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(of_type(&r.events, "warning").is_empty(), "{:?}", r.events);
    let spans = collector.spans();
    assert_eq!(named(&spans, "execute_tool plan").len(), 119);
    assert_eq!(named(&spans, &format!("chat {model}")).len(), 120);
    let run_span = one(&spans, "invoke_agent tinyagent");
    assert!(spans
        .iter()
        .all(|s| s.trace_id == run_span.trace_id && s.start_ns >= run_span.start_ns));
    // 64 spans an export by default: most went out before the end.
    assert!(
        collector.requests().len() >= 3,
        "{}",
        collector.requests().len()
    );
}

#[test]
fn an_unsampled_traceparent_is_followed_and_passed_on_unsampled() {
    let env = TestEnv::new();
    let collector = Collector::start();
    let model = env.script("m.yaml", BASH_THEN_SUBMIT);
    let traceparent = format!("00-{UPSTREAM_TRACE}-{UPSTREAM_SPAN}-00");
    let r = run(
        &env,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url()),
            ("TRACEPARENT", &traceparent),
            // The sampler follows TRACEPARENT whatever this says.
            ("OTEL_TRACES_SAMPLER", "always_on"),
        ],
        FAST_RETRY,
        &["-m", &model],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(collector.spans().is_empty(), "{:#?}", collector.spans());
    let output = of_type(&r.events, "tool.finished")[0]["output"]
        .as_str()
        .unwrap()
        .to_string();
    let prefix = format!("TP=00-{UPSTREAM_TRACE}-");
    let rest = &output[output.find(&prefix).expect("TRACEPARENT given") + prefix.len()..];
    assert!(rest[16..].starts_with("-00"), "{output}");
    assert_ne!(&rest[..16], UPSTREAM_SPAN, "the tool call's own span id");
}

#[test]
fn spans_of_a_long_step_go_out_while_it_runs() {
    let env = TestEnv::new();
    let collector = Collector::start();
    let model = env.script(
        "m.yaml",
        "- tool_calls:\n  - {name: bash, arguments: {command: 'sleep 3'}}\n- tool_calls:\n  - {name: submit, arguments: {output: done}}\n",
    );
    let r = run(
        &env,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url()),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ],
        FAST_RETRY,
        &["-m", &model],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let requests = collector.requests();
    assert!(requests.len() >= 2, "{} exports", requests.len());
    let (first, last) = (requests[0].at, requests[requests.len() - 1].at);
    assert!(
        last.duration_since(first) >= std::time::Duration::from_millis(1500),
        "the first request's span was sent during the 3 s command, not at the end"
    );
    let first_spans = crate::support::otlp::decode(&requests[0]);
    assert!(
        first_spans.iter().any(|s| s.name.starts_with("chat ")),
        "{first_spans:#?}"
    );
}

#[test]
fn a_collector_that_never_answers_costs_one_warning_and_at_most_the_flush_budget() {
    let env = TestEnv::new();
    // Accepts connections and reads, but never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let model = env.script("m.yaml", BASH_THEN_SUBMIT);
    let started = std::time::Instant::now();
    let r = run(
        &env,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)],
        FAST_RETRY,
        &["-m", &model],
    );
    let took = started.elapsed();
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(finished(&r.events)["status"], "submitted");
    let warnings = of_type(&r.events, "warning");
    assert_eq!(warnings.len(), 1, "{:?}", r.events);
    assert_eq!(
        warnings[0]["message"],
        format!("traces could not be exported to {endpoint}: timed out")
    );
    // The 2 s flush budget, not the SDK's 5 s nor a wait per batch.
    assert!(took < std::time::Duration::from_millis(4500), "{took:?}");
}

#[test]
fn spans_dropped_from_a_full_queue_cost_one_warning_that_counts_them() {
    let env = TestEnv::new();
    let collector = Collector::start();
    let model = env.script(
        "m.yaml",
        "- tool_calls:\n  - {name: plan, arguments: {items: [{text: step, status: in_progress}]}}\n  repeat: 9\n- tool_calls:\n  - {name: submit, arguments: {output: done}}\n",
    );
    let r = run(
        &env,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url()),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "1"),
        ],
        FAST_RETRY,
        &["-m", &model],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let warnings = of_type(&r.events, "warning");
    assert_eq!(warnings.len(), 1, "{:?}", r.events);
    let message = warnings[0]["message"].as_str().unwrap();
    let prefix = format!("traces could not be exported to {}: ", collector.url());
    let rest = message.strip_prefix(&prefix).expect(message);
    let (count, why) = rest.split_once(" spans dropped: ").expect(message);
    assert!(count.parse::<u32>().unwrap() >= 1, "{message}");
    assert_eq!(why, "the export queue (OTEL_BSP_MAX_QUEUE_SIZE) was full");
    assert!(!collector.spans().is_empty(), "what fitted was sent");
}
