//! Stdin with a task (SPEC section 1): a piped stdin given with a TASK is
//! appended to it as context; with `--resume`/`--continue` stdin is read
//! only for `-`.

use crate::support::{events, finished, read_json, TestEnv};

const SUBMIT: &str = "- tool_calls:\n    - {name: submit, arguments: {output: finished}}\n";
const HEADING: &str = "The following was piped to tinyagent on standard input:";

#[test]
fn piped_stdin_is_appended_to_the_task_as_context() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", SUBMIT);
    let traj = env.file("t.json");
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "-o", traj.to_str().unwrap()])
        .arg("explain this log")
        .write_stdin("error: disk full\nretrying\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let want =
        format!("explain this log\n\n{HEADING}\n<stdin>\nerror: disk full\nretrying\n</stdin>");
    assert_eq!(events(&out.stdout)[0]["task"], want.as_str());
    let doc = read_json(&traj);
    assert_eq!(doc["messages"][0]["role"], "user");
    assert_eq!(doc["messages"][0]["content"], want.as_str());

    // Whitespace only adds nothing; bytes that are not UTF-8 are replaced.
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "task"])
        .write_stdin(" \n\n")
        .output()
        .unwrap();
    assert_eq!(events(&out.stdout)[0]["task"], "task");
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "task"])
        .write_stdin(b"a\xffb".to_vec())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let task = events(&out.stdout)[0]["task"].as_str().unwrap().to_string();
    assert!(task.contains("<stdin>\na\u{fffd}b\n</stdin>"), "{task}");
}

#[test]
fn resume_and_continue_read_stdin_only_for_a_dash() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", SUBMIT);
    let traj = env.file("t.json");
    let path = traj.to_str().unwrap();
    env.cmd()
        .args(["-m", &model, "--json", "-o", path, "first"])
        .assert()
        .code(0);
    let out = env
        .cmd()
        .args(["--json", "--resume", path, "second"])
        .write_stdin("not for the task")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let doc = read_json(&traj);
    let last_user = doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "user")
        .unwrap()
        .clone();
    assert_eq!(last_user["content"], "second");

    let out = env
        .cmd()
        .args(["--json", "--continue", "-"])
        .write_stdin("third, from stdin")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(finished(&events(&out.stdout))["status"], "submitted");
    let out = env
        .cmd()
        .args(["--json", "--continue", "fourth"])
        .write_stdin("ignored")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    let id = finished(&ev)["run_id"].as_str().unwrap().to_string();
    let doc = read_json(
        &env.home()
            .join(format!(".local/state/tinyagent/runs/{id}.json")),
    );
    let users: Vec<&str> = doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["first", "second", "third, from stdin", "fourth"]);
}
