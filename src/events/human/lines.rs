//! The text of the terminal view's lines, as pure functions: what a tool
//! call shows, plan items, the summary line with its cost per model, and
//! the hint to resume.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::events::DownModel;
use crate::exit::Status;

/// What a tool call is about, from its arguments: the command for `bash`,
/// the path for file tools, the pattern for `grep`, the task for
/// `delegate`. Empty when there is nothing short to say.
pub(crate) fn tool_subject(tool: &str, args: &Value) -> String {
    let text = |key: &str| args.get(key).and_then(Value::as_str).unwrap_or("");
    match tool {
        "bash" => first_line(text("command")),
        "read_file" | "write_file" | "edit_file" => text("path").to_string(),
        "list_files" => {
            let path = args.get("path").and_then(Value::as_str).unwrap_or(".");
            match args.get("pattern").and_then(Value::as_str) {
                Some(p) => format!("{path} {p}"),
                None => path.to_string(),
            }
        }
        "grep" => {
            let mut s = format!("/{}/", text("pattern"));
            if let Some(p) = args.get("path").and_then(Value::as_str) {
                s.push_str(&format!(" in {p}"));
            }
            if let Some(g) = args.get("glob").and_then(Value::as_str) {
                s.push_str(&format!(" ({g})"));
            }
            s
        }
        "delegate" => first_line(text("task")),
        _ => String::new(),
    }
}

/// The first line of a text, with `…` when more follows.
fn first_line(text: &str) -> String {
    let text = text.trim();
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("").trim_end();
    if lines.next().is_some() {
        format!("{first} …")
    } else {
        first.to_string()
    }
}

/// What a failed tool call's output says last: its last non-empty line,
/// after bash's `[exit code: N]` when that is the last (so a cut keeps it).
pub(crate) fn failure_note(output: &str) -> String {
    let mut lines = output
        .lines()
        .rev()
        .map(str::trim)
        .filter(|l| !l.is_empty());
    match (lines.next(), lines.next()) {
        (Some(last), Some(before)) if last.starts_with("[exit code") => {
            format!("{last} {before}")
        }
        (Some(last), _) => last.to_string(),
        _ => String::new(),
    }
}

/// The last `n` lines of a command's output that are not blank,
/// printable: colours and other escape sequences dropped, a line redrawn
/// with `\r` (a progress bar) as it was last drawn.
pub(crate) fn output_tail(output: &str, n: usize) -> Vec<String> {
    let mut lines: Vec<String> = output
        .lines()
        .rev()
        .map(|line| {
            let line = console::strip_ansi_codes(line);
            let line = line.trim_end_matches('\r');
            let shown = line.rsplit('\r').next().unwrap_or("");
            shown
                .chars()
                .map(|c| match c {
                    '\t' => ' ',
                    c if c.is_control() => '?',
                    c => c,
                })
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .filter(|line| !line.trim().is_empty())
        .take(n)
        .collect();
    lines.reverse();
    lines
}

/// `text` cut to `width` characters, ending in `…` when cut.
pub(crate) fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let keep = width.saturating_sub(1);
    let mut out: String = text.chars().take(keep).collect();
    out.push('…');
    out
}

/// The plan's items as lines, `[x] done`, `[~] in progress`, `[ ] pending`,
/// and the `done/total` count, from the `plan` tool's arguments.
pub(crate) fn plan_items(args: &Value) -> (Vec<String>, usize, usize) {
    let items = args
        .get("items")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut done = 0;
    let lines = items
        .iter()
        .map(|item| {
            let status = item.get("status").and_then(Value::as_str).unwrap_or("");
            let mark = match status {
                "done" => {
                    done += 1;
                    "[x]"
                }
                "in_progress" => "[~]",
                _ => "[ ]",
            };
            let text = item.get("text").and_then(Value::as_str).unwrap_or("");
            format!("{mark} {}", first_line(text))
        })
        .collect();
    (lines, done, items.len())
}

/// `pacing <spec>: waiting <N>s for its <requests|tokens> limit` (SPEC 17),
/// the wait in whole seconds, rounded up.
pub(crate) fn paced(
    model: &str,
    wait_seconds: f64,
    limit: &str,
    source: &str,
    rate: Option<&str>,
) -> String {
    let seconds = wait_seconds.max(0.0).ceil().max(1.0) as u64;
    match rate {
        // `pacing <spec>: waiting 4s for its learned limit of 8 requests/min` (SPEC 24)
        Some(rate) => {
            format!("pacing {model}: waiting {seconds}s for its {source} limit of {rate}")
        }
        None => format!("pacing {model}: waiting {seconds}s for its {limit} limit"),
    }
}

/// Milliseconds as `120ms`, `1.2s`, `1m12s`, `1h02m`.
pub(crate) fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        let s = ms / 1000;
        if s < 3600 {
            format!("{}m{:02}s", s / 60, s % 60)
        } else {
            format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
        }
    }
}

