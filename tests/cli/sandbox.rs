//! `--sandbox`: bash commands under bubblewrap can write only the working
//! directory and temp, and reach the network only over HTTP(S) to allowed
//! hosts, through tinyagent's filtering proxy. Without a usable sandbox the
//! run is refused (exit 2). Tests that need bubblewrap (and curl) skip with
//! a note when the machine lacks them.

use std::path::Path;
use std::process::Command;

use predicates::prelude::*;
use serde_json::{json, Value};

use crate::support::stub::{Reply, Stub};
use crate::support::{events, finished, of_type, TestEnv};

/// Whether bubblewrap can make a network-less sandbox here; prints why not.
fn sandbox_available() -> bool {
    let ok = Command::new("bwrap")
        .args([
            "--die-with-parent",
            "--unshare-net",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--cap-drop",
            "ALL",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            "true",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("note: skipping: bubblewrap (bwrap) is missing or cannot create namespaces here");
    }
    ok
}

fn curl_available() -> bool {
    let ok = Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("note: skipping: curl is not installed");
    }
    ok
}

/// A script running each command with `bash`, then submitting.
fn commands(env: &TestEnv, commands: &[&str]) -> String {
    let mut yaml = String::from("- tool_calls:\n");
    for c in commands {
        yaml.push_str(&format!(
            "  - {{name: bash, arguments: {{command: {}}}}}\n",
            json!(c)
        ));
    }
    yaml.push_str("- tool_calls:\n  - {name: submit, arguments: {output: done}}\n");
    env.script("s.yaml", &yaml)
}

/// The `bash` results of a run, in order.
fn bash_results(stdout: &[u8]) -> Vec<Value> {
    let ev = events(stdout);
    assert_eq!(finished(&ev)["status"], "submitted");
    of_type(&ev, "tool.finished")
        .into_iter()
        .filter(|e| e["tool"] == "bash")
        .cloned()
        .collect()
}

#[test]
fn writes_outside_the_working_directory_fail() {
    if !sandbox_available() {
        return;
    }
    let env = TestEnv::new();
    // Outside the working directory and outside /tmp: the build's temp dir.
    let outside = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let outside_file = outside.path().join("escaped.txt");
    let home_file = env.home().join("escaped.txt");
    let model = commands(
        &env,
        &[
            "echo inside > inside.txt",
            &format!("echo out > {}", outside_file.display()),
            &format!("echo out > {}", home_file.display()),
            "echo scratch > /tmp/scratch.txt && cat /tmp/scratch.txt",
        ],
    );
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "--sandbox", "t"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results = bash_results(&out.stdout);
    assert_eq!(results[0]["ok"], true, "{}", results[0]);
    assert_eq!(
        std::fs::read_to_string(env.work().join("inside.txt")).unwrap(),
        "inside\n"
    );
    assert_eq!(results[1]["ok"], false);
    // Read-only outside /tmp; a checkout that itself lives under /tmp sees a
    // private, empty /tmp instead. Either way nothing reaches the host.
    let output = results[1]["output"].as_str().unwrap();
    assert!(
        output.contains("Read-only file system") || output.contains("No such file or directory"),
        "{}",
        results[1]
    );
    assert!(!outside_file.exists());
    assert_eq!(results[2]["ok"], false, "{}", results[2]);
    assert!(!home_file.exists());
    // Temp is writable (a private /tmp).
    assert_eq!(results[3]["output"], "scratch\n");

    // The same write without --sandbox succeeds: the sandbox made the difference.
    let model = commands(&env, &[&format!("echo out > {}", outside_file.display())]);
    env.cmd().args(["-m", &model, "t"]).assert().success();
    assert!(outside_file.exists());
}

