//! What a question shows, as text: the whole `bash` command, or a unified
//! diff of the file change (a new file: its first lines), wrapped to the
//! terminal's width, coloured unless `NO_COLOR`, and the prompt line in
//! each of its states. Everything shown is made printable first: a file
//! or a command cannot move the cursor or hide text.

use std::path::Path;
use std::time::{Duration, Instant};

use console::Style;
use serde_json::Value;
use similar::{ChangeTag, TextDiff};

use super::answer::Answer;
use super::policy::{always_covers, Kind};
use crate::text_edit;

/// Lines of a new file shown.
const NEW_FILE_LINES: usize = 20;
/// Lines of a diff shown (hunk headers included); the rest is counted.
const MAX_DIFF_LINES: usize = 200;
/// Lines of context around each change.
const CONTEXT: usize = 3;
/// Files larger than this are not diffed.
const MAX_DIFF_BYTES: u64 = 2 << 20;
/// How long a diff may take before it settles for a coarser one.
const DIFF_TIME: Duration = Duration::from_millis(50);

/// Colours on or off (`NO_COLOR`, or not a terminal).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Paint(pub bool);

impl Paint {
    fn apply(self, style: Style, text: &str) -> String {
        style.force_styling(self.0).apply_to(text).to_string()
    }
    fn bold(self, text: &str) -> String {
        self.apply(Style::new().bold(), text)
    }
    fn dim(self, text: &str) -> String {
        self.apply(Style::new().dim(), text)
    }
    fn green(self, text: &str) -> String {
        self.apply(Style::new().green(), text)
    }
    fn red(self, text: &str) -> String {
        self.apply(Style::new().red(), text)
    }
    fn cyan(self, text: &str) -> String {
        self.apply(Style::new().cyan(), text)
    }
    fn ask(self, text: &str) -> String {
        self.apply(Style::new().yellow().bold(), text)
    }
}

/// One question: what would happen, and the words of its prompt.
#[derive(Debug, Clone)]
pub(crate) struct Question {
    /// The header and the command or diff, each line ended by `\n`.
    pub body: String,
    /// `Run it?` or `Apply it?`
    verb: &'static str,
    /// What `a` covers: `` `cargo test` commands ``, `every file change`;
    /// `None` when `a` is not offered (a command with shell control).
    always: Option<String>,
}

/// What a file change about to be made without asking shows (`--approval
/// edits`, or "always" for file changes): the question's diff under a
/// header that says it is being made; `None` as for `build`.
pub(crate) fn applied(
    tool: &str,
    args: &Value,
    cwd: &Path,
    width: usize,
    paint: Paint,
) -> Option<String> {
    file_body(tool, args, cwd, width.max(30), paint, Mood::Applying)
}

/// Whether a file change's header asks or tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mood {
    /// `write_file wants to change a.rs (+1 -1):`
    Asking,
    /// `write_file changes a.rs (+1 -1):`
    Applying,
}

/// The question about a call of `kind` to `tool`, at `width` columns; `None`
/// when the call cannot change anything (an edit whose text is not in
/// the file: the tool says why without asking).
pub(crate) fn build(
    tool: &str,
    args: &Value,
    kind: Kind<'_>,
    cwd: &Path,
    width: usize,
    paint: Paint,
) -> Option<Question> {
    let width = width.max(30);
    let (body, verb) = match kind {
        Kind::Command(command) => (command_body(tool, command, width, paint), "Run it?"),
        _ => (
            file_body(tool, args, cwd, width, paint, Mood::Asking)?,
            "Apply it?",
        ),
    };
    Some(Question {
        body,
        verb,
        always: always_covers(kind),
    })
}

fn command_body(tool: &str, command: &str, width: usize, paint: Paint) -> String {
    let mut out = format!("{} wants to run:\n", paint.bold(tool));
    for line in command.trim_end().lines() {
        for row in wrap(&printable(line), width - 2) {
            out.push_str(&format!("  {}\n", paint.bold(&row)));
        }
    }
    out
}

