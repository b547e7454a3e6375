//! "Did you mean": the closest valid name to a misspelt one, the whole spec
//! for a model named without its provider, the flag a user half
//! remembered, and the command line with a task of several words quoted
//! (SPEC sections 1 and 21).

/// The candidate closest to `word`, when it is close enough to be a typo.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(word, c), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// The whole spec a model name given without a provider most likely
/// means: OpenAI's, Anthropic's and Google's own names on their own
/// providers (Gemini on the built-in `gemini/`), open-weight families and
/// Ollama tags (`qwen3:8b`) on Ollama. `None` when nothing fits.
pub(crate) fn full_spec(name: &str) -> Option<String> {
    let lower = name.to_ascii_lowercase();
    let starts = |prefixes: &[&str]| prefixes.iter().any(|p| lower.starts_with(p));
    // `o3`, `o4-mini`, `o1-preview`: OpenAI's reasoning models.
    let o_series = lower.strip_prefix('o').is_some_and(|rest| {
        let digits = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        digits.len() < rest.len() && (digits.is_empty() || digits.starts_with('-'))
    });
    let open_weights = [
        "llama",
        "qwen",
        "mistral",
        "mixtral",
        "gemma",
        "deepseek",
        "phi",
        "codellama",
        "gpt-oss",
        "starcoder",
        "granite",
        "devstral",
    ];
    if starts(&open_weights) || lower.contains(':') {
        Some(format!("ollama/{name}"))
    } else if starts(&["gpt-", "chatgpt-", "codex-"]) || o_series {
        Some(format!("openai/{name}"))
    } else if starts(&["claude-"]) {
        Some(format!("anthropic/{name}"))
    } else if starts(&["gemini-"]) {
        Some(format!("gemini/{name}"))
    } else {
        None
    }
}

/// An unknown provider's error: the closest known one, then all of them.
pub(crate) fn unknown_provider<'a>(
    provider: &str,
    known: impl IntoIterator<Item = &'a str> + Clone,
) -> String {
    let hint = closest(provider, known.clone())
        .map(|s| format!(" (did you mean '{s}'?)"))
        .unwrap_or_default();
    let list: Vec<&str> = known.into_iter().collect();
    format!(
        "unknown provider '{provider}'{hint}; known providers: {}",
        list.join(", ")
    )
}

/// Flags users of other agents reach for, and ours that do the job.
const FLAG_ALIASES: &[(&str, &str)] = &[
    ("--fallback", "--fallback-model SPEC"),
    ("--fallbacks", "--fallback-model SPEC"),
    (
        "--fallback-models",
        "--fallback-model SPEC (once per model)",
    ),
    ("--max-steps", "--step-limit N"),
    ("--max-turns", "--step-limit N"),
    ("--max-cost", "--cost-limit USD"),
    ("--budget", "--cost-limit USD"),
    ("--timeout", "--time-limit DURATION"),
    ("--dir", "-C DIR"),
    // Claude Code's and Codex's ways of running without asking.
    ("--yolo", "--approval auto"),
    ("--dangerously-skip-permissions", "--approval auto"),
    (
        "--dangerously-bypass-approvals-and-sandbox",
        "--approval auto",
    ),
    ("--full-auto", "--approval auto"),
];

/// The flag to use instead of an unknown one (given with or without
/// `=value`), when it is one users of other agents reach for.
pub(crate) fn flag_instead(unknown: &str) -> Option<&'static str> {
    let name = unknown.split_once('=').map_or(unknown, |(name, _)| name);
    FLAG_ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map(|(_, ours)| *ours)
}

