//! `--generate`: shell completions and the man page; `--help`'s closing
//! text (its golden file is in `core`).

use crate::support::TestEnv;

fn generate(kind: &str) -> String {
    let out = TestEnv::new()
        .cmd()
        .args(["--generate", kind])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{kind}");
    assert!(out.stderr.is_empty(), "{kind}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn completions_for_bash_zsh_and_fish_know_the_flags() {
    let bash = generate("complete-bash");
    assert!(
        bash.contains("_tinyagent()") && bash.contains("--instructions"),
        "{bash}"
    );
    let env = TestEnv::new();
    let file = env.write("tinyagent.bash", &bash);
    let check = std::process::Command::new("bash")
        .arg("-n")
        .arg(&file)
        .status()
        .unwrap();
    assert!(check.success(), "the bash completion does not parse");
    let zsh = generate("complete-zsh");
    assert!(zsh.starts_with("#compdef tinyagent") && zsh.contains("--fallback-model"));
    let fish = generate("complete-fish");
    assert!(
        fish.contains("complete -c tinyagent -s m -l model"),
        "{fish}"
    );
    assert!(
        fish.contains("complete-bash"),
        "--generate's values complete too"
    );
}

#[test]
fn the_man_page_is_roff_with_every_flag() {
    let man = generate("man");
    assert!(man.contains(".TH tinyagent 1"), "{man}");
    for flag in [
        "fallback\\-model",
        "\\-p\\fR, \\fB\\-\\-prompt",
        "instructions",
        "generate",
        "step\\-limit",
    ] {
        assert!(man.contains(flag), "{flag}");
    }
    assert!(
        man.contains("OPENAI_API_KEY"),
        "after_help reaches the man page"
    );
}

#[test]
fn an_unknown_kind_is_a_usage_error() {
    let out = TestEnv::new()
        .cmd()
        .args(["--generate", "complete-tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .starts_with("tinyagent: error: invalid value 'complete-tcsh'"));
}

#[test]
fn help_lists_providers_key_variables_and_the_config_path() {
    let out = TestEnv::new().cmd().arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for word in [
        "openai",
        "responses",
        "anthropic",
        "ollama",
        "openrouter",
        "script/",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "OPENROUTER_API_KEY",
        "OLLAMA_HOST",
        "~/.config/tinyagent/config.yaml",
        "$TINYAGENT_CONFIG",
    ] {
        assert!(help.contains(word), "{word} in --help");
    }
}
