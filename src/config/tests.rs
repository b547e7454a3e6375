//! Tests of `config`.

#[test]
fn deep_nesting_and_huge_files_are_refused_before_parsing() {
    let deep = format!("model: {}x{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let err = super::read::check_shape(&deep).unwrap_err().to_string();
    assert!(err.contains("nesting deeper than 64"), "{err}");
    assert!(super::read::check_shape(&"#".repeat(5 << 20)).is_err());
    // Brackets in quotes and comments do not count; nor does a quote
    // inside a plain scalar open one.
    let fine = format!(
        "a: \"{0}\"\nb: '{0}'\n# {0}\nc: don't [x, {{y: [z]}}]\nd: \"q\\\"{0}\"\n",
        "[".repeat(500)
    );
    assert_eq!(super::read::check_shape(&fine), Ok(()));
    let sneaky = format!("a: x'\nb: {}\n", "[".repeat(100));
    assert!(super::read::check_shape(&sneaky).is_err());
}

use super::*;

fn yaml(text: &str) -> Value {
    serde_yaml::from_str(text).unwrap()
}

#[test]
fn unknown_keys_are_named_with_their_path() {
    let err = check(&yaml("retry: {attempts: 2, tries: 3}"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("retry"), "{err}");
    assert!(err.contains("unknown field `tries`"), "{err}");
    let err = check(&yaml("modle: x")).unwrap_err().to_string();
    assert_eq!(err, "modle: unknown field `modle` (did you mean `model`?)");
    let err = check(&yaml("retry: {atempts: 2}")).unwrap_err().to_string();
    assert!(
        err.ends_with("unknown field `atempts` (did you mean `attempts`?)"),
        "{err}"
    );
    let err = check(&yaml("approval: edtis")).unwrap_err().to_string();
    assert_eq!(
            err,
            "approval: unknown variant `edtis`, expected one of `ask`, `edits`, `auto` (did you mean `edits`?)"
        );
    let err = check(&yaml("zzzzz: 1")).unwrap_err().to_string();
    assert_eq!(err, "zzzzz: unknown field `zzzzz`");
}

#[test]
fn an_unknown_api_is_named_with_its_key() {
    let err = check(&yaml(
        "providers: {local: {api: chat, endpoint: 'http://x'}}",
    ))
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("providers.local.api: unknown API 'chat'"),
        "{err}"
    );
    assert!(
        err.contains(
            "openai, responses, anthropic, ollama, bedrock, gemini, vertex, azure or foundry"
        ),
        "{err}"
    );
}

#[test]
fn layers_merge_key_by_key() {
    let mut base = yaml("model: a/b\nretry: {attempts: 2, backoff: 1s}\nfallback_models: [x/y]");
    overlay(
        &mut base,
        yaml("retry: {attempts: 3}\nfallback_models: [z/w]"),
    );
    let c = check(&base).unwrap();
    assert_eq!(c.model.as_deref(), Some("a/b"));
    assert_eq!(c.retry.attempts, Some(3));
    assert_eq!(c.retry.backoff, Some(std::time::Duration::from_secs(1)));
    assert_eq!(
        c.fallback_models.unwrap(),
        [FallbackEntry::from("z/w".to_string())]
    );
}

#[test]
fn user_config_path_rules() {
    use crate::setup::fixed_env as env;
    assert_eq!(
        user_config_path(&env(&[("TINYAGENT_CONFIG", "/c.yaml"), ("HOME", "/h")])),
        Some(PathBuf::from("/c.yaml"))
    );
    assert_eq!(
        user_config_path(&env(&[("XDG_CONFIG_HOME", "/x"), ("HOME", "/h")])),
        Some(PathBuf::from("/x/tinyagent/config.yaml"))
    );
    assert_eq!(
        user_config_path(&env(&[("HOME", "/h")])),
        Some(PathBuf::from("/h/.config/tinyagent/config.yaml"))
    );
}

#[test]
fn every_problem_in_a_file_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        read_layer(&path, true).unwrap_err().to_string()
    };
    let err = at("tab.yaml", "model: script/x\nretry:\n\tattempts: 3\n");
    assert!(err.contains("tab.yaml: "), "{err}");
    assert!(err.contains("at line 3 column 1"), "{err}");
    assert!(err.ends_with("(a tab: YAML indents with spaces)"), "{err}");
    let err = at("zero.yaml", "model: script/x\nretry:\n  attempts: 0\n");
    assert!(
        err.ends_with(
            "retry.attempts: must be a whole number of at least 1, got 0 at line 3 column 3"
        ),
        "{err}"
    );
    let err = at("key.yaml", "model: script/x\n\nretry: {atempts: 2}\n");
    assert!(
        err.ends_with("(did you mean `attempts`?) at line 3 column 9"),
        "{err}"
    );
    let err = at("deep.yaml", &format!("a: 1\nb: {}\n", "[".repeat(70)));
    assert!(
        err.ends_with("nesting deeper than 64 levels at line 2 column 68"),
        "{err}"
    );
}
