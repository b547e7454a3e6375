//! Context compaction: a context overflow compacts the history and retries
//! once (never a fallback); a request estimated past the threshold share of
//! the context window is compacted first; the compacted history is what the
//! trajectory holds.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{events, finished, of_type, read_json, TestEnv};

const SUBMIT: &str = "- tool_calls:\n  - {name: submit, arguments: {output: done}}\n";
const MARKER: &str = "[summary of earlier conversation]";

fn journal_of(path: &std::path::Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".journal");
    name.into()
}

fn bash(command: &str) -> String {
    format!("- tool_calls:\n  - {{name: bash, arguments: {{command: '{command}'}}}}\n  usage: {{input: 100, output: 10}}\n")
}

/// A shell command printing 3000 characters.
const BIG: &str = "head -c 3000 /dev/zero | tr \"\\\\0\" x";

/// A bash step with a 3000-character output, with the input tokens the
/// "server" reports for its request.
fn big_step(input_tokens: u64) -> String {
    format!("- tool_calls:\n  - {{name: bash, arguments: {{command: '{BIG}'}}}}\n  usage: {{input: {input_tokens}, output: 10}}\n")
}

#[test]
fn an_overflow_compacts_once_and_retries_without_a_fallback() {
    let env = TestEnv::new();
    let primary = env.script(
        "a.yaml",
        &format!(
            "{}- error: {{kind: context_overflow}}\n{SUBMIT}",
            big_step(100)
        ),
    );
    let backup = env.script("b.yaml", SUBMIT);
    let out = env
        .cmd()
        .args(["-m", &primary, "--fallback-model", &backup, "--json", "t"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ev = events(&out.stdout);
    let compacted = of_type(&ev, "context.compacted");
    assert_eq!(compacted.len(), 1);
    assert_eq!(compacted[0]["step"], 2);
    assert_eq!(compacted[0]["model"], primary.as_str());
    let before = compacted[0]["tokens_before"].as_u64().unwrap();
    let after = compacted[0]["tokens_after"].as_u64().unwrap();
    assert!(after < before, "{before} -> {after}");
    assert!(of_type(&ev, "model.fallback").is_empty());
    let end = finished(&ev);
    assert_eq!(end["status"], "submitted");
    assert_eq!(end["active_model"], primary.as_str());
    assert_eq!(end["model_fallbacks"], 0);
    assert_eq!(end["steps"], 2);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("model fallback"));
}

#[test]
fn an_overflow_after_compaction_ends_the_run_with_error() {
    let env = TestEnv::new();
    let primary = env.script(
        "a.yaml",
        &format!(
            "{}- error: {{kind: context_overflow, message: prompt is too long}}\n",
            big_step(100)
        ),
    );
    let backup = env.script("b.yaml", SUBMIT);
    let out = env
        .cmd()
        .args(["-m", &primary, "--fallback-model", &backup, "--json", "t"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let ev = events(&out.stdout);
    assert_eq!(of_type(&ev, "context.compacted").len(), 1);
    assert!(of_type(&ev, "model.fallback").is_empty());
    let end = finished(&ev);
    assert_eq!(end["status"], "error");
    let error = end["error"].as_str().unwrap();
    assert!(error.contains("context overflow"), "{end}");
    assert!(error.contains("already compacted"), "{end}");
}

#[test]
fn an_overflow_that_nothing_can_shorten_ends_the_run_naming_the_sizes() {
    let env = TestEnv::new();
    // Only the task: nothing to summarise, no tool output to shorten.
    let primary = env.script(
        "a.yaml",
        "- error: {kind: context_overflow, message: 'Requested tokens (9000) exceed context window of 2048'}\n",
    );
    let backup = env.script("b.yaml", SUBMIT);
    let traj = env.file("t.json");
    let out = env
        .cmd()
        .args(["-m", &primary, "--fallback-model", &backup, "--json", "-o"])
        .arg(&traj)
        .arg("t")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let ev = events(&out.stdout);
    // Never a compaction that changes nothing.
    assert!(of_type(&ev, "context.compacted").is_empty());
    assert!(of_type(&ev, "model.fallback").is_empty());
    let end = finished(&ev);
    assert_eq!(end["status"], "error");
    assert_eq!(
        end["error"],
        format!("context overflow: the request (about 9000 tokens) does not fit the context window of 2048 tokens of {primary}, and compaction cannot shorten it further")
    );
    let doc = read_json(&traj);
    assert_eq!(doc["status"], "error");
    assert_eq!(doc["messages"].as_array().unwrap().len(), 1);
}

#[test]
fn the_size_the_server_names_in_an_overflow_is_the_base_of_the_compaction() {
    let env = TestEnv::new();
    let primary = env.script(
        "a.yaml",
        &format!(
            "{}{}{}- error: {{kind: context_overflow, message: 'Requested tokens (20000) exceed context window of 16000'}}\n- text: SUMMARY-TEXT\n{SUBMIT}",
            big_step(100),
            big_step(100),
            big_step(100)
        ),
    );
    let out = env
        .cmd()
        .args(["-m", &primary, "--json", "t"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ev = events(&out.stdout);
    let compacted = of_type(&ev, "context.compacted");
    assert_eq!(compacted.len(), 1);
    // The server's count, not characters / 4 (which is far less here).
    assert_eq!(compacted[0]["tokens_before"], 20000);
    let after = compacted[0]["tokens_after"].as_u64().unwrap();
    // Aimed below the threshold share (0.8) of the window the server named.
    assert!(after <= 12800, "{after}");
    assert_eq!(finished(&ev)["status"], "submitted");
}

#[test]
fn the_servers_count_for_the_previous_request_makes_compaction_fire_in_time() {
    let env = TestEnv::new();
    let config = env.write(
        "c.yaml",
        "compaction: {threshold: 0.5, default_context_window: 16000}\n",
    );
    let run = |first_input: u64| {
        // Step 1 reports `first_input` tokens; step 2 adds a 3000-char output.
        let model = env.script(
            &format!("m{first_input}.yaml"),
            &format!("{}{SUBMIT}", big_step(first_input)),
        );
        let out = env
            .cmd()
            .args(["-m", &model, "--json", "-c"])
            .arg(&config)
            .arg("t")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        events(&out.stdout)
    };
    // A server that counts many tokens: 9000 already, more than half the
    // window with what was added since, so step 2 is compacted first.
    let ev = run(9000);
    let compacted = of_type(&ev, "context.compacted");
    assert_eq!(compacted.len(), 1, "{ev:?}");
    assert_eq!(compacted[0]["step"], 2);
    let before = compacted[0]["tokens_before"].as_u64().unwrap();
    assert!(before > 9000, "{before}");
    assert!(compacted[0]["tokens_after"].as_u64().unwrap() < before);
    // The same run with a server that counts few tokens: nothing to do.
    let ev = run(1000);
    assert!(of_type(&ev, "context.compacted").is_empty());
}

/// Three bash turns, then the summary the model is asked for, then submit.
fn long_task(env: &TestEnv) -> String {
    let big = "head -c 3000 /dev/zero | tr \"\\\\0\" x";
    let script = format!(
        "{}{}{}- text: SUMMARY-TEXT listed the files\n  usage: {{input: 100, output: 10}}\n{}",
        bash(big),
        bash(big),
        bash(big),
        SUBMIT.trim_end().to_string() + "\n  usage: {input: 100, output: 10}\n"
    );
    env.script("long.yaml", &script)
}

#[test]
fn a_request_past_the_threshold_is_compacted_first_and_the_trajectory_keeps_the_summary() {
    let env = TestEnv::new();
    // The third request is counted at 12000 tokens: the fourth is past half
    // of the 20000-token window and is compacted before it is sent.
    let model = env.script(
        "long.yaml",
        &format!(
            "{}{}{}- text: SUMMARY-TEXT listed the files\n  usage: {{input: 100, output: 10}}\n{}",
            big_step(1000),
            big_step(1100),
            big_step(12000),
            SUBMIT.trim_end().to_string() + "\n  usage: {input: 100, output: 10}\n"
        ),
    );
    let config = env.write(
        "c.yaml",
        "compaction: {threshold: 0.5, default_context_window: 20000}\n",
    );
    let traj = env.file("t.json");
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "-c"])
        .arg(&config)
        .arg("-o")
        .arg(&traj)
        .arg("make a long task")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ev = events(&out.stdout);
    let compacted = of_type(&ev, "context.compacted");
    assert_eq!(compacted.len(), 1, "{compacted:?}");
    assert_eq!(compacted[0]["step"], 4);
    let before = compacted[0]["tokens_before"].as_u64().unwrap();
    let after = compacted[0]["tokens_after"].as_u64().unwrap();
    assert!(after < before, "{before} -> {after}");
    let end = finished(&ev);
    // The summarising request is counted in the totals but is not a step.
    assert_eq!(end["steps"], 4);
    assert_eq!(of_type(&ev, "model.response").len(), 4);
    assert_eq!(end["input_tokens"], 1000 + 1100 + 12000 + 100 + 100);
    assert_eq!(end["output_tokens"], 50);

    let doc = read_json(&traj);
    let messages = doc["messages"].as_array().unwrap();
    assert_eq!(messages[0]["content"], "make a long task");
    assert_eq!(messages[1]["role"], "user");
    assert_eq!(
        messages[1]["content"],
        format!("{MARKER}\nSUMMARY-TEXT listed the files")
    );
    // The first turn is gone; the last two turns are whole, results after calls.
    assert_eq!(messages[2]["role"], "assistant");
    assert_eq!(
        messages[3]["tool_call_id"],
        messages[2]["tool_calls"][0]["id"]
    );
    assert_eq!(messages.len(), 2 + 4 + 2, "{doc:#}");
    assert!(!journal_of(&traj).exists());
}

#[test]
fn below_the_threshold_nothing_is_compacted() {
    let env = TestEnv::new();
    let model = long_task(&env);
    let config = env.write("c.yaml", "compaction: {default_context_window: 1000000}\n");
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "-c"])
        .arg(&config)
        .arg("t")
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert!(of_type(&ev, "context.compacted").is_empty());
    // Without compaction the fourth reply (prose) is the final answer.
    assert_eq!(finished(&ev)["status"], "completed");
}

#[test]
fn the_checkpoint_holds_the_compacted_history_while_the_run_goes_on() {
    let env = TestEnv::new();
    let model = env.script(
        "a.yaml",
        "- tool_calls:\n  - {name: bash, arguments: {command: 'echo one; head -c 3000 /dev/zero | tr \"\\\\0\" x'}}\n\
         - tool_calls:\n  - {name: bash, arguments: {command: 'echo two'}}\n\
         - tool_calls:\n  - {name: bash, arguments: {command: 'echo three'}}\n\
         - error: {kind: context_overflow}\n\
         - text: SUMMARY-TEXT\n\
         - tool_calls:\n  - {name: submit, arguments: {output: done}}\n  delay: 30s\n",
    );
    let traj = env.file("t.json");
    let mut child = env
        .std_cmd()
        .args(["-m", &model, "-q", "-o"])
        .arg(&traj)
        .arg("t")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = None;
    while Instant::now() < deadline {
        if let Ok(text) = std::fs::read_to_string(&traj) {
            if let Ok(doc) = serde_json::from_str::<Value>(&text) {
                if doc["messages"].as_array().is_some_and(|m| {
                    m.iter()
                        .any(|m| m["content"].as_str().is_some_and(|c| c.starts_with(MARKER)))
                }) {
                    seen = Some(doc);
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The journal is emptied just after FILE is replaced (replaying the old
    // one over the new FILE would end in the same state): give it a moment.
    let journal_deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < journal_deadline
        && std::fs::read_to_string(journal_of(&traj)).is_ok_and(|j| j.contains("echo one"))
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    let doc = seen.expect("FILE never held the compacted history");
    // FILE alone, without its journal, is the compacted conversation.
    let messages = doc["messages"].as_array().unwrap();
    assert_eq!(messages[0]["content"], "t");
    assert_eq!(messages[1]["content"], format!("{MARKER}\nSUMMARY-TEXT"));
    assert_eq!(doc["status"], "running");
    // FILE plus journal (as --resume reads it) agrees.
    let journal = std::fs::read_to_string(journal_of(&traj)).unwrap_or_default();
    assert!(
        !journal.contains("echo one"),
        "the old turn is not replayed: {journal}"
    );
}

#[test]
fn after_a_fallback_switch_the_active_model_compacts() {
    let env = TestEnv::new();
    // Step 1 answers; step 2 fails over, and the backup overflows.
    let primary = env.script(
        "a.yaml",
        &format!("{}- error: {{status: 503}}\n", big_step(100)),
    );
    let backup = env.script(
        "b.yaml",
        &format!("- error: {{kind: context_overflow}}\n{SUBMIT}"),
    );
    let config = env.write("c.yaml", "retry: {attempts: 1, backoff: 1ms}\n");
    let out = env
        .cmd()
        .args(["-m", &primary, "--fallback-model", &backup, "--json", "-c"])
        .arg(&config)
        .arg("t")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ev = events(&out.stdout);
    assert_eq!(of_type(&ev, "model.fallback").len(), 1);
    let compacted = of_type(&ev, "context.compacted");
    assert_eq!(compacted.len(), 1);
    assert_eq!(compacted[0]["model"], backup.as_str());
    assert_eq!(finished(&ev)["active_model"], backup.as_str());
}
