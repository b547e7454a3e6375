//! Interactive sessions (SPEC section 14), driven from the outside through
//! a pseudo-terminal the test makes: the prompt, follow-ups as resumed
//! runs, continued lines, history, Ctrl-C and Ctrl-D, and answers alone on
//! a redirected stdout.

use std::path::Path;
use std::process::Stdio;

use nix::sys::wait::WaitStatus;
use rexpect::session::PtySession;
use serde_json::Value;

use crate::support::{read_json, TestEnv};

const HINT: &str = "interactive session; exit, Ctrl-D or Ctrl-C twice ends it";
const ANSWER: &str = "- text: the answer\n";

/// Starts the binary on a pty (stdin and stderr), stdout into `answers`.
pub(crate) fn spawn(env: &TestEnv, args: &[&str], answers: &Path) -> PtySession {
    let mut cmd = env.std_cmd();
    cmd.args(args)
        .env("TERM", "xterm")
        .env("NO_COLOR", "1")
        .stdin(Stdio::inherit())
        .stdout(std::fs::File::create(answers).unwrap());
    rexpect::session::spawn_command(cmd, Some(30_000)).expect("spawn on a pty")
}

pub(crate) fn exit_code(session: &mut PtySession) -> i32 {
    match session.process().wait().unwrap() {
        WaitStatus::Exited(_, code) => code,
        other => panic!("did not exit: {other:?}"),
    }
}

pub(crate) fn runs(env: &TestEnv) -> Vec<Value> {
    let index = env.home().join(".local/state/tinyagent/runs/index.json");
    read_json(&index)["runs"].as_array().unwrap().clone()
}

