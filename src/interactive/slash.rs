//! Slash commands at a session's prompt (SPEC 20): `/help`, `/model`,
//! `/cost`, `/clear`, `/compact`, `/exit`. None is ever sent to a model; an unknown
//! one is answered with the list.

use std::path::PathBuf;

use crate::cli::Cli;
use crate::health::{self, Millis, Record};
use crate::resume::Checkpointed;
use crate::settings::{self, process_env, Settings};
use crate::trajectory::Trajectory;

/// A slash command typed at the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Slash {
    Help,
    /// `/model`, or `/model SPEC` (the rest of the line) to switch to SPEC.
    Model(Option<String>),
    Cost,
    Clear,
    Compact,
    Exit,
    /// Not one of ours: the name typed.
    Unknown(String),
}

/// The commands, for `/help` and an unknown one.
pub(crate) const HELP: &str = "commands:
  /help    this list
  /model   the model chain, the active model and each model's health record
  /model <provider>/<model>
           switch the session to that model, from the next task on (a member
           of the chain moves first, the others keep their order behind it)
  /cost    this session's tokens and cost, per model
  /clear   start a new conversation (the next task starts from scratch)
  /compact compact the conversation now: older turns become a summary
  /exit    end the session (as exit, Ctrl-D or Ctrl-C twice do)";

/// The slash command `line` is, if it is one: its first word is `/` and a
/// name (`/usr/bin is slow` is a task).
pub(crate) fn parse(line: &str) -> Option<Slash> {
    let word = line.split_whitespace().next()?;
    let name = word.strip_prefix('/')?;
    let mut chars = name.chars();
    let named = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !named {
        return None;
    }
    let rest = line.trim_start()[word.len()..].trim();
    Some(match name {
        "help" => Slash::Help,
        "model" => Slash::Model((!rest.is_empty()).then(|| rest.to_string())),
        "cost" => Slash::Cost,
        "clear" => Slash::Clear,
        "compact" => Slash::Compact,
        "exit" => Slash::Exit,
        _ => Slash::Unknown(word.to_string()),
    })
}

/// `/model`: the chain `cli` runs with (a conversation's primary is its
/// checkpoint's), the model that answered last, and what the shared
/// health record says about each member.
pub(crate) fn model_report(cli: &Cli, conversation: Option<&Trajectory>) -> String {
    let resumed = conversation.map(|doc| Checkpointed {
        path: PathBuf::new(),
        doc: doc.clone(),
        started: Vec::new(),
    });
    let settings = settings::load_config(&cli.config, &process_env).and_then(|config| {
        Settings::from_parts(cli, config, "-".into(), &process_env, resumed.as_ref())
    });
    let settings = match settings {
        Ok(settings) => settings,
        Err(e) => return format!("cannot resolve the models: {e}"),
    };
    let chain: Vec<String> = settings.chain().map(|m| m.spec.to_string()).collect();
    let active = conversation
        .map(|doc| doc.active_model.clone())
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| chain[0].clone());
    let mut out = format!("chain:  {}\nactive: {active}", chain.join(" → "));
    if conversation.is_none() {
        out.push_str(" (no run yet)");
    }
    let models: Vec<_> = settings
        .chain()
        .map(|m| (m.spec.to_string(), m.pace_key()))
        .collect();
    let limits =
        settings::listed_limits(&settings.rate_limits, &models, settings.health_db.as_ref());
    for ((spec, _), limits) in models.iter().zip(limits) {
        for l in limits {
            // Each member's rate limits and their source (SPEC 24).
            out.push_str(&format!("\nlimit:  {spec}  {}  {}", l.limit, l.source));
        }
    }
    let Some(location) = &settings.health_db else {
        out.push_str("\nhealth record: off (config health_db)");
        return out;
    };
    let keys: Vec<_> = settings.chain().map(|m| m.health_key()).collect();
    match location.read_records(&keys) {
        Ok(records) => {
            out.push_str(&format!("\nhealth record ({}):", location.label()));
            let width = chain.iter().map(String::len).max().unwrap_or(0);
            let now = health::now_millis();
            for (spec, record) in chain.iter().zip(&records) {
                out.push_str(&format!("\n  {spec:<width$}  {}", describe(record, now)));
            }
        }
        Err(e) => out.push_str(&format!(
            "\nhealth record ({}): cannot be read: {e}",
            location.label()
        )),
    }
    out
}

/// The chain `cli` and the conversation run with: each member's spec and
/// reply budget, the primary first; checked as `-m` is (the spec, its
/// provider, its key, the chain it makes), or why not.
pub(crate) fn chain_of(
    cli: &Cli,
    conversation: Option<&Trajectory>,
) -> Result<Vec<(String, Option<u32>)>, settings::SetupError> {
    let resumed = conversation.map(|doc| Checkpointed {
        path: PathBuf::new(),
        doc: doc.clone(),
        started: Vec::new(),
    });
    let config = settings::load_config(&cli.config, &process_env)?;
    let settings = Settings::from_parts(cli, config, "-".into(), &process_env, resumed.as_ref())?;
    Ok(settings
        .chain()
        .map(|m| (m.spec.to_string(), m.reply_budget))
        .collect())
}

