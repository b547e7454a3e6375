//! Where tinyagent keeps its files, worked out in one place: the config and
//! state directories (XDG, from the environment given), and `~` expanded
//! (`shellexpand`, with the given environment's `HOME`). A leaf module: it
//! imports nothing of ours.
//!
//! The environment is a parameter, as everywhere before the first request,
//! so tests need no global state; `HOME` alone gives the home directory
//! (an unset one means none, as it always has here).

use std::borrow::Cow;
use std::path::PathBuf;

/// Reads an environment variable (the same shape as `setup::Env`).
type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// `$HOME`, unless unset or empty.
pub(crate) fn home_dir(env: Env) -> Option<PathBuf> {
    env("HOME").filter(|h| !h.is_empty()).map(PathBuf::from)
}

/// An XDG base directory: `$VAR`, else `~/<fallback>`.
fn xdg_dir(env: Env, var: &str, fallback: &str) -> Option<PathBuf> {
    match env(var).filter(|x| !x.is_empty()) {
        Some(dir) => Some(PathBuf::from(dir)),
        None => home_dir(env).map(|h| h.join(fallback)),
    }
}

/// tinyagent's config directory: `$XDG_CONFIG_HOME/tinyagent`, else
/// `~/.config/tinyagent`.
pub(crate) fn config_dir(env: Env) -> Option<PathBuf> {
    xdg_dir(env, "XDG_CONFIG_HOME", ".config").map(|d| d.join("tinyagent"))
}

/// tinyagent's state directory (run store, health record, history):
/// `$XDG_STATE_HOME/tinyagent`, else `~/.local/state/tinyagent`.
pub(crate) fn state_dir(env: Env) -> Option<PathBuf> {
    xdg_dir(env, "XDG_STATE_HOME", ".local/state").map(|d| d.join("tinyagent"))
}

/// `path` with a leading `~` or `~/` replaced by the home directory;
/// unchanged when it has none, or when there is no home directory.
pub(crate) fn expand_tilde(path: &str, env: Env) -> PathBuf {
    let home = || home_dir(env).map(|h| h.to_string_lossy().into_owned());
    match shellexpand::tilde_with_context(path, home) {
        Cow::Borrowed(same) => PathBuf::from(same),
        Cow::Owned(expanded) => PathBuf::from(expanded),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn xdg_variables_win_over_home() {
        let both = env(&[
            ("HOME", "/h"),
            ("XDG_STATE_HOME", "/s"),
            ("XDG_CONFIG_HOME", "/c"),
        ]);
        assert_eq!(state_dir(&both), Some(PathBuf::from("/s/tinyagent")));
        assert_eq!(config_dir(&both), Some(PathBuf::from("/c/tinyagent")));
        let home = env(&[("HOME", "/h"), ("XDG_STATE_HOME", "")]);
        assert_eq!(
            state_dir(&home),
            Some(PathBuf::from("/h/.local/state/tinyagent"))
        );
        assert_eq!(
            config_dir(&home),
            Some(PathBuf::from("/h/.config/tinyagent"))
        );
        assert_eq!(state_dir(&env(&[])), None);
        assert_eq!(config_dir(&env(&[("HOME", "")])), None);
    }

    #[test]
    fn tilde_is_the_home_directory() {
        let e = env(&[("HOME", "/h")]);
        assert_eq!(expand_tilde("~/x/h.db", &e), PathBuf::from("/h/x/h.db"));
        assert_eq!(expand_tilde("~", &e), PathBuf::from("/h"));
        assert_eq!(expand_tilde("/abs/~", &e), PathBuf::from("/abs/~"));
        assert_eq!(expand_tilde("~other/x", &e), PathBuf::from("~other/x"));
        assert_eq!(expand_tilde("~/x", &env(&[])), PathBuf::from("~/x"));
    }
}