#[test]
fn only_allowed_hosts_are_reachable() {
    if !sandbox_available() || !curl_available() {
        return;
    }
    let env = TestEnv::new();
    let allowed = Stub::sequence(vec![Reply::json(200, &json!({"reached": "allowed"}))]);
    let other = Stub::sequence(vec![Reply::json(200, &json!({"reached": "other"}))]);
    let allowed_port = allowed.url().rsplit(':').next().unwrap().to_string();
    let model = commands(
        &env,
        &[
            // Allowed by name: plain HTTP through the proxy, and a CONNECT tunnel (-p).
            &format!("curl -sSf -m 10 http://localhost:{allowed_port}/plain"),
            &format!("curl -sSf -m 10 -p http://localhost:{allowed_port}/tunnel"),
            // A loopback server not on the allowlist: direct, and through the proxy.
            &format!("curl -sSf -m 10 {}/direct", other.url()),
            &format!("curl -sS -m 10 --noproxy '' {}/proxied", other.url()),
            // Any other name is refused by the proxy before it is resolved.
            "curl -sS -m 10 -o /dev/null -w '%{http_code}' http://example.com/",
            // No way around the proxy: raw TCP to the host's loopback fails.
            &format!("exec 3<>/dev/tcp/127.0.0.1/{allowed_port}"),
        ],
    );
    let out = env
        .cmd()
        .args([
            "-m",
            &model,
            "--json",
            "--sandbox",
            "--sandbox-allow-domain",
            "localhost",
            "t",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = bash_results(&out.stdout);
    assert_eq!(r[0]["ok"], true, "{}", r[0]);
    assert!(
        r[0]["output"].as_str().unwrap().contains("allowed"),
        "{}",
        r[0]
    );
    assert_eq!(r[1]["ok"], true, "{}", r[1]);
    let paths: Vec<String> = allowed.requests().iter().map(|c| c.path.clone()).collect();
    assert_eq!(paths, ["/plain", "/tunnel"]);

    assert_eq!(r[2]["ok"], false, "{}", r[2]);
    assert!(
        r[3]["output"]
            .as_str()
            .unwrap()
            .contains("not an allowed domain"),
        "{}",
        r[3]
    );
    assert_eq!(r[4]["output"], "403");
    assert_eq!(r[5]["ok"], false, "{}", r[5]);
    assert_eq!(other.count(), 0, "the other server was reached");
}

#[test]
fn config_domains_apply_and_the_flag_replaces_them() {
    if !sandbox_available() || !curl_available() {
        return;
    }
    let env = TestEnv::new();
    env.user_config("sandbox_allowed_domains: [localhost]\n");
    let stub = Stub::sequence(vec![Reply::json(200, &json!({"ok": true}))]);
    let port = stub.url().rsplit(':').next().unwrap().to_string();
    let model = commands(
        &env,
        &[&format!("curl -sSf -m 10 http://localhost:{port}/")],
    );
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "--sandbox", "t"])
        .output()
        .unwrap();
    assert_eq!(bash_results(&out.stdout)[0]["ok"], true);
    assert_eq!(stub.count(), 1);

    let out = env
        .cmd()
        .args([
            "-m",
            &model,
            "--json",
            "--sandbox",
            "--sandbox-allow-domain",
            "example.org",
            "t",
        ])
        .output()
        .unwrap();
    assert_eq!(bash_results(&out.stdout)[0]["ok"], false);
    assert_eq!(stub.count(), 1);
}

#[test]
fn without_bubblewrap_the_run_is_refused_before_any_request() {
    let env = TestEnv::new();
    let empty = env.file("empty-bin");
    std::fs::create_dir_all(&empty).unwrap();
    let model = commands(&env, &["touch ran.txt"]);
    env.cmd()
        .env("PATH", &empty)
        .args(["-m", &model, "--json", "--sandbox", "t"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::contains("--sandbox").and(predicate::str::contains("bwrap")));
    assert!(!env.work().join("ran.txt").exists());
}

#[test]
fn a_bubblewrap_that_cannot_create_namespaces_is_refused_with_its_reason() {
    let env = TestEnv::new();
    let bin = env.file("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    fake_bwrap(&bin);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let model = commands(&env, &["touch ran.txt"]);
    env.cmd()
        .env("PATH", path)
        .args(["-m", &model, "--sandbox", "t"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("cannot create a sandbox")
                .and(predicate::str::contains("Operation not permitted")),
        );
    assert!(!env.work().join("ran.txt").exists());
}

fn fake_bwrap(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("bwrap");
    std::fs::write(&path, "#!/bin/sh\necho 'bwrap: Creating new namespace failed: Operation not permitted' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn bad_domains_and_a_domain_without_sandbox_are_usage_errors() {
    let env = TestEnv::new();
    let model = commands(&env, &["true"]);
    env.cmd()
        .args([
            "-m",
            &model,
            "--sandbox",
            "--sandbox-allow-domain",
            "https://crates.io",
            "t",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("https://crates.io"));
    env.cmd()
        .args(["-m", &model, "--sandbox-allow-domain", "crates.io", "t"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--sandbox"));
}

#[test]
fn sandboxed_commands_die_with_a_killed_agent() {
    if !sandbox_available() {
        return;
    }
    let env = TestEnv::new();
    let model = commands(
        &env,
        &["(sleep 1; echo late > late.txt) & touch started.txt; wait"],
    );
    let mut child = env
        .std_cmd()
        .args(["-m", &model, "-q", "--sandbox", "t"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = env.work().join("started.txt");
    for _ in 0..250 {
        if started.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(started.exists(), "the sandboxed command did not start");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(
        !env.work().join("late.txt").exists(),
        "a sandboxed process outlived the agent"
    );
}

#[test]
fn git_hooks_of_the_working_directory_cannot_be_planted() {
    if !sandbox_available() {
        return;
    }
    let env = TestEnv::new();
    let work = env.work();
    assert!(Command::new("git")
        .arg("-C")
        .arg(&work)
        .args(["init", "-q"])
        .status()
        .unwrap()
        .success());
    let model = commands(
        &env,
        &[
            "echo 'echo escaped' > .git/hooks/pre-commit",
            "echo 'x' > notes.txt",
        ],
    );
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "--sandbox", "t"])
        .output()
        .unwrap();
    let r = bash_results(&out.stdout);
    assert_eq!(r[0]["ok"], false, "{}", r[0]);
    assert!(!work.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        r[1]["ok"], true,
        "the rest of the working directory stays writable"
    );
}