/// Token counts as `950`, `48.2k`, `1.2M`.
pub(crate) fn tokens(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// The facts of a `run.finished` the summary line shows.
pub(crate) struct Summary<'a> {
    pub status: Status,
    pub steps: u32,
    pub tokens: u64,
    /// The run's input tokens and the part of them read from a prompt
    /// cache, for `· N% cached`.
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub cost_usd: f64,
    pub duration_ms: u64,
    pub model_fallbacks: u32,
    pub active_model: &'a str,
    /// After an outage (exit 75): every model with its last reason.
    pub down: &'a [DownModel],
}

/// `submitted after 12 steps · 48.2k tokens · $0.1831 · 1m12s · 1 model fallback (now openai/gpt-5)`,
/// with `· 86% cached` after the tokens when some input was read from a
/// prompt cache (SPEC 25), `(a $x, b $y)` after the cost when more than one model answered,
/// and after an outage `· every model was down (<spec>: <reason>, ...)`.
pub(crate) fn summary(s: &Summary<'_>, cost_per_model: &[(String, f64)]) -> String {
    let mut cost = format!("${:.4}", s.cost_usd);
    if cost_per_model.len() > 1 {
        let parts: Vec<String> = cost_per_model
            .iter()
            .map(|(model, c)| format!("{model} ${c:.4}"))
            .collect();
        cost.push_str(&format!(" ({})", parts.join(", ")));
    }
    let cached = cached_share(s.cached_input_tokens, s.input_tokens)
        .map(|share| format!(" · {share} cached"))
        .unwrap_or_default();
    let mut line = format!(
        "{} after {} step{} · {} tokens{cached} · {cost} · {}",
        s.status,
        s.steps,
        if s.steps == 1 { "" } else { "s" },
        tokens(s.tokens),
        summary_duration(s.duration_ms),
    );
    if s.model_fallbacks > 0 {
        line.push_str(&format!(
            " · {} model fallback{} (now {})",
            s.model_fallbacks,
            if s.model_fallbacks == 1 { "" } else { "s" },
            s.active_model
        ));
    }
    if !s.down.is_empty() {
        let list: Vec<String> = s
            .down
            .iter()
            .map(|m| format!("{}: {}", m.model, m.reason))
            .collect();
        let what = if any_out_of_quota(s.down) {
            "every model was out of quota or down"
        } else {
            "every model was down"
        };
        line.push_str(&format!(" · {what} ({})", list.join(", ")));
    }
    line
}

/// The share of `input` tokens read from a cache, as `86%` (rounded down,
/// so `100%` means all of it; `<1%` for a sliver), when any was; never
/// over 100%, whatever the counts say.
pub(crate) fn cached_share(cached: u64, input: u64) -> Option<String> {
    if cached == 0 || input == 0 {
        return None;
    }
    let percent = (u128::from(cached.min(input)) * 100 / u128::from(input)) as u64;
    Some(if percent == 0 {
        "<1%".to_string()
    } else {
        format!("{percent}%")
    })
}

