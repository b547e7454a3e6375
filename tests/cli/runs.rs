//! The run store and `--continue` (SPEC sections 7 and 9): every run is
//! kept without `-o`, the most recent run per directory is known, opting
//! out works, a broken store costs a warning, and `--continue` resumes.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::{events, finished, of_type, read_json, TestEnv};

const SUBMIT: &str = "- tool_calls:\n    - {name: submit, arguments: {output: finished}}\n  usage: {input: 200, output: 20}\n";

struct Run {
    code: Option<i32>,
    events: Vec<Value>,
    stderr: String,
}

fn run(env: &TestEnv, args: &[&str]) -> Run {
    let out = env.cmd().arg("--json").args(args).output().unwrap();
    Run {
        code: out.status.code(),
        events: events(&out.stdout),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn runs_dir(env: &TestEnv) -> PathBuf {
    env.home().join(".local/state/tinyagent/runs")
}

fn index(env: &TestEnv) -> Vec<Value> {
    read_json(&runs_dir(env).join("index.json"))["runs"]
        .as_array()
        .unwrap()
        .clone()
}

fn run_id(run: &Run) -> String {
    finished(&run.events)["run_id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn warnings(run: &Run) -> Vec<String> {
    of_type(&run.events, "warning")
        .iter()
        .map(|w| w["message"].as_str().unwrap().to_string())
        .collect()
}

fn canonical(path: &Path) -> String {
    path.canonicalize().unwrap().display().to_string()
}

#[test]
fn a_run_without_output_is_kept_in_the_store() {
    let env = TestEnv::new();
    let model = env.script("a.yaml", SUBMIT);
    let first = run(&env, &["-m", &model, "the task"]);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    assert!(warnings(&first).is_empty(), "{:?}", warnings(&first));
    let id = run_id(&first);
    let file = runs_dir(&env).join(format!("{id}.json"));
    let doc = read_json(&file);
    assert_eq!(doc["run_id"], id.as_str());
    assert_eq!(doc["status"], "submitted");
    assert_eq!(doc["task"], "the task");
    assert!(!runs_dir(&env).join(format!("{id}.json.journal")).exists());
    let entries = index(&env);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["run_id"], id.as_str());
    assert_eq!(entries[0]["cwd"], canonical(&env.work()).as_str());
    assert_eq!(entries[0]["path"], file.display().to_string().as_str());

    // With -o, the store records where FILE is and writes no copy.
    let out = env.file("out.json");
    let second = run(&env, &["-m", &model, "-o", out.to_str().unwrap(), "again"]);
    assert_eq!(second.code, Some(0));
    let id2 = run_id(&second);
    assert!(!runs_dir(&env).join(format!("{id2}.json")).exists());
    let entries = index(&env);
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1]["path"], out.display().to_string().as_str());
}