/// `chain` with `spec` moved first and the others in their order behind
/// it; `None` when `spec` is not a member.
pub(crate) fn lead_with(
    chain: &[(String, Option<u32>)],
    spec: &str,
) -> Option<Vec<(String, Option<u32>)>> {
    let at = chain.iter().position(|(member, _)| member == spec)?;
    let mut reordered = chain.to_vec();
    let lead = reordered.remove(at);
    reordered.insert(0, lead);
    Some(reordered)
}

/// One member's record in words.
fn describe(record: &Record, now: Millis) -> String {
    let ago = |at: Millis| format!("{} ago", span(now.saturating_sub(at)));
    let mut parts = Vec::new();
    match record.cooling_until {
        Some(until) if until > now => {
            parts.push(format!("cooling down, {} left", span(until - now)))
        }
        Some(_) if record.leased_by_other(0, now) => {
            parts.push("cooldown over; another run is probing it".into())
        }
        Some(_) => parts.push("cooldown over; the next request probes it".into()),
        None => {}
    }
    match record.last_success_at {
        Some(at) => parts.push(format!("last success {}", ago(at))),
        None if parts.is_empty() => parts.push("no record yet".into()),
        None => {}
    }
    if parts.len() == 1 && record.cooling_until.is_none() && record.last_success_at.is_some() {
        parts.insert(0, "healthy".into());
    }
    parts.join(", ")
}

/// Milliseconds as `45s`, `4m12s`, `2h05m`.
fn span(ms: Millis) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Lease;

    #[test]
    fn slash_commands_are_a_slash_and_a_name() {
        assert_eq!(parse("/help"), Some(Slash::Help));
        assert_eq!(parse("  /model  "), Some(Slash::Model(None)));
        assert_eq!(parse("/cost"), Some(Slash::Cost));
        assert_eq!(parse("/clear"), Some(Slash::Clear));
        assert_eq!(parse("/compact"), Some(Slash::Compact));
        assert_eq!(parse("/exit"), Some(Slash::Exit));
        assert_eq!(parse("/nope"), Some(Slash::Unknown("/nope".into())));
        assert_eq!(parse("/Help"), Some(Slash::Unknown("/Help".into())));
        assert_eq!(
            parse(" /model  openai/gpt-5 "),
            Some(Slash::Model(Some("openai/gpt-5".into())))
        );
        for task in [
            "fix /usr/bin",
            "/usr/bin is slow",
            "/",
            "/ help",
            "help",
            "/1x",
            "",
        ] {
            assert_eq!(parse(task), None, "{task}");
        }
    }

    #[test]
    fn a_member_moves_first_and_the_others_keep_their_order() {
        let chain: Vec<(String, Option<u32>)> = vec![
            ("a/1".into(), None),
            ("b/2".into(), Some(8000)),
            ("c/3".into(), None),
        ];
        let specs = |c: Vec<(String, Option<u32>)>| c.into_iter().map(|m| m.0).collect::<Vec<_>>();
        assert_eq!(
            specs(lead_with(&chain, "b/2").unwrap()),
            ["b/2", "a/1", "c/3"]
        );
        assert_eq!(
            specs(lead_with(&chain, "c/3").unwrap()),
            ["c/3", "a/1", "b/2"]
        );
        assert_eq!(
            specs(lead_with(&chain, "a/1").unwrap()),
            ["a/1", "b/2", "c/3"]
        );
        assert_eq!(lead_with(&chain, "b/2").unwrap()[0].1, Some(8000));
        assert_eq!(lead_with(&chain, "d/4"), None);
    }

    #[test]
    fn records_in_words() {
        let now = 10_000_000;
        let record = |cooling_until, last_success_at, lease| Record {
            cooling_until,
            last_success_at,
            lease,
        };
        assert_eq!(describe(&record(None, None, None), now), "no record yet");
        assert_eq!(
            describe(&record(None, Some(now - 12_000), None), now),
            "healthy, last success 12s ago"
        );
        assert_eq!(
            describe(
                &record(Some(now + 252_000), Some(now - 3_600_000), None),
                now
            ),
            "cooling down, 4m12s left, last success 1h00m ago"
        );
        assert_eq!(
            describe(&record(Some(now - 1), None, None), now),
            "cooldown over; the next request probes it"
        );
        let lease = Lease {
            holder: 7,
            until: now + 5000,
        };
        assert_eq!(
            describe(&record(Some(now - 1), None, Some(lease)), now),
            "cooldown over; another run is probing it"
        );
    }
}
