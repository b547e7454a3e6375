//! Errors that help (SPEC 1): one way to start, did-you-mean, the endpoint
//! in network and 404 errors, limits of 0, a missing `-C` directory.

use serde_json::Value;

use crate::support::stub::{Reply, Stub};
use crate::support::{events, finished, TestEnv};

fn stderr_of(env: &TestEnv, args: &[&str]) -> (Option<i32>, String) {
    let out = env.cmd().args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn flag_parser_errors_and_ours_start_alike() {
    let env = TestEnv::new();
    let (code, stderr) = stderr_of(&env, &["--no-such-flag", "t"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.starts_with("tinyagent: error: unexpected argument '--no-such-flag'"),
        "{stderr}"
    );
    let (code, stderr) = stderr_of(&env, &["--step-limit", "many", "t"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.starts_with("tinyagent: error: invalid value 'many'"),
        "{stderr}"
    );
    let (code, stderr) = stderr_of(&env, &["t"]);
    assert_eq!(code, Some(2));
    assert!(stderr.starts_with("tinyagent: error: no model"), "{stderr}");
}

#[test]
fn limits_of_zero_are_usage_errors() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", "- text: hi\n");
    for flag in ["--step-limit", "--cost-limit", "--time-limit"] {
        let (code, stderr) = stderr_of(&env, &["-m", &model, flag, "0", "t"]);
        assert_eq!(code, Some(2), "{flag}: {stderr}");
        assert!(
            stderr.starts_with(&format!("tinyagent: error: {flag}: ")),
            "{stderr}"
        );
    }
    for key in [
        "step_limit: 0",
        "cost_limit: 0",
        "time_limit: 0",
        "time_limit: 0s",
    ] {
        env.user_config(&format!("{key}\n"));
        let (code, stderr) = stderr_of(&env, &["-m", &model, "t"]);
        assert_eq!(code, Some(2), "{key}: {stderr}");
        let name = key.split(':').next().unwrap();
        assert!(
            stderr.starts_with(&format!("tinyagent: error: config {name}: ")),
            "{stderr}"
        );
    }
}

#[test]
fn did_you_mean_for_providers_and_config_keys() {
    let env = TestEnv::new();
    let (code, stderr) = stderr_of(&env, &["-m", "antropic/claude-sonnet-4-5", "t"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("unknown provider 'antropic' (did you mean 'anthropic'?)"),
        "{stderr}"
    );
    let config = env.user_config("modle: script/x\n");
    let (code, stderr) = stderr_of(&env, &["t"]);
    assert_eq!(code, Some(2));
    assert!(stderr.starts_with("tinyagent: error: config "), "{stderr}");
    assert!(stderr.contains(&config.display().to_string()), "{stderr}");
    assert!(
        stderr.contains("unknown field `modle` (did you mean `model`?)"),
        "{stderr}"
    );
    env.user_config("providers:\n  gw: {api: antropic, endpoint: \"http://127.0.0.1:1\"}\n");
    let (code, stderr) = stderr_of(&env, &["-m", "gw/x", "t"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("providers.gw.api: unknown API 'antropic' (did you mean 'anthropic'?"),
        "{stderr}"
    );
}

#[test]
fn a_missing_working_directory_is_said_not_to_exist() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", "- text: hi\n");
    let missing = env.file("nowhere");
    let (code, stderr) = stderr_of(&env, &["-m", &model, "-C", missing.to_str().unwrap(), "t"]);
    assert_eq!(code, Some(2));
    assert_eq!(
        stderr,
        format!(
            "tinyagent: error: --cwd {}: the directory does not exist\n",
            missing.display()
        )
    );
}

fn json_run(env: &TestEnv, base: &str) -> (Option<i32>, Vec<Value>, String) {
    env.user_config("retry: {attempts: 1, backoff: 1ms, jitter: 0}\n");
    let out = env
        .cmd()
        .env("OPENAI_BASE_URL", base)
        .env("OPENAI_API_KEY", "sk-test-SECRETSECRET")
        .args(["-m", "openai/gpt-5", "--json", "t"])
        .output()
        .unwrap();
    (
        out.status.code(),
        events(&out.stdout),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn network_errors_name_the_endpoint_without_secrets() {
    let env = TestEnv::new();
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://user:hunter2@127.0.0.1:{port}/v1");
    let (code, ev, stderr) = json_run(&env, &base);
    assert_ne!(code, Some(0));
    let error = finished(&ev)["error"].as_str().unwrap().to_string();
    let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
    assert!(error.contains(&url), "{error}");
    let all = format!(
        "{stderr}{}",
        ev.iter().map(|e| e.to_string()).collect::<String>()
    );
    assert!(
        !all.contains("hunter2") && !all.contains("SECRETSECRET"),
        "{all}"
    );
}

#[test]
fn a_404_names_the_endpoint() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![Reply::status(404)]);
    let (code, ev, _) = json_run(&env, &format!("{}/v1", stub.url()));
    assert_eq!(code, Some(1));
    let error = finished(&ev)["error"].as_str().unwrap();
    assert!(error.contains("404"), "{error}");
    assert!(
        error.contains(&format!("{}/v1/chat/completions", stub.url())),
        "{error}"
    );
}

/// SPEC 3: `attempts`, `rate_limit_attempts` and `switch_after` are whole
/// numbers of at least 1; 0, a negative or a fraction is exit 2 naming the
/// key and the file, before any request.
#[test]
fn counts_of_tries_below_one_name_the_key_and_the_file() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", "- text: hi\n");
    for (section, key) in [
        ("retry", "attempts"),
        ("retry", "rate_limit_attempts"),
        ("fallback", "switch_after"),
    ] {
        for value in ["0", "-1", "1.5"] {
            let file = env.write("c.yaml", &format!("{section}: {{{key}: {value}}}\n"));
            let (code, stderr) =
                stderr_of(&env, &["-m", &model, "-c", file.to_str().unwrap(), "t"]);
            assert_eq!(code, Some(2), "{key}: {value}: {stderr}");
            assert!(stderr.starts_with("tinyagent: error: "), "{stderr}");
            assert!(stderr.contains(key), "{key}: {value}: {stderr}");
            assert!(stderr.contains("c.yaml"), "{key}: {value}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
        }
    }
}

/// SPEC 7: a `-o` FILE that cannot be written is exit 2 before any request,
/// naming the path and why (as an unusable `--log-db` is), `-q` or not: a
/// run never goes on without the checkpoint it asked for.
#[test]
fn an_unwritable_trajectory_path_is_exit_2_before_any_request() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![Reply::status(503)]);
    let base = format!("{}/v1", stub.url());
    let a_file = env.write("plain.txt", "not a directory\n");
    let cases = [
        (env.file("missing-dir/t.json"), "does not exist"),
        (env.file(""), "is a directory"),
        (a_file.join("t.json"), "plain.txt is not a directory"),
    ];
    for (path, why) in cases {
        for quiet in [false, true] {
            let mut cmd = env.cmd();
            cmd.env("OPENAI_API_KEY", "sk-test")
                .env("OPENAI_BASE_URL", &base)
                .args(["-m", "openai/gpt-4o-mini", "-o", path.to_str().unwrap()]);
            if quiet {
                cmd.arg("-q");
            }
            let out = cmd.arg("task").output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{path:?}: {stderr}");
            assert!(
                stderr.starts_with("tinyagent: error: -o ")
                    && stderr.contains(path.to_str().unwrap())
                    && stderr.contains(why)
                    && stderr.lines().count() == 1,
                "{path:?}: {stderr}"
            );
        }
    }
    assert_eq!(stub.count(), 0, "no request was sent");
    let left: Vec<_> = std::fs::read_dir(env.file(""))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("plain.txt")]);
}

