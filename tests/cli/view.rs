//! The human view on a non-terminal stderr: tool lines say what ran, plan
//! items are shown, `-q` keeps the summary of a run without an answer, the
//! summary gives the cost per model, and a stopped run says how to resume.

use crate::support::TestEnv;

/// A human-mode run of `script`; returns the exit code, stdout and stderr.
fn run(env: &TestEnv, script: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let model = env.script("s.yaml", script);
    let out = env
        .cmd()
        .env("COLUMNS", "60")
        .args(["-m", &model])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const TOOLS: &str = r#"
- tool_calls:
    - {name: plan, arguments: {items: [{text: "read the code", status: done}, {text: "fix the bug", status: in_progress}, {text: "run the tests", status: pending}]}}
    - {name: bash, arguments: {command: "echo one two three four five six seven eight nine ten eleven twelve"}}
    - {name: bash, arguments: {command: "ls no-such-file"}}
    - {name: write_file, arguments: {path: notes/a.txt, content: hi}}
    - {name: read_file, arguments: {path: notes/a.txt}}
- tool_calls:
    - {name: submit, arguments: {output: done}}
"#;

#[test]
fn tool_lines_show_the_command_the_path_and_the_plan() {
    let env = TestEnv::new();
    let (code, stdout, stderr) = run(&env, TOOLS, &["t"]);
    assert_eq!(code, Some(0));
    assert_eq!(stdout, "done\n");
    let lines: Vec<&str> = stderr.lines().collect();
    let plan = lines
        .iter()
        .position(|l| l.starts_with("✓ plan (1/3 done)"))
        .expect(&stderr);
    assert_eq!(
        lines[plan + 1..plan + 4],
        [
            "    [x] read the code",
            "    [~] fix the bug",
            "    [ ] run the tests"
        ]
    );
    let long = lines
        .iter()
        .find(|l| l.starts_with("✓ bash echo one two"))
        .expect(&stderr);
    assert!(long.contains('…') && long.ends_with("ms)"), "{long}");
    assert!(long.chars().count() <= 60, "{long}");
    let failed = lines
        .iter()
        .position(|l| l.starts_with("✗ bash ls no-such-file ("))
        .expect(&stderr);
    assert!(
        lines[failed + 1].starts_with("    [exit code: 2] ls: "),
        "{stderr}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("✓ write_file notes/a.txt (")),
        "{stderr}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("✓ read_file notes/a.txt (")),
        "{stderr}"
    );
    assert!(!stderr.contains("plan updated"), "{stderr}");
}

const LOOP: &str = "- tool_calls:\n    - {name: bash, arguments: {command: 'true'}}\n";

#[test]
fn quiet_prints_the_summary_of_a_run_without_an_answer() {
    let env = TestEnv::new();
    let (code, stdout, stderr) = run(&env, LOOP, &["-q", "--step-limit", "2", "t"]);
    assert_eq!(code, Some(3));
    assert_eq!(stdout, "");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("step_limit after 2 steps · "),
        "{stderr}"
    );

    // An answered run stays silent under -q.
    let (code, stdout, stderr) = run(&env, TOOLS, &["-q", "t"]);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (Some(0), "done\n", "")
    );
}

#[test]
fn a_stopped_run_with_a_checkpoint_says_how_to_resume() {
    let env = TestEnv::new();
    let out = env.file("run.json");
    let (code, _, stderr) = run(
        &env,
        LOOP,
        &["--step-limit", "1", "-o", out.to_str().unwrap(), "t"],
    );
    assert_eq!(code, Some(3));
    let hint = format!(
        "to resume: tinyagent --resume {} --step-limit N",
        out.display()
    );
    assert!(
        stderr.lines().last().unwrap().starts_with(&hint),
        "{stderr}"
    );

    // Without a checkpoint (kept out of the run store) there is nothing to
    // resume.
    let (code, _, stderr) = run(&env, LOOP, &["--no-save", "--step-limit", "1", "t"]);
    assert_eq!(code, Some(3));
    assert!(!stderr.contains("to resume"), "{stderr}");
    // A finished run needs no hint.
    let (_, _, stderr) = run(&env, TOOLS, &["-o", out.to_str().unwrap(), "t"]);
    assert!(!stderr.contains("to resume"), "{stderr}");
}

/// The one trajectory in the run store besides `index.json`.
fn stored_trajectories(env: &TestEnv) -> Vec<std::path::PathBuf> {
    let dir = env.home().join(".local/state/tinyagent/runs");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|f| f.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.ends_with(".json") && name != "index.json"
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_stopped_run_kept_in_the_store_says_how_to_continue_it_and_both_ways_work() {
    let env = TestEnv::new();
    let (code, _, stderr) = run(&env, LOOP, &["--step-limit", "1", "t"]);
    assert_eq!(code, Some(3));
    let files = stored_trajectories(&env);
    assert_eq!(files.len(), 1, "{files:?}");
    let lines: Vec<&str> = stderr.lines().collect();
    let n = lines.len();
    assert_eq!(
        lines[n - 2],
        "to resume: tinyagent --continue --step-limit N (with a higher limit: limits count the whole run)",
        "{stderr}"
    );
    assert_eq!(
        lines[n - 1],
        format!(
            "       or: tinyagent --resume {} --step-limit N",
            files[0].display()
        )
    );
    // The first way: --continue from the same directory picks it up.
    let model = env.script("s.yaml", LOOP);
    let out = env
        .cmd()
        .args(["--json", "-m", &model, "--continue", "--step-limit", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let events = crate::support::events(&out.stdout);
    let first: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    assert_eq!(events[0]["resumed_from"], first["run_id"]);
    assert_eq!(crate::support::finished(&events)["steps"], 2);
    // The second way: --resume of the file named.
    let out = env
        .cmd()
        .args(["--json", "-m", &model, "--resume"])
        .arg(&files[0])
        .args(["--step-limit", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let events = crate::support::events(&out.stdout);
    assert_eq!(events[0]["resumed_from"], first["run_id"]);

    // Started with -C from elsewhere: --continue needs the same -C.
    let other = env.file("elsewhere");
    std::fs::create_dir_all(&other).unwrap();
    let out = env
        .cmd()
        .current_dir(&other)
        .args(["-m", &model, "-C"])
        .arg(env.work())
        .args(["--step-limit", "1", "t"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let work = env.work().canonicalize().unwrap();
    assert!(
        stderr.contains(&format!(
            "to resume: tinyagent -C {} --continue --step-limit N",
            work.display()
        )),
        "{stderr}"
    );
}

#[test]
fn the_summary_gives_the_cost_per_model_when_two_answered() {
    let env = TestEnv::new();
    env.user_config("retry: {attempts: 1, backoff: 1ms, jitter: 0}\nfallback: {switch_after: 1}\n");
    let primary = env.script(
        "p.yaml",
        "- tool_calls:\n    - {name: bash, arguments: {command: 'true'}}\n  cost: 0.01\n- error: {status: 503}\n",
    );
    let fallback = env.script(
        "f.yaml",
        "- tool_calls:\n    - {name: submit, arguments: {output: done}}\n  cost: 0.02\n",
    );
    let out = env
        .cmd()
        .args([
            "-m",
            &primary,
            "--fallback-model",
            &fallback,
            "--cost-limit",
            "5",
            "t",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stderr
        .lines()
        .find(|l| l.starts_with("submitted after 2 steps"))
        .expect(&stderr);
    assert!(
        summary.contains(&format!("$0.0300 ({primary} $0.0100, {fallback} $0.0200)")),
        "{summary}"
    );
    // Scripts that state their costs are not called unpriced.
    assert!(!stderr.contains("no known price"), "{stderr}");
}
