//! The forgiving command line of SPEC 21 and a newcomer's papercuts: a
//! model named without its provider, an unknown provider, a task in several
//! unquoted words, `-p TASK`, another agent's flag, the dearer-fallback
//! warning once per machine on the terminal, and the time limit's hint.

use predicates::prelude::*;

use crate::support::openai::chat_sse_submit;
use crate::support::stub::Stub;
use crate::support::{events, finished, TestEnv};

const SUBMIT: &str = "- tool_calls:\n  - {name: submit, arguments: {output: done}}\n";

/// Runs the binary and returns (exit code, stderr).
fn fails(env: &TestEnv, args: &[&str]) -> (Option<i32>, String) {
    let out = env.cmd().args(args).output().unwrap();
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_model_without_its_provider_is_told_the_whole_spec() {
    let env = TestEnv::new();
    for (given, spec) in [
        ("gpt-5", "openai/gpt-5"),
        ("claude-sonnet-4-5", "anthropic/claude-sonnet-4-5"),
        ("gemini-2.5-pro", "gemini/gemini-2.5-pro"),
    ] {
        let (code, err) = fails(&env, &["-m", given, "fix it"]);
        assert_eq!(code, Some(2), "{err}");
        assert_eq!(
            err,
            format!("tinyagent: error: invalid model spec '{given}': expected <provider>/<model> (did you mean {spec}?)\n")
        );
    }
    let (code, err) = fails(&env, &["-m", "script/x", "--fallback-model", "gpt-5", "t"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("(did you mean openai/gpt-5?)"), "{err}");
}

#[test]
fn an_unknown_provider_lists_the_known_ones_named_ones_included() {
    let env = TestEnv::new();
    env.user_config(
        "providers:\n  gateway:\n    api: openai\n    endpoint: http://127.0.0.1:9/v1\n",
    );
    let (code, err) = fails(&env, &["-m", "antropic/claude-sonnet-4-5", "t"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err,
        "tinyagent: error: model 'antropic/claude-sonnet-4-5': unknown provider 'antropic' (did you mean 'anthropic'?); known providers: openai, responses, anthropic, ollama, openrouter, script, bedrock, vertex, azure, gemini, foundry, gateway\n"
    );
}

#[test]
fn a_task_in_several_unquoted_words_is_a_usage_error_saying_to_quote_it() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", SUBMIT);
    let (code, err) = fails(&env, &["-m", &model, "fix", "the", "failing", "test", "-q"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err,
        format!(
            "tinyagent: error: unexpected argument 'the': the task is one argument, quote it: tinyagent -m {model} \"fix the failing test\" -q\n"
        )
    );
}

#[test]
fn dash_p_is_the_task_and_may_not_be_given_with_one() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", SUBMIT);
    let out = env
        .cmd()
        .args(["-m", &model, "--json", "-p", "fix the failing test"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let ev = events(&out.stdout);
    assert_eq!(ev[0]["task"], "fix the failing test");
    assert_eq!(finished(&ev)["output"], "done");
    env.cmd()
        .args(["-m", &model, "-p", "one task", "another"])
        .assert()
        .code(2)
        .stderr(predicate::str::starts_with("tinyagent: error: "));
}

#[test]
fn another_agents_flag_is_told_ours() {
    let env = TestEnv::new();
    for (flag, ours) in [
        ("--fallback", "--fallback-model SPEC"),
        ("--fallback=openai/gpt-5", "--fallback-model SPEC"),
        ("--max-turns", "--step-limit N"),
    ] {
        let (code, err) = fails(&env, &[flag, "x", "-m", "openai/gpt-5", "t"]);
        assert_eq!(code, Some(2), "{err}");
        let name = flag.split('=').next().unwrap();
        assert!(
            err.starts_with(&format!(
                "tinyagent: error: unexpected argument '{name}' (did you mean {ours}?)"
            )),
            "{err}"
        );
    }
}

/// A config with a primary and a dearer fallback, both on `stub`.
fn dearer_config(env: &TestEnv, stub: &Stub) {
    env.user_config(&format!(
        "providers:\n  cheap:\n    api: openai\n    endpoint: {url}/v1\n    models: {{m: {{input_price: 1, output_price: 2}}}}\n  dear:\n    api: openai\n    endpoint: {url}/v1\n    models: {{m: {{input_price: 3, output_price: 2}}}}\nmodel: cheap/m\nfallback_models: [dear/m]\n",
        url = stub.url()
    ));
}

#[test]
fn the_dearer_fallback_warning_is_printed_once_per_machine_but_emitted_every_run() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![chat_sse_submit("c1", "done")]);
    dearer_config(&env, &stub);
    let warning = "warning: fallback model dear/m costs more than the primary cheap/m";
    let human = |env: &TestEnv| {
        let out = env.cmd().arg("task").output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let first = human(&env);
    assert!(first.contains(warning), "{first}");
    let second = human(&env);
    assert!(!second.contains("costs more"), "{second}");
    // Every event stream still carries it.
    let out = env.cmd().args(["--json", "task"]).output().unwrap();
    let ev = events(&out.stdout);
    assert!(ev
        .iter()
        .any(|e| e["type"] == "warning" && e["message"].as_str().unwrap().contains("costs more")));
    // Another machine (state directory) is told again.
    let other = env.dir.path().join("other-state");
    let out = env
        .cmd()
        .env("XDG_STATE_HOME", &other)
        .arg("task")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains(warning));
}

#[test]
fn a_time_limit_hint_says_the_limit_counts_from_the_resume() {
    let env = TestEnv::new();
    let model = env.script(
        "s.yaml",
        "- text: thinking\n  tool_calls:\n    - {name: bash, arguments: {command: 'sleep 5'}}\n",
    );
    let out = env.file("run.json");
    env.cmd()
        .args(["-m", &model, "--time-limit", "1s", "-o", out.to_str().unwrap(), "--no-save", "t"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(format!(
            "to resume: tinyagent --resume {} --time-limit DURATION (a time limit counts from the resume)",
            out.display()
        )));
}

/// Claude Code's `--dangerously-skip-permissions` and Codex's `--yolo` and
/// `--full-auto` are told `--approval auto` (SPEC 20), not clap's tip to
/// pass them as a value; before or after the task, alone on one line.
#[test]
fn the_flags_that_skip_asking_elsewhere_are_told_approval_auto() {
    let env = TestEnv::new();
    for flag in [
        "--yolo",
        "--dangerously-skip-permissions",
        "--dangerously-bypass-approvals-and-sandbox",
        "--full-auto",
    ] {
        for args in [[flag, "fix it"], ["fix it", flag]] {
            let (code, err) = fails(&env, &args);
            assert_eq!(code, Some(2), "{err}");
            assert_eq!(
                err,
                format!(
                    "tinyagent: error: unexpected argument '{flag}' (did you mean --approval auto?)\n"
                )
            );
        }
    }
}
