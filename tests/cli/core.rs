//! The core run: task input, statuses and exit codes, events, trajectory,
//! config errors, help.

use predicates::prelude::*;
use serde_json::Value;

use crate::support::{events, finished, of_type, read_json, TestEnv};

const SUBMIT: &str = "- tool_calls:\n  - {name: submit, arguments: {output: done}}\n";

#[test]
fn help_is_kept_as_a_golden_file() {
    let env = TestEnv::new();
    let out = env.cmd().arg("--help").output().unwrap();
    assert!(out.status.success());
    insta::assert_snapshot!("help", String::from_utf8(out.stdout).unwrap());
}

#[test]
fn version_prints_name_and_version() {
    TestEnv::new()
        .cmd()
        .arg("--version")
        .assert()
        .success()
        .stdout(format!("tinyagent {}\n", env!("CARGO_PKG_VERSION")));
}

#[test]
fn the_offline_demo_edits_files_and_submits() {
    let env = TestEnv::new();
    let demo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/demo.yaml");
    env.cmd()
        .args([
            "-m",
            &format!("script/{}", demo.display()),
            "Write greet.sh",
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains("test.sh passes"))
        .stderr(predicate::str::contains("submitted after 6 steps"));
    let greet = std::fs::read_to_string(env.work().join("greet.sh")).unwrap();
    assert!(greet.contains("Hello,"));
}

#[test]
fn submitted_exits_zero_and_prints_the_answer() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", SUBMIT);
    env.cmd()
        .args(["-m", &model, "do it"])
        .assert()
        .code(0)
        .stdout("done\n");
}

#[test]
fn completed_without_tool_calls() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", "- text: all good\n");
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    let end = finished(&ev);
    assert_eq!(end["status"], "completed");
    assert_eq!(end["output"], "all good");
    assert_eq!(end["error"], Value::Null);
}

#[test]
fn task_from_stdin() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", SUBMIT);
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "-"])
        .write_stdin("task from stdin")
        .output()
        .unwrap();
    assert_eq!(events(&out.stdout)[0]["task"], "task from stdin");
    let out = env
        .cmd()
        .args(["-m", &model, "--json"])
        .write_stdin("piped")
        .output()
        .unwrap();
    assert_eq!(events(&out.stdout)[0]["task"], "piped");
}

#[test]
fn no_task_is_a_usage_error() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", SUBMIT);
    env.cmd()
        .args(["-m", &model])
        .write_stdin("")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no task"));
}

#[test]
fn json_events_are_well_formed() {
    let env = TestEnv::new();
    let model = env.script(
        "s.yaml",
        "- text: looking\n  tool_calls:\n  - {name: bash, arguments: {command: 'echo hi'}}\n- tool_calls:\n  - {name: submit, arguments: {output: ok}}\n",
    );
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "t"])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert_eq!(ev[0]["type"], "run.started");
    let run_id = ev[0]["run_id"].clone();
    for (i, e) in ev.iter().enumerate() {
        assert_eq!(e["seq"], i as u64 + 1);
        assert_eq!(e["run_id"], run_id);
        assert!(e["ts"].as_str().unwrap().ends_with('Z'));
    }
    let started = of_type(&ev, "tool.started");
    let messages = of_type(&ev, "assistant.message");
    assert_eq!(messages[0]["tool_calls"][0]["id"], started[0]["call_id"]);
    let done = of_type(&ev, "tool.finished");
    assert_eq!(done[0]["ok"], true);
    assert_eq!(done[0]["output"], "hi\n");
    let end = finished(&ev);
    assert_eq!(end["status"], "submitted");
    assert_eq!(end["exit_code"], 0);
    assert_eq!(end["steps"], 2);
    assert_eq!(end["model_fallbacks"], 0);
    assert_eq!(end["active_model"], model.as_str());
    assert!(ev[0].get("fallback_models").is_none());
}