/// The header and diff of a `write_file` or `edit_file` call.
fn file_body(
    tool: &str,
    args: &Value,
    cwd: &Path,
    width: usize,
    paint: Paint,
    mood: Mood,
) -> Option<String> {
    let text = |key: &str| args.get(key).and_then(Value::as_str);
    let path = text("path")?;
    let full = {
        let p = Path::new(path);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            cwd.join(p)
        }
    };
    let shown = printable(path);
    let head = |what: &str, note: String| {
        let verb = match mood {
            Mood::Asking => format!("wants to {what}"),
            Mood::Applying => format!("{what}s"),
        };
        format!(
            "{} {verb} {}{note}:\n",
            paint.bold(tool),
            paint.bold(&shown)
        )
    };
    let old = read_current(&full);
    let new = match (tool, &old) {
        ("edit_file", Ok(current)) => {
            let all = args
                .get("replace_all")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            // No such file, or no such text: the tool fails on its own.
            let current = current.as_deref()?;
            text_edit::replace(current, text("old_string")?, text("new_string")?, all, path)
                .ok()?
                .0
        }
        ("edit_file", Err(why)) => {
            // Not diffable: the replacement itself.
            let mut out = head("change", format!(" ({why})"));
            for line in text("old_string")?.lines().take(NEW_FILE_LINES) {
                push_row(&mut out, '-', line, width, paint);
            }
            for line in text("new_string")?.lines().take(NEW_FILE_LINES) {
                push_row(&mut out, '+', line, width, paint);
            }
            return Some(out);
        }
        _ => text("content")?.to_string(),
    };
    Some(match old {
        Ok(None) => {
            let lines = new.lines().count();
            let mut out = head("create", format!(" ({})", count(lines, "line")));
            out.push_str(&new_file_lines(&new, width, paint));
            out
        }
        Ok(Some(old)) if old == new => head("write", " (no change to its content)".into()),
        Ok(Some(old)) => {
            let (rows, added, removed) = diff_lines(&old, &new, width, paint);
            let mut out = head("change", format!(" (+{added} -{removed})"));
            out.push_str(&rows);
            out
        }
        Err(why) => {
            let mut out = head("write", format!(" ({why})"));
            out.push_str(&new_file_lines(&new, width, paint));
            out
        }
    })
}

/// Why a file's current text cannot be shown in a diff.
#[derive(Debug, thiserror::Error)]
enum Undiffable {
    #[error("cannot read the file now: {0}")]
    Unreadable(std::io::Error),
    #[error("replacing {0} bytes, too large to diff")]
    TooLarge(u64),
    #[error("replacing {0} bytes that are not text")]
    NotText(usize),
}

/// The file's text: `None` when it does not exist, else why it cannot be
/// shown (too large, not text, unreadable).
fn read_current(path: &Path) -> Result<Option<String>, Undiffable> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Undiffable::Unreadable(e)),
        Ok(m) if m.len() > MAX_DIFF_BYTES => return Err(Undiffable::TooLarge(m.len())),
        Ok(_) => {}
    }
    let bytes = std::fs::read(path).map_err(Undiffable::Unreadable)?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| Undiffable::NotText(e.as_bytes().len()))
}

fn new_file_lines(text: &str, width: usize, paint: Paint) -> String {
    let mut out = String::new();
    let total = text.lines().count();
    for line in text.lines().take(NEW_FILE_LINES) {
        push_row(&mut out, '+', line, width, paint);
    }
    if total == 0 {
        out.push_str(&format!("  {}\n", paint.dim("(empty)")));
    } else if total > NEW_FILE_LINES {
        let more = format!("… {}", count(total - NEW_FILE_LINES, "more line"));
        out.push_str(&format!("  {}\n", paint.dim(&more)));
    }
    out
}

