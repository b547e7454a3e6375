//! `/model SPEC` in an interactive session (SPEC 14, 20): the next task
//! and every later one run with SPEC as their primary, in the same
//! conversation; a SPEC that `-m` would refuse is one error line and
//! changes nothing.

use std::path::Path;

use rexpect::session::PtySession;

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

#[test]
fn model_with_a_member_of_the_chain_moves_it_first_and_keeps_the_others_in_order() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- text: from a\n");
    let b = env.script("b.yaml", "- text: from b\n");
    let c = env.script("c.yaml", "- text: from c\n");
    let answers = env.file("answers.md");
    let args = ["-m", &a, "--fallback-model", &b, "--fallback-model", &c];
    let mut s = spawn(&env, &args, &answers);
    s.exp_string("> ").unwrap();
    // Before any task, and again in the conversation.
    s.send_line(&format!("/model {c}")).unwrap();
    expect(
        &mut s,
        &format!("model: {c} (from the next task on); chain: {c} → {a} → {b}"),
    );
    s.exp_string("> ").unwrap();
    s.send_line("first task").unwrap();
    s.exp_string("completed after 1 step").unwrap();
    s.exp_string("> ").unwrap();
    s.send_line(&format!("/model {b}")).unwrap();
    expect(
        &mut s,
        &format!("model: {b} (from the next task on); chain: {b} → {c} → {a}"),
    );
    s.exp_string("> ").unwrap();
    s.send_line("/model").unwrap();
    expect(&mut s, &format!("chain:  {b} → {c} → {a}"));
    s.exp_string("> ").unwrap();
    s.send_line("second task").unwrap();
    s.exp_string("completed after 2 steps").unwrap();
    s.exp_string("> ").unwrap();
    // The order holds for every later follow-up.
    s.send_line("third task").unwrap();
    s.exp_string("completed after 3 steps").unwrap();
    s.exp_string("> ").unwrap();
    s.send_line("exit").unwrap();
    assert_eq!(exit_code(&mut s), 0);

    let text = std::fs::read_to_string(&answers).unwrap();
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        ["from c", "from b", "from b"]
    );
    let docs: Vec<_> = runs(&env)
        .iter()
        .map(|e| read_json(Path::new(e["path"].as_str().unwrap())))
        .collect();
    assert_eq!(docs[0]["model"], c.as_str());
    assert_eq!(docs[0]["fallback_models"], serde_json::json!([a, b]));
    assert_eq!(docs[1]["model"], b.as_str());
    assert_eq!(docs[1]["fallback_models"], serde_json::json!([c, a]));
    assert_eq!(docs[2]["resumed_from"], docs[1]["run_id"]);
}

#[test]
fn compact_summarises_the_conversation_now_and_the_session_goes_on_from_it() {
    let env = TestEnv::new();
    let long = "x".repeat(4000);
    let a = env.script("a.yaml", &format!("- text: {long}\n"));
    let summary = env.script("sum.yaml", "- text: the summary\n");
    let answers = env.file("answers.md");
    let mut s = spawn(&env, &["-m", &a], &answers);
    s.exp_string("> ").unwrap();
    s.send_line("/compact").unwrap();
    s.exp_string("(nothing to compact: no conversation yet)")
        .unwrap();
    s.exp_string("> ").unwrap();
    s.send_line("first task").unwrap();
    s.exp_string("completed after 1 step").unwrap();
    s.exp_string("> ").unwrap();
    s.send_line("second task").unwrap();
    s.exp_string("completed after 2 steps").unwrap();
    s.exp_string("> ").unwrap();
    s.send_line("/help").unwrap();
    s.exp_string("/compact").unwrap();
    s.exp_string("> ").unwrap();
    s.send_line(&format!("/model {summary}")).unwrap();
    s.exp_string("> ").unwrap();
    s.send_line("/compact").unwrap();
    // The summary as it streams, then the sizes on a line of their own.
    s.exp_string("the summary\r\ncontext compacted: ").unwrap();
    s.exp_string(" tokens").unwrap();
    s.exp_string("> ").unwrap();
    s.send_line("third task").unwrap();
    s.exp_string("completed after 3 steps").unwrap();
    s.exp_string("> ").unwrap();
    s.send_line("exit").unwrap();
    assert_eq!(exit_code(&mut s), 0);

    let docs: Vec<_> = runs(&env)
        .iter()
        .map(|e| read_json(Path::new(e["path"].as_str().unwrap())))
        .collect();
    assert_eq!(docs.len(), 4, "two tasks, the compaction, a third task");
    let compacted = &docs[2];
    assert_eq!(compacted["resumed_from"], docs[1]["run_id"]);
    assert_eq!(compacted["status"], "completed");
    let messages = compacted["messages"].as_array().unwrap();
    assert!(
        messages
            .iter()
            .any(|m| m["content"]
                .as_str()
                .is_some_and(|t| t.starts_with("[summary of earlier conversation]")
                    && t.contains("the summary"))),
        "{compacted}"
    );
    // The third task continues the compacted conversation.
    assert_eq!(docs[3]["resumed_from"], compacted["run_id"]);
    let roles = |doc: &serde_json::Value| -> Vec<String> {
        doc["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(roles(&docs[1]), ["user", "assistant", "user", "assistant"]);
    assert_eq!(roles(compacted), ["user", "user", "assistant"]);
    assert_eq!(
        roles(&docs[3]),
        ["user", "user", "assistant", "user", "assistant"]
    );
}

/// `exp_string` for UTF-8 text (rexpect reads a byte per `char`).
fn expect(s: &mut PtySession, text: &str) {
    let as_read: String = text.bytes().map(char::from).collect();
    s.exp_string(&as_read).unwrap();
}