/// Whether a model of an outage's list had its account's quota, credit or
/// billing exhausted (reason `quota`): no wait on the provider brings it back.
pub(crate) fn any_out_of_quota(down: &[DownModel]) -> bool {
    down.iter().any(|m| is_quota(&m.reason))
}

fn is_quota(reason: &crate::reason::SwitchReason) -> bool {
    matches!(
        reason,
        crate::reason::SwitchReason::Failed(crate::reason::FailureReason::Quota)
    )
}

/// The summary's duration: seconds with one decimal below a minute.
fn summary_duration(ms: u64) -> String {
    if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        duration(ms)
    }
}

/// How `--continue` finds a run kept in the run store: from the directory
/// it was started in (`-C` when that is not the current one).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Continue {
    Here,
    In(PathBuf),
}

impl Continue {
    /// For a run recorded under `dir` (canonical), seen from the current
    /// directory.
    pub(crate) fn for_dir(dir: Option<&Path>) -> Continue {
        let here = std::env::current_dir()
            .ok()
            .and_then(|d| d.canonicalize().ok());
        match dir {
            Some(dir) if here.as_deref() != Some(dir) => Continue::In(dir.to_path_buf()),
            _ => Continue::Here,
        }
    }
}

/// How to go on with a run stopped by an interruption or a limit that has
/// a checkpoint at `checkpoint`; `None` for other ends. A run kept in the
/// run store (`store`) is named both ways: `--continue`, and `--resume`
/// of its file (which stays right when later runs start in the directory).
pub(crate) fn resume_hint(
    status: Status,
    checkpoint: &Path,
    store: Option<Continue>,
) -> Option<String> {
    let limit = " (with a higher limit: limits count the whole run)";
    let (flag, note) = match status {
        Status::Interrupted => ("", ""),
        Status::StepLimit => (" --step-limit N", limit),
        Status::CostLimit => (" --cost-limit USD", limit),
        // Steps and cost are the whole run's; a time limit starts again.
        Status::TimeLimit => (
            " --time-limit DURATION",
            " (a time limit counts from the resume)",
        ),
        Status::BudgetLimit => ("", " (once the budget's period has rolled over)"),
        _ => return None,
    };
    Some(resume_lines(checkpoint, store, flag, note))
}

/// How to go on with a run that ended with exit 75 (every model down) and
/// has a checkpoint at `checkpoint`: resume it with `--outage-wait`, or
/// with a `--fallback-model` that is up (SPEC 6). When every model was out
/// of quota (`down`), waiting on the provider does not help: the resume
/// waits for the account (credit, billing, quota), or another model.
pub(crate) fn outage_resume_hint(
    checkpoint: &Path,
    store: Option<Continue>,
    down: &[DownModel],
) -> String {
    if !down.is_empty() && down.iter().all(|m| is_quota(&m.reason)) {
        return resume_lines(
            checkpoint,
            store,
            "",
            " (once the account has quota or credit again: that waits on the account, not the provider; or --fallback-model SPEC to go on with another model)",
        );
    }
    let note = if any_out_of_quota(down) {
        " (to wait for a model to answer again: a model out of quota waits on its account, not the provider; or --fallback-model SPEC to go on with another model)"
    } else {
        " (to wait for a model to answer again; or --fallback-model SPEC to go on with another model)"
    };
    resume_lines(checkpoint, store, " --outage-wait DURATION", note)
}

/// `to resume: tinyagent --resume FILE<flag><note>`, or for a run kept in
/// the run store `--continue` first and `--resume` of its file after.
fn resume_lines(checkpoint: &Path, store: Option<Continue>, flag: &str, note: &str) -> String {
    let path = shell_word(&checkpoint.display().to_string());
    match store {
        None => format!("to resume: tinyagent --resume {path}{flag}{note}"),
        Some(how) => {
            let dir = match how {
                Continue::Here => String::new(),
                Continue::In(dir) => format!(" -C {}", shell_word(&dir.display().to_string())),
            };
            format!(
                "to resume: tinyagent{dir} --continue{flag}{note}\n       or: tinyagent --resume {path}{flag}"
            )
        }
    }
}

