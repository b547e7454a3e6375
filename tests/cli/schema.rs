//! `--output-schema`: the final answer must be JSON valid against the
//! schema; invalid answers go back to the model, three in a row end the run.

use predicates::prelude::*;
use serde_json::{json, Value};

use crate::support::{events, finished, of_type, read_json, TestEnv};

const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {"answer": {"type": "integer"}, "why": {"type": "string"}},
  "required": ["answer"],
  "additionalProperties": false
}"#;

fn submit(output: &str) -> String {
    format!("- tool_calls:\n  - {{name: submit, arguments: {{output: {output}}}}}\n")
}

#[test]
fn a_valid_answer_is_printed_as_exactly_its_json() {
    let env = TestEnv::new();
    let schema = env.write("schema.json", SCHEMA);
    let model = env.script("s.yaml", &submit("{answer: 42, why: 'six times seven'}"));
    env.cmd()
        .args(["-m", &model, "--output-schema"])
        .arg(&schema)
        .arg("compute")
        .assert()
        .code(0)
        .stdout("{\"answer\":42,\"why\":\"six times seven\"}\n");
}

#[test]
fn json_events_and_the_trajectory_hold_the_json_value() {
    let env = TestEnv::new();
    let schema = env.write("schema.json", SCHEMA);
    let model = env.script("s.yaml", &submit("{answer: 7}"));
    let traj = env.file("t.json");
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "-o"])
        .arg(&traj)
        .arg("--output-schema")
        .arg(&schema)
        .arg("compute")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    let end = finished(&ev);
    assert_eq!(end["status"], "submitted");
    assert_eq!(end["output"], json!({"answer": 7}));
    assert_eq!(read_json(&traj)["output"], json!({"answer": 7}));
}

#[test]
fn an_invalid_answer_goes_back_to_the_model_with_the_errors() {
    let env = TestEnv::new();
    let schema = env.write("schema.json", SCHEMA);
    let script = format!("{}{}", submit("{answer: lots}"), submit("{answer: 3}"));
    let model = env.script("s.yaml", &script);
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "--output-schema"])
        .arg(&schema)
        .arg("compute")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    let results = of_type(&ev, "tool.finished");
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["ok"], false);
    let feedback = results[0]["output"].as_str().unwrap();
    assert!(
        feedback.contains("/answer") && feedback.contains("integer"),
        "{feedback}"
    );
    assert_eq!(results[1]["ok"], true);
    let end = finished(&ev);
    assert_eq!(end["steps"], 2);
    assert_eq!(end["output"], json!({"answer": 3}));
}

#[test]
fn a_text_answer_must_be_json_too() {
    let env = TestEnv::new();
    let schema = env.write("schema.json", SCHEMA);
    let model = env.script(
        "s.yaml",
        "- text: The answer is 42.\n- text: '{\"answer\": 42}'\n",
    );
    let traj = env.file("t.json");
    let out = env
        .cmd()
        .args(["-m", &model, "-o"])
        .arg(&traj)
        .arg("--output-schema")
        .arg(&schema)
        .arg("compute")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "{\"answer\":42}\n");
    let doc = read_json(&traj);
    assert_eq!(doc["status"], "completed");
    assert_eq!(doc["steps"], 2);
    let told: Vec<&Value> = doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user" && m["content"].as_str().unwrap().contains("not JSON"))
        .collect();
    assert_eq!(told.len(), 1, "{doc:#}");
}

#[test]
fn three_invalid_answers_in_a_row_end_the_run_with_error() {
    let env = TestEnv::new();
    let schema = env.write("schema.json", SCHEMA);
    // Of either kind: a bad submit, prose, then a bad submit again.
    let script = format!(
        "{}- text: no JSON here\n{}",
        submit("{answer: one}"),
        submit("{wrong: 1}")
    );
    let model = env.script("s.yaml", &script);
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "--output-schema"])
        .arg(&schema)
        .arg("compute")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let ev = events(&out.stdout);
    let end = finished(&ev);
    assert_eq!(end["status"], "error");
    assert_eq!(end["steps"], 3);
    assert_eq!(end["output"], Value::Null);
    assert!(
        end["error"].as_str().unwrap().contains("3 times in a row"),
        "{end}"
    );
}

#[test]
fn a_string_schema_still_prints_json() {
    let env = TestEnv::new();
    let schema = env.write(
        "schema.json",
        r#"{"type": "string", "enum": ["yes", "no"]}"#,
    );
    let model = env.script("s.yaml", &submit("'yes'"));
    env.cmd()
        .args(["-m", &model, "--output-schema"])
        .arg(&schema)
        .arg("is it?")
        .assert()
        .code(0)
        .stdout("\"yes\"\n");
}

#[test]
fn an_unusable_schema_exits_two_before_any_request() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", &submit("{answer: 1}"));
    let cases = [
        ("missing.json", None, "cannot read"),
        ("garbage.json", Some("{not json"), "not valid JSON"),
        (
            "bad-type.json",
            Some(r#"{"type": "integr"}"#),
            "not a valid JSON Schema",
        ),
        ("array.json", Some("[1, 2]"), "not a JSON Schema"),
    ];
    for (name, text, message) in cases {
        let path = match text {
            Some(text) => env.write(name, text),
            None => env.file(name),
        };
        let out = env
            .cmd()
            .args(["-m", &model, "--json", "--output-schema"])
            .arg(&path)
            .arg("t")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert!(out.stdout.is_empty(), "{name}: no events, no step.started");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(
            stderr.contains("--output-schema") && stderr.contains(message),
            "{name}: {stderr}"
        );
    }
}

#[test]
fn a_json_string_submitted_as_text_is_accepted_as_json() {
    let env = TestEnv::new();
    let schema = env.write("schema.json", SCHEMA);
    let model = env.script("s.yaml", &submit("'{\"answer\": 5}'"));
    env.cmd()
        .args(["-m", &model, "--output-schema"])
        .arg(&schema)
        .arg("t")
        .assert()
        .code(0)
        .stdout(predicate::eq("{\"answer\":5}\n"));
}