/// `args` (without the program name) with the task that was split into
/// several words quoted back into one, when `extra` (the first word clap
/// found no place for) follows the task; `None` when the words cannot be
/// told apart from flags.
pub(crate) fn quoted_task(args: &[String], extra: &str) -> Option<Vec<String>> {
    let at = args.iter().position(|a| a == extra)?;
    let start = at.checked_sub(1)?;
    if args[start].starts_with('-') {
        return None;
    }
    let end = args[at..]
        .iter()
        .position(|a| a.starts_with('-'))
        .map_or(args.len(), |n| at + n);
    let task = args[start..end].join(" ");
    let mut fixed: Vec<String> = args[..start].iter().map(|a| shell_word(a)).collect();
    fixed.push(shell_word(&task));
    fixed.extend(args[end..].iter().map(|a| shell_word(a)));
    Some(fixed)
}

/// `text` as one POSIX shell word: as is when it is plain, else in double
/// quotes when nothing in it is special there, else in single quotes.
pub(crate) fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:@,%".contains(c));
    if plain {
        text.to_string()
    } else if !text.contains(['"', '\\', '$', '`', '!']) {
        format!("\"{text}\"")
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_word_and_nonsense_finds_nothing() {
        let words = ["openai", "anthropic", "ollama", "openrouter"];
        assert_eq!(closest("opneai", words), Some("openai"));
        assert_eq!(closest("antropic", words), Some("anthropic"));
        assert_eq!(closest("zzz", words), None);
        assert_eq!(
            closest("modle", ["model", "fallback_models"]),
            Some("model")
        );
    }

    #[test]
    fn a_model_without_its_provider_finds_the_provider_that_serves_it() {
        for (name, spec) in [
            ("gpt-5", "openai/gpt-5"),
            ("gpt-5-mini", "openai/gpt-5-mini"),
            ("o3", "openai/o3"),
            ("o4-mini", "openai/o4-mini"),
            ("claude-sonnet-4-5", "anthropic/claude-sonnet-4-5"),
            ("gemini-2.5-pro", "gemini/gemini-2.5-pro"),
            ("qwen3-coder", "ollama/qwen3-coder"),
            ("llama3.2:3b", "ollama/llama3.2:3b"),
            ("gpt-oss:20b", "ollama/gpt-oss:20b"),
        ] {
            assert_eq!(full_spec(name).as_deref(), Some(spec), "{name}");
        }
        for name in ["mymodel", "o", "ox", "omni", "sonnet"] {
            assert_eq!(full_spec(name), None, "{name}");
        }
    }

    #[test]
    fn an_unknown_provider_is_told_the_closest_and_every_known_one() {
        let known = ["openai", "anthropic", "gateway"];
        assert_eq!(
            unknown_provider("opneai", known),
            "unknown provider 'opneai' (did you mean 'openai'?); known providers: openai, anthropic, gateway"
        );
        assert_eq!(
            unknown_provider("zzz", known),
            "unknown provider 'zzz'; known providers: openai, anthropic, gateway"
        );
    }

    #[test]
    fn half_remembered_flags_find_ours() {
        assert_eq!(flag_instead("--fallback"), Some("--fallback-model SPEC"));
        assert_eq!(
            flag_instead("--fallback=openai/gpt-5"),
            Some("--fallback-model SPEC")
        );
        assert_eq!(flag_instead("--max-turns"), Some("--step-limit N"));
        assert_eq!(flag_instead("--fallback-model"), None);
        assert_eq!(flag_instead("--nonsense"), None);
    }

    #[test]
    fn a_task_in_several_words_is_quoted_back_into_one() {
        let args = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            quoted_task(&args("-m openai/gpt-5 fix the bug"), "the").unwrap(),
            ["-m", "openai/gpt-5", "\"fix the bug\""]
        );
        assert_eq!(
            quoted_task(&args("fix the bug -q"), "the").unwrap(),
            ["\"fix the bug\"", "-q"]
        );
        assert_eq!(
            quoted_task(&args("don't stop"), "stop").unwrap(),
            ["\"don't stop\""]
        );
        assert_eq!(quoted_task(&args("-q word"), "word"), None);
        assert_eq!(shell_word("say \"hi\""), r#"'say "hi"'"#);
        assert_eq!(shell_word("run.json"), "run.json");
    }
}