#[test]
fn failing_tool_does_not_end_the_run() {
    let env = TestEnv::new();
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: bash, arguments: {command: 'exit 4'}}\n  - {name: read_file, arguments: {path: missing.txt}}\n  - {name: nope, arguments: {}}\n- tool_calls:\n  - {name: submit, arguments: {output: ok}}\n",
    );
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "t"])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    let done = of_type(&ev, "tool.finished");
    assert_eq!(done.len(), 4);
    assert!(done[..3].iter().all(|d| d["ok"] == false));
    assert_eq!(finished(&ev)["status"], "submitted");
}

#[test]
fn step_limit_exits_three() {
    let env = TestEnv::new();
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: bash, arguments: {command: 'true'}}\n",
    );
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "--step-limit", "3", "t"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let end = &finished(&events(&out.stdout)).clone();
    assert_eq!(end["status"], "step_limit");
    assert_eq!(end["steps"], 3);
}

#[test]
fn cost_limit_leaves_tool_calls_unrun() {
    let env = TestEnv::new();
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: bash, arguments: {command: 'touch ran'}}\n  cost: 0.6\n",
    );
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "--cost-limit", "1", "t"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["status"], "cost_limit");
    assert_eq!(finished(&ev)["steps"], 2);
    assert_eq!(
        of_type(&ev, "tool.started").len(),
        1,
        "the second reply's call must not run"
    );
    // A script whose replies state their cost is priced (SPEC 1).
    assert!(of_type(&ev, "warning").is_empty(), "{ev:?}");
}

#[test]
fn an_unpriced_model_under_a_cost_limit_is_named_before_the_first_request() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", SUBMIT);
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "--cost-limit", "1", "t"])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    let warn = ev.iter().position(|e| e["type"] == "warning").unwrap();
    let step = ev.iter().position(|e| e["type"] == "step.started").unwrap();
    assert!(warn < step);
    let message = ev[warn]["message"].as_str().unwrap();
    assert!(
        message.contains(&model) && message.contains("no known price"),
        "{message}"
    );
}

#[test]
fn time_limit_exits_three() {
    let env = TestEnv::new();
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: bash, arguments: {command: 'sleep 20'}}\n",
    );
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "--time-limit", "500ms", "t"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(finished(&events(&out.stdout))["status"], "time_limit");
}

#[test]
fn output_truncated_three_times_ends_the_run() {
    let env = TestEnv::new();
    let model = env.script(
        "s.yaml",
        "- text: partial\n  finish: length\n  tool_calls:\n  - {name: bash, arguments: {command: 'touch ran'}}\n",
    );
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "t"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let ev = events(&out.stdout);
    let end = finished(&ev);
    assert_eq!(end["status"], "output_truncated");
    assert!(end["error"].is_string());
    assert_eq!(end["steps"], 3);
    assert!(of_type(&ev, "tool.started").is_empty());
    assert!(!env.work().join("ran").exists());
}

#[test]
fn garbled_tool_arguments_are_not_run() {
    let env = TestEnv::new();
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: bash, arguments: '{\"command\": \"touch ran'}\n- tool_calls:\n  - {name: submit, arguments: {output: ok}}\n",
    );
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "t"])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert_eq!(of_type(&ev, "tool.finished")[0]["ok"], false);
    assert!(!env.work().join("ran").exists());
    assert_eq!(finished(&ev)["status"], "submitted");
    assert!(of_type(&ev, "provider.retry").is_empty());
}

#[test]
fn fatal_error_exits_one_naming_the_model() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", "- error: {status: 401, message: bad key}\n");
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "t"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let ev = events(&out.stdout);
    let end = finished(&ev);
    assert_eq!(end["status"], "error");
    assert!(end["error"].as_str().unwrap().contains(&model));
    assert!(end["error"].as_str().unwrap().contains("401"));
}

#[test]
fn not_found_hints_at_the_model_name() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", "- error: {status: 404}\n");
    env.cmd()
        .args(["-m", &model, "t"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("model name may be wrong"));
}

