//! Waiting out an outage (`--outage-wait`, SPEC 18) from the outside: a
//! loopback provider that answers a two-step task (a `bash` call, then
//! `submit`) and is down (HTTP 503) for a while from the first request of
//! step 2; the events, lines, exit codes and checkpoint a user sees; a
//! fleet on one machine and on two sharing a real redis-server.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::openai::{chat_sse_submit, chat_sse_tool_call};
use crate::support::redis::RedisServer;
use crate::support::stub::{Reply, Stub};
use crate::support::{events, finished, of_type, read_json, TestEnv};

/// Two quick attempts, then the wait; probes every 200 ms, doubling.
const RETRY: &str = "retry: {attempts: 2, backoff: 200ms, jitter: 0}\n";

/// An OpenAI-style 503.
fn overloaded() -> Reply {
    Reply::json(
        503,
        &json!({"error": {"message": "The server is overloaded or not ready yet.",
            "type": "server_error", "param": null, "code": null}}),
    )
}

/// When the outage began (the first request of a step 2), shared with the
/// stub's responder.
type Since = Arc<Mutex<Option<Instant>>>;

/// A provider for a two-step task: step 1 runs `echo <task> >> <log>`,
/// step 2 submits; it answers 503 from the first step-2 request on, for
/// `down` (`None`: for good).
struct Provider {
    stub: Stub,
    since: Since,
    down: Option<Duration>,
}

impl Provider {
    fn start(log: &Path, down: Option<Duration>) -> Provider {
        let since = Since::default();
        let seen = since.clone();
        let log = log.to_path_buf();
        let stub = Stub::start(move |_, request| {
            let body = request.json();
            let messages = body["messages"].as_array().cloned().unwrap_or_default();
            let answered = messages.iter().filter(|m| m["role"] == "assistant").count();
            if answered == 0 {
                let task = messages
                    .iter()
                    .find(|m| m["role"] == "user")
                    .and_then(|m| m["content"].as_str())
                    .unwrap_or("task")
                    .to_string();
                let command = format!("echo {task} >> {}", log.display());
                let args = json!({ "command": command }).to_string();
                return chat_sse_tool_call("call_1", "bash", &args);
            }
            let began = *seen.lock().unwrap().get_or_insert_with(Instant::now);
            match down {
                Some(d) if began.elapsed() >= d => chat_sse_submit("call_2", "done"),
                _ => overloaded(),
            }
        });
        Provider { stub, since, down }
    }

    fn url(&self) -> String {
        format!("{}/v1", self.stub.url())
    }

