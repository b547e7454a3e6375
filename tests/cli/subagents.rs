//! Subagents: `delegate` runs a child agent on the `subagents` model with
//! read-only tools; only its report comes back; its cost and tokens count
//! toward the parent's totals and limits; its events are marked.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::{events, finished, of_type, TestEnv};

fn delegate(task: &str) -> String {
    format!("- tool_calls:\n  - {{name: delegate, arguments: {{task: '{task}'}}}}\n  usage: {{input: 1000, output: 100}}\n  cost: 0.1\n")
}

const PARENT_SUBMIT: &str =
    "- tool_calls:\n  - {name: submit, arguments: {output: done}}\n  usage: {input: 1000, output: 100}\n  cost: 0.1\n";

const CHILD: &str = "- text: Reading the notes.\n  tool_calls:\n  - {name: read_file, arguments: {path: notes.txt}}\n  usage: {input: 10, output: 1}\n  cost: 0.01\n\
- tool_calls:\n  - {name: submit, arguments: {output: 'REPORT: the secret is 42'}}\n  usage: {input: 10, output: 1}\n  cost: 0.01\n";

fn setup(env: &TestEnv, child: &str, extra: &str) -> (String, std::path::PathBuf) {
    std::fs::write(env.work().join("notes.txt"), "the secret is 42\n").unwrap();
    let child = env.script("child.yaml", child);
    let config = env.write(
        "c.yaml",
        &format!("subagents: {{model: '{child}', step_limit: 5}}\n{extra}"),
    );
    (child, config)
}

#[test]
fn a_delegated_task_returns_only_the_childs_report_with_totals_summed() {
    let env = TestEnv::new();
    let (child, config) = setup(&env, CHILD, "");
    let parent = env.script(
        "parent.yaml",
        &format!("{}{PARENT_SUBMIT}", delegate("Find the secret")),
    );
    let out = env
        .cmd()
        .args(["-m", &parent, "--json", "-c"])
        .arg(&config)
        .arg("what is the secret?")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ev = events(&out.stdout);
    let parent_id = ev[0]["run_id"].as_str().unwrap().to_string();

    // The parent's own stream: seq 1, 2, 3 ... and no parent_run_id.
    let own: Vec<&Value> = ev
        .iter()
        .filter(|e| e["run_id"] == parent_id.as_str())
        .collect();
    for (i, e) in own.iter().enumerate() {
        assert_eq!(e["seq"], i as u64 + 1, "{e}");
        assert!(e.get("parent_run_id").is_none());
    }
    // The child's events: its own run id and seq, marked with the parent.
    let kids: Vec<&Value> = ev
        .iter()
        .filter(|e| e["run_id"] != parent_id.as_str())
        .collect();
    assert!(!kids.is_empty());
    let child_id = kids[0]["run_id"].as_str().unwrap();
    for (i, e) in kids.iter().enumerate() {
        assert_eq!(e["run_id"], child_id);
        assert_eq!(e["parent_run_id"], parent_id.as_str());
        assert_eq!(e["seq"], i as u64 + 1, "{e}");
    }
    // One run.started (first) and one run.finished (last), both the
    // parent's: the child's start and end are subagent.* events.
    assert_eq!(of_type(&ev, "run.started").len(), 1);
    assert_eq!(of_type(&ev, "run.finished").len(), 1);
    assert_eq!(ev[0]["type"], "run.started");
    assert!(kids
        .iter()
        .all(|e| e["type"] != "run.started" && e["type"] != "run.finished"));
    let started = of_type(&ev, "subagent.started");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["run_id"], parent_id.as_str());
    assert!(started[0].get("parent_run_id").is_none());
    assert_eq!(started[0]["step"], 1);
    assert_eq!(started[0]["child_run_id"], child_id);
    assert_eq!(started[0]["model"], child.as_str());
    assert_eq!(started[0]["task"], "Find the secret");
    let ended = of_type(&ev, "subagent.finished");
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0]["run_id"], parent_id.as_str());
    assert_eq!(ended[0]["step"], 1);
    assert_eq!(ended[0]["child_run_id"], child_id);
    assert_eq!(ended[0]["status"], "submitted");
    assert_eq!(ended[0]["steps"], 2);
    assert!((ended[0]["cost_usd"].as_f64().unwrap() - 0.02).abs() < 1e-9);
    assert_eq!(ended[0]["output"], "REPORT: the secret is 42");
    // In order: the start before the child's first event, the end after its
    // last, then the delegate call's result.
    let pos = |pred: &dyn Fn(&Value) -> bool| ev.iter().position(pred).unwrap();
    let first_kid = pos(&|e| e["run_id"] == child_id);
    let last_kid = ev.iter().rposition(|e| e["run_id"] == child_id).unwrap();
    assert!(pos(&|e| e["type"] == "subagent.started") < first_kid);
    let end_at = pos(&|e| e["type"] == "subagent.finished");
    assert!(end_at > last_kid);
    assert!(end_at < pos(&|e| e["type"] == "tool.finished" && e["tool"] == "delegate"));
    let child_tools: Vec<&&Value> = kids
        .iter()
        .filter(|e| e["type"] == "tool.finished")
        .collect();
    assert_eq!(child_tools[0]["tool"], "read_file");

    // Only the report comes back to the parent.
    let results: Vec<&&Value> = own
        .iter()
        .filter(|e| e["type"] == "tool.finished")
        .collect();
    assert_eq!(results[0]["tool"], "delegate");
    assert_eq!(results[0]["ok"], true);
    assert_eq!(results[0]["output"], "REPORT: the secret is 42");

    let end = finished(&ev);
    assert_eq!(end["run_id"], parent_id.as_str());
    assert_eq!(end["status"], "submitted");
    assert_eq!(end["steps"], 2, "the child's steps are its own");
    assert_eq!(end["input_tokens"], 2020);
    assert_eq!(end["output_tokens"], 202);
    assert!(
        (end["cost_usd"].as_f64().unwrap() - 0.22).abs() < 1e-9,
        "{end}"
    );
}

