//! GitHub Actions (SPEC section 15): `::warning` commands for switches and
//! restores, `::error` for a run without an answer, on stderr; the Markdown
//! step summary; an unwritable summary file costs a warning.

use crate::support::{events, finished, of_type, TestEnv};

const FAST_RETRY: &str = "retry: {attempts: 2, backoff: 1ms, max_backoff: 5ms, jitter: 0}\n";

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(env: &TestEnv, summary: &str, args: &[&str]) -> Run {
    let cfg = env.write("config.yaml", FAST_RETRY);
    let out = env
        .cmd()
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", summary)
        .args(["-c", cfg.to_str().unwrap()])
        .args(args)
        .arg("task")
        .output()
        .unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

const SUBMIT: &str =
    "- tool_calls:\n  - {name: submit, arguments: {output: done}}\n  usage: {input: 100, output: 10}\n  cost: 0.25\n";

#[test]
fn a_switch_is_a_warning_command_and_the_summary_is_appended() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let b = env.script("b.yaml", SUBMIT);
    let summary = env.write("summary.md", "# earlier step\n");
    let out = env.file("run.json");
    let r = run(
        &env,
        summary.to_str().unwrap(),
        &[
            "-m",
            &a,
            "--fallback-model",
            &b,
            "--json",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    // stdout stays pure JSON lines.
    let ev = events(r.stdout.as_bytes());
    assert_eq!(finished(&ev)["status"], "submitted");
    let line = format!("model fallback: {a} -> {b} (http_503) at step 1");
    assert!(
        r.stderr
            .lines()
            .any(|l| l == format!("::warning title=tinyagent model fallback::{line}")),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("::error"), "{}", r.stderr);
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(
        md.starts_with("# earlier step\n### tinyagent: submitted\n"),
        "{md}"
    );
    assert!(
        md.contains("| task | task |\n| status | `submitted` (exit 0) |"),
        "{md}"
    );
    assert!(md.contains("| steps | 1 |"), "{md}");
    assert!(md.contains("\n| duration | "), "{md}");
    assert!(md.contains("\n**Answer**\n\ndone\n"), "{md}");
    assert!(md.contains("| tokens | 100 input, 10 output |"), "{md}");
    assert!(
        md.contains(&format!("| `{b}` | 1 | 100 | 10 | $0.2500 |")),
        "{md}"
    );
    assert!(md.contains(&format!("- {line}")), "{md}");
    assert!(
        md.contains(&format!("tinyagent --resume {} ", out.display())),
        "{md}"
    );
}

#[test]
fn a_run_without_an_answer_is_an_error_command_with_the_resume_command_in_the_summary() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let summary = env.file("summary.md");
    let out = env.file("run.json");
    let r = run(
        &env,
        summary.to_str().unwrap(),
        &["-m", &a, "-q", "-o", out.to_str().unwrap()],
    );
    assert_eq!(r.code, Some(75), "{}", r.stderr);
    let error = r
        .stderr
        .lines()
        .find(|l| l.starts_with("::error "))
        .unwrap_or_else(|| panic!("no ::error in {}", r.stderr));
    assert!(
        error.starts_with("::error title=tinyagent run error::"),
        "{error}"
    );
    // One line: the message's newline is escaped.
    assert!(error.contains("%0Aerror after 0 steps"), "{error}");
    assert!(error.contains("HTTP 503"), "{error}");
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.contains("| status | `error` (exit 75) |"), "{md}");
    assert!(
        md.contains(&format!("```sh\ntinyagent --resume {}\n```", out.display())),
        "{md}"
    );
}

