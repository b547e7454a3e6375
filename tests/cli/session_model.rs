//! `/model SPEC` in an interactive session (SPEC 14, 20): the next task
//! and every later one run with SPEC as their primary, in the same
//! conversation; a SPEC that `-m` would refuse is one error line and
//! changes nothing.

use std::path::Path;

use crate::interactive::{exit_code, runs, spawn};
use crate::support::{read_json, TestEnv};

#[test]
fn model_with_a_spec_switches_the_next_task_and_a_bad_one_is_an_error_line() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- text: from a\n");
    let b = env.script("b.yaml", "- text: from b\n");
    let answers = env.file("answers.md");
    let mut s = spawn(&env, &["-m", &a], &answers);
    s.exp_string("> ").unwrap();
    s.send_line("first task").unwrap();
    s.exp_string("completed after 1 step").unwrap();
    s.exp_string("> ").unwrap();

    s.send_line("/model nope/x").unwrap();
    s.exp_string("tinyagent: error: /model: ").unwrap();
    s.exp_string("unknown provider").unwrap();
    s.exp_string("> ").unwrap();
    s.send_line("/model").unwrap();
    s.exp_string(&format!("chain:  {a}")).unwrap();
    s.exp_string("> ").unwrap();

    s.send_line(&format!("/model {b}")).unwrap();
    s.exp_string(&format!("model: {b} (from the next task on)"))
        .unwrap();
    s.exp_string("> ").unwrap();
    s.send_line("/model").unwrap();
    s.exp_string(&format!("chain:  {b}")).unwrap();
    s.exp_string("> ").unwrap();
    s.send_line("second task").unwrap();
    s.exp_string("completed after 2 steps").unwrap();
    s.exp_string("> ").unwrap();
    // After /clear, a new conversation keeps the switched model.
    s.send_line("/clear").unwrap();
    s.exp_string("> ").unwrap();
    s.send_line("third task").unwrap();
    s.exp_string("completed after 1 step").unwrap();
    s.exp_string("> ").unwrap();
    s.send_line("exit").unwrap();
    assert_eq!(exit_code(&mut s), 0);

    let text = std::fs::read_to_string(&answers).unwrap();
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        ["from a", "from b", "from b"]
    );
    let entries = runs(&env);
    assert_eq!(entries.len(), 3);
    let docs: Vec<_> = entries
        .iter()
        .map(|e| read_json(Path::new(e["path"].as_str().unwrap())))
        .collect();
    assert_eq!(docs[0]["model"], a.as_str());
    assert_eq!(docs[1]["model"], b.as_str());
    assert_eq!(
        docs[1]["resumed_from"], docs[0]["run_id"],
        "the same conversation"
    );
    assert_eq!(docs[2]["model"], b.as_str());
    assert!(docs[2].get("resumed_from").is_none());
}