#[test]
fn xdg_state_home_moves_the_store() {
    let env = TestEnv::new();
    let model = env.script("a.yaml", SUBMIT);
    let state = env.file("state");
    let out = env
        .cmd()
        .env("XDG_STATE_HOME", &state)
        .args(["--json", "-m", &model, "task"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let id = run_id(&Run {
        code: None,
        events: events(&out.stdout),
        stderr: String::new(),
    });
    assert!(state.join(format!("tinyagent/runs/{id}.json")).is_file());
    assert!(!runs_dir(&env).exists());
}

#[test]
fn no_save_and_save_runs_false_keep_a_run_out() {
    let env = TestEnv::new();
    let model = env.script("a.yaml", SUBMIT);
    assert_eq!(
        run(&env, &["-m", &model, "--no-save", "task"]).code,
        Some(0)
    );
    assert!(!runs_dir(&env).exists());
    env.user_config("save_runs: false\n");
    assert_eq!(run(&env, &["-m", &model, "task"]).code, Some(0));
    assert!(!runs_dir(&env).exists());
    let refused = run(&env, &["-m", &model, "--continue", "more"]);
    assert_eq!(refused.code, Some(2));
    env.user_config("save_runs: maybe\n");
    assert_eq!(run(&env, &["-m", &model, "task"]).code, Some(2));
}

#[test]
fn a_store_that_cannot_be_written_costs_one_warning() {
    let env = TestEnv::new();
    let model = env.script("a.yaml", SUBMIT);
    env.user_config("health_db: off\n");
    // A file where the state directory should be.
    std::fs::create_dir_all(env.home().join(".local")).unwrap();
    std::fs::write(env.home().join(".local/state"), "not a directory").unwrap();
    let r = run(&env, &["-m", &model, "task"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let w = warnings(&r);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("run store"), "{w:?}");
    assert_eq!(finished(&r.events)["status"], "submitted");
    // Human mode says it on stderr and still answers.
    let out = env.cmd().args(["-m", &model, "task"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("run store").count(), 1, "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "finished");
}

#[test]
fn a_read_only_store_costs_one_warning() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    let model = env.script("a.yaml", SUBMIT);
    assert_eq!(run(&env, &["-m", &model, "task"]).code, Some(0));
    let dir = runs_dir(&env);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(dir.join("probe"), "").is_ok() {
        // Running as root: permissions do not bind; nothing to check.
        std::fs::remove_file(dir.join("probe")).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        return;
    }
    let r = run(&env, &["-m", &model, "task"]);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(warnings(&r).len(), 1, "{:?}", warnings(&r));
}

#[test]
fn a_corrupt_index_entry_is_skipped_with_a_warning() {
    let env = TestEnv::new();
    let model = env.script("a.yaml", SUBMIT);
    let first = run(&env, &["-m", &model, "task"]);
    let id = run_id(&first);
    let path = runs_dir(&env).join("index.json");
    let mut doc = read_json(&path);
    doc["runs"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"run_id": 42, "path": null}));
    std::fs::write(&path, doc.to_string()).unwrap();
    // --continue still finds the good entry, and says it skipped one.
    let next = run(&env, &["--continue", "more"]);
    assert_eq!(next.code, Some(0), "{}", next.stderr);
    let w = warnings(&next);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("corrupt"), "{w:?}");
    let started = &of_type(&next.events, "run.started")[0];
    assert_eq!(started["resumed_from"], id.as_str());
    // An index that is not JSON at all: a warning, and the run is kept anew.
    std::fs::write(&path, "{garbage").unwrap();
    let r = run(&env, &["-m", &model, "task"]);
    assert_eq!(r.code, Some(0));
    assert_eq!(warnings(&r).len(), 1, "{:?}", warnings(&r));
    assert_eq!(index(&env).len(), 1);
}

#[test]
fn continue_resumes_the_most_recent_run_of_the_directory() {
    let env = TestEnv::new();
    let failing = env.script("a.yaml", "- error: {status: 400}\n");
    let first = run(&env, &["-m", &failing, "the task"]);
    assert_eq!(first.code, Some(1), "{}", first.stderr);
    let first_id = run_id(&first);
    let first_file = runs_dir(&env).join(format!("{first_id}.json"));
    let before = std::fs::read(&first_file).unwrap();

    // An unfinished run continues without a TASK.
    env.script("a.yaml", SUBMIT);
    let second = run(&env, &["--continue"]);
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    let started = &of_type(&second.events, "run.started")[0];
    assert_eq!(started["resumed_from"], first_id.as_str());
    let second_id = run_id(&second);
    // Kept as a run of its own; the earlier file is left as it was.
    let second_doc = read_json(&runs_dir(&env).join(format!("{second_id}.json")));
    assert_eq!(second_doc["resumed_from"], first_id.as_str());
    assert_eq!(second_doc["status"], "submitted");
    assert_eq!(std::fs::read(&first_file).unwrap(), before);

    // Now the most recent run is the finished one: without a TASK it is
    // refused, with one it continues with the follow-up.
    let refused = run(&env, &["--continue"]);
    assert_eq!(refused.code, Some(2));
    assert!(refused.events.is_empty());
    assert!(
        refused.stderr.contains("already finished (submitted)"),
        "{}",
        refused.stderr
    );
    let third = run(&env, &["--continue", "and now the follow-up"]);
    assert_eq!(third.code, Some(0), "{}", third.stderr);
    assert_eq!(
        of_type(&third.events, "run.started")[0]["resumed_from"],
        second_id.as_str()
    );
    let third_doc = read_json(&runs_dir(&env).join(format!("{}.json", run_id(&third))));
    let messages = third_doc["messages"].as_array().unwrap();
    let users: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["the task", "and now the follow-up"]);
    assert_eq!(index(&env).len(), 3);
}

