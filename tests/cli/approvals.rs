//! Approvals (SPEC 20), driven as a person would: real sessions on a
//! pseudo-terminal answering `y`, `n` with a reason, `a`, Ctrl-C, EOF, a
//! stray key and a paste, checking what ran (files) and what the model was
//! told (the requests a loopback stub received, the trajectory, the log
//! database). Then the usage errors, which need no terminal, the tool
//! output under a session's tool lines, and the slash commands.

use std::path::Path;
use std::process::Stdio;

use rexpect::session::PtySession;
use serde_json::Value;

use crate::interactive::{exit_code, runs, spawn};
use crate::support::openai::{chat_sse_submit, chat_sse_tool_call};
use crate::support::stub::Stub;
use crate::support::{read_json, TestEnv};

/// `exp_string` for UTF-8 text (rexpect reads a byte per `char`), giving
/// back what came before it, decoded.
fn expect(s: &mut PtySession, text: &str) -> Result<String, rexpect::error::Error> {
    let as_read: String = text.bytes().map(char::from).collect();
    s.exp_string(&as_read).map(|before| {
        let bytes: Vec<u8> = before.chars().map(|c| c as u32 as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Types `keys` at the terminal.
fn press(s: &mut PtySession, keys: &str) {
    s.send(keys).unwrap();
    s.flush().unwrap();
}

/// The trajectory of the session's last run.
fn last_doc(env: &TestEnv) -> Value {
    let entries = runs(env);
    let last = entries.last().expect("a run");
    read_json(Path::new(last["path"].as_str().unwrap()))
}

/// What each tool call of `doc` returned to the model, in order.
fn tool_results(doc: &Value) -> Vec<String> {
    doc["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

fn bash(command: &str) -> String {
    format!("- tool_calls:\n    - {{name: bash, arguments: {{command: '{command}'}}}}\n")
}

const SUBMIT: &str = "- tool_calls:\n    - {name: submit, arguments: {output: done}}\n";

/// A session on `script` started with `-i TASK` and `extra` flags.
fn session(env: &TestEnv, script: &str, extra: &[&str]) -> PtySession {
    let model = env.script("s.yaml", script);
    let answers = env.file("answers.md");
    let mut args = vec!["-m", model.as_str()];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-i", "the task"]);
    spawn(env, &args, &answers)
}

#[test]
fn y_runs_the_command_and_n_declines_with_a_reason_the_model_receives() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![
        chat_sse_tool_call(
            "call_1",
            "bash",
            r#"{"command":"echo ran > yes.txt && echo ok"}"#,
        ),
        chat_sse_tool_call("call_2", "bash", r#"{"command":"echo ran > no.txt"}"#),
        chat_sse_submit("call_3", "done"),
    ]);
    let answers = env.file("answers.md");
    let mut cmd = env.std_cmd();
    cmd.args(["-m", "openai/gpt-5", "-i", "the task"])
        .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
        .env("OPENAI_API_KEY", "sk-test")
        .env("TERM", "xterm")
        .env("NO_COLOR", "1")
        .stdin(Stdio::inherit())
        .stdout(std::fs::File::create(&answers).unwrap());
    let mut s = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
    expect(&mut s, "bash wants to run:").unwrap();
    expect(&mut s, "echo ran > yes.txt && echo ok").unwrap();
    // A command with `&&` is never covered by "always": not offered.
    expect(&mut s, "Run it? y yes · n no › ").unwrap();
    press(&mut s, "y");
    expect(&mut s, "Run it? yes").unwrap();
    expect(&mut s, "echo ran > no.txt").unwrap();
    expect(&mut s, "› ").unwrap();
    press(&mut s, "n");
    expect(&mut s, "why?").unwrap();
    s.send_line("too risky").unwrap();
    expect(&mut s, "Run it? no: too risky").unwrap();
    // The run goes on after a declined call.
    expect(&mut s, "submitted after 3 steps").unwrap();
    expect(&mut s, "> ").unwrap();
    s.send_line("exit").unwrap();
    assert_eq!(exit_code(&mut s), 0);

    assert_eq!(
        std::fs::read_to_string(env.work().join("yes.txt")).unwrap(),
        "ran\n"
    );
    assert!(
        !env.work().join("no.txt").exists(),
        "a declined command ran"
    );
    let told = |i: usize| {
        let body = stub.requests()[i].json();
        let last = body["messages"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["role"], "tool", "{body}");
        last["content"].as_str().unwrap().to_string()
    };
    assert_eq!(told(1), "ok\n");
    assert_eq!(told(2), "declined by the user: too risky");
    assert_eq!(stub.count(), 3);
}

#[test]
fn a_is_always_for_the_same_first_two_words_and_every_file_change() {
    let env = TestEnv::new();
    let script = [
        bash("touch one"),
        bash("touch one two"),
        bash("touch one && touch three"),
        "- tool_calls:\n    - {name: write_file, arguments: {path: a.txt, content: \"a\\n\"}}\n".into(),
        "- tool_calls:\n    - {name: edit_file, arguments: {path: a.txt, old_string: a, new_string: b}}\n".into(),
        SUBMIT.into(),
    ]
    .concat();
    let mut s = session(&env, &script, &[]);
    expect(
        &mut s,
        "Run it? y yes · n no · a always (`touch one` commands) › ",
    )
    .unwrap();
    press(&mut s, "a");
    let between = expect(&mut s, "touch one && touch three").unwrap();
    assert!(
        between.contains("Run it? yes, and always for `touch one` commands"),
        "{between}"
    );
    assert!(between.contains("✓ bash touch one two"), "{between}");
    assert_eq!(between.matches("wants to run").count(), 0, "{between}");
    // Shell control characters are always asked; Enter alone declines.
    expect(&mut s, "› ").unwrap();
    press(&mut s, "\r");
    expect(&mut s, "Run it? no").unwrap();
    expect(&mut s, "write_file wants to create a.txt (1 line):").unwrap();
    expect(&mut s, "+a").unwrap();
    expect(
        &mut s,
        "Apply it? y yes · n no · a always (every file change) › ",
    )
    .unwrap();
    press(&mut s, "a");
    let rest = expect(&mut s, "submitted after 6 steps").unwrap();
    assert!(!rest.contains("edit_file wants"), "{rest}");
    assert!(rest.contains("✓ edit_file a.txt"), "{rest}");

    // For the rest of the session: the follow-up (the script starts again)
    // asks only about the command holding `&&`.
    expect(&mut s, "> ").unwrap();
    s.send_line("again").unwrap();
    let before = expect(&mut s, "touch one && touch three").unwrap();
    assert_eq!(before.matches("wants to").count(), 0, "{before}");
    expect(&mut s, "› ").unwrap();
    press(&mut s, "n");
    press(&mut s, "\r");
    let rest = expect(&mut s, "submitted after 12 steps").unwrap();
    assert!(!rest.contains("wants to"), "{rest}");
    expect(&mut s, "> ").unwrap();
    s.send_control('d').unwrap();
    assert_eq!(exit_code(&mut s), 0);

    assert!(env.work().join("one").exists() && env.work().join("two").exists());
    assert!(!env.work().join("three").exists());
    assert_eq!(
        std::fs::read_to_string(env.work().join("a.txt")).unwrap(),
        "b\n"
    );
    let results = tool_results(&last_doc(&env));
    assert_eq!(results[2], "declined by the user");
    assert_eq!(results[8], "declined by the user");
}

#[test]
fn ctrl_c_at_the_question_declines_and_interrupts_the_run() {
    let env = TestEnv::new();
    let script = [bash("touch marker"), SUBMIT.into()].concat();
    let mut s = session(&env, &script, &[]);
    expect(&mut s, "Run it?").unwrap();
    expect(&mut s, "› ").unwrap();
    s.send_control('c').unwrap();
    expect(&mut s, "Run it? no (Ctrl-C: the run is interrupted)").unwrap();
    expect(&mut s, "interrupted after 1 step").unwrap();
    // Back at the prompt; the model is told the call did not run.
    expect(&mut s, "> ").unwrap();
    let doc = last_doc(&env);
    assert_eq!(doc["status"], "interrupted");
    assert_eq!(tool_results(&doc), ["declined by the user"]);
    s.send_line("go on").unwrap();
    expect(&mut s, "Run it?").unwrap();
    expect(&mut s, "› ").unwrap();
    // `y`, then Enter out of habit: taken with the answer, not left as an
    // empty line at the next prompt.
    press(&mut s, "y");
    std::thread::sleep(std::time::Duration::from_millis(100));
    press(&mut s, "\r");
    expect(&mut s, "submitted after 3 steps").unwrap();
    expect(&mut s, "> ").unwrap();
    s.send_line("/cost").unwrap();
    expect(&mut s, "this session: 2 runs").unwrap();
    expect(&mut s, "> ").unwrap();
    s.send_line("exit").unwrap();
    assert_eq!(exit_code(&mut s), 0);
    assert!(env.work().join("marker").exists());
    let doc = last_doc(&env);
    assert_eq!(
        tool_results(&doc),
        ["declined by the user", "", "submitted"]
    );
}

#[test]
fn other_keys_ask_again_pastes_never_answer_and_eof_declines() {
    let env = TestEnv::new();
    let script = [bash("touch pasted"), bash("touch after"), SUBMIT.into()].concat();
    let mut s = session(&env, &script, &["--log-db", "log.db"]);
    expect(&mut s, "› ").unwrap();
    press(&mut s, "x");
    expect(&mut s, "please press y, n or a").unwrap();
    expect(&mut s, "› ").unwrap();
    // A huge paste of `y`s, then a bracketed one: neither is an answer.
    press(&mut s, &"y".repeat(200_000));
    expect(&mut s, "please press y, n or a").unwrap();
    expect(&mut s, "› ").unwrap();
    press(&mut s, "\x1b[200~y\x1b[201~");
    expect(&mut s, "please press y, n or a").unwrap();
    expect(&mut s, "› ").unwrap();
    s.send_control('d').unwrap();
    expect(&mut s, "Run it? no (end of input)").unwrap();
    expect(&mut s, "touch after").unwrap();
    expect(&mut s, "› ").unwrap();
    press(&mut s, "y");
    expect(&mut s, "submitted after 3 steps").unwrap();
    expect(&mut s, "> ").unwrap();
    s.send_line("exit").unwrap();
    assert_eq!(exit_code(&mut s), 0);
    assert!(!env.work().join("pasted").exists(), "a paste ran the call");
    assert!(env.work().join("after").exists());

    // The log database records the declined call as a failed one.
    let db = rusqlite::Connection::open(env.work().join("log.db")).unwrap();
    let (ok, output): (bool, String) = db
        .query_row(
            "SELECT ok, output FROM tool_calls WHERE tool = 'bash' ORDER BY started_at LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(!ok);
    assert_eq!(output, "declined by the user");
    let finished: String = db
        .query_row(
            "SELECT data FROM events WHERE type = 'tool.finished' ORDER BY seq LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let finished: Value = serde_json::from_str(&finished).unwrap();
    assert_eq!(finished["ok"], false);
    assert_eq!(finished["output"], "declined by the user");
}

#[test]
fn a_file_change_shows_its_diff_and_edits_mode_does_not_ask() {
    let env = TestEnv::new();
    std::fs::write(env.work().join("notes.txt"), "old one\nold two\n").unwrap();
    let write = "- tool_calls:\n    - {name: write_file, arguments: {path: notes.txt, content: \"old one\\nnew two\\n\"}}\n";
    let script = [write.to_string(), SUBMIT.into()].concat();
    let mut s = session(&env, &script, &[]);
    expect(&mut s, "write_file wants to change notes.txt (+1 -1):").unwrap();
    let diff = expect(&mut s, "Apply it?").unwrap();
    assert_eq!(
        diff.replace("\r\n", "\n"),
        "\n  @@ -1,2 +1,2 @@\n   old one\n  -old two\n  +new two\n"
    );
    expect(&mut s, "› ").unwrap();
    press(&mut s, "y");
    expect(&mut s, "submitted after 2 steps").unwrap();
    expect(&mut s, "> ").unwrap();
    s.send_line("exit").unwrap();
    assert_eq!(exit_code(&mut s), 0);
    assert_eq!(
        std::fs::read_to_string(env.work().join("notes.txt")).unwrap(),
        "old one\nnew two\n"
    );

    // `edits`: file changes run unasked, commands still ask, except those
    // config `approval_allow` lets through.
    let env = TestEnv::new();
    env.user_config("approval_allow: [\"touch one\"]\n");
    let script = [
        "- tool_calls:\n    - {name: write_file, arguments: {path: w.txt, content: w}}\n".into(),
        bash("touch one two"),
        bash("touch onex"),
        bash("touch one; touch three"),
        SUBMIT.into(),
    ]
    .concat();
    let mut s = session(&env, &script, &["--approval", "edits"]);
    let before = expect(&mut s, "wants to run").unwrap();
    assert!(before.contains("✓ write_file w.txt"), "{before}");
    assert!(before.contains("✓ bash touch one two"), "{before}");
    expect(&mut s, "touch onex").unwrap();
    expect(&mut s, "› ").unwrap();
    press(&mut s, "n");
    press(&mut s, "\r");
    expect(&mut s, "touch one; touch three").unwrap();
    expect(&mut s, "› ").unwrap();
    press(&mut s, "n");
    press(&mut s, "\r");
    expect(&mut s, "submitted after 5 steps").unwrap();
    expect(&mut s, "> ").unwrap();
    s.send_line("exit").unwrap();
    assert_eq!(exit_code(&mut s), 0);
    assert!(env.work().join("w.txt").exists() && env.work().join("two").exists());
    assert!(!env.work().join("onex").exists() && !env.work().join("three").exists());
}

#[test]
fn asking_where_no_one_can_answer_is_a_usage_error_before_any_request() {
    let env = TestEnv::new();
    let stub = Stub::sequence(vec![chat_sse_submit("call_1", "done")]);
    let run = |args: &[&str]| {
        let out = env
            .cmd()
            .env("OPENAI_BASE_URL", format!("{}/v1", stub.url()))
            .env("OPENAI_API_KEY", "sk-test")
            .args(["-m", "openai/gpt-5"])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(&["--approval", "ask", "task"]);
    assert_eq!(code, Some(2));
    assert_eq!(
        stderr,
        "tinyagent: error: --approval ask needs a person at a terminal to approve commands, but stdin is not a terminal; give --approval auto to run commands and file changes without asking\n"
    );
    let (code, stderr) = run(&["--approval", "edits", "--json", "task"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("--approval edits needs a person")
            && stderr.contains("--json has no one to answer"),
        "{stderr}"
    );
    let config = env.user_config("approval: ask\n");
    let (code, stderr) = run(&["task"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.starts_with("tinyagent: error: config approval: ask needs a person"),
        "{stderr}"
    );
    // The flag wins over the config.
    let (code, _) = run(&["--approval", "auto", "task"]);
    assert_eq!(code, Some(0));
    assert_eq!(stub.count(), 1, "a usage error sent a request");

    // Strict config: an unknown mode or a prefix that could never match
    // names the key and the file.
    std::fs::write(&config, "approval: sometimes\n").unwrap();
    let (code, stderr) = run(&["task"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains(&config.display().to_string()), "{stderr}");
    assert!(
        stderr.contains(
            "approval: unknown variant `sometimes`, expected one of `ask`, `edits`, `auto`"
        ),
        "{stderr}"
    );
    std::fs::write(
        &config,
        "approval_allow: [\"cargo test\", \"make; rm -rf ~\"]\n",
    )
    .unwrap();
    let (code, stderr) = run(&["task"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains(&config.display().to_string()), "{stderr}");
    assert!(stderr.contains("'make; rm -rf ~' holds `;`"), "{stderr}");
    std::fs::write(&config, "aproval: ask\n").unwrap();
    let (code, stderr) = run(&["task"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("did you mean `approval`?"), "{stderr}");
    let (code, stderr) = run(&["--approval", "bogus", "task"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("invalid value 'bogus' for '--approval <MODE>'"),
        "{stderr}"
    );
    assert_eq!(stub.count(), 1);
}

#[test]
fn sessions_ask_by_default_and_runs_on_their_own_do_not() {
    let env = TestEnv::new();
    let model = env.script("s.yaml", &[bash("touch ran"), SUBMIT.into()].concat());
    // A session whose stderr is not a terminal cannot ask: said at once.
    let errors = env.file("stderr.txt");
    let mut cmd = env.std_cmd();
    cmd.args(["-m", &model, "-i", "task"])
        .stdin(Stdio::inherit())
        .stderr(std::fs::File::create(&errors).unwrap());
    let mut s = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
    assert_eq!(exit_code(&mut s), 2);
    let stderr = std::fs::read_to_string(&errors).unwrap();
    assert!(
        stderr.starts_with("tinyagent: error: approval ask (the default in an interactive session) needs a person at a terminal to approve commands, but stderr is not a terminal"),
        "{stderr}"
    );
    assert!(!env.work().join("ran").exists());
    // A run with a TASK on a terminal is no session: nothing is asked.
    let mut cmd = env.std_cmd();
    cmd.args(["-m", &model, "task"])
        .env("TERM", "xterm")
        .env("NO_COLOR", "1");
    let mut s = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
    let screen = s.exp_eof().unwrap();
    assert_eq!(exit_code(&mut s), 0);
    assert!(!screen.contains("Run it?"), "{screen}");
    assert!(env.work().join("ran").exists());
}

#[test]
fn session_tool_lines_show_the_last_lines_of_a_commands_output() {
    let env = TestEnv::new();
    let script = [bash("seq 1 20"), bash("echo oops; exit 3"), SUBMIT.into()].concat();
    let mut s = session(&env, &script, &["--approval", "auto"]);
    let screen = expect(&mut s, "submitted after 3 steps")
        .unwrap()
        .replace("\r\n", "\n");
    let seq = screen.find("✓ bash seq 1 20").expect(&screen);
    let lines: Vec<&str> = screen[seq..].lines().skip(1).take(5).collect();
    assert_eq!(lines, ["    16", "    17", "    18", "    19", "    20"]);
    let failed = screen.find("✗ bash echo oops; exit 3").expect(&screen);
    let lines: Vec<&str> = screen[failed..].lines().skip(1).take(2).collect();
    assert_eq!(lines, ["    oops", "    [exit code: 3]"]);
    expect(&mut s, "> ").unwrap();
    s.send_line("exit").unwrap();
    assert_eq!(exit_code(&mut s), 0);
}

#[test]
fn slash_commands_are_answered_and_never_reach_a_model() {
    let env = TestEnv::new();
    let model = env.script(
        "a.yaml",
        "- text: the answer\n  usage: {input: 1200, output: 40}\n",
    );
    let answers = env.file("answers.md");
    let mut s = spawn(&env, &["-m", &model], &answers);
    expect(&mut s, "> ").unwrap();
    s.send_line("/help").unwrap();
    expect(&mut s, "/cost    this session's tokens and cost, per model").unwrap();
    expect(&mut s, "> ").unwrap();
    s.send_line("/nope").unwrap();
    expect(&mut s, "unknown command /nope").unwrap();
    expect(&mut s, "/clear").unwrap();
    expect(&mut s, "> ").unwrap();
    s.send_line("/cost").unwrap();
    expect(&mut s, "this session: 0 runs · 0 tokens · $0.0000").unwrap();
    expect(&mut s, "> ").unwrap();
    s.send_line("/model").unwrap();
    expect(&mut s, &format!("chain:  {model}")).unwrap();
    expect(&mut s, &format!("active: {model} (no run yet)")).unwrap();
    expect(&mut s, "health record (").unwrap();
    expect(&mut s, "no record yet").unwrap();
    expect(&mut s, "> ").unwrap();
    s.send_line("first task").unwrap();
    expect(&mut s, "completed after 1 step").unwrap();
    expect(&mut s, "> ").unwrap();
    s.send_line("/cost").unwrap();
    expect(&mut s, "this session: 1 run · 1.2k tokens · $0.0000").unwrap();
    expect(&mut s, "1.2k in · 40 out · $0.0000 (1 response)").unwrap();
    expect(&mut s, "> ").unwrap();
    s.send_line("second").unwrap();
    expect(&mut s, "completed after 2 steps").unwrap();
    expect(&mut s, "> ").unwrap();
    s.send_line("/clear").unwrap();
    expect(&mut s, "a new conversation").unwrap();
    expect(&mut s, "> ").unwrap();
    // A new conversation: one step, not three.
    s.send_line("third").unwrap();
    expect(&mut s, "completed after 1 step").unwrap();
    expect(&mut s, "> ").unwrap();
    s.send_line("/exit").unwrap();
    assert_eq!(exit_code(&mut s), 0);

    let entries = runs(&env);
    assert_eq!(entries.len(), 3, "a slash command made a run");
    let third = read_json(Path::new(entries[2]["path"].as_str().unwrap()));
    assert!(third.get("resumed_from").is_none(), "{third}");
    let users: Vec<&str> = third["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["third"]);
    assert_eq!(
        std::fs::read_to_string(&answers).unwrap().lines().count(),
        3
    );
}

/// SPEC 20: "always" never covers a command holding shell control (`;`,
/// `&&`, `|`, ...), so it is not offered for one (`a` asks again); and a
/// person's thinking time before "no" is not the tool's `duration_ms`.
#[test]
fn always_is_not_offered_for_chained_commands_and_no_takes_no_tool_time() {
    let env = TestEnv::new();
    let script = [
        bash("echo built > chained.txt; echo done"),
        bash("echo ran > declined.txt && echo ok"),
        SUBMIT.into(),
    ]
    .concat();
    let mut s = session(&env, &script, &["--log-db", "log.db"]);
    expect(&mut s, "echo built > chained.txt; echo done").unwrap();
    expect(&mut s, "Run it? y yes · n no › ").unwrap();
    press(&mut s, "a");
    expect(&mut s, "please press y or n · ").unwrap();
    expect(&mut s, "› ").unwrap();
    press(&mut s, "y");
    expect(&mut s, "Run it? yes").unwrap();
    expect(&mut s, "echo ran > declined.txt && echo ok").unwrap();
    let before = expect(&mut s, "› ").unwrap();
    assert!(!before.contains("always"), "{before}");
    // Think for a while, then decline.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    press(&mut s, "n");
    expect(&mut s, "why?").unwrap();
    s.send_line("").unwrap();
    expect(&mut s, "submitted after 3 steps").unwrap();
    expect(&mut s, "> ").unwrap();
    s.send_line("exit").unwrap();
    assert_eq!(exit_code(&mut s), 0);
    assert!(env.work().join("chained.txt").exists());
    assert!(!env.work().join("declined.txt").exists());

    let db = rusqlite::Connection::open(env.work().join("log.db")).unwrap();
    let rows: Vec<(bool, i64)> = db
        .prepare("SELECT ok, duration_ms FROM tool_calls WHERE tool = 'bash' ORDER BY started_at")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows[0].0 && !rows[1].0, "{rows:?}");
    assert!(
        rows[1].1 < 500,
        "the declined call counted the thinking time: {rows:?}"
    );
}

#[test]
fn edits_mode_shows_the_diff_of_each_change_it_makes_without_asking() {
    let write = "- tool_calls:\n    - {name: write_file, arguments: {path: notes.txt, content: \"old one\\nnew two\\n\"}}\n";
    let script = [write.to_string(), SUBMIT.into()].concat();
    let env = TestEnv::new();
    std::fs::write(env.work().join("notes.txt"), "old one\nold two\n").unwrap();
    let mut s = session(&env, &script, &["--approval", "edits"]);
    expect(&mut s, "write_file changes notes.txt (+1 -1):").unwrap();
    let diff = expect(&mut s, "✓ write_file notes.txt").unwrap();
    // Then the spinner again, until the tool's line.
    assert!(
        diff.replace("\r\n", "\n")
            .starts_with("\n  @@ -1,2 +1,2 @@\n   old one\n  -old two\n  +new two\n"),
        "{diff:?}"
    );
    expect(&mut s, "submitted after 2 steps").unwrap();
    expect(&mut s, "> ").unwrap();
    s.send_line("exit").unwrap();
    assert_eq!(exit_code(&mut s), 0);
    assert_eq!(
        std::fs::read_to_string(env.work().join("notes.txt")).unwrap(),
        "old one\nnew two\n"
    );

    // Coloured on a terminal when NO_COLOR is not set.
    let env = TestEnv::new();
    std::fs::write(env.work().join("notes.txt"), "old one\nold two\n").unwrap();
    let model = env.script("s.yaml", &script);
    let mut cmd = env.std_cmd();
    cmd.args(["-m", &model, "--approval", "edits", "-i", "the task"])
        .env("TERM", "xterm")
        .env_remove("NO_COLOR")
        .stdin(Stdio::inherit())
        .stdout(std::fs::File::create(env.file("answers.md")).unwrap());
    let mut s = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
    expect(&mut s, "changes").unwrap();
    let diff = expect(&mut s, "write_file notes.txt").unwrap();
    assert!(diff.contains("\x1b[32m+new two"), "{diff:?}");
    assert!(diff.contains("\x1b[31m-old two"), "{diff:?}");
    expect(&mut s, "> ").unwrap();
    s.send_line("exit").unwrap();
    assert_eq!(exit_code(&mut s), 0);
}