fn user_messages(doc: &Value) -> Vec<String> {
    doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_session_asks_runs_and_follows_up_in_the_same_conversation() {
    let env = TestEnv::new();
    let model = env.script("a.yaml", ANSWER);
    let answers = env.file("answers.md");
    let mut s = spawn(&env, &["-m", &model], &answers);
    s.exp_string(HINT).unwrap();
    s.exp_string("> ").unwrap();
    s.send_line("first task").unwrap();
    s.exp_string("completed after 1 step").unwrap();
    s.exp_string("> ").unwrap();
    // A line ending in \ continues on the next.
    s.send_line("line one\\").unwrap();
    s.exp_string(". ").unwrap();
    s.send_line("line two").unwrap();
    s.exp_string("completed after 2 steps").unwrap();
    s.exp_string("> ").unwrap();
    // Up arrow brings the last task back.
    s.send("\x1b[A").unwrap();
    s.flush().unwrap();
    s.exp_string("line two").unwrap();
    s.send("\r").unwrap();
    s.flush().unwrap();
    s.exp_string("completed after 3 steps").unwrap();
    s.exp_string("> ").unwrap();
    s.send_line("exit").unwrap();
    assert_eq!(exit_code(&mut s), 0);

    // Only the answers are on stdout.
    let text = std::fs::read_to_string(&answers).unwrap();
    assert_eq!(text, "the answer\nthe answer\nthe answer\n");

    // Each follow-up is a run of its own, resumed from the last.
    let entries = runs(&env);
    assert_eq!(entries.len(), 3);
    let docs: Vec<Value> = entries
        .iter()
        .map(|e| read_json(Path::new(e["path"].as_str().unwrap())))
        .collect();
    assert!(docs[0].get("resumed_from").is_none());
    assert_eq!(docs[1]["resumed_from"], docs[0]["run_id"]);
    assert_eq!(docs[2]["resumed_from"], docs[1]["run_id"]);
    // One lineage, so one prompt cache key, for the whole session (SPEC 25).
    assert!(docs[0].get("lineage").is_none());
    assert_eq!(docs[1]["lineage"], docs[0]["run_id"]);
    assert_eq!(docs[2]["lineage"], docs[0]["run_id"]);
    assert_eq!(
        user_messages(&docs[2]),
        ["first task", "line one\nline two", "line one\nline two"]
    );
    assert_eq!(docs[2]["steps"], 3);
    // The history is kept under the state directory.
    let history =
        std::fs::read_to_string(env.home().join(".local/state/tinyagent/history")).unwrap();
    assert!(history.contains("first task"), "{history}");
}

#[test]
fn ctrl_c_interrupts_the_run_then_ends_the_session_at_the_prompt() {
    let env = TestEnv::new();
    let marker = env.file("started");
    let model = env.script(
        "slow.yaml",
        &format!(
            "- tool_calls:\n    - {{name: bash, arguments: {{command: 'echo x > {} && sleep 30'}}}}\n",
            marker.display()
        ),
    );
    let answers = env.file("answers.md");
    let mut s = spawn(
        &env,
        &["-m", &model, "--approval", "auto", "-i", "a slow task"],
        &answers,
    );
    crate::resume::wait_for(&marker);
    s.send_control('c').unwrap();
    s.exp_string("interrupted after 1 step").unwrap();
    s.exp_string("> ").unwrap();
    s.send_control('c').unwrap();
    s.exp_string("(Ctrl-C again ends the session)").unwrap();
    s.exp_string("> ").unwrap();
    s.send_control('c').unwrap();
    assert_eq!(exit_code(&mut s), 130);
    let entries = runs(&env);
    let doc = read_json(Path::new(entries[0]["path"].as_str().unwrap()));
    assert_eq!(doc["status"], "interrupted");
}

#[test]
fn ctrl_d_ends_with_the_last_runs_exit_code() {
    let env = TestEnv::new();
    let model = env.script("f.yaml", "- error: {status: 400}\n");
    let answers = env.file("answers.md");
    let mut s = spawn(&env, &["-m", &model], &answers);
    s.exp_string("> ").unwrap();
    s.send_line("fail please").unwrap();
    s.exp_string("error after").unwrap();
    s.exp_string("> ").unwrap();
    s.send_control('d').unwrap();
    assert_eq!(exit_code(&mut s), 1);

    // No task at all: 0, and nothing is run.
    let env = TestEnv::new();
    let model = env.script("a.yaml", ANSWER);
    let mut s = spawn(&env, &["-m", &model], &answers);
    s.exp_string("> ").unwrap();
    s.send_control('d').unwrap();
    assert_eq!(exit_code(&mut s), 0);
    assert!(!env.home().join(".local/state/tinyagent/runs").exists());
}

#[test]
fn a_configuration_error_is_said_before_asking() {
    let env = TestEnv::new();
    let answers = env.file("answers.md");
    let mut s = spawn(&env, &[], &answers);
    s.exp_string("tinyagent: error: no model").unwrap();
    assert_eq!(exit_code(&mut s), 2);
}

#[test]
fn no_task_on_a_terminal_without_a_session_is_a_usage_error() {
    let env = TestEnv::new();
    let model = env.script("a.yaml", ANSWER);
    let answers = env.file("answers.md");
    // --json never starts a session.
    let mut s = spawn(&env, &["-m", &model, "--json"], &answers);
    s.exp_string("no task").unwrap();
    assert_eq!(exit_code(&mut s), 2);
    // A terminal stdin, but stderr is not a terminal.
    let errors = env.file("stderr.txt");
    let mut cmd = env.std_cmd();
    cmd.args(["-m", &model])
        .stdin(Stdio::inherit())
        .stderr(std::fs::File::create(&errors).unwrap());
    let mut s = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
    assert_eq!(exit_code(&mut s), 2);
    assert!(std::fs::read_to_string(&errors)
        .unwrap()
        .contains("no task"));
}

#[test]
fn interactive_needs_a_terminal_and_never_json() {
    let env = TestEnv::new();
    let model = env.script("a.yaml", ANSWER);
    let out = env.cmd().args(["-m", &model, "-i"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("tinyagent: error: -i/--interactive needs a terminal"),
        "{stderr}"
    );
    let out = env
        .cmd()
        .args(["-m", &model, "-i", "--json", "task"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn sigterm_ends_the_session_not_only_the_run() {
    let env = TestEnv::new();
    let marker = env.file("started");
    let model = env.script(
        "slow.yaml",
        &format!(
            "- tool_calls:\n    - {{name: bash, arguments: {{command: 'echo x > {} && sleep 30'}}}}\n",
            marker.display()
        ),
    );
    let answers = env.file("answers.md");
    let mut s = spawn(
        &env,
        &["-m", &model, "--approval", "auto", "-i", "a slow task"],
        &answers,
    );
    crate::resume::wait_for(&marker);
    s.process_mut()
        .signal(nix::sys::signal::Signal::SIGTERM)
        .unwrap();
    assert_eq!(exit_code(&mut s), 130);
}

#[test]
fn a_streamed_answer_is_shown_once_when_stdout_is_the_same_terminal() {
    let env = TestEnv::new();
    let model = env.script("a.yaml", "- text: the unique answer\n");
    for quiet in [false, true] {
        let mut cmd = env.std_cmd();
        cmd.args(["-m", &model])
            .args(quiet.then_some("-q"))
            .arg("a task")
            .env("TERM", "xterm")
            .env("NO_COLOR", "1");
        // stdin, stdout and stderr all on the pty.
        let mut s = rexpect::session::spawn_command(cmd, Some(30_000)).expect("spawn on a pty");
        let screen = s.exp_eof().unwrap();
        assert_eq!(
            screen.matches("the unique answer").count(),
            1,
            "quiet {quiet}: {screen}"
        );
        assert_eq!(exit_code(&mut s), 0);
    }
    // Stdout redirected: it still gets the answer.
    let answers = env.file("answers.md");
    let mut s = spawn(&env, &["-m", &model, "a task"], &answers);
    s.exp_eof().unwrap();
    assert_eq!(exit_code(&mut s), 0);
    assert_eq!(
        std::fs::read_to_string(&answers).unwrap(),
        "the unique answer\n"
    );
}

#[test]
fn an_empty_line_asks_again_and_ctrl_c_clears_the_line_then_ends_twice_in_a_row() {
    let env = TestEnv::new();
    let model = env.script("a.yaml", ANSWER);
    let answers = env.file("answers.md");
    let mut s = spawn(&env, &["-m", &model], &answers);
    s.exp_string("> ").unwrap();
    // An empty line (and one of spaces) asks again, as a shell does.
    s.send_line("").unwrap();
    s.exp_string("> ").unwrap();
    s.send_line("   ").unwrap();
    s.exp_string("> ").unwrap();
    // Ctrl-C clears the line being typed; it is never run.
    s.send("half a thought").unwrap();
    s.flush().unwrap();
    s.exp_string("half a thought").unwrap();
    s.send_control('c').unwrap();
    s.exp_string("> ").unwrap();
    // Continued lines are dropped with it.
    s.send_line("first part\\").unwrap();
    s.exp_string(". ").unwrap();
    s.send_control('c').unwrap();
    s.exp_string("> ").unwrap();
    // One Ctrl-C at an empty prompt says how to leave; a task in between
    // starts the count again.
    s.send_control('c').unwrap();
    s.exp_string("(Ctrl-C again ends the session)").unwrap();
    s.exp_string("> ").unwrap();
    s.send_line("the task").unwrap();
    s.exp_string("completed after 1 step").unwrap();
    s.exp_string("> ").unwrap();
    s.send_control('c').unwrap();
    s.exp_string("(Ctrl-C again ends the session)").unwrap();
    s.exp_string("> ").unwrap();
    s.send_control('c').unwrap();
    assert_eq!(exit_code(&mut s), 130);

    let entries = runs(&env);
    assert_eq!(entries.len(), 1, "only the task ran");
    let doc = read_json(Path::new(entries[0]["path"].as_str().unwrap()));
    assert_eq!(user_messages(&doc), ["the task"]);
    assert_eq!(std::fs::read_to_string(&answers).unwrap(), "the answer\n");
}

/// The rows a terminal `width` columns wide shows after `bytes`: enough
/// of a VT100 for the view (printing with wrap, `\r`, `\n`, erasing a
/// line, moving up); other escape sequences are skipped.
fn screen(bytes: &[u8], width: usize) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut rows: Vec<Vec<char>> = vec![Vec::new()];
    let (mut row, mut col, mut pending) = (0usize, 0usize, false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => (col, pending) = (0, false),
            '\n' => (row, pending) = (row + 1, false),
            '\x1b' => {
                if chars.peek() != Some(&'[') {
                    chars.next();
                    continue;
                }
                chars.next();
                let mut params = String::new();
                let mut end = ' ';
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() || c == '~' {
                        end = c;
                        break;
                    }
                    params.push(c);
                }
                let n = params.parse::<usize>().unwrap_or(1);
                match (end, params.as_str()) {
                    ('K', "2") => rows[row].clear(),
                    ('K', "" | "0") => rows[row].truncate(col),
                    ('A', _) => row = row.saturating_sub(n),
                    ('C', _) => col = (col + n).min(width - 1),
                    ('D', _) => col = col.saturating_sub(n),
                    _ => {}
                }
                pending = false;
            }
            c if c.is_control() => {}
            c => {
                if pending {
                    (row, col, pending) = (row + 1, 0, false);
                }
                while rows.len() <= row {
                    rows.push(Vec::new());
                }
                let line = &mut rows[row];
                while line.len() <= col {
                    line.push(' ');
                }
                line[col] = c;
                if col + 1 == width {
                    pending = true;
                } else {
                    col += 1;
                }
            }
        }
        while rows.len() <= row {
            rows.push(Vec::new());
        }
    }
    rows.into_iter()
        .map(|r| r.into_iter().collect::<String>().trim_end().to_string())
        .collect()
}

#[test]
fn ctrl_c_during_a_command_leaves_no_spinner_frame_on_screen() {
    let env = TestEnv::new();
    let marker = env.file("started");
    let model = env.script(
        "slow.yaml",
        &format!(
            "- tool_calls:\n    - {{name: bash, arguments: {{command: 'echo x > {} && sleep 30'}}}}\n",
            marker.display()
        ),
    );
    // A terminal as people have it: 60 columns, echoing `^C` for Ctrl-C.
    let tinyagent = env.std_cmd();
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg("stty echo echoctl cols 60 rows 20 && exec \"$0\" \"$@\"")
        .arg(tinyagent.get_program())
        .args(["-m", &model, "--approval", "auto", "-i", "a slow task"])
        .current_dir(env.work())
        .env("TERM", "xterm")
        .env("NO_COLOR", "1")
        .stdin(Stdio::inherit())
        .stdout(std::fs::File::create(env.file("answers.md")).unwrap());
    for (var, value) in tinyagent.get_envs() {
        match value {
            Some(value) => cmd.env(var, value),
            None => cmd.env_remove(var),
        };
    }
    let mut s = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
    crate::resume::wait_for(&marker);
    // A few spinner frames.
    std::thread::sleep(std::time::Duration::from_millis(300));
    s.send_control('c').unwrap();
    let mut seen = String::new();
    for text in ["interrupted after 1 step", "> "] {
        seen.push_str(&s.exp_string(text).unwrap());
        seen.push_str(text);
    }
    let bytes: Vec<u8> = seen.chars().map(|c| c as u32 as u8).collect();
    let rows = screen(&bytes, 60);
    assert!(
        rows.iter().all(|r| !r.contains("running bash")),
        "a spinner frame is left: {rows:#?}"
    );
    assert!(rows.iter().any(|r| r.contains("bash echo x")), "{rows:#?}");
    s.send_control('c').unwrap();
    s.exp_string("(Ctrl-C again ends the session)").unwrap();
    s.send_control('c').unwrap();
    assert_eq!(exit_code(&mut s), 130);
}