#[test]
fn continue_looks_only_at_this_working_directory() {
    let env = TestEnv::new();
    let model = env.script("a.yaml", SUBMIT);
    let other = env.file("other");
    std::fs::create_dir_all(&other).unwrap();
    let first = run(&env, &["-m", &model, "task"]);
    assert_eq!(first.code, Some(0));

    let out = env
        .cmd()
        .args([
            "--json",
            "--continue",
            "more",
            "-C",
            other.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("tinyagent: error: --continue: no run to continue in"),
        "{stderr}"
    );

    // -C to the first run's directory from elsewhere finds it.
    let out = env
        .cmd()
        .current_dir(&other)
        .args([
            "--json",
            "--continue",
            "more",
            "-C",
            env.work().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    assert_eq!(
        of_type(&ev, "run.started")[0]["resumed_from"],
        run_id(&first).as_str()
    );
}

#[test]
fn continue_skips_a_run_whose_file_is_gone_and_conflicts_with_resume() {
    let env = TestEnv::new();
    let model = env.script("a.yaml", SUBMIT);
    let kept = run(&env, &["-m", &model, "task"]);
    let out = env.file("gone.json");
    assert_eq!(
        run(&env, &["-m", &model, "-o", out.to_str().unwrap(), "task"]).code,
        Some(0)
    );
    std::fs::remove_file(&out).unwrap();
    let next = run(&env, &["--continue", "more"]);
    assert_eq!(next.code, Some(0), "{}", next.stderr);
    assert_eq!(
        of_type(&next.events, "run.started")[0]["resumed_from"],
        run_id(&kept).as_str()
    );
    assert_eq!(warnings(&next).len(), 1, "{:?}", warnings(&next));

    let both = run(&env, &["--continue", "--resume", out.to_str().unwrap()]);
    assert_eq!(both.code, Some(2));
}

#[test]
fn resume_of_a_finished_checkpoint_with_a_task_is_a_follow_up() {
    let env = TestEnv::new();
    let model = env.script("a.yaml", SUBMIT);
    let traj = env.file("t.json");
    let path = traj.to_str().unwrap();
    let first = run(&env, &["-m", &model, "-o", path, "first"]);
    assert_eq!(first.code, Some(0));
    let next = run(&env, &["--resume", path, "second"]);
    assert_eq!(next.code, Some(0), "{}", next.stderr);
    let doc = read_json(&traj);
    assert_eq!(doc["resumed_from"], run_id(&first).as_str());
    let users: Vec<&str> = doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["first", "second"]);
    // The store now names FILE for the new run, once.
    let entries = index(&env);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["run_id"], run_id(&next).as_str());
}

#[test]
fn concurrent_runs_are_all_recorded() {
    let env = TestEnv::new();
    let model = env.script("a.yaml", SUBMIT);
    let children: Vec<_> = (0..8)
        .map(|i| {
            env.std_cmd()
                .args(["--json", "-m", &model, &format!("task {i}")])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert_eq!(child.wait().unwrap().code(), Some(0));
    }
    let entries = index(&env);
    assert_eq!(entries.len(), 8);
    for e in entries {
        assert!(Path::new(e["path"].as_str().unwrap()).is_file());
    }
}
