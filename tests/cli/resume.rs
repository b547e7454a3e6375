//! Resume (`--resume FILE`, SPEC section 9): which checkpoints continue,
//! refusals, continued steps and totals, the chain from current flags, and
//! tool calls cut short by a crash reported, never re-run.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use predicates::prelude::*;
use serde_json::Value;

use crate::support::{events, finished, of_type, read_json, TestEnv};

const FAST_RETRY: &str = "retry: {attempts: 2, backoff: 1ms, max_backoff: 2ms, jitter: 0}\n";
const SUBMIT: &str = "- tool_calls:\n    - {name: submit, arguments: {output: finished}}\n  usage: {input: 200, output: 20}\n";

/// Waits until `path` exists and is not empty.
pub fn wait_for(path: &Path) {
    for _ in 0..400 {
        if std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{} never appeared", path.display());
}

struct Run {
    code: Option<i32>,
    events: Vec<Value>,
    stderr: String,
}

fn run(env: &TestEnv, args: &[&str]) -> Run {
    let cfg = env.write("config.yaml", FAST_RETRY);
    let out = env
        .cmd()
        .args(["-c", cfg.to_str().unwrap(), "--json"])
        .args(args)
        .output()
        .unwrap();
    Run {
        code: out.status.code(),
        events: events(&out.stdout),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn steps_started(ev: &[Value]) -> Vec<u64> {
    of_type(ev, "step.started")
        .iter()
        .map(|e| e["step"].as_u64().unwrap())
        .collect()
}

#[test]
fn an_outage_checkpoint_resumes_redoing_the_failed_step_under_its_number() {
    let env = TestEnv::new();
    let model = env.script(
        "a.yaml",
        "- tool_calls:\n    - {name: bash, arguments: {command: 'echo one'}}\n    - {name: plan, arguments: {items: [{text: first, status: done}, {text: second, status: pending}]}}\n  usage: {input: 100, output: 10}\n- error: {status: 503}\n",
    );
    let traj = env.file("t.json");
    let first = run(
        &env,
        &["-m", &model, "-o", traj.to_str().unwrap(), "the task"],
    );
    assert_eq!(first.code, Some(75), "{}", first.stderr);
    let end = finished(&first.events);
    assert_eq!(
        (end["status"].as_str(), end["steps"].as_u64()),
        (Some("error"), Some(1))
    );
    let old_id = end["run_id"].as_str().unwrap().to_string();

    env.script("a.yaml", SUBMIT);
    let db = env.file("log.db");
    let second = run(
        &env,
        &[
            "--resume",
            traj.to_str().unwrap(),
            "--log-db",
            db.to_str().unwrap(),
        ],
    );
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    let ev = &second.events;
    assert_eq!(ev[0]["type"], "run.started");
    assert_eq!(ev[0]["resumed_from"], old_id.as_str());
    assert_eq!(ev[0]["task"], "the task");
    assert_eq!(ev[0]["model"], model.as_str());
    assert!(ev[0].get("fallback_models").is_none());
    let new_id = ev[0]["run_id"].as_str().unwrap();
    assert_ne!(new_id, old_id);
    assert_eq!(
        steps_started(ev),
        [2],
        "the failed step 2 is done again as step 2"
    );
    let end = finished(ev);
    assert_eq!(end["status"], "submitted");
    assert_eq!(end["steps"], 2);
    assert_eq!(end["input_tokens"], 300, "totals include the checkpoint's");
    assert_eq!(end["output_tokens"], 30);

    let t = read_json(&traj);
    assert_eq!(t["run_id"], new_id);
    assert_eq!(t["resumed_from"], old_id.as_str());
    assert_eq!(t["status"], "submitted");
    assert_eq!(t["steps"], 2);
    assert_eq!(t["totals"]["input_tokens"], 300);
    assert_eq!(t["plan"][1]["text"], "second", "the plan is kept");
    assert_eq!(t["messages"][0]["content"], "the task");
    assert!(t.get("fallback_models").is_none());
    assert!(!env.file("t.json.journal").exists());

    let conn = rusqlite::Connection::open(&db).unwrap();
    let (resumed_from, steps): (String, i64) = conn
        .query_row(
            "SELECT resumed_from, steps FROM runs WHERE run_id = ?1",
            [new_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((resumed_from.as_str(), steps), (old_id.as_str(), 2));
}

#[test]
fn resume_with_an_added_fallback_finishes_on_the_fallback() {
    let env = TestEnv::new();
    let primary = env.script("a.yaml", "- error: {status: 503}\n");
    let fallback = env.script("b.yaml", SUBMIT);
    let traj = env.file("t.json");
    let first = run(
        &env,
        &["-m", &primary, "-o", traj.to_str().unwrap(), "task"],
    );
    assert_eq!(first.code, Some(75));
    assert_eq!(finished(&first.events)["status"], "error");

    let out = env.file("resumed.json");
    let second = run(
        &env,
        &[
            "--resume",
            traj.to_str().unwrap(),
            "--fallback-model",
            &fallback,
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    // The first run's failures were recorded in the shared health record
    // (section 13 applies to a resumed run as to any run): the resumed run
    // skips the primary it already knows is failing.
    assert!(
        second.stderr.contains(&format!(
            "model fallback: {primary} -> {fallback} (cooldown) at step 1"
        )),
        "{}",
        second.stderr
    );
    assert_eq!(
        second.events[0]["fallback_models"],
        serde_json::json!([fallback])
    );
    let first_step = &of_type(&second.events, "step.started")[0];
    assert_eq!(
        first_step["model"],
        primary.as_str(),
        "a resumed run starts on the primary"
    );
    let end = finished(&second.events);
    assert_eq!(end["active_model"], fallback.as_str());
    assert_eq!(end["model_fallbacks"], 1);
    let t = read_json(&out);
    assert_eq!(t["model"], primary.as_str());
    assert_eq!(t["fallback_models"], serde_json::json!([fallback]));
    assert_eq!(t["active_model"], fallback.as_str());
    assert_eq!(t["model_switches"].as_array().unwrap().len(), 1);
    // The checkpoint itself is left as it was.
    assert_eq!(read_json(&traj)["status"], "error");
}

#[test]
fn a_step_limit_checkpoint_resumes_and_limits_count_the_whole_run() {
    let env = TestEnv::new();
    let model = env.script(
        "a.yaml",
        "- tool_calls:\n    - {name: bash, arguments: {command: 'echo one'}}\n",
    );
    let traj = env.file("t.json");
    let path = traj.to_str().unwrap();
    let first = run(
        &env,
        &["-m", &model, "-o", path, "--step-limit", "1", "task"],
    );
    assert_eq!(first.code, Some(3));
    assert_eq!(read_json(&traj)["status"], "step_limit");

    // The same limit again: nothing left to do, and the user is told why.
    let again = run(&env, &["--resume", path, "--step-limit", "1"]);
    assert_eq!(again.code, Some(3));
    assert!(steps_started(&again.events).is_empty());
    let warning = &of_type(&again.events, "warning")[0];
    assert!(warning["message"]
        .as_str()
        .unwrap()
        .contains("--step-limit"));

    env.script(
        "a.yaml",
        &format!(
            "- tool_calls:\n    - {{name: bash, arguments: {{command: 'echo two'}}}}\n{SUBMIT}"
        ),
    );
    let last = run(&env, &["--resume", path]);
    assert_eq!(last.code, Some(0), "{}", last.stderr);
    assert_eq!(steps_started(&last.events), [2, 3]);
    assert_eq!(finished(&last.events)["steps"], 3);
    let t = read_json(&traj);
    let steps: Vec<u64> = t["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 2, 3]);
}

#[test]
fn an_interrupted_checkpoint_resumes_and_a_new_task_is_a_user_message() {
    let env = TestEnv::new();
    let marker = env.file("marker");
    let model = env.script(
        "a.yaml",
        &format!(
            "- tool_calls:\n    - {{name: bash, arguments: {{command: 'echo x >> {} && sleep 30'}}}}\n",
            marker.display()
        ),
    );
    let traj = env.file("t.json");
    let db = env.file("log.db");
    let child = env
        .std_cmd()
        .args(["-m", &model, "--json", "-o", traj.to_str().unwrap()])
        .args(["--log-db", db.to_str().unwrap(), "task"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&marker);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    assert_eq!(read_json(&traj)["status"], "interrupted");
    // Ctrl-C flushes the log database: every event, and the run's end.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (status, stored): (String, i64) = conn
        .query_row(
            "SELECT status, (SELECT count(*) FROM events) FROM runs",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(status, "interrupted");
    assert_eq!(stored as usize, events(&out.stdout).len());

    env.script("a.yaml", SUBMIT);
    let cfg = env.write("config.yaml", FAST_RETRY);
    let out = env
        .cmd()
        .args([
            "-c",
            cfg.to_str().unwrap(),
            "--json",
            "--resume",
            traj.to_str().unwrap(),
            "-",
        ])
        .write_stdin("and now finish up")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "x\n",
        "not re-run"
    );
    let t = read_json(&traj);
    let messages = t["messages"].as_array().unwrap();
    let user: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(user, ["task", "and now finish up"]);
    assert_eq!(messages.last().unwrap()["role"], "tool");
}

#[test]
fn sigkill_during_a_tool_call_resumes_without_running_it_again() {
    let env = TestEnv::new();
    let marker = env.file("marker");
    let model = env.script(
        "a.yaml",
        &format!(
            "- tool_calls:\n    - {{name: bash, arguments: {{command: 'echo x >> {} && sleep 30'}}}}\n",
            marker.display()
        ),
    );
    let traj = env.file("t.json");
    let mut child = env
        .std_cmd()
        .args(["-m", &model, "-q", "-o", traj.to_str().unwrap(), "task"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&marker);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let crashed = read_json(&traj);
    assert_eq!(crashed["status"], "running");
    assert!(env.file("t.json.journal").exists());

    env.script("a.yaml", SUBMIT);
    let second = run(&env, &["--resume", traj.to_str().unwrap()]);
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "x\n",
        "the call ran once"
    );
    let tools: Vec<&str> = of_type(&second.events, "tool.started")
        .iter()
        .map(|e| e["tool"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["submit"]);
    assert_eq!(steps_started(&second.events), [2]);

    // What the model was sent: the bash call answered as interrupted.
    let t = read_json(&traj);
    let messages = t["messages"].as_array().unwrap();
    let call = &messages[1]["tool_calls"][0];
    assert_eq!(call["name"], "bash");
    let result = &messages[2];
    assert_eq!(result["role"], "tool");
    assert_eq!(result["tool_call_id"], call["id"]);
    let text = result["content"].as_str().unwrap();
    assert!(
        text.contains("interrupted") && text.contains("unknown") && text.contains("NOT re-run"),
        "{text}"
    );
    assert_eq!(messages[3]["role"], "assistant");
    assert_eq!(messages[3]["step"], 2);
}

#[test]
fn finished_missing_and_foreign_model_checkpoints_are_refused() {
    let env = TestEnv::new();
    let model = env.script("a.yaml", SUBMIT);
    let traj = env.file("t.json");
    let path = traj.to_str().unwrap();
    assert_eq!(run(&env, &["-m", &model, "-o", path, "task"]).code, Some(0));
    let before = std::fs::read(&traj).unwrap();
    let refused = run(&env, &["--resume", path]);
    assert_eq!(refused.code, Some(2));
    assert!(refused.events.is_empty());
    assert!(
        refused.stderr.contains("already finished (submitted)"),
        "{}",
        refused.stderr
    );
    assert_eq!(std::fs::read(&traj).unwrap(), before);

    let completed = env.file("c.json");
    let text_model = env.script("t.yaml", "- text: answer\n");
    assert_eq!(
        run(
            &env,
            &["-m", &text_model, "-o", completed.to_str().unwrap(), "task"]
        )
        .code,
        Some(0)
    );
    assert_eq!(
        run(&env, &["--resume", completed.to_str().unwrap()]).code,
        Some(2)
    );

    let cfg = env.write("config.yaml", FAST_RETRY);
    env.cmd()
        .args([
            "-c",
            cfg.to_str().unwrap(),
            "--resume",
            env.file("nope.json").to_str().unwrap(),
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nope.json"));
    let garbage = env.write("garbage.json", "{not json");
    assert_eq!(
        run(&env, &["--resume", garbage.to_str().unwrap()]).code,
        Some(2)
    );

    let failing = env.script("f.yaml", "- error: {status: 503}\n");
    let errored = env.file("e.json");
    assert_eq!(
        run(
            &env,
            &["-m", &failing, "-o", errored.to_str().unwrap(), "task"]
        )
        .code,
        Some(75)
    );
    let other = env.script("other.yaml", SUBMIT);
    let refused = run(&env, &["--resume", errored.to_str().unwrap(), "-m", &other]);
    assert_eq!(refused.code, Some(2));
    assert!(
        refused.stderr.contains("primary model"),
        "{}",
        refused.stderr
    );
    assert_eq!(read_json(&errored)["status"], "error");
}

#[test]
fn a_compacted_history_resumes_as_compacted() {
    let env = TestEnv::new();
    let model = env.script(
        "a.yaml",
        // A long first output: compaction only ever reports a history it shrank.
        "- tool_calls:\n    - {name: bash, arguments: {command: 'echo one; head -c 3000 /dev/zero | tr \"\\\\0\" x'}}\n- tool_calls:\n    - {name: bash, arguments: {command: 'echo two'}}\n- tool_calls:\n    - {name: bash, arguments: {command: 'echo three'}}\n- error: {kind: context_overflow}\n- text: SUMMARY-TEXT\n- error: {status: 503}\n",
    );
    let traj = env.file("t.json");
    let first = run(&env, &["-m", &model, "-o", traj.to_str().unwrap(), "task"]);
    assert_eq!(first.code, Some(75), "{}", first.stderr);
    assert_eq!(of_type(&first.events, "context.compacted").len(), 1);

    env.script("a.yaml", SUBMIT);
    let second = run(&env, &["--resume", traj.to_str().unwrap()]);
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert_eq!(steps_started(&second.events), [4]);
    let t = read_json(&traj);
    let messages = t["messages"].as_array().unwrap();
    assert!(messages[1]["content"]
        .as_str()
        .unwrap()
        .contains("SUMMARY-TEXT"));
    assert!(
        !t["messages"].to_string().contains("echo one"),
        "{}",
        t["messages"]
    );
}

#[test]
fn hostile_checkpoints_are_refused_in_one_line_or_resume_without_a_panic() {
    let env = TestEnv::new();
    // A file far larger than any run (sparse: it costs no disk).
    let big = env.work().join("big.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(600 << 20)
        .unwrap();
    let out = env
        .cmd()
        .args(["--resume", big.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("larger than 512 MiB"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // A step counter at its maximum: the run goes on, never overflows.
    let model = env.script(
        "s.yaml",
        "- tool_calls: [{name: submit, arguments: {output: done}}]\n",
    );
    let cp = env.work().join("max.json");
    let doc = serde_json::json!({
        "schema_version": 1, "tinyagent_version": "0", "run_id": "r1", "task": "t",
        "model": model, "active_model": model, "status": "interrupted",
        "error": null, "started_at": "2026-01-01T00:00:00Z", "finished_at": null,
        "steps": u32::MAX,
        "totals": {"input_tokens": u64::MAX, "output_tokens": 1, "cached_input_tokens": 0, "cost_usd": 1e300},
        "messages": [{"role": "user", "content": "t", "step": u32::MAX}], "output": null,
    });
    std::fs::write(&cp, doc.to_string()).unwrap();
    let out = env
        .cmd()
        .args(["--json", "--resume", cp.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    let ev = events(&out.stdout);
    assert_eq!(of_type(&ev, "run.finished").len(), 1, "{err}\n{ev:?}");
}