/// A unified diff of `old` to `new` with a few lines of context, at most
/// `MAX_DIFF_LINES` of it, and the counts of added and removed lines.
fn diff_lines(old: &str, new: &str, width: usize, paint: Paint) -> (String, usize, usize) {
    let diff = TextDiff::configure()
        .deadline(Instant::now() + DIFF_TIME)
        .diff_lines(old, new);
    let (mut added, mut removed) = (0, 0);
    for change in diff.iter_all_changes() {
        match change.tag() {
            ChangeTag::Insert => added += 1,
            ChangeTag::Delete => removed += 1,
            ChangeTag::Equal => {}
        }
    }
    let mut out = String::new();
    let (mut shown, mut hidden) = (0, 0);
    for hunk in diff.unified_diff().context_radius(CONTEXT).iter_hunks() {
        let changes: Vec<_> = hunk.iter_changes().collect();
        if shown + 1 + changes.len() > MAX_DIFF_LINES && shown > 0 {
            hidden += 1 + changes.len();
            continue;
        }
        out.push_str(&format!("  {}\n", paint.cyan(&hunk.header().to_string())));
        shown += 1;
        for change in changes {
            if shown >= MAX_DIFF_LINES {
                hidden += 1;
                continue;
            }
            let sign = match change.tag() {
                ChangeTag::Insert => '+',
                ChangeTag::Delete => '-',
                ChangeTag::Equal => ' ',
            };
            push_row(&mut out, sign, change.value(), width, paint);
            shown += 1;
        }
    }
    if hidden > 0 {
        let more = format!("… {} of the diff not shown", count(hidden, "more line"));
        out.push_str(&format!("  {}\n", paint.dim(&more)));
    }
    (out, added, removed)
}

/// One diff line, wrapped: each row keeps the line's sign and colour.
fn push_row(out: &mut String, sign: char, line: &str, width: usize, paint: Paint) {
    let line = line.trim_end_matches(['\n', '\r']);
    for row in wrap(&printable(line), width - 3) {
        let text = format!("{sign}{row}");
        let text = match sign {
            '+' => paint.green(&text),
            '-' => paint.red(&text),
            _ => text,
        };
        out.push_str(&format!("  {text}\n"));
    }
}

/// `text` made safe to print: tabs as spaces, control characters in caret
/// notation (`^[`), and the invisible characters that reorder text shown
/// by their code point.
pub(crate) fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\t' => out.push_str("    "),
            '\u{7f}' => out.push_str("^?"),
            c if (c as u32) < 0x20 => {
                out.push('^');
                out.push(char::from(c as u8 + 0x40));
            }
            '\u{80}'..='\u{9f}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{061c}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}' => out.push_str(&format!("<U+{:04X}>", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// `text` in rows of at most `width` columns (at least one row).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(10);
    let mut rows = Vec::new();
    let mut row = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = if c.is_ascii() {
            1
        } else {
            console::measure_text_width(c.encode_utf8(&mut [0; 4]))
        };
        if used + w > width && !row.is_empty() {
            rows.push(std::mem::take(&mut row));
            used = 0;
        }
        row.push(c);
        used += w;
    }
    rows.push(row);
    rows
}

fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// `text` cut to `width` columns, with `…` when cut.
fn cut(text: &str, width: usize) -> String {
    if console::measure_text_width(text) <= width {
        return text.to_string();
    }
    let mut out: String = wrap(text, width.saturating_sub(1)).swap_remove(0);
    out.push('…');
    out
}

