//! Hooks from config: stop hooks can send the agent back to work; pre-tool
//! hooks can block a call; both get JSON on stdin.

use serde_json::Value;

use crate::support::{events, finished, of_type, read_json, TestEnv};

fn submit(output: &str) -> String {
    format!("- tool_calls:\n  - {{name: submit, arguments: {{output: {output}}}}}\n")
}

fn hooks(env: &TestEnv, yaml: &str) -> std::path::PathBuf {
    env.write("hooks.yaml", &format!("hooks:\n{yaml}"))
}

#[test]
fn a_failing_stop_hook_sends_the_agent_back_once_then_passes() {
    let env = TestEnv::new();
    let config = hooks(
        &env,
        "  stop:\n    - command: 'test -f .checked || { touch .checked; echo \"2 tests failed: fix parse()\"; exit 1; }'\n",
    );
    let model = env.script(
        "s.yaml",
        &format!("{}{}", submit("first try"), submit("fixed")),
    );
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "-c"])
        .arg(&config)
        .arg("t")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    let results = of_type(&ev, "tool.finished");
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["ok"], false);
    let told = results[0]["output"].as_str().unwrap();
    assert!(
        told.contains("2 tests failed: fix parse()") && told.contains("exit 1"),
        "{told}"
    );
    assert_eq!(results[1]["ok"], true);
    let end = finished(&ev);
    assert_eq!(end["status"], "submitted");
    assert_eq!(end["output"], "fixed");
    assert_eq!(end["steps"], 2);
}

#[test]
fn a_stop_hook_also_guards_a_plain_text_answer_and_sees_it_on_stdin() {
    let env = TestEnv::new();
    let seen = env.file("stop.json");
    let config = hooks(
        &env,
        &format!(
            "  stop:\n    - command: 'cat > {}; test -f .again || {{ touch .again; exit 2; }}'\n",
            seen.display()
        ),
    );
    let model = env.script("s.yaml", "- text: all done\n- text: really done\n");
    let traj = env.file("t.json");
    env.cmd()
        .args(["-m", &model, "-c"])
        .arg(&config)
        .arg("-o")
        .arg(&traj)
        .arg("t")
        .assert()
        .code(0)
        .stdout("really done\n");
    let payload = read_json(&seen);
    assert_eq!(payload["status"], "completed");
    assert_eq!(payload["output"], "really done");
    let doc = read_json(&traj);
    let messages = doc["messages"].as_array().unwrap();
    let nudges: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "user" && m["content"].as_str().unwrap().contains("stop hook"))
        .collect();
    assert_eq!(nudges.len(), 1);
}

#[test]
fn a_stop_hook_that_always_fails_cannot_loop_forever() {
    let env = TestEnv::new();
    let config = hooks(&env, "  stop:\n    - command: 'echo never happy; exit 1'\n");
    let model = env.script("s.yaml", &submit("answer"));
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "-c"])
        .arg(&config)
        .arg("t")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    let end = finished(&ev);
    assert_eq!(end["status"], "submitted");
    assert_eq!(
        end["steps"], 4,
        "three refused rounds, then the answer stands"
    );
    let warnings = of_type(&ev, "warning");
    assert!(warnings.iter().any(|w| w["message"]
        .as_str()
        .unwrap()
        .contains("stop hooks failed 3 times")));
}

#[test]
fn a_pre_tool_hook_blocks_a_command_and_the_model_gets_its_message() {
    let env = TestEnv::new();
    let config = hooks(
        &env,
        "  pre_tool:\n    - command: 'if grep -q forbidden; then echo \"no touching forbidden files\"; exit 1; fi'\n",
    );
    let model = env.script(
        "s.yaml",
        &format!(
            "- tool_calls:\n  - {{name: bash, arguments: {{command: 'touch forbidden'}}}}\n  - {{name: bash, arguments: {{command: 'touch allowed'}}}}\n{}",
            submit("ok")
        ),
    );
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "-c"])
        .arg(&config)
        .arg("t")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        !env.work().join("forbidden").exists(),
        "the blocked command must not run"
    );
    assert!(env.work().join("allowed").exists());
    let ev = events(&out.stdout);
    let results = of_type(&ev, "tool.finished");
    assert_eq!(results[0]["ok"], false);
    let told = results[0]["output"].as_str().unwrap();
    assert!(
        told.contains("blocked") && told.contains("no touching forbidden files"),
        "{told}"
    );
    assert_eq!(results[1]["ok"], true);
}

#[test]
fn tool_hooks_receive_the_call_as_json() {
    let env = TestEnv::new();
    let pre = env.file("pre.json");
    let post = env.file("post.json");
    let config = hooks(
        &env,
        &format!(
            "  pre_tool:\n    - command: 'cat > {}'\n  post_tool:\n    - command: 'cat > {}; echo post says hi; exit 1'\n",
            pre.display(),
            post.display()
        ),
    );
    let model = env.script(
        "s.yaml",
        &format!(
            "- tool_calls:\n  - {{id: call_7, name: bash, arguments: {{command: 'echo out'}}}}\n{}",
            submit("ok")
        ),
    );
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "-c"])
        .arg(&config)
        .arg("t")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let pre = read_json(&pre);
    assert_eq!(pre["tool"], "bash");
    assert_eq!(pre["arguments"]["command"], "echo out");
    assert_eq!(pre["call_id"], "call_7");
    let post = read_json(&post);
    assert_eq!(post["call_id"], "call_7");
    assert_eq!(post["ok"], true);
    assert_eq!(post["output"], "out\n");
    // A failing post-tool hook's message is added to the result.
    let ev = events(&out.stdout);
    let result = of_type(&ev, "tool.finished")[0];
    assert_eq!(result["ok"], true);
    assert!(
        result["output"].as_str().unwrap().contains("post says hi"),
        "{result}"
    );
}
