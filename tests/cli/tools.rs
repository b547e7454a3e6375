//! Tools from the outside: the `grep` tool, and `tools: {allow, deny}`.

use serde_json::Value;

use crate::support::openai::chat_sse_submit;
use crate::support::stub::Stub;
use crate::support::{events, finished, of_type, TestEnv};

/// A JSON run of a script model; returns the exit code and the events.
fn run_script(env: &TestEnv, script: &str, args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let model = env.script("s.yaml", script);
    let out = env
        .cmd()
        .args(["-m", &model, "--json"])
        .args(args)
        .arg("do it")
        .output()
        .unwrap();
    (
        out.status.code(),
        events(&out.stdout),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tool_results(ev: &[Value]) -> Vec<(bool, String)> {
    of_type(ev, "tool.finished")
        .iter()
        .map(|e| {
            (
                e["ok"].as_bool().unwrap(),
                e["output"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn grep_finds_lines_respecting_gitignore_and_fails_softly_on_a_bad_regex() {
    let env = TestEnv::new();
    let w = env.work();
    std::fs::create_dir_all(w.join("src")).unwrap();
    std::fs::create_dir_all(w.join("build")).unwrap();
    std::fs::write(w.join(".gitignore"), "build/\n").unwrap();
    std::fs::write(w.join("src/lib.rs"), "// TODO: one\nfn x() {}\n").unwrap();
    std::fs::write(w.join("build/out.rs"), "// TODO: ignored\n").unwrap();
    std::fs::write(w.join(".env"), "TODO hidden\n").unwrap();
    let script = r#"
- tool_calls:
    - {name: grep, arguments: {pattern: "TODO"}}
    - {name: grep, arguments: {pattern: "(unclosed"}}
    - {name: grep, arguments: {pattern: "todo", case_insensitive: true, glob: "*.md"}}
- tool_calls:
    - {name: submit, arguments: {output: done}}
"#;
    let (code, ev, _) = run_script(&env, script, &[]);
    assert_eq!(code, Some(0));
    let results = tool_results(&ev);
    assert_eq!(
        results[0],
        (
            true,
            "src/lib.rs:1: // TODO: one\n[1 matching line in 1 file]\n".into()
        )
    );
    assert!(!results[1].0);
    assert!(
        results[1].1.starts_with("invalid regular expression"),
        "{}",
        results[1].1
    );
    assert_eq!(results[2], (true, "no matches".into()));
    assert_eq!(finished(&ev)["status"], "submitted");
}

/// The tool names offered in the first request to a stub.
fn offered(env: &TestEnv) -> (Option<i32>, Vec<String>, String) {
    let stub = Stub::sequence(vec![chat_sse_submit("call_1", "done")]);
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", "sk-test-tools")
        .args(["-m", "openai/gpt-5", "do it"])
        .output()
        .unwrap();
    let names = stub
        .requests()
        .first()
        .map(|r| {
            r.json()["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default();
    (
        out.status.code(),
        names,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn grep_is_offered_by_default() {
    let env = TestEnv::new();
    let (code, names, _) = offered(&env);
    assert_eq!(code, Some(0));
    for name in [
        "bash",
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "grep",
        "plan",
        "submit",
    ] {
        assert!(names.contains(&name.to_string()), "{name} in {names:?}");
    }
}

#[test]
fn allow_offers_only_those_tools_and_submit() {
    let env = TestEnv::new();
    env.user_config("tools: {allow: [read_file, grep]}\n");
    let (code, names, _) = offered(&env);
    assert_eq!(code, Some(0));
    assert_eq!(names, ["read_file", "grep", "submit"]);
}

#[test]
fn deny_removes_tools_and_a_denied_call_is_refused() {
    let env = TestEnv::new();
    env.user_config("tools: {deny: [bash, \"*_file\"]}\n");
    let (code, names, _) = offered(&env);
    assert_eq!(code, Some(0));
    assert_eq!(names, ["list_files", "grep", "plan", "submit"]);

    let script = "- tool_calls:\n    - {name: bash, arguments: {command: \"touch ran\"}}\n- tool_calls:\n    - {name: submit, arguments: {output: done}}\n";
    let (code, ev, _) = run_script(&env, script, &[]);
    assert_eq!(code, Some(0));
    assert_eq!(tool_results(&ev)[0], (false, "unknown tool 'bash'".into()));
    assert!(!env.work().join("ran").exists());
}

#[test]
fn an_unknown_tool_name_is_a_config_error_with_did_you_mean() {
    let env = TestEnv::new();
    env.user_config("tools: {deny: [write_fiel]}\n");
    let (code, _, stderr) = run_script(&env, "- text: hi\n", &[]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.starts_with("tinyagent: error: config tools.deny: unknown tool 'write_fiel' (did you mean 'write_file'?"),
        "{stderr}"
    );
    env.user_config("tools: {allow: [mcp__nodocs__*]}\n");
    let (code, _, stderr) = run_script(&env, "- text: hi\n", &[]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("no MCP server 'nodocs'"), "{stderr}");
}
