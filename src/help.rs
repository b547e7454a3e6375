//! What `--help` says after the flags (built-in providers, key variables,
//! the config path, exit codes), and `--generate`: shell completions and
//! the man page, from the same clap definition.

use std::io::Write;

use clap::ValueEnum;

use crate::model::spec::BUILTIN_PROVIDERS;

/// What `--generate` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Generate {
    CompleteBash,
    CompleteZsh,
    CompleteFish,
    Man,
}

/// Every variable that replaces a built-in provider's endpoint, and a
/// model id of the cloud whose ids are hardest to guess.
const ENDPOINTS: &str =
    "\nEndpoint overrides (a proxy, a gateway, a test server): OPENAI_BASE_URL \
(openai, responses), ANTHROPIC_BASE_URL, OLLAMA_HOST, GEMINI_BASE_URL (with /v1beta), \
VERTEX_BASE_URL, AWS_ENDPOINT_URL_BEDROCK_RUNTIME, AZURE_OPENAI_ENDPOINT, \
ANTHROPIC_FOUNDRY_BASE_URL.\n\
A Bedrock model is its model or inference profile id, e.g.\n\
  -m bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0\n";

/// The text after the flags in `--help`.
pub(crate) fn after_help() -> String {
    let mut text = String::from("Built-in providers (-m <provider>/<model>):\n");
    for p in BUILTIN_PROVIDERS {
        // A row says what its credentials are when more than a key.
        let line = match (p.help, p.key_env()) {
            (Some(text), _) => text.to_string(),
            (None, key) => {
                let key = key.map_or_else(|| "no key".to_string(), |k| format!("key {k}"));
                match p.endpoint_env {
                    Some(var) => format!("{key}, endpoint {var}"),
                    None => key,
                }
            }
        };
        text.push_str(&format!("  {:<11} {line}\n", p.name));
    }
    text.push_str(ENDPOINTS);
    text.push_str(
        "\nWhat runs without asking: a run given its TASK (a script, CI, --json) runs every \
bash command and file change the model asks for without asking; an interactive session \
asks first, showing the whole command or the file's diff (y yes, n no, a always). \
Change this with --approval ask|edits|auto or config `approval`; config `approval_allow` \
lists commands that never need asking (e.g. [\"cargo test\", \"git status\"]).\n\
\nConfig: $TINYAGENT_CONFIG, else $XDG_CONFIG_HOME/tinyagent/config.yaml, else \
~/.config/tinyagent/config.yaml; each -c FILE is laid over it.\n\
\nExit codes: 0 answered, 1 error or output_truncated, 2 usage or config error, \
3 step/cost/time limit, 75 every model failed on an outage, 130 interrupted.",
    );
    text
}

/// Prints what `kind` asks for about `command` (the CLI's clap command) on
/// stdout; returns the exit code. Built in memory first: a closed pipe
/// (`| head`) is not an error.
pub(crate) fn generate(kind: Generate, command: clap::Command) -> i32 {
    let bytes = render(kind, command);
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&bytes).and_then(|()| out.flush());
    0
}

/// The completion script or man page for `kind`.
pub(crate) fn render(kind: Generate, mut command: clap::Command) -> Vec<u8> {
    let mut buf = Vec::new();
    let shell = match kind {
        Generate::CompleteBash => clap_complete::Shell::Bash,
        Generate::CompleteZsh => clap_complete::Shell::Zsh,
        Generate::CompleteFish => clap_complete::Shell::Fish,
        Generate::Man => {
            // Writing to a Vec cannot fail.
            let _ = clap_mangen::Man::new(command).render(&mut buf);
            return buf;
        }
    };
    clap_complete::generate(shell, &mut command, "tinyagent", &mut buf);
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_help_names_every_provider_and_key() {
        let text = after_help();
        for p in BUILTIN_PROVIDERS {
            assert!(text.contains(&format!("  {} ", p.name)), "{}", p.name);
            if let Some(key) = p.key_env() {
                assert!(text.contains(key));
            }
        }
        assert!(text.contains("~/.config/tinyagent/config.yaml"));
    }
}
