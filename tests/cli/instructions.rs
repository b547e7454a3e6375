//! Project instructions (SPEC 14): AGENTS.md files in the system prompt,
//! `--instructions FILE`, `instructions: false`, and bad files.

use serde_json::Value;

use crate::support::openai::chat_sse_submit;
use crate::support::stub::Stub;
use crate::support::{events, finished, of_type, TestEnv};

const KEY: &str = "sk-test-instructions";

/// A JSON run of `openai/gpt-5` against a stub that submits at once;
/// returns the exit code, the events and the system prompt sent.
fn run(env: &TestEnv, args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let stub = Stub::sequence(vec![chat_sse_submit("call_1", "done")]);
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", KEY)
        .args(["-m", "openai/gpt-5", "--json"])
        .args(args)
        .output()
        .unwrap();
    let system = stub
        .requests()
        .first()
        .map(|r| {
            r.json()["messages"][0]["content"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default();
    (out.status.code(), events(&out.stdout), system)
}

/// `work/` as a git repository with `work/sub/` as the working directory.
fn repo(env: &TestEnv) -> std::path::PathBuf {
    std::fs::create_dir_all(env.work().join(".git")).unwrap();
    let sub = env.work().join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    sub
}

#[test]
fn agents_files_from_the_root_down_reach_the_system_prompt() {
    let env = TestEnv::new();
    let sub = repo(&env);
    std::fs::write(env.work().join("AGENTS.md"), "Use tabs, never spaces.").unwrap();
    std::fs::write(sub.join("AGENTS.md"), "In sub/, run make check.").unwrap();
    let (code, ev, system) = run(&env, &["-C", sub.to_str().unwrap(), "do it"]);
    assert_eq!(code, Some(0));
    let root = env.work().canonicalize().unwrap();
    let used: Vec<&str> = ev[0]["instructions"]
        .as_array()
        .expect("run.started.instructions")
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    let expected = [
        root.join("AGENTS.md").display().to_string(),
        root.join("sub/AGENTS.md").display().to_string(),
    ];
    assert_eq!(used, expected);
    let a = system
        .find("Use tabs, never spaces.")
        .expect("root file in prompt");
    let b = system
        .find("In sub/, run make check.")
        .expect("sub file in prompt");
    assert!(a < b, "root first: {system}");
    assert!(system.contains(&format!("## {}", expected[0])), "{system}");
    assert!(of_type(&ev, "warning").is_empty());
}

#[test]
fn without_agents_files_there_is_no_instructions_field() {
    let env = TestEnv::new();
    let (code, ev, system) = run(&env, &["do it"]);
    assert_eq!(code, Some(0));
    assert!(ev[0].get("instructions").is_none(), "{}", ev[0]);
    assert!(!system.contains("Project instructions"));
}

#[test]
fn instructions_false_turns_them_off() {
    let env = TestEnv::new();
    std::fs::write(env.work().join("AGENTS.md"), "SECRET RULE").unwrap();
    env.user_config("instructions: false\n");
    let (code, ev, system) = run(&env, &["do it"]);
    assert_eq!(code, Some(0));
    assert!(ev[0].get("instructions").is_none());
    assert!(!system.contains("SECRET RULE"));
}

#[test]
fn an_instructions_file_replaces_the_agents_files() {
    let env = TestEnv::new();
    std::fs::write(env.work().join("AGENTS.md"), "found rule").unwrap();
    let file = env.write("mine.md", "my own rule");
    let (code, ev, system) = run(&env, &["--instructions", file.to_str().unwrap(), "do it"]);
    assert_eq!(code, Some(0));
    assert_eq!(ev[0]["instructions"][0], file.display().to_string());
    assert!(system.contains("my own rule"));
    assert!(!system.contains("found rule"));

    env.user_config(&format!("instructions: {}\n", file.display()));
    let (_, _, system) = run(&env, &["do it"]);
    assert!(system.contains("my own rule") && !system.contains("found rule"));
}

#[test]
fn a_missing_instructions_file_is_a_usage_error() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", "- text: hi\n");
    let out = env
        .cmd()
        .args(["-m", &model, "--instructions", "nope.md", "do it"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("tinyagent: error: --instructions nope.md: cannot read"),
        "{stderr}"
    );
}

#[test]
fn bad_files_cost_warnings_not_the_run() {
    let env = TestEnv::new();
    let sub = repo(&env);
    // Huge and not UTF-8 at the root, a symlink out of the repository below.
    let mut huge = b"rules \xff ".to_vec();
    huge.extend(std::iter::repeat_n(b'x', 200_000));
    std::fs::write(env.work().join("AGENTS.md"), &huge).unwrap();
    let outside = env.write("outside.md", "OUTSIDE");
    std::os::unix::fs::symlink(&outside, sub.join("AGENTS.md")).unwrap();
    let (code, ev, system) = run(&env, &["-C", sub.to_str().unwrap(), "do it"]);
    assert_eq!(code, Some(0));
    assert_eq!(finished(&ev)["status"], "submitted");
    let warnings: Vec<&str> = of_type(&ev, "warning")
        .iter()
        .map(|w| w["message"].as_str().unwrap())
        .collect();
    assert!(
        warnings.iter().any(|w| w.contains("not valid UTF-8")),
        "{warnings:?}"
    );
    assert!(
        warnings.iter().any(|w| w.contains("limited to 32 KiB")),
        "{warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("outside the repository")),
        "{warnings:?}"
    );
    assert!(!system.contains("OUTSIDE"));
    assert!(system.len() < 40 * 1024, "{}", system.len());
    assert_eq!(ev[0]["instructions"].as_array().unwrap().len(), 1);
}

#[test]
fn instructions_are_never_configuration() {
    let env = TestEnv::new();
    std::fs::write(
        env.work().join("AGENTS.md"),
        "step_limit: 1\ntools: {deny: [bash]}\ninstructions: false\n",
    )
    .unwrap();
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n    - {name: bash, arguments: {command: 'touch ran'}}\n- tool_calls:\n    - {name: submit, arguments: {output: done}}\n",
    );
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "t"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["steps"], 2);
    assert!(env.work().join("ran").exists(), "bash stayed offered");
    assert_eq!(ev[0]["instructions"].as_array().unwrap().len(), 1);
}