#[test]
fn the_child_cannot_change_files() {
    let env = TestEnv::new();
    let child = "- tool_calls:\n  - {name: write_file, arguments: {path: x.txt, content: hi}}\n  - {name: bash, arguments: {command: 'touch y.txt'}}\n\
- tool_calls:\n  - {name: submit, arguments: {output: could not}}\n";
    let (_, config) = setup(&env, child, "");
    let parent = env.script(
        "parent.yaml",
        &format!("{}{PARENT_SUBMIT}", delegate("write x")),
    );
    let out = env
        .cmd()
        .args(["-m", &parent, "--json", "-c"])
        .arg(&config)
        .arg("t")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    let refused: Vec<&Value> = ev
        .iter()
        .filter(|e| e.get("parent_run_id").is_some() && e["type"] == "tool.finished")
        .collect();
    assert_eq!(refused.len(), 3);
    assert_eq!(refused[0]["ok"], false);
    assert_eq!(refused[1]["ok"], false);
    assert!(!env.work().join("x.txt").exists());
    assert!(!env.work().join("y.txt").exists());
}

#[test]
fn the_childs_cost_counts_toward_the_parents_limit() {
    let env = TestEnv::new();
    // Each child reply costs $0.05; the parent may spend $0.2 in all.
    let child = "- tool_calls:\n  - {name: list_files, arguments: {path: .}}\n  cost: 0.05\n";
    let (_, config) = setup(&env, child, "");
    let parent = env.script(
        "parent.yaml",
        &format!("{}{PARENT_SUBMIT}", delegate("look around")),
    );
    let out = env
        .cmd()
        .args(["-m", &parent, "--json", "--cost-limit", "0.2", "-c"])
        .arg(&config)
        .arg("t")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let ev = events(&out.stdout);
    let end = finished(&ev);
    assert_eq!(end["status"], "cost_limit");
    assert_eq!(end["steps"], 1);
    let cost = end["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - 0.2).abs() < 1e-9,
        "0.1 + two child replies of 0.05: {cost}"
    );
    let child_end = of_type(&ev, "subagent.finished");
    assert_eq!(child_end.len(), 1);
    assert_eq!(child_end[0]["status"], "cost_limit");
    assert_eq!(child_end[0]["output"], Value::Null);
    assert_eq!(of_type(&ev, "run.finished").len(), 1);
}

#[test]
fn a_child_that_fails_reports_its_status_to_the_parent() {
    let env = TestEnv::new();
    let child = "- tool_calls:\n  - {name: list_files, arguments: {path: .}}\n";
    let (_, config) = setup(&env, child, "");
    let parent = env.script(
        "parent.yaml",
        &format!("{}{PARENT_SUBMIT}", delegate("loop forever")),
    );
    let out = env
        .cmd()
        .args(["-m", &parent, "--json", "-c"])
        .arg(&config)
        .arg("t")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    let result = ev
        .iter()
        .find(|e| e["type"] == "tool.finished" && e["tool"] == "delegate")
        .unwrap();
    assert_eq!(result["ok"], false);
    assert!(
        result["output"]
            .as_str()
            .unwrap()
            .contains("step_limit after 5 steps"),
        "{result}"
    );
}

