//! `--worktree [NAME]`: a new branch and worktree beside the repository,
//! where the agent works; its path reported; refusals with exit 2.

use std::path::{Path, PathBuf};
use std::process::Command;

use predicates::prelude::*;

use crate::support::{events, finished, of_type, read_json, TestEnv};

/// Runs git in `dir`, panicking on failure; returns stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Makes `work/` a repository with one commit.
fn repo(env: &TestEnv) -> PathBuf {
    let work = env.work().canonicalize().unwrap();
    git(&work, &["init", "-q"]);
    std::fs::write(work.join("README"), "hello\n").unwrap();
    git(&work, &["add", "README"]);
    git(&work, &["commit", "-q", "-m", "init"]);
    work
}

const WRITE_AND_SUBMIT: &str = r#"- tool_calls:
  - {name: write_file, arguments: {path: made.txt, content: "by the agent\n"}}
  - {name: bash, arguments: {command: "git branch --show-current; pwd"}}
- tool_calls:
  - {name: submit, arguments: {output: done}}
"#;

#[test]
fn a_named_worktree_is_created_beside_the_repository_and_used() {
    let env = TestEnv::new();
    let work = repo(&env);
    let model = env.script("s.yaml", WRITE_AND_SUBMIT);
    let traj = env.file("run.json");
    let out = env
        .cmd()
        .args([
            "-m",
            &model,
            "--json",
            "-o",
            traj.to_str().unwrap(),
            "--worktree",
            "feature-x",
            "write it",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");

    let expected = work.parent().unwrap().join("work-worktrees/feature-x");
    assert!(expected.is_dir());
    assert!(
        stderr.contains(&format!("worktree: {}", expected.display())),
        "{stderr}"
    );
    // The branch exists and is checked out there; the agent's file landed
    // in the worktree, not in the main checkout.
    assert_eq!(
        git(&work, &["rev-parse", "--abbrev-ref", "tinyagent/feature-x"]),
        "tinyagent/feature-x"
    );
    assert_eq!(
        std::fs::read_to_string(expected.join("made.txt")).unwrap(),
        "by the agent\n"
    );
    assert!(!work.join("made.txt").exists());
    assert_ne!(
        git(&work, &["branch", "--show-current"]),
        "tinyagent/feature-x"
    );

    let ev = events(&out.stdout);
    let started = &ev[0];
    assert_eq!(started["type"], "run.started");
    assert_eq!(started["worktree"], expected.display().to_string());
    assert_eq!(started["cwd"], expected.display().to_string());
    let bash = of_type(&ev, "tool.finished")
        .into_iter()
        .find(|e| e["tool"] == "bash")
        .unwrap()
        .clone();
    assert_eq!(
        bash["output"],
        format!("tinyagent/feature-x\n{}\n", expected.display())
    );
    assert_eq!(finished(&ev)["status"], "submitted");
    assert_eq!(read_json(&traj)["worktree"], expected.display().to_string());
}

#[test]
fn without_a_name_the_worktree_is_named_after_the_run_id() {
    let env = TestEnv::new();
    let work = repo(&env);
    let model = env.script("s.yaml", WRITE_AND_SUBMIT);
    // A value that cannot be a name, with no TASK, is the task.
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "--worktree", "write the file"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ev = events(&out.stdout);
    let run_id = ev[0]["run_id"].as_str().unwrap();
    assert_eq!(ev[0]["task"], "write the file");
    let expected = work.parent().unwrap().join("work-worktrees").join(run_id);
    assert_eq!(ev[0]["worktree"], expected.display().to_string());
    assert!(expected.join("made.txt").is_file());
    git(
        &work,
        &[
            "rev-parse",
            "--verify",
            &format!("refs/heads/tinyagent/{run_id}"),
        ],
    );
}

#[test]
fn the_run_started_event_has_no_worktree_field_without_the_flag() {
    let env = TestEnv::new();
    repo(&env);
    let model = env.script("s.yaml", WRITE_AND_SUBMIT);
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "t"])
        .output()
        .unwrap();
    let ev = events(&out.stdout);
    assert!(ev[0].get("worktree").is_none());
    assert!(env.work().join("made.txt").is_file());
}

#[test]
fn an_existing_name_is_refused_with_exit_2() {
    let env = TestEnv::new();
    let work = repo(&env);
    let model = env.script("s.yaml", WRITE_AND_SUBMIT);
    env.cmd()
        .args(["-m", &model, "--worktree", "dup", "t"])
        .assert()
        .success();
    std::fs::remove_file(work.parent().unwrap().join("work-worktrees/dup/made.txt")).unwrap();
    env.cmd()
        .args(["-m", &model, "--worktree", "dup", "t"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("already exists"));
    // Nothing ran the second time.
    assert!(!work
        .parent()
        .unwrap()
        .join("work-worktrees/dup/made.txt")
        .exists());

    // A branch of that name, without the directory, is refused too.
    git(&work, &["branch", "tinyagent/taken"]);
    env.cmd()
        .args(["-m", &model, "--worktree", "taken", "t"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("tinyagent/taken already exists"));
}

#[test]
fn outside_a_git_repository_the_run_is_refused_with_exit_2() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", WRITE_AND_SUBMIT);
    env.cmd()
        .args(["-m", &model, "--json", "--worktree", "x", "t"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::contains("not inside a git repository"));
    assert!(!env.work().join("made.txt").exists());
}

#[test]
fn mcp_servers_start_in_the_worktree() {
    let env = TestEnv::new();
    let work = repo(&env);
    let server = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/cli/support/mcp_server.py"
    );
    let cfg = env.write(
        "c.yaml",
        &format!("mcp_servers:\n  t: {{command: python3, args: [{server}]}}\n"),
    );
    let model = env.script(
        "s.yaml",
        "- tool_calls:\n  - {name: mcp__t__cwd, arguments: {}}\n- tool_calls:\n  - {name: submit, arguments: {output: ok}}\n",
    );
    let out = env
        .cmd()
        .args([
            "-c",
            cfg.to_str().unwrap(),
            "-m",
            &model,
            "--json",
            "--worktree",
            "mcp",
            "t",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    let cwd = of_type(&ev, "tool.finished")[0]["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        PathBuf::from(cwd),
        work.parent().unwrap().join("work-worktrees/mcp")
    );
}

#[test]
fn a_resumed_worktree_run_continues_in_its_worktree() {
    let env = TestEnv::new();
    let work = repo(&env);
    let model = env.script("s.yaml", WRITE_AND_SUBMIT);
    let traj = env.file("run.json");
    let traj = traj.to_str().unwrap();
    env.cmd()
        .args([
            "-m",
            &model,
            "-o",
            traj,
            "--step-limit",
            "1",
            "--worktree",
            "again",
            "t",
        ])
        .assert()
        .code(3);
    let expected = work.parent().unwrap().join("work-worktrees/again");
    let out = env
        .cmd()
        .args(["--resume", traj, "--json", "--step-limit", "5"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ev = events(&out.stdout);
    assert_eq!(ev[0]["worktree"], expected.display().to_string());
    assert_eq!(ev[0]["cwd"], expected.display().to_string());
    assert_eq!(
        read_json(Path::new(traj))["worktree"],
        expected.display().to_string()
    );
    assert!(!work.join("made.txt").exists());
}