#[test]
fn config_unknown_key_exits_two_naming_key_and_file() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", SUBMIT);
    let cfg = env.write("extra.yaml", "retry:\n  attempts: 2\n  tries: 3\n");
    env.cmd()
        .args(["-m", &model, "-c", cfg.to_str().unwrap(), "t"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("tries").and(predicate::str::contains("extra.yaml")));
    env.user_config("modle: x/y\n");
    env.cmd()
        .args(["-m", &model, "t"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("modle").and(predicate::str::contains("config.yaml")));
}

#[test]
fn a_dearer_fallback_is_warned_about_before_the_first_request() {
    let env = TestEnv::new();
    env.user_config(
        "providers:\n  cheap:\n    api: openai\n    endpoint: http://127.0.0.1:9/v1\n    models: {m: {input_price: 1, output_price: 2}}\n  dear:\n    api: openai\n    endpoint: http://127.0.0.1:9/v1\n    models: {m: {input_price: 3, output_price: 2}}\nretry: {attempts: 1}\n",
    );
    let out = env
        .cmd()
        .args(["-m", "cheap/m", "--fallback-model", "dear/m", "--json", "t"])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    let warn = ev.iter().position(|e| e["type"] == "warning").unwrap();
    let step = ev.iter().position(|e| e["type"] == "step.started").unwrap();
    assert!(warn < step);
    assert_eq!(
        ev[warn]["message"],
        "fallback model dear/m costs more than the primary cheap/m ($3/$2 vs $1/$2 per million input/output tokens)"
    );
}

#[test]
fn unknown_provider_api_exits_two_naming_key_file_and_choices() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", SUBMIT);
    let cfg = env.write(
        "providers.yaml",
        "providers:\n  local:\n    api: chat\n    endpoint: http://127.0.0.1:9\n",
    );
    env.cmd()
        .args(["-m", &model, "-c", cfg.to_str().unwrap(), "t"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "providers.yaml: providers.local.api: unknown API 'chat' (expected openai, responses, anthropic, ollama, bedrock, gemini, vertex, azure or foundry)",
        ));
}

#[test]
fn config_layers_and_flags_take_precedence() {
    let env = TestEnv::new();
    let first = env.script(
        "a.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: from-user-config}}\n",
    );
    let second = env.script(
        "b.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: from-layer}}\n",
    );
    let third = env.script(
        "c.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: from-flag}}\n",
    );
    env.user_config(&format!("model: {first}\n"));
    env.cmd()
        .arg("t")
        .assert()
        .success()
        .stdout("from-user-config\n");
    let layer = env.write("layer.yaml", &format!("model: {second}\n"));
    env.cmd()
        .args(["-c", layer.to_str().unwrap(), "t"])
        .assert()
        .success()
        .stdout("from-layer\n");
    env.cmd()
        .args(["-c", layer.to_str().unwrap(), "-m", &third, "t"])
        .assert()
        .success()
        .stdout("from-flag\n");
}

#[test]
fn config_is_never_read_from_the_working_repository() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", SUBMIT);
    std::fs::create_dir_all(env.work().join(".tinyagent")).unwrap();
    std::fs::write(env.work().join(".tinyagent/config.yaml"), "bogus: 1\n").unwrap();
    std::fs::write(env.work().join("config.yaml"), "bogus: 1\n").unwrap();
    env.cmd().args(["-m", &model, "t"]).assert().success();
}