#[test]
fn delegate_exists_only_with_subagents_configured() {
    let env = TestEnv::new();
    let parent = env.script("parent.yaml", &format!("{}{PARENT_SUBMIT}", delegate("x")));
    let out = env
        .cmd()
        .args(["-m", &parent, "--json", "t"])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    let result = of_type(&ev, "tool.finished")[0];
    assert_eq!(result["ok"], false);
    assert!(result["output"]
        .as_str()
        .unwrap()
        .contains("unknown tool 'delegate'"));
    assert!(ev.iter().all(|e| e.get("parent_run_id").is_none()));
}

#[test]
fn bad_subagent_config_exits_two() {
    let env = TestEnv::new();
    let parent = env.script("parent.yaml", PARENT_SUBMIT);
    let child = env.script("child.yaml", CHILD);
    let cases: BTreeMap<&str, String> = BTreeMap::from([
        (
            "unknown provider",
            "subagents: {model: nope/x}\n".to_string(),
        ),
        ("no model", "subagents: {step_limit: 3}\n".to_string()),
        (
            "missing key",
            "subagents: {model: openai/gpt-5-mini}\n".to_string(),
        ),
        (
            "bad fallback",
            format!("subagents: {{model: '{child}', fallback_models: ['{child}']}}\n"),
        ),
        (
            "unknown key",
            "subagents: {model: x/y, steps: 3}\n".to_string(),
        ),
    ]);
    for (name, yaml) in cases {
        let config = env.write("bad.yaml", &yaml);
        let out = env
            .cmd()
            .args(["-m", &parent, "--json", "-c"])
            .arg(&config)
            .arg("t")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert!(out.stdout.is_empty(), "{name}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains("subagents"), "{name}: {stderr}");
    }
}

#[test]
fn the_human_view_shows_a_subagent_as_one_line_at_each_end() {
    let env = TestEnv::new();
    let (child, config) = setup(&env, CHILD, "");
    let parent = env.script(
        "parent.yaml",
        &format!("{}{PARENT_SUBMIT}", delegate("Find the secret")),
    );
    let out = env
        .cmd()
        .args(["-m", &parent, "-c"])
        .arg(&config)
        .arg("what is the secret?")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("subagent ({child}): Find the secret")),
        "{stderr}"
    );
    assert!(
        stderr.contains("subagent submitted after 2 steps · $0.0200"),
        "{stderr}"
    );
    // The child's tool line is indented under its start.
    assert!(stderr.contains("  ✓ read_file"), "{stderr}");
    // One summary line: the parent's.
    assert_eq!(stderr.matches("submitted after").count(), 2, "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");
}

/// The child's `tool.finished` events (marked with a `parent_run_id`).
fn child_tool_results(ev: &[Value]) -> Vec<(String, bool, String)> {
    ev.iter()
        .filter(|e| e["type"] == "tool.finished" && e.get("parent_run_id").is_some())
        .filter(|e| e["tool"] != "submit")
        .map(|e| {
            (
                e["tool"].as_str().unwrap().to_string(),
                e["ok"].as_bool().unwrap(),
                e["output"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn config_tools_deny_and_allow_limit_the_subagents_tools_too() {
    // The child tries read_file, then grep, then reports.
    let child = "- tool_calls:\n  - {name: read_file, arguments: {path: notes.txt}}\n\
- tool_calls:\n  - {name: grep, arguments: {pattern: secret}}\n\
- tool_calls:\n  - {name: submit, arguments: {output: 'REPORT'}}\n";
    let parent_yaml = format!("{}{PARENT_SUBMIT}", delegate("Find the secret"));
    for (tools, read_ok, grep_ok) in [
        ("tools: {deny: [read_file]}\n", false, true),
        ("tools: {allow: [delegate, bash, grep]}\n", false, true),
        ("tools: {deny: [grep]}\n", true, false),
        ("", true, true),
    ] {
        let env = TestEnv::new();
        let (_, config) = setup(&env, child, tools);
        let parent = env.script("parent.yaml", &parent_yaml);
        let out = env
            .cmd()
            .args(["-m", &parent, "--json", "-c"])
            .arg(&config)
            .arg("what is the secret?")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{tools}");
        let ev = events(&out.stdout);
        let results = child_tool_results(&ev);
        assert_eq!(results.len(), 2, "{tools}: {results:?}");
        assert_eq!(results[0].0, "read_file");
        assert_eq!(results[0].1, read_ok, "{tools}: {results:?}");
        assert_eq!(results[1].0, "grep");
        assert_eq!(results[1].1, grep_ok, "{tools}: {results:?}");
        for (tool, ok, output) in &results {
            if *ok {
                assert!(output.contains("secret is 42"), "{tool}: {output}");
            } else {
                assert!(output.contains("unknown tool"), "{tool}: {output}");
            }
        }
    }
}