    /// Requests for a step 2 that arrived while the provider was down.
    fn requests_while_down(&self) -> usize {
        let Some(since) = *self.since.lock().unwrap() else {
            return 0;
        };
        let end = self.down.map(|d| since + d);
        let step_2 = |body: Value| {
            body["messages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] == "assistant"))
        };
        self.stub
            .requests()
            .into_iter()
            .filter(|r| r.at >= since && end.is_none_or(|end| r.at < end))
            .filter(|r| step_2(r.json()))
            .count()
    }
}

/// One machine: its own home and state; `config` is its user config.
fn machine(config: &str) -> TestEnv {
    let env = TestEnv::new();
    env.user_config(&format!("{RETRY}{config}"));
    env
}

fn command(env: &TestEnv, provider: &Provider, args: &[&str]) -> std::process::Command {
    let mut cmd = env.std_cmd();
    cmd.env("OPENAI_API_KEY", "sk-test-outage")
        .env("OPENAI_BASE_URL", provider.url())
        .args(["-m", "openai/gpt-5"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

struct Out {
    code: Option<i32>,
    events: Vec<Value>,
    stderr: String,
}

fn output(child: Child) -> Out {
    let out = child.wait_with_output().unwrap();
    Out {
        code: out.status.code(),
        events: events(&out.stdout),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn run(env: &TestEnv, provider: &Provider, args: &[&str]) -> Out {
    output(command(env, provider, args).spawn().unwrap())
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn keys(event: &Value) -> Vec<&str> {
    event
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

/// Reads the child's stderr until a line starting with `prefix`; the rest
/// of stderr is drained on a thread and returned when it ends.
fn wait_for_line(child: &mut Child, prefix: &str) -> std::thread::JoinHandle<String> {
    let mut reader = BufReader::new(child.stderr.take().unwrap());
    let started = Instant::now();
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).unwrap();
        assert!(n > 0, "stderr ended before {prefix:?}: {seen}");
        seen.push_str(&line);
        if line.starts_with(prefix) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{seen}");
    }
    std::thread::spawn(move || {
        let mut rest = seen;
        for line in reader.lines() {
            rest.push_str(&line.unwrap_or_default());
            rest.push('\n');
        }
        rest
    })
}

#[test]
fn a_provider_that_comes_back_is_waited_for_and_the_same_step_goes_on() {
    let env = machine("");
    let log = env.file("log");
    let provider = Provider::start(&log, Some(Duration::from_secs(2)));
    let out = run(
        &env,
        &provider,
        &["--json", "--outage-wait", "1m", "fix it"],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let ev = &out.events;
    assert_eq!(finished(ev)["status"], "submitted");
    assert_eq!(finished(ev)["steps"], 2);
    assert_eq!(lines(&log), ["fix it"], "the tool call ran once");
    let steps: Vec<&Value> = of_type(ev, "step.started")
        .iter()
        .map(|e| &e["step"])
        .collect();
    assert_eq!(steps, [1, 2], "step 2 went on, not again");

    let waiting = of_type(ev, "outage.waiting");
    assert_eq!(waiting.len(), 1, "once: {ev:?}");
    let waiting = waiting[0];
    assert_eq!(
        keys(waiting),
        ["type", "seq", "ts", "run_id", "step", "models", "until"]
    );
    assert_eq!(waiting["step"], 2);
    assert_eq!(
        waiting["models"],
        json!([{"model": "openai/gpt-5", "reason": "http_503"}])
    );
    let until = humantime::parse_rfc3339(waiting["until"].as_str().unwrap()).unwrap();
    let ts = humantime::parse_rfc3339(waiting["ts"].as_str().unwrap()).unwrap();
    let span = until.duration_since(ts).unwrap();
    assert!(
        span > Duration::from_secs(59) && span <= Duration::from_secs(61),
        "{span:?}"
    );

    let over = of_type(ev, "outage.over");
    assert_eq!(over.len(), 1);
    let over = over[0];
    assert_eq!(
        keys(over),
        [
            "type",
            "seq",
            "ts",
            "run_id",
            "step",
            "model",
            "waited_seconds",
            "probes"
        ]
    );
    assert_eq!(
        (&over["step"], &over["model"]),
        (&json!(2), &json!("openai/gpt-5"))
    );
    let waited = over["waited_seconds"].as_f64().unwrap();
    assert!((1.0..10.0).contains(&waited), "{waited}");
    assert!(over["probes"].as_u64().unwrap() >= 2, "{over}");
    assert!(
        waiting["seq"].as_u64() < over["seq"].as_u64()
            && over["seq"].as_u64() < of_type(ev, "model.response")[1]["seq"].as_u64()
    );

    // The line, in --json mode too (stdout stays pure JSON lines).
    assert!(
        out.stderr.contains(
            "outage: every model is down (openai/gpt-5: http_503); waiting up to 1m, next try in "
        ),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("outage over: openai/gpt-5 answered again after "),
        "{}",
        out.stderr
    );
}

#[test]
fn a_wait_that_runs_out_ends_with_75_naming_the_model_its_reason_and_the_time() {
    let env = machine("");
    let log = env.file("log");
    let provider = Provider::start(&log, None);
    let started = Instant::now();
    let out = run(
        &env,
        &provider,
        &["--json", "--outage-wait", "2s", "fix it"],
    );
    let took = started.elapsed();
    assert_eq!(out.code, Some(75), "{}", out.stderr);
    let end = finished(&out.events);
    assert_eq!(
        (&end["status"], &end["exit_code"]),
        (&json!("error"), &json!(75))
    );
    let error = end["error"].as_str().unwrap();
    assert!(
        error.starts_with(
            "the model failed: openai/gpt-5 (http_503); waited 2s for a model to answer again ("
        ),
        "{error}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(20),
        "{took:?}"
    );
    assert!(of_type(&out.events, "outage.over").is_empty());

    // Human mode, -q included: the line, then the error. A machine of its
    // own: on the first one the fleet's record still waits on the model,
    // and a run joining that wait sends nothing before its next probe.
    let env = machine("");
    let quiet = run(&env, &provider, &["-q", "--outage-wait", "1s", "fix it"]);
    assert_eq!(quiet.code, Some(75));
    assert!(
        quiet.stderr.contains(
            "outage: every model is down (openai/gpt-5: http_503); waiting up to 1s, next try in "
        ),
        "{}",
        quiet.stderr
    );
    assert!(
        quiet
            .stderr
            .contains("waited 1s for a model to answer again"),
        "{}",
        quiet.stderr
    );
}

#[test]
fn without_a_wait_an_outage_still_ends_with_75_at_once() {
    let env = machine("outage_wait: 0\n");
    let provider = Provider::start(&env.file("log"), None);
    let out = run(&env, &provider, &["--json", "fix it"]);
    assert_eq!(out.code, Some(75));
    assert!(of_type(&out.events, "outage.waiting").is_empty());
    assert!(!out.stderr.contains("outage:"), "{}", out.stderr);
}

#[test]
fn the_config_key_waits_too_and_the_member_that_answers_first_is_restored() {
    let env = machine("outage_wait: 30s\n");
    let log = env.file("log");
    let provider = Provider::start(&log, Some(Duration::from_millis(1500)));
    let fallback = env.script("dead.yaml", "- error: {kind: network}\n");
    let out = run(
        &env,
        &provider,
        &["--json", "--fallback-model", &fallback, "fix it"],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let waiting = of_type(&out.events, "outage.waiting");
    assert_eq!(
        waiting[0]["models"],
        json!([
            {"model": "openai/gpt-5", "reason": "http_503"},
            {"model": fallback, "reason": "network"}
        ])
    );
    let restore = of_type(&out.events, "model.restore");
    assert_eq!(restore.len(), 1);
    assert_eq!(
        (&restore[0]["from"], &restore[0]["to"], &restore[0]["step"]),
        (&json!(fallback), &json!("openai/gpt-5"), &json!(2))
    );
    assert!(out.stderr.contains(&format!(
        "model restore: {fallback} -> openai/gpt-5 at step 2"
    )));
    assert_eq!(finished(&out.events)["active_model"], "openai/gpt-5");
}

#[test]
fn bad_durations_are_usage_errors_naming_the_flag_or_the_key() {
    let env = machine("");
    let provider = Provider::start(&env.file("log"), None);
    let out = run(&env, &provider, &["--outage-wait", "soon", "fix it"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .starts_with("tinyagent: error: --outage-wait: invalid duration 'soon'"),
        "{}",
        out.stderr
    );
    for (config, says) in [
        (
            "outage_wait: 30\n",
            "outage_wait: invalid duration '30': give a unit",
        ),
        ("outage_wiat: 5m\n", "did you mean `outage_wait`"),
    ] {
        let env = machine(config);
        let out = run(&env, &provider, &["fix it"]);
        assert_eq!(out.code, Some(2), "{config}");
        assert!(out.stderr.contains(says), "{config}: {}", out.stderr);
    }
    assert_eq!(provider.stub.count(), 0, "no request before a usage error");
}

/// Starts a run that waits on a provider down for good, and returns it
/// once its stderr shows the wait began (with the rest of its stderr).
fn waiting_run(
    env: &TestEnv,
    provider: &Provider,
    args: &[&str],
) -> (Child, std::thread::JoinHandle<String>) {
    let mut child = command(env, provider, args).spawn().unwrap();
    let rest = wait_for_line(&mut child, "outage: every model is down");
    (child, rest)
}

#[test]
fn ctrl_c_and_sigterm_end_a_wait_at_once_with_130() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let env = machine("");
        let provider = Provider::start(&env.file("log"), None);
        let (child, _rest) = waiting_run(&env, &provider, &["--json", "--outage-wait", "1h", "x"]);
        let sent = Instant::now();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, signal) };
        let out = output(child);
        assert!(
            sent.elapsed() < Duration::from_secs(5),
            "{:?}",
            sent.elapsed()
        );
        assert_eq!(out.code, Some(130), "signal {signal}");
        assert_eq!(finished(&out.events)["status"], "interrupted");
    }
}

#[test]
fn a_time_limit_ends_a_wait_with_its_status() {
    let env = machine("");
    let provider = Provider::start(&env.file("log"), None);
    let started = Instant::now();
    let out = run(
        &env,
        &provider,
        &["--json", "--outage-wait", "1h", "--time-limit", "3s", "x"],
    );
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    assert_eq!(finished(&out.events)["status"], "time_limit");
    assert_eq!(of_type(&out.events, "outage.waiting").len(), 1);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_waiting_run_killed_keeps_a_running_checkpoint_that_resumes() {
    let env = machine("");
    let log = env.file("log");
    let provider = Provider::start(&log, None);
    let traj = env.file("t.json");
    let (mut child, _rest) = waiting_run(
        &env,
        &provider,
        &[
            "-q",
            "--outage-wait",
            "1h",
            "-o",
            traj.to_str().unwrap(),
            "fix it",
        ],
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(read_json(&traj)["status"], "running");

    let back = Provider::start(&log, Some(Duration::ZERO));
    let out = run(&env, &back, &["--json", "--resume", traj.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let steps: Vec<&Value> = of_type(&out.events, "step.started")
        .iter()
        .map(|e| &e["step"])
        .collect();
    assert_eq!(steps, [2], "the step that waited is done under its number");
    assert_eq!(lines(&log), ["fix it"], "the tool call ran once");
    assert_eq!(read_json(&traj)["status"], "submitted");
}

#[test]
fn under_github_actions_the_wait_and_its_end_are_notices() {
    let env = machine("");
    let provider = Provider::start(&env.file("log"), Some(Duration::from_millis(1500)));
    let mut cmd = command(
        &env,
        &provider,
        &["--json", "--outage-wait", "1m", "fix it"],
    );
    let out = output(cmd.env("GITHUB_ACTIONS", "true").spawn().unwrap());
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains(
        "::notice title=tinyagent outage::outage: every model is down (openai/gpt-5: http_503); waiting up to 1m, next try in "
    ), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "::notice title=tinyagent outage over::outage over: openai/gpt-5 answered again after "
        ),
        "{}",
        out.stderr
    );

    let dead = Provider::start(&env.file("log2"), None);
    let mut cmd = command(&env, &dead, &["--json", "--outage-wait", "1s", "fix it"]);
    let out = output(cmd.env("GITHUB_ACTIONS", "true").spawn().unwrap());
    assert_eq!(out.code, Some(75));
    assert!(
        out.stderr.contains(
            "::notice title=tinyagent outage over::outage: no model answered again; the run ended error"
        ),
        "{}",
        out.stderr
    );
}

/// Runs `count` runs of the two-step task against `provider`, spread over
/// `machines` (`health_db` each: the same one for a fleet), each with
/// `--outage-wait 1m`; returns each run's outcome.
fn fleet(provider: &Provider, machines: &[TestEnv], count: usize) -> Vec<Out> {
    let children: Vec<Child> = (0..count)
        .map(|i| {
            let env = &machines[i % machines.len()];
            let task = format!("run-{i}");
            command(env, provider, &["--json", "--outage-wait", "1m", &task])
                .spawn()
                .unwrap()
        })
        .collect();
    children.into_iter().map(output).collect()
}

#[test]
fn runs_on_two_machines_sharing_redis_send_one_probe_per_interval_between_them() {
    let redis = RedisServer::start(&[]);
    let health = format!("health_db: \"{}\"\n", redis.url(0));
    let machines = [machine(&health), machine(&health)];
    let log: PathBuf = machines[0].file("log");
    let provider = Provider::start(&log, Some(Duration::from_secs(6)));
    let started = Instant::now();
    let outs = fleet(&provider, &machines, 4);
    for out in &outs {
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        assert_eq!(
            of_type(&out.events, "outage.over").len(),
            1,
            "{:?}",
            out.events
        );
    }
    let mut ran = lines(&log);
    ran.sort();
    assert_eq!(ran, ["run-0", "run-1", "run-2", "run-3"], "each call once");
    // Probes due 200 ms after the wait began, then 400, 800, 1600, 3200 ms
    // after each failure: at most 5 in 6 s for the whole fleet, plus each
    // run's discovery (2 attempts at most). Each run on its own would send
    // 4 x (5 + 2) = 28.
    let down = provider.requests_while_down();
    let warned: Vec<&str> = outs
        .iter()
        .flat_map(|o| of_type(&o.events, "warning"))
        .filter_map(|w| w["message"].as_str())
        .collect();
    assert!(
        down <= 5 + 4 * 2,
        "{down} requests to the dead provider; warnings: {warned:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn on_a_terminal_the_wait_counts_down_to_the_next_try() {
    let env = TestEnv::new();
    env.user_config("retry: {attempts: 2, backoff: 1s, jitter: 0}\n");
    let log = env.file("log");
    let provider = Provider::start(&log, Some(Duration::from_secs(4)));
    let mut cmd = env.std_cmd();
    cmd.env("OPENAI_API_KEY", "sk-test-outage")
        .env("OPENAI_BASE_URL", provider.url())
        .env("TERM", "xterm")
        .env("NO_COLOR", "1")
        .args(["-m", "openai/gpt-5", "--outage-wait", "1m", "fix it"])
        .stdin(Stdio::inherit())
        .stdout(std::fs::File::create(env.file("answer")).unwrap());
    let mut s = rexpect::session::spawn_command(cmd, Some(30_000)).expect("spawn on a pty");
    s.exp_string(
        "outage: every model is down (openai/gpt-5: http_503); waiting up to 1m, next try in ",
    )
    .unwrap();
    // The spinner counts down in tenths of a second; the line does not.
    s.exp_regex(r"next try in \d+\.\ds").unwrap();
    s.exp_string("outage over: openai/gpt-5 answered again after")
        .unwrap();
    s.exp_string("submitted after 2 steps").unwrap();
}

/// SPEC 6: an outage's summary (exit 75) says that every model was down,
/// naming each with its last reason, `-q` or not; a run with a checkpoint
/// then says how to resume it, with `--outage-wait` and `--fallback-model`
/// as the ways past the outage.
#[test]
fn an_outage_summary_names_every_model_down_and_how_to_resume_past_it() {
    let env = machine("");
    let provider = Provider::start(&env.file("log"), None);
    let dead = env.script("dead.yaml", "- error: {kind: network}\n");
    let traj = env.file("run.json");
    let out = run(
        &env,
        &provider,
        &[
            "--fallback-model",
            &dead,
            "-o",
            traj.to_str().unwrap(),
            "fix it",
        ],
    );
    assert_eq!(out.code, Some(75), "{}", out.stderr);
    let summary = out
        .stderr
        .lines()
        .find(|l| l.starts_with("error after 1 step · "))
        .unwrap_or_else(|| panic!("no summary: {}", out.stderr));
    assert!(
        summary.ends_with(&format!(
            " · every model was down (openai/gpt-5: http_503, {dead}: network)"
        )),
        "{summary}"
    );
    assert!(
        out.stderr.contains(&format!(
            "\nto resume: tinyagent --resume {} --outage-wait DURATION (to wait for a model to answer again; or --fallback-model SPEC to go on with another model)\n",
            traj.display()
        )),
        "{}",
        out.stderr
    );
    assert_eq!(read_json(&traj)["status"], "error");

    // Kept in the run store only: `--continue`, and `--resume` of its file.
    let quiet = run(&env, &provider, &["-q", "fix it"]);
    assert_eq!(quiet.code, Some(75));
    assert!(
        quiet
            .stderr
            .contains(" · every model was down (openai/gpt-5: http_503)\n"),
        "{}",
        quiet.stderr
    );
    assert!(!quiet.stderr.contains("to resume"), "-q: {}", quiet.stderr);
    let stored = run(&env, &provider, &["fix it"]);
    assert!(
        stored
            .stderr
            .contains("to resume: tinyagent --continue --outage-wait DURATION (to wait"),
        "{}",
        stored.stderr
    );
    assert!(
        stored.stderr.contains("       or: tinyagent --resume ")
            && stored.stderr.contains(".json --outage-wait DURATION\n"),
        "{}",
        stored.stderr
    );
}