#[test]
fn bad_durations_and_specs_exit_two() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", SUBMIT);
    env.cmd()
        .args(["-m", &model, "--time-limit", "90", "t"])
        .assert()
        .code(2);
    env.cmd()
        .args(["-m", "gpt-5", "t"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("gpt-5"));
    env.cmd()
        .args(["-m", "nope/x", "t"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown provider"));
    env.cmd()
        .args(["-m", "openai/gpt-5", "t"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("OPENAI_API_KEY"));
    env.cmd()
        .args(["-m", "script/does-not-exist.yaml", "t"])
        .assert()
        .code(2);
}

#[test]
fn trajectory_records_the_run() {
    let env = TestEnv::new();
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - name: plan\n    arguments: {items: [{text: a, status: done}]}\n  usage: {input: 100, output: 10}\n- tool_calls:\n  - {name: submit, arguments: {output: fin}}\n  usage: {input: 200, output: 20}\n",
    );
    let path = env.file("run.json");
    env.cmd()
        .args(["-m", &model, "-o", path.to_str().unwrap(), "t"])
        .assert()
        .success();
    let t = read_json(&path);
    assert_eq!(t["schema_version"], 1);
    assert_eq!(t["status"], "submitted");
    assert_eq!(t["model"], model.as_str());
    assert_eq!(t["active_model"], model.as_str());
    assert_eq!(t["steps"], 2);
    assert_eq!(t["totals"]["input_tokens"], 300);
    assert_eq!(t["totals"]["output_tokens"], 30);
    assert_eq!(t["output"], "fin");
    assert_eq!(t["plan"][0]["status"], "done");
    assert!(t.get("model_switches").is_none());
    assert!(t.get("fallback_models").is_none());
    let messages = t["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["model"], model.as_str());
    assert_eq!(messages[2]["role"], "tool");
    assert!(!env.file("run.json.journal").exists());
}

#[test]
fn trajectory_is_valid_json_while_running_and_after_a_kill() {
    let env = TestEnv::new();
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: bash, arguments: {command: 'echo step'}}\n  - {name: bash, arguments: {command: 'sleep 0.05'}}\n",
    );
    let path = env.file("run.json");
    let mut child = env
        .std_cmd()
        .args(["-m", &model, "-q", "-o", path.to_str().unwrap(), "t"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut checks = 0;
    for _ in 0..20 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        if path.exists() {
            let t = read_json(&path);
            assert_eq!(t["status"], "running");
            checks += 1;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(checks > 0);
    let t = read_json(&path);
    assert_eq!(t["status"], "running");
    assert!(env.file("run.json.journal").exists());
}

#[test]
fn sigterm_ends_interrupted_with_130() {
    let env = TestEnv::new();
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: bash, arguments: {command: 'sleep 30'}}\n",
    );
    let path = env.file("run.json");
    let child = env
        .std_cmd()
        .args(["-m", &model, "--json", "-o", path.to_str().unwrap(), "t"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Signal once the run is under way (its checkpoint exists), then give
    // the bash call a moment to start.
    for _ in 0..200 {
        if path.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    unsafe {
        libc_kill(child.id() as i32, 15);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let ev = events(&out.stdout);
    assert_eq!(finished(&ev)["status"], "interrupted");
    assert_eq!(read_json(&path)["status"], "interrupted");
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn summary_line_in_human_mode_and_quiet_hides_progress() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", "- tool_calls:\n  - {name: bash, arguments: {command: 'true'}}\n- tool_calls:\n  - {name: submit, arguments: {output: ok}}\n");
    env.cmd()
        .args(["-m", &model, "t"])
        .assert()
        .success()
        .stderr(
            predicate::str::contains("bash")
                .and(predicate::str::contains("submitted after 2 steps")),
        );
    env.cmd()
        .args(["-m", &model, "-q", "t"])
        .assert()
        .success()
        .stdout("ok\n")
        .stderr("");
}

#[test]
fn tool_processes_die_with_a_killed_agent() {
    let env = TestEnv::new();
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: bash, arguments: {command: 'echo $$ > shell.pid; (sleep 30; echo late > late.txt) & echo $! > child.pid; wait'}}\n",
    );
    let mut child = env
        .std_cmd()
        .args(["-m", &model, "-q", "t"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid_file = env.work().join("child.pid");
    for _ in 0..500 {
        if pid_file.exists()
            && !std::fs::read_to_string(&pid_file)
                .unwrap()
                .trim()
                .is_empty()
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pids: Vec<String> = ["shell.pid", "child.pid"]
        .iter()
        .map(|f| {
            std::fs::read_to_string(env.work().join(f))
                .unwrap()
                .trim()
                .to_string()
        })
        .collect();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let gone = |pid: &str| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Gone, or a zombie waiting for its reaper.
        stat.is_empty() || stat.split_whitespace().nth(2) == Some("Z")
    };
    for _ in 0..500 {
        if pids.iter().all(|p| gone(p)) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for pid in &pids {
        assert!(gone(pid), "process {pid} outlived the agent");
    }
}
