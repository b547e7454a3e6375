//! The GitHub Action's script (`scripts/action/run.sh`, SPEC 21) run as
//! the composite action runs it: `INPUT_*` variables, a temp
//! `GITHUB_OUTPUT`, `GITHUB_STEP_SUMMARY` and `GITHUB_PATH`, install.sh
//! fetching the binary under test from a loopback release layout, and the
//! offline script model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::install::{release, serve, Machine, VERSION};
use crate::support::read_json;
use crate::support::stub::Stub;

struct Runner {
    machine: Machine,
    stub: Stub,
}

impl Runner {
    fn new() -> Runner {
        Runner {
            machine: Machine::new("Linux", "x86_64"),
            stub: serve(release().to_path_buf()),
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.machine.dir.path().join(name)
    }

    fn script(&self, name: &str, yaml: &str) -> String {
        let path = self.file(name);
        std::fs::write(&path, yaml).unwrap();
        format!("script/{}", path.display())
    }

    /// Runs the action's script with `inputs` (`task` -> `INPUT_TASK`).
    fn run(&self, inputs: &[(&str, &str)]) -> (Output, BTreeMap<String, String>) {
        for name in ["output", "summary.md", "path"] {
            std::fs::write(self.file(name), "").unwrap();
        }
        let temp = self.file("runner-temp");
        std::fs::create_dir_all(&temp).unwrap();
        let mut cmd =
            Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/action/run.sh"));
        cmd.env_clear()
            .env("PATH", self.machine.path())
            .env("HOME", self.file("home"))
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_OUTPUT", self.file("output"))
            .env("GITHUB_STEP_SUMMARY", self.file("summary.md"))
            .env("GITHUB_PATH", self.file("path"))
            .env("RUNNER_TEMP", &temp)
            .env(
                "TINYAGENT_DOWNLOAD_URL",
                format!("{}/releases", self.stub.url()),
            )
            .current_dir(self.machine.dir.path());
        for (name, value) in inputs {
            cmd.env(
                format!("INPUT_{}", name.to_uppercase().replace('-', "_")),
                value,
            );
        }
        let out = cmd.output().unwrap();
        let outputs = parse_outputs(&std::fs::read_to_string(self.file("output")).unwrap());
        (out, outputs)
    }
}

/// `name=value` lines and `name<<DELIMITER` … `DELIMITER` blocks.
fn parse_outputs(text: &str) -> BTreeMap<String, String> {
    let mut outputs = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some((name, delimiter)) = line.split_once("<<") {
            let mut value = Vec::new();
            for line in lines.by_ref() {
                if line == delimiter {
                    break;
                }
                value.push(line);
            }
            outputs.insert(name.to_string(), value.join("\n"));
        } else if let Some((name, value)) = line.split_once('=') {
            outputs.insert(name.to_string(), value.to_string());
        }
    }
    outputs
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_run_that_answers_sets_every_output_and_passes() {
    let runner = Runner::new();
    let primary = runner.script("a.yaml", "- error: {status: 503}\n");
    let fallback = runner.script(
        "b.yaml",
        "- tool_calls:\n  - {name: submit, arguments: {output: \"Fixed.\\n\\nThe test now waits for the server.\"}}\n  usage: {input: 100, output: 10}\n  cost: 0.25\n",
    );
    let config = runner.file("agent.yaml");
    std::fs::write(&config, "retry: {attempts: 1, backoff: 1ms, jitter: 0}\n").unwrap();
    let unused = runner.script("c.yaml", "- text: unused\n");
    let (out, outputs) = runner.run(&[
        ("task", "Fix the flaky test\nIt fails one run in ten."),
        ("model", &primary),
        ("fallback-models", &format!("{fallback}\n\n  {unused}  \n")),
        ("config", config.to_str().unwrap()),
        ("args", "--step-limit 5 --time-limit '10m'"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(outputs["status"], "submitted");
    assert_eq!(outputs["exit-code"], "0");
    assert_eq!(
        outputs["answer"],
        "Fixed.\n\nThe test now waits for the server."
    );
    assert_eq!(outputs["cost-usd"], "0.25");
    // The checkpoint is the run's trajectory, with the chain and the task.
    let doc = read_json(Path::new(&outputs["checkpoint"]));
    assert_eq!(doc["status"], "submitted");
    assert_eq!(doc["task"], "Fix the flaky test\nIt fails one run in ten.");
    assert_eq!(
        doc["fallback_models"],
        serde_json::json!([fallback, unused])
    );
    assert_eq!(doc["model_switches"].as_array().unwrap().len(), 1);
    // Annotations and the step summary come from tinyagent itself.
    assert!(stderr(&out).contains("::warning title=tinyagent model fallback::"));
    let md = std::fs::read_to_string(runner.file("summary.md")).unwrap();
    assert!(md.contains("### tinyagent: submitted"), "{md}");
    assert!(md.contains("| task | Fix the flaky test |"), "{md}");
    // Later steps find the binary; the default version is the action's own.
    let bin = std::fs::read_to_string(runner.file("path")).unwrap();
    assert!(Path::new(bin.trim()).join("tinyagent").is_file(), "{bin}");
    let asked: Vec<String> = runner
        .stub
        .requests()
        .iter()
        .map(|r| r.path.clone())
        .collect();
    assert!(
        asked[0].starts_with(&format!("/releases/v{VERSION}/")),
        "{asked:?}"
    );
}

#[test]
fn an_outage_fails_the_step_with_exit_75_and_keeps_the_checkpoint() {
    let runner = Runner::new();
    let down = runner.script("down.yaml", "- error: {status: 503}\n");
    let fast = runner.file("fast retry.yaml");
    std::fs::write(&fast, "retry: {attempts: 2, backoff: 1ms, jitter: 0}\n").unwrap();
    let (out, outputs) = runner.run(&[
        ("task", "Fix it"),
        ("model", &down),
        ("args", &format!("-c \"{}\"", fast.display())),
        ("version", "latest"),
    ]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert_eq!(outputs["status"], "error");
    assert_eq!(outputs["exit-code"], "75");
    assert_eq!(outputs["answer"], "");
    let doc = read_json(Path::new(&outputs["checkpoint"]));
    assert_eq!(doc["status"], "error");
    assert!(
        stderr(&out).contains("::error title=tinyagent run error::"),
        "{}",
        stderr(&out)
    );
    assert_eq!(runner.stub.requests()[0].path, "/releases/latest");
}

#[test]
fn a_run_that_never_starts_fails_the_step_saying_so() {
    let runner = Runner::new();
    let (out, outputs) = runner.run(&[("task", "Fix it"), ("model", "gpt-5")]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(outputs["exit-code"], "2");
    assert_eq!(outputs["status"], "");
    assert_eq!(outputs["checkpoint"], "");
    let err = stderr(&out);
    assert!(err.contains("did you mean openai/gpt-5?"), "{err}");
    assert!(
        err.contains(
            "::error title=tinyagent action::tinyagent exited with 2 before the run started"
        ),
        "{err}"
    );
    // No task: nothing is installed or run.
    let runner = Runner::new();
    let (out, _) = runner.run(&[("model", "gpt-5")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("::error title=tinyagent action::the input 'task' is required"));
    assert_eq!(runner.stub.count(), 0);
    // Args that cannot be split are refused before the run.
    let runner = Runner::new();
    let (out, _) = runner.run(&[("task", "t"), ("args", "--time-limit '10m")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("the input 'args' cannot be split"),
        "{}",
        stderr(&out)
    );
}

/// An install that fails (here a version the releases do not have) fails
/// the step with an `::error` naming why and the `exit-code` output set,
/// instead of stopping silently under `set -e` with no outputs.
#[test]
fn a_failed_install_fails_the_step_with_an_error_and_the_exit_code() {
    let runner = Runner::new();
    let (out, outputs) = runner.run(&[("task", "Fix it"), ("version", "9.9.9")]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(outputs["exit-code"], "1");
    assert_eq!(outputs["status"], "");
    assert_eq!(outputs["checkpoint"], "");
    assert_eq!(outputs["answer"], "");
    let err = stderr(&out);
    let archive = "v9.9.9/tinyagent-9.9.9-x86_64-unknown-linux-musl.tar.gz";
    assert!(
        err.contains(&format!(
            "::error title=tinyagent action::installing tinyagent 9.9.9 failed: download failed: {}/releases/{archive} (HTTP 404)\n",
            runner.stub.url()
        )),
        "{err}"
    );
    // install.sh's own line stays in the log.
    assert!(
        err.contains("tinyagent install: error: download failed"),
        "{err}"
    );
}