/// The state the prompt line shows.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Prompt<'a> {
    /// Waiting for a key; `again` after a key that is not an answer.
    Asking { again: bool },
    /// After `n`: the reason typed so far.
    Reason(&'a str),
    /// Answered (the last state).
    Answered(&'a Answer),
    /// The run stopped before an answer.
    Stopped,
}

impl Question {
    /// Whether `a` (always) is an answer to this question.
    pub(crate) fn offers_always(&self) -> bool {
        self.always.is_some()
    }

    /// The prompt line in `state`, fitting `width` columns except once
    /// answered (nothing is redrawn after that).
    pub(crate) fn prompt(&self, state: Prompt<'_>, width: usize, paint: Paint) -> String {
        let verb = paint.ask(self.verb);
        match state {
            Prompt::Asking { again } => {
                let yes_no = format!("{} yes · {} no", paint.bold("y"), paint.bold("n"));
                let Some(always) = &self.always else {
                    let note = if again { "please press y or n · " } else { "" };
                    return format!("{verb} {}{yes_no} › ", paint.dim(note));
                };
                let note = if again {
                    "please press y, n or a · "
                } else {
                    ""
                };
                // 38: the verb's space, the keys, ` › ` and the cursor.
                let room = width.saturating_sub(self.verb.len() + note.len() + 31);
                let always = cut(always, room.max(8));
                format!(
                    "{verb} {}{yes_no} · {} always ({always}) › ",
                    paint.dim(note),
                    paint.bold("a")
                )
            }
            Prompt::Reason(reason) => {
                let head = "no · why? (optional; Enter to send) › ";
                let room = width.saturating_sub(self.verb.len() + head.len() + 3);
                let reason = printable(reason);
                let chars: Vec<char> = reason.chars().collect();
                let tail: String = chars[chars.len().saturating_sub(room)..].iter().collect();
                format!("{verb} {}{tail}", paint.red(head))
            }
            Prompt::Answered(answer) => {
                let said = match answer {
                    Answer::Yes => paint.green("yes"),
                    Answer::Always => paint.green(&format!(
                        "yes, and always for {}",
                        self.always.as_deref().unwrap_or_default()
                    )),
                    Answer::No(None) => paint.red("no"),
                    Answer::No(Some(reason)) => {
                        format!("{} {}", paint.red("no:"), printable(reason))
                    }
                    Answer::Interrupted => paint.red("no (Ctrl-C: the run is interrupted)"),
                    Answer::Eof => paint.red("no (end of input)"),
                };
                format!("{verb} {said}")
            }
            Prompt::Stopped => format!("{verb} {}", paint.red("not answered: the run stopped")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const OFF: Paint = Paint(false);

    fn plain_width(text: &str) -> usize {
        console::measure_text_width(text)
    }

    fn ask_file(tool: &str, args: Value, cwd: &Path) -> Option<Question> {
        build(tool, &args, Kind::FileChange, cwd, 80, OFF)
    }

    #[test]
    fn a_command_is_shown_whole_and_wrapped() {
        let long = format!("echo {}", "word ".repeat(40));
        let command = format!("cd /tmp\n{long}");
        let q = build(
            "bash",
            &json!({ "command": command }),
            Kind::Command(&command),
            Path::new("/"),
            80,
            OFF,
        )
        .unwrap();
        let lines: Vec<&str> = q.body.lines().collect();
        assert_eq!(lines[0], "bash wants to run:");
        assert_eq!(lines[1], "  cd /tmp");
        assert!(lines.iter().all(|l| plain_width(l) <= 80), "{}", q.body);
        let shown: String = lines[2..].iter().map(|l| &l[2..]).collect();
        assert_eq!(shown, long.trim_end());
    }

    #[test]
    fn a_change_is_a_unified_diff_with_context() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        std::fs::write(dir.path().join("f.txt"), &text).unwrap();
        let q = ask_file(
            "edit_file",
            json!({"path": "f.txt", "old_string": "line 10\n", "new_string": "ten\nTEN\n"}),
            dir.path(),
        )
        .unwrap();
        assert_eq!(
            q.body,
            "edit_file wants to change f.txt (+2 -1):\n  @@ -7,7 +7,8 @@\n   line 7\n   line 8\n   line 9\n  -line 10\n  +ten\n  +TEN\n   line 11\n   line 12\n   line 13\n"
        );
        // write_file of the same file: the same kind of diff.
        let q = ask_file(
            "write_file",
            json!({"path": "f.txt", "content": text.replace("line 1\n", "")}),
            dir.path(),
        )
        .unwrap();
        assert!(
            q.body.starts_with(
                "write_file wants to change f.txt (+0 -1):\n  @@ -1,4 +1,3 @@\n  -line 1\n"
            ),
            "{}",
            q.body
        );
        // An edit that cannot apply asks nothing: the tool says why.
        let none = ask_file(
            "edit_file",
            json!({"path": "f.txt", "old_string": "absent", "new_string": "x"}),
            dir.path(),
        );
        assert!(none.is_none());
        assert!(ask_file(
            "edit_file",
            json!({"path": "nope.txt", "old_string": "a", "new_string": "b"}),
            dir.path()
        )
        .is_none());
    }

    #[test]
    fn a_new_file_shows_its_first_lines() {
        let dir = tempfile::tempdir().unwrap();
        let content: String = (1..=50).map(|i| format!("row {i}\n")).collect();
        let q = ask_file(
            "write_file",
            json!({"path": "new/n.txt", "content": content}),
            dir.path(),
        )
        .unwrap();
        let lines: Vec<&str> = q.body.lines().collect();
        assert_eq!(lines[0], "write_file wants to create new/n.txt (50 lines):");
        assert_eq!(lines[1], "  +row 1");
        assert_eq!(lines[20], "  +row 20");
        assert_eq!(lines[21], "  … 30 more lines");
        assert_eq!(lines.len(), 22);
        let q = ask_file(
            "write_file",
            json!({"path": "e", "content": ""}),
            dir.path(),
        )
        .unwrap();
        assert_eq!(
            q.body,
            "write_file wants to create e (0 lines):\n  (empty)\n"
        );
    }

    #[test]
    fn big_diffs_are_cut_and_long_lines_wrapped() {
        let dir = tempfile::tempdir().unwrap();
        let old: String = (0..2000).map(|i| format!("{i}\n")).collect();
        let new: String = (0..2000)
            .map(|i| format!("{} {}\n", i, "x".repeat(i % 150)))
            .collect();
        std::fs::write(dir.path().join("big"), &old).unwrap();
        let started = Instant::now();
        let q = ask_file(
            "write_file",
            json!({"path": "big", "content": new}),
            dir.path(),
        )
        .unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(q.body.lines().all(|l| plain_width(l) <= 80));
        assert!(q.body.contains("of the diff not shown"), "{}", q.body);
        assert!(q
            .body
            .starts_with("write_file wants to change big (+2000 -2000):"));
    }

    #[test]
    fn control_characters_cannot_reach_the_terminal() {
        assert_eq!(printable("a\x1b[2Jb\tc\x07\u{7f}"), "a^[[2Jb    c^G^?");
        assert_eq!(printable("x\u{202e}y\u{9b}"), "x<U+202E>y<U+009B>");
        let command = "echo hi\x1b[1A\x1b[2K";
        let q = build(
            "bash",
            &json!({}),
            Kind::Command(command),
            Path::new("/"),
            80,
            OFF,
        )
        .unwrap();
        assert!(!q.body.contains('\x1b'), "{:?}", q.body);
    }

    #[test]
    fn colours_only_when_asked() {
        let command = "ls";
        let q = build(
            "bash",
            &json!({}),
            Kind::Command(command),
            Path::new("/"),
            80,
            Paint(true),
        )
        .unwrap();
        assert!(q.body.contains("\x1b["), "{:?}", q.body);
        let prompt = q.prompt(Prompt::Asking { again: false }, 80, OFF);
        assert!(!prompt.contains('\x1b'));
    }

    #[test]
    fn prompts_fit_80_columns() {
        let command = format!("{} {} --flag", "a".repeat(60), "b".repeat(60));
        let q = build(
            "bash",
            &json!({}),
            Kind::Command(&command),
            Path::new("/"),
            80,
            OFF,
        )
        .unwrap();
        for state in [
            Prompt::Asking { again: false },
            Prompt::Asking { again: true },
            Prompt::Reason(&"because ".repeat(30)),
        ] {
            let line = q.prompt(state, 80, OFF);
            assert!(plain_width(&line) < 80, "{line}");
        }
        let short = build(
            "bash",
            &json!({}),
            Kind::Command("cargo test -q"),
            Path::new("/"),
            80,
            OFF,
        )
        .unwrap();
        assert_eq!(
            short.prompt(Prompt::Asking { again: false }, 80, OFF),
            "Run it? y yes · n no · a always (`cargo test` commands) › "
        );
        assert_eq!(
            short.prompt(
                Prompt::Answered(&Answer::No(Some("not now".into()))),
                80,
                OFF
            ),
            "Run it? no: not now"
        );
        assert_eq!(
            short.prompt(Prompt::Answered(&Answer::Always), 80, OFF),
            "Run it? yes, and always for `cargo test` commands"
        );
        let chained = build(
            "bash",
            &json!({}),
            Kind::Command("sleep 30; echo built"),
            Path::new("/"),
            80,
            OFF,
        )
        .unwrap();
        assert!(!chained.offers_always());
        assert_eq!(
            chained.prompt(Prompt::Asking { again: false }, 80, OFF),
            "Run it? y yes · n no › "
        );
        assert_eq!(
            chained.prompt(Prompt::Asking { again: true }, 80, OFF),
            "Run it? please press y or n · y yes · n no › "
        );
    }
}
