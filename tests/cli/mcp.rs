//! MCP servers: tools offered as `mcp__<server>__<tool>`, called over stdio
//! (a small stdlib Python server speaking newline-delimited JSON-RPC),
//! servers that fail to start or die mid-run, and servers stopped at the end.

use predicates::prelude::*;
use serde_json::Value;

use crate::support::{events, finished, of_type, TestEnv};

/// The test server (see its docstring for its tools and modes).
fn server() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/cli/support/mcp_server.py"
    )
    .to_string()
}

/// A config file with one server per `(name, extra args, env map)`.
fn config(env: &TestEnv, servers: &[(&str, &str)]) -> String {
    let mut yaml = String::from("mcp_servers:\n");
    for (name, rest) in servers {
        yaml.push_str(&format!(
            "  {name}: {{command: python3, args: [{}{rest}}}\n",
            server()
        ));
    }
    env.write("mcp.yaml", &yaml).display().to_string()
}

/// `tool.finished` events by tool name, in order.
fn finished_tools<'a>(ev: &'a [Value], tool: &str) -> Vec<&'a Value> {
    of_type(ev, "tool.finished")
        .into_iter()
        .filter(|e| e["tool"] == tool)
        .collect()
}

#[test]
fn an_mcp_tool_is_called_and_its_text_comes_back() {
    let env = TestEnv::new();
    let cfg = config(&env, &[("docs", "], env: {TOKEN_ENV: DOCS_TOKEN}")]);
    let model = env.script(
        "s.yaml",
        r#"- tool_calls:
  - {name: mcp__docs__echo, arguments: {text: hello}}
  - {name: mcp__docs__env, arguments: {name: TOKEN_ENV}}
  - {name: mcp__docs__cwd, arguments: {}}
  - {name: mcp__docs__picture, arguments: {}}
  - {name: mcp__docs__fail, arguments: {}}
- tool_calls:
  - {name: submit, arguments: {output: done}}
"#,
    );
    let out = env
        .cmd()
        .env("DOCS_TOKEN", "copied-value")
        .args(["-c", &cfg, "-m", &model, "--json", "use the docs"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ev = events(&out.stdout);
    assert!(of_type(&ev, "warning").is_empty(), "{ev:?}");
    let echo = finished_tools(&ev, "mcp__docs__echo");
    assert_eq!(echo[0]["ok"], true);
    assert_eq!(echo[0]["output"], "echo: hello");
    // `env: {TOKEN_ENV: DOCS_TOKEN}` sets the server's TOKEN_ENV to our $DOCS_TOKEN.
    assert_eq!(
        finished_tools(&ev, "mcp__docs__env")[0]["output"],
        "copied-value"
    );
    // The server runs in the run's working directory.
    let cwd = finished_tools(&ev, "mcp__docs__cwd")[0]["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        std::path::PathBuf::from(cwd),
        env.work().canonicalize().unwrap()
    );
    let picture = finished_tools(&ev, "mcp__docs__picture");
    assert_eq!(
        picture[0]["output"],
        "a red dot\n[image content (image/png) not shown]"
    );
    let fail = finished_tools(&ev, "mcp__docs__fail");
    assert_eq!(fail[0]["ok"], false);
    assert_eq!(fail[0]["output"], "this tool always fails");
    assert_eq!(finished(&ev)["status"], "submitted");
}

#[test]
fn a_server_that_fails_to_start_is_a_warning_and_the_run_goes_on() {
    let env = TestEnv::new();
    let cfg = config(&env, &[("good", "]"), ("broken", ", --die-at-start]")]);
    let cfg_missing = env.write(
        "missing.yaml",
        "mcp_servers:\n  gone: {command: /nonexistent/mcp-server}\n",
    );
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: mcp__broken__echo, arguments: {text: x}}\n  - {name: mcp__good__echo, arguments: {text: y}}\n- tool_calls:\n  - {name: submit, arguments: {output: done}}\n",
    );
    let out = env
        .cmd()
        .args([
            "-c",
            &cfg,
            "-c",
            cfg_missing.to_str().unwrap(),
            "-m",
            &model,
            "--json",
            "t",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    let warnings: Vec<String> = of_type(&ev, "warning")
        .iter()
        .map(|w| w["message"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    let broken = warnings
        .iter()
        .find(|w| w.contains("'broken'"))
        .expect("broken warning");
    assert!(
        broken.contains("missing database"),
        "the server's stderr is quoted: {broken}"
    );
    let gone = warnings
        .iter()
        .find(|w| w.contains("'gone'"))
        .expect("gone warning");
    assert!(gone.contains("/nonexistent/mcp-server"), "{gone}");
    // The warnings come before the first step.
    let first_step = ev.iter().position(|e| e["type"] == "step.started").unwrap();
    assert!(ev.iter().position(|e| e["type"] == "warning").unwrap() < first_step);
    assert_eq!(finished_tools(&ev, "mcp__broken__echo")[0]["ok"], false);
    assert_eq!(
        finished_tools(&ev, "mcp__good__echo")[0]["output"],
        "echo: y"
    );
    assert_eq!(finished(&ev)["status"], "submitted");
}

#[test]
fn a_server_that_dies_mid_run_is_withdrawn_with_a_warning() {
    let env = TestEnv::new();
    let cfg = config(&env, &[("t", "]")]);
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: mcp__t__echo, arguments: {text: before}}\n  - {name: mcp__t__crash, arguments: {}}\n- tool_calls:\n  - {name: mcp__t__echo, arguments: {text: after}}\n- tool_calls:\n  - {name: submit, arguments: {output: survived}}\n",
    );
    let out = env
        .cmd()
        .args(["-c", &cfg, "-m", &model, "--json", "t"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    let echo = finished_tools(&ev, "mcp__t__echo");
    assert_eq!(echo[0]["output"], "echo: before");
    assert_eq!(echo[1]["ok"], false);
    assert!(
        echo[1]["output"]
            .as_str()
            .unwrap()
            .contains("no longer running"),
        "{}",
        echo[1]
    );
    assert_eq!(finished_tools(&ev, "mcp__t__crash")[0]["ok"], false);
    let warnings = of_type(&ev, "warning");
    assert_eq!(warnings.len(), 1, "one warning for one death: {warnings:?}");
    let message = warnings[0]["message"].as_str().unwrap();
    assert!(
        message.contains("'t' stopped") && message.contains("withdrawn"),
        "{message}"
    );
    // Reported before the model's next step, not after the run.
    let warning_at = ev.iter().position(|e| e["type"] == "warning").unwrap();
    let second_step = ev
        .iter()
        .position(|e| e["type"] == "step.started" && e["step"] == 2)
        .unwrap();
    assert!(warning_at < second_step);
    assert_eq!(finished(&ev)["output"], "survived");
}

#[test]
fn warnings_are_printed_on_stderr_in_human_mode() {
    let env = TestEnv::new();
    let cfg = config(&env, &[("broken", ", --die-at-start]")]);
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: ok}}\n",
    );
    env.cmd()
        .args(["-c", &cfg, "-m", &model, "t"])
        .assert()
        .success()
        .stdout("ok\n")
        .stderr(predicate::str::contains(
            "warning: MCP server 'broken' not started",
        ));
}

#[test]
fn servers_are_stopped_when_the_run_ends() {
    let env = TestEnv::new();
    let cfg = config(&env, &[("t", "]")]);
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: mcp__t__pid, arguments: {}}\n- tool_calls:\n  - {name: submit, arguments: {output: ok}}\n",
    );
    let out = env
        .cmd()
        .args(["-c", &cfg, "-m", &model, "--json", "t"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    let pid = finished_tools(&ev, "mcp__t__pid")[0]["output"]
        .as_str()
        .unwrap()
        .to_string();
    for _ in 0..100 {
        if gone(&pid) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(gone(&pid), "MCP server {pid} outlived the run");
}

#[test]
fn an_unset_env_source_is_a_warning_naming_the_variables_only() {
    let env = TestEnv::new();
    let cfg = config(&env, &[("docs", "], env: {TOKEN_ENV: DOCS_TOKEN_UNSET}")]);
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: ok}}\n",
    );
    let out = env
        .cmd()
        .args(["-c", &cfg, "-m", &model, "--json", "t"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    let warnings = of_type(&ev, "warning");
    assert_eq!(warnings.len(), 1);
    let message = warnings[0]["message"].as_str().unwrap();
    assert!(
        message.contains("TOKEN_ENV") && message.contains("DOCS_TOKEN_UNSET"),
        "{message}"
    );
}

/// Whether `pid` is gone (or a zombie waiting for its reaper).
fn gone(pid: &str) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.is_empty()
        || stat
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with(['Z', 'X']))
}