#[test]
fn a_config_error_says_the_file_and_the_line() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", "- text: hi\n");
    // The parser's own: a tab.
    let tab = env.file("tab.yaml");
    std::fs::write(&tab, "retry:\n\tattempts: 3\n").unwrap();
    let (code, stderr) = stderr_of(&env, &["-m", &model, "-c", tab.to_str().unwrap(), "t"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("config {}: ", tab.display())),
        "{stderr}"
    );
    assert!(stderr.contains("at line 2 column 1"), "{stderr}");
    assert!(
        stderr.contains("(a tab: YAML indents with spaces)"),
        "{stderr}"
    );
    // A value out of range, read with the rest of its file.
    let zero = env.file("zero.yaml");
    std::fs::write(&zero, "# retries\nretry:\n  attempts: 0\n").unwrap();
    let (code, stderr) = stderr_of(&env, &["-m", &model, "-c", zero.to_str().unwrap(), "t"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("config {}: retry.attempts: ", zero.display())),
        "{stderr}"
    );
    assert!(
        stderr.trim_end().ends_with("at line 3 column 3"),
        "{stderr}"
    );
    // A value refused once the files are laid over each other: the last
    // file that sets it, and where.
    let user = env.user_config("step_limit: 5\n");
    let layer = env.file("layer.yaml");
    std::fs::write(&layer, "cost_limit: 1\nstep_limit: 0\n").unwrap();
    let (code, stderr) = stderr_of(&env, &["-m", &model, "-c", layer.to_str().unwrap(), "t"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.starts_with("tinyagent: error: config step_limit: "),
        "{stderr}"
    );
    assert!(
        stderr
            .trim_end()
            .ends_with(&format!("({} at line 2 column 13)", layer.display())),
        "{stderr}"
    );
    env.user_config("retry: {jitter: 20}\n");
    let (code, stderr) = stderr_of(&env, &["-m", &model, "t"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.starts_with("tinyagent: error: config retry.jitter: "),
        "{stderr}"
    );
    assert!(
        stderr
            .trim_end()
            .ends_with(&format!("({} at line 1 column 17)", user.display())),
        "{stderr}"
    );
}