/// A path quoted for a POSIX shell when it needs it.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn output_tails_are_the_last_lines_made_printable() {
        let out = "one\ntwo\nthree\n\x1b[32mgreen\x1b[0m\n10%\r50%\r100%\nbell\x07\ttab\n\n\n";
        assert_eq!(output_tail(out, 4), ["three", "green", "100%", "bell? tab"]);
        assert_eq!(output_tail("only", 5), ["only"]);
        assert!(output_tail("", 5).is_empty());
        assert_eq!(
            output_tail("x\n\n[exit code: 2]", 5),
            ["x", "[exit code: 2]"]
        );
    }

    #[test]
    fn subjects() {
        assert_eq!(
            tool_subject("bash", &json!({"command": "cargo test\n"})),
            "cargo test"
        );
        assert_eq!(
            tool_subject("bash", &json!({"command": "cat <<EOF\nx\nEOF"})),
            "cat <<EOF …"
        );
        assert_eq!(
            tool_subject("edit_file", &json!({"path": "src/a.rs"})),
            "src/a.rs"
        );
        assert_eq!(
            tool_subject("grep", &json!({"pattern": "fn main", "path": "src"})),
            "/fn main/ in src"
        );
        assert_eq!(
            tool_subject("list_files", &json!({"pattern": "**/*.rs"})),
            ". **/*.rs"
        );
        assert_eq!(tool_subject("mcp__x__y", &json!({"a": 1})), "");
    }

    #[test]
    fn failure_notes() {
        assert_eq!(
            failure_note("out\nls: nope\n\n[exit code: 2]"),
            "[exit code: 2] ls: nope"
        );
        assert_eq!(failure_note("cannot read x: gone"), "cannot read x: gone");
        assert_eq!(failure_note(""), "");
    }

    #[test]
    fn cutting_counts_characters() {
        assert_eq!(cut("abcdef", 10), "abcdef");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("éééééé", 3), "éé…");
    }

    #[test]
    fn plan_lines() {
        let (lines, done, total) = plan_items(&json!({"items": [
            {"text": "read", "status": "done"},
            {"text": "fix", "status": "in_progress"},
            {"text": "test", "status": "pending"}
        ]}));
        assert_eq!(lines, ["[x] read", "[~] fix", "[ ] test"]);
        assert_eq!((done, total), (1, 3));
    }

    #[test]
    fn summary_matches_spec_example_and_adds_cost_per_model() {
        let s = Summary {
            status: Status::Submitted,
            steps: 12,
            tokens: 48_200,
            input_tokens: 46_000,
            cached_input_tokens: 0,
            cost_usd: 0.1831,
            duration_ms: 72_000,
            model_fallbacks: 1,
            active_model: "openai/gpt-5",
            down: &[],
        };
        assert_eq!(
            summary(&s, &[("openai/gpt-5".into(), 0.1831)]),
            "submitted after 12 steps · 48.2k tokens · $0.1831 · 1m12s · 1 model fallback (now openai/gpt-5)"
        );
        let cached = Summary {
            cached_input_tokens: 39_600,
            ..s
        };
        assert_eq!(
            summary(&cached, &[]),
            "submitted after 12 steps · 48.2k tokens · 86% cached · $0.1831 · 1m12s · 1 model fallback (now openai/gpt-5)"
        );
        let two = [("a/x".to_string(), 0.1), ("b/y".to_string(), 0.0831)];
        assert!(summary(&s, &two).contains("$0.1831 (a/x $0.1000, b/y $0.0831) · 1m12s"));
        let down = [
            DownModel {
                model: "a/x".into(),
                reason: crate::reason::SwitchReason::parse("http_503"),
            },
            DownModel {
                model: "b/y".into(),
                reason: crate::reason::SwitchReason::parse("quota"),
            },
        ];
        let outage = Summary {
            status: Status::Error,
            steps: 0,
            tokens: 0,
            input_tokens: 0,
            cached_input_tokens: 0,
            cost_usd: 0.0,
            duration_ms: 100,
            model_fallbacks: 0,
            active_model: "a/x",
            down: &down,
        };
        assert_eq!(
            summary(&outage, &[]),
            "error after 0 steps · 0 tokens · $0.0000 · 0.1s · every model was out of quota or down (a/x: http_503, b/y: quota)"
        );
        let outage = Summary {
            down: &down[..1],
            ..outage
        };
        assert!(summary(&outage, &[]).ends_with(" · every model was down (a/x: http_503)"));
    }

    #[test]
    fn the_cached_share_is_rounded_down_and_never_over_everything() {
        assert_eq!(cached_share(0, 100), None);
        assert_eq!(cached_share(5, 0), None);
        assert_eq!(cached_share(1, 1000), Some("<1%".into()));
        assert_eq!(cached_share(999, 1000), Some("99%".into()));
        assert_eq!(cached_share(1000, 1000), Some("100%".into()));
        assert_eq!(cached_share(u64::MAX, 7), Some("100%".into()));
        assert_eq!(cached_share(u64::MAX - 1, u64::MAX), Some("99%".into()));
    }

    #[test]
    fn an_outage_hint_gives_the_wait_and_the_fallback_as_ways_past_it() {
        assert_eq!(
            outage_resume_hint(Path::new("t.json"), None, &[]),
            "to resume: tinyagent --resume t.json --outage-wait DURATION (to wait for a model \
             to answer again; or --fallback-model SPEC to go on with another model)"
        );
        assert_eq!(
            outage_resume_hint(Path::new("/s/runs/r1.json"), Some(Continue::Here), &[]),
            "to resume: tinyagent --continue --outage-wait DURATION (to wait for a model to \
             answer again; or --fallback-model SPEC to go on with another model)\n       \
             or: tinyagent --resume /s/runs/r1.json --outage-wait DURATION"
        );
    }

    #[test]
    fn an_account_out_of_quota_is_waited_for_on_the_account() {
        let down = |reason: &str| DownModel {
            model: "a/x".into(),
            reason: crate::reason::SwitchReason::parse(reason),
        };
        assert_eq!(
            outage_resume_hint(Path::new("t.json"), None, &[down("quota")]),
            "to resume: tinyagent --resume t.json (once the account has quota or credit again: \
             that waits on the account, not the provider; or --fallback-model SPEC to go on \
             with another model)"
        );
        let mixed =
            outage_resume_hint(Path::new("t.json"), None, &[down("quota"), down("network")]);
        assert!(
            mixed.contains("--outage-wait DURATION") && mixed.contains("waits on its account"),
            "{mixed}"
        );
    }

    #[test]
    fn hints() {
        let p = Path::new("/tmp/run one.json");
        assert_eq!(
            resume_hint(Status::Interrupted, p, None).unwrap(),
            "to resume: tinyagent --resume '/tmp/run one.json'"
        );
        assert!(resume_hint(Status::StepLimit, Path::new("t.json"), None)
            .unwrap()
            .starts_with("to resume: tinyagent --resume t.json --step-limit N"));
        assert_eq!(
            resume_hint(Status::TimeLimit, Path::new("t.json"), None).unwrap(),
            "to resume: tinyagent --resume t.json --time-limit DURATION \
             (a time limit counts from the resume)"
        );
        assert!(resume_hint(Status::Submitted, p, None).is_none());
        assert!(resume_hint(Status::Error, p, Some(Continue::Here)).is_none());
        let stored = Path::new("/s/runs/r1.json");
        assert_eq!(
            resume_hint(Status::Interrupted, stored, Some(Continue::Here)).unwrap(),
            "to resume: tinyagent --continue\n       or: tinyagent --resume /s/runs/r1.json"
        );
        let elsewhere = Continue::In(PathBuf::from("/w/my project"));
        assert_eq!(
            resume_hint(Status::CostLimit, stored, Some(elsewhere)).unwrap(),
            "to resume: tinyagent -C '/w/my project' --continue --cost-limit USD \
             (with a higher limit: limits count the whole run)\n       \
             or: tinyagent --resume /s/runs/r1.json --cost-limit USD"
        );
    }
}