#[test]
fn servers_die_with_a_killed_agent() {
    use std::io::BufRead;
    let env = TestEnv::new();
    let cfg = config(&env, &[("t", "]")]);
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: mcp__t__pid, arguments: {}}\n- tool_calls:\n  - {name: bash, arguments: {command: 'sleep 30'}}\n",
    );
    let mut child = env
        .std_cmd()
        .args(["-c", &cfg, "-m", &model, "--json", "t"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut pid = None;
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if event["type"] == "tool.finished" && event["tool"] == "mcp__t__pid" {
            pid = event["output"].as_str().map(str::to_string);
            break;
        }
    }
    let pid = pid.expect("the server's pid");
    assert!(!gone(&pid));
    child.kill().unwrap(); // SIGKILL: no chance to shut servers down politely
    child.wait().unwrap();
    for _ in 0..100 {
        if gone(&pid) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(gone(&pid), "MCP server {pid} outlived the killed agent");
}

#[test]
fn tools_are_sent_to_the_model_with_their_schema_and_withdrawn_after_a_death() {
    use crate::support::openai::{chat_sse_submit, chat_sse_tool_call};
    use crate::support::stub::Stub;
    let env = TestEnv::new();
    let cfg = config(&env, &[("t", "]")]);
    let stub = Stub::sequence(vec![
        chat_sse_tool_call("call_1", "mcp__t__crash", "{}"),
        chat_sse_submit("call_2", "done"),
    ]);
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", "sk-test")
        .args(["-c", &cfg, "-m", "openai/gpt-5", "--json", "t"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = stub.requests();
    assert_eq!(requests.len(), 2);
    let tool = |i: usize, name: &str| -> Option<Value> {
        requests[i].json()["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["function"]["name"] == name)
            .cloned()
    };
    let echo = tool(0, "mcp__t__echo").expect("offered in the first request");
    assert_eq!(echo["function"]["description"], "Echo the given text back.");
    assert_eq!(
        echo["function"]["parameters"]["required"],
        serde_json::json!(["text"])
    );
    assert_eq!(
        echo["function"]["parameters"]["properties"]["text"]["type"],
        "string"
    );
    assert!(
        tool(1, "mcp__t__echo").is_none(),
        "withdrawn after the server died"
    );
    assert!(tool(1, "bash").is_some());
}

#[test]
fn a_server_that_exits_between_calls_is_noticed() {
    let env = TestEnv::new();
    let cfg = config(&env, &[("t", "]")]);
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: mcp__t__quit, arguments: {}}\n- tool_calls:\n  - {name: bash, arguments: {command: 'sleep 0.3'}}\n- tool_calls:\n  - {name: mcp__t__echo, arguments: {text: x}}\n- tool_calls:\n  - {name: submit, arguments: {output: ok}}\n",
    );
    let out = env
        .cmd()
        .args(["-c", &cfg, "-m", &model, "--json", "t"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    assert_eq!(finished_tools(&ev, "mcp__t__quit")[0]["output"], "bye");
    let warnings = of_type(&ev, "warning");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0]["message"]
        .as_str()
        .unwrap()
        .contains("'t' stopped"));
    // Noticed while the server was idle, before the model's next request.
    let warning_at = ev.iter().position(|e| e["type"] == "warning").unwrap();
    let step3 = ev
        .iter()
        .position(|e| e["type"] == "step.started" && e["step"] == 3)
        .unwrap();
    assert!(warning_at < step3);
    let echo = finished_tools(&ev, "mcp__t__echo");
    assert_eq!(echo[0]["ok"], false);
    assert_eq!(finished(&ev)["status"], "submitted");
}

#[test]
fn hostile_server_messages_fail_the_call_not_the_run() {
    // A result nested 100 000 arrays deep (unreadable: never answered), a
    // line that is not JSON (skipped), and a 40 MB result line (past the
    // 16 MiB bound on one message: the server is no longer read). Each
    // costs a call, never the run.
    let env = TestEnv::new();
    let cfg = config(&env, &[("docs", "], tool_timeout: 2s")]);
    let model = env.script(
        "s.yaml",
        r#"- tool_calls:
  - {name: mcp__docs__deep, arguments: {depth: 100000}}
- tool_calls:
  - {name: mcp__docs__garbage, arguments: {}}
- tool_calls:
  - {name: mcp__docs__echo, arguments: {text: still here}}
- tool_calls:
  - {name: mcp__docs__huge, arguments: {mb: 40}}
- tool_calls:
  - {name: submit, arguments: {output: done}}
"#,
    );
    let out = env
        .cmd()
        .args([
            "-c",
            &cfg,
            "-m",
            &model,
            "--json",
            "--time-limit",
            "60s",
            "go",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let ev = events(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{ev:?}");
    assert_eq!(finished(&ev)["status"], "submitted");
    let deep = finished_tools(&ev, "mcp__docs__deep");
    assert_eq!(deep[0]["ok"], false, "{deep:?}");
    assert!(
        deep[0]["output"]
            .as_str()
            .unwrap()
            .contains("no answer within 2s"),
        "{deep:?}"
    );
    let garbage = finished_tools(&ev, "mcp__docs__garbage");
    assert_eq!(garbage[0]["output"], "after the garbage", "{garbage:?}");
    let echo = finished_tools(&ev, "mcp__docs__echo");
    assert_eq!(echo[0]["output"], "echo: still here");
    let huge = finished_tools(&ev, "mcp__docs__huge");
    assert_eq!(huge[0]["ok"], false, "{huge:?}");
    assert!(
        huge[0]["output"].as_str().unwrap().contains("over 16 MiB"),
        "{huge:?}"
    );
    let warnings = of_type(&ev, "warning");
    assert!(
        warnings
            .iter()
            .any(|w| w["message"].as_str().unwrap().contains("over 16 MiB")),
        "{warnings:?}"
    );
}

#[test]
fn a_bad_tool_timeout_is_a_setup_error() {
    let env = TestEnv::new();
    let cfg = config(&env, &[("docs", "], tool_timeout: 0")]);
    let model = env.script("s.yaml", "- text: hi\n");
    let out = env
        .cmd()
        .args(["-c", &cfg, "-m", &model, "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mcp_servers.docs.tool_timeout"), "{err}");
}
