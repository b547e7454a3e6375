//! Tests of `trajectory`.

use super::*;
use crate::conversation::Role;

fn doc() -> Trajectory {
    Trajectory {
        schema_version: 1,
        tinyagent_version: "0".into(),
        run_id: "r".into(),
        task: "t".into(),
        model: "script/a".into(),
        fallback_models: vec![],
        active_model: "script/a".into(),
        status: Status::Running,
        error: None,
        started_at: "now".into(),
        finished_at: None,
        steps: 0,
        totals: Totals::default(),
        model_switches: vec![],
        hedges: vec![],
        reply_caps: BTreeMap::new(),
        plan: vec![],
        messages: vec![],
        output: Value::Null,
        resumed_from: None,
        lineage: None,
        cwd: None,
        worktree: None,
    }
}

#[test]
fn journal_replays_over_file_and_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let mut d = doc();
    let mut cp = Checkpoint::create(&path, &d).unwrap();
    let m = Message::new(Role::User, "hi", 0);
    d.messages.push(m.clone());
    let op = JournalOp::Message {
        index: 0,
        message: m,
    };
    cp.append(&op, &d).unwrap();
    let loaded = load(&path).unwrap();
    assert_eq!(loaded.messages.len(), 1);
    // A crash after the rename but before the journal was emptied.
    let journal = fs::read(journal_path(&path)).unwrap();
    cp.rewrite(&d).unwrap();
    fs::write(journal_path(&path), journal).unwrap();
    assert_eq!(load(&path).unwrap().messages.len(), 1);
}

#[test]
fn a_started_tool_call_stays_in_the_journal_until_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let mut d = doc();
    let mut cp = Checkpoint::create(&path, &d).unwrap();
    let big = "x".repeat(100 * 1024);
    let started = JournalOp::ToolStarted {
        step: 1,
        call_id: "c1".into(),
        tool: "bash".into(),
        arguments: serde_json::json!({ "command": big }),
    };
    // Past the fold limit, but a started call is never folded away.
    cp.append(&started, &d).unwrap();
    let (_, calls) = load_checkpoint(&path).unwrap();
    assert_eq!(calls, [(1, "c1".to_string())]);
    // Its result message folds the journal into FILE.
    let m = Message::new(Role::Tool, "done", 1);
    d.messages.push(m.clone());
    cp.append(
        &JournalOp::Message {
            index: 0,
            message: m,
        },
        &d,
    )
    .unwrap();
    assert_eq!(fs::metadata(journal_path(&path)).unwrap().len(), 0);
    let (loaded, calls) = load_checkpoint(&path).unwrap();
    assert!(calls.is_empty());
    assert_eq!(loaded.messages.len(), 1);
}

#[test]
fn a_stale_state_never_rolls_a_newer_file_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let mut d = doc();
    d.messages.push(Message::new(Role::User, "t", 0));
    d.messages.push(Message::new(Role::Assistant, "a", 1));
    d.steps = 1;
    Checkpoint::create(&path, &d).unwrap();
    // A journal left over from before that rewrite (crash between the
    // rename and the truncation).
    let stale = JournalOp::State {
        steps: 0,
        totals: Totals::default(),
        active_model: "script/a".into(),
        model_switches: vec![],
        hedges: vec![],
        reply_caps: BTreeMap::new(),
        plan: vec![],
        messages: Some(1),
    };
    let mut line = serde_json::to_string(&stale).unwrap();
    line.push('\n');
    fs::write(journal_path(&path), line).unwrap();
    assert_eq!(load(&path).unwrap().steps, 1);
}

#[test]
fn torn_journal_line_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let d = doc();
    Checkpoint::create(&path, &d).unwrap();
    fs::write(journal_path(&path), "{\"op\":\"message\",\"ind").unwrap();
    assert!(load(&path).unwrap().messages.is_empty());
}

#[test]
fn a_volatile_checkpoint_writes_file_first_then_journals_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let mut d = doc();
    d.messages.push(Message::new(Role::User, "the task", 0));
    let mut cp = Checkpoint::create_volatile(&path, &d).unwrap();
    let m = Message::new(Role::Assistant, "a", 1);
    d.messages.push(m.clone());
    cp.append(
        &JournalOp::Message {
            index: 1,
            message: m,
        },
        &d,
    )
    .unwrap();
    // The first FILE holds the task; the journal the step after it.
    let file: Trajectory = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    assert_eq!(file.messages.len(), 1);
    assert_eq!(load(&path).unwrap().messages.len(), 2);
    d.status = Status::Completed;
    cp.finish(&d).unwrap();
    assert!(!journal_path(&path).exists());
    assert_eq!(load(&path).unwrap().status, Status::Completed);
}

#[test]
fn a_volatile_checkpoint_dropped_at_once_still_leaves_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    drop(Checkpoint::create_volatile(&path, &doc()).unwrap());
    assert_eq!(load(&path).unwrap().run_id, "r");
}

#[test]
fn finish_removes_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let d = doc();
    let mut cp = Checkpoint::create(&path, &d).unwrap();
    cp.append(
        &JournalOp::ToolFinished {
            step: 1,
            call_id: "c".into(),
            ok: true,
        },
        &d,
    )
    .unwrap();
    assert!(journal_path(&path).exists());
    cp.finish(&d).unwrap();
    assert!(!journal_path(&path).exists());
}

#[test]
fn a_compaction_survives_a_crash_between_rename_and_journal_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let mut d = doc();
    let mut cp = Checkpoint::create(&path, &d).unwrap();
    for i in 0..4 {
        let m = Message::new(Role::User, format!("m{i}"), 0);
        d.messages.push(m.clone());
        cp.append(
            &JournalOp::Message {
                index: i,
                message: m,
            },
            &d,
        )
        .unwrap();
    }
    // Compaction: 4 messages become 2, then the compacted doc is written.
    d.messages = vec![
        d.messages[0].clone(),
        Message::new(Role::User, "summary", 0),
    ];
    cp.append(
        &JournalOp::Messages {
            messages: d.messages.clone(),
        },
        &d,
    )
    .unwrap();
    let journal = fs::read(journal_path(&path)).unwrap();
    cp.rewrite(&d).unwrap();
    assert_eq!(load(&path).unwrap().messages, d.messages);
    // The old journal replayed over the new FILE ends in the same state.
    fs::write(journal_path(&path), journal).unwrap();
    assert_eq!(load(&path).unwrap().messages, d.messages);
}