#[test]
fn without_output_the_summary_resumes_the_run_stores_file() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let summary = env.file("summary.md");
    let r = run(&env, summary.to_str().unwrap(), &["-m", &a, "-q"]);
    assert_eq!(r.code, Some(75), "{}", r.stderr);
    let runs = env.home().join(".local/state/tinyagent/runs");
    let file = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .map(|f| f.path())
        .find(|p| p.extension().is_some_and(|e| e == "json") && !p.ends_with("index.json"))
        .expect("the run's trajectory in the store");
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(
        md.contains(&format!(
            "```sh\ntinyagent --resume {}\n```",
            file.display()
        )),
        "{md}"
    );
    // The command works: it resumes that run.
    let run_id = crate::support::read_json(&file)["run_id"].clone();
    let out = env
        .cmd()
        .args(["--json", "-m", &a, "--resume"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    let events = crate::support::events(&out.stdout);
    assert_eq!(events[0]["resumed_from"], run_id, "{events:?}");

    // Kept out of the store, there is no checkpoint and no resume command.
    let summary = env.file("summary2.md");
    let r = run(
        &env,
        summary.to_str().unwrap(),
        &["-m", &a, "-q", "--no-save"],
    );
    assert_eq!(r.code, Some(75));
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(!md.contains("--resume"), "{md}");
}

#[test]
fn messages_are_escaped_for_the_workflow_command_format() {
    let env = TestEnv::new();
    // A spec holding `%` and `,` reaches the message escaped.
    let a = env.script("50%,a.yaml", "- error: {status: 503}\n");
    let b = env.script("b.yaml", SUBMIT);
    let summary = env.file("summary.md");
    let r = run(
        &env,
        summary.to_str().unwrap(),
        &["-m", &a, "--fallback-model", &b, "-q"],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let escaped = a.replace('%', "%25");
    assert!(
        r.stderr.contains(&format!(
            "::warning title=tinyagent model fallback::model fallback: {escaped} -> {b}"
        )),
        "{}",
        r.stderr
    );
}

#[test]
fn an_unwritable_summary_costs_a_warning_not_the_run() {
    let env = TestEnv::new();
    let b = env.script("b.yaml", SUBMIT);
    let missing = env.file("no/such/dir/summary.md");
    let r = run(&env, missing.to_str().unwrap(), &["-m", &b, "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let ev = events(r.stdout.as_bytes());
    let warnings = of_type(&ev, "warning");
    assert!(
        warnings.iter().any(|w| w["message"]
            .as_str()
            .unwrap()
            .starts_with("cannot write the GitHub step summary")),
        "{warnings:?}"
    );
    assert_eq!(finished(&ev)["status"], "submitted");
}

#[test]
fn outside_github_actions_nothing_is_annotated() {
    let env = TestEnv::new();
    let a = env.script("a.yaml", "- error: {status: 503}\n");
    let b = env.script("b.yaml", SUBMIT);
    let summary = env.file("summary.md");
    let cfg = env.write("config.yaml", FAST_RETRY);
    let out = env
        .cmd()
        .env("GITHUB_ACTIONS", "false")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .args([
            "-c",
            cfg.to_str().unwrap(),
            "-m",
            &a,
            "--fallback-model",
            &b,
            "-q",
            "task",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("::"));
    assert!(!summary.exists());
}

#[test]
fn the_summary_gives_the_tasks_first_line_and_the_answers_first_twenty_lines() {
    let env = TestEnv::new();
    let answer: String = (1..=25).map(|i| format!("line {i}\\n")).collect();
    let b = env.script(
        "b.yaml",
        &format!("- tool_calls:\n  - {{name: submit, arguments: {{output: \"{answer}\"}}}}\n"),
    );
    let summary = env.file("summary.md");
    let cfg = env.write("config.yaml", FAST_RETRY);
    let out = env
        .cmd()
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .args(["-c", cfg.to_str().unwrap(), "-m", &b, "-q"])
        .arg("Fix the flaky test\n\nIt fails one run in ten.")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.contains("| task | Fix the flaky test |\n"), "{md}");
    assert!(!md.contains("one run in ten"), "{md}");
    assert!(md.contains("line 20\n") && !md.contains("line 21"), "{md}");
    assert!(md.contains("The first 20 of 25 lines"), "{md}");
}

#[test]
fn check_writes_an_error_per_failed_model_and_a_summary_table() {
    let env = TestEnv::new();
    let good = env.script("good.yaml", SUBMIT);
    let bad = env.script("bad.yaml", "- error: {status: 401, message: bad key}\n");
    let summary = env.write("summary.md", "# before\n");
    let out = env
        .cmd()
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .args(["--check", "-m", &good, "--fallback-model", &bad])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("::error"))
        .collect();
    assert_eq!(
        errors,
        [format!(
            "::error title=tinyagent check::FAIL  {bad}  http_401: bad key"
        )],
        "{stderr}"
    );
    // stdout keeps the verdict lines.
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("ok  {good}  ")));
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(
        md.starts_with("# before\n### tinyagent --check: 1 of 2 models answered\n"),
        "{md}"
    );
    assert!(md.contains(&format!("| `{good}` | ok | ")), "{md}");
    assert!(
        md.contains(&format!("| `{bad}` | **FAIL** http_401: bad key | | | ")),
        "{md}"
    );
    // Outside GitHub Actions, nothing of it.
    let plain = env.file("plain.md");
    let out = env
        .cmd()
        .env("GITHUB_STEP_SUMMARY", &plain)
        .args(["--check", "-m", &good, "--fallback-model", &bad])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("::error"));
    assert!(!plain.exists());
}
